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
- Operations are performed by worker tasks, parked between two operations: starting one is a
  wake-up of a parked worker rather than a new task with a cancel scope of its own.
- An asyncio task cancelled while it waits cancels its operation in Trio (the cancel scope of
  the worker performing it, which then ends) and waits until Trio has stopped it, so that
  nothing of it runs after the cancellation reached the caller. An operation that had finished
  already keeps its effect.
- An error of the operation reaches the coroutine as it was raised, an ``InertError`` as
  itself; a Trio cancellation of the whole run (the runtime closing) as ``RuntimeClosed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from ..events import RuntimeClosed

T = TypeVar("T")

MAX_IDLE_WORKERS = 64
"""Workers kept parked for the next operations; a burst beyond starts more, which end after."""


class _Operation:
    """One operation asked from asyncio, on its way through Trio."""

    __slots__ = ("cancelled", "finished", "future", "stopped", "work", "worker")

    def __init__(self, work: Callable[[], Awaitable[Any]], future: asyncio.Future[Any]) -> None:
        self.work = work
        self.future = future
        self.worker: _Worker | None = None
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
        self._idle: list[_Worker] = []
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
        self.call_soon(functools.partial(self._cancel_in_trio, operation))
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
        queue, idle = self._queue, self._idle
        while queue:
            operation = queue.popleft()
            if idle:
                worker = idle.pop()
                worker.operation = operation
                trio.lowlevel.reschedule(worker.task)
            else:
                self._nursery.start_soon(self._work, operation)

    @staticmethod
    def _cancel_in_trio(operation: _Operation) -> None:
        # Not started yet: its worker cancels it as it starts; finished: nothing to stop.
        worker = operation.worker
        if worker is not None and worker.operation is operation:
            worker.scope.cancel()

    async def _work(self, operation: _Operation) -> None:
        """A worker: performs operations one after another, parked between two, and ends with
        an operation whose caller cancelled it (the cancel scope is the worker's) or when
        enough workers are idle already."""
        worker = _Worker(trio.lowlevel.current_task())
        with worker.scope:
            while True:
                worker.operation = operation
                operation.worker = worker
                if operation.cancelled:
                    worker.scope.cancel()
                await _perform(operation)
                worker.operation = None
                if len(self._idle) >= MAX_IDLE_WORKERS:
                    return
                operation = await self._next(worker)

    async def _next(self, worker: _Worker) -> _Operation:
        idle = self._idle
        idle.append(worker)

        def abort(_: object) -> trio.lowlevel.Abort:
            idle.remove(worker)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        assert worker.operation is not None
        return worker.operation


class _Worker:
    """A Trio task performing operations for asyncio callers: one after another, each started
    by a wake-up rather than a task of its own (waking a parked task costs a third of starting
    one with a cancel scope)."""

    __slots__ = ("operation", "scope", "task")

    def __init__(self, task: trio.lowlevel.Task) -> None:
        self.task = task
        self.scope = trio.CancelScope()
        self.operation: _Operation | None = None


async def _perform(operation: _Operation) -> None:
    future = operation.future
    try:
        result = await operation.work()
    except trio.Cancelled:
        # Cancelled at its caller's asking (whose future is cancelled already), or the run is
        # ending under it.
        if not operation.cancelled:
            _fail(future, RuntimeClosed("the runtime closed during the operation"))
        raise
    except Exception as error:
        _fail(future, error)
    else:
        if not future.done():
            future.set_result(result)
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
