"""Several runtime processes on one log: leases, fencing, shared claims, controls, takeover."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from test_runtime import PRINCIPAL, TOOLS, call_events, ready_call, response_end

from inert import (
    CallKey,
    CallUnderValidation,
    ClaimRefused,
    Log,
    Phase,
    RecordedEvent,
    Runtime,
    ToolDeclaration,
    TurnRef,
    open_log,
    open_runtime,
)
from inert.events import CallCancelled, CallDispatched, ProcessHeartbeat, ProcessLeft, TurnLeased
from inert.log import NewEvent

LEASE_TIME = 0.6


@asynccontextmanager
async def process(path: Path, name: str, lease_time: float = LEASE_TIME) -> AsyncIterator[Runtime]:
    """A runtime named ``name`` on the SQLite file every process of the test shares."""
    url = f"sqlite:///{path / 'shared.db'}?poll_interval=0.02"
    async with open_runtime(
        log=url,
        create=True,
        tools=TOOLS,
        process=name,
        lease_time=lease_time,
        operators=["operator:olga"],
    ) as runtime:
        yield runtime


async def start(runtime: Runtime, turn: str) -> TurnRef:
    """A turn of its own conversation (so that no turn supersedes another)."""
    return await runtime.start_turn(
        tenant="acme", conversation=turn, turn=turn, principal=PRINCIPAL
    )


def key_of(call: str, *, turn: str, response: str) -> CallKey:
    return CallKey(
        tenant="acme", conversation=turn, turn=turn, response=response, item=call, call=call
    )


async def read_all(path: Path) -> list[RecordedEvent]:
    async with open_log(f"sqlite:///{path / 'shared.db'}") as log:
        return await log.read()


async def caught_up(*runtimes: Runtime) -> None:
    """Until each runtime has folded and acted on everything in the log now."""
    for _ in range(3):
        for runtime in runtimes:
            await runtime.settle()


async def decisions_of(log: Log, key: CallKey) -> list[RecordedEvent]:
    return await log.read_stream(key.stream)


async def until(runtime: Runtime, condition: Callable[[], bool]) -> None:
    """Until the condition holds, looked at again each time the runtime hears an event."""
    with trio.fail_after(10):
        async for _ in runtime.changes():
            if condition():
                return


async def test_a_call_is_decided_by_its_owner_and_claimed_from_any_process(
    tmp_path: Path,
) -> None:
    """The process that started the turn decides; another's executor claims the call once."""
    async with process(tmp_path, "p1") as first, process(tmp_path, "p2") as second:
        key = key_of("a", turn="t1", response="r1")
        await start(first, "t1")
        await ready_call(first, key)
        await caught_up(first, second)
        assert second.projections.queue.ready() == [key]
        dispatch = await second.claim(key, executor="worker-2")
        assert dict(dispatch.arguments) == {"city": "Paris"}
        await second.complete(dispatch)
        try:
            await first.claim(key, executor="worker-1")
            raise AssertionError("a second claim dispatched")
        except ClaimRefused:
            pass
        await caught_up(first, second)
        dispatched = [
            recorded
            for recorded in await decisions_of(first.log, key)
            if isinstance(recorded.event, CallDispatched)
        ]
        assert len(dispatched) == 1
        assert first.digest() == second.digest()


async def test_controls_and_cancellations_reach_every_process(tmp_path: Path) -> None:
    """A control issued through one process cancels the calls another process owns."""
    async with process(tmp_path, "p1") as first, process(tmp_path, "p2") as second:
        key = key_of("a", turn="t1", response="r1")
        await start(first, "t1")
        await first.feed(call_events(key)[:2])
        await caught_up(first, second)
        await second.disable_tool("get_weather", operator="operator:olga", reason="incident")
        await caught_up(first, second)
        assert first.phase(key) is Phase.CANCELLED
        assert second.phase(key) is Phase.CANCELLED
        [cancelled] = [
            recorded.event
            for recorded in await decisions_of(first.log, key)
            if isinstance(recorded.event, CallCancelled)
        ]
        assert cancelled.reason.value == "tool_disabled"


async def test_a_stale_owner_s_decisions_are_refused(tmp_path: Path) -> None:
    """Once another process holds the lease, the former owner's writes are fenced off."""
    async with (
        process(tmp_path, "p1", lease_time=60) as first,
        process(tmp_path, "p2", lease_time=60) as second,
    ):
        key = key_of("a", turn="t1", response="r1")
        turn = await start(first, "t1")
        await first.feed(call_events(key)[:2])
        await caught_up(first, second)
        assert first.turn_owner(turn) == second.turn_owner(turn) == "p1"
        await second.log.append(
            [
                NewEvent(
                    stream=turn.lease_stream,
                    event=TurnLeased(turn=turn, owner="p2", previous="p1"),
                )
            ],
            {turn.lease_stream: 1},
        )
        await first.cancel_turn(turn, principal=PRINCIPAL)
        await caught_up(first, second)
        events = [recorded.event for recorded in await decisions_of(first.log, key)]
        assert [type(event).__name__ for event in events].count("CallCancelled") == 1
        assert first.phase(key) is second.phase(key) is Phase.CANCELLED


