"""The awkward-order suite: stream orders that real agent stacks got wrong, for every adapter.

A scenario is a list of steps written without any provider in mind (open a call, send a
fragment, lose one, end the call, end the response, repeat an earlier delivery, cancel the turn,
start a new turn, hold the validator). A ``Renderer`` turns each step into the portable ingress
events an adapter would produce from its provider's wire format; this module's
``PortableRenderer`` writes them directly, and each adapter brings a renderer that goes through
its own wire format and parser. ``run_scenario`` feeds the steps through a runtime and checks,
after every step:

- no executor input exists before validation: every call the dispatch queue offers is
  validated, and a claim of any call that is not is refused by its actor;
- an old key cannot affect a newer turn: a dispatch names the turn its call was opened in, and
  only calls of the conversation's latest turn are ever dispatched;

and at the end, separately, what the ledger and the status projection show for every call, which
calls an executor received (exactly once), and that a replay of the log gives the same digest.
A variant restarts the runtime in the middle of the scenario: the open streams are recorded as
lost and resumable before the restart and resumed after it, and the outcome must be the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Protocol

import trio
from attrs import define, field, frozen

from ...actors import ToolDeclaration, ValidationRequested, ValidationResult
from ...events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    Event,
    Phase,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    StreamLost,
    StreamResumed,
    TerminalRef,
    TurnRef,
)
from ...projections import Projections, StatusCue
from ...runtime import Dispatch, Runtime, open_runtime

TENANT = "acme"
CONVERSATION = "conv-1"
PRINCIPAL = "user:alice"


# --- steps -----------------------------------------------------------------------------------


@frozen
class Open:
    """The provider opens a call of a tool in the current turn's response."""

    call: str
    tool: str
    response: str = "resp_1"


@frozen
class Fragment:
    """A fragment of a call's arguments; ``lost`` ones are numbered but never delivered."""

    call: str
    data: bytes
    lost: bool = False


@frozen
class End:
    """The call's own end event (with the provider's final arguments when ``final``)."""

    call: str
    final: bytes | None = None


@frozen
class EndResponse:
    """The provider response ends."""

    response: str = "resp_1"
    reason: ResponseEndReason = ResponseEndReason.COMPLETED


@frozen
class Repeat:
    """Deliver again exactly what step ``index`` delivered (a duplicate or a replay)."""

    index: int


@frozen
class Late:
    """Deliver now what the ``lost`` fragment of step ``index`` would have delivered."""

    index: int


@frozen
class CancelTurn:
    """The person cancels the current turn."""


@frozen
class NewTurn:
    """The person starts a new turn of the conversation, offering these tools."""

    turn: str
    tools: tuple[str, ...] | None = None


@frozen
class HoldValidation:
    """From now on the next validation waits until ``ReleaseValidation``."""


@frozen
class ReleaseValidation:
    """The held validation answers (it first waits until it has started)."""


Step = Open | Fragment | End | EndResponse | Repeat | Late | CancelTurn | NewTurn
Control = HoldValidation | ReleaseValidation


# --- rendering steps into ingress events -----------------------------------------------------


@define
class Stream:
    """What a renderer knows of the scenario so far: the turn, the calls and their numbers."""

    turn: TurnRef
    keys: dict[str, CallKey] = field(factory=dict)
    """Call label to key, for renderers that open a call at another step than its ``Open``."""
    sequences: dict[str, int] = field(factory=dict)
    offsets: dict[str, int] = field(factory=dict)
    delivered: dict[int, list[Event]] = field(factory=dict)
    withheld: dict[int, list[Event]] = field(factory=dict)
    open_responses: dict[ResponseRef, None] = field(factory=dict)


class Renderer(Protocol):
    """Turns one provider-neutral step into the ingress events an adapter would produce."""

    def render(self, step: Open | Fragment | End | EndResponse, stream: Stream) -> list[Event]: ...


