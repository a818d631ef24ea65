"""Runtime processes on a partitioned log: each folds the partitions it takes, turns start in
the process of their partition, controls reach every partition, and the partitions of a process
that falls silent are taken over with its turns."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
import trio.testing
from test_runtime import PRINCIPAL, TOOLS, call_events, response_end

from inert import (
    CallKey,
    ClaimRefused,
    NotOwner,
    PartitionedRuntime,
    Phase,
    TurnRef,
    open_partitioned_runtime,
    trio_clock,
)
from inert.events import ProcessHeartbeat, ProcessLeft, ToolDisabled, ToolEnabled, TurnLeased
from inert.log import Log, MemoryLog, MemoryStore, NewEvent
from inert.runtime._assignment import assign, owned_by

LEASE_TIME = 0.6
PARTITIONS = 4


@pytest.fixture
def log() -> Log:
    """One log, shared by the processes of a test as a database is."""
    return MemoryLog(MemoryStore(partitions=PARTITIONS))


@asynccontextmanager
async def process(log: Log, name: str) -> AsyncIterator[PartitionedRuntime]:
    async with open_partitioned_runtime(
        log=log, process=name, tools=TOOLS, lease_time=LEASE_TIME, operators=["operator:olga"]
    ) as runtime:
        yield runtime


async def until(runtime: PartitionedRuntime, condition: Callable[[], bool]) -> None:
    """Until the condition holds, looked at again as the runtime changes and every tenth of
    a second (who is alive changes with time alone)."""
    with trio.fail_after(10):
        while not condition():
            with trio.move_on_after(0.1):
                await runtime.changed()


def conversation_in(log: Log, partitions: list[int], name: str = "c") -> str:
    """A conversation of tenant acme that lives in one of these partitions."""
    return next(
        f"{name}{n}" for n in range(1000) if log.partition_of("acme", f"{name}{n}") in partitions
    )


def key_in(conversation: str, call: str = "a") -> CallKey:
    return CallKey(
        tenant="acme",
        conversation=conversation,
        turn="t1",
        response=f"r-{conversation}",
        item=call,
        call=call,
    )


async def start(runtime: PartitionedRuntime, key: CallKey) -> TurnRef:
    return await runtime.start_turn(
        tenant=key.tenant, conversation=key.conversation, turn=key.turn, principal=PRINCIPAL
    )


async def test_one_process_folds_every_partition_and_runs_calls(log: Log) -> None:
    """Alone on the log, a process folds every partition and runs a call of any of them once."""
    async with process(log, "p1") as runtime:
        assert runtime.partitions_owned() == [1, 2, 3, 4]
        key = key_in(conversation_in(log, [3]))
        await start(runtime, key)
        await runtime.feed([*call_events(key), response_end(key)])
        await runtime.settle()
        dispatch = await runtime.claim(key, executor="worker")
        assert dict(dispatch.arguments) == {"city": "Paris"}
        await runtime.complete(dispatch)
        await runtime.settle()
        row = runtime.row(key)
        assert row is not None
        assert row.outcome == "completed"
        assert [e.event_type for e in await log.partition(3).read_stream(key.stream)].count(
            "decision.dispatched"
        ) == 1
        assert await log.partition(1).read_stream(key.stream) == []


async def test_two_processes_share_the_partitions_and_turns_go_to_theirs(log: Log) -> None:
    """Two processes each fold half the partitions; a turn is started in the process of its
    partition, and refused elsewhere, naming that process."""
    async with process(log, "p1") as first, process(log, "p2") as second:
        await until(first, lambda: len(first.partitions_owned()) == 2)
        await until(second, lambda: len(second.partitions_owned()) == 2)
        assert sorted(first.partitions_owned() + second.partitions_owned()) == [1, 2, 3, 4]
        key = key_in(conversation_in(log, second.partitions_owned()))
        with pytest.raises(NotOwner, match="which process 'p2' takes new turns of"):
            await start(first, key)
        await start(second, key)
        await second.feed([*call_events(key), response_end(key)])
        await second.settle()
        assert first.row(key) is None
        row = second.row(key)
        assert row is not None
        assert row.state is Phase.VALIDATED


async def test_a_control_stops_the_calls_of_every_partition(log: Log) -> None:
    """A tool disabled through one process ends the ready calls of both processes'
    partitions before any claim, and a claim after it is refused."""
    async with process(log, "p1") as first, process(log, "p2") as second:
        await until(first, lambda: len(first.partitions_owned()) == 2)
        await until(second, lambda: len(second.partitions_owned()) == 2)
        keys = []
        for runtime in (first, second):
            key = key_in(conversation_in(log, runtime.partitions_owned(), runtime.process))
            await start(runtime, key)
            await runtime.feed([*call_events(key), response_end(key)])
            await runtime.settle()
            keys.append(key)
        await first.give_control(
            ToolDisabled(tool="get_weather", tenant=None, operator="operator:olga", reason="x")
        )
        for runtime, key in zip((first, second), keys, strict=True):
            with pytest.raises(ClaimRefused):
                await runtime.claim(key, executor="worker")
            await runtime.settle()
            row = runtime.row(key)
            assert row is not None
            assert row.state is Phase.CANCELLED
            assert row.terminal_reason == "tool_disabled"


async def test_a_silent_process_s_partitions_and_turns_are_taken_over(log: Log) -> None:
    """A process that stops beating loses its partitions to the survivor: what it streamed is
    lost, what its executor claimed has an unknown outcome, and nothing runs twice."""
    async with process(log, "survivor") as survivor:
        with trio.CancelScope() as killed:
            async with process(log, "doomed") as doomed:
                await until(doomed, lambda: len(doomed.partitions_owned()) == 2)
                await until(survivor, lambda: len(survivor.partitions_owned()) == 2)
                mine = doomed.partitions_owned()
                collecting = key_in(conversation_in(log, mine, "x"))
                claimed = key_in(conversation_in(log, mine, "y"))
                await start(doomed, collecting)
                await start(doomed, claimed)
                await doomed.feed(call_events(collecting)[:2])
                await doomed.feed([*call_events(claimed), response_end(claimed)])
                await doomed.settle()
                await doomed.claim(claimed, executor="doomed-worker")
                await doomed.settle()
                # Killed, not stopped: it never says it left, and falls silent.
                killed.cancel()
                await trio.lowlevel.checkpoint()
        await until(survivor, lambda: survivor.partitions_owned() == [1, 2, 3, 4])
        await until(
            survivor,
            lambda: (row := survivor.row(collecting)) is not None and row.state is Phase.CANCELLED,
        )
        row = survivor.row(collecting)
        assert row is not None
        assert row.terminal_reason == "connection_lost"
        await until(
            survivor,
            lambda: (row := survivor.row(claimed)) is not None and row.outcome == "unknown",
        )
        partition = log.partition(log.partition_of("acme", claimed.conversation))
        decisions = [e.event_type for e in await partition.read_stream(claimed.stream)]
        assert decisions.count("decision.dispatched") == 1


async def test_a_process_that_leaves_has_its_partitions_and_turns_taken_over_at_once(
    log: Log,
) -> None:
    """A process that stops cleanly says so (``ProcessLeft``): the survivor takes its
    partitions and turns without waiting out a lease far longer than the test, and records what
    its executor claimed and never reported as of unknown outcome."""
    long_lease = 60.0

    def lasting(name: str) -> contextlib.AbstractAsyncContextManager[PartitionedRuntime]:
        return open_partitioned_runtime(
            log=log, process=name, tools=TOOLS, lease_time=long_lease, operators=["operator:olga"]
        )

    async with lasting("survivor") as survivor:
        async with lasting("leaving") as leaving:
            await until(leaving, lambda: len(leaving.partitions_owned()) == 2)
            await until(survivor, lambda: len(survivor.partitions_owned()) == 2)
            claimed = key_in(conversation_in(log, leaving.partitions_owned(), "y"))
            await start(leaving, claimed)
            await leaving.feed([*call_events(claimed), response_end(claimed)])
            await leaving.settle()
            await leaving.claim(claimed, executor="leaving-worker")
            await leaving.settle()
        await until(survivor, lambda: survivor.partitions_owned() == [1, 2, 3, 4])
        assert survivor.alive() == ["survivor"]
        await until(
            survivor,
            lambda: (row := survivor.row(claimed)) is not None and row.outcome == "unknown",
        )
    left = [r.event for r in await log.read() if isinstance(r.event, ProcessLeft)]
    assert left == [ProcessLeft(process="leaving"), ProcessLeft(process="survivor")]


async def test_a_joining_process_takes_its_share_once_its_turns_are_done_elsewhere(
    log: Log,
) -> None:
    """A process that joins takes its share at once where nothing is under way; a partition
    where the first process's call is still arriving stays with it until the call is over,
    then its turn is leased to the newcomer, which decides for it from there; nothing is
    decided twice."""
    theirs = owned_by(assign(range(1, PARTITIONS + 1), ["p1", "p2"]), "p2")
    key = key_in(conversation_in(log, theirs[:1]))
    partition = theirs[0]
    async with process(log, "p1") as first:
        turn = await start(first, key)
        await first.feed(call_events(key)[:2])
        await first.settle()
        async with process(log, "p2") as second:
            await until(second, lambda: second.partitions_owned() == theirs)
            await until(first, lambda: first.assignment().get(partition) == "p2")
            assert partition in first.partitions_owned()
            await first.feed([*call_events(key)[2:], response_end(key)])
            dispatch = await first.claim(key, executor="worker-1")
            await first.complete(dispatch)
            await until(first, lambda: partition not in first.partitions_owned())
            await until(second, lambda: second.core(partition).turn_owner(turn) == "p2")
            later = CallKey(
                tenant=key.tenant,
                conversation=key.conversation,
                turn=key.turn,
                response="r-later",
                item="b",
                call="b",
            )
            await second.feed([*call_events(later), response_end(later)])
            await second.settle()
            row = second.row(later)
            assert row is not None
            assert row.state is Phase.VALIDATED
            decisions = [
                e.event_type for e in await log.partition(partition).read_stream(key.stream)
            ]
            assert decisions.count("decision.dispatched") == 1
            assert decisions.count("decision.validated") == 1


async def test_claims_made_together_share_a_read_of_the_control_head(
    log: Log, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claims made at once read the control partition's head a few times, not once each, and
    each is dispatched once."""
    async with process(log, "p1") as runtime:
        keys = [key_in(f"c{n}") for n in range(20)]
        for key in keys:
            await start(runtime, key)
            await runtime.feed([*call_events(key), response_end(key)])
        await runtime.settle()
        reads = 0
        head = log.head

        async def counted() -> int:
            nonlocal reads
            reads += 1
            return await head()

        monkeypatch.setattr(log, "head", counted)
        async with trio.open_nursery() as nursery:
            for key in keys:
                nursery.start_soon(partial(runtime.claim, key, executor="worker"))
        assert 1 <= reads < len(keys) // 2
        await runtime.settle()
        assert all((row := runtime.row(key)) and row.state is Phase.DISPATCHED for key in keys)