@pytest.mark.parametrize("how", ["killed", "left"])
async def test_a_process_that_is_gone_has_its_turns_taken_over(tmp_path: Path, how: str) -> None:
    """A process that stops beating (killed), or says it left as it stops (with a lease far
    longer than the test, so that only its word can tell), loses its turns: what it streamed
    is lost, what was ready runs elsewhere, and what its executor had claimed has an unknown
    outcome."""
    lease_time = LEASE_TIME if how == "killed" else 60.0
    collecting = key_of("a", turn="t1", response="r1")
    ready = key_of("b", turn="t2", response="r2")
    claimed = key_of("c", turn="t3", response="r3")
    async with process(tmp_path, "survivor", lease_time) as survivor:
        with trio.CancelScope() as killed:
            async with process(tmp_path, "doomed", lease_time) as doomed:
                for turn in ("t1", "t2", "t3"):
                    await start(doomed, turn)
                await doomed.feed(call_events(collecting)[:2])
                await ready_call(doomed, ready)
                await ready_call(doomed, claimed)
                await doomed.claim(claimed, executor="doomed-worker")
                await caught_up(doomed, survivor)
                if how == "killed":
                    # It says nothing: its heartbeats stop with it.
                    killed.cancel()
                    await trio.lowlevel.checkpoint()
        await until(survivor, lambda: survivor.phase(collecting) is Phase.CANCELLED)
        await caught_up(survivor)
        assert {survivor.turn_owner(key.turn_ref) for key in (collecting, ready, claimed)} == {
            "survivor"
        }
        row = survivor.ledger.row(collecting)
        assert row is not None
        assert row.terminal_reason == "connection_lost"
        dispatch = await survivor.claim(ready, executor="survivor-worker")
        await survivor.complete(dispatch)
        await until(survivor, lambda: (survivor.ledger.row(claimed) or row).outcome == "unknown")
        try:
            await survivor.claim(claimed, executor="survivor-worker")
            raise AssertionError("an unknown outcome was dispatched again")
        except ClaimRefused:
            pass
        said = [
            recorded.event
            for recorded in await survivor.log.read()
            if isinstance(recorded.event, ProcessHeartbeat | ProcessLeft)
        ]
        assert {event.process for event in said} == {"survivor", "doomed"}
        left = [event for event in said if isinstance(event, ProcessLeft)]
        assert left == ([] if how == "killed" else [ProcessLeft(process="doomed")])


async def test_a_process_whose_fold_lags_buries_no_peer_that_still_beats(tmp_path: Path) -> None:
    """A process whose router is held up (its one busy actor waits for a slow validation) takes
    no peer for dead on the heartbeats it has not folded yet: the live peer keeps its turn."""
    validating = trio.Event()
    release = trio.Event()

    async def slow_validator(call: CallUnderValidation) -> None:
        validating.set()
        await release.wait()

    url = f"sqlite:///{tmp_path / 'shared.db'}?poll_interval=0.02"
    async with (
        process(tmp_path, "peer") as peer,
        open_runtime(
            log=url,
            tools=[ToolDeclaration(name="get_weather", validator=slow_validator)],
            process="lagging",
            lease_time=LEASE_TIME,
            validation_timeout=60,
            max_busy_actors=1,
        ) as lagging,
    ):
        owned = await start(peer, "tp")
        await caught_up(peer, lagging)
        await start(lagging, "t1")
        slow = key_of("a", turn="t1", response="r1")
        await lagging.feed([*call_events(slow), response_end(slow)])
        await validating.wait()
        # The router waits for the busy actor to finish before it starts this call's actor,
        # and folds nothing meanwhile: the peer's heartbeats pile up unread.
        other = key_of("b", turn="t1", response="r2")
        await lagging.feed(call_events(other)[:1])
        await trio.sleep(LEASE_TIME * 4)
        release.set()
        await caught_up(peer, lagging)
        assert lagging.turn_owner(owned) == peer.turn_owner(owned) == "peer"
    leases = [
        recorded.event
        for recorded in await read_all(tmp_path)
        if isinstance(recorded.event, TurnLeased)
    ]
    assert not [lease for lease in leases if lease.previous is not None], leases
