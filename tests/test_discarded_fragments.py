"""Fragments for a call that has ended are counted, not stored one by one.

The decider can only reject a fragment of a terminal call, so the ingress does not write it: it
counts it, and each append of the log writes one ``FragmentsDiscarded`` per call with the
fragments and bytes dropped since the last. A stream that keeps sending for an ended call makes
the log grow with its commits, not with its fragments; the ended call and everything the log
shows of it are as they were, and a replay gives the same state.
"""

from __future__ import annotations

import trio
from test_runtime import ARGUMENTS, call_events, key_of, ready_call, response_end, running, start

from inert import (
    ArgumentsAppended,
    CallKey,
    EventRejected,
    FragmentsDiscarded,
    MemoryStore,
    Phase,
    Runtime,
)
from inert.events import RecordedEvent


def fragment(key: CallKey, sequence: int, data: bytes = b"xxxxxxxx") -> ArgumentsAppended:
    return ArgumentsAppended(
        key=key,
        data=data,
        offset=1000 + sequence * len(data),
        first_sequence=sequence,
        last_sequence=sequence,
    )


async def _events_of(runtime: Runtime, key: CallKey) -> list[RecordedEvent]:
    return [
        recorded
        for recorded in await runtime.log.read()
        if getattr(recorded.event, "key", None) == key
    ]


async def test_a_flood_for_a_cancelled_call_costs_a_row_per_append() -> None:
    """Ten thousand fragments fed for a call whose turn was cancelled leave one
    ``FragmentsDiscarded`` row per append of the log (not two rows per fragment), which count
    every fragment and byte, and no fragment or rejection of their own."""
    store = MemoryStore()
    key = key_of("a")
    async with running(store) as runtime:
        turn = await start(runtime)
        await runtime.feed(call_events(key)[:2])
        await runtime.cancel_turn(turn, principal="user:alice")
        await runtime.settle()
        assert runtime.phase(key) is Phase.CANCELLED
        before = len(store.rows)
        for batch in range(10):
            for number in range(1000):
                await runtime.feed([fragment(key, 10 + batch * 1000 + number)])
            await runtime.settle()
        written = store.rows[before:]
        # The writer appends whenever a feed yields (every 64th) or settles.
        assert len(written) <= 10_000 // 64 + 10
        assert {row.event_type for row in written} == {FragmentsDiscarded.TAG}
        events = [recorded.event for recorded in await _events_of(runtime, key)]
        discarded = [event for event in events if isinstance(event, FragmentsDiscarded)]
        assert sum(event.fragments for event in discarded) == 10_000
        assert sum(event.size for event in discarded) == 80_000
        rejected_after = [
            event
            for recorded in (await runtime.log.read())[before:]
            if isinstance(event := recorded.event, EventRejected | ArgumentsAppended)
        ]
        assert rejected_after == []
        assert runtime.phase(key) is Phase.CANCELLED


async def test_fragments_of_a_live_call_are_stored_and_of_a_dispatched_one_counted() -> None:
    """Only a call that has ended loses its fragments: one collecting keeps them; a dispatched
    one, ended too, counts them."""
    store = MemoryStore()
    live, dispatched = key_of("a"), key_of("b", response="r2")
    async with running(store) as runtime:
        await start(runtime)
        await runtime.feed(call_events(live)[:2])
        await ready_call(runtime, dispatched)
        dispatch = await runtime.claim(dispatched, executor="worker")
        await runtime.complete(dispatch)
        await runtime.feed([fragment(live, 5, b"1"), fragment(dispatched, 9)])
        await runtime.settle()
        kinds = [type(recorded.event) for recorded in await _events_of(runtime, live)]
        assert FragmentsDiscarded not in kinds
        assert kinds.count(ArgumentsAppended) == 2
        [counted] = [
            recorded.event
            for recorded in await _events_of(runtime, dispatched)
            if isinstance(recorded.event, FragmentsDiscarded)
        ]
        assert (counted.fragments, counted.size) == (1, 8)


async def test_a_log_with_discarded_fragments_replays_to_the_same_state() -> None:
    """The ledger's history shows the count; a restart on a log that holds counts of discarded
    fragments reaches the same digest and ledger, the call still ended."""
    store = MemoryStore()
    key = key_of("a")
    async with running(store) as runtime:
        turn = await start(runtime)
        await runtime.feed(call_events(key, ARGUMENTS)[:2])
        await runtime.cancel_turn(turn, principal="user:alice")
        await runtime.settle()
        await runtime.feed([fragment(key, number) for number in range(20, 40)])
        await runtime.feed([response_end(key)])
        await runtime.settle()
        digest = runtime.digest()
        row = runtime.ledger.row(key)
        details = [step.detail for step in runtime.ledger.histories()[key]]
        assert "20 fragments (160 bytes) discarded: the call had ended" in details
    async with running(store) as again:
        await again.settle()
        assert again.digest() == digest
        assert again.ledger.row(key) == row
        assert again.phase(key) is Phase.CANCELLED


async def test_a_promise_feed_carries_the_count_before_its_promise() -> None:
    """Fragments for an ended call fed with a promise (the response's end) are counted in the
    same append, written before the promise."""
    store = MemoryStore()
    key = key_of("a")
    async with running(store) as runtime:
        turn = await start(runtime)
        await runtime.feed(call_events(key)[:2])
        await runtime.cancel_turn(turn, principal="user:alice")
        await runtime.settle()
        with trio.fail_after(5):
            await runtime.feed([fragment(key, 7), fragment(key, 8), response_end(key)])
        tail = [type(recorded.event).__name__ for recorded in (await runtime.log.read())[-2:]]
        assert tail == ["FragmentsDiscarded", "ResponseEnded"]