class PausableLog(MemoryLog):
    """A shared memory log on the trio clock whose heartbeats of one process can be held
    back, as a long pause of that process would: it runs on, and the others bury it."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store, clock=trio_clock())
        self.paused: str | None = None
        self.resumed = trio.Event()

    async def append(
        self, events: Sequence[NewEvent], expected_versions: Mapping[str, int] | None = None
    ) -> list[int]:
        if any(
            isinstance(new.event, ProcessHeartbeat) and new.event.process == self.paused
            for new in events
        ):
            await self.resumed.wait()
        return await super().append(events, expected_versions)


async def test_a_process_whose_turn_was_taken_over_and_handed_back_answers_its_requests(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A process taken for dead while it ran on loses its turn to a survivor, which decides
    for its call; once it beats again and gets the turn back, it answers the call's next
    request at once, after those decisions (before, its append at the call's old version
    was refused and the answer lost, and the next decision broke its fold)."""
    log = PausableLog(MemoryStore(partitions=PARTITIONS))
    async with process(log, "survivor") as survivor, process(log, "paused") as paused:
        await until(paused, lambda: len(paused.partitions_owned()) == 2)
        await until(survivor, lambda: len(survivor.partitions_owned()) == 2)
        mine = paused.partitions_owned()
        key = key_in(conversation_in(log, mine))
        partition = log.partition_of(key.tenant, key.conversation)
        turn = await start(paused, key)
        await paused.feed(call_events(key)[:2])
        await paused.settle()
        log.paused = "paused"
        await until(
            survivor,
            lambda: (row := survivor.row(key)) is not None and row.state is Phase.CANCELLED,
        )
        log.paused = None
        log.resumed.set()
        await until(paused, lambda: paused.core(partition).turn_owner(turn) == "paused")
        with pytest.raises(ClaimRefused, match="call_terminal"):
            await paused.claim(key, executor="worker")
        await paused.settle()
        decisions = [e.event_type for e in await log.partition(partition).read_stream(key.stream)]
        assert decisions.count("decision.cancelled") == 1


