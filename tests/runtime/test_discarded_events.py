"""Events the decider could only refuse are counted, not stored one by one.

The decider can only reject a fragment or an end event of a terminal call, and only fail a call
opened in a response that passed a limit on live calls (rules 3), with whatever comes for it.
The ingress does not write such events: it counts them, and each append of the log writes one
``EventsDiscarded`` per call they are counted under (the ended call itself, or the call that
passed the limit) with the calls, events, fragments and bytes dropped since the last. A hostile
stream makes the log grow with its commits, not with its events; the calls and everything the
log shows of them are as they were, and a replay gives the same state.
"""

from __future__ import annotations

import trio
from test_runtime import (
    PRINCIPAL,
    call_events,
    key_of,
    ready_call,
    response_end,
    running,
    start,
)

from inert import ArgumentsAppended, CallKey, CallLimits, Phase, Runtime
from inert.events import DiscardReason, EventRejected, EventsDiscarded, FailReason, RecordedEvent
from inert.log import MemoryStore


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


async def _cancelled_while_collecting(runtime: Runtime, key: CallKey) -> None:
    """Start the call's turn, open the call with a fragment, and cancel the turn."""
    turn = await start(runtime)
    await runtime.feed(call_events(key)[:2])
    await runtime.cancel_turn(turn, principal="user:alice")
    await runtime.settle()


async def test_a_flood_for_a_cancelled_call_costs_a_row_per_append() -> None:
    """Ten thousand fragments fed for a call whose turn was cancelled leave one
    ``EventsDiscarded`` row per append of the log (not two rows per fragment), which count
    every fragment and byte, and no fragment or rejection of their own."""
    store = MemoryStore()
    key = key_of("a")
    async with running(store) as runtime:
        await _cancelled_while_collecting(runtime, key)
        assert runtime.phase(key) is Phase.CANCELLED
        before = len(store.rows)
        for batch in range(10):
            for number in range(1000):
                await runtime.feed([fragment(key, 10 + batch * 1000 + number)])
            await runtime.settle()
        written = store.rows[before:]
        # The writer appends whenever a feed yields (every 64th) or settles.
        assert len(written) <= 10_000 // 64 + 10
        assert {row.event_type for row in written} == {EventsDiscarded.TAG}
        events = [recorded.event for recorded in await _events_of(runtime, key)]
        discarded = [event for event in events if isinstance(event, EventsDiscarded)]
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
        assert EventsDiscarded not in kinds
        assert kinds.count(ArgumentsAppended) == 2
        [counted] = [
            recorded.event
            for recorded in await _events_of(runtime, dispatched)
            if isinstance(recorded.event, EventsDiscarded)
        ]
        assert (counted.fragments, counted.size) == (1, 8)


async def test_a_log_with_discarded_fragments_replays_to_the_same_state() -> None:
    """The ledger's history shows the count; a restart on a log that holds counts of discarded
    fragments reaches the same digest and ledger, the call still ended."""
    store = MemoryStore()
    key = key_of("a")
    async with running(store) as runtime:
        await _cancelled_while_collecting(runtime, key)
        await runtime.feed([fragment(key, number) for number in range(20, 40)])
        await runtime.feed([response_end(key)])
        await runtime.settle()
        digest = runtime.digest()
        row = runtime.ledger.row(key)
        details = [step.detail for step in runtime.ledger.histories()[key]]
        assert "20 events (20 fragments, 160 bytes) discarded: the call had ended" in details
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
        await _cancelled_while_collecting(runtime, key)
        with trio.fail_after(5):
            await runtime.feed([fragment(key, 7), fragment(key, 8), response_end(key)])
        tail = [type(recorded.event).__name__ for recorded in (await runtime.log.read())[-2:]]
        assert tail == ["EventsDiscarded", "ResponseEnded"]


async def test_a_response_past_its_live_call_limit_opens_no_call_and_no_row_per_call() -> None:
    """Once a call of a response fails the limit on live calls, the response opens no call any
    more: five hundred more calls with their fragments and end events leave a few counts under
    the call that passed the limit, no ledger row each; another response opens calls as before,
    and a restart reaches the same state."""
    store = MemoryStore()
    limits = CallLimits(max_live_per_turn=2)
    first, second, passing = key_of("a"), key_of("b"), key_of("c")
    async with running(store, limits=limits) as runtime:
        await start(runtime)
        await runtime.start_turn(tenant="acme", conversation="c2", turn="t2", principal="user:bo")
        await runtime.feed(call_events(first)[:2] + call_events(second)[:2])
        await runtime.feed(call_events(passing)[:1])
        await runtime.settle()
        row = runtime.ledger.row(passing)
        assert row is not None
        assert row.terminal_reason == FailReason.LIMIT_EXCEEDED.value
        before = len(store.rows)
        for number in range(500):
            await runtime.feed(call_events(key_of(f"late-{number}")))
        await runtime.settle()
        written = [row.event_type for row in store.rows[before:]]
        assert set(written) == {EventsDiscarded.TAG}
        assert len(written) < 50
        counts = [
            recorded.event
            for recorded in await runtime.log.read(before + 1)
            if isinstance(recorded.event, EventsDiscarded)
        ]
        assert {(event.key, event.reason) for event in counts} == {
            (passing, DiscardReason.RESPONSE_OVER_LIMIT)
        }
        assert sum(event.events for event in counts) == 2000
        assert sum(event.fragments for event in counts) == 1000
        assert all(runtime.ledger.row(key_of(f"late-{n}")) is None for n in range(500))
        details = [step.detail for step in runtime.ledger.histories()[passing]]
        assert any("passed the limit on live calls discarded" in detail for detail in details)
        other = CallKey(
            tenant="acme", conversation="c2", turn="t2", response="r9", item="z", call="z"
        )
        await runtime.feed([*call_events(other), response_end(other)])
        await runtime.settle()
        assert runtime.phase(other) is Phase.VALIDATED
        # Nothing left assembling, so that the restart has nothing to cancel.
        await runtime.cancel_turn(first.turn_ref, principal=PRINCIPAL)
        await runtime.settle()
        digest = runtime.digest()
    async with running(store, limits=limits) as again:
        await again.settle()
        assert again.digest() == digest
