"""One run of a cluster simulation: the processes, the parties and how requests find their
process (``_cluster_simulator`` runs it and checks what it wrote)."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

import trio
from attrs import define, field

from ..actors import Phase, ToolDeclaration
from ..events import (
    CallKey,
    ClaimRefused,
    ConflictError,
    Event,
    NotOwner,
    OperatorControl,
    ProcessHeartbeat,
    RefusedError,
    RequestTimedOut,
    RuntimeClosed,
    TurnRef,
    response_of,
)
from ..log import MemoryStore, NewEvent
from ..runtime import PartitionedRuntime, PendingConfirmation, open_partitioned_runtime
from ._checker import CONTROL_PARTITION, Observation
from ._cluster_workload import ClusterPlan, control_event
from ._simulator import (
    DRAIN,
    EXECUTOR_LAG,
    OPERATOR,
    SNAPSHOT_EVERY,
    _crash,
    _Run,
    _TappedLog,
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
            event = control_event(control, OPERATOR)
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
