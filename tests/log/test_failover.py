"""A PostgreSQL log through a real failover: writers append through a URL naming a primary and
its streaming standby (``target_session_attrs=read-write``); mid-run the primary crashes and the
standby is promoted; the writers go on against the new primary. Afterwards the log is read
back through a new connection and checked.

With synchronous replication every acknowledged append is there, at the positions it was
acknowledged at. With asynchronous replication what is missing is only the unreplicated tail:
appends acknowledged at positions past the last one the standby had received when the primary
went; everything at or before it, and everything appended after the promotion, is there. Either
way the log is gap-free and passes ``verify_log``.

``INERT_FAILOVER_RUNS`` sets the number of promoted runs of each kind (``make failover`` runs 20).
"""

from __future__ import annotations

import os
from functools import partial

import attrs
import pytest
import trio
from ha_support import ReplicatedPair, replicated_pair, require_clusters
from test_log_unwritable import WEATHER, key_of, recorded_types, whole_call

from inert import ClaimRefused, Dispatch, LogError, open_log, open_runtime
from inert.events import CallDispatched
from inert.log import NewEvent
from inert.runtime._verify import verify_log

FAILOVER_RUNS = int(os.environ.get("INERT_FAILOVER_RUNS", "2"))
WRITERS = 4
BEFORE = 60
"""Appends acknowledged by the primary before it is stopped."""
AFTER = 60
"""Appends acknowledged by the new primary before the run ends."""
DETACHED = 0.5
"""Seconds the standby receives nothing before the primary crashes, in every other run: the
unreplicated tail that asynchronous replication loses."""
RUNTIME_CALLS = 40
RETRY_PAUSE = 0.05
RUN_TIMEOUT = 120
LOST = "lost events this process appended"
HEAD_QUERY = "SELECT position FROM inert.heads WHERE partition = 0"


@attrs.frozen(kw_only=True)
class Acknowledged:
    """One append that returned: its events' ids and positions, and whether it was first tried
    after the standby took writes."""

    event_ids: tuple[str, ...]
    positions: tuple[int, ...]
    after_promotion: bool


@attrs.define
class Run:
    """What a run did: its acknowledged appends, the replicated head, the refused tries and
    the logs opened again for having lost appends of their own."""

    acknowledged: list[Acknowledged] = attrs.Factory(list)
    replicated_head: int = 0
    refused: int = 0
    reopened: int = 0
    promoted: bool = False
    failover_seconds: float = 0.0


@pytest.fixture
def clusters() -> None:
    require_clusters()


def new_events(call: str) -> list[NewEvent]:
    return [NewEvent(stream=f"call-{call}", event=event) for event in whole_call(call)]


async def write_through_failover(pair: ReplicatedPair, *, detached: float) -> Run:
    """Append from ``WRITERS`` tasks, each on a log of its own (a process each), each append
    retried with the same event ids until it returns, and the log opened again where it lost
    appends of its own; fail over once ``BEFORE`` have returned (the standby first detached for
    ``detached`` seconds), stop once ``AFTER`` more have."""
    run = Run()
    after = trio.Event()
    before = trio.Event()
    url = pair.url()

    async def writer(number: int) -> None:
        count = 0
        events = new_events(f"w{number}-{count}")
        started_after = False
        while not after.is_set():
            async with open_log(url) as log:
                while not after.is_set():
                    try:
                        positions = await log.append(events)
                    except LogError as error:
                        if LOST in str(error):
                            run.reopened += 1
                            break
                        run.refused += 1
                        await trio.sleep(RETRY_PAUSE)
                        continue
                    run.acknowledged.append(
                        Acknowledged(
                            event_ids=tuple(new.event_id for new in events),
                            positions=tuple(positions),
                            after_promotion=started_after,
                        )
                    )
                    count += 1
                    events = new_events(f"w{number}-{count}")
                    started_after = run.promoted
                    if len(run.acknowledged) >= BEFORE:
                        before.set()
                    if sum(ack.after_promotion for ack in run.acknowledged) >= AFTER:
                        after.set()

    with trio.fail_after(RUN_TIMEOUT):
        async with trio.open_nursery() as nursery:
            for number in range(WRITERS):
                nursery.start_soon(writer, number)
            await before.wait()
            started = trio.current_time()
            run.replicated_head = await trio.to_thread.run_sync(
                partial(pair.fail_over, HEAD_QUERY, detached=detached)
            )
            run.failover_seconds = trio.current_time() - started
            run.promoted = True
    return run


