"""Retention: argument payloads leave the log once nothing can need them, and nothing changes."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing
from test_runtime import (
    PRINCIPAL,
    TOOLS,
    call_events,
    key_of,
    ready_call,
    response_end,
    start,
)

from inert import (
    DEFAULT_LIMITS,
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    ClaimRefused,
    Event,
    Log,
    Phase,
    RecordedEvent,
    Retention,
    Runtime,
    TurnRef,
    open_runtime,
    trio_clock,
)
from inert.actors import CallFold
from inert.actors._call import DIGEST_KEY
from inert.events import (
    CallValidated,
    ClaimRequested,
    ExecutionCompleted,
    Redacted,
    TurnRetired,
)
from inert.log import MemoryLog, MemoryStore, NewEvent
from inert.projections import Projections
from inert.runtime._retention import ARGUMENT_TYPES, FRAGMENT_TYPES, Redaction, RetentionPlan
from inert.runtime._state_codec import Reader, Writer
from inert.runtime._state_types import state_shapes

KEEP_EVERYTHING = Retention(fragments=False, arguments=False)

COMPLETED = key_of("a", response="r1")
DENIED_WHILE_COLLECTING = key_of("b", response="r2")
MALFORMED = key_of("c", response="r3")
DENIED_AFTER_VALIDATION = key_of("d", response="r4")
READY = key_of("e", response="r5")
COLLECTING = key_of("f", response="r6")
DISPATCHED = key_of("g", response="r7")


@asynccontextmanager
async def running(store: MemoryStore, retention: Retention) -> AsyncIterator[Runtime]:
    """A runtime on a memory log kept in ``store``, with this retention policy."""
    log = MemoryLog(store, clock=trio_clock())
    try:
        async with open_runtime(log=log, tools=TOOLS, retention=retention) as runtime:
            yield runtime
    finally:
        await log.aclose()


async def every_kind_of_ending(runtime: Runtime) -> None:
    """Calls that complete, end while collecting, fail, are denied, wait, collect, or run."""
    await start(runtime)
    await ready_call(runtime, COMPLETED)
    await runtime.execute(COMPLETED, _succeed, name="worker")
    await runtime.feed(call_events(DENIED_WHILE_COLLECTING)[:2])
    await runtime.settle()
    await runtime.deny(DENIED_WHILE_COLLECTING, principal=PRINCIPAL)
    await ready_call(runtime, MALFORMED, data=b'{"city": ')
    await ready_call(runtime, DENIED_AFTER_VALIDATION, tool="send_email")
    await runtime.deny(DENIED_AFTER_VALIDATION, principal=PRINCIPAL)
    await ready_call(runtime, READY)
    await runtime.feed(call_events(COLLECTING)[:2])
    await ready_call(runtime, DISPATCHED)
    await runtime.claim(DISPATCHED, executor="worker")
    await runtime.settle()


async def _succeed(_: object) -> None:
    return None


def owns_every_turn(turn: TurnRef) -> bool:
    """A runtime alone on its log owns every turn."""
    return True


def replayed(records: list[RecordedEvent]) -> Projections:
    projections = Projections()
    for recorded in records:
        projections.apply(recorded)
    return projections


def sensitive(records: list[RecordedEvent], key: CallKey) -> list[RecordedEvent]:
    """The events of one call that hold argument bytes, as the log has them now."""
    found = []
    for recorded in records:
        kept = recorded.kept
        if isinstance(kept, ArgumentsAppended | CallEnded | CallValidated) and kept.key == key:
            found.append(recorded)
    return found


def redacted(records: list[RecordedEvent], key: CallKey) -> bool:
    """Whether every argument-bearing event of the call is redacted (and there are some)."""
    events = sensitive(records, key)
    return bool(events) and all(isinstance(recorded.event, Redacted) for recorded in events)


def untouched(records: list[RecordedEvent], key: CallKey) -> bool:
    events = sensitive(records, key)
    return bool(events) and not any(isinstance(recorded.event, Redacted) for recorded in events)


async def read_all(log: Log) -> list[RecordedEvent]:
    return await log.read()


async def test_a_redacted_log_replays_to_the_same_ledger_and_digest() -> None:
    """Retention redacts what is finished, keeps what may still run, and changes no state."""
    store = MemoryStore()
    async with running(store, KEEP_EVERYTHING) as runtime:
        await every_kind_of_ending(runtime)
    # A restart ends the call left collecting and finds the dispatch without an outcome.
    async with running(store, KEEP_EVERYTHING) as runtime:
        await runtime.settle()
        whole = await read_all(runtime.log)
        digest = runtime.digest()
        ledger = runtime.ledger.snapshot()
    assert not any(isinstance(recorded.event, Redacted) for recorded in whole)
    assert replayed(whole).digest() == digest

    async with running(store, Retention()) as runtime:
        await runtime.settle()
        assert runtime.digest() == digest
        records = await read_all(runtime.log)
    assert len(records) == len(whole)
    for key in (
        COMPLETED,
        DENIED_WHILE_COLLECTING,
        MALFORMED,
        DENIED_AFTER_VALIDATION,
        COLLECTING,
        DISPATCHED,
    ):
        assert redacted(records, key), key.call
    assert untouched(records, READY)
    for recorded in records:
        if isinstance(recorded.event, Redacted):
            assert recorded.kept is not None
            assert b"Paris" not in repr(recorded.kept).encode()
    again = replayed(records)
    assert again.digest() == digest
    assert again.ledger.snapshot() == ledger

    async with running(store, Retention()) as runtime:
        await runtime.settle()
        assert runtime.digest() == digest
        assert runtime.phase(COMPLETED) is Phase.DISPATCHED
        row = runtime.ledger.row(DENIED_WHILE_COLLECTING)
        assert row is not None
        first_fragment = call_events(DENIED_WHILE_COLLECTING)[1]
        assert isinstance(first_fragment, ArgumentsAppended)
        assert (row.state, row.fragments, row.bytes) == ("cancelled", 1, len(first_fragment.data))
        with pytest.raises(ClaimRefused, match="call_terminal"):
            await runtime.claim(COMPLETED, executor="worker")
        dispatch = await runtime.claim(READY, executor="worker")
        assert dict(dispatch.arguments) == {"city": "Paris"}


async def test_a_live_runtime_redacts_as_calls_finish() -> None:
    """Fragments go once their response has no live call, arguments once the outcome is in."""
    async with running(MemoryStore(), Retention()) as runtime:
        await start(runtime)
        await ready_call(runtime, COMPLETED)
        records = await read_all(runtime.log)
        assert untouched(records, COMPLETED)
        dispatch = await runtime.claim(COMPLETED, executor="worker")
        await runtime.settle()
        records = await read_all(runtime.log)
        validated = [r for r in sensitive(records, COMPLETED) if r.event_type == CallValidated.TAG]
        assert not any(isinstance(recorded.event, Redacted) for recorded in validated)
        assert all(
            isinstance(recorded.event, Redacted)
            for recorded in sensitive(records, COMPLETED)
            if recorded.event_type != CallValidated.TAG
        )
        await runtime.complete(dispatch)
        await runtime.settle()
        records = await read_all(runtime.log)
        assert redacted(records, COMPLETED)
        assert replayed(records).digest() == runtime.digest()


async def test_a_finished_calls_fragments_go_while_a_sibling_of_its_response_is_live() -> None:
    """A call that ended has its fragments and arguments redacted at once, while another call
    of its response, still live, keeps every byte of its own in the same stream."""
    finished, live = key_of("a", response="shared"), key_of("b", response="shared")
    async with running(MemoryStore(), Retention()) as runtime:
        await start(runtime)
        await runtime.feed([*call_events(finished), *call_events(live)[:2]])
        await runtime.settle()
        await runtime.deny(finished, principal=PRINCIPAL)
        await runtime.settle()
        records = await read_all(runtime.log)
        assert redacted(records, finished)
        assert untouched(records, live)
        await runtime.feed([*call_events(live)[2:], response_end(live)])
        await runtime.settle()
        dispatch = await runtime.claim(live, executor="worker")
        await runtime.complete(dispatch)
        await runtime.settle()
        records = await read_all(runtime.log)
        assert redacted(records, finished)
        assert redacted(records, live)


async def test_arguments_alone_can_be_redacted_and_the_log_still_replays() -> None:
    """With fragments kept, a replay decides the calls again and accepts the emptied arguments."""
    store = MemoryStore()
    async with running(store, Retention(fragments=False)) as runtime:
        await start(runtime)
        await ready_call(runtime, COMPLETED)
        await runtime.execute(COMPLETED, _succeed, name="worker")
        await runtime.settle()
        digest = runtime.digest()
        records = await read_all(runtime.log)
    kinds = {
        recorded.event_type: isinstance(recorded.event, Redacted)
        for recorded in sensitive(records, COMPLETED)
    }
    assert kinds == {ArgumentsAppended.TAG: False, CallEnded.TAG: False, CallValidated.TAG: True}
    async with running(store, Retention(fragments=False)) as runtime:
        await runtime.settle()
        assert runtime.digest() == digest


async def test_no_retention_keeps_every_payload() -> None:
    """With retention off nothing is redacted, however the calls end."""
    store = MemoryStore()
    async with running(store, KEEP_EVERYTHING) as runtime:
        await every_kind_of_ending(runtime)
        records = await read_all(runtime.log)
    assert not any(isinstance(recorded.event, Redacted) for recorded in records)


async def test_a_confirmed_call_with_redacted_fragments_answers_its_claim_after_a_restart() -> None:
    """A claim left by a stopped process, of a confirmed call whose fragments were redacted,
    is answered after a restart: its validated arguments are in the log whole."""
    store = MemoryStore()
    key = key_of("mail", response="r-mail")
    async with running(store, KEEP_EVERYTHING) as runtime:
        await start(runtime)
        await ready_call(runtime, key, tool="send_email")
        pending = await runtime.pending_confirmation(key)
        assert pending is not None
        await runtime.confirm(key, principal=PRINCIPAL, arguments_digest=pending.arguments_digest)
        await runtime.settle()
    log = MemoryLog(store)
    await log.redact(key.response_ref.stream, 99, event_types=FRAGMENT_TYPES)
    claim = ClaimRequested(key=key, claim_id="left-behind", executor="worker")
    await log.append([NewEvent(stream=key.request_stream, event=claim)])
    async with running(store, Retention()) as runtime:
        await runtime.settle()
        row = runtime.ledger.row(key)
        assert row is not None
        assert (row.state, row.outcome) == ("dispatched", "unknown")
        # A claim the runtime dropped would never be answered: bounded, it fails instead.
        with trio.fail_after(10), pytest.raises(ClaimRefused, match="call_terminal"):
            await runtime.claim(key, executor="worker")


async def test_a_never_opened_call_with_redacted_fragments_still_answers_requests() -> None:
    """A call whose every input was refused keeps refusing after its fragments are redacted
    and the runtime restarts: a claim of it is answered, not dropped."""
    store = MemoryStore()
    stray = CallKey(
        tenant="acme", conversation="c1", turn="no-such-turn", response="r9", item="i", call="x"
    )
    async with running(store, Retention()) as runtime:
        await start(runtime)
        await runtime.feed([*call_events(stray), response_end(stray)])
        await runtime.settle()
        assert redacted(await read_all(runtime.log), stray)
    async with running(store, Retention()) as runtime:
        with trio.fail_after(10), pytest.raises(ClaimRefused, match="unknown_turn"):
            await runtime.claim(stray, executor="worker")


# --- a call's own fragments, whatever its siblings do -------------------------------------------


async def _failed_beside_a_ready_sibling(store: MemoryStore) -> tuple[CallKey, CallKey]:
    """A log in ``store`` (nothing redacted) where one call of a response failed (its arguments
    cut short) while its sibling is ready, then ran; the two keys."""
    failed, sibling = key_of("bad", response="shared"), key_of("good", response="shared")
    async with running(store, KEEP_EVERYTHING) as runtime:
        await start(runtime)
        await runtime.feed(_interleaved(call_events(failed, b'{"city": "Atlantis", '), sibling))
        await runtime.feed([response_end(sibling)])
        await runtime.settle()
        await runtime.execute(sibling, _succeed, name="worker")
        await runtime.settle()
    return failed, sibling


def _interleaved(failing: list[Event], sibling: CallKey, parts: int = 2) -> list[Event]:
    """The sibling opens before the failing call ends, and streams its fragments after."""
    rest = call_events(sibling, parts=parts)
    return [failing[0], rest[0], *failing[1:], *rest[1:]]


async def test_the_plan_makes_an_ended_calls_own_fragments_due_and_the_response_once_settled() -> (
    None
):
    """Folded event by event, the retention plan makes the failed call's fragment events due
    alone (limited to its key, up to its last one) as it fails at its end event, nothing of its
    sibling while that is live, the whole response's once the sibling's claim dispatches it,
    and the sibling's arguments once its outcome is in; each is given once."""
    store = MemoryStore()
    failed, sibling = await _failed_beside_a_ready_sibling(store)
    records = await read_all(MemoryLog(store))
    stream = failed.response_ref.stream
    last_of_failed = max(
        recorded.version
        for recorded in records
        if recorded.event_type in FRAGMENT_TYPES and getattr(recorded.event, "key", None) == failed
    )
    fold = CallFold(DEFAULT_LIMITS, digest_key=MemoryLog(store).key(DIGEST_KEY))
    plan = RetentionPlan(Retention())
    due: list[tuple[str, Redaction]] = []
    for recorded in records:
        fold.apply(recorded)
        plan.heard(recorded, fold)
        due += [(recorded.event_type, redaction) for redaction in plan.take(owns_every_turn)]
    assert due == [
        (CallEnded.TAG, (stream, last_of_failed, FRAGMENT_TYPES, (failed,))),
        (ClaimRequested.TAG, (stream, len(sensitive_rows(records, stream)), FRAGMENT_TYPES, None)),
        (ExecutionCompleted.TAG, (sibling.stream, 3, ARGUMENT_TYPES, None)),
    ]


