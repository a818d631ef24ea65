"""A runtime process on a partitioned log: it folds the partitions it takes, and no other.

Every process of a partitioned log reads its control partition (partition 0) whole: the
heartbeats of every process (each process beats there every quarter of its lease time) and the
operator controls. From the heartbeats, each process knows who is alive (a process whose last
beat is older than the lease time, by the log's clock, is not), and every process computes
the same assignment of partitions to the live processes (``_assignment``). A process runs a
runtime of its own for each partition it is assigned (its core: a ``Runtime`` on that
partition's log, which restores from the partition's snapshot and folds its tail) and for no
other, so each process reads its share of the log.

What keeps a call safe is unchanged from a log that several processes fold whole: a turn is
leased to the process that starts it, only the owner's actors decide for its calls, every
decision is fenced by the version of the turn's lease, and a process whose heartbeat is older
than the lease time has its turns leased by a process that folds their partition. So two
processes that disagree for a moment on who is alive may both fold a partition; they never
both decide for one turn. An assignment only says who folds what.

- **Turns.** A turn is started in the process its partition is assigned to: ``start_turn``
  elsewhere is refused, naming that process (``NotOwner``), so that the agent server sends the
  turn's stream there. The feeds, confirmations, claims and reports of a call go to a process
  that folds its partition.
- **Controls** are appended to the control partition and copied by each process into every
  partition it folds (the same event, on the same stream, with an event id derived from the
  control's, so that processes copying one control into one partition write it once). A control
  takes effect in a partition at the position of its copy there. Before a claim is made, its
  process has copied every control in the control partition at that moment: a control
  acknowledged before a claim is requested stops it.
- **Handing a partition on.** A process keeps folding a partition it is no longer assigned
  while a turn it leases there has a call that is not over or a response still open; then it
  leases those turns to the partition's process and stops folding it.
- **Leaving.** A process whose block ends cleanly stops its partitions' runtimes, then says so
  in the control partition (``ProcessLeft``): the others take it for dead at once, take its
  partitions and bury it as a silent one (its turns leased, its executors' claims of unknown
  outcome), instead of a lease time later. A killed process says nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import trio

from ..actors import ToolDeclaration
from ..events import (
    TERMINAL_PHASES,
    CallKey,
    ConflictError,
    Event,
    NotOwner,
    OperatorControl,
    ProcessHeartbeat,
    ProcessLeft,
    RecordedEvent,
    RefusedError,
    TraceContext,
    TurnLeased,
    TurnRef,
    process_stream,
    response_of,
)
from ..log import Log, NewEvent
from ..log._partitions import CONTROL_COPY
from ..projections import LedgerRow
from ..tracing import IncomingTrace
from ._assignment import assign, owned_by
from ._boundary import Dispatch, OperatorAuthorizer, ReadyCall
from ._controls import give_control
from ._recovery import leave
from ._runtime import DEFAULT_CONFIRMATION_VALIDITY, ReadyCalls, Runtime

MakeCore = Callable[[Log], Runtime]
ServeCore = Callable[[Runtime], contextlib.AbstractAsyncContextManager[Runtime]]


class PartitionedRuntime:
    """The runtime of one process on a partitioned log. Open one with
    [`open_partitioned_runtime`][inert.open_partitioned_runtime]."""

    def __init__(
        self,
        log: Log,
        *,
        process: str,
        lease_time: float,
        operators: OperatorAuthorizer,
        make_core: MakeCore,
        serve_core: ServeCore,
    ) -> None:
        self.log = log
        self.process = process
        self.operators = operators
        self.lease_time = timedelta(seconds=lease_time)
        self._make_core = make_core
        self._serve_core = serve_core
        self._cores: dict[int, Runtime] = {}
        self._scopes: dict[int, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._beats: dict[str, RecordedEvent] = {}
        self._controls: list[NewEvent] = []
        self._control_position = 0
        self._followed = trio.Event()
        self._changed = trio.Event()
        self._owners: dict[int, str] = {}
        self._head_asked = self._head_answered = self._head = 0
        self._head_reading: trio.Event | None = None
        self._rebalance_due = trio.Event()

    # --- what this process folds ---

    def partitions_owned(self) -> list[int]:
        """The partitions this process folds now, in order."""
        return sorted(self._cores)

    def assignment(self) -> dict[int, str]:
        """The process each partition is assigned to, as this process sees who is alive."""
        return dict(self._owners)

    def alive(self) -> list[str]:
        """The processes alive, as this process sees their heartbeats (itself included)."""
        now = self.log.now()
        return sorted(
            {self.process}
            | {
                process
                for process, beat in self._beats.items()
                if isinstance(beat.event, ProcessHeartbeat)
                and now - beat.recorded_at <= self.lease_time
            }
        )

    @property
    def rows_read(self) -> int:
        """The log rows this process has read from storage: of the control partition and of
        every partition it has folded."""
        logs = [self.log, *(self.log.partition(n) for n in self.log.call_partitions())]
        return sum(log.rows_read for log in logs)

    def partition_of(self, tenant: str, conversation: str) -> int:
        return self.log.partition_of(tenant, conversation)

    def core(self, partition: int) -> Runtime:
        """The runtime of a partition this process folds; ``NotOwner`` for another."""
        core = self._cores.get(partition)
        if core is None:
            owner = self._owners.get(partition)
            where = f"process {owner!r}" if owner is not None else "no process alive"
            raise NotOwner(
                f"partition {partition} is folded by {where}, not by {self.process!r}: send its"
                " turns there"
            )
        return core

    def _core_of(self, turn: TurnRef | CallKey) -> Runtime:
        return self.core(self.log.partition_of(turn.tenant, turn.conversation))

    # --- turns, feeds and requests, each to the runtime of its partition ---

    async def start_turn(
        self,
        *,
        tenant: str,
        conversation: str,
        turn: str,
        principal: str,
        tools: Iterable[str | ToolDeclaration] | None = None,
        trace: TraceContext | IncomingTrace | None = None,
    ) -> TurnRef:
        """Start a turn in this process, which must be the one its partition is assigned to."""
        partition = self.log.partition_of(tenant, conversation)
        owner = self._owners.get(partition)
        if owner != self.process:
            raise NotOwner(
                f"conversation {conversation!r} of tenant {tenant!r} lives in partition"
                f" {partition}, which process {owner!r} takes new turns of, not {self.process!r}:"
                " start the turn there"
            )
        return await self.core(partition).start_turn(
            tenant=tenant,
            conversation=conversation,
            turn=turn,
            principal=principal,
            tools=tools,
            trace=trace,
        )

    async def cancel_turn(self, turn: TurnRef, *, principal: str, reason: str = "") -> None:
        await self._core_of(turn).cancel_turn(turn, principal=principal, reason=reason)

    async def feed(self, events: Sequence[Event], *, trace: TraceContext | None = None) -> None:
        """Feed ingress events; those of one call's partition go to its runtime, in order."""
        runs: list[tuple[Runtime, list[Event]]] = []
        for event in events:
            response = response_of(event)
            if response is None:
                raise RefusedError(f"{event.TAG} is not an ingress event")
            core = self._core_of(response.turn_ref)
            if runs and runs[-1][0] is core:
                runs[-1][1].append(event)
            else:
                runs.append((core, [event]))
        for core, run in runs:
            await core.feed(run, trace=trace)

    async def confirm(
        self,
        key: CallKey,
        *,
        principal: str,
        arguments_digest: str,
        expires_in: timedelta = DEFAULT_CONFIRMATION_VALIDITY,
        arguments: Mapping[str, Any] | bytes | None = None,
    ) -> datetime:
        """``Runtime.confirm`` in the runtime of the call's partition."""
        return await self._core_of(key).confirm(
            key,
            principal=principal,
            arguments_digest=arguments_digest,
            expires_in=expires_in,
            arguments=arguments,
        )

    async def deny(self, key: CallKey, *, principal: str, reason: str = "") -> None:
        await self._core_of(key).deny(key, principal=principal, reason=reason)

    # --- executors ---

    def ready_calls(self) -> AsyncIterator[ReadyCall]:
        """The calls of the partitions this process folds that may be claimed, as they become
        ready."""
        return ReadyCalls(lambda: list(self._cores.values()), lambda: self._changed)

    async def claim(self, call: CallKey | ReadyCall, *, executor: str) -> Dispatch:
        """Claim a ready call once every control given so far is in its partition."""
        key = call.key if isinstance(call, ReadyCall) else call
        core = self._core_of(key)
        await self._controls_copied()
        return await core.claim(call, executor=executor)

    async def complete(self, dispatch: Dispatch) -> None:
        await self._core_of(dispatch.key).complete(dispatch)

    async def fail(self, dispatch: Dispatch, error: str = "") -> None:
        await self._core_of(dispatch.key).fail(dispatch, error)

    async def stopped(self, dispatch: Dispatch) -> None:
        await self._core_of(dispatch.key).stopped(dispatch)

    # --- views ---

    def row(self, key: CallKey) -> LedgerRow | None:
        """The ledger row of a call of a partition this process folds (else ``None``)."""
        core = self._cores.get(self.log.partition_of(key.tenant, key.conversation))
        return None if core is None else core.ledger.row(key)

    async def changed(self) -> None:
        """Until a runtime of this process has folded something new, or its partitions
        changed."""
        await self._changed.wait()

    async def settle(self) -> None:
        """``Runtime.settle`` of every partition this process folds."""
        for core in list(self._cores.values()):
            await core.settle()

    # --- controls ---

    async def give_control(self, event: OperatorControl) -> int:
        """Give a control (authorized as ``Runtime``'s controls are), in the control partition;
        returns once this process has copied it into every partition it folds."""
        position = await give_control(self.log, event, self.operators)
        await self._controls_copied()
        return position

    async def _controls_copied(self) -> None:
        """Until every control the control partition holds now is in the partitions this
        process folds."""
        head = await self._control_head()
        while self._control_position < head:
            await self._followed.wait()

    async def _control_head(self) -> int:
        """The head of the control partition, read after this was asked: one read serves every
        caller that asked before it began (claims come many at a time, and each read is a
        round trip and a transaction of the server)."""
        self._head_asked += 1
        ticket = self._head_asked
        while self._head_answered < ticket:
            reading = self._head_reading
            if reading is not None:
                await reading.wait()
                continue
            reading = self._head_reading = trio.Event()
            covered = self._head_asked
            try:
                self._head = await self.log.head()
                self._head_answered = covered
            finally:
                self._head_reading = None
                reading.set()
        return self._head

    # --- running ---

    @asynccontextmanager
    async def running(self) -> AsyncIterator[PartitionedRuntime]:
        """Beat, follow the control partition and fold the partitions taken, for the block's
        duration; an error of the block comes out as itself."""
        body_error: BaseException | None = None
        async with self.log.runtime_presence(), trio.open_nursery() as nursery:
            self._nursery = nursery
            await self._beat()
            await self._follow_to(await self.log.head())
            await self._rebalance()
            nursery.start_soon(self._follow)
            nursery.start_soon(self._keep_beating)
            nursery.start_soon(self._keep_balance)
            try:
                yield self
            except BaseException as error:
                body_error = error
            finally:
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error
        # A clean stop, every partition's runtime stopped: the others need not wait out the
        # lease to take this process's partitions and turns.
        await leave(self.log, self.process)

    async def _beat(self) -> None:
        await self.log.append(
            [
                NewEvent(
                    stream=process_stream(self.process),
                    event=ProcessHeartbeat(process=self.process),
                )
            ]
        )

    async def _keep_beating(self) -> None:
        period = self.lease_time.total_seconds() / 4
        while True:
            await trio.sleep(period)
            await self._beat()
            self._rebalance_due.set()

    async def _keep_balance(self) -> None:
        # Apart from following the control partition: starting a partition's runtime or
        # handing one on takes a while, and the heartbeats heard meanwhile must reach the
        # runtimes, or they would take a live process for dead.
        while True:
            await self._rebalance_due.wait()
            self._rebalance_due = trio.Event()
            await self._rebalance()

    async def _follow_to(self, head: int) -> None:
        while self._control_position < head:
            for recorded in await self.log.read(self._control_position + 1, limit=1024):
                await self._heard(recorded)

    async def _follow(self) -> None:
        async for recorded in self.log.subscribe(self._control_position + 1):
            await self._heard(recorded)
            if isinstance(recorded.event, ProcessHeartbeat | ProcessLeft):
                self._rebalance_due.set()

    async def _heard(self, recorded: RecordedEvent) -> None:
        event = recorded.event
        if isinstance(event, ProcessHeartbeat | ProcessLeft):
            self._beats[event.process] = recorded
            for core in self._cores.values():
                if core.peers is not None:
                    core._hear_peer(recorded, True)
        elif isinstance(event, OperatorControl):
            # The same event on the same stream, under an id of its own in each partition
            # (the same in every partition, so that processes copying it write it once).
            copy = NewEvent(
                stream=recorded.stream, event=event, event_id=CONTROL_COPY + recorded.event_id
            )
            self._controls.append(copy)
            for core in list(self._cores.values()):
                await core.log.append([copy])
        self._control_position = recorded.position
        self._followed.set()
        self._followed = trio.Event()

    async def _rebalance(self) -> None:
        """Fold the partitions assigned to this process; hand on those no longer assigned once
        nothing of this process's turns is under way there."""
        self._owners = assign(self.log.call_partitions(), self.alive())
        mine = set(owned_by(self._owners, self.process))
        for partition in sorted(mine - self._cores.keys()):
            await self._start(partition)
        for partition in sorted(self._cores.keys() - mine):
            await self._hand_on(partition)
        self._announce()

    async def _start(self, partition: int) -> None:
        assert self._nursery is not None
        log = self.log.partition(partition)
        # Every control given so far is in the partition before its runtime decides anything.
        if self._controls:
            # A copy: a control heard while this append waits joins the list, and the log
            # pairs the events it was given with their positions once the append returns.
            await log.append(list(self._controls))
        core = self._make_core(log)
        await self._nursery.start(self._serve, partition, core)

    async def _serve(
        self, partition: int, core: Runtime, task_status: trio.TaskStatus[None]
    ) -> None:
        with trio.CancelScope() as scope:
            async with self._serve_core(core):
                if core.peers is not None:
                    for beat in self._beats.values():
                        core._hear_peer(beat, True)
                self._cores[partition] = core
                self._scopes[partition] = scope
                # A control heard while the runtime started went to the runtimes running then:
                # copied again (once, by its id), it is in the partition before any claim.
                if self._controls:
                    await core.log.append(list(self._controls))
                task_status.started()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._relay_changes, core)
        # Handed on already, or replaced by a runtime started for the partition since.
        if self._cores.get(partition) is core:
            del self._cores[partition]
            del self._scopes[partition]

    async def _relay_changes(self, core: Runtime) -> None:
        async for _ in core.changes():
            self._announce()

    async def _hand_on(self, partition: int) -> None:
        core = self._cores.get(partition)
        if core is None:
            # Stopped meanwhile: handed on by an earlier pass.
            return
        # Judged on everything in the log and fed here so far: a call fed a moment ago is
        # under way.
        await core.settle()
        fold = core._fold
        mine = {turn for turn, (owner, _) in fold.leases().items() if owner == self.process}
        if any(response.turn_ref in mine for response in fold.interrupted_responses()):
            return
        if any(
            row.key.turn_ref in mine and (row.state not in TERMINAL_PHASES or row.running)
            for row in core.projections.ledger.rows()
        ):
            return
        owner = self._owners[partition]
        for turn, (holder, version) in fold.leases().items():
            if holder != self.process:
                continue
            lease = TurnLeased(turn=turn, owner=owner, previous=self.process)
            with contextlib.suppress(ConflictError):
                await core.log.append(
                    [NewEvent(stream=turn.lease_stream, event=lease)], {turn.lease_stream: version}
                )
        await core.settle()
        if any(holder == self.process for holder, _ in fold.leases().values()):
            # A turn this process took over as it settled (it buried a process it found dead
            # a moment before that one beat again): stopped here, nobody would answer for it.
            # The next pass hands it on, once nothing of it is under way.
            return
        # Out of the routing first: nothing is sent to a runtime that is stopping.
        del self._cores[partition]
        self._scopes.pop(partition).cancel()

    def _announce(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
