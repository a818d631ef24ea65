"""What crosses the boundary to an executor and to a person: the calls that are ready, the
dispatch a claim returns, the confirmation a call asks for, and who may give operator controls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, Protocol

from attrs import frozen

from ..events import (
    CallKey,
    TraceContext,
    TurnRef,
)


@frozen(kw_only=True)
class Dispatch:
    """What an executor receives: one claimed call, complete and immutable.

    ``key`` doubles as the idempotency key of the action; ``arguments`` are the parsed,
    validated arguments, read back from the log, as a read-only mapping.
    """

    key: CallKey
    turn: TurnRef
    tenant: str
    principal: str
    tool: str
    tool_digest: str
    arguments: Mapping[str, Any]
    arguments_digest: str
    claim_id: str
    executor: str
    trace: TraceContext | None = None


Executor = Callable[[Dispatch], Awaitable[object]]


@frozen(kw_only=True)
class ReadyCall:
    """A call an executor may claim: who asked for what, without the arguments themselves.

    The arguments come only with the ``Dispatch`` a successful claim returns.
    """

    key: CallKey
    turn: TurnRef
    tenant: str
    principal: str
    tool: str
    arguments_digest: str


@frozen(kw_only=True)
class PendingConfirmation:
    """What the person is asked to confirm: the call, the tool, the validated arguments (a
    read-only mapping, to show them; inert never logs them) and their exact digest."""

    key: CallKey
    principal: str
    tool: str
    tool_digest: str
    arguments: Mapping[str, Any]
    arguments_digest: str
    expires_at: datetime


OperatorAuthorizer = Callable[[str], bool]
"""Whether an operator principal holds the operator role (the operators' own authentication is
the embedding server's; this decides what an authenticated principal may do)."""


class _Claims(Protocol):
    """What running an executor on a call needs of a runtime (the Trio one or its facade)."""

    async def claim(self, call: CallKey | ReadyCall, *, executor: str) -> Dispatch: ...

    async def complete(self, dispatch: Dispatch) -> None: ...

    async def fail(self, dispatch: Dispatch, error: str = "") -> None: ...


async def execute_with(
    runtime: _Claims, call: CallKey | ReadyCall, executor: Executor, *, name: str
) -> Dispatch:
    """Claim a call, run ``executor`` on it and record its outcome: a failure by the name of
    the error's type only (its message may hold argument values)."""
    dispatch = await runtime.claim(call, executor=name)
    try:
        await executor(dispatch)
    except Exception as error:
        await runtime.fail(dispatch, type(error).__name__)
        raise
    await runtime.complete(dispatch)
    return dispatch
