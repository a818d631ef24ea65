"""Every partition of a log folded into projections of its own, for the commands that show
calls and controls: on a partitioned log the calls live in the partitions of their
conversations and the controls in partition 0, where a runtime process copies each into every
partition it folds (the copy's id is the control's behind ``CONTROL_COPY``) and decides there.
On a log of one partition, that partition is the log."""

from __future__ import annotations

import attrs
import trio

from ..events import CallKey, OperatorControl, RecordedEvent
from ..log import Log
from ..log._partitions import CONTROL_COPY, CONTROL_PARTITION
from ..projections import AuditEntry, LedgerRow, Projections
from ._common import READ_PAGE


class FoldedPartitions:
    """The projections of each partition of a log, folded as far as asked."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.calls_in = list(log.call_partitions())
        self.parts = {
            number: Projections() for number in sorted({CONTROL_PARTITION, *self.calls_in})
        }
        # The id of each control given in partition 0, by position, and where each partition
        # of calls holds its copy, by the control's id.
        self._control_ids: dict[int, str] = {}
        self._copies: dict[str, dict[int, int]] = {}
        self.changed = trio.Event()
        """Set when ``follow`` folds an event; replace it to wait for the next."""

    @property
    def controls(self) -> Projections:
        """The projections of the partition the controls are given in."""
        return self.parts[CONTROL_PARTITION]

    async def catch_up(self) -> None:
        """Fold what every partition holds now."""
        for number, projections in self.parts.items():
            part = self.log.partition(number)
            while page := await part.read(projections.position + 1, limit=READ_PAGE):
                for recorded in page:
                    self._apply(number, recorded)

    async def follow(self, number: int) -> None:
        """Fold a partition as it grows, setting ``changed`` after each event (until cancelled)."""
        projections = self.parts[number]
        async for recorded in self.log.partition(number).subscribe(projections.position + 1):
            self._apply(number, recorded)
            self.changed.set()

    def _apply(self, number: int, recorded: RecordedEvent) -> None:
        self.parts[number].apply(recorded)
        if not isinstance(recorded.event, OperatorControl):
            return
        if number == CONTROL_PARTITION:
            self._control_ids[recorded.position] = recorded.event_id
        elif recorded.event_id.startswith(CONTROL_COPY):
            control = recorded.event_id.removeprefix(CONTROL_COPY)
            self._copies.setdefault(control, {})[number] = recorded.position

    def rows(self) -> list[LedgerRow]:
        """The ledger's rows of every partition of calls."""
        return [row for number in self.calls_in for row in self.parts[number].ledger.rows()]

    def row(self, key: CallKey) -> LedgerRow | None:
        """The ledger's row of a call, from the partition of its conversation."""
        number = self.log.partition_of(key.tenant, key.conversation)
        return self.parts[number].ledger.row(key)

    def entries(self) -> list[AuditEntry]:
        """The controls given (refusals aside), each with the calls it ended and asked to stop
        in every partition of calls whose copy was folded."""
        return [self._merged(entry) for entry in self.controls.audit.entries()]

    def entry(self, position: int) -> AuditEntry:
        """The control given at a position of partition 0, with what it did in every partition
        whose copy of it is known (all of them, on a log of one partition)."""
        [entry] = [entry for entry in self.controls.audit.entries() if entry.position == position]
        return self._merged(entry)

    def _merged(self, entry: AuditEntry) -> AuditEntry:
        copies = self._copies.get(self._control_ids.get(entry.position, ""))
        if not copies:
            return entry
        ended = list(entry.ended)
        asked = dict(entry.asked_to_stop)
        for number, at in sorted(copies.items()):
            for copy in self.parts[number].audit.entries():
                if copy.position == at:
                    ended.extend(copy.ended)
                    asked.update(copy.asked_to_stop)
        return attrs.evolve(entry, ended=ended, asked_to_stop=asked)
