"""The router, the call actors and their timers: the I/O around the fold.

The router reads the log in position order (first what is stored, then each new event as it
lands) and folds every event (``CallFold``). The fold says what each call's actor must do; the
router hands it to that actor's bounded inbox, spawning the actor on first use. At most
``max_busy_actors`` actors have work at once: past that, the router waits for one to finish
before it spawns another. An actor never waits for the router (what it awaits is the log, or
a validation bounded by its timeout), so this cannot stall; without it, a fold catching up on a
backlog (after a pause such as a snapshot's capture) would spawn an actor for every call it
passes, each holding its task and its pending write, all at once.

A call's actor is a Trio task that exists while its call has work: it writes the call's
decisions to the call's stream, with the expected version (alone on the log it is the stream's
only writer: a conflict means another writer exists, and the runtime stops rather than write
beside it; where processes share the log, only the turn's owner acts, fenced by the version of
the turn's lease, and a refused write means the turn was taken over: the new owner's decisions
come from the log), and runs the call's validation once, with a deadline on what it awaits
(what answers without waiting needs none). When its inbox is empty it ends: a passivated actor
costs nothing but the call's record in the fold, and the next work for the call spawns it
again. The actor of a terminal call has no more work.

A timer task turns due deadlines into ``DeadlineReached`` requests in the log, so that a timeout
is decided in log order like everything else.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime

import trio

from ..events import CallKey, ConflictError, DeadlineReached, FailReason, LogError, RecordedEvent
from ..log import Log, NewEvent
from ._call import ValidationOutcome, ValidationRequested, ValidationResult, recorded
from ._decider import decide
from ._fold import (
    AppendDecisions,
    CallFold,
    RunValidation,
    ScheduleDeadline,
    Work,
)

Listener = Callable[[RecordedEvent], None]
Validation = Callable[[ValidationRequested], ValidationResult | Awaitable[ValidationResult]]
"""A validator, or one that answers at once where it need not wait (as
``ToolRegistry.start_validation`` does)."""

DEFAULT_INBOX_SIZE = 64
DEFAULT_MAX_BUSY_ACTORS = 4096
"""As many as the log's group commit takes in one batch by default: more at once would only
wait for the next commit."""
DEFAULT_VALIDATION_TIMEOUT = 0.1
READ_PAGE = 4096
_SWEEP_AT_LEAST = 1024


class CallRouter:
    """Feeds the fold from the log and runs the actors and timers of the calls."""

    def __init__(
        self,
        log: Log,
        fold: CallFold,
        validator: Validation,
        *,
        listener: Listener,
        validation_timeout: float = DEFAULT_VALIDATION_TIMEOUT,
        inbox_size: int = DEFAULT_INBOX_SIZE,
        max_busy_actors: int = DEFAULT_MAX_BUSY_ACTORS,
    ) -> None:
        self._log = log
        self._fold = fold
        self._validator = validator
        self._listener = listener
        self._validation_timeout = validation_timeout
        self._inbox_size = inbox_size
        self._nursery: trio.Nursery | None = None
        # The inbox of each call with an actor: work in order, taken by the actor a batch at a
        # time. A deque rather than a memory channel: the router hands work without a schedule
        # point per item, so a page of the log is folded and handed out in one go.
        self._actors: dict[CallKey, deque[Work]] = {}
        self._room = trio.Event()
        self._waiting_for_room = 0
        self._max_busy_actors = max_busy_actors
        self._vacancy = trio.Event()
        self._waiting_for_vacancy = False
        # The version of a call's stream after this router's last write to it, until the fold
        # has read that write back.
        self._written: dict[CallKey, int] = {}
        self._sweep_at = _SWEEP_AT_LEAST
        self._deadlines: list[tuple[datetime, int, CallKey]] = []
        self._deadline_counter = 0
        self._deadline_wake = trio.Event()
        self._requested: set[CallKey] = set()
        self._progress = trio.Event()
        self._awaiting_progress = 0
        self._idle = trio.Event()
        self.position = 0

    # --- startup ---

    def start_at(self, fold: CallFold, position: int) -> None:
        """Start from a fold of the log up to ``position`` (a snapshot's) rather than from
        nothing."""
        self._fold = fold
        self.position = position

    async def catch_up(self) -> int:
        """Fold everything stored (no actor runs meanwhile); the position reached."""
        while True:
            page = await self._log.read(self.position + 1, limit=READ_PAGE)
            if not page:
                return self.position
            for recorded_event in page:
                self._fold.apply(recorded_event)
                self._listener(recorded_event)
                self.position = recorded_event.position

    async def run(self, nursery: trio.Nursery, *, task_status: trio.TaskStatus[None]) -> None:
        """Go live: do what the replay left undone, then follow the log."""
        self._nursery = nursery
        for leftover in self._fold.go_live():
            await self._hand(leftover)
        nursery.start_soon(self._timers)
        subscription = self._log.subscribe(self.position + 1)
        task_status.started()
        async for recorded_event in subscription:
            if recorded_event.position <= self.position:
                # Delivered again: it was folded already, and deciding it twice would write
                # decisions no replay makes.
                continue
            if recorded_event.position != self.position + 1:
                raise LogError(
                    f"log gap: the router folded position {self.position}, the log gave"
                    f" {recorded_event.position}"
                )
            produced = self._fold.apply(recorded_event)
            self._listener(recorded_event)
            if isinstance(recorded_event.event, DeadlineReached):
                # Answered: a deadline the call still has (one not yet due when the request
                # was judged) is watched again.
                key = recorded_event.event.key
                self._requested.discard(key)
                state = self._fold.state(key)
                deadline = None if state is None else self._fold.deadline(state)
                if deadline is not None:
                    self._schedule(key, deadline)
            self.position = recorded_event.position
            if self._awaiting_progress:
                # Only when someone waits: a new event per event folded costs the replay.
                self._progress.set()
                self._progress = trio.Event()
            for item in produced:
                await self._hand(item)

    # --- waiting for quiet ---

    @property
    def busy(self) -> bool:
        """Some actor has work it has not finished."""
        return bool(self._actors)

    async def wait_until_idle(self) -> None:
        """Until no actor has work left."""
        while self._actors:
            await self._idle.wait()

    async def wait_for(self, position: int) -> None:
        """Until the router has folded the event at ``position``."""
        while self.position < position:
            self._awaiting_progress += 1
            try:
                await self._progress.wait()
            finally:
                self._awaiting_progress -= 1

    # --- actors ---

    async def _hand(self, work: Work) -> None:
        if isinstance(work, ScheduleDeadline):
            self._schedule(work.key, work.at)
            return
        key = work.key
        while True:
            inbox = self._actors.get(key)
            if inbox is None and len(self._actors) >= self._max_busy_actors:
                self._waiting_for_vacancy = True
                await self._vacancy.wait()
                continue
            if inbox is None:
                assert self._nursery is not None
                inbox = self._actors[key] = deque()
                self._nursery.start_soon(self._actor, key, inbox)
                inbox.append(work)
                # A new actor gets to start before the router goes on: calls then write their
                # first decisions in the order the log gave their inputs.
                await trio.lowlevel.checkpoint()
                return
            if len(inbox) < self._inbox_size:
                break
            # The inbox is bounded: the router waits for the actor to take a batch (and looks
            # the inbox up again: the actor may have passivated meanwhile).
            self._waiting_for_room += 1
            try:
                await self._room.wait()
            finally:
                self._waiting_for_room -= 1
        inbox.append(work)

    async def _actor(self, key: CallKey, inbox: deque[Work]) -> None:
        while True:
            if not inbox:
                # Nothing is queued and no checkpoint lies between this check and the removal,
                # so no work can slip in between: the actor passivates.
                del self._actors[key]
                if self._waiting_for_vacancy:
                    self._waiting_for_vacancy = False
                    self._vacancy.set()
                    self._vacancy = trio.Event()
                if not self._actors:
                    self._idle.set()
                    self._idle = trio.Event()
                return
            batch = list(inbox)
            inbox.clear()
            if self._waiting_for_room:
                self._room.set()
                self._room = trio.Event()
            await self._work_through(key, batch)
            if inbox:
                # More came meanwhile: the other actors get their turn first.
                await trio.lowlevel.checkpoint()

    async def _work_through(self, key: CallKey, batch: list[Work]) -> None:
        pending: list[NewEvent] = []
        # The fold's position at the first pending decision: the strictest fence of the batch.
        basis = 0
        stream = key.stream
        for work in batch:
            if isinstance(work, AppendDecisions):
                if not pending:
                    basis = work.position
                pending.extend(NewEvent(stream=stream, event=event) for event in work.decisions)
            elif isinstance(work, RunValidation):
                await self._append(key, pending, basis)
                pending = []
                await self._validate(key, work)
        await self._append(key, pending, basis)

    async def _append(self, key: CallKey, events: list[NewEvent], basis: int) -> None:
        if not events:
            return
        stream = key.stream
        version = self._written.get(key)
        record = self._fold.records.get(key)
        read = record.version if record is not None else None
        if version is None or (read is not None and read > version):
            # What this process wrote last, unless the fold has read further since: another
            # process decided for the call meanwhile (it took the turn over, and handed it
            # back), and an append at the old version would be refused and its decisions lost.
            version = read
        if version is None:
            # A call this fold forgot, or never knew: its stream may hold events. Its version
            # as of the position the decisions were made at, not now: where processes share
            # the log and nobody leases the turn, each decides for the call, and one that
            # counted another's decisions written since would write the same ones again.
            version = await self._log.stream_version(stream, as_of=basis)
        expected = {stream: version}
        if self._fold.process is None:
            await self._log.append(events, expected)
        else:
            # Fenced by the lease this process holds: once another process has taken the turn
            # over, the lease stream has moved on and these decisions are refused. The new
            # owner writes them; this fold reads them from the log like any other process.
            lease = self._fold.lease(key.turn_ref)
            if lease is not None:
                if lease[0] != self._fold.process:
                    return
                expected[key.turn_ref.lease_stream] = lease[1]
            try:
                await self._log.append(events, expected)
            except ConflictError:
                self._written.pop(key, None)
                return
        written = self._written
        written[key] = version + len(events)
        if len(written) > self._sweep_at:
            self._sweep_written()

    def _sweep_written(self) -> None:
        """Drop the versions written that the fold has read back (or whose call it forgot):
        the fold's own then holds. Run when the table has doubled, so it stays as small as
        the calls with writes not yet read back, at a constant cost per write."""
        records = self._fold.records
        for key, version in list(self._written.items()):
            record = records.get(key)
            if record is None or (record.version is not None and record.version >= version):
                del self._written[key]
        self._sweep_at = max(2 * len(self._written), _SWEEP_AT_LEAST)

    async def _validate(self, key: CallKey, work: RunValidation) -> None:
        result: ValidationResult | None = None
        try:
            started = self._validator(work.request)
        except Exception as error:
            result = _raised(error)
        else:
            if isinstance(started, ValidationResult):
                # Answered without waiting: no deadline can pass in code that never yields.
                result = started
            else:
                with trio.move_on_after(self._validation_timeout):
                    try:
                        result = await started
                    except Exception as error:
                        result = _raised(error)
                if result is None:
                    result = ValidationResult(
                        failure=FailReason.VALIDATION_TIMEOUT,
                        detail=f"no answer within {self._validation_timeout} s",
                    )
        state = self._fold.state(key)
        assert state is not None
        if state.validating != work.request:
            # Only where processes share the log: another one took the turn over meanwhile
            # and answered.
            assert self._fold.process is not None
            return
        decisions = recorded(decide(state, ValidationOutcome(result=result), work.context))
        await self._append(
            key,
            [NewEvent(stream=key.stream, event=event) for event in decisions],
            self._fold.position,
        )

    # --- timers ---

    def _schedule(self, key: CallKey, at: datetime) -> None:
        self._deadline_counter += 1
        heapq.heappush(self._deadlines, (at, self._deadline_counter, key))
        self._deadline_wake.set()

    async def _timers(self) -> None:
        while True:
            if not self._deadlines:
                await self._deadline_wake.wait()
                self._deadline_wake = trio.Event()
                continue
            delay = (self._deadlines[0][0] - self._log.now()).total_seconds()
            if delay > 0:
                with trio.move_on_after(delay):
                    await self._deadline_wake.wait()
                    self._deadline_wake = trio.Event()
                continue
            now = self._log.now()
            due: list[CallKey] = []
            while self._deadlines and self._deadlines[0][0] <= now:
                _, _, key = heapq.heappop(self._deadlines)
                state = self._fold.state(key)
                deadline = None if state is None else self._fold.deadline(state)
                if deadline is None or key in self._requested:
                    continue
                if deadline > now:
                    self._schedule(key, deadline)
                else:
                    due.append(key)
                    self._requested.add(key)
            if due:
                await self._log.append(
                    [
                        NewEvent(stream=key.request_stream, event=DeadlineReached(key=key))
                        for key in due
                    ]
                )


def _raised(error: Exception) -> ValidationResult:
    return ValidationResult(
        failure=FailReason.VALIDATOR_ERROR,
        detail=f"the validator raised {type(error).__name__}",
    )
