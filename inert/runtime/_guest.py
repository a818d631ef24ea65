"""The crossing between an asyncio loop and the Trio run that is its guest.

Trio runs in guest mode (``trio.lowlevel.start_guest_run``) on the asyncio loop's own thread:
between two steps of Trio, asyncio code runs, and the other way round; nothing is ever shared
across threads. An asyncio coroutine hands Trio an operation and awaits its answer:

- Requests are batched: a coroutine puts its operation in a queue and wakes Trio only if no
  wake-up is on its way already; Trio starts every queued operation at once when it wakes. A
  wake-up costs a write to Trio's wake-up socket and a turn of the guest's I/O thread, which a
  burst of requests then pays once, not once each.
- Answers need no hop back: Trio's steps run inside a callback of the asyncio loop, on its
  thread, so an operation that ends sets its asyncio future there and then.
- An asyncio task cancelled while it waits cancels its operation in Trio (a cancel scope per
  operation) and waits until Trio has stopped it, so that nothing of it runs after the
  cancellation reached the caller. An operation that had finished already keeps its effect.
- An error of the operation reaches the coroutine as it was raised, an ``InertError`` as
  itself; a Trio cancellation of the whole run (the runtime closing) as ``RuntimeClosed``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from ..events import RuntimeClosed

T = TypeVar("T")


class _Operation:
    """One operation asked from asyncio, on its way through Trio."""

    __slots__ = ("cancelled", "finished", "future", "scope", "stopped", "work")

    def __init__(self, work: Callable[[], Awaitable[Any]], future: asyncio.Future[Any]) -> None:
        self.work = work
        self.future = future
        self.scope: trio.CancelScope | None = None
        self.cancelled = False
        self.finished = False
        # Made only for an operation whose caller was cancelled: it waits on it for Trio.
        self.stopped: asyncio.Future[None] | None = None


class GuestCrossing:
    """Hands operations from asyncio coroutines to the Trio run and their answers back.

    Made inside the Trio run, with the nursery the operations run in; ``close`` refuses what
    comes after.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, nursery: trio.Nursery) -> None:
        self._loop = loop
        self._nursery = nursery
        self._token = trio.lowlevel.current_trio_token()
        self._queue: deque[_Operation] = deque()
        self._waking = False
        self._closed = False

    async def call(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` in the Trio run and return (or raise) what it does, from asyncio."""
        if self._closed:
            raise RuntimeClosed("the asyncio runtime is closed")
        if not self._waking:
            try:
                self._token.run_sync_soon(self._start_queued)
            except trio.RunFinishedError:
                self.close()
                raise RuntimeClosed("the asyncio runtime closed") from None
            self._waking = True
        operation = _Operation(work, self._loop.create_future())
        self._queue.append(operation)
        try:
            return await operation.future  # type: ignore[no-any-return]
        except asyncio.CancelledError:
            if not operation.finished:
                await self._stop(operation)
            raise

    async def _stop(self, operation: _Operation) -> None:
        stopped = operation.stopped = self._loop.create_future()
        operation.cancelled = True
        self._token.run_sync_soon(self._cancel_in_trio, operation)
        # Until Trio stopped it, however often the waiting task is cancelled again meanwhile.
        while not stopped.done():
            try:
                await asyncio.shield(stopped)
            except asyncio.CancelledError:
                continue

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` (a plain function, which must not block) inside the Trio run soon;
        nothing if the run has ended."""
        with contextlib.suppress(trio.RunFinishedError):
            self._token.run_sync_soon(callback)

    def close(self) -> None:
        """Refuse every operation from now on; those still queued end as ``RuntimeClosed``."""
        self._closed = True
        while self._queue:
            operation = self._queue.popleft()
            _fail(operation.future, RuntimeClosed("the asyncio runtime closed"))
            _finished(operation)

    # --- inside the Trio run ---

    def _start_queued(self) -> None:
        self._waking = False
        queue, start = self._queue, self._nursery.start_soon
        while queue:
            start(self._run, queue.popleft())

    @staticmethod
    def _cancel_in_trio(operation: _Operation) -> None:
        if operation.scope is not None:
            operation.scope.cancel()

    async def _run(self, operation: _Operation) -> None:
        future = operation.future
        try:
            with trio.CancelScope() as scope:
                operation.scope = scope
                if operation.cancelled:
                    scope.cancel()
                result = await operation.work()
                if not future.done():
                    future.set_result(result)
            if scope.cancelled_caught:
                # Its own scope caught the cancellation its caller asked for.
                _fail(future, asyncio.CancelledError())
        except trio.Cancelled:
            _fail(future, RuntimeClosed("the runtime closed during the operation"))
            raise
        except Exception as error:
            _fail(future, error)
        finally:
            _finished(operation)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _finished(operation: _Operation) -> None:
    """Trio is done with the operation: a caller cancelled meanwhile stops waiting for it."""
    operation.finished = True
    stopped = operation.stopped
    if stopped is not None and not stopped.done():
        stopped.set_result(None)
