"""The ``inert`` command: read a log's ledger and audit, replay it, feed a provider stream into a
turn, cancel a turn, confirm or deny a call, give operator controls, run ready calls, demo.

Nothing it prints carries an argument value: calls are shown by key, tool, counts, sizes,
reasons and digests.
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import re
import secrets
import sys
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio
from attrs import frozen
from opentelemetry.sdk.trace import TracerProvider

from .. import __version__
from ..actors import TERMINAL_PHASES, CallFold, Phase, ToolDeclaration
from ..adapters import OpenAIResponsesAdapter, StreamAdapter
from ..events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    ConfigurationError,
    ConfirmationRefused,
    Event,
    EventRejected,
    EventsDiscarded,
    InertError,
    LogError,
    ProcessHeartbeat,
    RecordedEvent,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    TurnRef,
)
from ..log import Log, open_log
from ..projections import JSON, Ledger, LedgerRow, Projections, Transition
from ..runtime._peers import DEFAULT_LEASE_TIME
from ..runtime._runtime import Dispatch, Runtime, open_runtime, trio_clock
from ..runtime._verify import DEFAULT_MAX_PROBLEMS, verify_log
from ..testing import PLANTS, RETENTIONS, SimulationFailed, plant_description, simulate_many
from ..tracing import IncomingTrace, read_trace_headers
from ..tracing._export import provider_for_file, provider_from_environment
from ._feed import PROVIDERS, StreamFile, UnreadableInput, read_stream, read_tools, stream_name

READ_PAGE = 1024
"""Events read from the log at a time."""

EXECUTOR = "inert-execute"
"""The executor name claims of this command are recorded under."""

WAIT_SECONDS = 120.0
"""The longest a command waits for the log to settle (its runtime bounds its own requests)."""

RUNNING_WINDOW = timedelta(minutes=1)
"""How far back, in the log's time, a command looks for heartbeats of running processes."""

_KEY_FIELDS = ("tenant", "conversation", "turn", "response", "item", "call")


class NoProgress(InertError):
    """A command waited ``WAIT_SECONDS`` for a step that did not end."""


# --- the log a command works on ----------------------------------------------------------------


async def _fold_log(url: str, *folds: Callable[[RecordedEvent], object]) -> int:
    """Apply every event of the log, in position order, read a page at a time; how many."""
    count = position = 0
    # A read must not leave a new, empty log behind where a path was mistyped.
    async with open_log(url, create=False) as log:
        while page := await log.read(position + 1, limit=READ_PAGE):
            for recorded in page:
                for fold in folds:
                    fold(recorded)
            count += len(page)
            position = page[-1].position
    return count


async def _running_processes(log: Log) -> dict[str, float]:
    """The named runtime processes running on the log, each with the seconds since its last
    heartbeat, from the heartbeats of the last ``RUNNING_WINDOW`` (read from the end).

    A process beats every quarter of its lease time and its peers take it for dead after a
    lease time without one: it is running while its last beat is younger than four times the
    shortest time between two of its beats (a late beat only lengthens one), or than the
    default lease time when the window holds one.
    """
    now = log.now()
    since = now - RUNNING_WINDOW
    beats: dict[str, list[datetime]] = {}
    end = await log.head()
    while end >= 1:
        start = max(1, end - READ_PAGE + 1)
        page = await log.read(start, limit=end - start + 1)
        for recorded in page:
            if isinstance(recorded.event, ProcessHeartbeat) and recorded.recorded_at >= since:
                beats.setdefault(recorded.event.process, []).append(recorded.recorded_at)
        if not page or page[0].recorded_at < since:
            break
        end = start - 1
    running: dict[str, float] = {}
    for process, times in beats.items():
        times.sort()
        lease = (
            4 * min(later - earlier for earlier, later in itertools.pairwise(times))
            if len(times) > 1
            else timedelta(seconds=DEFAULT_LEASE_TIME)
        )
        if now - times[-1] < lease:
            running[process] = (now - times[-1]).total_seconds()
    return running


@asynccontextmanager
async def _runtime_on(url: str, *, create: bool = False, **options: Any) -> AsyncIterator[Runtime]:
    """A runtime of this command on the log (which must exist, unless ``create``).

    It decides for every turn, as a runtime without a process name does: beside a running
    process it would write decisions that process makes too (and stop it), so the command is
    refused while the log's heartbeats say one runs.
    """
    async with open_log(url, clock=trio_clock(), create=create) as log:
        running = await _running_processes(log)
        if running:
            name, age = min(running.items(), key=lambda item: item[1])
            others = f" (and {len(running) - 1} more)" if len(running) > 1 else ""
            raise RefusedError(
                f"runtime process {name!r}{others} is running on this log (heartbeat {age:.1f} s"
                " ago): this command opens a runtime that must be alone on the log; stop it"
                " first, or act through it"
            )
        async with open_runtime(log=log, **options) as runtime:
            yield runtime


async def _settle(runtime: Runtime) -> None:
    """``runtime.settle()``, for at most ``WAIT_SECONDS`` (the runtime bounds its requests and
    its catching up, not the wait for everything to be quiet)."""
    with trio.move_on_after(WAIT_SECONDS):
        await runtime.settle()
        return
    raise NoProgress(
        f"gave up waiting for the log to settle after {WAIT_SECONDS:g} s: is another process"
        " (a runtime without a process name) writing to it?"
    )


# --- showing keys and tables -----------------------------------------------------------------


def _part(value: str) -> str:
    # Percent-encoded like stream names, so that a "/" inside an identity cannot be misread.
    return quote(value, safe="")


