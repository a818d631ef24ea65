"""inert inside an asyncio application: the Trio runtime runs as a guest of asyncio's loop.

``open_asyncio_runtime`` starts Trio in guest mode (``trio.lowlevel.start_guest_run``) on the
running asyncio loop, opens the runtime there, and hands back ``AsyncioRuntime``: every
operation of the Trio ``Runtime`` under the same name, with the same parameters and types, as
asyncio coroutines (async iterators where the runtime gives async iterators). The facade is made
from the runtime's own methods rather than written beside them, so the two cannot drift apart;
a test compares them. Both run on the loop's thread: nothing is shared across threads, what the
facade reads (the ledger, a call's phase) it reads directly between two steps of Trio, and the
runtime's guarantees are the Trio runtime's own. How an operation crosses is
:mod:`inert.runtime._guest`'s.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import trio
from outcome import Outcome

from ..actors import CallLimits, ToolRegistry
from ..events import CallKey, InertError
from ..log import Log
from ..projections import Ledger, Projections
from ..tracing import CallSpans
from ._boundary import Dispatch, Executor, OperatorAuthorizer, ReadyCall, execute_with
from ._guest import GuestCrossing
from ._open import open_runtime
from ._peers import Peers
from ._runtime import Runtime

P = ParamSpec("P")
T = TypeVar("T")
Item = TypeVar("Item")


def _in_trio(
    method: Callable[Concatenate[Runtime, P], Awaitable[T]],
) -> Callable[Concatenate[AsyncioRuntime, P], Coroutine[Any, Any, T]]:
    """The runtime's coroutine method, run inside Trio for an asyncio caller."""

    @functools.wraps(method)
    async def crossing(self: AsyncioRuntime, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._crossing.call(functools.partial(method, self._runtime, *args, **kwargs))

    return crossing


def _iterated_in_trio(
    method: Callable[Concatenate[Runtime, P], AsyncIterator[Item]],
) -> Callable[Concatenate[AsyncioRuntime, P], AsyncioIterator[Item]]:
    """The runtime's async iterator, each step taken inside Trio for an asyncio caller."""

    @functools.wraps(method)
    def iterating(
        self: AsyncioRuntime, /, *args: P.args, **kwargs: P.kwargs
    ) -> AsyncioIterator[Item]:
        return AsyncioIterator(self._crossing, method(self._runtime, *args, **kwargs))

    return iterating


def _read(
    method: Callable[Concatenate[Runtime, P], T],
) -> Callable[Concatenate[AsyncioRuntime, P], T]:
    """The runtime's view, read directly: asyncio code runs only between two steps of Trio."""

    @functools.wraps(method)
    def reading(self: AsyncioRuntime, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return method(self._runtime, *args, **kwargs)

    return reading


class AsyncioIterator(Generic[Item]):
    """An async iterator of the Trio runtime, for asyncio: each step is taken inside Trio, and
    cancelling the task that waits for one cancels the wait."""

    def __init__(self, crossing: GuestCrossing, iterator: AsyncIterator[Item]) -> None:
        self._crossing = crossing
        self._iterator = iterator

    def __aiter__(self) -> AsyncioIterator[Item]:
        return self

    async def __anext__(self) -> Item:
        return await self._crossing.call(self._iterator.__anext__)


class AsyncioRuntime:
    """The runtime's operations for asyncio code; open one with :func:`open_asyncio_runtime`.

    Every operation of :class:`Runtime` is here under its name, with its parameters and its
    documentation: coroutines run inside Trio and return (or raise) what the runtime does,
    views are read directly. Cancelling the asyncio task that awaits an operation cancels the
    operation.
    """

    def __init__(self, runtime: Runtime, crossing: GuestCrossing) -> None:
        self._runtime = runtime
        self._crossing = crossing

    # --- turns, ingress, confirmation, operator controls: inside Trio ---

    start_turn = _in_trio(Runtime.start_turn)
    cancel_turn = _in_trio(Runtime.cancel_turn)
    feed = _in_trio(Runtime.feed)
    quarantine_response = _in_trio(Runtime.quarantine_response)
    disable_tool = _in_trio(Runtime.disable_tool)
    enable_tool = _in_trio(Runtime.enable_tool)
    stop_tenant = _in_trio(Runtime.stop_tenant)
    resume_tenant = _in_trio(Runtime.resume_tenant)
    confirm = _in_trio(Runtime.confirm)
    pending_confirmation = _in_trio(Runtime.pending_confirmation)
    deny = _in_trio(Runtime.deny)
    claim = _in_trio(Runtime.claim)
    complete = _in_trio(Runtime.complete)
    fail = _in_trio(Runtime.fail)
    stopped = _in_trio(Runtime.stopped)
    wait_for_stop = _in_trio(Runtime.wait_for_stop)
    settle = _in_trio(Runtime.settle)
    ready_calls = _iterated_in_trio(Runtime.ready_calls)
    changes = _iterated_in_trio(Runtime.changes)

    async def execute(
        self, call: CallKey | ReadyCall, executor: Executor, *, name: str
    ) -> Dispatch:
        """Claim a call, run ``executor`` on it (an asyncio coroutine function, run here, in
        asyncio, as a task that a stop request cancels) and record its outcome."""
        return await execute_with(self, call, executor, name=name, run=self._run_stoppable)

    async def _run_stoppable(self, dispatch: Dispatch, executor: Executor) -> bool:
        """Run the executor as an asyncio task, cancelled if a stop is requested first: whether
        the stop ended it."""
        task = asyncio.ensure_future(executor(dispatch))
        stop = asyncio.ensure_future(self.wait_for_stop(dispatch))
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise
                    return True
            await task
            return False
        finally:
            for pending in (task, stop):
                pending.cancel()

    # --- views: read directly ---

    digest = _read(Runtime.digest)
    phase = _read(Runtime.phase)
    ready_call = _read(Runtime.ready_call)
    turn_owner = _read(Runtime.turn_owner)
    turn_principal = _read(Runtime.turn_principal)
    resumable_streams = _read(Runtime.resumable_streams)
    resumable_calls = _read(Runtime.resumable_calls)

    @property
    def ledger(self) -> Ledger:
        """The assembly ledger: per call key its latest row and its history."""
        return self._runtime.ledger

    @property
    def projections(self) -> Projections:
        """The ledger, the dispatch queue, the status and the audit, as the log has them."""
        return self._runtime.projections

    @property
    def log(self) -> Log:
        """The log the runtime works on."""
        return self._runtime.log

    @property
    def tools(self) -> ToolRegistry:
        """The tool declarations the runtime knows."""
        return self._runtime.tools

    @property
    def limits(self) -> CallLimits:
        """The limits of live calls."""
        return self._runtime.limits

    @property
    def process(self) -> str | None:
        """The name of this runtime process, where several share the log."""
        return self._runtime.process

    @property
    def peers(self) -> Peers | None:
        """The other processes sharing the log, as this one sees them."""
        return self._runtime.peers

    @property
    def spans(self) -> CallSpans | None:
        """The OpenTelemetry spans of the runtime's turns and calls (``None``: no tracing)."""
        return self._runtime.spans

    @property
    def operators(self) -> OperatorAuthorizer:
        """Who holds the operator role."""
        return self._runtime.operators

    @property
    def request_timeout(self) -> float:
        """Seconds a request waits for its call's actor to answer."""
        return self._runtime.request_timeout

    @property
    def restored_from(self) -> int | None:
        """The position of the snapshot the runtime started from (``None``: the whole log)."""
        return self._runtime.restored_from

    @property
    def snapshot_refusal(self) -> str | None:
        """Why the snapshot found at the start was not used, if one was found and refused."""
        return self._runtime.snapshot_refusal

    async def ready(self) -> list[ReadyCall]:
        """The calls ready to be claimed now (``ready_calls`` waits for new ones as well)."""

        async def ready_now() -> list[ReadyCall]:
            await self._runtime.settle()
            found = [
                self._runtime.ready_call(key) for key in self._runtime.projections.queue.ready()
            ]
            return [call for call in found if call is not None]

        return await self._crossing.call(ready_now)


@asynccontextmanager
async def _open_guest(
    opening: Callable[[], AbstractAsyncContextManager[Runtime]],
) -> AsyncIterator[AsyncioRuntime]:
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[tuple[Runtime, GuestCrossing]] = loop.create_future()
    finished: asyncio.Future[Outcome[None]] = loop.create_future()
    stop = trio.Event()

    async def host() -> None:
        async with opening() as runtime, trio.open_nursery() as nursery:
            crossing = GuestCrossing(loop, nursery)
            if not opened.done():
                opened.set_result((runtime, crossing))
            try:
                await stop.wait()
            finally:
                # However the run ends (a stop, or the runtime failing under it), no operation
                # is left waiting for an answer that cannot come.
                crossing.close()
            nursery.cancel_scope.cancel()

    def done(outcome: Outcome[None]) -> None:
        if not finished.done():
            finished.set_result(outcome)
        if not opened.done():
            opened.set_exception(InertError("the runtime stopped before it opened"))

    trio.lowlevel.start_guest_run(
        host,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        # Trio's consecutive steps are scheduled from the loop's own thread: no need to wake
        # the loop through its self-pipe for each of them.
        run_sync_soon_not_threadsafe=loop.call_soon,
        done_callback=done,
        host_uses_signal_set_wakeup_fd=True,
    )
    try:
        runtime, crossing = await opened
    except BaseException:
        (await finished).unwrap()
        raise
    try:
        yield AsyncioRuntime(runtime, crossing)
    finally:
        crossing.call_soon(stop.set)
        (await finished).unwrap()


def _opened_under_asyncio(
    opener: Callable[P, AbstractAsyncContextManager[Runtime]],
) -> Callable[P, AbstractAsyncContextManager[AsyncioRuntime]]:
    def open_asyncio_runtime(
        *args: P.args, **kwargs: P.kwargs
    ) -> AbstractAsyncContextManager[AsyncioRuntime]:
        """``open_runtime(...)`` for an asyncio application, with the same parameters: use it
        as ``async with open_asyncio_runtime(log=..., tools=...) as runtime`` under a running
        loop; ``runtime`` is an :class:`AsyncioRuntime`, and it stops when the block ends."""
        return _open_guest(lambda: opener(*args, **kwargs))

    # Its parameters are the opener's, to the letter: ``inspect.signature`` follows this.
    open_asyncio_runtime.__wrapped__ = opener  # type: ignore[attr-defined]
    return open_asyncio_runtime


open_asyncio_runtime = _opened_under_asyncio(open_runtime)
"""``open_runtime(...)`` for an asyncio application, with the same parameters: use it as
``async with open_asyncio_runtime(log=..., tools=...) as runtime`` under a running loop, and
``runtime`` is an :class:`AsyncioRuntime`. The runtime stops when the block ends."""
