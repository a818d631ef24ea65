"""Canonical call scenarios for the crash and fault tests, and the checker of what a log holds.

A scenario drives one runtime through one call's life (a plain call, one needing confirmation,
a cancelled one, one stopped by an operator, an executor that completes, fails or never
reports). ``Run`` carries what outlives a process: the executor's journal (the side effects
that happened) and where to stop. ``check_log`` then reads the log a restarted runtime left and
lists every broken promise of the contract.
"""

from __future__ import annotations

import bisect
from collections.abc import Awaitable, Callable
from contextlib import suppress

import attrs

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    ConfirmationRefused,
    Event,
    RecordedEvent,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    StatusCue,
    TerminalRef,
    ToolDeclaration,
    TurnRef,
)
from inert.actors._arguments import arguments_digest
from inert.actors._call import DIGEST_KEY
from inert.events import (
    CallCancelled,
    CallConfirmed,
    CallDispatched,
    CallValidated,
    ConfirmationDenied,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    TenantStopped,
    TurnCancelled,
    TurnRetired,
    TurnStarted,
)
from inert.projections import Projections
from inert.testing import FaultyLog

TOOLS = [
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
]
PRINCIPAL = "user:alice"
OPERATOR = "ops:bob"
ARGUMENTS = b'{"city": "Paris"}'
CANONICAL = b'{"city":"Paris"}'


def digest_of(runtime: Runtime) -> str:
    """The digest a person confirming these calls is shown: the canonical arguments', keyed by
    the runtime's log (rules 10)."""
    return arguments_digest(CANONICAL, runtime.log.key(DIGEST_KEY))


class Stopped(Exception):
    """The simulated process stopped at a chosen point (the log is halted)."""


def key_of(
    call: str, *, turn: str = "t1", tenant: str = "acme", conversation: str = "c1"
) -> CallKey:
    return CallKey(
        tenant=tenant,
        conversation=conversation,
        turn=turn,
        response=f"r-{turn}-{call}",
        item=f"item-{call}",
        call=call,
    )


def call_events(key: CallKey, *, tool: str = "get_weather", data: bytes = ARGUMENTS) -> list[Event]:
    """A whole call in two fragments and its response's successful end."""
    half = len(data) // 2
    return [
        CallOpened(key=key, tool=tool, sequence=0),
        ArgumentsAppended(key=key, data=data[:half], offset=0, first_sequence=1, last_sequence=1),
        ArgumentsAppended(
            key=key, data=data[half:], offset=half, first_sequence=2, last_sequence=2
        ),
        CallEnded(key=key, terminal=TerminalRef(sequence=3)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=4),
        ),
    ]


@attrs.define
class Run:
    """What one scenario run shares across the processes it spans."""

    outcome: str = "complete"
    stop_at: str | None = None
    journal: list[CallKey] = attrs.field(factory=list)
    log: FaultyLog | None = None

    def point(self, name: str) -> None:
        """A point between the dispatch and the outcome, where the process may stop."""
        if name == self.stop_at:
            assert self.log is not None
            self.log.halt(f"the process stopped {name}")
            raise Stopped(name)

    async def execute(self, runtime: Runtime, key: CallKey) -> None:
        """Claim, run (the journal records the side effect) and report, stopping if asked."""
        dispatch = await runtime.claim(key, executor="worker")
        self.point("after the claim returned")
        self.journal.append(key)
        self.point("after the executor ran")
        if self.outcome == "complete":
            await runtime.complete(dispatch)
        elif self.outcome == "fail":
            await runtime.fail(dispatch, "ToolError")
        self.point("after the outcome was recorded")


STOP_POINTS = (
    "after the claim returned",
    "after the executor ran",
    "after the outcome was recorded",
)


async def _start(runtime: Runtime, turn: str = "t1", tenant: str = "acme") -> None:
    await runtime.start_turn(tenant=tenant, conversation="c1", turn=turn, principal=PRINCIPAL)


