"""The audit: every operator control, who gave it, why, in what scope, and the calls it ended.

A control is recorded once, as the log holds it; the calls it ended are the ``cancelled``
decisions whose cause is the control's position (an actor cancels a call at the first input
that sees the control, which is the control itself for every call alive at that moment). The
running calls it asked to stop are the ``CallStopRequested`` decisions of that cause, each with
the outcome its executor reported once it did (``stop_requested`` until then): a running call
is never ended by a control, only asked to stop. A
control refused because its principal is no operator (``ControlRefused``) is kept apart, among
the refusals. Like
every projection it holds no argument value.

Unlike the other projections, the audit keeps what it holds when a turn is retired
(``TurnRetired``): an entry is the record of an operator's action, not the history of a call, and
the calls it lists are what that action ended, which stays true once their turn is forgotten. It
grows with what operators do, not with the calls the runtime sees.
"""

from __future__ import annotations

from attrs import define, field

from ..events import (
    CONTROL_TYPES,
    OUTCOME_TYPES,
    CallCancelled,
    CallKey,
    CallStopRequested,
    ControlRefused,
    Event,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionStopped,
    RecordedEvent,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
)
from ._digest import JSON, Snapshot, key_json
from ._routing import Handler, Routed

"""The operator controls the audit records."""

Control = ResponseQuarantined | ToolDisabled | ToolEnabled | TenantStopped | TenantResumed


@define
class AuditEntry:
    """One control as the audit shows it."""

    position: int
    control: str
    operator: str
    reason: str
    scope: dict[str, str | None]
    recorded_at: str
    ended: list[CallKey] = field(factory=list)
    refused: bool = False
    """The principal was no operator: the control was not given."""
    asked_to_stop: dict[CallKey, str] = field(factory=dict)
    """The running calls the control asked to stop, each with the outcome its executor
    reported (``completed``, ``failed``, ``stopped``, ``unknown``), or ``stop_requested``
    until it does."""

    def to_json(self) -> dict[str, JSON]:
        """The entry as the audit shows it: ``digest_json`` and the running calls it asked to
        stop, with their outcomes."""
        return self.digest_json() | {
            "asked_to_stop": [
                key_json(key) | {"outcome": outcome} for key, outcome in self.asked_to_stop.items()
            ]
        }

    def digest_json(self) -> dict[str, JSON]:
        """What the projections' digest holds of the entry. The stops it asked for are left
        out: the ledger's rows hold them and their outcomes already, and logs written before
        the audit counted them keep their digests."""
        shown: dict[str, JSON] = {"refused": True} if self.refused else {}
        return shown | {
            "position": self.position,
            "control": self.control,
            "operator": self.operator,
            "reason": self.reason,
            "scope": dict(self.scope),
            "recorded_at": self.recorded_at,
            "ended": [key_json(key) for key in self.ended],
        }


def _scope(event: Event) -> dict[str, str | None]:
    match event:
        case ResponseQuarantined(response=response, tenant=tenant):
            return {"response": response, "tenant": tenant}
        case ToolDisabled(tool=tool, tenant=tenant) | ToolEnabled(tool=tool, tenant=tenant):
            return {"tool": tool, "tenant": tenant}
        case TenantStopped(tenant=tenant) | TenantResumed(tenant=tenant):
            return {"tenant": tenant}
    raise AssertionError(f"not a control: {type(event).__name__}")


_SCOPE_NAMES = {
    ResponseQuarantined.TAG: ("response", "tenant"),
    ToolDisabled.TAG: ("tool", "tenant"),
    ToolEnabled.TAG: ("tool", "tenant"),
}
"""The scope a refused control names, by the control asked for (a tenant's own otherwise)."""


class Audit(Routed):
    """Every control in log order, with the call keys each ended."""

    __slots__ = ("_entries", "_refusals", "_stopping")

    def __init__(self) -> None:
        super().__init__()
        self._entries: dict[int, AuditEntry] = {}
        self._refusals: list[AuditEntry] = []
        # Calls a control asked to stop whose executor has not reported: the control's
        # position, by call.
        self._stopping: dict[CallKey, int] = {}

    def entries(self) -> list[AuditEntry]:
        """The controls in the order the log holds them."""
        return list(self._entries.values())

    def refusals(self) -> list[AuditEntry]:
        """The controls refused to principals that are no operators, in log order."""
        return list(self._refusals)

    def snapshot(self) -> Snapshot:
        snapshot: Snapshot = {
            "position": self._position,
            "controls": [entry.digest_json() for entry in self._entries.values()],
        }
        # Only where there are some: the digest of a log without refusals stays what it was.
        if self._refusals:
            snapshot["refused"] = [entry.digest_json() for entry in self._refusals]
        return snapshot

    # --- folding ---------------------------------------------------------------------------

    def _handlers(self, kind: type[Event], redacted: bool) -> tuple[Handler, ...]:
        # A control or a cancellation is recorded as the log holds it: never from what
        # retention left of a payload.
        if redacted:
            return ()
        if issubclass(kind, CONTROL_TYPES):
            return (self._control,)
        if issubclass(kind, ControlRefused):
            return (self._refused,)
        if issubclass(kind, CallCancelled):
            return (self._cancelled,)
        if issubclass(kind, CallStopRequested):
            return (self._stop_requested,)
        if issubclass(kind, OUTCOME_TYPES):
            return (self._outcome,)
        return ()

    def _control(self, recorded: RecordedEvent, event: Control) -> None:
        self._entries[recorded.position] = AuditEntry(
            position=recorded.position,
            control=event.TAG,
            operator=event.operator,
            reason=event.reason,
            scope=_scope(event),
            recorded_at=recorded.recorded_at.isoformat(),
        )

    def _refused(self, recorded: RecordedEvent, event: ControlRefused) -> None:
        scope = {"response": event.target, "tool": event.target, "tenant": event.tenant}
        kept = _SCOPE_NAMES.get(event.control, ("tenant",))
        self._refusals.append(
            AuditEntry(
                position=recorded.position,
                control=event.control,
                operator=event.operator,
                reason=event.reason,
                scope={name: scope[name] for name in kept},
                recorded_at=recorded.recorded_at.isoformat(),
                refused=True,
            )
        )

    def _cancelled(self, recorded: RecordedEvent, event: CallCancelled) -> None:
        entry = self._entries.get(event.cause)
        if entry is not None:
            entry.ended.append(event.key)

    def _stop_requested(self, recorded: RecordedEvent, event: CallStopRequested) -> None:
        entry = self._entries.get(event.cause)
        if entry is not None:
            entry.asked_to_stop[event.key] = "stop_requested"
            self._stopping[event.key] = event.cause

    def _outcome(self, recorded: RecordedEvent, event: Event) -> None:
        key = getattr(event, "key", None)
        if not isinstance(key, CallKey):
            return
        position = self._stopping.pop(key, None)
        entry = None if position is None else self._entries.get(position)
        if entry is not None:
            entry.asked_to_stop[key] = _OUTCOMES.get(type(event), "unknown")


_OUTCOMES: dict[type[Event], str] = {
    ExecutionCompleted: "completed",
    ExecutionFailed: "failed",
    ExecutionStopped: "stopped",
}
"""The outcome an executor's report names (any other report: ``unknown``)."""
