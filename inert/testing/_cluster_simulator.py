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

import contextlib
import multiprocessing
import random
import shlex
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

import attrs
import trio
import trio.testing
from attrs import define, field, frozen

from ..actors import Phase, ToolDeclaration, Validator
from ..events import (
    CallKey,
    ClaimRefused,
    ClaimRequested,
    ConfigurationError,
    ConflictError,
    Event,
    ExecutionOutcomeUnknown,
    NotOwner,
    OperatorControl,
    ProcessHeartbeat,
    RecordedEvent,
    RefusedError,
    RequestTimedOut,
    ResponseQuarantined,
    RuntimeClosed,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnLeased,
    TurnRef,
    response_of,
)
from ..log import MemoryStore, NewEvent
from ..runtime import PartitionedRuntime, PendingConfirmation, open_partitioned_runtime
from ..runtime._retention import DEFAULT_RETENTION, Retention
from ._checker import CONTROL_PARTITION, Observation, Violation, check_partitioned_log
from ._plants import planted
from ._simulator import (
    DRAIN,
    EXECUTOR_LAG,
    OPERATOR,
    RETENTIONS,
    SNAPSHOT_EVERY,
    _as_appended,
    _crash,
    _read,
    _Run,
    _seeded_store,
    _TappedLog,
    demo_check,
    log_hash,
    seeded_scheduling,
)
from ._suite import ToolSuite, load_suite, tool_errors
from ._workload import (
    DEMO_TOOLS,
    SIMULATION_LIMITS,
    TENANTS,
    Control,
    SimulatedTool,
    make_plan,
)

T = TypeVar("T")

LEASE_TIME = 5.0
"""Virtual seconds a process may be silent before its partitions and turns are taken over."""
REQUEST_TIMEOUT = 3 * LEASE_TIME
RETRY = 0.25
"""Virtual seconds between two tries of a request no process could take."""
GIVE_UP = 4 * LEASE_TIME
"""Virtual seconds after which a party gives up a request no process could take (as an agent
server would report an error): long enough for a takeover."""
PER_CONVERSATION = 5
"""Call keys per conversation: many conversations, spread over every partition."""
MAX_PROCESSES = 16
"""The most processes a seed starts with."""


@frozen(kw_only=True)
class Membership:
    """A change of who runs, at a virtual time: ``join`` (a new process), ``leave`` (a process
    stops its executor and closes its runtime), ``kill`` (a process's tasks are cancelled where
    they are), ``stall`` (a process's heartbeats are held back for longer than the lease time
    while it runs on: the others take its partitions and turns over, and it decides on)."""

    at: float
    action: str


@frozen(kw_only=True)
class ClusterPlan:
    """What happens to the processes of a seed, and the operator controls given (the plan's
    and more)."""

    changes: tuple[Membership, ...]
    controls: tuple[Control, ...]


def make_cluster_plan(
    seed: int, controls: Sequence[Control], responses: Sequence[str], tools: Sequence[str]
) -> ClusterPlan:
    """The seed's changes of processes and its controls: the same for the same arguments."""
    rng = random.Random(f"{seed}/cluster")
    changes = [
        Membership(
            at=rng.uniform(1, 30),
            action=rng.choices(("kill", "join", "leave", "stall"), weights=(4, 4, 2, 3))[0],
        )
        for _ in range(rng.randint(1, 5))
    ]
    more = list(controls)
    if rng.random() < 0.5:
        at, tool, tenant = rng.uniform(1, 20), rng.choice(tools), rng.choice((*TENANTS, None))
        more.append(Control(at=at, action="disable", target=tool, tenant=tenant))
        more.append(
            Control(at=at + rng.uniform(0.5, 4), action="enable", target=tool, tenant=tenant)
        )
    if responses and rng.random() < 0.4:
        more.append(
            Control(
                at=rng.uniform(1, 20),
                action="quarantine",
                target=rng.choice(responses),
                tenant=rng.choice((*TENANTS, None)),
            )
        )
    if rng.random() < 0.2:
        at, tenant = rng.uniform(1, 20), rng.choice(TENANTS)
        more.append(Control(at=at, action="stop", target=tenant, tenant=tenant))
        more.append(
            Control(at=at + rng.uniform(0.5, 3), action="resume", target=tenant, tenant=tenant)
        )
    return ClusterPlan(
        changes=tuple(sorted(changes, key=lambda change: change.at)),
        controls=tuple(sorted(more, key=lambda control: control.at)),
    )


