"""Giving an operator control: who may, what is written, and what a refusal leaves behind.

Every control goes through ``give_control``, the runtime's and the console's alike: the
operator authorizer decides whether the principal holds the role; a principal it does not
accept is refused, and the attempt is written to the log (``ControlRefused``) so that the audit
shows it; an operator must say why. A control given is one event on its control stream; the
call actors of whichever runtimes own the log hear it there and end the calls it concerns.
"""

from __future__ import annotations

from ..events import (
    ControlRefused,
    OperatorControl,
    RefusedError,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    control_stream,
)
from ..log import Log, NewEvent
from ._boundary import OperatorAuthorizer

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


def control_target(event: OperatorControl) -> str:
    """What a control names: its response, its tool, or its tenant."""
    match event:
        case ResponseQuarantined(response=response):
            return response
        case ToolDisabled(tool=tool) | ToolEnabled(tool=tool):
            return tool
    return event.tenant or ""


async def give_control(log: Log, event: OperatorControl, operators: OperatorAuthorizer) -> int:
    """Append the control if its operator holds the role and it has a reason; its position.

    ``RefusedError`` otherwise; a refusal of the role is recorded first, for the audit.
    """
    operator = event.operator
    stream = control_stream(event.tenant)
    if not operator or not operators(operator):
        refusal = ControlRefused(
            control=event.TAG,
            target=control_target(event),
            tenant=event.tenant,
            operator=operator,
            reason=event.reason,
        )
        await log.append([NewEvent(stream=stream, event=refusal)])
        raise RefusedError(f"{operator!r} is not an operator: controls need the operator role")
    if not event.reason:
        raise RefusedError("a control needs a reason, for the audit")
    [position] = await log.append([NewEvent(stream=stream, event=event)])
    return position
