"""Retention: argument payloads leave the log once nothing can need them, and nothing changes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
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
    ArgumentsAppended,
    CallEnded,
    CallKey,
    ClaimRefused,
    Log,
    Phase,
    RecordedEvent,
    Retention,
    Runtime,
    open_runtime,
    trio_clock,
)
from inert.events import CallValidated, ClaimRequested, Redacted
from inert.log import MemoryLog, MemoryStore, NewEvent
from inert.projections import Projections
from inert.runtime._retention import FRAGMENT_TYPES

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
