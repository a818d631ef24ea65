"""Golden logs: logs this version wrote, kept as text, that every later version must replay.

A golden log is one JSON Lines file of ``tests/golden``: a header line (the format, the inert
version that wrote it, what happened, how many events, the state digest of the projections
folded over it, the ledger's digest and rows, the call limits the runtime ran with, and the
names of the columns), then one line per stored row: the columns of ``StoredRecord`` as an
array (payloads in base64, digests in hex). Rows are what any backend stores, so a memory store
loads them as they are.

``replay`` is the check a later version must pass: every row decodes with the current codec (an
older schema version through its upcasters), a ``CallFold`` over all of them finds every
recorded decision to be the one it makes itself, and the projections reach the recorded digest
and ledger. ``main`` records the logs of every scenario below; run it with ``make golden``. It
writes only logs that do not exist yet, unless asked to record one again by name.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing
from adapter_support import FIXTURES, declarations, feed_stream, provider_adapter
from attrs import define, field, frozen

import inert
from inert import (
    ArgumentLimits,
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    ClaimRefused,
    ConfirmationRefused,
    Dispatch,
    Event,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    Retention,
    Runtime,
    StreamLost,
    StreamResumed,
    TerminalRef,
    ToolDeclaration,
    TraceContext,
    TurnRef,
    ValidationResult,
    open_runtime,
)
from inert.actors import CallFold, ValidationRequested
from inert.actors._call import DIGEST_KEY
from inert.adapters import (
    PROVIDERS,
    StreamAdapter,
)
from inert.events import DEFAULT_CODEC, FailReason
from inert.log import MemoryLog, MemoryStore
from inert.log._records import StoredRecord, check_page, decode_record, with_checksum
from inert.projections import Projections, Snapshot, state_digest
from inert.testing import seeded_scheduling
from inert.testing.contracts import SCENARIOS, GatedCheck, Scenario, run_scenario
from inert.testing.contracts import TOOLS as AWKWARD_TOOLS

FORMAT = 1
GOLDEN = Path(__file__).resolve().parent / "golden"

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
"""The wall-clock time at Trio's time zero while recording: every log starts at the same time."""


# --- the file format -------------------------------------------------------------------------


def limits_json(limits: CallLimits) -> dict[str, int]:
    """The call limits as JSON (seconds for durations): a replay must decide with the same."""
    return {
        "max_bytes": limits.arguments.max_bytes,
        "max_depth": limits.arguments.max_depth,
        "max_string_length": limits.arguments.max_string_length,
        "max_object_keys": limits.arguments.max_object_keys,
        "max_fragments": limits.max_fragments,
        "idle_timeout": int(limits.idle_timeout.total_seconds()),
        "confirmation_lifetime": int(limits.confirmation_lifetime.total_seconds()),
        "ready_lifetime": int(limits.ready_lifetime.total_seconds()),
        "max_live_per_turn": limits.max_live_per_turn,
        "max_live_per_tenant": limits.max_live_per_tenant,
    }


def limits_from_json(value: dict[str, int]) -> CallLimits:
    return CallLimits(
        arguments=ArgumentLimits(
            max_bytes=value["max_bytes"],
            max_depth=value["max_depth"],
            max_string_length=value["max_string_length"],
            max_object_keys=value["max_object_keys"],
        ),
        max_fragments=value["max_fragments"],
        idle_timeout=timedelta(seconds=value["idle_timeout"]),
        confirmation_lifetime=timedelta(seconds=value["confirmation_lifetime"]),
        # Logs recorded before ready calls had a lifetime hold none of rules 8.
        ready_lifetime=timedelta(
            seconds=value.get("ready_lifetime", CallLimits().ready_lifetime.total_seconds())
        ),
        max_live_per_turn=value["max_live_per_turn"],
        max_live_per_tenant=value["max_live_per_tenant"],
    )


COLUMNS = list(StoredRecord._fields)
"""The columns of a row, in the order each row line lists them (named once, in the header)."""


def row_json(row: StoredRecord) -> list[Any]:
    """A stored row as a JSON array of its columns, bytes in base64 (payload) or hex (digest)."""
    columns: dict[str, Any] = row._asdict()
    columns["payload"] = None if row.payload is None else base64.b64encode(row.payload).decode()
    columns["digest"] = None if row.digest is None else row.digest.hex()
    return list(columns.values())


LEGACY_COLUMNS = COLUMNS[:-1]
"""The columns of the logs written before rows had checksums: loading one computes them, as
opening an older log file upgrades it."""


def row_from_json(value: list[Any], names: list[str]) -> StoredRecord:
    if not isinstance(value, list) or len(value) != len(names):
        raise ValueError(f"a row lists the {len(names)} columns {names}, not {value!r}")
    columns = dict(zip(names, value, strict=True))
    payload, digest = columns["payload"], columns["digest"]
    columns["payload"] = None if payload is None else base64.b64decode(payload, validate=True)
    columns["digest"] = None if digest is None else bytes.fromhex(digest)
    if names == LEGACY_COLUMNS:
        return with_checksum(list(columns.values()))
    return StoredRecord(**columns)


@frozen(kw_only=True)
class GoldenLog:
    """A golden log as read back: its header and its rows."""

    header: dict[str, Any]
    rows: list[StoredRecord]

    @property
    def limits(self) -> CallLimits:
        return limits_from_json(self.header["limits"])


def dump(records: Sequence[StoredRecord], *, scenario: str, limits: CallLimits) -> str:
    """A log as the text of a golden file, its header made by replaying it."""
    replayed = replay(records, limits)
    header: dict[str, Any] = {
        "format": FORMAT,
        "written_by": inert.__version__,
        "scenario": scenario,
        "events": len(records),
        "digest": replayed.digest,
        "ledger": replayed.ledger,
        "limits": limits_json(limits),
        "columns": COLUMNS,
    }
    lines = [header, *(row_json(row) for row in records)]
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)


def load(path: Path) -> GoldenLog:
    """Read a golden file back."""
    header, *rows = (json.loads(line) for line in path.read_text().splitlines())
    names = header.get("columns")
    if header.get("format") != FORMAT or names not in (COLUMNS, LEGACY_COLUMNS):
        raise ValueError(
            f"{path.name}: format {header.get('format')!r} with columns {names},"
            f" not format {FORMAT} with {COLUMNS} (or, before checksums, {LEGACY_COLUMNS})"
        )
    return GoldenLog(header=header, rows=[row_from_json(row, names) for row in rows])


@frozen(kw_only=True)
class Replayed:
    """What folding a log gives: the state digest and the ledger (the digest of its whole
    snapshot, histories included, and its rows: how each call ended, readable in a diff)."""

    digest: str
    ledger: Snapshot
    unwritten: dict[str, int]
    """Calls whose decisions the fold made and the log lacks (stream: how many)."""


def replay(records: Iterable[StoredRecord], limits: CallLimits) -> Replayed:
    """Decode every row, fold the calls (raising ``ReplayDivergence`` where a recorded decision
    is not the one the decider makes) and the projections; every row's checksum and position
    is checked first (``LogDamaged``)."""
    fold = CallFold(limits, digest_key=GOLDEN_DIGEST_KEY)
    projections = Projections()
    for position, row in enumerate(records, 1):
        check_page([row], position)
        recorded = decode_record(DEFAULT_CODEC, row)
        fold.apply(recorded)
        projections.apply(recorded)
    unwritten = {
        key.stream: len(record.expected) for key, record in fold.records.items() if record.expected
    }
    ledger = projections.ledger
    return Replayed(
        digest=projections.digest(),
        ledger={"digest": state_digest(ledger), "rows": ledger.snapshot()["rows"]},
        unwritten=unwritten,
    )


