"""The audit: every operator control, who gave it, why, in what scope, and the calls it ended.

A control is recorded once, as the log holds it; the calls it ended are the ``cancelled``
decisions whose cause is the control's position (an actor cancels a call at the first input
that sees the control, which is the control itself for every call alive at that moment). Like
every projection it holds no argument value. A control refused to a principal that is no
operator (``ControlRefused``) is kept apart, among the refusals. A retired turn changes nothing
here: an entry is the record of an operator's action, not the history of a call.
"""

from __future__ import annotations

from attrs import define, field

from inert.events import (
    CallCancelled,
    CallKey,
    CallStopRequested,
    ControlRefused,
    Event,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    RecordedEvent,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
)
from inert.projections._digest import JSON, Snapshot, key_json

CONTROL_TYPES = (ResponseQuarantined, ToolDisabled, ToolEnabled, TenantStopped, TenantResumed)
"""The operator controls the audit records."""

OUTCOMES: dict[type[Event], str] = {
    ExecutionCompleted: "completed",
    ExecutionFailed: "failed",
    ExecutionStopped: "stopped",
    ExecutionOutcomeUnknown: "unknown",
}
"""What each executor report names as the outcome of a call asked to stop."""


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
    asked_to_stop: dict[CallKey, str] = field(factory=dict)

    def to_json(self) -> dict[str, JSON]:
        marked: dict[str, JSON] = {"refused": True} if self.refused else {}
        return marked | {
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


class Audit:
    """Every control in log order, with the call keys each ended."""

    __slots__ = ("_entries", "_position", "_refusals")

    def __init__(self) -> None:
        self._position = 0
        self._entries: dict[int, AuditEntry] = {}
        self._refusals: list[AuditEntry] = []

    @property
    def position(self) -> int:
        return self._position

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event; a record at or before ``position`` was folded already."""
        if recorded.position <= self._position:
            return
        self._position = recorded.position
        event = recorded.event
        if isinstance(event, CONTROL_TYPES):
            self._entries[recorded.position] = AuditEntry(
                position=recorded.position,
                control=event.TAG,
                operator=event.operator,
                reason=event.reason,
                scope=_scope(event),
                recorded_at=recorded.recorded_at.isoformat(),
            )
        elif isinstance(event, ControlRefused):
            if event.control == ResponseQuarantined.TAG:
                scope = {"response": event.target, "tenant": event.tenant}
            elif event.control in (ToolDisabled.TAG, ToolEnabled.TAG):
                scope = {"tool": event.target, "tenant": event.tenant}
            else:
                scope = {"tenant": event.tenant}
            self._refusals.append(
                AuditEntry(
                    position=recorded.position,
                    control=event.control,
                    operator=event.operator,
                    reason=event.reason,
                    scope=scope,
                    recorded_at=recorded.recorded_at.isoformat(),
                    refused=True,
                )
            )
        elif isinstance(event, CallCancelled):
            entry = self._entries.get(event.cause)
            if entry is not None:
                entry.ended.append(event.key)
        elif isinstance(event, CallStopRequested):
            entry = self._entries.get(event.cause)
            if entry is not None:
                entry.asked_to_stop[event.key] = "stop_requested"
        elif isinstance(
            event,
            ExecutionCompleted | ExecutionFailed | ExecutionStopped | ExecutionOutcomeUnknown,
        ):
            # The executor's report answers the control that asked the call to stop.
            for entry in self._entries.values():
                if entry.asked_to_stop.get(event.key) == "stop_requested":
                    entry.asked_to_stop[event.key] = OUTCOMES[type(event)]

    def entries(self) -> list[AuditEntry]:
        """The controls in the order the log holds them."""
        return list(self._entries.values())

    def refusals(self) -> list[AuditEntry]:
        """The controls refused to principals that are no operators, in log order."""
        return list(self._refusals)

    def snapshot(self) -> Snapshot:
        snapshot: Snapshot = {
            "position": self._position,
            "controls": [entry.to_json() for entry in self._entries.values()],
        }
        if self._refusals:
            snapshot["refused"] = [entry.to_json() for entry in self._refusals]
        return snapshot