def sensitive_rows(records: list[RecordedEvent], stream: str) -> list[RecordedEvent]:
    """Every event of a stream, up to its last fragment event (a prefix redaction's reach)."""
    last = max(r.version for r in records if r.stream == stream and r.event_type in FRAGMENT_TYPES)
    return [r for r in records if r.stream == stream and r.version <= last]


def test_calls_of_one_response_are_redacted_in_one_pass_still_due_in_a_snapshot() -> None:
    """The calls of one response that ended since the last ``take`` are one redaction of its
    stream, up to the last of their fragment events; taken and not reported made, it is due
    again in the plan as a snapshot holds it; once made, it is not."""
    plan = RetentionPlan(Retention())
    first, second = key_of("a"), key_of("b")
    plan._due_calls[first.response_ref.stream] = {first: 7, second: 4}
    [taken] = plan.take(owns_every_turn)
    assert taken == (first.response_ref.stream, 7, FRAGMENT_TYPES, (first, second))
    assert not plan.pending
    restored = _as_snapshotted(plan)
    assert restored.take(owns_every_turn) == [taken]
    plan.made(*taken[:2], taken[3])
    assert _as_snapshotted(plan).take(owns_every_turn) == []


def _as_snapshotted(plan: RetentionPlan) -> RetentionPlan:
    """The plan as a snapshot keeps it and a restart loads it."""
    shapes = state_shapes()
    restored: RetentionPlan = Reader(shapes)(Writer(shapes)(plan))
    return restored