def control_event(control: Control) -> OperatorControl:
    """The operator control event a planned control gives."""
    reason = "simulated incident"
    match control.action:
        case "quarantine":
            return ResponseQuarantined(
                response=control.target, tenant=control.tenant, operator=OPERATOR, reason=reason
            )
        case "disable":
            return ToolDisabled(
                tool=control.target, tenant=control.tenant, operator=OPERATOR, reason=reason
            )
        case "enable":
            return ToolEnabled(
                tool=control.target, tenant=control.tenant, operator=OPERATOR, reason=reason
            )
        case "stop":
            return TenantStopped(tenant=control.target, operator=OPERATOR, reason=reason)
    return TenantResumed(tenant=control.target, operator=OPERATOR, reason=reason)


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


class _Gone(Exception):
    """The process a request went to was killed or left while it was under way."""


_UNSERVED = (NotOwner, RequestTimedOut, RuntimeClosed, ConflictError, _Gone)
"""What a request to a process that does not (or no longer) serve its partition meets (or a
feed of a response stream another process appended to meanwhile): it is tried again, elsewhere
or later."""


class _PartitionedTap(_TappedLog):
    """A tapped memory log of several partitions, each partition's log tapped too."""

    def __init__(self, store: MemoryStore, appended: dict[int, dict[int, Event]]) -> None:
        super().__init__(store, appended.setdefault(CONTROL_PARTITION, {}))
        self.partitions_appended = appended
        self.stalls: dict[str, float] = {}
        """Processes whose heartbeats are held back, until a virtual time."""

    async def append(
        self, events: Sequence[NewEvent], expected_versions: Mapping[str, int] | None = None
    ) -> list[int]:
        for new in events:
            if isinstance(new.event, ProcessHeartbeat):
                # A process whose beats are late (a long pause, a slow link) runs on meanwhile,
                # taken for dead by the others.
                await trio.sleep_until(self.stalls.get(new.event.process, 0.0))
        return await super().append(events, expected_versions)

    def _partition_log(self, number: int) -> _TappedLog:
        log = self._partition_logs.get(number)
        if not isinstance(log, _TappedLog):
            log = _TappedLog(
                self.store.partition_stores[number], self.partitions_appended.setdefault(number, {})
            )
            # Its runtimes are the log's: one presence for the whole log.
            log._runtimes_in = self.store
            self._partition_logs[number] = log
        return log


class _Router:
    """The agent server's side of a cluster: each request to the process serving it."""

    def __init__(self, run: _ClusterRun) -> None:
        self.run = run

    async def start_turn(
        self,
        *,
        tenant: str,
        conversation: str,
        turn: str,
        principal: str,
        tools: Iterable[str | ToolDeclaration] | None = None,
    ) -> object:
        async def start(runtime: PartitionedRuntime) -> TurnRef:
            return await runtime.start_turn(
                tenant=tenant,
                conversation=conversation,
                turn=turn,
                principal=principal,
                tools=tools,
            )

        ref = TurnRef(tenant=tenant, conversation=conversation, turn=turn)
        return await self.run.routed(ref, start, new_turn=True)

    async def cancel_turn(self, turn: TurnRef, *, principal: str, reason: str = "") -> None:
        async def cancel(runtime: PartitionedRuntime) -> None:
            await runtime.cancel_turn(turn, principal=principal, reason=reason)

        await self.run.routed(turn, cancel)

    async def feed(self, events: Sequence[Event]) -> None:
        response = response_of(events[0]) if events else None
        if response is None:
            return

        async def feed(runtime: PartitionedRuntime) -> None:
            await runtime.feed(events)

        await self.run.routed(response.turn_ref, feed)

    async def pending_confirmation(self, key: CallKey) -> PendingConfirmation | None:
        async def pending(runtime: PartitionedRuntime) -> PendingConfirmation | None:
            return await runtime.core(self.run.partition_of(key)).pending_confirmation(key)

        return await self.run.routed(key.turn_ref, pending)

    async def confirm(
        self,
        key: CallKey,
        *,
        principal: str,
        arguments_digest: str,
        expires_in: timedelta = timedelta(minutes=10),
        arguments: Mapping[str, Any] | bytes | None = None,
    ) -> object:
        async def confirm(runtime: PartitionedRuntime) -> object:
            return await runtime.confirm(
                key,
                principal=principal,
                arguments_digest=arguments_digest,
                expires_in=expires_in,
                arguments=arguments,
            )

        return await self.run.routed(key.turn_ref, confirm)

    async def deny(self, key: CallKey, *, principal: str, reason: str = "") -> None:
        async def deny(runtime: PartitionedRuntime) -> None:
            await runtime.deny(key, principal=principal, reason=reason)

        await self.run.routed(key.turn_ref, deny)


