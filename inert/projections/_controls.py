"""What an operator control concerns, read before and after it is given: the calls it would end
and the running calls it would ask to stop (its preview), whether what it names was ever seen
on the log, whether it would change anything, and the controls in force.

The console and ``inert control`` ask the same questions here, of the ledger and the audit
they fold; the call actors decide what a control does (``inert.actors._scope``), and a preview
says what they will decide for the calls alive now: a call that arrives later is ended too,
unless the control has been lifted.

Pure: no trio, no storage.
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import frozen

from ..events import (
    TERMINAL_PHASES,
    OperatorControl,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    key_part,
)
from ._audit import Audit, AuditEntry
from ._rows import LedgerRow

ACTIONS = {
    "quarantine-response": "quarantine a response",
    "disable-tool": "disable a tool",
    "enable-tool": "enable a tool",
    "stop-tenant": "stop a tenant (emergency stop)",
    "resume-tenant": "resume a tenant",
}
"""The controls, by the names ``inert control`` and the console give them."""

TENANT_ACTIONS = frozenset({"stop-tenant", "resume-tenant"})
"""The controls whose target is a tenant (they take no other tenant)."""

_ACTION_OF_TAG = {
    ResponseQuarantined.TAG: "quarantine-response",
    ToolDisabled.TAG: "disable-tool",
    ToolEnabled.TAG: "enable-tool",
    TenantStopped.TAG: "stop-tenant",
    TenantResumed.TAG: "resume-tenant",
}


def control_event(
    action: str, target: str, *, tenant: str | None, operator: str, reason: str
) -> OperatorControl:
    """The control event of an action (one of ``ACTIONS``) on its target; ``tenant`` narrows a
    quarantine or a tool's control, and a tenant's own control names none besides its target."""
    match action:
        case "quarantine-response":
            return ResponseQuarantined(
                response=target, tenant=tenant, operator=operator, reason=reason
            )
        case "disable-tool":
            return ToolDisabled(tool=target, tenant=tenant, operator=operator, reason=reason)
        case "enable-tool":
            return ToolEnabled(tool=target, tenant=tenant, operator=operator, reason=reason)
        case "stop-tenant":
            return TenantStopped(tenant=target, operator=operator, reason=reason)
        case "resume-tenant":
            return TenantResumed(tenant=target, operator=operator, reason=reason)
    raise ValueError(f"no such control: {action!r}")


def concerns(event: OperatorControl, row: LedgerRow) -> bool:
    """Whether ``event`` names the call of ``row`` (its response, its tool or its tenant, in
    the control's tenant where it names one)."""
    match event:
        case ResponseQuarantined(response=response, tenant=tenant):
            return row.response == response and tenant in (None, row.tenant)
        case ToolDisabled(tool=tool, tenant=tenant) | ToolEnabled(tool=tool, tenant=tenant):
            return row.tool == tool and tenant in (None, row.tenant)
        case TenantStopped(tenant=tenant) | TenantResumed(tenant=tenant):
            return row.tenant == tenant
    return False


@frozen
class Preview:
    """What a stopping control does to the calls alive when it is given."""

    ending: tuple[LedgerRow, ...]
    """Calls collecting, waiting for a confirmation or ready: they end, never to run."""
    stopping: tuple[LedgerRow, ...]
    """Calls running: their executors are asked to stop, and report how the run ended."""

    @property
    def total(self) -> int:
        return len(self.ending) + len(self.stopping)


def preview(event: OperatorControl, rows: Iterable[LedgerRow]) -> Preview:
    """The calls among ``rows`` that ``event`` would end or ask to stop (none for a control
    that lifts another)."""
    if not event.STOPS:
        return Preview((), ())
    ending: list[LedgerRow] = []
    stopping: list[LedgerRow] = []
    for row in rows:
        if not concerns(event, row):
            continue
        if row.running:
            stopping.append(row)
        elif row.state not in TERMINAL_PHASES:
            ending.append(row)
    return Preview(tuple(ending), tuple(stopping))


def target_of(event: OperatorControl) -> tuple[str, str]:
    """What a control names, as a noun and the name: ``("tenant", "acme")``."""
    match event:
        case ResponseQuarantined(response=response):
            return "response", response
        case ToolDisabled(tool=tool) | ToolEnabled(tool=tool):
            return "tool", tool
    return "tenant", event.tenant or ""


def never_seen(event: OperatorControl, rows: Iterable[LedgerRow], audit: Audit) -> str | None:
    """Where nothing on the log (no call the ledger keeps, no control given before) names what
    ``event`` names, in its tenant where it names one, a sentence saying so: a mistyped target
    would otherwise be controlled without a word while the real one runs on."""
    noun, name = target_of(event)
    tenant = event.tenant
    for row in rows:
        if _names(row, noun, name) and (noun == "tenant" or tenant in (None, row.tenant)):
            return None
    for entry in audit.entries():
        if entry.scope.get(noun) == name:
            return None
    where = "" if noun == "tenant" or tenant is None else f" in tenant {key_part(tenant)!r}"
    return f"{noun} {key_part(name)!r} has never been seen on this log{where}"


def _names(row: LedgerRow, noun: str, name: str) -> bool:
    match noun:
        case "response":
            return row.response == name
        case "tool":
            return row.tool == name
    return row.tenant == name


def in_force(audit: Audit) -> list[AuditEntry]:
    """The controls that stop calls now, oldest first: every quarantine, each disabling of a
    tool not enabled since, each stop of a tenant not resumed since."""
    kept: dict[tuple[str, str, str | None], AuditEntry] = {}
    for entry in audit.entries():
        match entry.control:
            case ResponseQuarantined.TAG:
                kept[("response", entry.scope["response"] or "", entry.scope["tenant"])] = entry
            case ToolDisabled.TAG:
                kept[("tool", entry.scope["tool"] or "", entry.scope["tenant"])] = entry
            case ToolEnabled.TAG:
                kept.pop(("tool", entry.scope["tool"] or "", entry.scope["tenant"]), None)
            case TenantStopped.TAG:
                kept[("tenant", entry.scope["tenant"] or "", None)] = entry
            case TenantResumed.TAG:
                kept.pop(("tenant", entry.scope["tenant"] or "", None), None)
    return sorted(kept.values(), key=lambda entry: entry.position)


def without_effect(event: OperatorControl, audit: Audit) -> str | None:
    """Where ``event`` lifts a control that is not in force (resuming a tenant not stopped,
    enabling a tool not disabled), a sentence saying so."""
    match event:
        case TenantResumed(tenant=tenant):
            stopped = any(
                entry.control == TenantStopped.TAG and entry.scope["tenant"] == tenant
                for entry in in_force(audit)
            )
            return None if stopped else f"tenant {key_part(tenant)!r} is not stopped"
        case ToolEnabled(tool=tool, tenant=tenant):
            disabled = any(
                entry.control == ToolDisabled.TAG
                and entry.scope["tool"] == tool
                and entry.scope["tenant"] == tenant
                for entry in in_force(audit)
            )
            if disabled:
                return None
            where = "everywhere" if tenant is None else f"for tenant {key_part(tenant)!r}"
            return f"tool {key_part(tool)!r} is not disabled {where}"
    return None


def control_of(entry: AuditEntry) -> OperatorControl | None:
    """The control an audit entry records (``None`` for a refused one)."""
    action = _ACTION_OF_TAG.get(entry.control)
    if entry.refused or action is None:
        return None
    scope = entry.scope
    tenant = scope["tenant"]
    if action in TENANT_ACTIONS:
        return control_event(
            action, tenant or "", tenant=None, operator=entry.operator, reason=entry.reason
        )
    target = scope["response"] if action == "quarantine-response" else scope["tool"]
    return control_event(
        action, target or "", tenant=tenant, operator=entry.operator, reason=entry.reason
    )