async def test_on_sqlite_a_failed_calls_bytes_leave_the_rows_while_its_sibling_is_ready(
    tmp_path: Path,
) -> None:
    """On SQLite, a call that fails has its fragments redacted in the log's rows at once: no
    row of its response's stream holds a byte of its arguments, while its sibling, ready and
    unclaimed, keeps every row of its own whole and runs with them."""
    database = tmp_path / "retention.db"
    url = f"sqlite:///{database}"
    failed, sibling = key_of("bad", response="shared"), key_of("good", response="shared")
    secret = b'{"city": "Atlantis", '
    async with open_runtime(log=url, create=True, tools=TOOLS) as runtime:
        await start(runtime)
        await runtime.feed(_interleaved(call_events(failed, secret, parts=1), sibling, 1))
        await runtime.feed([response_end(sibling)])
        await runtime.settle()
        assert runtime.phase(failed) is Phase.FAILED
        assert runtime.projections.queue.ready() == [sibling]
        rows = _rows_of(database, failed.response_ref.stream)
        assert rows, "the response's stream has rows"
        assert not any(payload is not None and b"Atlantis" in payload for _, payload, _ in rows)
        fragments = [row for row in rows if row[0] == ArgumentsAppended.TAG]
        assert sum(digest is not None for _, _, digest in fragments) == 1
        assert [b"Paris" in (payload or b"") for _, payload, _ in fragments] == [False, True]
        dispatch = await runtime.claim(sibling, executor="worker")
        assert dict(dispatch.arguments) == {"city": "Paris"}