class PortableRenderer:
    """Writes inert's portable ingress events directly: the adapter-less baseline."""

    def render(self, step: Open | Fragment | End | EndResponse, stream: Stream) -> list[Event]:
        if isinstance(step, EndResponse):
            response = ResponseRef(
                tenant=stream.turn.tenant,
                conversation=stream.turn.conversation,
                turn=stream.turn.turn,
                response=step.response,
            )
            return [
                ResponseEnded(
                    response=response, reason=step.reason, terminal=TerminalRef(digest="end")
                )
            ]
        if isinstance(step, Open):
            key = CallKey(
                tenant=stream.turn.tenant,
                conversation=stream.turn.conversation,
                turn=stream.turn.turn,
                response=step.response,
                item=f"item_{step.call}",
                call=f"call_{step.call}",
            )
            stream.keys[step.call] = key
            stream.sequences[step.call] = 0
            stream.offsets[step.call] = 0
            return [CallOpened(key=key, tool=step.tool, sequence=0)]
        key = stream.keys[step.call]
        sequence = stream.sequences[step.call] = stream.sequences[step.call] + 1
        if isinstance(step, Fragment):
            offset = stream.offsets[step.call]
            stream.offsets[step.call] = offset + len(step.data)
            return [
                ArgumentsAppended(
                    key=key,
                    data=step.data,
                    offset=offset,
                    first_sequence=sequence,
                    last_sequence=sequence,
                )
            ]
        return [
            CallEnded(key=key, terminal=TerminalRef(sequence=sequence), final_arguments=step.final)
        ]


# --- scenarios -------------------------------------------------------------------------------


@frozen(kw_only=True)
class Expected:
    """What a call must end as: state, reason, status cue, and whether an executor ran it.

    ``state="absent"``: the call never reached inert (its protocol could not open it), so it
    has no ledger row and no status at all.
    """

    state: str
    reason: str | None = None
    cue: StatusCue | None
    executed: bool = False
    arguments: dict[str, object] | None = None


@frozen(kw_only=True)
class Scenario:
    name: str
    steps: tuple[Step | Control, ...]
    expected: dict[str, Expected]
    restart_after: int
    """The index of the step after which the restart variant restarts the runtime."""
    tools: tuple[str, ...] = ("get_weather", "send_email")


WEATHER = b'{"city": "Paris", "unit": "celsius"}'
EMAIL = b'{"to": "bob@example.com", "body": "hi"}'