async def _ready(runtime: Runtime, key: CallKey, tool: str = "get_weather") -> None:
    await runtime.feed(call_events(key, tool=tool))
    await runtime.settle()


async def plain(runtime: Runtime, run: Run) -> None:
    await _start(runtime)
    key = key_of("a")
    await _ready(runtime, key)
    await run.execute(runtime, key)


async def confirmed(runtime: Runtime, run: Run) -> None:
    await _start(runtime)
    key = key_of("a")
    await _ready(runtime, key, "send_email")
    with suppress(ConfirmationRefused):
        await runtime.confirm(key, principal=PRINCIPAL, arguments_digest=digest_of(runtime))
    await runtime.settle()
    await run.execute(runtime, key)


async def cancelled(runtime: Runtime, run: Run) -> None:
    await _start(runtime)
    ready, collecting = key_of("a"), key_of("b")
    await _ready(runtime, ready)
    events = call_events(collecting)
    await runtime.feed(events[:2])
    await runtime.settle()
    await runtime.cancel_turn(ready.turn_ref, principal=PRINCIPAL)
    await runtime.feed(events[2:])
    await runtime.settle()
    with suppress(ClaimRefused):
        await run.execute(runtime, ready)


async def denied(runtime: Runtime, run: Run) -> None:
    await _start(runtime)
    key = key_of("a")
    await _ready(runtime, key, "send_email")
    await runtime.deny(key, principal=PRINCIPAL)
    with suppress(ClaimRefused):
        await run.execute(runtime, key)


async def operator_stop(runtime: Runtime, run: Run) -> None:
    await _start(runtime)
    key = key_of("a")
    await _ready(runtime, key)
    await runtime.stop_tenant("acme", operator=OPERATOR, reason="incident")
    with suppress(ClaimRefused):
        await run.execute(runtime, key)


async def superseded(runtime: Runtime, run: Run) -> None:
    await _start(runtime)
    key = key_of("a")
    await _ready(runtime, key)
    await _start(runtime, "t2")
    with suppress(ClaimRefused):
        await run.execute(runtime, key)


Scenario = Callable[[Runtime, Run], Awaitable[None]]

SCENARIOS: dict[str, tuple[Scenario, str]] = {
    "plain, executor completes": (plain, "complete"),
    "plain, executor fails": (plain, "fail"),
    "plain, executor never reports": (plain, "never"),
    "needs confirmation": (confirmed, "complete"),
    "turn cancelled": (cancelled, "complete"),
    "confirmation denied": (denied, "complete"),
    "operator stop": (operator_stop, "complete"),
    "superseded by a new turn": (superseded, "complete"),
}


async def drain(runtime: Runtime, run: Run) -> None:
    """What a restarted process does: run every call that is ready now, once."""
    await runtime.settle()
    for key in runtime.projections.queue.ready():
        with suppress(ClaimRefused):
            await run.execute(runtime, key)
    await runtime.settle()


def _cancel_positions(events: list[RecordedEvent]) -> dict[CallKey, int]:
    """For each call, the first position of an input that must stop it if it is not claimed:
    its turn cancelled or superseded (a later turn of its conversation), its confirmation
    denied, its tenant stopped."""
    started: dict[TurnRef, int] = {}
    starts: dict[tuple[str, str], list[int]] = {}
    cancelled: dict[TurnRef, int] = {}
    denied: dict[CallKey, int] = {}
    stopped: dict[str, int] = {}
    keys: set[CallKey] = set()
    for recorded in events:
        event, position = recorded.event, recorded.position
        if isinstance(event, TurnStarted):
            started.setdefault(event.turn, position)
            starts.setdefault((event.turn.tenant, event.turn.conversation), []).append(position)
        elif isinstance(event, TurnCancelled):
            cancelled.setdefault(event.turn, position)
        elif isinstance(event, ConfirmationDenied):
            denied.setdefault(event.key, position)
        elif isinstance(event, TenantStopped):
            stopped.setdefault(event.tenant, position)
        elif isinstance(event, CallOpened | CallDispatched):
            keys.add(event.key)
    first: dict[CallKey, int] = {}
    for key in keys:
        candidates = [
            cancelled.get(key.turn_ref),
            denied.get(key),
            stopped.get(key.tenant),
        ]
        own = started.get(key.turn_ref, 0)
        later = starts.get((key.tenant, key.conversation), [])
        index = bisect.bisect_right(later, own)
        if index < len(later):
            candidates.append(later[index])
        found = [position for position in candidates if position is not None]
        if found:
            first[key] = min(found)
    return first


