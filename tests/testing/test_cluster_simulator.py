"""The simulator of a cluster: runtime processes on one partitioned log, killed, paused, leaving
and joining, checked over every partition; the checker's partitioned reading; the CLI."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import attrs
import pytest
from conftest import RUN_COUNTS

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    open_partitioned_runtime,
)
from inert.cli import main
from inert.events import ResponseQuarantined
from inert.log import MemoryLog, MemoryStore
from inert.testing import (
    DEMO_TOOLS,
    SIMULATION_LIMITS,
    ClusterResult,
    check_partitioned_log,
    simulate_cluster,
    simulate_cluster_many,
)

SEEDS = int(os.environ.get("INERT_CLUSTER_SEEDS", "8"))
"""Seeds per test run, each run twice; ``INERT_CLUSTER_SEEDS`` asks for more (``make soak``
runs 2,000)."""
KEYS = 40
SHARDS = 4
WORKERS = 2
"""Processes a shard's seeds are spread over when the tests run in one process."""
SHAPES = ((3, 4), (2, 3), (4, 6))
"""Processes and partitions: seed ``n`` runs ``SHAPES[n % 3]``."""


def _report(results: list[ClusterResult]) -> str:
    return "\n".join(
        f"{violation.line()}\n  replay: {result.command}"
        for result in results
        for violation in result.violations[:3]
    )


@pytest.mark.slow(seconds=12)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_cluster_seed_keeps_every_invariant_and_runs_the_same_twice(shard: int) -> None:
    """Seeds of several processes on one partitioned log (killed, paused, leaving, joining)
    break no invariant in any partition and write the same log twice."""
    workers = 1 if os.environ.get("PYTEST_XDIST_WORKER") else WORKERS
    results: list[ClusterResult] = []
    seeds = range(shard, SEEDS, SHARDS)
    for processes, partitions in SHAPES:
        shaped = [seed for seed in seeds if SHAPES[seed % len(SHAPES)] == (processes, partitions)]
        results += simulate_cluster_many(
            shaped, keys=KEYS, processes=processes, partitions=partitions, workers=workers
        )
    assert [result for result in results if result.violations] == [], _report(results)
    assert len({result.log_hash for result in results}) == len(results)
    for name, count in {
        "cluster seeds (each run twice)": len(results),
        "cluster processes killed": sum(result.kills for result in results),
        "cluster processes paused past their lease": sum(result.stalls for result in results),
        "cluster turns leased from another process": sum(r.leases_moved for r in results),
        "cluster outcomes recorded unknown": sum(r.unknown_outcomes for r in results),
        "cluster steps checked": sum(result.steps for result in results),
    }.items():
        RUN_COUNTS[name] = RUN_COUNTS.get(name, 0) + count


@pytest.mark.slow(seconds=10)
def test_cluster_seeds_move_turns_and_find_unknown_outcomes() -> None:
    """A handful of seeds kill, pause, add and remove processes, move turns between them and
    record the outcomes of calls whose process died unknown: the runs reach what they check."""
    results = [simulate_cluster(seed, keys=KEYS, twice=False) for seed in range(4)]
    assert [result for result in results if result.violations] == [], _report(results)
    assert sum(result.kills + result.stalls for result in results) > 0
    assert sum(result.joins + result.leaves for result in results) > 0
    assert sum(result.leases_moved for result in results) > 0
    assert sum(result.unknown_outcomes for result in results) > 0
    states = {state for result in results for state in result.states}
    assert {"dispatched", "cancelled", "failed"} <= states


@pytest.mark.slow(seconds=3)
def test_processes_that_each_reject_a_call_of_an_unknown_turn_write_the_rejection_once() -> None:
    """Where nobody leases a turn (one never started), every process folding its partition
    decides for its calls and the first to write wins: one that forgot the call fences its
    write by the stream's version as of its decision, and never writes a rejection twice."""
    result = simulate_cluster(1034, keys=60, processes=3, partitions=4, twice=False)
    assert not result.violations, _report([result])


@pytest.mark.slow(seconds=20)
def test_a_cluster_seed_runs_the_same_in_another_process() -> None:
    """A cluster seed writes the same log here and in a fresh process, and the next seed
    another log."""
    here = [simulate_cluster(seed, keys=20, processes=2, twice=False) for seed in (3, 4)]
    there = simulate_cluster_many([3, 4], keys=20, processes=2, workers=2)
    assert [result.log_hash for result in here] == [result.log_hash for result in there]
    assert here[0].log_hash != here[1].log_hash
    assert here[0].command == "inert simulate --seed 3 --keys 20 --processes 2 --partitions 4"