def _split(data: bytes, parts: int) -> list[bytes]:
    size = -(-len(data) // parts)
    return [data[index : index + size] for index in range(0, len(data), size)]


def _fragments(call: str, data: bytes, parts: int = 3) -> list[Fragment]:
    return [Fragment(call, piece) for piece in _split(data, parts)]


def _done(data: bytes) -> Expected:
    return Expected(
        state="dispatched", cue=StatusCue.DONE, executed=True, arguments=json.loads(data)
    )


def _cancelled(reason: str) -> Expected:
    return Expected(state="cancelled", reason=reason, cue=StatusCue.CANCELLED)


def _failed(reason: str) -> Expected:
    return Expected(state="failed", reason=reason, cue=StatusCue.FAILED)


a_parts = _split(WEATHER, 3)
b_parts = _split(EMAIL, 3)

SCENARIOS: list[Scenario] = [
    Scenario(
        name="two calls interleaved",
        steps=(
            Open("a", "get_weather"),
            Open("b", "send_email"),
            Fragment("a", a_parts[0]),
            Fragment("b", b_parts[0]),
            Fragment("a", a_parts[1]),
            Fragment("b", b_parts[1]),
            Fragment("b", b_parts[2]),
            Fragment("a", a_parts[2]),
            End("b"),
            End("a"),
            EndResponse(),
        ),
        expected={"a": _done(WEATHER), "b": _done(EMAIL)},
        restart_after=5,
    ),
    Scenario(
        name="duplicate deltas",
        steps=(
            Open("a", "get_weather"),
            Fragment("a", a_parts[0]),
            Repeat(1),
            Fragment("a", a_parts[1]),
            Repeat(3),
            Repeat(1),
            Fragment("a", a_parts[2]),
            End("a", final=WEATHER),
            EndResponse(),
        ),
        expected={"a": _done(WEATHER)},
        restart_after=4,
    ),
    Scenario(
        name="terminal before a missing fragment",
        steps=(
            Open("a", "get_weather"),
            Fragment("a", a_parts[0]),
            Fragment("a", a_parts[1], lost=True),
            Fragment("a", a_parts[2]),
            End("a"),
            Late(2),
            EndResponse(),
        ),
        expected={"a": _failed("sequence_gap")},
        restart_after=3,
    ),
    Scenario(
        name="malformed JSON",
        steps=(
            Open("a", "get_weather"),
            Open("b", "get_weather"),
            Fragment("a", b'{"city": "Paris", '),
            Fragment("b", b'{"city": "Oslo", "city": "Rome"}'),
            Fragment("a", b'"unit": NaN}'),
            End("a"),
            End("b"),
            EndResponse(),
        ),
        expected={"a": _failed("malformed_arguments"), "b": _failed("malformed_arguments")},
        restart_after=3,
    ),
    Scenario(
        name="cancellation before terminal",
        steps=(
            Open("a", "get_weather"),
            Fragment("a", a_parts[0]),
            Fragment("a", a_parts[1]),
            CancelTurn(),
            Fragment("a", a_parts[2]),
            End("a"),
            EndResponse(),
        ),
        expected={"a": _cancelled("turn_cancelled")},
        restart_after=2,
    ),
    Scenario(
        name="cancellation while the terminal is being validated",
        steps=(
            Open("a", "get_weather"),
            *_fragments("a", WEATHER),
            HoldValidation(),
            End("a"),
            EndResponse(),
            CancelTurn(),
            ReleaseValidation(),
        ),
        expected={"a": _cancelled("turn_cancelled")},
        restart_after=4,
    ),
    Scenario(
        name="reconnection replay of a terminal event",
        steps=(
            Open("a", "get_weather"),
            *_fragments("a", WEATHER),
            End("a"),
            EndResponse(),
            Repeat(0),
            Repeat(1),
            Repeat(4),
            Repeat(5),
        ),
        expected={"a": _done(WEATHER)},
        restart_after=5,
    ),
    Scenario(
        name="a tool renamed mid-release",
        steps=(
            Open("a", "get_weather"),
            Open("b", "weather_now"),
            *_fragments("a", WEATHER, 2),
            *_fragments("b", WEATHER, 2),
            End("a"),
            End("b"),
            EndResponse(),
        ),
        expected={"a": _done(WEATHER), "b": _failed("unknown_tool")},
        restart_after=3,
    ),
    Scenario(
        name="a new user turn while old fragments arrive",
        steps=(
            Open("a", "get_weather"),
            Fragment("a", a_parts[0]),
            NewTurn("t2"),
            Fragment("a", a_parts[1]),
            Open("b", "send_email", response="resp_2"),
            Fragment("a", a_parts[2]),
            *_fragments("b", EMAIL),
            End("a"),
            End("b"),
            EndResponse("resp_1"),
            EndResponse("resp_2"),
        ),
        expected={"a": _cancelled("superseded"), "b": _done(EMAIL)},
        restart_after=4,
    ),
    Scenario(
        name="a late terminal for a cancelled turn",
        steps=(
            Open("a", "get_weather"),
            *_fragments("a", WEATHER),
            CancelTurn(),
            End("a"),
            EndResponse(),
        ),
        expected={"a": _cancelled("turn_cancelled")},
        restart_after=2,
    ),
]
"""The fixtures of the awkward-order suite; the renamed-tool scenario expects a turn that
offers ``get_weather`` only, while a newer declaration ``weather_now`` is registered too."""


# --- running ---------------------------------------------------------------------------------


class GatedCheck:
    """A validation check that can be made to wait, to act while a validation is running."""

    def __init__(self) -> None:
        self.gate: trio.Event | None = None
        self.started = trio.Event()

    async def __call__(self, request: ValidationRequested) -> ValidationResult:
        gate = self.gate
        if gate is not None:
            self.started.set()
            await gate.wait()
        return ValidationResult()


ANY_OBJECT = {"type": "object"}
"""The scenarios are about orders, not schemas: any object passes (registered not strict)."""

TOOLS = [
    ToolDeclaration(name="get_weather", parameters=ANY_OBJECT, strict=False),
    ToolDeclaration(name="send_email", parameters=ANY_OBJECT, strict=False),
    ToolDeclaration(name="weather_now", parameters=ANY_OBJECT, strict=False),
]

OpenRuntime = Callable[[GatedCheck], AbstractAsyncContextManager[Runtime]]


def runtimes_on(url: str) -> OpenRuntime:
    """Opens runtimes on the log at ``url``, with the suite's tools and check."""

    def opener(check: GatedCheck) -> AbstractAsyncContextManager[Runtime]:
        return open_runtime(log=url, create=True, tools=TOOLS, check=check, validation_timeout=30.0)

    return opener


def sqlite_runtimes(directory: Path) -> OpenRuntime:
    """Opens runtimes on one SQLite file in ``directory``, with the suite's tools and check."""
    return runtimes_on(f"sqlite:///{directory / 'awkward.db'}")


@define
class Outcome:
    """What a scenario run produced, for its assertions."""

    rows: dict[str, Mapping[str, object]] = field(factory=dict)
    cues: dict[str, StatusCue | None] = field(factory=dict)
    dispatches: list[tuple[str, Dispatch]] = field(factory=list)
    live_digest: str = ""
    replay_digest: str = ""


class _Run:
    def __init__(self, scenario: Scenario, renderer: Renderer, check: GatedCheck) -> None:
        self.scenario = scenario
        self.renderer = renderer
        self.check = check
        self.turns = [TurnRef(tenant=TENANT, conversation=CONVERSATION, turn="t1")]
        self.stream = Stream(turn=self.turns[0])
        self.label_of: dict[CallKey, str] = {}

    async def start(self, runtime: Runtime) -> None:
        await runtime.start_turn(
            tenant=TENANT,
            conversation=CONVERSATION,
            turn="t1",
            principal=PRINCIPAL,
            tools=self.scenario.tools,
        )

    async def apply(self, runtime: Runtime, index: int, step: Step | Control) -> None:
        events: list[Event] = []
        match step:
            case HoldValidation():
                self.check.gate = trio.Event()
                self.check.started = trio.Event()
                return
            case ReleaseValidation():
                await self.check.started.wait()
                assert self.check.gate is not None
                self.check.gate.set()
                self.check.gate = None
                return
            case CancelTurn():
                await runtime.cancel_turn(self.stream.turn, principal=PRINCIPAL)
                return
            case NewTurn(turn=turn, tools=tools):
                self.stream.turn = await runtime.start_turn(
                    tenant=TENANT,
                    conversation=CONVERSATION,
                    turn=turn,
                    principal=PRINCIPAL,
                    tools=tools or self.scenario.tools,
                )
                self.turns.append(self.stream.turn)
                return
            case Repeat(index=earlier):
                events = self.stream.delivered[earlier]
            case Late(index=earlier):
                events = self.stream.withheld.pop(earlier)
            case Fragment(lost=True):
                self.stream.withheld[index] = self.renderer.render(step, self.stream)
                return
            case Open() | Fragment() | End() | EndResponse():
                events = self.renderer.render(step, self.stream)
        self.stream.delivered[index] = events
        for event in events:
            key = getattr(event, "key", None)
            if isinstance(key, CallKey):
                self.stream.open_responses[key.response_ref] = None
                if isinstance(step, Open):
                    self.label_of[key] = step.call
            if isinstance(event, ResponseEnded):
                self.stream.open_responses.pop(event.response, None)
        # A renderer whose protocol opens a call later than the step that opened it (a call
        # that arrives whole) names the call's key in ``stream.keys`` when it does.
        for label, key in self.stream.keys.items():
            self.label_of.setdefault(key, label)
        if events:
            await runtime.feed(events)

    async def check_invariants(self, runtime: Runtime) -> None:
        """No executor input before validation; claims of unvalidated calls are refused."""
        queue = runtime.projections.queue
        for key in queue.ready():
            assert runtime.phase(key) is Phase.VALIDATED, f"{key} offered before validation"
        for key in self.label_of:
            if runtime.phase(key) in (Phase.COLLECTING, Phase.TERMINAL_CANDIDATE):
                try:
                    await runtime.claim(key, executor="awkward-probe")
                except ClaimRefused:
                    pass
                else:
                    raise AssertionError(f"{key} was dispatched before validation")


async def run_scenario(
    scenario: Scenario,
    open_runtime: OpenRuntime,
    *,
    renderer: Renderer | None = None,
    restart: bool = False,
) -> Outcome:
    """Feed a scenario through a runtime (restarting it once if asked) and gather its outcome."""
    check = GatedCheck()
    run = _Run(scenario, renderer or PortableRenderer(), check)
    outcome = Outcome()
    steps = list(enumerate(scenario.steps))
    cut = scenario.restart_after + 1 if restart else len(steps)
    async with open_runtime(check) as runtime:
        await run.start(runtime)
        await _feed(run, runtime, steps[:cut])
        if restart:
            lost = list(run.stream.open_responses)
            await runtime.feed([StreamLost(response=response, resumable=True) for response in lost])
            await runtime.settle()
    if restart:
        async with open_runtime(check) as runtime:
            await runtime.feed([StreamResumed(response=response) for response in lost])
            await _feed(run, runtime, steps[cut:])
            await _finish(run, runtime, outcome)
    else:
        async with open_runtime(check) as runtime:
            await _finish(run, runtime, outcome)
    return outcome


async def _feed(run: _Run, runtime: Runtime, steps: Sequence[tuple[int, Step | Control]]) -> None:
    for index, step in steps:
        await run.apply(runtime, index, step)
        if run.check.gate is not None and run.check.started.is_set() is False:
            # A held validation may not have started yet: settling would wait for it forever.
            continue
        if run.check.gate is None:
            await runtime.settle()
            await run.check_invariants(runtime)


async def _finish(run: _Run, runtime: Runtime, outcome: Outcome) -> None:
    await runtime.settle()
    await run.check_invariants(runtime)
    latest = run.turns[-1]

    async def record(dispatch: Dispatch) -> None:
        assert dispatch.turn == dispatch.key.turn_ref
        assert dispatch.turn == latest, "a call of an older turn reached an executor"
        outcome.dispatches.append((run.label_of[dispatch.key], dispatch))

    for key in list(runtime.projections.queue.ready()):
        await runtime.execute(key, record, name="awkward-executor")
    await runtime.settle()
    for key, label in run.label_of.items():
        row = runtime.projections.ledger.row(key)
        if row is not None:
            outcome.rows[label] = row.to_json()
            outcome.cues[label] = runtime.projections.status.of(key)
    outcome.live_digest = runtime.digest()
    replayed = Projections()
    for recorded in await runtime.log.read(1):
        replayed.apply(recorded)
    outcome.replay_digest = replayed.digest()


def assert_outcome(
    scenario: Scenario, outcome: Outcome, *, overrides: Mapping[str, Expected] | None = None
) -> None:
    """The calls ended as the scenario expects, each executed exactly once or never.

    ``overrides``: what an adapter whose protocol words a step differently expects instead, per
    call label (its renderer says why).
    """
    executed = [label for label, _ in outcome.dispatches]
    assert len(executed) == len(set(executed)), f"a call was executed twice: {executed}"
    for label, expected in {**scenario.expected, **(overrides or {})}.items():
        row = outcome.rows.get(label)
        if expected.state == "absent":
            assert row is None, f"{label}: {row}"
            assert label not in executed, f"{label} executed: {executed}"
            continue
        assert row is not None, f"call {label} has no ledger row"
        assert row["state"] == expected.state, f"{label}: {row}"
        assert row["terminal_reason"] == expected.reason, f"{label}: {row}"
        assert outcome.cues[label] == expected.cue, f"{label}: {outcome.cues[label]}"
        assert (label in executed) == expected.executed, f"{label} executed: {executed}"
        if expected.arguments is not None:
            [dispatch] = [dispatch for name, dispatch in outcome.dispatches if name == label]
            assert dict(dispatch.arguments) == expected.arguments
    assert outcome.live_digest == outcome.replay_digest
