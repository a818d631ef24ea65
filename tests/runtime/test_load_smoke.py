"""Load with faults: ``KEYS`` call keys in flight at once for ``SECONDS`` on an SQLite log
(``synchronous=FULL``) whose client-side appends (turns, feeds, confirmations and claims) fail,
lose their acknowledgement or wait, at random. Each key is one worker that, call after call,
starts a turn, feeds the call a fragment at a time, waits for it to be decided, confirms it
where its tool asks, and claims and runs it. The run must keep memory bounded and, checked from
the log after a restart, dispatch nothing twice, nothing before its validation (and
confirmation), and keep every acknowledged event. ``make test`` runs 1,000 keys for 30 s;
``make soak`` 10,000 keys for 10 minutes (``INERT_LOAD_KEYS``, ``INERT_LOAD_SECONDS``).

Memory: the process's resident set is sampled every second; its growth over the run must stay
under ``RSS_BOUND_BYTES`` (the runtime's per-call state, the ledger of finished calls for its
horizon, SQLite's page cache and the log's recent-event cache, with room to spare). The ledger
keeps finished calls ``LEDGER_HORIZON``, so that a long run's memory is bounded by the calls of
that window rather than by all calls ever run.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Awaitable
from datetime import timedelta
from pathlib import Path

import pytest
import trio
from conftest import RUN_COUNTS
from fault_scenarios import OPERATOR, PRINCIPAL, TOOLS, Run, call_events, check_log, digest_of

from inert import CallKey, InertError, Phase, Runtime, open_runtime, trio_clock
from inert.log import SQLiteLog
from inert.testing import FaultRates, FaultyLog

KEYS = int(os.environ.get("INERT_LOAD_KEYS", "1000"))
SECONDS = float(os.environ.get("INERT_LOAD_SECONDS", "30"))
TENANTS = 16
LEDGER_HORIZON = timedelta(seconds=30)
RSS_BOUND_BYTES = 128 * 2**20 + KEYS * 64 * 2**10
"""Growth of the resident set allowed over the run, whatever its length: 128 MiB plus 64 KiB a
key (192 MiB for 1,000 keys; measured 40 MiB for 1,000 keys over 60 s)."""
RATES = FaultRates(
    write_error=0.005,
    disk_full=0.002,
    ack_lost=0.005,
    delay=0.01,
    max_delay=0.2,
    event_types=("ingress.", "user.", "request.claim", "outcome.completed", "outcome.failed"),
)
"""Faults on what clients append; a failed append of the runtime's own (an actor's decision, a
timer's deadline) stops the runtime, which the crash and fault tests cover."""
UNSETTLED = frozenset({Phase.ABSENT, Phase.COLLECTING, Phase.TERMINAL_CANDIDATE})


def _kind(error: InertError) -> str:
    reason = getattr(error, "reason", None)
    return type(error).__name__ if reason is None else f"{type(error).__name__} {reason}"


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Load:
    """What the workers did, for the checks."""

    def __init__(self) -> None:
        self.run = Run()
        self.calls = 0
        self.errors: list[InertError] = []
        self.peak = 0
        self.baseline = resident_bytes()

    async def attempt(self, request: Awaitable[object]) -> bool:
        try:
            await request
        except InertError as error:
            self.errors.append(error)
            return False
        return True


async def wait_decided(runtime: Runtime, key: CallKey, deadline: float) -> None:
    # Polled: each of the many workers waits on its own call, and the runtime has no
    # per-call notification to wait on.
    while trio.current_time() < deadline:
        if runtime.phase(key) not in UNSETTLED:
            return
        await trio.sleep(0.25)