@define
class _ClusterRun(_Run):
    cluster: ClusterPlan = field(factory=lambda: ClusterPlan(changes=(), controls=()))
    processes: int = 2
    log: _PartitionedTap | None = None
    live: dict[str, PartitionedRuntime] = field(factory=dict)
    scopes: dict[str, trio.CancelScope] = field(factory=dict)
    leaving: dict[str, trio.Event] = field(factory=dict)
    requests: dict[str, set[trio.CancelScope]] = field(factory=dict)
    """The requests under way in each live process, cancelled when it goes."""
    departed: list[str] = field(factory=list)
    partition_appended: dict[int, dict[int, Event]] = field(factory=dict)
    partition_observations: dict[int, dict[int, list[Observation]]] = field(factory=dict)
    acknowledged: list[int] = field(factory=list)
    """The control partition's positions of the controls acknowledged, in order."""
    claimed: list[tuple[int, str, int]] = field(factory=list)
    """Each dispatch received: its partition, its claim id, and how many controls had been
    acknowledged when its claim was asked for."""
    phases: dict[CallKey, Phase] = field(factory=dict)
    started: int = 0
    kills: int = 0
    stalls: int = 0
    joins: int = 0
    leaves: int = 0
    gave_up: int = 0

    def partition_of(self, key: CallKey) -> int:
        assert self.log is not None
        return self.log.partition_of(key.tenant, key.conversation)

    def _head_of(self, partition: int) -> int:
        return len(self.store.partition_stores[partition].rows)

    async def run(self) -> None:
        self.log = _PartitionedTap(self.store, self.partition_appended)
        try:
            async with trio.open_nursery() as processes:
                for _ in range(self.processes):
                    await processes.start(self._process)
                async with trio.open_nursery() as parties:
                    parties.start_soon(self._membership, processes)
                    parties.start_soon(self._operate)
                    parties.start_soon(self._probe_all)
                    async with trio.open_nursery() as conversations:
                        for conversation in self.plan.conversations:
                            conversations.start_soon(self._converse, _Router(self), conversation)
                    # Longer than a lease: the partitions of a process killed last are taken
                    # over, and its calls' outcomes recorded.
                    await trio.sleep(DRAIN)
                    parties.cancel_scope.cancel()
                for runtime in self.live.values():
                    await runtime.settle()
                for key in self.fed:
                    for runtime in self.live.values():
                        if self.partition_of(key) in runtime.partitions_owned():
                            self.phases[key] = runtime.core(self.partition_of(key)).phase(key)
                            break
                processes.cancel_scope.cancel()
        except* Exception as group:
            self.crashes.append(_crash(group))

    # --- the processes ---

    async def _process(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        assert self.log is not None
        self.started += 1
        name = f"p{self.started}"
        leaving = self.leaving[name] = trio.Event()
        with self.scopes.setdefault(name, trio.CancelScope()):
            async with open_partitioned_runtime(
                log=self.log,
                process=name,
                tools=[tool.declaration for tool in self.tools],
                check=self.check,
                limits=self.limits,
                operators=[OPERATOR],
                retention=self.retention,
                ledger_horizon=self.horizon,
                lease_time=LEASE_TIME,
                snapshot_every=SNAPSHOT_EVERY,
                request_timeout=REQUEST_TIMEOUT,
            ) as runtime:
                self.live[name] = runtime
                self.requests[name] = set()
                task_status.started()
                async with trio.open_nursery() as work:
                    work.start_soon(self._execute, name, runtime)
                    await leaving.wait()
                    work.cancel_scope.cancel()

    def _depart(self, name: str, *, kill: bool) -> None:
        del self.live[name]
        self.departed.append(name)
        for request in self.requests.pop(name):
            request.cancel()
        if kill:
            self.scopes[name].cancel()
        else:
            self.leaving[name].set()

    async def _membership(self, processes: trio.Nursery) -> None:
        rng = random.Random(f"{self.seed}/membership")
        for change in self.cluster.changes:
            await trio.sleep_until(change.at)
            self.actions += 1
            if change.action == "join":
                self.joins += 1
                await processes.start(self._process)
            elif change.action == "stall":
                assert self.log is not None
                self.stalls += 1
                pause = rng.uniform(1.2, 3) * LEASE_TIME
                self.log.stalls[rng.choice(sorted(self.live))] = trio.current_time() + pause
            elif len(self.live) > 1:
                kill = change.action == "kill"
                self.kills += kill
                self.leaves += not kill
                self._depart(rng.choice(sorted(self.live)), kill=kill)

    # --- routing ---

    async def _on(self, name: str, request: Callable[[PartitionedRuntime], Awaitable[T]]) -> T:
        """A request to one live process, cancelled (``_Gone``) if the process goes."""
        runtime = self.live.get(name)
        if runtime is None:
            raise _Gone
        scope = trio.CancelScope()
        under_way = self.requests[name]
        under_way.add(scope)
        try:
            with scope:
                return await request(runtime)
        finally:
            under_way.discard(scope)
        raise _Gone

    def _server(self, partition: int, turn: TurnRef | None) -> str | None:
        """The process a request of a partition goes to: the one that holds the lease of its
        turn, where it folds the partition (a stream stays with its process while that lives);
        else the one that takes the partition's new turns, as it sees the assignment; for a
        request of a turn started already, else one that folds the partition."""
        live = sorted(self.live)
        if turn is not None:
            for name in live:
                runtime = self.live[name]
                folds = partition in runtime.partitions_owned()
                if folds and runtime.core(partition).turn_owner(turn) == name:
                    return name
        for name in live:
            if self.live[name].assignment().get(partition) == name:
                return name
        if turn is None:
            return None
        for name in live:
            if partition in self.live[name].partitions_owned():
                return name
        return None

    async def routed(
        self,
        turn: TurnRef,
        request: Callable[[PartitionedRuntime], Awaitable[T]],
        *,
        new_turn: bool = False,
    ) -> T | None:
        """A request of a turn sent to the process serving it, and tried again (there or
        elsewhere) while none does, for ``GIVE_UP`` seconds at most."""
        assert self.log is not None
        partition = self.log.partition_of(turn.tenant, turn.conversation)
        give_up = trio.current_time() + GIVE_UP
        while True:
            name = self._server(partition, None if new_turn else turn)
            if name is not None:
                with contextlib.suppress(*_UNSERVED):
                    return await self._on(name, request)
            if trio.current_time() >= give_up:
                self.gave_up += 1
                return None
            await trio.sleep(RETRY)

    # --- executors, the probe and the operator ---

    async def _execute(self, name: str, runtime: PartitionedRuntime) -> None:
        rng = random.Random(f"{self.seed}/{name}/executor")
        async for ready in runtime.ready_calls():
            self._observe_in(
                self.partition_of(ready.key),
                Observation(
                    head=self._head_of(self.partition_of(ready.key)),
                    key=ready.key,
                    turn=ready.turn,
                    tenant=ready.tenant,
                    principal=ready.principal,
                    tool=ready.tool,
                    arguments_digest=ready.arguments_digest,
                ),
            )
            if rng.random() < EXECUTOR_LAG:
                await trio.sleep(rng.uniform(0, 2))
            await self._claim_in(runtime, ready.key, f"{name}/executor", rng)

    async def _claim_in(
        self, runtime: PartitionedRuntime, key: CallKey, executor: str, rng: random.Random
    ) -> None:
        self.actions += 1
        acknowledged = len(self.acknowledged)
        try:
            dispatch = await runtime.claim(key, executor=executor)
        except (ClaimRefused, NotOwner, RequestTimedOut, RuntimeClosed):
            return
        partition = self.partition_of(key)
        self._observe_in(
            partition,
            Observation(
                head=self._head_of(partition),
                key=dispatch.key,
                turn=dispatch.turn,
                tenant=dispatch.tenant,
                principal=dispatch.principal,
                tool=dispatch.tool,
                arguments_digest=dispatch.arguments_digest,
                claim_id=dispatch.claim_id,
            ),
        )
        self.claimed.append((partition, dispatch.claim_id, acknowledged))
        roll = rng.random()
        if roll < 0.2:
            # The executor took the call and never said how it went.
            self.held.append(key)
            return
        self.actions += 1
        # A report the process can no longer take (its partition handed on meanwhile) is lost
        # as a crash's would be: the call's outcome is then unknown. One of a process that
        # was taken for dead is refused: the survivor recorded the outcome unknown first.
        with contextlib.suppress(RefusedError, RuntimeClosed):
            if roll < 0.3:
                with dispatch.stop.scope() as running:
                    await trio.sleep(rng.uniform(0, 3))
                if running.cancelled_caught:
                    await runtime.stopped(dispatch)
                    return
            if roll < 0.85:
                await runtime.complete(dispatch)
            else:
                await runtime.fail(dispatch, "RuntimeError")

    async def _probe_all(self) -> None:
        """Claims calls in whatever state they are, through a process serving them, and each
        call an executor took without reporting how it went once."""
        rng = random.Random(f"{self.seed}/probe")
        while True:
            await trio.sleep(rng.uniform(1, 6))
            candidates = self.held[:]
            del self.held[:]
            if self.fed:
                candidates.append(rng.choice(self.fed))
            for key in candidates:
                name = self._server(self.partition_of(key), key.turn_ref)
                if name is not None:
                    claim = partial(self._claim_in, key=key, executor="probe", rng=rng)
                    with contextlib.suppress(_Gone):
                        await self._on(name, claim)

    async def _operate(self) -> None:
        rng = random.Random(f"{self.seed}/operator")
        for control in self.cluster.controls:
            await trio.sleep_until(control.at)
            event = control_event(control)
            self.actions += 1
            while True:
                name = rng.choice(sorted(self.live))
                try:
                    position = await self._on(name, partial(_give, event=event))
                except _Gone:
                    # Given or not: the operator gives it again through another process.
                    await trio.sleep(RETRY)
                    continue
                self.acknowledged.append(position)
                break

    def _observe_in(self, partition: int, observation: Observation) -> None:
        heads = self.partition_observations.setdefault(partition, {})
        heads.setdefault(observation.head, []).append(observation)


async def _give(runtime: PartitionedRuntime, *, event: OperatorControl) -> int:
    return await runtime.give_control(event)


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
    if retention not in RETENTIONS:
        raise ConfigurationError(
            f"no retention policy is named {retention!r}: choose from {', '.join(RETENTIONS)}"
        )
    loaded = load_suite(suite) if suite is not None else None
    jobs = [(seed, keys, processes, partitions, plant, retention, suite) for seed in seeds]
    results: list[ClusterResult] = []

    def done(result: ClusterResult) -> None:
        results.append(result)
        if progress is not None:
            progress(len(results))

    if workers <= 1 or len(jobs) <= 1:
        for job in jobs:
            done(_simulate_job(job, loaded))
        return results
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        for result in pool.map(_simulate_job, jobs):
            done(result)
    return results