class _Keys:
    """How call keys are shown: the leading identities every key shares are named once."""

    def __init__(self, keys: Iterable[CallKey]) -> None:
        keys = list(keys)
        self.shared: list[tuple[str, str]] = []
        for name in ("tenant", "conversation"):
            values = {getattr(key, name) for key in keys}
            if len(values) != 1:
                break
            self.shared.append((name, values.pop()))
        self.fields = _KEY_FIELDS[len(self.shared) :]

    def show(self, key: CallKey) -> str:
        return "/".join(_part(getattr(key, name)) for name in self.fields)

    def legend(self) -> str:
        """For instance ``tenant acme; calls shown as conversation/turn/response/item/call``."""
        shared = ", ".join(f"{name} {_part(value)}" for name, value in self.shared)
        shown = f"calls shown as {'/'.join(self.fields)}"
        return f"{shared}; {shown}" if shared else shown


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> list[str]:
    """Aligned columns (numbers to the right), two spaces apart, under a header line."""
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(width) if column in numeric else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    return [line(header), *(line(row) for row in rows)]


_LEDGER_HEADER = (
    "call",
    "tool",
    "state",
    "fragments",
    "bytes",
    "terminal event",
    "reason",
    "parse",
    "validation",
    "dispatch",
    "outcome",
)