async def worker(runtime: Runtime, load: Load, number: int, until: float) -> None:
    chance = random.Random(number)
    tenant, conversation = f"tenant-{number % TENANTS}", f"c{number}"
    for round_number in range(1_000_000):
        if trio.current_time() >= until:
            return
        turn = f"w{number}-{round_number}"
        tool = "send_email" if chance.random() < 0.3 else "get_weather"
        key = CallKey(
            tenant=tenant,
            conversation=conversation,
            turn=turn,
            response=f"r-{turn}",
            item="i",
            call="c",
        )
        started = await load.attempt(
            runtime.start_turn(
                tenant=tenant, conversation=conversation, turn=turn, principal=PRINCIPAL
            )
        )
        if not started:
            continue
        fed = True
        for event in call_events(key, tool=tool):
            fed = await load.attempt(runtime.feed([event])) and fed
            await trio.sleep(chance.uniform(0, 0.2))
        # A call whose feed failed is left to its idle timeout (or to a restart), as a server
        # that lost its provider stream would.
        if fed:
            await wait_decided(runtime, key, until + 5)
        if fed and tool == "send_email":
            await load.attempt(
                runtime.confirm(key, principal=PRINCIPAL, arguments_digest=digest_of(runtime))
            )
            await wait_decided(runtime, key, until + 5)
        # The phase, not the queue's list: thousands of workers scanning it would be quadratic.
        if runtime.phase(key) is Phase.VALIDATED:
            await load.attempt(load.run.execute(runtime, key))
        load.calls += 1


async def sample_memory(load: Load) -> None:
    while True:
        load.peak = max(load.peak, resident_bytes())
        await trio.sleep(1)


@pytest.mark.slow(seconds=45)
async def test_load_with_faults_stays_bounded_and_safe(tmp_path: Path) -> None:
    """Many keys in flight on a faulty SQLite log: bounded memory, no duplicate dispatch, no
    dispatch before validation, no acknowledged event lost, every error an InertError."""
    path = tmp_path / "load.db"
    load = Load()
    async with SQLiteLog.open(path, synchronous="FULL", clock=trio_clock()) as inner:
        log = FaultyLog(inner, seed=KEYS, rates=RATES)
        load.run.log = log
        async with open_runtime(
            log=log,
            tools=TOOLS,
            operators=[OPERATOR],
            ledger_horizon=LEDGER_HORIZON,
        ) as runtime:
            until = trio.current_time() + SECONDS
            async with trio.open_nursery() as nursery:
                nursery.start_soon(sample_memory, load)
                async with trio.open_nursery() as workers:
                    for number in range(KEYS):
                        workers.start_soon(worker, runtime, load, number, until)
                nursery.cancel_scope.cancel()
            await runtime.settle()
    async with (
        SQLiteLog.open(path, synchronous="FULL", clock=trio_clock()) as inner,
        open_runtime(log=inner, tools=TOOLS, operators=[OPERATOR]) as runtime,
    ):
        await runtime.settle()
        events = await inner.read()
        problems = check_log(events, runtime, load.run.journal, log.acknowledged)
    growth = load.peak - load.baseline
    RUN_COUNTS["load keys"] = RUN_COUNTS.get("load keys", 0) + KEYS
    RUN_COUNTS["load calls"] = RUN_COUNTS.get("load calls", 0) + load.calls
    print(
        f"load: {KEYS} keys, {SECONDS:.0f} s, {load.calls} calls, {len(load.run.journal)} run,"
        f" {len(log.injected)} faults, {len(load.errors)} errors, {len(events)} events,"
        f" resident growth {growth / 2**20:.0f} MiB; errors by type:"
        f" {dict(Counter(_kind(error) for error in load.errors))}"
    )
    assert not problems, problems[:10]
    # That the load ran calls, not how fast: how many run in the time depends on the machine
    # and what else it runs (a busy one has run fewer than one a key), and speed is measured
    # by the benchmarks.
    assert len(load.run.journal) >= KEYS // 4, f"only {len(load.run.journal)} calls ran"
    assert log.injected
    assert growth < RSS_BOUND_BYTES, f"resident set grew {growth / 2**20:.0f} MiB"
