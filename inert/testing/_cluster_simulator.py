"""The simulator of a cluster: one seed drives several runtime processes on one partitioned log.

``simulate_cluster(seed, processes=K, partitions=P)`` runs the plan of ``simulate`` (the same
conversations, person and operator controls, ``_workload``) against ``K`` processes, each an
``open_partitioned_runtime`` of its own on one shared memory log of ``P`` partitions, in one
Trio run under ``MockClock(autojump_threshold=0)`` with Trio's scheduler seeded. Turns start in
the process each process's view of the assignment names (elsewhere they are refused with
``NotOwner``, and tried again); feeds, confirmations, denials and cancellations go to that
process, or to one folding the partition; each process has an executor claiming and running
the ready calls of the partitions it folds, and a probe claims through any process. At seeded
moments a process is killed (its tasks cancelled where they are, no goodbye), leaves (its
executor stopped, its runtime closed), or a new one joins; operator controls are given through
a process chosen at random (the plan's and more of them).

Then every partition of the log, read whole, goes through the checker
(``check_partitioned_log``): each partition of calls against I1-I7 and I9-I13, the control
partition against I14, and the calls claimed in a process that stopped for good must have an
outcome (I7). The simulator checks besides that every append acknowledged is in the log
(``lost``), and that every control acknowledged before a claim was asked for is in the call's
partition before the claim (``I3``). The seed is run twice: both logs must hash the same.
I8 (a replay gives the live state) is the single-process simulator's.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial

import attrs
import trio
import trio.testing
from attrs import frozen

from ..actors import Validator
from ..events import (
    ClaimRequested,
    ConfigurationError,
    ExecutionOutcomeUnknown,
    RecordedEvent,
    TurnLeased,
)
from ..log import MemoryStore
from ..runtime._retention import DEFAULT_RETENTION, Retention
from ._checker import CONTROL_PARTITION, Violation, check_partitioned_log
from ._cluster_run import _ClusterRun
from ._cluster_workload import PER_CONVERSATION, make_cluster_plan
from ._plants import planted
from ._simulator import (
    RETENTIONS,
    _as_appended,
    _read,
    _seeded_store,
    demo_check,
    log_hash,
    run_seeds,
    seeded_scheduling,
)
from ._suite import ToolSuite, load_suite, tool_errors
from ._workload import DEMO_TOOLS, SIMULATION_LIMITS, SimulatedTool, make_plan

MAX_PROCESSES = 16
"""The most processes a seed starts with."""


@frozen(kw_only=True)
class ClusterResult:
    """What one seed of a cluster did and found."""

    seed: int
    keys: int
    processes: int
    partitions: int
    steps: int
    """Log events checked, in every partition."""
    actions: int
    kills: int
    stalls: int
    """Processes whose heartbeats were held back for longer than the lease time, while they
    ran on."""
    joins: int
    leaves: int
    gave_up: int
    """Requests of the parties that no process took within ``GIVE_UP`` seconds."""
    leases_moved: int
    """Turns leased by a process from another (handed on, or taken over from a silent one)."""
    unknown_outcomes: int
    """Calls whose outcome was recorded unknown (their process fell silent after the claim)."""
    states: dict[str, int]
    """How many call keys were in each phase when the run ended."""
    violations: tuple[Violation, ...]
    log_hash: str
    plant: str | None = None
    retention: str = "default"
    suite: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def restarts(self) -> int:
        """Processes killed or gone: the runtimes that stopped while the plan ran."""
        return self.kills + self.leaves

    @property
    def command(self) -> str:
        """The one-line command that runs this seed again, exactly (as ``SimulationResult``'s
        does)."""
        tools = f" --tools {shlex.quote(self.suite)}" if self.suite else ""
        plant = f" --plant {self.plant}" if self.plant else ""
        retention = f" --retention {self.retention}" if self.retention != "default" else ""
        return (
            f"inert simulate{tools} --seed {self.seed} --keys {self.keys}"
            f" --processes {self.processes} --partitions {self.partitions}{plant}{retention}"
        )


# --- checking a run ------------------------------------------------------------------------------


async def _read_all(store: MemoryStore) -> dict[int, list[RecordedEvent]]:
    partitions = {CONTROL_PARTITION: await _read(store.rows)}
    for number, partition in sorted(store.partition_stores.items()):
        partitions[number] = await _read(partition.rows)
    return partitions


def _lost(run: _ClusterRun) -> list[Violation]:
    """Every append acknowledged is in the log, where it was acknowledged."""
    violations = []
    stores = {CONTROL_PARTITION: run.store, **run.store.partition_stores}
    for number, appended in sorted(run.partition_appended.items()):
        rows = stores[number].rows
        for position, event in sorted(appended.items()):
            if position > len(rows) or rows[position - 1].event_type != event.TAG:
                violations.append(
                    Violation(
                        invariant="lost",
                        key="",
                        detail=f"the {event.TAG} acknowledged at this position is not there",
                        position=position,
                        partition=number,
                    )
                )
    return violations


def _controls_before_claims(
    run: _ClusterRun, partitions: Mapping[int, Sequence[RecordedEvent]]
) -> list[Violation]:
    """I3 across partitions: every control acknowledged before a claim was asked for is in the
    call's partition before the claim."""
    control = partitions[CONTROL_PARTITION]
    violations = []
    for number, claim_id, acknowledged in run.claimed:
        records = partitions[number]
        claims = [
            (recorded, recorded.event)
            for recorded in records
            if isinstance(recorded.event, ClaimRequested) and recorded.event.claim_id == claim_id
        ]
        if not claims:
            continue
        claim, requested = claims[0]
        before = {(recorded.stream, recorded.event) for recorded in records[: claim.position - 1]}
        for position in run.acknowledged[:acknowledged]:
            given = control[position - 1]
            if (given.stream, given.event) not in before:
                violations.append(
                    Violation(
                        invariant="I3",
                        key=requested.key.stream,
                        detail=f"the {given.event_type} acknowledged at position {position} of"
                        " the control partition before the claim was asked for is not in the"
                        " call's partition before the claim",
                        position=claim.position,
                        partition=number,
                    )
                )
    return violations


