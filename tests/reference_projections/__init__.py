"""The reference projections: ``inert/projections`` as it was before the fast path, the oracle.

A verbatim copy of the package (only its imports of ``inert.events`` made absolute; the state
digest, which the fast path did not change, is the package's own), folding
each projection on its own with ``isinstance`` chains and frozen rows evolved per event. Turn
retirement (``TurnRetired``) is written in the same plain style: each projection scans all it
holds for the calls of the retired turn, where the package finds them filed by turn.
``test_projections_differential`` feeds every golden log and simulator seeds through it and
through ``inert.projections.Projections`` and requires the same ledger, queue, status, audit
and digest.

Its own words: pure folds of the log, the ledger, the dispatch queue, the status, and their
state digest. Each projection folds recorded events in position order into a state it can
describe as plain JSON; none of them does I/O, imports trio or holds an argument value.
``Projections`` feeds one of each from the same records, so that a runtime keeps them at one
position and proves their state with one digest.
"""

from datetime import timedelta

from inert.events import RecordedEvent
from inert.projections._digest import JSON, Projection, Snapshot, digest_json, state_digest

from ._audit import CONTROL_TYPES, Audit, AuditEntry
from ._dispatch import DispatchQueue
from ._ledger import DEFAULT_LEDGER_HORIZON, Ledger, LedgerRow, Transition
from ._status import Status, StatusCue


class Projections:
    """One ledger, one dispatch queue, one status and one audit, fed the same records."""

    __slots__ = ("audit", "ledger", "queue", "status")

    def __init__(self, *, ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON) -> None:
        self.ledger = Ledger(horizon=ledger_horizon)
        self.queue = DispatchQueue()
        self.status = Status()
        self.audit = Audit()

    @property
    def position(self) -> int:
        """The position of the last record applied (0 before any)."""
        # They are fed together; should one ever lag, resuming from the lowest loses nothing.
        return min(
            self.ledger.position, self.queue.position, self.status.position, self.audit.position
        )

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event into every projection."""
        self.ledger.apply(recorded)
        self.queue.apply(recorded)
        self.status.apply(recorded)
        self.audit.apply(recorded)

    def digest(self) -> str:
        """The state digest of the projections together."""
        return state_digest(self.ledger, self.queue, self.status, self.audit)


__all__ = [
    "CONTROL_TYPES",
    "DEFAULT_LEDGER_HORIZON",
    "JSON",
    "Audit",
    "AuditEntry",
    "DispatchQueue",
    "Ledger",
    "LedgerRow",
    "Projection",
    "Projections",
    "Snapshot",
    "Status",
    "StatusCue",
    "Transition",
    "digest_json",
    "state_digest",
]