def _cell(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _ledger_cells(keys: _Keys, row: LedgerRow) -> list[str]:
    return [
        keys.show(row.key),
        _cell(row.tool),
        row.state,
        str(row.fragments),
        str(row.bytes),
        _cell(row.terminal_event),
        _cell(row.terminal_reason),
        _cell(row.parse),
        _cell(row.validation),
        row.dispatch,
        _cell(row.outcome),
    ]


def _history_keys(ledger: Ledger) -> list[CallKey]:
    """Every key with a row or a transition, in the order it first appeared."""
    keys = dict.fromkeys(ledger.histories())
    keys.update(dict.fromkeys(row.key for row in ledger.rows()))
    return list(keys)


def _transition_cells(step: Transition) -> list[str]:
    return [f"@{step.position}", step.event_type, _cell(step.state), step.detail]


def ledger_table(ledger: Ledger, *, history: bool = False) -> list[str]:
    """The ledger as lines a person reads: a legend, a header and one line per call key.

    With ``history``, each key's transitions follow it, indented, and keys that only have
    rejected events (no row) are listed too.
    """
    rows = ledger.rows()
    keys = _history_keys(ledger) if history else [row.key for row in rows]
    if not keys:
        return ["(no calls)"]
    shown = _Keys(keys)
    by_key = {row.key: row for row in rows}
    cells = [
        _ledger_cells(shown, by_key[key])
        if key in by_key
        else [shown.show(key), "-", "(no call: only rejected events)", *[""] * 8]
        for key in keys
    ]
    table = _table(_LEDGER_HEADER, cells, {3, 4})
    lines = [shown.legend(), table[0]]
    histories = ledger.histories() if history else {}
    steps = [_transition_cells(step) for key in keys for step in histories.get(key, [])]
    # One table for every transition, so that their columns line up under all the calls.
    indented = iter(_table(("", "", "", ""), steps, {0})[1:])
    for key, line in zip(keys, table[1:], strict=True):
        lines.append(line)
        lines.extend("      " + next(indented) for _ in histories.get(key, []))
    return lines


def _key_json(key: CallKey) -> dict[str, JSON]:
    return {name: getattr(key, name) for name in _KEY_FIELDS}


def _ledger_json(ledger: Ledger, *, history: bool) -> list[dict[str, JSON]]:
    if not history:
        return [row.to_json() for row in ledger.rows()]
    by_key = {row.key: row for row in ledger.rows()}
    histories = ledger.histories()
    objects: list[dict[str, JSON]] = []
    for key in _history_keys(ledger):
        row = by_key.get(key)
        # A key with only rejected events has no row: its columns are null.
        entry = row.to_json() if row is not None else _row_of_nothing(key)
        entry["history"] = [step.to_json() for step in histories.get(key, [])]
        objects.append(entry)
    return objects


def _row_of_nothing(key: CallKey) -> dict[str, JSON]:
    """The columns of a key without a row: its identities, and null for everything else."""
    columns = LedgerRow.opened(key, tool="", fragments=0, size=0).to_json()
    return {name: (value if name in _KEY_FIELDS else None) for name, value in columns.items()}


# --- ledger ----------------------------------------------------------------------------------


async def _ledger(url: str, *, as_json: bool, history: bool) -> None:
    projections = Projections()
    await _fold_log(url, projections.apply)
    if as_json:
        for entry in _ledger_json(projections.ledger, history=history):
            print(json.dumps(entry, ensure_ascii=False))
    else:
        for line in ledger_table(projections.ledger, history=history):
            print(line)


# --- replay ----------------------------------------------------------------------------------


async def _replay(url: str, *, as_json: bool) -> None:
    fold = CallFold(live=False)
    projections = Projections()
    kinds: Counter[str] = Counter()
    events = await _fold_log(
        url, fold.apply, projections.apply, lambda recorded: kinds.update((recorded.event_type,))
    )
    rejections = kinds[EventRejected.TAG]
    # A key that only ever had events rejected stays absent: it is no call.
    phases = Counter(record.state.phase for record in fold.records.values())
    states: dict[str, JSON] = {
        phase.value: phases[phase] for phase in Phase if phase in phases and phase != Phase.ABSENT
    }
    summary: dict[str, JSON] = {
        "events": events,
        "calls": sum(phases.values()) - phases[Phase.ABSENT],
        "states": states,
        "ready": len(projections.queue),
        "rejections": rejections,
        "digest": projections.digest(),
    }
    if as_json:
        print(json.dumps(summary))
        return
    print(f"replayed {events} events; every decision found in the log was made again")
    print(f"calls       {summary['calls']}")
    for state, count in states.items():
        print(f"  {state:<18} {count}")
    print(f"ready       {summary['ready']}")
    print(f"rejections  {rejections}")
    print(f"digest {summary['digest']}")


# --- verify ----------------------------------------------------------------------------------


async def _verify(url: str, *, as_json: bool) -> None:
    async with open_log(url, create=False) as log:
        found = await verify_log(log)
    if as_json:
        print(
            json.dumps(
                {
                    "events": found.events,
                    "ok": found.ok,
                    "replayed": found.replayed,
                    "digest": found.digest,
                    "problems": [
                        {"position": problem.position, "problem": problem.what}
                        for problem in found.problems
                    ],
                },
                ensure_ascii=False,
            )
        )
    else:
        for problem in found.problems:
            print(problem)
    if not found.ok:
        more = " (the first of them)" if len(found.problems) >= DEFAULT_MAX_PROBLEMS else ""
        count = len(found.problems)
        raise LogError(
            f"the log failed verification: {count} problem{'' if count == 1 else 's'}{more} in"
            f" {found.events} events read"
        )
    if not as_json:
        print(
            f"verified {found.events} events: the storage's own checks, every row's position and"
            " checksum, and a replay of every decision and what it implies"
        )
        print(f"digest {found.digest}")


# --- cancel-turn -----------------------------------------------------------------------------


def _turn_rows(runtime: Runtime, turn: TurnRef) -> dict[CallKey, LedgerRow]:
    return {row.key: row for row in runtime.projections.ledger.rows() if row.key.turn_ref == turn}


async def _cancel_turn(url: str, turn: TurnRef, *, principal: str, reason: str) -> None:
    async with _runtime_on(url) as runtime:
        await _settle(runtime)
        before = _turn_rows(runtime, turn)
        await runtime.cancel_turn(turn, principal=principal, reason=reason)
        await _settle(runtime)
        after = _turn_rows(runtime, turn)
    cancelled = [
        key
        for key, row in after.items()
        if row.state == "cancelled" and (key not in before or before[key].state != "cancelled")
    ]
    ended = sum(1 for row in before.values() if row.state in TERMINAL_PHASES)
    shown = _Keys(after)
    noun = "call" if len(cancelled) == 1 else "calls"
    print(
        f"turn {_part(turn.tenant)}/{_part(turn.conversation)}/{_part(turn.turn)} cancelled"
        f" for {principal}: {len(cancelled)} {noun} of its {len(after)} cancelled"
        f" ({ended} had ended before)"
    )
    for key in cancelled:
        print(f"  cancelled  {shown.show(key)}  {after[key].tool}")


# --- operators ---------------------------------------------------------------------------------

OPERATORS_VARIABLE = "INERT_OPERATORS"
"""The environment variable naming the principals with the operator role, comma separated."""


def _operators() -> frozenset[str]:
    return frozenset(
        name.strip() for name in os.environ.get(OPERATORS_VARIABLE, "").split(",") if name.strip()
    )


async def _control(
    url: str, action: str, target: str, *, tenant: str | None, operator: str, reason: str
) -> None:
    operators = _operators()
    if not operators:
        raise RefusedError(
            f"no operator is configured: {OPERATORS_VARIABLE} names the operator principals"
        )
    async with _runtime_on(url, operators=operators) as runtime:
        await _settle(runtime)
        match action:
            case "quarantine-response":
                position = await runtime.quarantine_response(
                    target, tenant=tenant, operator=operator, reason=reason
                )
            case "disable-tool":
                position = await runtime.disable_tool(
                    target, tenant=tenant, operator=operator, reason=reason
                )
            case "enable-tool":
                position = await runtime.enable_tool(
                    target, tenant=tenant, operator=operator, reason=reason
                )
            case "stop-tenant":
                position = await runtime.stop_tenant(target, operator=operator, reason=reason)
            case _:
                position = await runtime.resume_tenant(target, operator=operator, reason=reason)
        await _settle(runtime)
        [entry] = [e for e in runtime.projections.audit.entries() if e.position == position]
    ended = len(entry.ended)
    print(
        f"{action} {target} by {operator} at position {position}:"
        f" {ended} {'call' if ended == 1 else 'calls'} ended"
    )
    for key in entry.ended:
        print(f"  ended  {_Keys(entry.ended).show(key)}")


async def _audit(url: str, *, as_json: bool) -> None:
    projections = Projections()
    await _fold_log(url, projections.apply)
    entries = projections.audit.entries()
    if as_json:
        for entry in entries:
            print(json.dumps(entry.to_json(), ensure_ascii=False))
        return
    if not entries:
        print("(no controls)")
        return
    cells = [
        [
            f"@{entry.position}",
            entry.recorded_at,
            entry.control.removeprefix("operator."),
            ", ".join(f"{name} {value}" for name, value in entry.scope.items() if value),
            entry.operator,
            entry.reason,
            str(len(entry.ended)),
        ]
        for entry in entries
    ]
    header = ("", "recorded at", "control", "scope", "operator", "reason", "calls ended")
    for line in _table(header, cells, {6}):
        print(line)
    for entry in entries:
        ledger = projections.ledger
        for key in entry.ended:
            row = ledger.row(key)
            state = "-" if row is None else f"{row.state} {row.terminal_reason}"
            print(f"@{entry.position} ended {_Keys([key]).show(key)}: {state}")


# --- confirm and deny ------------------------------------------------------------------------


def _call_of_turn(runtime: Runtime, turn: TurnRef, call_id: str, response: str | None) -> CallKey:
    """The one call of the turn with this provider call id (and response, where given)."""
    keys = [
        key
        for key in _turn_rows(runtime, turn)
        if key.call == call_id and (response is None or key.response == response)
    ]
    if not keys:
        raise RefusedError(f"turn {turn.stream!r} has no call {call_id!r}")
    if len(keys) > 1:
        responses = ", ".join(sorted(key.response for key in keys))
        raise RefusedError(
            f"{len(keys)} calls of turn {turn.stream!r} have call id {call_id!r} (responses"
            f" {responses}): name one with --response"
        )
    return keys[0]


async def _confirm(
    url: str,
    turn: TurnRef,
    *,
    call_id: str,
    response: str | None,
    principal: str,
    arguments_digest: str | None,
) -> None:
    async with _runtime_on(url) as runtime:
        await _settle(runtime)
        key = _call_of_turn(runtime, turn, call_id, response)
        pending = await runtime.pending_confirmation(key)
        if pending is None:
            row = runtime.projections.ledger.row(key)
            state = "unknown" if row is None else row.state
            raise RefusedError(f"call {key.stream!r} is not waiting for a confirmation ({state})")
        # A digest given is the one the person was shown: the confirmation binds that one, and
        # the call's actor refuses it if the arguments are not those.
        digest = arguments_digest or pending.arguments_digest
        await runtime.confirm(key, principal=principal, arguments_digest=digest)
        await _settle(runtime)
    print(
        f"confirmed {_Keys([key]).show(key)} ({pending.tool}) for {principal}: arguments"
        f" {digest}; the call is ready to run"
    )


async def _deny(
    url: str, turn: TurnRef, *, call_id: str, response: str | None, principal: str, reason: str
) -> None:
    async with _runtime_on(url) as runtime:
        await _settle(runtime)
        key = _call_of_turn(runtime, turn, call_id, response)
        await runtime.deny(key, principal=principal, reason=reason)
        await _settle(runtime)
        row = runtime.projections.ledger.row(key)
    state = "-" if row is None else row.state
    print(f"denied {_Keys([key]).show(key)} for {principal}: the call is {state}, it never runs")


# --- execute ---------------------------------------------------------------------------------


class _Recorder:
    """An executor that runs nothing: it only records the claims it was handed."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def __call__(self, dispatch: Dispatch) -> None:
        self.ran.append(dispatch.claim_id)


Executed = tuple[CallKey, dict[str, JSON]]
"""A call the command tried to run, and what it reports of it (as JSON, never a value)."""


async def _execute_ready(
    runtime: Runtime, recorder: _Recorder, *, turn: TurnRef | None = None
) -> list[Executed]:
    """Claim and run every ready call (of ``turn``, if given) once with the recorder; what
    became of each."""
    await _settle(runtime)
    results: list[Executed] = []
    for key in runtime.projections.queue.ready():
        if turn is not None and key.turn_ref != turn:
            continue
        row = runtime.projections.ledger.row(key)
        entry = _key_json(key)
        entry["tool"] = "" if row is None else row.tool
        try:
            dispatch = await runtime.execute(key, recorder, name=EXECUTOR)
        except ClaimRefused as refused:
            entry["refused"] = refused.reason
            entry["detail"] = refused.detail
        else:
            entry["tool"] = dispatch.tool
            entry["arguments_digest"] = dispatch.arguments_digest
            entry["claim_id"] = dispatch.claim_id
        results.append((key, entry))
    await _settle(runtime)
    return results


def _execution_lines(results: Sequence[Executed], keys: _Keys) -> list[str]:
    cells = [
        [
            "refused" if "refused" in entry else "executed",
            keys.show(key),
            str(entry["tool"]),
            f"{entry['refused']}: {entry['detail']}"
            if "refused" in entry
            else f"arguments {entry['arguments_digest']}",
        ]
        for key, entry in results
    ]
    return _table(("", "call", "tool", ""), cells, set())[1:]


async def _execute(url: str, *, as_json: bool) -> None:
    recorder = _Recorder()
    async with _runtime_on(url) as runtime:
        results = await _execute_ready(runtime, recorder)
        keys = _Keys(row.key for row in runtime.projections.ledger.rows())
    if as_json:
        for _, entry in results:
            print(json.dumps(entry, ensure_ascii=False))
        return
    if not results:
        print("nothing to execute: no call is ready")
        return
    print(
        f"{keys.legend()}; executor {EXECUTOR!r}, which records that it ran and nothing else,"
        f" ran {_times(len(recorder.ran))}"
    )
    for line in _execution_lines(results, keys):
        print(line)


# --- feed ------------------------------------------------------------------------------------

FEED_BATCH = 512
"""Events appended to the log at a time while feeding a stream file."""


@frozen(kw_only=True)
class _FeedRequest:
    log: str
    stream: Path
    provider: str
    tools: Path
    turn: TurnRef
    principal: str
    execute: bool
    as_json: bool
    traceparent: str | None = None
    tracestate: str | None = None


async def _open_turn(
    runtime: Runtime, request: _FeedRequest, tools: Sequence[str], trace: IncomingTrace
) -> None:
    """Start the turn, or join it when an earlier feed started it (a reconnect)."""
    principal = runtime.turn_principal(request.turn)
    if principal is None:
        await runtime.start_turn(
            tenant=request.turn.tenant,
            conversation=request.turn.conversation,
            turn=request.turn.turn,
            principal=request.principal,
            tools=tools,
            trace=trace,
        )
    elif principal != request.principal:
        raise RefusedError(f"turn {request.turn.stream!r} belongs to another principal")


def _adapt(runtime: Runtime, request: _FeedRequest, stream: StreamFile) -> list[Event]:
    """The stream file through its provider's adapter; a resumable stream of the turn that an
    earlier feed lost is resumed first, so that the file continues it."""
    adapter = _adapter(request, stream)
    events: list[Event] = []
    lost = {
        response: last
        for response, last in runtime.resumable_streams(request.turn).items()
        if last is not None
    }
    if lost and isinstance(adapter, OpenAIResponsesAdapter):
        if len(lost) > 1:
            names = ", ".join(sorted(response.response for response in lost))
            raise UnreadableInput(
                f"the turn has {len(lost)} lost streams ({names}): a continuation file cannot"
                " say which one it continues"
            )
        [(response, last)] = lost.items()
        events += adapter.resume(
            response.response, after_sequence=last, calls=runtime.resumable_calls(response)
        )
    read = _read_through(adapter, request, stream)
    if not read:
        raise _no_stream(request)
    return events + read


def _adapter(request: _FeedRequest, stream: StreamFile) -> StreamAdapter:
    return PROVIDERS[request.provider](request.turn, stream_name(request.provider, stream))


def _no_stream(request: _FeedRequest) -> UnreadableInput:
    # A wrong file or a wrong --provider: a turn started for it would stay empty.
    return UnreadableInput(
        f"{request.stream} holds no event of a {request.provider} stream: nothing was fed"
        " (is --provider right?)"
    )


def _read_through(adapter: StreamAdapter, request: _FeedRequest, stream: StreamFile) -> list[Event]:
    """What the adapter makes of the stream file's content, to its end."""
    events: list[Event] = []
    try:
        if stream.raw is not None:
            events += adapter.feed(stream.raw)
        for event in stream.events:
            events += adapter.feed_event(event)
        events += adapter.close()
    except (TypeError, ValueError) as error:
        raise UnreadableInput(
            f"{request.stream} is not a {request.provider} stream: {error}"
        ) from None
    return events


async def _feed(request: _FeedRequest) -> None:
    stream = read_stream(request.stream)
    declarations = read_tools(request.tools)
    # Before a log is opened (or created). A Responses file may continue a stream the log
    # holds as lost, which only its resumed adapter reads: it is judged once resumed.
    adapter = _adapter(request, stream)
    if not isinstance(adapter, OpenAIResponsesAdapter) and not _read_through(
        adapter, request, stream
    ):
        raise _no_stream(request)
    # Feeding starts the turn: the log is created if need be.
    async with _runtime_on(request.log, create=True, tools=declarations) as runtime:
        await _settle(runtime)
        events = _adapt(runtime, request, stream)
        incoming = read_trace_headers(request.traceparent, request.tracestate)
        if incoming.problem is not None:
            print(f"inert: {incoming.problem}; the stream starts a new trace", file=sys.stderr)
        trace = incoming.context
        names = [declaration.name for declaration in declarations]
        await _open_turn(runtime, request, names, incoming)
        for start in range(0, len(events), FEED_BATCH):
            await runtime.feed(events[start : start + FEED_BATCH], trace=trace)
        await _settle(runtime)
        results = (
            await _execute_ready(runtime, _Recorder(), turn=request.turn) if request.execute else []
        )
        rows = list(_turn_rows(runtime, request.turn).values())
    if request.as_json:
        for row in rows:
            print(json.dumps(row.to_json(), ensure_ascii=False))
        return
    turn = request.turn
    print(
        f"fed {len(events)} events from {request.stream.name} ({request.provider}) into turn"
        f" {_part(turn.tenant)}/{_part(turn.conversation)}/{_part(turn.turn)}:"
        f" {len(rows)} {'call' if len(rows) == 1 else 'calls'}"
    )
    if rows:
        shown = _Keys(row.key for row in rows)
        table = _table(_LEDGER_HEADER, [_ledger_cells(shown, row) for row in rows], {3, 4})
        for line in [shown.legend(), *table]:
            print(line)
    for line in _execution_lines(results, _Keys(row.key for row in rows)):
        print(line)


# --- demo ------------------------------------------------------------------------------------

TENANT = "acme"
PRINCIPAL = "user:alice"

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


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


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
        case "dispatched":
            return f"dispatched, outcome {row.outcome or 'not yet known'}"
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
    print(
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
    print(
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
    print(
        f"turn t3: send_email streamed, response completed: {_what_became_of(runtime, email.key)}"
    )

    # A call still streaming when the process stops.
    turn = await _start(runtime, "c4", "t4")
    weather = b'{"city": "Valparaiso"}'
    open_call = calls["t4"] = _Streamed(
        turn, "resp_4", "fc_1", tool="get_weather", arguments=weather
    )
    for event in (open_call.opened(), open_call.fragment(1), open_call.fragment(2)):
        await runtime.feed([event])
    await runtime.settle()
    print(
        f"turn t4: get_weather opened, 2 of its {len(open_call.fragments)} fragments arrived,"
        f" then the process stops; the call is {_what_became_of(runtime, open_call.key)}"
    )
    return await runtime.log.head()


async def _demo_after_restart(runtime: Runtime, calls: dict[str, _Streamed]) -> None:
    # (c, continued) A confirmation binds the person and the exact arguments.
    email = calls["t3"].key
    digest = await _validated_digest(runtime, email)
    try:
        await runtime.confirm(email, principal="user:mallory", arguments_digest=digest)
    except ConfirmationRefused as refused:
        print(f"turn t3: user:mallory tries to confirm send_email: refused ({refused.reason})")
    else:
        print("turn t3: user:mallory tries to confirm send_email: ACCEPTED, which is a bug")
    await runtime.confirm(email, principal=PRINCIPAL, arguments_digest=digest)
    await runtime.settle()
    print(
        f"turn t3: {PRINCIPAL} confirms send_email for arguments {digest[:19]}...:"
        f" {_what_became_of(runtime, email)}"
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
    print(
        f"turn t5: {PRINCIPAL} cancels the turn while get_weather is {collecting}: it was"
        f" {cancelled}; its late fragments and end event were counted, not stored"
        f" ({discarded} events discarded{rejected})"
    )

    # (e) A provider delivers a terminal event twice: the same end event, fed again.
    first = calls["t1a"]
    position = await runtime.log.head()
    await runtime.feed([first.ended()])
    await runtime.settle()
    reasons = ", ".join(await _rejections(runtime, first.key, position)) or "not rejected"
    print(
        f"turn t1: fc_1's end event delivered a second time: rejected ({reasons});"
        f" the call is still {_what_became_of(runtime, first.key)}"
    )


async def _demo(url: str, tracer_provider: TracerProvider | None = None) -> None:
    async with open_log(url) as log:
        stored = await log.head()
    if stored:
        raise ConfigurationError(f"the demo needs an empty log; {url} holds {stored} events")
    print(f"inert demo on {url}")
    names = ", ".join(
        tool.name + (" (needs confirmation)" if tool.needs_confirmation else "")
        for tool in DEMO_TOOLS
    )
    print(f"tools: {names}; every turn is {PRINCIPAL}'s, in tenant {TENANT}")
    calls: dict[str, _Streamed] = {}
    async with open_runtime(log=url, tools=DEMO_TOOLS, tracer_provider=tracer_provider) as runtime:
        stored = await _demo_before_restart(runtime, calls)

    async with open_runtime(log=url, tools=DEMO_TOOLS, tracer_provider=tracer_provider) as runtime:
        await runtime.settle()
        print(
            f"restart: runtime closed, log closed; a new runtime rebuilt"
            f" {len(runtime.projections.ledger.rows())} calls from the {stored} events of the log"
            f" and recorded turn t4's stream as lost (its feeder died with the old process):"
            f" the call was {_what_became_of(runtime, calls['t4'].key)}"
        )
        await _demo_after_restart(runtime, calls)

        shown = _Keys(row.key for row in runtime.projections.ledger.rows())
        recorder = _Recorder()
        results = await _execute_ready(runtime, recorder)
        print(
            f"execute: {len(results)} ready calls claimed; {EXECUTOR!r}, an executor that"
            f" records that it ran and nothing else, ran {_times(len(recorder.ran))}:"
        )
        for line in _execution_lines(results, shown):
            print("  " + line)
        first = calls["t1a"].key
        try:
            await runtime.claim(first, executor="someone-else")
        except ClaimRefused as refused:
            print(f"a second claim of {shown.show(first)}: refused ({refused.reason})")
        else:
            print(f"a second claim of {shown.show(first)}: DISPATCHED AGAIN, which is a bug")
        await runtime.settle()

        print("ledger:")
        for line in ledger_table(runtime.projections.ledger):
            print("  " + line)
        print(f"digest {runtime.digest()}")


# --- the command -----------------------------------------------------------------------------

MAX_TEXT = 4096
"""The most characters an identity, a principal or a reason given on the command line holds."""

MAX_SEEDS = 1_000_000
MAX_KEYS = 100_000
MAX_WORKERS = 256

# Lone surrogates are the bytes of an argument that were not UTF-8 (Python's surrogateescape).
_NOT_TEXT = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _text(value: str) -> str:
    """An identity, a principal or a reason: written to the log and printed back, so valid
    Unicode without control characters, and bounded."""
    found = _NOT_TEXT.search(value)
    if found is not None:
        character = found.group()
        if "\ud800" <= character <= "\udfff":
            raise argparse.ArgumentTypeError("not valid UTF-8 text")
        raise argparse.ArgumentTypeError(
            f"holds the control character U+{ord(character):04X} at {found.start()}"
        )
    if len(value) > MAX_TEXT:
        raise argparse.ArgumentTypeError(f"{len(value)} characters, the limit is {MAX_TEXT}")
    return value


def _path(value: str) -> Path:
    """A file name: any bytes the system takes, which excludes NUL."""
    if "\0" in value:
        raise argparse.ArgumentTypeError("a file name holds no NUL character")
    return Path(value)


def _count(most: int) -> Callable[[str], int]:
    """The reader of a count from 1 to ``most``: beyond, a seed or a worker too many would
    run for ever or exhaust the machine."""

    def count(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = 0
        if not 1 <= number <= most:
            raise argparse.ArgumentTypeError(f"a whole number from 1 to {most:,}")
        return number

    return count


def _control_arguments(control: argparse.ArgumentParser) -> None:
    control.add_argument(
        "action",
        choices=[
            "quarantine-response",
            "disable-tool",
            "enable-tool",
            "stop-tenant",
            "resume-tenant",
        ],
    )
    control.add_argument("target", metavar="RESPONSE|TOOL|TENANT", type=_text)
    control.add_argument(
        "--tenant", type=_text, help="the tenant a quarantine or a tool control is for"
    )
    control.add_argument("--operator", type=_text, required=True, help="the operator principal")
    control.add_argument("--reason", type=_text, required=True, help="why, for the audit")


def _feed_arguments(feed: argparse.ArgumentParser) -> None:
    feed.add_argument("file", metavar="FILE", type=_path, help="the stream")
    feed.add_argument("--provider", required=True, choices=sorted(PROVIDERS))
    feed.add_argument(
        "--tools",
        metavar="TOOLS.json",
        type=_path,
        required=True,
        help="the tool declarations offered, in any provider's format",
    )
    feed.add_argument("--tenant", type=_text, default="default")
    feed.add_argument("--conversation", type=_text, default="default")
    feed.add_argument("--turn", type=_text, default="1")
    feed.add_argument(
        "--principal", type=_text, default="cli", help="the principal the turn belongs to"
    )
    feed.add_argument(
        "--execute",
        action="store_true",
        help="run every ready call of the turn that needs no confirmation with an executor"
        " that only records that it ran",
    )
    feed.add_argument("--json", action="store_true", help="the turn's ledger rows, one per line")
    feed.add_argument("--traceparent", help="the caller's W3C traceparent, continued by the turn")
    feed.add_argument("--tracestate", help="the caller's W3C tracestate")


def _simulate(arguments: argparse.Namespace) -> None:
    if arguments.list_plants:
        for name in PLANTS:
            print(f"{name}: {plant_description(name)}")
        return
    if arguments.plant is not None:
        plant_description(arguments.plant)
    results = simulate_many(
        range(arguments.seed, arguments.seed + arguments.seeds),
        keys=arguments.keys,
        plant=arguments.plant,
        retention=arguments.retention,
        workers=arguments.workers,
    )
    for result in results:
        if arguments.json:
            print(
                json.dumps(
                    {
                        "seed": result.seed,
                        "keys": result.keys,
                        "plant": result.plant,
                        "retention": result.retention,
                        "steps": result.steps,
                        "actions": result.actions,
                        "restarts": result.restarts,
                        "states": result.states,
                        "log_hash": result.log_hash,
                        "violations": [
                            {
                                "invariant": violation.invariant,
                                "key": violation.key,
                                "position": violation.position,
                                "detail": violation.detail,
                            }
                            for violation in result.violations
                        ],
                        "command": result.command,
                    },
                    sort_keys=True,
                )
            )
            continue
        for violation in result.violations:
            print(f"seed {result.seed}: {violation.line()}")
        if result.violations:
            print(f"seed {result.seed}: replay it with: {result.command}")
    steps = sum(result.steps for result in results)
    found = sum(len(result.violations) for result in results)
    summary = (
        f"{len(results)} seeds run twice, {arguments.keys} call keys each:"
        f" {steps:,} steps checked, {found} violations"
    )
    print(summary, file=sys.stderr if arguments.json else sys.stdout)
    failed = [result for result in results if result.violations]
    if failed:
        raise SimulationFailed(
            f"{found} violations in {len(failed)} of {len(results)} seeds; replay the first"
            f" with: {failed[0].command}"
        )


def _simulate_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--seeds", type=_count(MAX_SEEDS), default=1, help="how many seeds (default 1)"
    )
    sub.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    sub.add_argument(
        "--keys",
        type=_count(MAX_KEYS),
        default=200,
        help="concurrent call keys per seed (default 200)",
    )
    sub.add_argument("--plant", metavar="NAME", type=_text, help="plant a bug (see --list-plants)")
    sub.add_argument("--list-plants", action="store_true", help="list the bugs that can be planted")
    sub.add_argument(
        "--retention",
        choices=sorted(RETENTIONS),
        default="default",
        help="the runtime's retention policy (default: the runtime's own)",
    )
    sub.add_argument(
        "--workers",
        type=_count(MAX_WORKERS),
        default=1,
        help="processes running seeds (default 1)",
    )
    sub.add_argument("--json", action="store_true", help="one JSON object per seed")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inert",
        description="Streamed LLM tool calls that cannot act before they are finished,"
        " validated and still wanted.",
        epilog=(
            "Log URLs: memory://, memory://NAME, sqlite:///relative.db, sqlite:////abs.db,"
            " postgresql://USER@HOST:PORT/DATABASE?schema=NAME"
        ),
    )
    parser.add_argument("--version", action="version", version=f"inert {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=help_text, description=help_text)

    def log_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--log", metavar="URL", required=True, help="the log URL")

    def log_command(name: str, help_text: str, json_help: str) -> argparse.ArgumentParser:
        sub = command(name, help_text)
        log_option(sub)
        sub.add_argument("--json", action="store_true", help=json_help)
        return sub

    ledger = command("ledger", "print the assembly ledger of a log: one line per call key")
    log_option(ledger)
    ledger.add_argument("--json", action="store_true", help="one JSON object per line")
    ledger.add_argument(
        "--history", action="store_true", help="also each key's transitions, rejections included"
    )

    log_command(
        "replay",
        "rebuild every call and projection from a log; print counts and the digest",
        "one JSON object",
    )
    log_command(
        "verify",
        "check a log whole: the storage's own checks, every row's position and checksum, a"
        " replay of every decision; exits non-zero and lists what is wrong if anything is",
        "one JSON object",
    )

    cancel = command(
        "cancel-turn",
        "cancel a turn for its principal (opens a runtime on the log, as a restart does)",
    )

    def turn_options(sub: argparse.ArgumentParser) -> None:
        log_option(sub)
        sub.add_argument("--tenant", type=_text, required=True)
        sub.add_argument("--conversation", type=_text, required=True)
        sub.add_argument("--turn", type=_text, required=True)

    turn_options(cancel)
    cancel.add_argument(
        "--principal", type=_text, required=True, help="the principal the turn belongs to"
    )
    cancel.add_argument("--reason", type=_text, default="", help="why (no argument values)")

    def call_options(sub: argparse.ArgumentParser) -> None:
        turn_options(sub)
        sub.add_argument("--call-id", type=_text, required=True, help="the provider's call id")
        sub.add_argument(
            "--response",
            type=_text,
            help="the provider response, where the turn reuses the call id",
        )
        sub.add_argument(
            "--principal", type=_text, required=True, help="the principal the turn belongs to"
        )

    confirm = command(
        "confirm",
        "confirm a call waiting for its principal's confirmation (opens a runtime on the log)",
    )
    call_options(confirm)
    confirm.add_argument(
        "--arguments-digest",
        type=_text,
        help="the digest of the arguments the person saw (default: the call's own)",
    )
    deny = command("deny", "refuse a call for its principal: it is cancelled and never runs")
    call_options(deny)
    deny.add_argument("--reason", type=_text, default="", help="why (no argument values)")

    log_command(
        "audit", "every operator control, and the calls each ended", "one JSON object per control"
    )

    control = command(
        "control",
        f"give an operator control (opens a runtime on the log; {OPERATORS_VARIABLE} names the"
        " operators)",
    )
    _control_arguments(control)
    log_option(control)

    log_command(
        "execute",
        "claim every ready call once with an executor that only records that it ran"
        " (opens a runtime on the log, as a restart does)",
        "one JSON object per line",
    )

    feed = command(
        "feed",
        "feed a recorded provider stream (SSE text, JSON lines or raw wire bytes) into a turn",
    )
    _feed_arguments(feed)
    log_option(feed)

    demo = command("demo", "stream tool calls of several turns through a runtime, with a restart")
    demo.add_argument(
        "--log",
        metavar="URL",
        help="an empty log (default: a new SQLite file in a temporary folder)",
    )
    demo.add_argument(
        "--traces",
        metavar="FILE",
        type=_path,
        help="write the demo's spans there as OTLP JSON (without it: OTLP/HTTP to the"
        " OTEL_EXPORTER_OTLP_ENDPOINT, when set)",
    )
    _simulate_arguments(
        command(
            "simulate",
            "drive a runtime through seeded awkward event orders, each seed twice, and check"
            " every invariant of the contract after every step",
        )
    )
    return parser


def _turn_option(arguments: argparse.Namespace) -> TurnRef:
    try:
        return TurnRef(
            tenant=arguments.tenant, conversation=arguments.conversation, turn=arguments.turn
        )
    except ValueError as error:
        raise ConfigurationError(f"the turn's identity: {error}") from None


def _run(arguments: argparse.Namespace) -> None:
    match arguments.command:
        case "ledger":
            trio.run(
                partial(_ledger, arguments.log, as_json=arguments.json, history=arguments.history)
            )
        case "replay":
            trio.run(partial(_replay, arguments.log, as_json=arguments.json))
        case "verify":
            trio.run(partial(_verify, arguments.log, as_json=arguments.json))
        case "cancel-turn":
            turn = _turn_option(arguments)
            trio.run(
                partial(
                    _cancel_turn,
                    arguments.log,
                    turn,
                    principal=arguments.principal,
                    reason=arguments.reason,
                )
            )
        case "execute":
            trio.run(partial(_execute, arguments.log, as_json=arguments.json))
        case "audit":
            trio.run(partial(_audit, arguments.log, as_json=arguments.json))
        case "control":
            trio.run(
                partial(
                    _control,
                    arguments.log,
                    arguments.action,
                    arguments.target,
                    tenant=arguments.tenant,
                    operator=arguments.operator,
                    reason=arguments.reason,
                )
            )
        case "confirm":
            trio.run(
                partial(
                    _confirm,
                    arguments.log,
                    _turn_option(arguments),
                    call_id=arguments.call_id,
                    response=arguments.response,
                    principal=arguments.principal,
                    arguments_digest=arguments.arguments_digest,
                )
            )
        case "deny":
            trio.run(
                partial(
                    _deny,
                    arguments.log,
                    _turn_option(arguments),
                    call_id=arguments.call_id,
                    response=arguments.response,
                    principal=arguments.principal,
                    reason=arguments.reason,
                )
            )
        case "feed":
            request = _FeedRequest(
                log=arguments.log,
                stream=arguments.file,
                provider=arguments.provider,
                tools=arguments.tools,
                turn=_turn_option(arguments),
                principal=arguments.principal,
                execute=arguments.execute,
                as_json=arguments.json,
                traceparent=arguments.traceparent,
                tracestate=arguments.tracestate,
            )
            trio.run(_feed, request)
        case "simulate":
            _simulate(arguments)
        case "demo":
            provider = (
                provider_for_file(arguments.traces)
                if arguments.traces
                else provider_from_environment()
            )
            try:
                if arguments.log is not None:
                    # A fresh memory log would be lost at the restart: give it a name.
                    url = arguments.log
                    if url == "memory://":
                        url = "memory://inert-demo-" + secrets.token_hex(4)
                    trio.run(_demo, url, provider)
                else:
                    with tempfile.TemporaryDirectory(prefix="inert-demo-") as folder:
                        trio.run(_demo, "sqlite:///" + os.path.join(folder, "demo.db"), provider)
            finally:
                if provider is not None:
                    provider.shutdown()


MAX_MESSAGE = 400
"""The most characters of an error message printed."""


def _one_line(error: BaseException) -> str:
    """An error's message on one line of bounded length: a driver's message may span lines,
    and a value quoted in one may be long."""
    text = " ".join(str(error).split())
    if len(text) > MAX_MESSAGE:
        left_out = len(text) - MAX_MESSAGE + 40
        text = f"{text[: MAX_MESSAGE - 120]} [{left_out} characters left out] {text[-80:]}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``inert`` command; its exit status."""
    arguments = _parser().parse_args(argv)
    failed = False
    try:
        _run(arguments)
    except* InertError as errors:
        failed = True
        for error in _leaves(errors):
            print(f"inert: {_one_line(error)}", file=sys.stderr)
    return 1 if failed else 0


def _leaves(group: BaseExceptionGroup[InertError]) -> list[InertError]:
    found: list[InertError] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            found.extend(_leaves(error))
        else:
            found.append(error)
    return found


def main_entry() -> None:
    for stream in (sys.stdout, sys.stderr):
        # A file name that is not UTF-8 is printed escaped, not a UnicodeEncodeError.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``inert ledger | head``): stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    except KeyboardInterrupt:
        print("inert: interrupted", file=sys.stderr)
        status = 130
    except Exception as error:
        # Every failure an input can cause is an InertError; anything else is a bug, said in
        # one line rather than a traceback.
        print(
            f"inert: internal error, a bug of inert ({type(error).__name__}: {_one_line(error)})",
            file=sys.stderr,
        )
        status = 70
    sys.exit(status)
