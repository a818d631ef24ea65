"""What crosses the boundary to an executor and to a person: the calls that are ready, the
dispatch a claim returns, the confirmation a call asks for, and who may give operator controls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Protocol

import trio
from attrs import field, frozen

from ..actors._places import is_identifier
from ..events import (
    CallKey,
    CancelReason,
    TraceContext,
    TurnRef,
)


class StopSignal:
    """Whether the executor of a dispatched call has been asked to stop running it, and why.

    The runtime sets it when the call's ``CallStopRequested`` is in the log (its turn was
    cancelled or superseded, its response quarantined, its tool disabled or its tenant stopped
    while it ran). An executor may poll ``requested``, await ``wait()`` (under Trio), or run
    inside ``scope()``, a Trio cancel scope cancelled by the request. Stopping is the
    executor's to do: the call is never run again either way, and the outcome it reports
    (``complete``, ``fail`` or ``stopped``) says how its run ended.
    """

    __slots__ = ("_reason", "_requested", "_scopes")

    def __init__(self) -> None:
        self._reason: CancelReason | None = None
        self._requested = trio.Event()
        self._scopes: list[trio.CancelScope] = []

    @property
    def requested(self) -> bool:
        """Whether a stop was requested."""
        return self._reason is not None

    @property
    def reason(self) -> CancelReason | None:
        """Why a stop was requested (``None`` while none was)."""
        return self._reason

    async def wait(self) -> CancelReason:
        """Until a stop is requested (under Trio); why it was."""
        await self._requested.wait()
        assert self._reason is not None
        return self._reason

    @contextmanager
    def scope(self) -> Iterator[trio.CancelScope]:
        """A Trio cancel scope that a stop request cancels (at once if one came already): run
        the work inside it, and check ``cancelled_caught`` afterwards."""
        scope = trio.CancelScope()
        if self._reason is not None:
            scope.cancel()
        self._scopes.append(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.remove(scope)

    def request(self, reason: CancelReason) -> None:
        """Ask for the stop (the runtime's to call; a second request changes nothing)."""
        if self._reason is not None:
            return
        self._reason = reason
        self._requested.set()
        for scope in self._scopes:
            scope.cancel()

    def __repr__(self) -> str:
        return f"StopSignal(reason={self._reason!r})"


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
    stop: StopSignal = field(factory=StopSignal, eq=False)
    """Set when the executor is asked to stop the run (see [`StopSignal`][inert.StopSignal])."""


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

    async def stopped(self, dispatch: Dispatch) -> None: ...


Stoppable = Callable[[Dispatch, Executor], Awaitable[bool]]
"""Runs an executor on a dispatch until it returns or a stop request ends it: whether the stop
did."""


async def run_under_trio(dispatch: Dispatch, executor: Executor) -> bool:
    """Run the executor inside its dispatch's stop scope."""
    with dispatch.stop.scope() as scope:
        await executor(dispatch)
    return scope.cancelled_caught


async def execute_with(
    runtime: _Claims,
    call: CallKey | ReadyCall,
    executor: Executor,
    *,
    name: str,
    run: Stoppable = run_under_trio,
) -> Dispatch:
    """Claim a call, run ``executor`` on it until it returns or a stop request ends it, and
    record its outcome: completed, stopped, or a failure by the name of the error's type only
    (its message may hold argument values)."""
    dispatch = await runtime.claim(call, executor=name)
    try:
        stopped = await run(dispatch, executor)
    except Exception as error:
        name = type(error).__name__
        # A class name is an identifier of Python's, not always of the log's (ASCII, 64 long).
        await runtime.fail(dispatch, name if is_identifier(name) else "Exception")
        raise
    if stopped:
        await runtime.stopped(dispatch)
    else:
        await runtime.complete(dispatch)
    return dispatch
