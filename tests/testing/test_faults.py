"""Seeded storage faults under the runtime: write errors, a full disk, failed fsyncs, lost
acknowledgements, delays, duplicate deliveries and torn tails. Whatever fails, nothing dispatches
that should not, every error is an ``InertError`` naming the fault and the streams, and a
restart on the clean storage finds a consistent state that keeps every acknowledged event.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing
from conftest import RUN_COUNTS
from fault_scenarios import (
    OPERATOR,
    PRINCIPAL,
    TOOLS,
    Run,
    call_events,
    check_log,
    digest_of,
    drain,
    key_of,
)

from inert import (
    ArgumentsAppended,
    InertError,
    Log,
    LogDamaged,
    ReplayDivergence,
    Runtime,
    open_runtime,
    trio_clock,
)
from inert.log import MemoryLog, MemoryStore, NewEvent, SQLiteLog
from inert.log._records import PendingRecord
from inert.testing import (
    Fault,
    FaultRates,
    FaultyLog,
    InjectedFault,
    Stored,
    Tear,
    tear_memory_tail,
    tear_sqlite_tail,
)

DAY = 24 * 3600
LIVES = 3
"""Processes one fault run goes through: each runs until a fault stops its runtime."""
TURNS = 3

# `make soak` asks for more.
SEEDS = int(os.environ.get("INERT_FAULT_SEEDS", "500"))
SQLITE_SEEDS = int(os.environ.get("INERT_FAULT_SQLITE_SEEDS", "8"))


def rates_of(seed: int) -> FaultRates:
    """The plan's rates: 1%, 5% or 20%, for one fault alone or for every fault at once."""
    chance = (0.01, 0.05, 0.2)[seed % 3]
    return (
        FaultRates(write_error=chance),
        FaultRates(disk_full=chance),
        FaultRates(fsync_error=chance),
        FaultRates(ack_lost=chance),
        FaultRates(delay=chance),
        FaultRates.uniform(chance, duplicates=False),
    )[(seed // 3) % 6]


class Client:
    """An agent server that goes on after a failed request, as a real one would."""

    def __init__(self, run: Run, life: int) -> None:
        self.run = run
        self.life = life
        self.errors: list[InertError] = []

    async def attempt(self, request: Awaitable[object]) -> None:
        try:
            await request
        except InertError as error:
            self.errors.append(error)

    async def work(self, runtime: Runtime) -> None:
        """Turns in their own conversations: a plain call, one confirmed, one cancelled."""
        for number in range(TURNS):
            turn, conversation = f"l{self.life}-t{number}", f"l{self.life}-c{number}"
            plain = key_of("plain", turn=turn, conversation=conversation)
            confirmed = key_of("confirm", turn=turn, conversation=conversation)
            dropped = key_of("dropped", turn=turn, conversation=conversation)
            await self.attempt(
                runtime.start_turn(
                    tenant="acme", conversation=conversation, turn=turn, principal=PRINCIPAL
                )
            )
            events = [
                *call_events(plain),
                *call_events(confirmed, tool="send_email"),
                *call_events(dropped)[:2],
            ]
            for event in events:
                await self.attempt(runtime.feed([event]))
            await runtime.settle()
            await self.attempt(
                runtime.confirm(confirmed, principal=PRINCIPAL, arguments_digest=digest_of(runtime))
            )
            await self.attempt(runtime.cancel_turn(dropped.turn_ref, principal=PRINCIPAL))
            await self.attempt(self.run.execute(runtime, dropped))
            await runtime.settle()
            for key in runtime.projections.queue.ready():
                await self.attempt(self.run.execute(runtime, key))


def _inert_leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _inert_leaves(inner)]
    return [error]


@asynccontextmanager
async def memory_log(store: MemoryStore) -> AsyncIterator[Log]:
    """A memory log on ``store``, as a process opens it."""
    log = MemoryLog(store, clock=trio_clock())
    try:
        yield log
    finally:
        await log.aclose()


def _names_itself(fault: InjectedFault) -> bool:
    message = str(fault)
    return fault.fault.value in message and all(stream in message for stream in fault.streams)


async def fault_run(
    seed: int,
    rates: FaultRates,
    open_inner: Callable[[], AbstractAsyncContextManager[Log]],
    wrapper: type[FaultyLog] = FaultyLog,
) -> list[str]:
    """Three processes with faults on one storage, then a clean restart checked; the problems.

    Each process opens the storage itself: what a stopped runtime's actors left queued is
    written when its process closes the log, as the kernel finishes a dead process's writes.
    """
    run = Run()
    acknowledged: set[str] = set()
    problems: list[str] = []
    for life in range(LIVES):
        client = Client(run, life)
        stopped: list[BaseException] = []
        with trio.fail_after(DAY):
            async with open_inner() as inner:
                log = wrapper(inner, seed=seed * LIVES + life, rates=rates)
                run.log = log
                try:
                    async with open_runtime(log=log, tools=TOOLS, operators=[OPERATOR]) as runtime:
                        await client.work(runtime)
                except BaseException as error:
                    stopped.extend(_inert_leaves(error))
        acknowledged |= log.acknowledged
        for failure in [*client.errors, *stopped]:
            if not isinstance(failure, InertError):
                problems.append(f"life {life}: {type(failure).__name__} is not an InertError")
            elif isinstance(failure, InjectedFault) and not _names_itself(failure):
                problems.append(f"life {life}: {failure} does not name its fault and streams")
        problems.extend(
            f"life {life}: {injection.fault.value} at append {injection.append} is unreported"
            for injection in log.injected
            if injection.stored is not None
            # Fragments are not promises: their feeds returned before this append, and its
            # failure reaches the next feed of their stream, if there is one.
            and injection.event_types != {ArgumentsAppended.TAG}
            and not any(
                isinstance(failure, InjectedFault) and failure.append == injection.append
                for failure in [*client.errors, *stopped]
            )
        )
    run.stop_at = None
    for drains in (True, False):
        async with open_inner() as inner:
            run.log = FaultyLog(inner)
            async with open_runtime(log=run.log, tools=TOOLS, operators=[OPERATOR]) as runtime:
                await runtime.settle()
                if drains:
                    await drain(runtime, run)
                else:
                    events = await inner.read()
                    problems.extend(check_log(events, runtime, run.journal, acknowledged))
    return problems


@pytest.mark.slow(seconds=6)
@pytest.mark.parametrize("block", range(5))
async def test_seeded_fault_runs_keep_the_contract(
    block: int, autojump_clock: trio.testing.MockClock
) -> None:
    """Hundreds of seeded runs with faults at 1%, 5% and 20% on a memory log: no duplicate or
    unwanted dispatch, every error an InertError naming its fault, every injected fault of an
    append reported to its caller, and a clean restart that keeps what was acknowledged."""
    failures: list[str] = []
    seeds = range(block * SEEDS // 5, (block + 1) * SEEDS // 5)
    for seed in seeds:
        store = MemoryStore()
        problems = await fault_run(seed, rates_of(seed), partial(memory_log, store))
        failures.extend(f"seed {seed}: {problem}" for problem in problems)
    RUN_COUNTS["fault runs"] = RUN_COUNTS.get("fault runs", 0) + len(seeds)
    assert not failures, failures[:10]


@pytest.mark.slow
async def test_seeded_fault_runs_on_sqlite(tmp_path: Path) -> None:
    """The same runs with the faults around an SQLite log (FULL), in real time: the file a
    clean restart opens keeps the contract and every acknowledged event."""
    failures: list[str] = []
    for seed in range(SQLITE_SEEDS):
        path = tmp_path / f"faults-{seed}.db"
        rates = FaultRates.uniform((0.01, 0.05, 0.2)[seed % 3], duplicates=False)
        problems = await fault_run(
            seed, rates, partial(SQLiteLog.open, path, synchronous="FULL", clock=trio_clock())
        )
        failures.extend(f"seed {seed}: {problem}" for problem in problems)
    RUN_COUNTS["fault runs"] = RUN_COUNTS.get("fault runs", 0) + SQLITE_SEEDS
    assert not failures, failures[:10]


async def test_duplicate_deliveries_never_dispatch_twice(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A subscription that yields events twice never makes a call run twice or unvalidated,
    and every way the runtime stops is an InertError. (The log it leaves may refuse to reopen
    with ReplayDivergence: safe, since nothing is guessed, but not yet what it should be.)"""
    runs = 50
    for seed in range(runs):
        store = MemoryStore()
        log = FaultyLog(
            MemoryLog(store, clock=trio_clock()),
            seed=seed,
            rates=FaultRates(duplicate_delivery=0.2),
        )
        run = Run(log=log)
        client = Client(run, 0)
        with trio.fail_after(DAY):
            try:
                async with open_runtime(log=log, tools=TOOLS, operators=[OPERATOR]) as runtime:
                    await client.work(runtime)
            except InertError:
                pass
        assert all(isinstance(error, InertError) for error in client.errors)
        assert len(run.journal) == len(set(run.journal)), seed
        with suppress(ReplayDivergence):
            async with open_runtime(
                log=MemoryLog(store, clock=trio_clock()), tools=TOOLS, operators=[OPERATOR]
            ) as runtime:
                await runtime.settle()
                problems = check_log(await runtime.log.read(), runtime, run.journal, set())
                assert not problems, (seed, problems)
    RUN_COUNTS["fault runs"] = RUN_COUNTS.get("fault runs", 0) + runs


async def test_an_injected_fault_names_itself_and_what_the_log_holds() -> None:
    """Each append fault raises an InjectedFault naming the fault, the append, the streams and
    event types, and whether the batch is stored; a crash and a failed fsync halt the log."""
    store = MemoryStore()
    script = {1: Fault.WRITE_ERROR, 2: Fault.ACK_LOST, 3: Fault.DISK_FULL, 5: Fault.FSYNC_ERROR}
    log = FaultyLog(MemoryLog(store), script=script)
    key = key_of("a")
    events = [NewEvent(stream=key.response_ref.stream, event=call_events(key)[0])]
    with pytest.raises(InjectedFault, match=r"write_error at append 1 \(1 events of"):
        await log.append(events)
    assert store.rows == []
    with pytest.raises(InjectedFault, match=r"ack_lost.*response/acme/r-t1-a.*outcome unknown"):
        await log.append(events)
    assert len(store.rows) == 1
    with pytest.raises(InjectedFault, match=r"disk_full.*nothing stored") as full:
        await log.append(events)
    assert full.value.stored is Stored.NOTHING
    assert await log.append(events) == [1]
    with pytest.raises(InjectedFault, match=r"fsync_error.*outcome unknown"):
        await log.append(events)
    assert log.halted
    with pytest.raises(InertError, match="halted"):
        await log.read()
    assert await MemoryLog(store).read()


async def test_a_torn_memory_tail_is_refused_on_open() -> None:
    """A log whose last event is torn refuses to open, its checksum failing at its position,
    never a guess."""
    store = MemoryStore()
    async with open_runtime(log=MemoryLog(store, clock=trio_clock()), tools=TOOLS) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL)
        await runtime.feed(call_events(key_of("a"))[:2])
        await runtime.settle()
    torn = tear_memory_tail(store)
    with pytest.raises(LogDamaged, match=f"damaged at position {torn.position}: the checksum"):
        async with open_runtime(log=MemoryLog(store, clock=trio_clock()), tools=TOOLS):
            pass


@pytest.mark.parametrize("seed", range(3))
async def test_a_torn_sqlite_row_is_refused_on_open(tmp_path: Path, seed: int) -> None:
    """An SQLite log whose last row is torn refuses to open, its checksum failing at its
    position; the file opens as a log still, to the same head."""
    path = tmp_path / "torn.db"
    async with (
        SQLiteLog.open(path, clock=trio_clock()) as log,
        open_runtime(log=log, tools=TOOLS) as runtime,
    ):
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL)
        await runtime.feed(call_events(key_of("a"))[: 2 + seed])
        await runtime.settle()
        stored = await log.head()
    tear_sqlite_tail(path, Tear.PAYLOAD, seed=seed)
    with pytest.raises(LogDamaged, match=f"damaged at position {stored}: the checksum"):
        async with SQLiteLog.open(path) as log, open_runtime(log=log, tools=TOOLS):
            pass
    async with SQLiteLog.open(path) as log:
        assert await log.head() == stored


class _AcknowledgesBeforeStoring(FaultyLog):
    """An unsafe log: it acknowledges its fifth append and never stores it."""

    async def _append_records(
        self, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]:
        if self.appends + 1 != 5:
            return await super()._append_records(records, expected)
        self.appends += 1
        self.acknowledged.update(record.event_id for record in records)
        head = await self.head()
        return list(range(head + 1, head + 1 + len(records)))


async def test_a_log_that_acknowledges_before_storing_is_caught(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The fault runs' checker reports the events an unsafe log acknowledged and lost."""
    store = MemoryStore()
    problems = await fault_run(
        0, FaultRates(), partial(memory_log, store), _AcknowledgesBeforeStoring
    )
    assert any("acknowledged events lost" in problem for problem in problems), problems
