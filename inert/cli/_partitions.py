"""Every partition of a log folded into projections of its own, for the commands that show
calls and controls: on a partitioned log the calls live in the partitions of their
conversations and the controls in partition 0, where a runtime process copies each into every
partition it folds (the copy's id is the control's behind ``CONTROL_COPY``) and decides there.
On a log of one partition, that partition is the log."""

from __future__ import annotations

import trio

from ..events import CallKey
from ..log import Log
from ..projections import DEFAULT_LEDGER_HORIZON, AuditEntry, LedgerRow, Projections
from ..projections._partitions import PartitionProjections
from ._common import READ_PAGE


class FoldedPartitions:
    """The projections of each partition of a log, folded as far as asked."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.folded = PartitionProjections(
            ledger_horizon=DEFAULT_LEDGER_HORIZON,
            call_partitions=log.call_partitions(),
            partition_of=log.partition_of,
        )
        self.changed = trio.Event()
        """Set when ``follow`` folds an event; replace it to wait for the next."""

    @property
    def parts(self) -> dict[int, Projections]:
        """The projections of each partition, by its number."""
        return self.folded.parts

    @property
    def controls(self) -> Projections:
        """The projections of the partition the controls are given in."""
        return self.folded.controls

    async def catch_up(self) -> None:
        """Fold what every partition holds now."""
        for number, projections in self.parts.items():
            part = self.log.partition(number)
            while page := await part.read(projections.position + 1, limit=READ_PAGE):
                for recorded in page:
                    self.folded.apply(number, recorded)

    async def follow(self, number: int) -> None:
        """Fold a partition as it grows, setting ``changed`` after each event (until cancelled)."""
        projections = self.parts[number]
        async for recorded in self.log.partition(number).subscribe(projections.position + 1):
            self.folded.apply(number, recorded)
            self.changed.set()

    def rows(self) -> list[LedgerRow]:
        """The ledger's rows of every partition of calls."""
        return self.folded.rows()

    def row(self, key: CallKey) -> LedgerRow | None:
        """The ledger's row of a call, from the partition of its conversation."""
        return self.folded.row(key)

    def entries(self) -> list[AuditEntry]:
        """The controls given (refusals aside), each with the calls it ended and asked to stop
        in every partition of calls whose copy was folded."""
        return self.folded.entries()

    def entry(self, position: int) -> AuditEntry:
        """The control given at a position of partition 0, with what it did in every partition
        whose copy of it is known (all of them, on a log of one partition)."""
        return self.folded.entry(position)
