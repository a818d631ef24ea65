"""``inert demo``: the main job, on the embedded SQLite log, told as it happens."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import textwrap
from collections import Counter
from datetime import timedelta
from functools import partial

import trio
from opentelemetry.trace import TracerProvider

from ..actors import ToolDeclaration
from ..events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    ConfigurationError,
    ConfirmationRefused,
    EventRejected,
    EventsDiscarded,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    TurnRef,
)
from ..log import open_log
from ..runtime import Dispatch, Runtime, open_runtime
from ._common import EXECUTOR, LOG_VARIABLE
from ._execute import SHORT_DIGEST, Recorder, execute_ready, execution_lines
from ._tables import LEDGER_HEADER, NARROW_COLUMNS, Keys, ledger_table, times_text

# --- demo ------------------------------------------------------------------------------------

TENANT = "acme"
PRINCIPAL = "user:alice"
CONFIRMED_FOR = timedelta(seconds=0.2)
"""How long the demo's outlived confirmation lets its call be claimed."""
WIDTH = 100
"""The most characters of a line the demo prints, but for the wide ledger it is asked for."""


def say(text: str) -> None:
    """Print one step of the demo, wrapped to :data:`WIDTH`, its next lines indented."""
    print(
        textwrap.fill(
            text,
            width=WIDTH,
            subsequent_indent="  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
    )


DEMO_TOOLS = (
    ToolDeclaration(
        name="get_weather",
        description="The current weather in a city.",
        parameters={
            "type": "object",
            "properties": {"city": {"type": "string"}, "units": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    ),
    ToolDeclaration(
        name="send_email",
        description="Send an email on the user's behalf.",
        parameters={
            "type": "object",
            "properties": {
                "to": {"type": "string"},
                "subject": {"type": "string"},
                "body": {"type": "string"},
            },
            "required": ["to", "subject", "body"],
            "additionalProperties": False,
        },
        needs_confirmation=True,
        one_action_per_intent="conversation",
    ),
    ToolDeclaration(
        name="delete_files",
        description="Delete files under a path.",
        parameters={
            "type": "object",
            "properties": {"path": {"type": "string"}, "recursive": {"type": "boolean"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    ),
)


class _Streamed:
    """One streamed tool call of the demo, as a provider adapter would turn it into events.

    Sequences number the call's events: the opening 0, the fragments 1..n, the end n + 1.
    """

    def __init__(
        self,
        turn: TurnRef,
        response: str,
        item: str,
        *,
        tool: str,
        arguments: bytes,
        pieces: int = 4,
    ) -> None:
        self.key = CallKey(
            tenant=turn.tenant,
            conversation=turn.conversation,
            turn=turn.turn,
            response=response,
            item=item,
            call="call_" + item.removeprefix("fc_"),
        )
        self.tool = tool
        size = -(-len(arguments) // pieces)
        self.fragments = [
            arguments[start : start + size] for start in range(0, len(arguments), size)
        ]

    def opened(self) -> CallOpened:
        return CallOpened(key=self.key, tool=self.tool, sequence=0)

    def fragment(self, number: int) -> ArgumentsAppended:
        """The fragment of this number (from 1), at its byte offset."""
        return ArgumentsAppended(
            key=self.key,
            data=self.fragments[number - 1],
            offset=sum(len(piece) for piece in self.fragments[: number - 1]),
            first_sequence=number,
            last_sequence=number,
        )

    def ended(self) -> CallEnded:
        return CallEnded(key=self.key, terminal=TerminalRef(sequence=len(self.fragments) + 1))

    def all_events(self) -> list[CallOpened | ArgumentsAppended | CallEnded]:
        return [
            self.opened(),
            *(self.fragment(number) for number in range(1, len(self.fragments) + 1)),
            self.ended(),
        ]


def _response_ended(key: CallKey, sequence: int) -> ResponseEnded:
    return ResponseEnded(
        response=key.response_ref,
        reason=ResponseEndReason.COMPLETED,
        terminal=TerminalRef(sequence=sequence),
    )


def _what_became_of(runtime: Runtime, key: CallKey) -> str:
    """The state of one call in words, from its ledger row (never its arguments)."""
    row = runtime.projections.ledger.row(key)
    if row is None:
        return "no call"
    match row.state:
        case "collecting":
            return "still collecting"
        case "validated" if row.dispatch == "ready":
            return "validated, ready to run"
        case "validated":
            return "validated, waiting for confirmation"
        case "failed":
            parse = f", parse {row.parse}" if row.parse not in (None, "ok") else ""
            return f"failed ({row.terminal_reason}{parse}): it can never run"
        case "cancelled":
            return f"cancelled ({row.terminal_reason}): it will never run"
        case "dispatched" if row.outcome is None:
            return "dispatched and running"
        case "dispatched":
            return f"dispatched, outcome {row.outcome}"
    return row.state


async def _rejections(runtime: Runtime, key: CallKey, after: int) -> list[str]:
    """Why the call's actor rejected events addressed to it, since a log position."""
    return [
        recorded.event.reason.value
        for recorded in await runtime.log.read_stream(key.stream)
        if recorded.position > after and isinstance(recorded.event, EventRejected)
    ]


async def _discarded(runtime: Runtime, key: CallKey, after: int) -> int:
    """How many events fed for the call after it ended were counted instead of stored."""
    return sum(
        recorded.event.events
        for recorded in await runtime.log.read_stream(key.response_ref.stream)
        if recorded.position > after
        and isinstance(recorded.event, EventsDiscarded)
        and recorded.event.key == key
    )


async def _validated_digest(runtime: Runtime, key: CallKey) -> str:
    """The digest of the canonical arguments a call waiting for confirmation asks about."""
    pending = await runtime.pending_confirmation(key)
    if pending is None:
        raise RefusedError(f"call {key.stream!r} is not waiting for confirmation")
    return pending.arguments_digest


async def _start(runtime: Runtime, conversation: str, turn: str) -> TurnRef:
    return await runtime.start_turn(
        tenant=TENANT, conversation=conversation, turn=turn, principal=PRINCIPAL
    )


async def _stream(runtime: Runtime, *calls: _Streamed) -> None:
    """Feed the calls' events one at a time, as they come off the wire, alternating between calls,
    then the successful end of their response."""
    for events in zip(*(call.all_events() for call in calls), strict=True):
        for event in events:
            await runtime.feed([event])
    # The response's own terminal event comes after every event of its calls.
    sequence = sum(len(call.all_events()) for call in calls)
    await runtime.feed([_response_ended(calls[0].key, sequence)])
    await runtime.settle()


async def _demo_before_restart(runtime: Runtime, calls: dict[str, _Streamed]) -> int:
    """The turns before the restart; the number of events in the log when the process stops."""
    # (a) Two calls of one response whose fragments alternate on the wire.
    turn = await _start(runtime, "c1", "t1")
    weather = b'{"city": "Reykjavik", "units": "metric"}'
    first = calls["t1a"] = _Streamed(turn, "resp_1", "fc_1", tool="get_weather", arguments=weather)
    weather = b'{"city": "Ouagadougou", "units": "metric"}'
    second = calls["t1b"] = _Streamed(turn, "resp_1", "fc_2", tool="get_weather", arguments=weather)
    await _stream(runtime, first, second)
    say(
        f"turn t1: two get_weather calls in one response, {len(first.fragments)} fragments each,"
        f" interleaved on the wire: fc_1 {_what_became_of(runtime, first.key)};"
        f" fc_2 {_what_became_of(runtime, second.key)}"
    )

    # (b) Arguments with a duplicate key: the strict parse at the end event refuses them.
    turn = await _start(runtime, "c2", "t2")
    duplicate = b'{"path": "/home/alice/tmp", "recursive": true, "path": "/"}'
    wrong = calls["t2"] = _Streamed(
        turn, "resp_2", "fc_1", tool="delete_files", arguments=duplicate
    )
    await _stream(runtime, wrong)
    say(
        "turn t2: delete_files whose arguments hold one key twice: at its end event it"
        f" {_what_became_of(runtime, wrong.key)}"
    )

    # (c) A tool that needs the person's confirmation: validated, then it waits.
    turn = await _start(runtime, "c3", "t3")
    message = (
        b'{"to": "bob@example.com", "subject": "Quarterly figures",'
        b' "body": "Revenue up 12% on Q2, see attachment."}'
    )
    email = calls["t3"] = _Streamed(turn, "resp_3", "fc_1", tool="send_email", arguments=message)
    await _stream(runtime, email)
    say(f"turn t3: send_email streamed, response completed: {_what_became_of(runtime, email.key)}")

    # A call still streaming when the process stops.
    turn = await _start(runtime, "c4", "t4")
    weather = b'{"city": "Valparaiso"}'
    open_call = calls["t4"] = _Streamed(
        turn, "resp_4", "fc_1", tool="get_weather", arguments=weather
    )
    for event in (open_call.opened(), open_call.fragment(1), open_call.fragment(2)):
        await runtime.feed([event])
    await runtime.settle()
    say(
        f"turn t4: get_weather opened, 2 of its {len(open_call.fragments)} fragments arrived,"
        f" then the process stops; the call is {_what_became_of(runtime, open_call.key)}"
    )
    return await runtime.log.head()


async def _stop_while_running(runtime: Runtime, calls: dict[str, _Streamed]) -> None:
    """(f) The person cancels a turn while its tool runs: the executor is asked to stop."""
    turn = await _start(runtime, "c7", "t7")
    weather = b'{"city": "Reykjavik", "units": "metric"}'
    slow = calls["t7"] = _Streamed(turn, "resp_7", "fc_1", tool="get_weather", arguments=weather)
    await _stream(runtime, slow)
    running = trio.Event()

    async def forecast(dispatch: Dispatch) -> None:
        running.set()
        await trio.sleep(3600)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(runtime.execute, slow.key, forecast, name=EXECUTOR))
        await running.wait()
        await runtime.settle()
        before = _what_became_of(runtime, slow.key)
        await runtime.cancel_turn(turn, principal=PRINCIPAL, reason="too slow")
    await runtime.settle()
    say(
        f"turn t7: {PRINCIPAL} cancels the turn while get_weather is {before}: its executor is"
        f" asked to stop and stops; the call is {_what_became_of(runtime, slow.key)}, never"
        " run again"
    )


async def _email_asked_twice(runtime: Runtime) -> None:
    """(g) One action per intent: the model asks twice for the same email; it is sent once."""
    turn = await _start(runtime, "c8", "t8")
    message = b'{"to": "dave@example.com", "subject": "Invoice 42", "body": "Paid in full."}'
    once = _Streamed(turn, "resp_8", "fc_1", tool="send_email", arguments=message)
    twice = _Streamed(turn, "resp_8", "fc_2", tool="send_email", arguments=message)
    await _stream(runtime, once, twice)
    for call in (once, twice):
        digest = await _validated_digest(runtime, call.key)
        await runtime.confirm(call.key, principal=PRINCIPAL, arguments_digest=digest)
    await runtime.settle()
    await runtime.complete(await runtime.claim(once.key, executor=EXECUTOR))
    try:
        await runtime.claim(twice.key, executor=EXECUTOR)
    except ClaimRefused:
        claimed = "refused"
    else:
        claimed = "DISPATCHED, which is a bug"
    await runtime.settle()
    say(
        f"turn t8: the model asks twice for the same send_email, which runs once per"
        f" conversation; {PRINCIPAL} confirms both; fc_1 is sent, a claim of fc_2 is {claimed}:"
        f" fc_2 is {_what_became_of(runtime, twice.key)}"
    )


async def _demo_after_restart(runtime: Runtime, calls: dict[str, _Streamed]) -> None:
    # (c, continued) A confirmation binds the person and the exact arguments.
    email = calls["t3"].key
    digest = await _validated_digest(runtime, email)
    try:
        await runtime.confirm(email, principal="user:mallory", arguments_digest=digest)
    except ConfirmationRefused as refused:
        say(f"turn t3: user:mallory tries to confirm send_email: refused ({refused.reason})")
    else:
        say("turn t3: user:mallory tries to confirm send_email: ACCEPTED, which is a bug")
    await runtime.confirm(email, principal=PRINCIPAL, arguments_digest=digest)
    await runtime.settle()
    say(
        f"turn t3: {PRINCIPAL} confirms send_email for the arguments it was shown, by their"
        f" digest {digest[:SHORT_DIGEST]}…: {_what_became_of(runtime, email)}"
    )

    # (d) The person cancels a turn while its call is still collecting.
    turn = await _start(runtime, "c5", "t5")
    weather = b'{"city": "Antananarivo", "units": "metric"}'
    call = _Streamed(turn, "resp_5", "fc_1", tool="get_weather", arguments=weather)
    await runtime.feed([call.opened(), call.fragment(1), call.fragment(2)])
    await runtime.settle()
    collecting = _what_became_of(runtime, call.key)
    await runtime.cancel_turn(turn, principal=PRINCIPAL, reason="changed my mind")
    await runtime.settle()
    cancelled = _what_became_of(runtime, call.key)
    position = await runtime.log.head()
    await runtime.feed([call.fragment(3), call.fragment(4), call.ended()])
    await runtime.feed([_response_ended(call.key, len(call.fragments) + 2)])
    await runtime.settle()
    late = Counter(await _rejections(runtime, call.key, position))
    discarded = await _discarded(runtime, call.key, position)
    rejected = "".join(f", {count} rejected {reason}" for reason, count in late.items())
    say(
        f"turn t5: {PRINCIPAL} cancels the turn while get_weather is {collecting}: it was"
        f" {cancelled}; its late fragments and end event were counted, not stored"
        f" ({discarded} events discarded{rejected})"
    )

    # (e) A confirmation bounds the ready window: a claim after it expired never runs the call.
    turn = await _start(runtime, "c6", "t6")
    message = b'{"to": "carol@example.com", "subject": "Offsite", "body": "Room 4 is booked."}'
    outlived = calls["t6"] = _Streamed(turn, "resp_6", "fc_1", tool="send_email", arguments=message)
    await _stream(runtime, outlived)
    digest = await _validated_digest(runtime, outlived.key)
    await runtime.confirm(
        outlived.key, principal=PRINCIPAL, arguments_digest=digest, expires_in=CONFIRMED_FOR
    )
    await trio.sleep(2 * CONFIRMED_FOR.total_seconds())
    try:
        await runtime.claim(outlived.key, executor=EXECUTOR)
    except ClaimRefused as refused:
        claimed = f"refused ({refused.reason})"
    else:
        claimed = "DISPATCHED, which is a bug"
    await runtime.settle()
    say(
        f"turn t6: {PRINCIPAL} confirms send_email for {CONFIRMED_FOR.total_seconds():g} s;"
        f" a claim after that is {claimed}: the call is {_what_became_of(runtime, outlived.key)}"
    )

    await _stop_while_running(runtime, calls)

    await _email_asked_twice(runtime)

    await _end_event_twice(runtime, calls)


async def _end_event_twice(runtime: Runtime, calls: dict[str, _Streamed]) -> None:
    """(h) A provider delivers a terminal event twice: the same end event, fed again."""
    first = calls["t1a"]
    position = await runtime.log.head()
    await runtime.feed([first.ended()])
    await runtime.settle()
    reasons = ", ".join(await _rejections(runtime, first.key, position)) or "not rejected"
    say(
        f"turn t1: fc_1's end event delivered a second time: rejected ({reasons});"
        f" the call is still {_what_became_of(runtime, first.key)}"
    )


def _settings(tool: ToolDeclaration) -> str:
    """What the demo says of a tool beside its name."""
    settings = ["needs confirmation"] if tool.needs_confirmation else []
    if tool.one_action_per_intent is not None:
        settings.append(f"runs once per {tool.one_action_per_intent.value}")
    return f" ({', '.join(settings)})" if settings else ""


async def demo_command(
    url: str, tracer_provider: TracerProvider | None = None, *, wide: bool = False
) -> None:
    """Run the demo on the empty log at ``url``; ``wide``: the ledger with every column."""
    async with open_log(url) as log:
        stored = await log.head()
    if stored:
        raise ConfigurationError(f"the demo needs an empty log; {url} holds {stored} events")
    say(f"inert demo on {url}")
    names = ", ".join(tool.name + _settings(tool) for tool in DEMO_TOOLS)
    say(f"tools: {names}; every turn is {PRINCIPAL}'s, in tenant {TENANT}")
    calls: dict[str, _Streamed] = {}
    async with open_runtime(log=url, tools=DEMO_TOOLS, tracer_provider=tracer_provider) as runtime:
        stored = await _demo_before_restart(runtime, calls)

    async with open_runtime(log=url, tools=DEMO_TOOLS, tracer_provider=tracer_provider) as runtime:
        await runtime.settle()
        say(
            f"restart: runtime closed, log closed; a new runtime rebuilt"
            f" {len(runtime.projections.ledger.rows())} calls from the {stored} events of the log"
            f" and recorded turn t4's stream as lost (its feeder died with the old process):"
            f" the call was {_what_became_of(runtime, calls['t4'].key)}"
        )
        await _demo_after_restart(runtime, calls)

        shown = Keys(row.key for row in runtime.projections.ledger.rows())
        recorder = Recorder()
        results = await execute_ready(runtime, recorder)
        say(
            f"execute: {len(results)} ready calls claimed; {EXECUTOR!r}, an executor that"
            f" records that it ran and nothing else, ran {times_text(len(recorder.ran))}"
            " (each with the digest of the arguments it ran with):"
        )
        for line in execution_lines(results, shown, wide=wide):
            print("  " + line)
        first = calls["t1a"].key
        try:
            await runtime.claim(first, executor="someone-else")
        except ClaimRefused as refused:
            say(f"a second claim of {shown.show(first)}: refused ({refused.reason})")
        else:
            say(f"a second claim of {shown.show(first)}: DISPATCHED AGAIN, which is a bug")
        await runtime.settle()

        print("ledger:")
        columns = LEDGER_HEADER if wide else NARROW_COLUMNS
        for line in ledger_table(runtime.projections.ledger, wide=wide, columns=columns):
            print("  " + line)
        for words in WIDE_WORDS if wide else NARROW_WORDS:
            say("  " + words)
        print(f"digest {runtime.digest()}")
        say(
            "  the state digest: one hash of every call's state, which `inert replay` and"
            " `inert verify` compute again from the log alone; another run writes another log"
            " (its own times, and its own key for the digests of arguments), so its digest"
            " differs"
        )


OUTCOMES = (
    "reason: why a call ended without running (it never will); outcome: what the executor"
    " reported of a call it ran"
)
NARROW_WORDS = (
    OUTCOMES,
    "with --wide the demo shows every column of the ledger, as inert ledger does",
)
"""What the narrow ledger's words mean, and where the others are."""
WIDE_WORDS = (
    OUTCOMES,
    "terminal event: the provider's event that ended the call's arguments, by its sequence"
    " number in the response (or its digest, where the protocol numbers none); parse and"
    " validation: the strict parse of the arguments at that event, and their check against the"
    " tool's declaration",
    "dispatch: what may happen to the call now: inert (its arguments still arrive),"
    " await_response (until its response ends well), await_confirmation, ready, dispatched"
    " (claimed by an executor, once), or reject: it will never be dispatched",
)
"""What the words of the wide ledger mean."""


def next_steps(url: str) -> list[str]:
    """What to run on the log a demo kept, the console first: each an exact command."""
    program = _program()
    commands = [
        (f"{program} console --log {url}", "the operator console, in a browser"),
        (f"{program} ledger --log {url} --history", "each call and every step it took"),
        (f"{program} replay --log {url}", "every decision made again"),
        (f"{program} verify --log {url}", "the log checked whole"),
        (f"{program} audit --log {url}", "the operators' controls (none here)"),
    ]
    width = max(len(command) for command, _ in commands)
    lines = [f"the demo's log stays at {url}; next, look into it:"]
    if not _console_installed():
        lines.append("  pip install 'inert[console]'   # once: the console's web server")
    lines += [f"  {command.ljust(width)}  # {what}" for command, what in commands]
    lines.append(f"(export {LOG_VARIABLE}={url} to leave --log out)")
    return lines


def _program() -> str:
    """How to run this ``inert`` again from the folder the demo ran in: ``inert`` where the
    shell finds this one by that name, else the path it was run by (``.venv/bin/inert`` from
    ``make demo``)."""
    script = sys.argv[0]
    if os.path.basename(script) != "inert":
        return "inert"
    found = shutil.which("inert")
    if found is not None and os.path.exists(script) and os.path.samefile(found, script):
        return "inert"
    return script


def _console_installed() -> bool:
    """Whether the console's optional dependencies (the ``console`` extra) are installed."""
    return all(
        importlib.util.find_spec(name) is not None for name in ("hypercorn", "jinja2", "starlette")
    )