def _rows_of(database: Path, stream: str) -> list[tuple[str, bytes | None, bytes | None]]:
    """The event type, payload and redaction digest of each row of a stream, as stored."""
    with closing(sqlite3.connect(database)) as connection:
        return list(
            connection.execute(
                "SELECT e.event_type, e.payload, e.payload_digest FROM events AS e"
                " JOIN streams AS s ON s.stream_id = e.stream_id WHERE s.name = ?"
                " ORDER BY e.version",
                (stream,),
            )
        )


# --- ready calls nobody claims ------------------------------------------------------------------

READY_FOR = CallLimits(ready_lifetime=timedelta(minutes=5))


async def test_an_unclaimed_ready_call_expires_and_its_bytes_leave_the_log(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A ready call nobody claims is cancelled ``ready_expired`` when its lifetime ends (not
    before), its fragments and arguments are redacted, a claim then is refused, and a replay
    of the redacted log reaches the same state."""
    store = MemoryStore()
    log = MemoryLog(store, clock=trio_clock())
    key = key_of("late", response="r-late")
    async with open_runtime(log=log, tools=TOOLS, limits=READY_FOR) as runtime:
        await start(runtime)
        await ready_call(runtime, key)
        assert runtime.projections.queue.ready() == [key]
        await trio.sleep(4 * 60)
        await runtime.settle()
        assert runtime.phase(key) is Phase.VALIDATED
        assert untouched(await read_all(runtime.log), key)
        await trio.sleep(60 + 1)
        await runtime.settle()
        assert runtime.phase(key) is Phase.CANCELLED
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert row.terminal_reason == "ready_expired"
        assert runtime.projections.queue.ready() == []
        assert any(
            step.detail.startswith("ready until")
            for step in runtime.projections.ledger.history(key)
        )
        records = await read_all(runtime.log)
        assert redacted(records, key)
        assert replayed(records).digest() == runtime.digest()
        with pytest.raises(ClaimRefused, match="call_terminal"):
            await runtime.claim(key, executor="worker")
    await log.aclose()


async def test_a_ready_call_that_expired_while_no_runtime_ran_is_cancelled_at_the_restart(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A ready call whose lifetime ended while its runtime was stopped is cancelled
    ``ready_expired`` by the next runtime as it starts, and its bytes leave the log."""
    store = MemoryStore()
    clock = trio_clock()
    key = key_of("left", response="r-left")
    async with running_with(store, clock) as runtime:
        await start(runtime)
        await ready_call(runtime, key)
    await trio.sleep(6 * 60)
    async with running_with(store, clock) as runtime:
        await runtime.settle()
        await trio.sleep(1)
        await runtime.settle()
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert (row.state, row.terminal_reason) == ("cancelled", "ready_expired")
        assert redacted(await read_all(runtime.log), key)


async def test_a_runtime_given_another_ready_lifetime_keeps_the_one_a_call_recorded(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Restarted with a longer ``ready_lifetime``, a runtime replays the log, and a call ready
    before keeps the lifetime its ``CallReady`` recorded; a call made ready afterwards gets the
    new one."""
    store = MemoryStore()
    clock = trio_clock()
    before, after = key_of("before", response="r-before"), key_of("after", response="r-after")
    async with running_with(store, clock) as runtime:
        await start(runtime)
        await ready_call(runtime, before)
    longer = CallLimits(ready_lifetime=timedelta(hours=1))
    async with running_with(store, clock, longer) as runtime:
        await ready_call(runtime, after)
        await trio.sleep(6 * 60)
        await runtime.settle()
        assert runtime.phase(before) is Phase.CANCELLED
        assert runtime.phase(after) is Phase.VALIDATED


@asynccontextmanager
async def running_with(
    store: MemoryStore, clock: Callable[[], datetime], limits: CallLimits = READY_FOR
) -> AsyncIterator[Runtime]:
    """A runtime with the default retention and these limits, on a memory log in ``store``
    reading ``clock`` (one clock for every runtime of a test: the log's times go on)."""
    log = MemoryLog(store, clock=clock)
    try:
        async with open_runtime(log=log, tools=TOOLS, limits=limits) as runtime:
            yield runtime
    finally:
        await log.aclose()


def test_redactions_of_another_processs_turn_wait_until_this_one_gains_it() -> None:
    """Redactions due for a turn another process owns are held back, not pending; due once
    this process gains the turn; held as due in a snapshot; dropped when the turn retires."""
    mine, theirs = key_of("a", response="r1"), key_of("b", turn="t2", response="r2")
    plan = RetentionPlan(Retention())
    plan._due[mine.stream] = (3, ARGUMENT_TYPES, mine.turn_ref)
    plan._due[theirs.stream] = (5, ARGUMENT_TYPES, theirs.turn_ref)
    plan._due_calls[theirs.response_ref.stream] = {theirs: 4}

    owned = {mine.turn_ref}
    assert plan.take(owned.__contains__) == [Redaction(mine.stream, 3, ARGUMENT_TYPES)]
    assert plan.kept()["_due"][theirs.stream] == (5, ARGUMENT_TYPES, theirs.turn_ref)  # type: ignore[index]
    assert plan.take(owned.__contains__) == []
    held = [
        Redaction(theirs.stream, 5, ARGUMENT_TYPES),
        Redaction(theirs.response_ref.stream, 4, FRAGMENT_TYPES, (theirs,)),
    ]
    assert _as_snapshotted(plan).take(owns_every_turn)[1:] == held

    owned.add(theirs.turn_ref)
    plan.gained(theirs.turn_ref)
    assert plan.take(owned.__contains__) == held

    owned.remove(theirs.turn_ref)
    plan._due[theirs.stream] = (6, ARGUMENT_TYPES, theirs.turn_ref)
    assert plan.take(owned.__contains__) == []
    retired = TurnRetired(turn=theirs.turn_ref)
    plan.heard(
        RecordedEvent(
            position=9,
            event_id="retired",
            stream=theirs.turn_ref.stream,
            version=2,
            recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
            event_type=TurnRetired.TAG,
            schema_version=1,
            trace=None,
            event=retired,
        ),
        CallFold(DEFAULT_LIMITS),
    )
    plan.gained(theirs.turn_ref)
    assert plan.take(owns_every_turn) == []
