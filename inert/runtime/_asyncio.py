"""inert inside an asyncio application: the Trio runtime runs as a guest of asyncio's loop.

``open_asyncio_runtime`` starts Trio in guest mode (``trio.lowlevel.start_guest_run``) on the
running asyncio loop, opens the runtime there, and hands back a facade whose coroutines run each
operation inside Trio and await its answer from asyncio. Both run on the loop's thread: nothing
is shared across threads, and the runtime's guarantees are the Trio runtime's own.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio
from outcome import Outcome

from ..events import CallKey, Event, InertError, TurnRef
from ._boundary import Dispatch, PendingConfirmation, ReadyCall
from ._open import open_runtime
from ._runtime import Runtime

T = TypeVar("T")


class AsyncioRuntime:
    """The runtime's operations, as asyncio coroutines."""

    def __init__(self, runtime: Runtime, call: Callable[..., Awaitable[Any]]) -> None:
        self._runtime = runtime
        self._call = call

    @property
    def projections(self) -> Any:
        """The ledger, queue, status and audit (read them between operations)."""
        return self._runtime.projections

    async def start_turn(self, **turn: Any) -> TurnRef:
        return await self._call(lambda: self._runtime.start_turn(**turn))  # type: ignore[no-any-return]

    async def feed(self, events: Sequence[Event], **options: Any) -> None:
        await self._call(lambda: self._runtime.feed(events, **options))

    async def cancel_turn(self, turn: TurnRef, *, principal: str, reason: str = "") -> None:
        await self._call(
            lambda: self._runtime.cancel_turn(turn, principal=principal, reason=reason)
        )

    async def pending_confirmation(self, key: CallKey) -> PendingConfirmation | None:
        return await self._call(lambda: self._runtime.pending_confirmation(key))  # type: ignore[no-any-return]

    async def confirm(self, key: CallKey, *, principal: str, arguments_digest: str) -> None:
        await self._call(
            lambda: self._runtime.confirm(
                key, principal=principal, arguments_digest=arguments_digest
            )
        )

    async def deny(self, key: CallKey, *, principal: str, reason: str = "") -> None:
        await self._call(lambda: self._runtime.deny(key, principal=principal, reason=reason))

    async def settle(self) -> None:
        await self._call(self._runtime.settle)

    async def ready(self) -> list[ReadyCall]:
        """The calls ready to be claimed now."""

        async def ready_now() -> list[ReadyCall]:
            await self._runtime.settle()
            found = [
                self._runtime._ready_call(key) for key in self._runtime.projections.queue.ready()
            ]
            return [call for call in found if call is not None]

        return await self._call(ready_now)  # type: ignore[no-any-return]

    async def claim(self, call: CallKey | ReadyCall, *, executor: str) -> Dispatch:
        return await self._call(lambda: self._runtime.claim(call, executor=executor))  # type: ignore[no-any-return]

    async def complete(self, dispatch: Dispatch) -> None:
        await self._call(lambda: self._runtime.complete(dispatch))

    async def fail(self, dispatch: Dispatch, error: str = "") -> None:
        await self._call(lambda: self._runtime.fail(dispatch, error))


@asynccontextmanager
async def open_asyncio_runtime(**options: Any) -> AsyncIterator[AsyncioRuntime]:
    """``open_runtime(**options)`` for an asyncio application: use it under a running loop."""
    loop = asyncio.get_running_loop()
    opened: asyncio.Future[tuple[Runtime, trio.MemorySendChannel[Any]]] = loop.create_future()
    finished: asyncio.Future[Outcome[None]] = loop.create_future()
    trio_token: list[trio.lowlevel.TrioToken] = []
    stop = trio.Event()

    async def host() -> None:
        trio_token.append(trio.lowlevel.current_trio_token())
        # Unbounded: a full channel would drop a request whose coroutine then waits forever;
        # asyncio's side bounds the requests in flight by the coroutines awaiting them.
        send, receive = trio.open_memory_channel[Any](math.inf)
        async with open_runtime(**options) as runtime, trio.open_nursery() as nursery:
            loop.call_soon(_resolve, opened, (runtime, send))

            async def serve() -> None:
                async for work, future in receive:
                    nursery.start_soon(_run_for, loop, work, future)

            nursery.start_soon(serve)
            await stop.wait()
            nursery.cancel_scope.cancel()

    def done(outcome: Outcome[None]) -> None:
        if not finished.done():
            finished.set_result(outcome)
        if not opened.done():
            opened.set_exception(InertError("the runtime stopped before it opened"))

    trio.lowlevel.start_guest_run(
        host,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        done_callback=done,
        host_uses_signal_set_wakeup_fd=True,
    )
    try:
        runtime, send = await opened
    except BaseException:
        (await finished).unwrap()
        raise

    async def call(work: Callable[[], Awaitable[T]]) -> T:
        future: asyncio.Future[T] = loop.create_future()
        trio_token[0].run_sync_soon(send.send_nowait, (work, future))
        return await future

    try:
        yield AsyncioRuntime(runtime, call)
    finally:
        trio_token[0].run_sync_soon(stop.set)
        (await finished).unwrap()


def _resolve(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


async def _run_for(
    loop: asyncio.AbstractEventLoop, work: Callable[[], Awaitable[Any]], future: asyncio.Future[Any]
) -> None:
    try:
        result = await work()
    except Exception as error:
        loop.call_soon(_fail, future, error)
    else:
        loop.call_soon(_resolve, future, result)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