async def test_an_executor_may_stop_taking_ready_calls_without_a_warning(log: Log) -> None:
    """An executor that leaves the ready calls it iterates (here, after the first) leaves
    nothing unfinished behind: nothing warns when it is collected."""
    async with process(log, "p1") as runtime:
        key = key_in(conversation_in(log, [2]))
        await start(runtime, key)
        await runtime.feed([*call_events(key), response_end(key)])
        await runtime.settle()
        async for ready in runtime.ready_calls():
            assert ready.key == key
            break
        gc.collect()


async def test_a_partition_handed_on_is_kept_while_a_turn_taken_over_meanwhile_is_held(
    autojump_clock: trio.testing.MockClock, log: Log
) -> None:
    """A process handing a partition on that takes a turn there over as it settles (it buried
    a process a moment before that one beat again) keeps folding the partition, and hands the
    turn on at its next pass: it never stops answering for a turn it holds."""
    async with process(log, "p1") as runtime:
        await until(runtime, lambda: len(runtime.partitions_owned()) == PARTITIONS)
        partition = 2
        key = key_in(conversation_in(log, [partition]))
        turn = key.turn_ref
        core = runtime.core(partition)
        settle = core.settle
        settled = 0

        async def burying_settle() -> None:
            nonlocal settled
            settled += 1
            if settled == 2:
                taken = TurnLeased(turn=turn, owner="p1", previous="p3")
                await core.log.append([NewEvent(stream=turn.lease_stream, event=taken)])
            await settle()

        core.settle = burying_settle  # type: ignore[method-assign]
        runtime._owners[partition] = "p2"
        await runtime._hand_on(partition)
        assert partition in runtime.partitions_owned()
        assert core.turn_owner(turn) == "p1"
        core.settle = settle  # type: ignore[method-assign]
        runtime._owners[partition] = "p2"
        await runtime._hand_on(partition)
        assert partition not in runtime.partitions_owned()
        assert core.turn_owner(turn) == "p2"