def golden_paths() -> list[Path]:
    return sorted(GOLDEN.glob("*.jsonl"))


# --- recording -------------------------------------------------------------------------------


def _clock() -> datetime:
    return EPOCH + timedelta(seconds=trio.current_time())


TENANT = "acme"
OTHER_TENANT = "globex"
CONVERSATION = "c1"
PRINCIPAL = "user:alice"
OPERATOR = "ops:carol"
WEATHER = b'{"city": "Paris", "unit": "celsius"}'
EMAIL = b'{"to": "bob@example.com", "body": "lunch at noon?"}'

TOOLS = [
    ToolDeclaration(
        name="get_weather",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    ),
    ToolDeclaration(
        name="send_email",
        parameters={
            "type": "object",
            "properties": {"to": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to"],
            "additionalProperties": False,
        },
        needs_confirmation=True,
    ),
]


KEEP = Retention(fragments=False, arguments=False)
"""Most logs are recorded with retention off: a replay decides a call again only from inputs
the log still holds (a call whose fragments were redacted takes its recorded decisions as they
are), so only an unredacted log checks every decision against the decider of a later version."""

REDACT = Retention()
"""The default retention, for the logs named ``-redacted`` and the retention scenarios: they
check that a redacted log still replays to its digest."""


GOLDEN_SECRET = hashlib.sha256(b"inert golden logs").digest()
"""The secret of every golden log's store: a turn of rules 10 on keys its digests by the log,
so that its replay, by a fold or a runtime, needs the log's key (test data, never a real log's)."""


def golden_store() -> MemoryStore:
    """An empty store with the golden logs' identity and secret."""
    return MemoryStore(identity="log-golden", secret=GOLDEN_SECRET)


GOLDEN_DIGEST_KEY = MemoryLog(golden_store()).key(DIGEST_KEY)
"""The key of the golden logs' arguments digests."""


@define
class Lab:
    """Runtimes on one memory store, for one scenario, and the digest the last one reached."""

    limits: CallLimits
    retention: Retention
    store: MemoryStore = field(factory=golden_store)
    live_digest: str = ""

    @asynccontextmanager
    async def runtime(self, **options: Any) -> AsyncIterator[Runtime]:
        """A runtime on the store (the recording tools and retention unless given others),
        settled when the block ends, its digest kept."""
        options.setdefault("tools", TOOLS)
        options.setdefault("retention", self.retention)
        log = MemoryLog(self.store, clock=_clock)
        async with open_runtime(log=log, limits=self.limits, **options) as runtime:
            yield runtime
            await runtime.settle()
            self.live_digest = runtime.digest()


@frozen(kw_only=True)
class Recording:
    """One golden log: its file name, what happens in it, and the code that makes it happen.

    ``autojump``: time jumps to the next timer whenever everything waits (timeouts and expiries
    happen); otherwise it stands still, for scenarios that wait on each other's events.
    """

    name: str
    scenario: str
    run: Callable[[Lab], Awaitable[None]]
    limits: CallLimits = field(factory=CallLimits)
    retention: Retention = KEEP
    autojump: bool = True


def record(recording: Recording) -> tuple[list[StoredRecord], str]:
    """Run a scenario under a mock clock and seeded scheduling; its rows and live digest."""
    lab = Lab(limits=recording.limits, retention=recording.retention)
    clock = (
        trio.testing.MockClock(autojump_threshold=0)
        if recording.autojump
        else trio.testing.MockClock()
    )
    with seeded_scheduling(0):
        trio.run(recording.run, lab, clock=clock)
    return list(lab.store.rows), lab.live_digest


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# --- building blocks of the runtime scenarios ------------------------------------------------


def key_of(call: str, *, turn: str = "t1", response: str = "r1", tenant: str = TENANT) -> CallKey:
    return CallKey(
        tenant=tenant,
        conversation=CONVERSATION,
        turn=turn,
        response=response,
        item=f"item-{call}",
        call=call,
    )


def call_events(
    key: CallKey, data: bytes = WEATHER, *, tool: str = "get_weather", parts: int = 2
) -> list[Event]:
    """A whole call: opened, its fragments at their offsets, its end event (sequences
    0..n+1)."""
    size = -(-len(data) // parts)
    pieces = [data[index : index + size] for index in range(0, len(data), size)]
    events: list[Event] = [CallOpened(key=key, tool=tool, sequence=0)]
    for sequence, piece in enumerate(pieces, start=1):
        events.append(fragment(key, piece, (sequence - 1) * size, sequence))
    events.append(CallEnded(key=key, terminal=TerminalRef(sequence=len(pieces) + 1)))
    return events


def fragment(
    key: CallKey, data: bytes, offset: int, first: int, last: int | None = None
) -> ArgumentsAppended:
    """Bytes of a call at their offset, numbered ``first..last`` (``first`` alone if not)."""
    last = first if last is None else last
    return ArgumentsAppended(
        key=key,
        data=data,
        offset=offset,
        first_sequence=first,
        last_sequence=last,
        fragments=last - first + 1,
    )


def response_end(
    key: CallKey, reason: ResponseEndReason = ResponseEndReason.COMPLETED, detail: str = ""
) -> Event:
    return ResponseEnded(
        response=key.response_ref, reason=reason, terminal=TerminalRef(digest="end"), detail=detail
    )


async def start(
    runtime: Runtime,
    turn: str = "t1",
    *,
    tenant: str = TENANT,
    principal: str = PRINCIPAL,
    trace: TraceContext | None = None,
) -> TurnRef:
    return await runtime.start_turn(
        tenant=tenant, conversation=CONVERSATION, turn=turn, principal=principal, trace=trace
    )


async def ready(
    runtime: Runtime, key: CallKey, data: bytes = WEATHER, *, tool: str = "get_weather"
) -> None:
    """Feed a whole call and the end of its response, and let the runtime answer."""
    await runtime.feed([*call_events(key, data, tool=tool), response_end(key)])
    await runtime.settle()


async def run_ready(runtime: Runtime) -> list[Dispatch]:
    """Claim and complete every ready call, as an executor that succeeds."""

    async def succeed(dispatch: Dispatch) -> None:
        await trio.lowlevel.checkpoint()

    done = [
        await runtime.execute(key, succeed, name="worker")
        for key in runtime.projections.queue.ready()
    ]
    await runtime.settle()
    return done


async def refused(attempt: Awaitable[object], error: type[Exception]) -> None:
    """The attempt must be refused with ``error``: the scenario depends on it."""
    try:
        await attempt
    except error:
        return
    raise AssertionError(f"expected {error.__name__}")


# --- the runtime scenarios -------------------------------------------------------------------

RECORDINGS: list[Recording] = []


REDACTED = " Retention on: payloads redacted once nothing needs them."


def scenario(
    name: str,
    *,
    limits: CallLimits | None = None,
    autojump: bool = True,
    redacted_too: bool = False,
) -> Callable[[Callable[[Lab], Awaitable[None]]], Callable[[Lab], Awaitable[None]]]:
    """Register a runtime scenario (its docstring is its description), recorded with retention
    off and, ``redacted_too``, again with the default retention."""

    def register(run: Callable[[Lab], Awaitable[None]]) -> Callable[[Lab], Awaitable[None]]:
        description = " ".join((run.__doc__ or name).split())
        RECORDINGS.extend(
            Recording(
                name=f"runtime-{name}" + ("-redacted" if retention is REDACT else ""),
                scenario=description + (REDACTED if retention is REDACT else ""),
                run=run,
                limits=limits or CallLimits(),
                retention=retention,
                autojump=autojump,
            )
            for retention in ((KEEP, REDACT) if redacted_too else (KEEP,))
        )
        return run

    return register


@scenario("confirmation-given", redacted_too=True)
async def _confirmation_given(lab: Lab) -> None:
    """A call needing confirmation is confirmed by its principal for its digest, then runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready(runtime, key, EMAIL, tool="send_email")
        pending = await runtime.pending_confirmation(key)
        assert pending is not None
        await runtime.confirm(key, principal=PRINCIPAL, arguments_digest=pending.arguments_digest)
        await runtime.settle()
        await run_ready(runtime)


@scenario("confirmation-refused-then-given")
async def _confirmation_refused(lab: Lab) -> None:
    """Confirmations by another principal and for other arguments are rejected and recorded;
    the principal's own is accepted once, a second is rejected as a duplicate; the call runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready(runtime, key, EMAIL, tool="send_email")
        pending = await runtime.pending_confirmation(key)
        assert pending is not None
        digest = pending.arguments_digest
        await refused(
            runtime.confirm(key, principal="user:mallory", arguments_digest=digest),
            ConfirmationRefused,
        )
        await refused(
            runtime.confirm(key, principal=PRINCIPAL, arguments_digest="sha256:" + "0" * 64),
            ConfirmationRefused,
        )
        await runtime.confirm(key, principal=PRINCIPAL, arguments_digest=digest)
        await refused(
            runtime.confirm(key, principal=PRINCIPAL, arguments_digest=digest),
            ConfirmationRefused,
        )
        await runtime.settle()
        await run_ready(runtime)


@scenario("confirmation-denied")
async def _confirmation_denied(lab: Lab) -> None:
    """The principal denies a call awaiting confirmation: it is cancelled and a claim of it is
    refused."""
    async with lab.runtime() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready(runtime, key, EMAIL, tool="send_email")
        await runtime.deny(key, principal=PRINCIPAL, reason="not now")
        await runtime.settle()
        await refused(runtime.claim(key, executor="worker"), ClaimRefused)


@scenario(
    "confirmation-expired",
    limits=CallLimits(confirmation_lifetime=timedelta(minutes=10)),
    redacted_too=True,
)
async def _confirmation_expired(lab: Lab) -> None:
    """A call left unconfirmed past its confirmation lifetime (10 minutes) is cancelled; a
    confirmation given after that is rejected."""
    async with lab.runtime() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready(runtime, key, EMAIL, tool="send_email")
        pending = await runtime.pending_confirmation(key)
        assert pending is not None
        await trio.sleep(11 * 60)
        await runtime.settle()
        await refused(
            runtime.confirm(key, principal=PRINCIPAL, arguments_digest=pending.arguments_digest),
            ConfirmationRefused,
        )


@scenario("confirmation-outlived", redacted_too=True)
async def _confirmation_outlived(lab: Lab) -> None:
    """A call confirmed for one minute and claimed two minutes later is cancelled
    ``confirmation_expired`` by the claim, which is refused; a call confirmed alike and claimed
    within the minute runs (rules 4)."""
    async with lab.runtime() as runtime:
        await start(runtime)
        late, in_time = key_of("a"), key_of("b", response="r2")
        for key in (late, in_time):
            await ready(runtime, key, EMAIL, tool="send_email")
            pending = await runtime.pending_confirmation(key)
            assert pending is not None
            await runtime.confirm(
                key,
                principal=PRINCIPAL,
                arguments_digest=pending.arguments_digest,
                expires_in=timedelta(minutes=1),
            )
        await runtime.settle()
        await trio.sleep(30)
        dispatch = await runtime.claim(in_time, executor="worker")
        await runtime.complete(dispatch)
        await trio.sleep(90)
        await refused(runtime.claim(late, executor="worker"), ClaimRefused)
        await runtime.settle()


@scenario("confirmation-edited", redacted_too=True)
async def _confirmation_edited(lab: Lab) -> None:
    """The person edits a call's arguments at confirmation: an edit that does not parse and one
    the schema refuses change nothing; a valid one is validated, confirmed and is what runs.
    Another call's edit equal to its arguments confirms them as they are."""
    async with lab.runtime() as runtime:
        await start(runtime)
        edited, unchanged = key_of("a"), key_of("b", response="r2")
        for key in (edited, unchanged):
            await ready(runtime, key, EMAIL, tool="send_email")
        pending = await runtime.pending_confirmation(edited)
        assert pending is not None
        shown = pending.arguments_digest
        for broken in (b'{"to": ', {"to": "carol@example.com", "cc": "eve@example.com"}):
            await refused(
                runtime.confirm(
                    edited, principal=PRINCIPAL, arguments_digest=shown, arguments=broken
                ),
                ConfirmationRefused,
            )
        edit = {"to": "carol@example.com", "body": "lunch at one?"}
        await runtime.confirm(edited, principal=PRINCIPAL, arguments_digest=shown, arguments=edit)
        await runtime.confirm(
            unchanged, principal=PRINCIPAL, arguments_digest=shown, arguments=json.loads(EMAIL)
        )
        await runtime.settle()
        for key in (edited, unchanged):
            dispatch = await runtime.claim(key, executor="worker")
            await runtime.complete(dispatch)
        await runtime.settle()


@scenario("stop-while-running", redacted_too=True)
async def _stop_while_running(lab: Lab) -> None:
    """Calls already running when their turn is cancelled, their tool disabled or their tenant
    stopped are each asked to stop once (rules 5): one executor stops, one completes anyway,
    one never reports and is surfaced unknown after a restart; a call that completed before
    the cancellation is not asked."""
    async with lab.runtime(operators=[OPERATOR]) as runtime:
        await start(runtime)
        done = key_of("a")
        stopping, finishing = key_of("b", response="r2"), key_of("c", response="r3")
        for key in (done, stopping, finishing):
            await ready(runtime, key)
        first = await runtime.claim(done, executor="worker")
        await runtime.complete(first)
        stopped = await runtime.claim(stopping, executor="worker")
        finished = await runtime.claim(finishing, executor="worker")
        await runtime.cancel_turn(stopping.turn_ref, principal=PRINCIPAL, reason="user left")
        await runtime.settle()
        await runtime.stopped(stopped)
        await runtime.complete(finished)
        await start(runtime, turn="t2")
        silent = key_of("d", turn="t2", response="r4")
        await ready(runtime, silent)
        await runtime.claim(silent, executor="worker")
        await runtime.disable_tool("get_weather", operator=OPERATOR, reason="vendor outage")
        await runtime.stop_tenant(TENANT, operator=OPERATOR, reason="incident")
        await runtime.settle()
    async with lab.runtime(operators=[OPERATOR]) as runtime:
        await runtime.settle()


INTENT_TOOLS = [
    attrs.evolve(TOOLS[0], one_action_per_intent="turn"),
    attrs.evolve(TOOLS[1], one_action_per_intent="conversation"),
]
"""The recording tools, the weather lookup running each intent once per turn, the email once
per conversation (rules 6)."""


async def confirmed(runtime: Runtime, key: CallKey) -> None:
    """Confirm a call waiting for its principal's confirmation, for its own digest."""
    pending = await runtime.pending_confirmation(key)
    assert pending is not None
    await runtime.confirm(key, principal=PRINCIPAL, arguments_digest=pending.arguments_digest)
    await runtime.settle()


@scenario("one-action-per-intent", redacted_too=True)
async def _one_action_per_intent(lab: Lab) -> None:
    """A weather lookup that runs each intent once per turn: a call identical to one that ran
    is cancelled ``duplicate_of`` by its claim, which is refused, and of two identical calls
    claimed at once one runs; a call with other arguments, and the same lookup in the next
    turn, run. An email that runs once per conversation, confirmed again in the next turn, is
    not sent twice (rules 6)."""
    async with lab.runtime(tools=INTENT_TOOLS) as runtime:
        await start(runtime)
        first, again = key_of("a"), key_of("b", response="r2")
        other = key_of("c", response="r3")
        racing = [key_of("d", response="r4"), key_of("e", response="r5")]
        mail = key_of("m", response="r6")
        for key in (first, again):
            await ready(runtime, key)
        await ready(runtime, other, b'{"city": "Oslo"}')
        for key in racing:
            await ready(runtime, key, b'{"city": "Rome"}')
        await ready(runtime, mail, EMAIL, tool="send_email")
        await confirmed(runtime, mail)
        for key in (first, mail):
            await runtime.complete(await runtime.claim(key, executor="worker"))
        await refused(runtime.claim(again, executor="worker"), ClaimRefused)
        await runtime.complete(await runtime.claim(other, executor="worker"))
        outcomes: list[str] = []

        async def claim(key: CallKey) -> None:
            try:
                await runtime.complete(await runtime.claim(key, executor="worker"))
            except ClaimRefused:
                outcomes.append("refused")
            else:
                outcomes.append("ran")

        async with trio.open_nursery() as nursery:
            for key in racing:
                nursery.start_soon(claim, key)
        assert sorted(outcomes) == ["ran", "refused"], outcomes
        await start(runtime, "t2")
        later = key_of("a", turn="t2", response="r7")
        mail_again = key_of("m", turn="t2", response="r8")
        await ready(runtime, later)
        await ready(runtime, mail_again, EMAIL, tool="send_email")
        await confirmed(runtime, mail_again)
        await runtime.complete(await runtime.claim(later, executor="worker"))
        await refused(runtime.claim(mail_again, executor="worker"), ClaimRefused)
        await runtime.settle()


@scenario("operator-quarantine")
async def _quarantine(lab: Lab) -> None:
    """An operator quarantines a response: its collecting call is cancelled, and what arrives
    for it later (fragments, a new call) is refused; another response's call runs."""
    async with lab.runtime(operators=[OPERATOR]) as runtime:
        await start(runtime)
        held, other, later = key_of("a"), key_of("b", response="r2"), key_of("c")
        events = call_events(held)
        await runtime.feed(events[:2])
        await runtime.settle()
        await runtime.quarantine_response("r1", operator=OPERATOR, reason="prompt injection")
        await runtime.feed(events[2:])
        await runtime.feed([*call_events(later), response_end(held)])
        await ready(runtime, other)
        await run_ready(runtime)


@scenario("operator-tool-disabled-and-enabled")
async def _tool_disabled(lab: Lab) -> None:
    """An operator disables a tool: its live call is cancelled, a new call of it is cancelled,
    a call of another tool is untouched; once enabled again, a new call of it runs."""
    async with lab.runtime(operators=[OPERATOR]) as runtime:
        await start(runtime)
        weather, email = key_of("a"), key_of("b")
        await runtime.feed(call_events(weather)[:2])
        await runtime.feed(call_events(email, EMAIL, tool="send_email")[:2])
        await runtime.settle()
        await runtime.disable_tool("get_weather", operator=OPERATOR, reason="vendor outage")
        await ready(runtime, key_of("c", response="r2"))
        await runtime.enable_tool("get_weather", operator=OPERATOR, reason="vendor back")
        await ready(runtime, key_of("d", response="r3"))
        await runtime.feed([*call_events(email, EMAIL, tool="send_email")[2:], response_end(email)])
        await run_ready(runtime)


@scenario("operator-tenant-stopped-and-resumed", redacted_too=True)
async def _tenant_stopped(lab: Lab) -> None:
    """An operator stops one tenant: its calls end, another tenant's run; after the tenant is
    resumed, a call of its next turn runs."""
    async with lab.runtime(operators=[OPERATOR]) as runtime:
        await start(runtime)
        await start(runtime, tenant=OTHER_TENANT)
        acme, globex = key_of("a"), key_of("b", tenant=OTHER_TENANT)
        await runtime.feed(call_events(acme)[:2])
        await runtime.settle()
        await runtime.stop_tenant(TENANT, operator=OPERATOR, reason="abuse report")
        await runtime.feed(call_events(acme)[2:])
        await ready(runtime, globex)
        await ready(runtime, key_of("c", response="r2"))
        await runtime.resume_tenant(TENANT, operator=OPERATOR, reason="cleared")
        await start(runtime, "t2")
        await ready(runtime, key_of("d", turn="t2"))
        await run_ready(runtime)


@scenario("superseded-by-a-new-turn", redacted_too=True)
async def _superseded(lab: Lab) -> None:
    """A new turn of the conversation supersedes the old one: its collecting call and its ready
    call are cancelled, late fragments of the old turn are rejected, the new turn's call runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        collecting, validated = key_of("a"), key_of("b", response="r2")
        events = call_events(collecting)
        await runtime.feed(events[:2])
        await ready(runtime, validated)
        await start(runtime, "t2")
        await runtime.feed(events[2:])
        await ready(runtime, key_of("c", turn="t2"))
        await run_ready(runtime)


@scenario("turn-cancelled")
async def _turn_cancelled(lab: Lab) -> None:
    """The principal cancels the turn: a collecting and a validated call are cancelled, a claim
    and the late end of the collecting call are refused."""
    async with lab.runtime() as runtime:
        turn = await start(runtime)
        collecting, validated = key_of("a"), key_of("b", response="r2")
        events = call_events(collecting)
        await runtime.feed(events[:2])
        await ready(runtime, validated)
        await runtime.cancel_turn(turn, principal=PRINCIPAL, reason="changed my mind")
        await runtime.settle()
        await refused(runtime.claim(validated, executor="worker"), ClaimRefused)
        await runtime.feed([*events[2:], response_end(collecting)])


@scenario("limit-live-calls-per-turn", limits=CallLimits(max_live_per_turn=2))
async def _limit_live(lab: Lab) -> None:
    """With two live calls per turn allowed, a third opened meanwhile fails; once the two have
    ended, a new call is opened and runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        first, second, third = key_of("a"), key_of("b"), key_of("c")
        await runtime.feed([CallOpened(key=key, tool="get_weather") for key in (first, second)])
        await runtime.feed([CallOpened(key=third, tool="get_weather")])
        await runtime.settle()
        for key in (first, second):
            await runtime.feed(call_events(key)[1:])
        await runtime.feed([response_end(first)])
        await runtime.settle()
        await run_ready(runtime)
        await ready(runtime, key_of("d", response="r2"))
        await run_ready(runtime)


@scenario("limit-fragments", limits=CallLimits(max_fragments=3))
async def _limit_fragments(lab: Lab) -> None:
    """With three fragments a call allowed, a call sent in six fails; one sent in two runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        many, few = key_of("a"), key_of("b")
        await runtime.feed(call_events(many, parts=6))
        await runtime.feed([*call_events(few, parts=2), response_end(few)])
        await runtime.settle()
        await run_ready(runtime)


@scenario("limit-argument-bytes", limits=CallLimits(arguments=ArgumentLimits(max_bytes=48)))
async def _limit_bytes(lab: Lab) -> None:
    """With 48 bytes of arguments allowed, a larger call fails as too large; a small one runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        big = b'{"city": "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch"}'
        await runtime.feed(call_events(key_of("a"), big))
        await ready(runtime, key_of("b"))
        await run_ready(runtime)


MALFORMED = {
    "truncated": b'{"city": "Par',
    "duplicate-key": b'{"city": "Paris", "city": "Rome"}',
    "nan": b'{"city": "Paris", "unit": NaN}',
    "lone-surrogate": b'{"city": "\\ud800"}',
    "huge-number": b'{"city": "Paris", "n": 1' + b"0" * 400 + b"}",
    "deep": b'{"city": ' + b"[" * 100 + b"]" * 100 + b"}",
    "not-an-object": b'["Paris"]',
    "trailing-garbage": b'{"city": "Paris"} x',
    "bom": b'\xef\xbb\xbf{"city": "Paris"}',
}


@scenario("malformed-arguments")
async def _malformed(lab: Lab) -> None:
    """Arguments that break the strict parser (truncated, duplicate keys, NaN, a lone surrogate,
    a huge number, deep nesting, not an object, trailing bytes, a BOM) fail, each once; a
    well-formed call of the same response runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        for name, data in MALFORMED.items():
            await runtime.feed(call_events(key_of(name), data))
        good = key_of("good")
        await runtime.feed([*call_events(good), response_end(good)])
        await runtime.settle()
        await run_ready(runtime)


@scenario("schema-and-tool-failures")
async def _schema(lab: Lab) -> None:
    """A call breaking its tool's schema fails, a call of a tool the turn does not offer fails,
    a call whose response fails while it is collecting fails; a valid call runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        await runtime.feed(call_events(key_of("a"), b'{"town": "Paris"}'))
        await runtime.feed(call_events(key_of("b"), b'{"path": "/etc"}', tool="read_file"))
        good = key_of("c")
        await runtime.feed([*call_events(good), response_end(good)])
        cut = key_of("d", response="r2")
        await runtime.feed(call_events(cut)[:2])
        await runtime.feed([response_end(cut, ResponseEndReason.ERROR, "overloaded")])
        await runtime.settle()
        await run_ready(runtime)


async def _business_check(request: ValidationRequested) -> ValidationResult:
    city = request.arguments.value.get("city")
    if request.principal != PRINCIPAL:
        return ValidationResult(failure=FailReason.PERMISSION_DENIED, detail="principal")
    if city == "Atlantis":
        return ValidationResult(failure=FailReason.BUSINESS_INVALID, detail="/city: unknown")
    if city == "Slowtown":
        await trio.sleep(60)
    if city == "Boomtown":
        raise RuntimeError("the check broke")
    return ValidationResult()


@scenario("validation-check-outcomes")
async def _validation(lab: Lab) -> None:
    """A business check refuses one call, a permission policy another (another principal's
    turn), one check times out and one raises; a call the check accepts runs."""
    async with lab.runtime(check=_business_check, validation_timeout=5.0) as runtime:
        await start(runtime)
        await start(runtime, "t1", tenant=OTHER_TENANT, principal="user:bob")
        cities = {"a": "Atlantis", "b": "Slowtown", "c": "Boomtown", "d": "Paris"}
        for call, city in cities.items():
            data = json.dumps({"city": city}).encode()
            await ready(runtime, key_of(call, response=f"r-{call}"), data)
        await ready(runtime, key_of("e", tenant=OTHER_TENANT))
        await run_ready(runtime)


@scenario("executor-outcomes")
async def _outcomes(lab: Lab) -> None:
    """One dispatched call completes, one fails in its executor; reports of the same claim
    again are refused."""
    async with lab.runtime() as runtime:
        await start(runtime)
        good, bad = key_of("a"), key_of("b", response="r2")
        await ready(runtime, good)
        await ready(runtime, bad)
        done = await runtime.claim(good, executor="worker")
        await runtime.complete(done)

        async def crash(dispatch: Dispatch) -> None:
            raise ConnectionError("smtp down")

        await refused(runtime.execute(bad, crash, name="worker"), ConnectionError)
        await refused(runtime.complete(done), RefusedError)


@scenario("outcome-unknown-after-a-restart", redacted_too=True)
async def _unknown(lab: Lab) -> None:
    """A call is dispatched and the process stops before its executor reports; after the
    restart its outcome is unknown, it is never dispatched again, and a ready call still runs.
    A collecting call and a call awaiting its response's end are lost with the connection."""
    collecting, candidate = key_of("a", response="ra"), key_of("b", response="rb")
    waiting, claimed = key_of("c", response="rc"), key_of("d", response="rd")
    async with lab.runtime() as runtime:
        await start(runtime)
        await runtime.feed(call_events(collecting)[:2])
        await runtime.feed(call_events(candidate))
        await ready(runtime, waiting)
        await ready(runtime, claimed)
        await runtime.claim(claimed, executor="worker")
    async with lab.runtime() as runtime:
        await runtime.settle()
        await refused(runtime.claim(claimed, executor="worker"), ClaimRefused)
        await run_ready(runtime)


@scenario("stream-resumed-after-a-restart", redacted_too=True)
async def _resumed(lab: Lab) -> None:
    """A stream is lost resumably in the middle of a call; after a restart it resumes, the call
    finishes and runs."""
    key = key_of("a")
    events = call_events(key, parts=4)
    async with lab.runtime() as runtime:
        await start(runtime)
        await runtime.feed(events[:3])
        await runtime.feed([StreamLost(response=key.response_ref, resumable=True, last_sequence=2)])
    async with lab.runtime() as runtime:
        await runtime.feed([StreamResumed(response=key.response_ref, after_sequence=2)])
        await runtime.feed([*events[3:], response_end(key)])
        await runtime.settle()
        await run_ready(runtime)


@scenario("idle-timeout", limits=CallLimits(idle_timeout=timedelta(seconds=60)))
async def _idle(lab: Lab) -> None:
    """A call that receives nothing for the idle timeout is cancelled; its late fragments are
    rejected; a call fed in time runs."""
    async with lab.runtime() as runtime:
        await start(runtime)
        idle, busy = key_of("a"), key_of("b", response="r2")
        events = call_events(idle)
        await runtime.feed(events[:2])
        await trio.sleep(50)
        await ready(runtime, busy)
        await trio.sleep(11)
        await runtime.settle()
        await runtime.feed(events[2:])
        await run_ready(runtime)


@scenario("retention-off")
async def _retention_off(lab: Lab) -> None:
    """With retention off, nothing is redacted: completed, cancelled and failed calls keep
    their fragments and arguments, across a restart."""
    async with lab.runtime(retention=KEEP) as runtime:
        turn = await start(runtime)
        await ready(runtime, key_of("a"))
        await runtime.feed(call_events(key_of("b"), b'{"city": '))
        await ready(runtime, key_of("c", response="r2"))
        await run_ready(runtime)
        await runtime.feed(call_events(key_of("d", response="r3"))[:2])
        await runtime.settle()
        await runtime.cancel_turn(turn, principal=PRINCIPAL)
    async with lab.runtime(retention=KEEP) as runtime:
        await start(runtime, "t2")
        await ready(runtime, key_of("e", turn="t2"))
        await run_ready(runtime)


@scenario("retention-on-across-restarts")
async def _retention_on(lab: Lab) -> None:
    """With the default retention, fragments and validated arguments are redacted once nothing
    needs them; after each of three restarts the redacted log replays, the call left collecting
    is lost with the connection, and new calls run."""
    for turn in ("t1", "t2", "t3"):
        async with lab.runtime(retention=REDACT) as runtime:
            await start(runtime, turn)
            await ready(runtime, key_of("a", turn=turn))
            await ready(runtime, key_of("b", turn=turn, response="r2"), EMAIL, tool="send_email")
            await run_ready(runtime)
            await runtime.feed(call_events(key_of("c", turn=turn, response="r3"))[:2])
    async with lab.runtime(retention=REDACT):
        pass


TRACE = TraceContext(
    traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    tracestate="vendor=opaque,other=value",
)


@scenario("trace-context")
async def _trace(lab: Lab) -> None:
    """Trace context arrives with the turn and with each feed, stored beside the events; one
    feed has none; the decisions are those without it."""
    async with lab.runtime() as runtime:
        await start(runtime, trace=TRACE)
        first, second = key_of("a"), key_of("b", response="r2")
        await runtime.feed(call_events(first), trace=TRACE)
        await runtime.feed(
            [response_end(first)],
            trace=TraceContext(
                traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
            ),
        )
        await runtime.feed([*call_events(second), response_end(second)])
        await runtime.settle()
        await run_ready(runtime)


@scenario("processes-with-leases", autojump=False)
async def _leases(lab: Lab) -> None:
    """A runtime that names its process leases the turns it starts; its calls run, and after
    a restart under the same name the next turn is leased too."""
    async with lab.runtime(process="node-a") as runtime:
        await start(runtime)
        await ready(runtime, key_of("a"))
        await run_ready(runtime)
    async with lab.runtime(process="node-a") as runtime:
        await start(runtime, "t2")
        await ready(runtime, key_of("b", turn="t2"))
        await run_ready(runtime)


@scenario("busy-conversation", redacted_too=True)
async def _busy(lab: Lab) -> None:
    """A production-shaped conversation: three turns of several responses, parallel calls,
    confirmations given and denied, a superseded turn, an executor failure, a restart."""
    async with lab.runtime() as runtime:
        await start(runtime)
        for response in ("r1", "r2"):
            keys = [key_of(f"{response}-{n}", response=response) for n in range(3)]
            await runtime.feed([event for key in keys for event in call_events(key)])
            await runtime.feed([response_end(keys[0])])
            await runtime.settle()
        await run_ready(runtime)
        await start(runtime, "t2")
        email, other = key_of("m", turn="t2"), key_of("n", turn="t2", response="r2")
        await ready(runtime, email, EMAIL, tool="send_email")
        await ready(runtime, other, EMAIL, tool="send_email")
        pending = await runtime.pending_confirmation(email)
        assert pending is not None
        await runtime.confirm(email, principal=PRINCIPAL, arguments_digest=pending.arguments_digest)
        await runtime.deny(other, principal=PRINCIPAL)
        await runtime.settle()

        async def flaky(dispatch: Dispatch) -> None:
            raise TimeoutError("mail server")

        await refused(runtime.execute(email, flaky, name="mailer"), TimeoutError)
        await runtime.feed(call_events(key_of("x", turn="t2", response="r3"))[:2])
        await start(runtime, "t3")
        await runtime.feed(call_events(key_of("p", turn="t3"))[:3])
    async with lab.runtime() as runtime:
        for n in range(4):
            await ready(runtime, key_of(f"q{n}", turn="t3", response=f"r{n + 2}"))
        await run_ready(runtime)


# --- the awkward-order suite -----------------------------------------------------------------


REDACTED_ORDERS = frozenset(
    {
        "two calls interleaved",
        "cancellation while the terminal is being validated",
        "reconnection replay of a terminal event",
        "a new user turn while old fragments arrive",
    }
)
"""Orders recorded again, with the restart, under the default retention: where redaction
after a restart meets held validations, replays and superseded turns."""


def _awkward(scenario: Scenario, restart: bool) -> Callable[[Lab], Awaitable[None]]:
    async def run(lab: Lab) -> None:
        def opener(check: GatedCheck) -> Any:
            return lab.runtime(tools=AWKWARD_TOOLS, check=check, validation_timeout=30.0)

        outcome = await run_scenario(scenario, opener, restart=restart)
        assert outcome.live_digest == outcome.replay_digest, scenario.name

    return run


RECORDINGS.extend(
    Recording(
        name=f"awkward-{_slug(order.name)}{'-restart' if restart else ''}"
        + ("-redacted" if retention is REDACT else ""),
        scenario=f"awkward order: {order.name}"
        + (f" (restarted after step {order.restart_after})" if restart else "")
        + (REDACTED if retention is REDACT else ""),
        run=_awkward(order, restart),
        retention=retention,
        autojump=False,
    )
    for order in SCENARIOS
    for restart, retention in ((False, KEEP), (True, KEEP), (True, REDACT))
    if retention is KEEP or order.name in REDACTED_ORDERS
)


# --- captured provider streams ---------------------------------------------------------------


@frozen(kw_only=True)
class Capture:
    """A captured stream as it is fed: raw chunks of the wire, or decoded events."""

    chunks: tuple[bytes, ...] = ()
    events: tuple[object, ...] = ()


def captures(provider: str, path: Path) -> dict[str, Capture]:
    """How a fixture is fed, by the suffix of its log's name: an .sse body whole; a .jsonl file
    as its decoded events, or as SSE events where a line does not decode (kept as captured);
    Chat Completions lines with and without the closing ``[DONE]``."""
    if path.suffix == ".sse":
        return {"": Capture(chunks=(path.read_bytes(),))}
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    try:
        decoded: list[object] = [json.loads(line) for line in lines]
    except json.JSONDecodeError:
        return {"": Capture(chunks=tuple(f"data: {line}\n\n".encode() for line in lines))}
    if provider == "openai-chat":
        return {
            "": Capture(events=(*decoded, "[DONE]")),
            "-without-done": Capture(events=tuple(decoded)),
        }
    return {"": Capture(events=tuple(decoded))}


def _fed(factory: Callable[[TurnRef], StreamAdapter], turn: TurnRef, capture: Capture) -> list[str]:
    """The tools the stream calls, in order of first call (offered to the turn)."""
    adapter = factory(turn)
    events = [event for chunk in capture.chunks for event in adapter.feed(chunk)]
    events += [event for item in capture.events for event in adapter.feed_event(item)]
    events += adapter.close()
    return list(dict.fromkeys(event.tool for event in events if isinstance(event, CallOpened)))


def _provider_run(provider: str, capture: Capture) -> Callable[[Lab], Awaitable[None]]:
    factory = partial(provider_adapter, provider)

    async def run(lab: Lab) -> None:
        turn = TurnRef(tenant=TENANT, conversation=CONVERSATION, turn="t1")
        tools = _fed(factory, turn, capture)
        async with lab.runtime(tools=declarations(tools)) as runtime:
            await runtime.start_turn(
                tenant=TENANT,
                conversation=CONVERSATION,
                turn="t1",
                principal=PRINCIPAL,
                tools=tools,
            )
            await feed_stream(runtime, factory(turn), chunks=capture.chunks, events=capture.events)
            await runtime.settle()
            await run_ready(runtime)

    return run


REDACTED_STREAMS = frozenset(
    {
        "two-function-calls-gpt-4o",
        "alibaba-empty-id-continuations",
        "text-then-tool-use",
        "converse-stream-single-tool-use",
        "gemini-two-whole-function-calls",
    }
)
"""Captures recorded again with the default retention: one small one per provider."""


def _stream_recordings() -> list[Recording]:
    recordings = []
    for provider in PROVIDERS:
        for path in sorted((FIXTURES / provider).iterdir()):
            for suffix, capture in captures(provider, path).items():
                twice = not suffix and path.stem in REDACTED_STREAMS
                for retention in (KEEP, REDACT) if twice else (KEEP,):
                    redacted = retention is REDACT
                    recordings.append(
                        Recording(
                            name=f"stream-{provider}-{path.stem}{suffix}"
                            + ("-redacted" if redacted else ""),
                            scenario=f"captured {provider} stream {path.name}"
                            + (" fed as raw bytes" if capture.chunks else " fed as decoded events")
                            + (", without its closing [DONE]" if suffix else "")
                            + "; every call offered, every ready call run."
                            + (REDACTED if redacted else ""),
                            run=_provider_run(provider, capture),
                            retention=retention,
                            autojump=False,
                        )
                    )
    return recordings


RECORDINGS.extend(_stream_recordings())


# --- schema 2 ---------------------------------------------------------------------------------

# Every recording above again, as this version writes it: fragments at their byte offsets (the
# adapters' and the awkward suite's), coalesced by the runtime between two appends. The logs
# without the prefix were written by schema 1 and are read through the upcaster.
RECORDINGS.extend(
    attrs.evolve(
        recording,
        name=f"v2-{recording.name}",
        scenario=f"{recording.scenario} Schema 2: fragments at byte offsets.",
    )
    for recording in list(RECORDINGS)
)


@scenario(
    "ready-call-expired",
    limits=CallLimits(ready_lifetime=timedelta(minutes=5)),
    redacted_too=True,
)
async def _ready_call_expired(lab: Lab) -> None:
    """Rules 8: a ready call claimed within its lifetime (5 minutes) runs; one nobody claims is
    cancelled ``ready_expired`` by its deadline, and a claim of it after that is refused; a
    call confirmed for 2 minutes is cancelled ``confirmation_expired`` when that runs out."""
    async with lab.runtime() as runtime:
        await start(runtime)
        in_time, unclaimed = key_of("a"), key_of("b", response="r2")
        confirmed = key_of("c", response="r3")
        for key in (in_time, unclaimed):
            await ready(runtime, key)
        await ready(runtime, confirmed, EMAIL, tool="send_email")
        pending = await runtime.pending_confirmation(confirmed)
        assert pending is not None
        await runtime.confirm(
            confirmed,
            principal=PRINCIPAL,
            arguments_digest=pending.arguments_digest,
            expires_in=timedelta(minutes=2),
        )
        await runtime.settle()
        await trio.sleep(60)
        dispatch = await runtime.claim(in_time, executor="worker")
        await runtime.complete(dispatch)
        await trio.sleep(5 * 60)
        await runtime.settle()
        await refused(runtime.claim(unclaimed, executor="worker"), ClaimRefused)


@scenario("failed-beside-a-ready-sibling", redacted_too=True)
async def _failed_beside_a_ready_sibling(lab: Lab) -> None:
    """Two calls of one response: one fails at its end event (its arguments cut short) while
    the other, opened before it ended, becomes ready and runs later. With retention on, the
    failed call's fragments are redacted at its end, its sibling's once it ran."""
    async with lab.runtime() as runtime:
        await start(runtime)
        failed, sibling = key_of("a", response="shared"), key_of("b", response="shared")
        failing, other = call_events(failed, b'{"city": "Atlan'), call_events(sibling)
        await runtime.feed([failing[0], other[0], *failing[1:], *other[1:]])
        await runtime.feed([response_end(sibling)])
        await runtime.settle()
        await run_ready(runtime)


HEADERS = ToolDeclaration(
    name="set_headers",
    parameters={
        "type": "object",
        "properties": {
            "url": {"type": "string"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
)
SECRET_NAME = "Authorization: Bearer sk-golden"


@scenario("argument-text-kept-out")
async def _argument_text(lab: Lab) -> None:
    """Names the model wrote never reach a detail (rules 9): a NUL, a lone surrogate and an
    over-long name refused by the parse, a map's name and an undeclared one refused by the
    schema, a tool the turn did not offer and an edit refused at confirmation, each named by
    positions, declared names and digests; a valid call runs."""
    secret = json.dumps(SECRET_NAME)[1:-1]
    refused_by_the_parse = {
        "nul": f'{{"url": "u", "headers": {{"{secret}\\u0000": "v"}}}}',
        "surrogate": f'{{"url": "u", "headers": {{"{secret}\\ud800": "v"}}}}',
        "long": f'{{"url": "u", "headers": {{"{secret * 3000}": "v"}}}}',
    }
    async with lab.runtime(tools=[*TOOLS, HEADERS]) as runtime:
        await start(runtime)
        for name, data in refused_by_the_parse.items():
            await runtime.feed(call_events(key_of(name), data.encode(), tool=HEADERS.name))
        schema = json.dumps({"headers": {SECRET_NAME: 7}, SECRET_NAME: 1}).encode()
        await runtime.feed(call_events(key_of("schema"), schema, tool=HEADERS.name))
        await runtime.feed(call_events(key_of("unoffered"), WEATHER, tool=SECRET_NAME))
        good = key_of("good")
        await runtime.feed([*call_events(good), response_end(good)])
        email = key_of("email", response="r2")
        await ready(runtime, email, EMAIL, tool="send_email")
        pending = await runtime.pending_confirmation(email)
        assert pending is not None
        for edit in (f'{{"to": "x", "{secret}\\u0000": 1}}'.encode(), {SECRET_NAME: "x"}):
            await refused(
                runtime.confirm(
                    email,
                    principal=PRINCIPAL,
                    arguments_digest=pending.arguments_digest,
                    arguments=edit,
                ),
                ConfirmationRefused,
            )
        await runtime.deny(email, principal=PRINCIPAL)
        await runtime.settle()
        await run_ready(runtime)


@scenario("keyed-digests", redacted_too=True)
async def _keyed_digests(lab: Lab) -> None:
    """Digests keyed by the log (rules 10): a call's arguments digest, shown at confirmation and
    bound by it, an edit's, a tool the turn did not offer, and (redacted) each payload's digest
    are HMACs under the log's keys; the calls run."""
    async with lab.runtime() as runtime:
        await start(runtime)
        await runtime.feed(call_events(key_of("unoffered"), WEATHER, tool="get_wether"))
        good = key_of("good")
        await runtime.feed([*call_events(good), response_end(good)])
        email = key_of("email", response="r2")
        await ready(runtime, email, EMAIL, tool="send_email")
        pending = await runtime.pending_confirmation(email)
        assert pending is not None
        assert pending.arguments_digest.startswith("hmac-sha256:")
        await runtime.confirm(
            email,
            principal=PRINCIPAL,
            arguments_digest=pending.arguments_digest,
            arguments={"to": "carol@example.com", "body": "noon?"},
        )
        await runtime.settle()
        await run_ready(runtime)


@scenario("ranges-redelivered-chunked-otherwise")
async def _redelivered(lab: Lab) -> None:
    """A call's bytes arrive in three fragments, then again as one and as a range across two:
    the re-deliveries are duplicates, and the call runs with its arguments once."""
    async with lab.runtime() as runtime:
        await start(runtime)
        key = key_of("a")
        whole = call_events(key, parts=3)
        await runtime.feed(whole[:-1])
        await runtime.settle()
        await runtime.feed([fragment(key, WEATHER, 0, 1, 3), fragment(key, WEATHER[5:20], 5, 1, 2)])
        await runtime.feed([whole[-1], response_end(key)])
        await runtime.settle()
        await run_ready(runtime)


@scenario("ranges-straddling-and-conflicting")
async def _straddling(lab: Lab) -> None:
    """A fragment straddling the end of what is stored adds its new bytes and the call runs;
    another call's fragment that disagrees with its stored bytes fails it
    ``conflicting_fragment``, as does one bringing new bytes under sequences seen."""
    async with lab.runtime() as runtime:
        await start(runtime)
        straddled, conflicting, replayed = key_of("a"), key_of("b"), key_of("c")
        for key in (straddled, conflicting, replayed):
            await runtime.feed([CallOpened(key=key, tool="get_weather", sequence=0)])
            await runtime.feed([fragment(key, WEATHER[:20], 0, 1)])
            await runtime.settle()
        await runtime.feed([fragment(straddled, WEATHER[10:], 10, 1, 2)])
        await runtime.feed([CallEnded(key=straddled, terminal=TerminalRef(sequence=3))])
        await runtime.feed([fragment(conflicting, b"X" * 10, 15, 2)])
        await runtime.feed([fragment(replayed, WEATHER[20:], 20, 1)])
        await runtime.feed([response_end(straddled)])
        await runtime.settle()
        await run_ready(runtime)


@scenario("ranges-out-of-order-and-missing")
async def _out_of_order(lab: Lab) -> None:
    """Fragments arriving last first wait past the gap and the call runs; a call whose middle
    fragment never arrives fails ``sequence_gap`` at its end event."""
    async with lab.runtime() as runtime:
        await start(runtime)
        late, missing = key_of("a"), key_of("b")
        for key in (late, missing):
            await runtime.feed([CallOpened(key=key, tool="get_weather", sequence=0)])
        await runtime.feed([fragment(late, WEATHER[24:], 24, 3)])
        await runtime.feed([fragment(late, WEATHER[:12], 0, 1)])
        await runtime.feed([fragment(missing, WEATHER[24:], 24, 3)])
        await runtime.feed([fragment(missing, WEATHER[:12], 0, 1)])
        await runtime.settle()
        await runtime.feed([fragment(late, WEATHER[12:24], 12, 2)])
        for key in (late, missing):
            await runtime.feed([CallEnded(key=key, terminal=TerminalRef(sequence=4))])
        await runtime.feed([response_end(late)])
        await runtime.settle()
        await run_ready(runtime)


@scenario("ranges-deltas-coalesced")
async def _coalesced(lab: Lab) -> None:
    """Three calls of one response fed a byte per feed, interleaved: the runtime writes each
    call's bytes as one event per append; all three run."""
    async with lab.runtime() as runtime:
        await start(runtime)
        keys = [key_of(name) for name in ("a", "b", "c")]
        for key in keys:
            await runtime.feed([CallOpened(key=key, tool="get_weather", sequence=0)])
        for offset in range(len(WEATHER)):
            for key in keys:
                await runtime.feed(
                    [fragment(key, WEATHER[offset : offset + 1], offset, offset + 1)]
                )
        for key in keys:
            await runtime.feed(
                [CallEnded(key=key, terminal=TerminalRef(sequence=len(WEATHER) + 1))]
            )
        await runtime.feed([response_end(keys[0])])
        await runtime.settle()
        await run_ready(runtime)


_names = [recording.name for recording in RECORDINGS]
assert len(_names) == len(set(_names)), "two recordings share a name"
assert {order.name for order in SCENARIOS} >= REDACTED_ORDERS, "no such awkward order"
assert {
    stem for stem in REDACTED_STREAMS for name in _names if name.endswith(f"-{stem}-redacted")
} == REDACTED_STREAMS, "no such capture"


# --- the recorder ----------------------------------------------------------------------------


def _summary(ledger: Snapshot) -> str:
    rows = ledger["rows"]
    assert isinstance(rows, list)
    states: dict[str, int] = {}
    for row in rows:
        assert isinstance(row, dict)
        label = str(row["state"]) + ("/" + str(row["outcome"]) if row.get("outcome") else "")
        states[label] = states.get(label, 0) + 1
    return ", ".join(f"{count} {state}" for state, count in sorted(states.items()))


def main(argv: Sequence[str] | None = None) -> int:
    """Record the golden logs that do not exist yet (or, named, again); check each replays."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "names", nargs="*", help="record these logs again (a deliberate re-recording)"
    )
    parser.add_argument("--list", action="store_true", help="list the recordings and stop")
    options = parser.parse_args(argv)
    if options.list:
        for recording in RECORDINGS:
            print(f"{recording.name}: {recording.scenario}")
        return 0
    unknown = sorted(set(options.names) - set(_names))
    if unknown:
        parser.error(f"no recording is named {', '.join(unknown)}")
    GOLDEN.mkdir(exist_ok=True)
    failed = 0
    for recording in RECORDINGS:
        path = GOLDEN / f"{recording.name}.jsonl"
        if path.exists() and recording.name not in options.names:
            continue
        rows, live_digest = record(recording)
        replayed = replay(rows, recording.limits)
        problems = []
        if replayed.digest != live_digest:
            problems.append(f"replay digest {replayed.digest} != live digest {live_digest}")
        if replayed.unwritten:
            problems.append(f"decisions the log lacks: {replayed.unwritten}")
        if limits_from_json(limits_json(recording.limits)) != recording.limits:
            problems.append(f"the header cannot hold the limits {recording.limits}")
        if problems:
            failed += 1
            print(f"{recording.name}: NOT WRITTEN: {'; '.join(problems)}", file=sys.stderr)
            continue
        path.write_text(dump(rows, scenario=recording.scenario, limits=recording.limits))
        print(f"{recording.name}: {len(rows)} events; {_summary(replayed.ledger)}")
    paths = golden_paths()
    size = sum(path.stat().st_size for path in paths)
    print(f"{len(paths)} golden logs, {size:,} bytes")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