async def check_log(url: str, run: Run, *, synchronous: bool) -> int:
    """Check the log after the run; the number of acknowledged appends it lost."""
    async with open_log(url, create=False) as log:
        recorded = await log.read()
        verification = await verify_log(log)
    assert verification.ok, verification.problems
    assert [event.position for event in recorded] == list(range(1, len(recorded) + 1))
    at = {event.position: event.event_id for event in recorded}
    lost = 0
    for ack in run.acknowledged:
        found = [at.get(position) for position in ack.positions]
        if found == list(ack.event_ids):
            continue
        lost += 1
        # Only the unreplicated tail of the old primary may be lost: an append tried after the
        # promotion, or acknowledged at positions the standby had received, must be there.
        assert not synchronous, f"acknowledged append lost under synchronous replication: {ack}"
        assert not ack.after_promotion, ack
        assert min(ack.positions) > run.replicated_head, (ack, run.replicated_head)
        assert not set(ack.event_ids) & set(at.values()), ack
    return lost


def report(kind: str, number: int, run: Run, lost: int, detached: float) -> None:
    print(
        f"{kind} run {number} (standby detached {detached}s before the crash):"
        f" {len(run.acknowledged)} appends acknowledged, {run.refused} tries refused during"
        f" the failover, failover {run.failover_seconds:.2f}s, replicated head"
        f" {run.replicated_head}, acknowledged and lost {lost}, logs opened again for"
        f" having lost their own appends {run.reopened}"
    )


def detached_in(number: int) -> float:
    """Every other run detaches the standby before the crash; the others crash at once."""
    return DETACHED if number % 2 else 0.0


@pytest.mark.parametrize("number", range(FAILOVER_RUNS))
async def test_synchronous_replication_loses_nothing_acknowledged(
    clusters: None, number: int
) -> None:
    """Under synchronous replication a failover loses no acknowledged append, even from a
    standby that had fallen behind."""
    detached = detached_in(number)
    with replicated_pair(synchronous=True) as pair:
        run = await write_through_failover(pair, detached=detached)
        lost = await check_log(pair.url(), run, synchronous=True)
    report("synchronous", number, run, lost, detached)
    assert lost == 0
    assert run.reopened == 0


@pytest.mark.parametrize("number", range(FAILOVER_RUNS))
async def test_asynchronous_replication_loses_at_most_the_unreplicated_tail(
    clusters: None, number: int
) -> None:
    """Under asynchronous replication a failover loses only appends past the replicated head;
    from a standby detached before the crash, it does lose them."""
    detached = detached_in(number)
    with replicated_pair(synchronous=False) as pair:
        run = await write_through_failover(pair, detached=detached)
        lost = await check_log(pair.url(), run, synchronous=False)
    report("asynchronous", number, run, lost, detached)
    if detached:
        assert lost > 0
        assert run.reopened > 0
    if lost == 0:
        assert run.reopened == 0


async def fail_over_midway(pair: ReplicatedPair, midway: trio.Event) -> None:
    """Fail over, in a thread, once a few calls have run: the others run meanwhile."""
    await midway.wait()
    await trio.to_thread.run_sync(pair.fail_over, HEAD_QUERY)


async def test_a_runtime_opened_again_after_a_synchronous_failover_runs_each_call_once(
    clusters: None,
) -> None:
    """A runtime on a synchronously replicated log, through a failover and opened again if it
    stopped, dispatches each call at most once and runs none twice: one dispatched before it
    stopped is refused to a new claim."""
    calls = [f"call{number}" for number in range(RUNTIME_CALLS)]
    ran: list[str] = []
    stopped: list[BaseException] = []
    refused: list[str] = []

    midway = trio.Event()

    async def executor(dispatch: Dispatch) -> None:
        ran.append(dispatch.key.call)
        if len(ran) >= RUNTIME_CALLS // 4:
            midway.set()

    with replicated_pair(synchronous=True) as pair:
        url = pair.url()
        try:
            async with open_runtime(log=url, create=True, tools=[WEATHER]) as runtime:
                await runtime.start_turn(
                    tenant="acme", conversation="c1", turn="t1", principal="user:a"
                )
                await runtime.feed([event for call in calls for event in whole_call(call)])
                await runtime.settle()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(fail_over_midway, pair, midway)
                    for call in calls:
                        await runtime.execute(key_of(call), executor, name="worker")
        except* LogError as error:
            stopped.append(error)
        if stopped:
            async with open_runtime(log=url, tools=[WEATHER]) as runtime:
                for call in calls:
                    if call not in ran:
                        try:
                            await runtime.execute(key_of(call), executor, name="worker")
                        except ClaimRefused:
                            # Dispatched before the runtime stopped, its executor never ran:
                            # not dispatched again.
                            refused.append(call)
        dispatched = [(await recorded_types(url, call)).count(CallDispatched.TAG) for call in calls]
    print(
        f"runtime through a failover: stopped {len(stopped)} time(s),"
        f" {len(ran)} of {len(calls)} calls ran, {sum(dispatched)} dispatched,"
        f" {len(refused)} dispatched before it stopped and not run again"
    )
    assert len(ran) == len(set(ran))
    assert all(count <= 1 for count in dispatched), dispatched
    assert {call for call, count in zip(calls, dispatched, strict=True) if count} == {
        *ran,
        *refused,
    }
    assert not set(ran) & set(refused)