async def test_a_control_heard_while_a_partition_starts_does_not_break_its_start(
    autojump_clock: trio.testing.MockClock, log: Log
) -> None:
    """A control heard while a partition's runtime starts (its append of the controls heard
    so far waiting on the log) joins the controls, not the batch under way: the start goes
    on (before, the log paired the grown batch with the positions of the smaller one, a
    ``ValueError`` that stopped the process)."""
    async with process(log, "p1") as runtime:
        await until(runtime, lambda: len(runtime.partitions_owned()) == PARTITIONS)
        await runtime.give_control(
            ToolDisabled(tool="get_weather", tenant="acme", operator="operator:olga", reason="x")
        )
        partition = 2
        partition_log = log.partition(partition)
        append_records = partition_log._append_records
        heard = ToolEnabled(tool="get_weather", tenant="acme", operator="operator:olga", reason="")

        async def heard_meanwhile(records: Any, expected: Any) -> list[int]:
            positions = await append_records(records, expected)
            runtime._controls.append(NewEvent(stream="control/tenant/acme", event=heard))
            return positions

        runtime._scopes.pop(partition).cancel()
        del runtime._cores[partition]
        partition_log._append_records = heard_meanwhile  # type: ignore[method-assign]
        await runtime._rebalance()
        assert partition in runtime.partitions_owned()