@pytest.mark.slow(seconds=8)
@pytest.mark.parametrize(
    ("plant", "invariants"),
    [("never_stop_a_running_call", {"I11"}), ("accept_stale_confirmation", {"I6"})],
)
def test_a_planted_bug_is_caught_in_a_cluster(plant: str, invariants: set[str]) -> None:
    """A planted bug in the runtime's decider is found in the partition where it acted."""
    for seed in range(5):
        result = simulate_cluster(seed, keys=KEYS, plant=plant, twice=False)
        if result.violations:
            break
    found = {violation.invariant for violation in result.violations}
    assert found & invariants, [violation.line() for violation in result.violations]
    assert all(
        violation.partition for violation in result.violations if violation.invariant in found
    )
    assert f"--plant {plant}" in result.command


LIMITS = attrs.evolve(SIMULATION_LIMITS, ready_lifetime=timedelta(hours=1))
"""The simulation's limits with a ready lifetime that a test running in real time never
outlives."""
TOOLS = [tool.declaration for tool in DEMO_TOOLS]


def key_in(log: MemoryLog, partition: int) -> CallKey:
    conversation = next(
        f"c{n}" for n in range(1000) if log.partition_of("acme", f"c{n}") == partition
    )
    return CallKey(
        tenant="acme", conversation=conversation, turn="t1", response="r1", item="a", call="a"
    )


def whole_call(key: CallKey) -> list[Event]:
    """A call of get_weather, whole, and the end of its response."""
    data = b'{"city": "Oslo"}'
    return [
        CallOpened(key=key, tool="get_weather", sequence=0),
        ArgumentsAppended(key=key, data=data, offset=0, first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(digest="end"),
        ),
    ]


async def test_the_checker_reads_every_partition_and_its_copies_of_the_controls() -> None:
    """Over a partitioned log, the checker passes what the runtime wrote; it finds a control
    of the control partition missing from a partition of calls (I14), and a call claimed in a
    process that stopped for good without an outcome (I7), naming the partition."""
    log = MemoryLog(MemoryStore(partitions=3))
    key = key_in(log, 2)
    async with open_partitioned_runtime(
        log=log, process="p1", tools=TOOLS, limits=LIMITS, operators=["operator:olga"]
    ) as runtime:
        await runtime.start_turn(
            tenant="acme", conversation=key.conversation, turn="t1", principal="user:a"
        )
        await runtime.feed(whole_call(key))
        await runtime.settle()
        await runtime.give_control(
            ResponseQuarantined(response="other", tenant=None, operator="operator:olga", reason="x")
        )
        await runtime.claim(key, executor="worker")
        await runtime.settle()
    partitions = {number: await log.partition(number).read(1) for number in (1, 2, 3)}
    partitions[0] = await log.read(1)
    assert check_partitioned_log(partitions, TOOLS, LIMITS).violations == ()
    departed = check_partitioned_log(partitions, TOOLS, LIMITS, departed=["p1"])
    assert [(v.invariant, v.partition) for v in departed.violations] == [("I7", 2)]
    partitions[3] = [r for r in partitions[3] if not isinstance(r.event, ResponseQuarantined)]
    missing = check_partitioned_log(partitions, TOOLS, LIMITS)
    assert [(v.invariant, v.partition) for v in missing.violations] == [("I14", 3)]


@pytest.mark.slow(seconds=6)
def test_cli_runs_cluster_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    """``inert simulate --processes --partitions`` runs cluster seeds and says so; --json
    gives each seed's processes, partitions and what happened to them."""
    main(["simulate", "--seed", "3", "--keys", "20", "--processes", "2", "--partitions", "3"])
    out = capsys.readouterr().out
    assert "1 seeds run twice, 20 call keys each, 2 processes on 3 partitions:" in out
    assert "0 violations" in out
    main(["simulate", "--seed", "3", "--keys", "20", "--partitions", "3", "--json"])
    [line] = capsys.readouterr().out.splitlines()
    seed = json.loads(line)
    assert (seed["processes"], seed["partitions"], seed["violations"]) == (3, 3, [])
    assert {"kills", "stalls", "joins", "leaves", "leases_moved"} <= seed.keys()
    assert seed["command"] == "inert simulate --seed 3 --keys 20 --processes 3 --partitions 3"