def check_log(
    events: list[RecordedEvent],
    runtime: Runtime,
    journal: list[CallKey],
    acknowledged: set[str],
) -> list[str]:
    """Every broken promise in a log a restarted ``runtime`` has settled on."""
    problems: list[str] = []
    stored = {recorded.event_id for recorded in events}
    lost = acknowledged - stored
    if lost:
        problems.append(f"{len(lost)} acknowledged events lost, e.g. {sorted(lost)[0]}")
    dispatched: dict[CallKey, list[CallDispatched]] = {}
    outcomes: dict[CallKey, int] = {}
    unknown: set[CallKey] = set()
    cancelled_calls: set[CallKey] = set()
    validated: dict[CallKey, CallValidated] = {}
    confirmed: set[CallKey] = set()
    for recorded in events:
        # Retention redacts validated arguments once an outcome is in: what remains still tells.
        event = recorded.kept
        if isinstance(event, CallValidated):
            validated.setdefault(event.key, event)
        elif isinstance(event, CallConfirmed):
            confirmed.add(event.key)
        elif isinstance(event, CallDispatched):
            check = validated.get(event.key)
            if check is None:
                problems.append(f"{event.key.stream} dispatched before it was validated")
            elif check.needs_confirmation and event.key not in confirmed:
                problems.append(f"{event.key.stream} dispatched before it was confirmed")
            dispatched.setdefault(event.key, []).append(event)
        elif isinstance(event, ExecutionCompleted | ExecutionFailed):
            outcomes[event.key] = outcomes.get(event.key, 0) + 1
        elif isinstance(event, ExecutionOutcomeUnknown):
            unknown.add(event.key)
        elif isinstance(event, CallCancelled):
            cancelled_calls.add(event.key)
    stops = _cancel_positions(events)
    for key, decisions in dispatched.items():
        if len(decisions) > 1:
            problems.append(f"{key.stream} dispatched {len(decisions)} times")
        if key in cancelled_calls:
            problems.append(f"{key.stream} cancelled and dispatched")
        if key in stops and stops[key] < decisions[0].cause:
            problems.append(f"{key.stream} claimed after its stop at {stops[key]} and dispatched")
        row = runtime.projections.ledger.row(key)
        if key not in outcomes:
            if key not in unknown:
                problems.append(f"{key.stream} dispatched without outcome, not surfaced unknown")
            if row is None or row.outcome != "unknown":
                problems.append(f"{key.stream} ledger outcome {row and row.outcome}, not unknown")
            if runtime.projections.status.of(key) is not StatusCue.UNKNOWN:
                problems.append(f"{key.stream} status {runtime.projections.status.of(key)}")
    for key in set(journal):
        runs = journal.count(key)
        if runs > 1:
            problems.append(f"{key.stream} ran {runs} times")
        if key not in dispatched:
            problems.append(f"{key.stream} ran without a durable dispatch")
    # A call of a retired turn is forgotten: absent after a restart, as it was before.
    retired = {
        event.turn
        for event in (recorded.event for recorded in events)
        if isinstance(event, TurnRetired)
    }
    problems.extend(
        f"{key.stream} cancelled in the log, {runtime.phase(key)} after restart"
        for key in cancelled_calls
        if runtime.phase(key).value != "cancelled"
        and not (key.turn_ref in retired and runtime.phase(key).value == "absent")
    )
    replayed = Projections()
    for recorded in events:
        replayed.apply(recorded)
    if replayed.digest() != runtime.digest():
        problems.append("the digest of a replay differs from the runtime's")
    return problems