def _run_cluster_once(
    seed: int,
    *,
    keys: int,
    processes: int,
    partitions: int,
    tools: Sequence[SimulatedTool],
    check: Validator | None,
    retention: Retention,
) -> _ClusterRun:
    plan = make_plan(seed, keys, tools, SIMULATION_LIMITS, per_conversation=PER_CONVERSATION)
    responses = sorted({key.response for key in plan.keys})
    cluster = make_cluster_plan(
        seed, plan.controls, responses, [tool.declaration.name for tool in tools]
    )
    run = _ClusterRun(
        plan=plan,
        tools=tools,
        check=check,
        limits=SIMULATION_LIMITS,
        seed=seed,
        retention=retention,
        keep_lives=False,
        store=_seeded_store(seed, partitions=partitions),
        cluster=cluster,
        processes=processes,
    )
    with seeded_scheduling(seed):
        trio.run(run.run, clock=trio.testing.MockClock(autojump_threshold=0))
    return run


def simulate_cluster(
    seed: int,
    *,
    keys: int = 60,
    processes: int = 3,
    partitions: int = 4,
    plant: str | None = None,
    tools: Sequence[SimulatedTool] = DEMO_TOOLS,
    check: Validator | None = demo_check,
    retention: Retention = DEFAULT_RETENTION,
    twice: bool = True,
) -> ClusterResult:
    """Run one seed against ``processes`` runtime processes sharing a log of ``partitions``
    partitions (processes killed, leaving and joining on the way), check every invariant over
    every partition, and run it again. ``plant``, ``tools``, ``check`` and ``retention`` are
    ``simulate``'s. Call it outside a Trio run: it runs its own."""
    if not 1 <= processes <= MAX_PROCESSES:
        raise ConfigurationError(
            f"a cluster simulation runs 1 to {MAX_PROCESSES} processes, not {processes}"
        )
    if partitions < 2:
        raise ConfigurationError(
            f"a cluster simulation needs a log of 2 partitions at least, not {partitions}"
        )
    once = partial(
        _run_cluster_once,
        seed,
        keys=keys,
        processes=processes,
        partitions=partitions,
        tools=tools,
        check=check,
        retention=retention,
    )
    with planted(plant):
        run = once()
        again = once() if twice else run
    read = trio.run(_read_all, run.store)
    records = {
        number: _as_appended(partition, run.partition_appended.get(number, {}))
        for number, partition in read.items()
    }
    checker = check_partitioned_log(
        records,
        [tool.declaration for tool in tools],
        SIMULATION_LIMITS,
        observations=run.partition_observations,
        departed=run.departed,
    )
    violations = [
        *run.crashes,
        *checker.violations,
        *_lost(run),
        *_controls_before_claims(run, read),
        *(error for partition in read.values() for error in tool_errors(partition)),
    ]
    first, second = log_hash(run.store), log_hash(again.store)
    if first != second:
        violations.append(
            Violation(
                invariant="nondeterminism",
                key="",
                detail=f"two runs of the seed wrote different logs ({first} and {second})",
            )
        )
    states: dict[str, int] = {}
    for phase in run.phases.values():
        states[phase.value] = states.get(phase.value, 0) + 1
    return ClusterResult(
        seed=seed,
        keys=keys,
        processes=processes,
        partitions=partitions,
        steps=checker.steps,
        actions=run.actions,
        kills=run.kills,
        stalls=run.stalls,
        joins=run.joins,
        leaves=run.leaves,
        gave_up=run.gave_up,
        leases_moved=sum(
            isinstance(recorded.event, TurnLeased) and recorded.event.previous is not None
            for partition in read.values()
            for recorded in partition
        ),
        unknown_outcomes=sum(
            isinstance(recorded.event, ExecutionOutcomeUnknown)
            for partition in read.values()
            for recorded in partition
        ),
        states=states,
        violations=tuple(violations),
        log_hash=first,
        plant=plant,
        retention=next(
            (name for name, policy in RETENTIONS.items() if policy == retention), "custom"
        ),
    )


def _simulate_job(
    job: tuple[int, int, int, int, str | None, str, str | None], loaded: ToolSuite | None = None
) -> ClusterResult:
    seed, keys, processes, partitions, plant, retention, suite = job
    common = partial(
        simulate_cluster,
        seed,
        keys=keys,
        processes=processes,
        partitions=partitions,
        plant=plant,
        retention=RETENTIONS[retention],
    )
    if suite is None:
        return common()
    # A worker process loads the tools by their name, once for each seed it runs.
    tools = loaded if loaded is not None else load_suite(suite)
    result = common(tools=tools.tools, check=tools.check)
    return attrs.evolve(result, suite=suite)


def simulate_cluster_many(
    seeds: Iterable[int],
    *,
    keys: int = 60,
    processes: int = 3,
    partitions: int = 4,
    plant: str | None = None,
    retention: str = "default",
    workers: int = 1,
    progress: Callable[[int], object] | None = None,
    suite: str | None = None,
) -> list[ClusterResult]:
    """Run ``simulate_cluster`` on each seed, in ``workers`` processes, in order (as
    ``simulate_many`` runs ``simulate``)."""
    jobs = [(seed, keys, processes, partitions, plant, retention, suite) for seed in seeds]
    return run_seeds(_simulate_job, jobs, retention, suite, workers=workers, progress=progress)
