"""Giving an operator control: who may, what is written, and what a refusal leaves behind.

Every control goes through ``give_control``, the runtime's and the console's alike: the
operator authorizer decides whether the principal holds the role; a principal it does not
accept is refused, and the attempt is written to the log (``ControlRefused``) so that the audit
shows it; an operator must say why. A control given is one event on its control stream; the
call actors of whichever runtimes own the log hear it there and end the calls it concerns.
"""

from __future__ import annotations

from ..events import ControlRefused, OperatorControl, RefusedError, control_stream
from ..log import Log, NewEvent
from ..projections._controls import target_of
from ._boundary import OperatorAuthorizer


async def give_control(log: Log, event: OperatorControl, operators: OperatorAuthorizer) -> int:
    """Append the control if its operator holds the role and it has a reason; its position.

    ``RefusedError`` otherwise; a refusal of the role is recorded first, for the audit.
    """
    operator = event.operator
    stream = control_stream(event.tenant)
    if not operator or not operators(operator):
        refusal = ControlRefused(
            control=event.TAG,
            target=target_of(event)[1],
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
