"""The projections of every partition of a log, as the console and the commands fold them.

On a log of one partition, partition 0 is the log. On a partitioned log the calls live in the
partitions of their conversations, each with positions of its own, and the controls in
partition 0, where a runtime process copies each into every partition it folds (the copy's id
is the control's behind ``CONTROL_COPY``) and ends the calls there: the calls a control ended
are those its copies ended, each partition's audit holding its copy's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import timedelta

import attrs

from ..events import CONTROL_COPY, CONTROL_PARTITION, CallKey, OperatorControl, RecordedEvent
from . import AuditEntry, LedgerRow, Projections, Transition


def one_partition(tenant: str, conversation: str) -> int:
    """Where a call lives on a log of one partition."""
    return CONTROL_PARTITION


class PartitionProjections:
    """One ``Projections`` per partition, each fed its partition's records in its order."""

    def __init__(
        self,
        *,
        ledger_horizon: timedelta | None,
        call_partitions: Iterable[int],
        partition_of: Callable[[str, str], int],
    ) -> None:
        self.parts = {
            number: Projections(ledger_horizon=ledger_horizon)
            for number in sorted({CONTROL_PARTITION, *call_partitions})
        }
        self._partition_of = partition_of
        # The id of each control of partition 0, by position, and the audit entries of its
        # copies, by that id: an entry is the audit's own, which adds the calls its copy ends.
        self._control_ids: dict[int, str] = {}
        self._copies: dict[str, list[AuditEntry]] = {}

    @property
    def controls(self) -> Projections:
        """The projections of partition 0, where controls are given."""
        return self.parts[CONTROL_PARTITION]

    def apply(self, number: int, recorded: RecordedEvent) -> bool:
        """Fold one record of partition ``number``: whether it was new there."""
        projections = self.parts[number]
        if recorded.position <= projections.position:
            return False
        projections.apply(recorded)
        if isinstance(recorded.event, OperatorControl):
            self._control(number, recorded)
        return True

    def _control(self, number: int, recorded: RecordedEvent) -> None:
        if number == CONTROL_PARTITION:
            self._control_ids[recorded.position] = recorded.event_id
            return
        if not recorded.event_id.startswith(CONTROL_COPY):
            return
        entries = self.parts[number].audit.entries()
        # The audit records no control from what retention left of it: then there is none.
        if entries and entries[-1].position == recorded.position:
            control = recorded.event_id.removeprefix(CONTROL_COPY)
            self._copies.setdefault(control, []).append(entries[-1])

    def row(self, key: CallKey) -> LedgerRow | None:
        """The ledger's row of a call, from the partition of its conversation."""
        part = self.parts.get(self._partition_of(key.tenant, key.conversation))
        return None if part is None else part.ledger.row(key)

    def history(self, key: CallKey) -> list[Transition]:
        """The transitions of a call, at positions of its partition."""
        part = self.parts.get(self._partition_of(key.tenant, key.conversation))
        return [] if part is None else part.ledger.history(key)

    def rows(self) -> list[LedgerRow]:
        """The ledger's rows of every partition."""
        return [row for part in self.parts.values() for row in part.ledger.rows()]

    def entries(self) -> list[AuditEntry]:
        """The controls given (refusals aside), in the order of partition 0, each with the
        calls it ended and asked to stop in every partition whose copy of it was folded."""
        return [self._merged(entry) for entry in self.controls.audit.entries()]

    def entry(self, position: int) -> AuditEntry:
        """The control given at a position of partition 0, with what it did in every partition
        whose copy of it was folded (all of them, on a log of one partition)."""
        [entry] = [entry for entry in self.controls.audit.entries() if entry.position == position]
        return self._merged(entry)

    def _merged(self, entry: AuditEntry) -> AuditEntry:
        copies = self._copies.get(self._control_ids.get(entry.position, ""))
        if not copies:
            return entry
        ended = list(entry.ended)
        asked = dict(entry.asked_to_stop)
        for copy in copies:
            ended.extend(copy.ended)
            asked.update(copy.asked_to_stop)
        return attrs.evolve(entry, ended=ended, asked_to_stop=asked)
