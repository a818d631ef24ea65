"""The console's side of the log: reading it as it grows, and appending operator controls.

The console owns no call: it folds the log into its view as the runtimes that own it write
(``Log.subscribe`` from the position it has; another process's appends are seen within the
backend's poll interval), each partition of a partitioned log followed on its own from its own
position (the calls live in partitions 1 to P, the controls in partition 0). It appends
controls through the runtime's own ``give_control``, with the same operator authorizer, so the
call actors of those runtimes end the calls and the audit records it exactly as for ``inert
control``.
"""

from __future__ import annotations

import bisect
from datetime import datetime

import trio

from ..events import OperatorControl
from ..log import Log
from ..projections import (
    AuditEntry,
    LedgerRow,
    Preview,
    concerns,
    in_force,
    never_seen,
    preview,
    without_effect,
)
from ..runtime._controls import give_control
from ._settings import ConsoleSettings
from ._slices import Slices
from ._view import ConsoleView, Stage

READ_PAGE = 1024

_LIVE = (Stage.ASSEMBLING, Stage.WAITING, Stage.READY)


class LiveFeed:
    """The view of one log, kept up to date, and the controls given through it."""

    def __init__(self, log: Log, settings: ConsoleSettings) -> None:
        self.log = log
        self.settings = settings
        self.view = ConsoleView(
            ledger_horizon=settings.ledger_horizon,
            call_partitions=log.call_partitions(),
            partition_of=log.partition_of,
        )
        self._changed = trio.Event()

    def now(self) -> datetime:
        return self.log.now()

    async def follow(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Fold every partition as it is, then (started) every event appended to any, until
        cancelled."""
        view = self.view
        parts = {number: self.log.partition(number) for number in view.partitions.parts}
        for number, part in parts.items():
            while page := await part.read(view.position_in(number) + 1, limit=READ_PAGE):
                for recorded in page:
                    view.apply(recorded, number)
        self._announce()
        task_status.started()
        async with trio.open_nursery() as nursery:
            for number, part in parts.items():
                nursery.start_soon(self._follow_partition, number, part)

    async def _follow_partition(self, number: int, part: Log) -> None:
        view = self.view
        async for recorded in part.subscribe(view.position_in(number) + 1):
            view.apply(recorded, number)
            self._announce()

    def _announce(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def changed_after(self, sequence: int) -> None:
        """Until a call changed after ``sequence``."""
        while self.view.sequence <= sequence:
            await self._changed.wait()

    async def folded(self, position: int) -> None:
        """Until the view has folded partition 0 up to ``position``."""
        while self.view.position < position:
            await self._changed.wait()

    async def give(self, event: OperatorControl) -> AuditEntry:
        """Give a control (``RefusedError`` where its principal is no operator), and wait, up to
        ``control_wait`` seconds, until no call it stops is still live: its audit entry then."""
        position = await give_control(self.log, event, self.settings.is_operator)
        with trio.move_on_after(self.settings.control_wait):
            await self.folded(position)
            while event.STOPS and await self._stopped_still_live(event):
                await self._changed.wait()
        return self.entry(position) or AuditEntry(
            position=position,
            control=event.TAG,
            operator=event.operator,
            reason=event.reason,
            scope={},
            recorded_at=self.now().isoformat(),
        )

    async def _stopped_still_live(self, event: OperatorControl) -> bool:
        """Whether a live call is one ``event`` stops (the live calls walked in slices)."""
        view = self.view
        slices = Slices()
        for key in view.stage_keys(*_LIVE):
            row = view.row(key)
            if row is not None and concerns(event, row):
                return True
            await slices.due()
        return False

    async def preview(self, event: OperatorControl) -> Preview:
        """The calls alive now that ``event`` would end, and the running ones it would ask to
        stop (the live calls walked in slices)."""
        view = self.view
        rows: list[LedgerRow] = []
        slices = Slices()
        for key in view.stage_keys(*_LIVE, Stage.RUNNING, Stage.STOPPING):
            row = view.row(key)
            if row is not None and concerns(event, row):
                rows.append(row)
            await slices.due()
        return preview(event, rows)

    def never_seen(self, event: OperatorControl) -> str | None:
        """Where nothing the view holds names what ``event`` names, a sentence saying so."""
        view = self.view
        return never_seen(event, view.rows(), view.projections.audit)

    def without_effect(self, event: OperatorControl) -> str | None:
        """Where ``event`` lifts a control not in force, a sentence saying so."""
        return without_effect(event, self.view.projections.audit)

    def in_force(self) -> list[AuditEntry]:
        """The controls in force now, oldest first."""
        return in_force(self.view.projections.audit)

    async def runtime_running(self) -> bool:
        """Whether a runtime runs on the log: without one, a control waits for the next."""
        return await self.log.runtime_running()

    def entry(self, position: int) -> AuditEntry | None:
        """The audit entry (a control, with what it ended in every partition, or a refusal) at
        a position of partition 0."""
        view = self.view
        # Both lists are in log order.
        for entries in (view.partitions.entries(), view.projections.audit.refusals()):
            index = bisect.bisect_left(entries, position, key=_position)
            if index < len(entries) and entries[index].position == position:
                return entries[index]
        return None


def _position(entry: AuditEntry) -> int:
    return entry.position
