"""Pure folds of the log: the ledger, the dispatch queue, the status, and their state digest.

Each projection folds recorded events in position order into a state it can describe as plain
JSON; none of them does I/O, imports trio or holds an argument value. ``Projections`` feeds one
of each from the same records, so that a runtime keeps them at one position and proves their
state with one digest.

A runtime lives long and sees calls without end, some of them made up by whoever feeds a stream,
so no projection may keep something for every call it ever saw. When a turn is retired
(``TurnRetired``, written once the turn has had no live call for the horizon), each projection
forgets the turn and every call of it that is not live in its own view, at a cost of the calls
of that turn; a live call is kept as it is. The ledger also ages finished calls out after its
horizon; the audit, a record of operator actions, keeps its entries.
"""

from datetime import timedelta

from ..events import Event, RecordedEvent
from ._audit import Audit, AuditEntry
from ._controls import Preview, concerns, in_force, never_seen, preview, without_effect
from ._digest import JSON, Projection, Snapshot, digest_json, state_digest
from ._dispatch import DispatchQueue
from ._ledger import DEFAULT_LEDGER_HORIZON, Ledger
from ._routing import Handler, Routed, Routes
from ._rows import LedgerRow, Transition
from ._status import Status, StatusCue

_PARTS = frozenset({"audit", "ledger", "queue", "status"})


class Projections(Routed):
    """One ledger, one dispatch queue, one status and one audit, fed the same records."""

    __slots__ = ("_routes", "audit", "ledger", "queue", "status")

    _routes: Routes

    def __init__(self, *, ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON) -> None:
        self.ledger = Ledger(horizon=ledger_horizon)
        self.queue = DispatchQueue()
        self.status = Status()
        self.audit = Audit()

    def __setattr__(self, name: str, value: object) -> None:
        super().__setattr__(name, value)
        if name in _PARTS:
            # The routes hold the handlers of the projections they were chosen for.
            super().__setattr__("_routes", Routes(self._handlers))

    @property
    def position(self) -> int:
        """The position of the last record applied (0 before any)."""
        # They are fed together; should one ever lag, resuming from the lowest loses nothing.
        return min(
            self.ledger.position, self.queue.position, self.status.position, self.audit.position
        )

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event into every projection."""
        ledger, queue, status, audit = self.ledger, self.queue, self.status, self.audit
        position = recorded.position
        in_step = ledger._position == queue._position == status._position == audit._position
        if position <= ledger._position or not in_step:
            # Folded already, or one of them was fed on its own: each judges for itself.
            ledger.apply(recorded)
            queue.apply(recorded)
            status.apply(recorded)
            audit.apply(recorded)
            return
        # What each one's apply does, once for all four: the handlers of all of them that the
        # event's class can concern, found with one lookup.
        ledger._position = queue._position = status._position = audit._position = position
        due = ledger._due
        if due is not None and due < recorded.recorded_at:
            ledger._age_out(recorded.recorded_at)
        event = recorded.event
        for handler in self._routes[type(event)]:
            handler(recorded, event)

    def digest(self) -> str:
        """The state digest of the projections together."""
        return state_digest(self.ledger, self.queue, self.status, self.audit)

    def _handlers(self, kind: type[Event], redacted: bool) -> tuple[Handler, ...]:
        # In the order each was applied on its own.
        return (
            *self.ledger._handlers(kind, redacted),
            *self.queue._handlers(kind, redacted),
            *self.status._handlers(kind, redacted),
            *self.audit._handlers(kind, redacted),
        )


__all__ = [
    "DEFAULT_LEDGER_HORIZON",
    "JSON",
    "Audit",
    "AuditEntry",
    "DispatchQueue",
    "Ledger",
    "LedgerRow",
    "Preview",
    "Projection",
    "Projections",
    "Snapshot",
    "Status",
    "StatusCue",
    "Transition",
    "concerns",
    "digest_json",
    "in_force",
    "never_seen",
    "preview",
    "state_digest",
    "without_effect",
]
