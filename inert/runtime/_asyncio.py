"""inert inside an asyncio application: the Trio runtime runs as a guest of asyncio's loop.

``open_asyncio_runtime`` starts Trio in guest mode (``trio.lowlevel.start_guest_run``) on the
running asyncio loop, opens the runtime there, and hands back ``AsyncioRuntime``: every
operation of the Trio ``Runtime`` under the same name, with the same parameters and types, as
asyncio coroutines (async iterators where the runtime gives async iterators). Each is written
out, signature and all, so that the API reference, type checkers and editors see them as they
are; a test holds every one to the runtime's parameters. Both run on the loop's thread: nothing
is shared across threads, what the facade reads (the ledger, a call's phase) it reads directly
between two steps of Trio, and the runtime's guarantees are the Trio runtime's own. How an
operation crosses is ``inert.runtime._guest``'s.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

import trio
from opentelemetry.trace import TracerProvider
from outcome import Outcome

from ..actors import (
    DEFAULT_LIMITS,
    CallLimits,
    Phase,
    ToolDeclaration,
    ToolRegistry,
    Validator,
)
from ..actors._router import (
    DEFAULT_INBOX_SIZE,
    DEFAULT_MAX_BUSY_ACTORS,
    DEFAULT_VALIDATION_TIMEOUT,
)
from ..adapters import ResumedCall
from ..events import (
    CallKey,
    CancelReason,
    Event,
    InertError,
    ResponseRef,
    TraceContext,
    TurnRef,
)
from ..log import Log
from ..projections import DEFAULT_LEDGER_HORIZON, Ledger, Projections
from ..tracing import CallSpans, IncomingTrace
from ._boundary import (
    Dispatch,
    Executor,
    OperatorAuthorizer,
    PendingConfirmation,
    ReadyCall,
    execute_with,
)
from ._collector import DEFAULT_COLLECTOR, CollectorSettings
from ._guest import GuestCrossing
from ._ingress import DEFAULT_MAX_PENDING_BYTES
from ._input import InputAnswer, PendingInput
from ._open import open_runtime
from ._peers import DEFAULT_LEASE_TIME, Peers
from ._retention import DEFAULT_RETENTION, Retention
from ._runtime import (
    DEFAULT_CONFIRMATION_VALIDITY,
    DEFAULT_REQUEST_TIMEOUT,
    Runtime,
)
from ._snapshot import DEFAULT_SNAPSHOT_EVERY

Item = TypeVar("Item")


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
    """The runtime's operations for asyncio code; open one with
    [`open_asyncio_runtime`][inert.open_asyncio_runtime].

    Every operation of [`Runtime`][inert.Runtime] is here under its name, with its parameters:
    coroutines run inside Trio and return (or raise) what the runtime does, views are read
    directly. Cancelling the asyncio task that awaits an operation cancels the operation.
    """

    def __init__(self, runtime: Runtime, crossing: GuestCrossing) -> None:
        self._runtime = runtime
        self._crossing = crossing

    # --- turns, ingress, confirmation, operator controls, claims and outcomes: run inside Trio ---

    async def start_turn(
        self,
        *,
        tenant: str,
        conversation: str,
        turn: str,
        principal: str,
        tools: Iterable[str | ToolDeclaration] | None = None,
        trace: TraceContext | IncomingTrace | None = None,
    ) -> TurnRef:
        """Start a turn for an authenticated principal, offering these tools (default: all).

        As [`Runtime.start_turn`][inert.Runtime.start_turn], run inside Trio."""
        return await self._crossing.call(
            functools.partial(
                self._runtime.start_turn,
                tenant=tenant,
                conversation=conversation,
                turn=turn,
                principal=principal,
                tools=tools,
                trace=trace,
            )
        )

    async def cancel_turn(self, turn: TurnRef, *, principal: str, reason: str = "") -> None:
        """Cancel a turn for its principal: none of its calls not yet dispatched will run.

        As [`Runtime.cancel_turn`][inert.Runtime.cancel_turn], run inside Trio."""
        await self._crossing.call(
            functools.partial(self._runtime.cancel_turn, turn, principal=principal, reason=reason)
        )

    async def feed(self, events: Sequence[Event], *, trace: TraceContext | None = None) -> None:
        """Feed portable ingress events of provider streams, in the order they came.

        As [`Runtime.feed`][inert.Runtime.feed], run inside Trio."""
        await self._crossing.call(functools.partial(self._runtime.feed, events, trace=trace))

    async def quarantine_response(
        self, response: str, *, operator: str, reason: str, tenant: str | None = None
    ) -> int:
        """Stop every call of a provider response not yet dispatched, now and whatever of it arrives
        later (a reconnecting adapter included); its position in the log.

        As [`Runtime.quarantine_response`][inert.Runtime.quarantine_response], run inside Trio."""
        return await self._crossing.call(
            functools.partial(
                self._runtime.quarantine_response,
                response,
                operator=operator,
                reason=reason,
                tenant=tenant,
            )
        )

    async def disable_tool(
        self, tool: str, *, operator: str, reason: str, tenant: str | None = None
    ) -> int:
        """Stop every call of a tool (everywhere, or for one tenant) until it is enabled.

        As [`Runtime.disable_tool`][inert.Runtime.disable_tool], run inside Trio."""
        return await self._crossing.call(
            functools.partial(
                self._runtime.disable_tool, tool, operator=operator, reason=reason, tenant=tenant
            )
        )

    async def enable_tool(
        self, tool: str, *, operator: str, reason: str, tenant: str | None = None
    ) -> int:
        """Let new calls of a tool run again; the calls the disabling ended stay ended.

        As [`Runtime.enable_tool`][inert.Runtime.enable_tool], run inside Trio."""
        return await self._crossing.call(
            functools.partial(
                self._runtime.enable_tool, tool, operator=operator, reason=reason, tenant=tenant
            )
        )

    async def stop_tenant(self, tenant: str, *, operator: str, reason: str) -> int:
        """Emergency stop: every call of the tenant not yet dispatched ends, inertly.

        As [`Runtime.stop_tenant`][inert.Runtime.stop_tenant], run inside Trio."""
        return await self._crossing.call(
            functools.partial(self._runtime.stop_tenant, tenant, operator=operator, reason=reason)
        )

    async def resume_tenant(self, tenant: str, *, operator: str, reason: str) -> int:
        """Let the tenant's new turns run calls again; stopped calls stay ended.

        As [`Runtime.resume_tenant`][inert.Runtime.resume_tenant], run inside Trio."""
        return await self._crossing.call(
            functools.partial(self._runtime.resume_tenant, tenant, operator=operator, reason=reason)
        )

    async def confirm(
        self,
        key: CallKey,
        *,
        principal: str,
        arguments_digest: str,
        expires_in: timedelta = DEFAULT_CONFIRMATION_VALIDITY,
        arguments: Mapping[str, Any] | bytes | None = None,
    ) -> datetime:
        """Confirm one call for its principal, for exactly the arguments with this digest; the
        confirmation is single use and expires after ``expires_in`` (10 minutes): a claim from then
        on cancels the call (``confirmation_expired``) instead of dispatching it. Returns when the
        confirmation expires, by the log's clock.

        As [`Runtime.confirm`][inert.Runtime.confirm], run inside Trio."""
        return await self._crossing.call(
            functools.partial(
                self._runtime.confirm,
                key,
                principal=principal,
                arguments_digest=arguments_digest,
                expires_in=expires_in,
                arguments=arguments,
            )
        )

    async def pending_confirmation(self, key: CallKey) -> PendingConfirmation | None:
        """What a call waiting for confirmation asks of its principal, or ``None``.

        As [`Runtime.pending_confirmation`][inert.Runtime.pending_confirmation], run inside Trio."""
        return await self._crossing.call(functools.partial(self._runtime.pending_confirmation, key))

    async def deny(self, key: CallKey, *, principal: str, reason: str = "") -> None:
        """Refuse one call for its principal: it is cancelled and never runs.

        As [`Runtime.deny`][inert.Runtime.deny], run inside Trio."""
        await self._crossing.call(
            functools.partial(self._runtime.deny, key, principal=principal, reason=reason)
        )

    async def claim(self, call: CallKey | ReadyCall, *, executor: str) -> Dispatch:
        """Claim a ready call through its actor; ``ClaimRefused`` unless it is dispatched.

        As [`Runtime.claim`][inert.Runtime.claim], run inside Trio."""
        return await self._crossing.call(
            functools.partial(self._runtime.claim, call, executor=executor)
        )

    async def complete(self, dispatch: Dispatch) -> None:
        """Record that the executor ran the call to completion.

        As [`Runtime.complete`][inert.Runtime.complete], run inside Trio."""
        await self._crossing.call(functools.partial(self._runtime.complete, dispatch))

    async def fail(self, dispatch: Dispatch, error: str = "") -> None:
        """Record that the executor's run of the call failed: ``error`` is empty or an identifier
        (an ASCII letter or ``_``, then letters, digits and ``_ . : -``, at most 64 characters; an
        exception type's name, say), recorded as it is. Anything else is refused with a
        ``ConfigurationError`` before anything is recorded: an error's message may hold argument
        values, which the log never keeps.

        As [`Runtime.fail`][inert.Runtime.fail], run inside Trio."""
        await self._crossing.call(functools.partial(self._runtime.fail, dispatch, error))

    async def stopped(self, dispatch: Dispatch) -> None:
        """Record that the executor stopped the call's run, as its stop signal asked.

        As [`Runtime.stopped`][inert.Runtime.stopped], run inside Trio."""
        await self._crossing.call(functools.partial(self._runtime.stopped, dispatch))

    async def wait_for_stop(self, dispatch: Dispatch) -> CancelReason:
        """Until the executor of this dispatch is asked to stop; why it is (the same as ``await
        dispatch.stop.wait()``, for callers of another event loop).

        As [`Runtime.wait_for_stop`][inert.Runtime.wait_for_stop], run inside Trio."""
        return await self._crossing.call(functools.partial(self._runtime.wait_for_stop, dispatch))

    async def note_task(self, dispatch: Dispatch, task_id: str) -> None:
        """Record that the executor's run of the call is a task on the server that runs it,
        known there by ``task_id``.

        As [`Runtime.note_task`][inert.Runtime.note_task], run inside Trio."""
        await self._crossing.call(functools.partial(self._runtime.note_task, dispatch, task_id))

    async def ask_for_input(
        self, dispatch: Dispatch, request: Mapping[str, Any], *, expires_in: timedelta
    ) -> InputAnswer | None:
        """Ask the running call's principal for input and wait for the answer; ``None`` once
        ``expires_in`` has passed unanswered.

        As [`Runtime.ask_for_input`][inert.Runtime.ask_for_input], run inside Trio."""
        return await self._crossing.call(
            functools.partial(self._runtime.ask_for_input, dispatch, request, expires_in=expires_in)
        )

    async def pending_input(self, key: CallKey) -> PendingInput | None:
        """What a running call asks its principal for, or ``None``.

        As [`Runtime.pending_input`][inert.Runtime.pending_input], run inside Trio."""
        return await self._crossing.call(functools.partial(self._runtime.pending_input, key))

    async def give_input(
        self, key: CallKey, *, principal: str, request_digest: str, value: Any
    ) -> None:
        """Answer a running call's request for input for its principal.

        As [`Runtime.give_input`][inert.Runtime.give_input], run inside Trio."""
        await self._crossing.call(
            functools.partial(
                self._runtime.give_input,
                key,
                principal=principal,
                request_digest=request_digest,
                value=value,
            )
        )

    async def deny_input(self, key: CallKey, *, principal: str, request_digest: str) -> None:
        """Refuse a running call's request for input for its principal.

        As [`Runtime.deny_input`][inert.Runtime.deny_input], run inside Trio."""
        await self._crossing.call(
            functools.partial(
                self._runtime.deny_input, key, principal=principal, request_digest=request_digest
            )
        )

    async def settle(self) -> None:
        """Wait until everything fed is in the log, everything in the log is folded, every actor has
        done its work, and the redactions and the snapshot due by then are written.

        As [`Runtime.settle`][inert.Runtime.settle], run inside Trio."""
        await self._crossing.call(self._runtime.settle)

    # --- async iterators: each step taken inside Trio ---

    def ready_calls(self) -> AsyncioIterator[ReadyCall]:
        """The calls that may be claimed, each once, as they become ready.

        As [`Runtime.ready_calls`][inert.Runtime.ready_calls], each step taken inside Trio."""
        return AsyncioIterator(self._crossing, self._runtime.ready_calls())

    def changes(self) -> AsyncioIterator[int]:
        """The log position the runtime's views are at, each time it has moved since the last one
        given: a loop over it sees every change, however long each turn of it takes.

        As [`Runtime.changes`][inert.Runtime.changes], each step taken inside Trio."""
        return AsyncioIterator(self._crossing, self._runtime.changes())

    # --- running a call: the executor runs in asyncio ---

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

    def digest(self) -> str:
        """The state digest of the projections (the same as a replay of the log gives).

        As [`Runtime.digest`][inert.Runtime.digest], read directly."""
        return self._runtime.digest()

    def phase(self, key: CallKey) -> Phase:
        """Where one call is in its lifecycle (``ABSENT`` for a call the runtime does not hold).

        As [`Runtime.phase`][inert.Runtime.phase], read directly."""
        return self._runtime.phase(key)

    def ready_call(self, key: CallKey) -> ReadyCall | None:
        """The call as an executor may claim it (the digest of the arguments that would run
        included), or ``None`` while it is not ready.

        As [`Runtime.ready_call`][inert.Runtime.ready_call], read directly."""
        return self._runtime.ready_call(key)

    def turn_owner(self, turn: TurnRef) -> str | None:
        """The process that decides for the turn's calls, where processes share the log.

        As [`Runtime.turn_owner`][inert.Runtime.turn_owner], read directly."""
        return self._runtime.turn_owner(turn)

    def turn_principal(self, turn: TurnRef) -> str | None:
        """The principal a started turn belongs to; None for a turn never started.

        As [`Runtime.turn_principal`][inert.Runtime.turn_principal], read directly."""
        return self._runtime.turn_principal(turn)

    def resumable_streams(self, turn: TurnRef) -> dict[ResponseRef, int | None]:
        """The responses of ``turn`` whose stream was lost and can still be resumed, each with the
        last provider sequence number the log holds all of (``StreamLost.last_sequence``: a loss is
        written after every fragment fed before it, and a restart records the loss of a resumed
        stream at the sequence it was resumed after).

        As [`Runtime.resumable_streams`][inert.Runtime.resumable_streams], read directly."""
        return self._runtime.resumable_streams(turn)

    def resumable_calls(self, response: ResponseRef) -> list[ResumedCall]:
        """The calls of ``response`` a resumed stream takes up: opened, not terminal, each with the
        sequence and byte offset its adapter gives next (``ResponseCalls.restore``), as they were
        when the stream was lost.

        As [`Runtime.resumable_calls`][inert.Runtime.resumable_calls], read directly."""
        return self._runtime.resumable_calls(response)

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


def open_asyncio_runtime(
    *,
    log: str | Log,
    create: bool = False,
    tools: Iterable[ToolDeclaration] = (),
    check: Validator | None = None,
    limits: CallLimits = DEFAULT_LIMITS,
    validation_timeout: float = DEFAULT_VALIDATION_TIMEOUT,
    inbox_size: int = DEFAULT_INBOX_SIZE,
    max_busy_actors: int = DEFAULT_MAX_BUSY_ACTORS,
    operators: OperatorAuthorizer | Iterable[str] = (),
    ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
    retention: Retention = DEFAULT_RETENTION,
    process: str | None = None,
    lease_time: float = DEFAULT_LEASE_TIME,
    tracer_provider: TracerProvider | None = None,
    collector: CollectorSettings | None = DEFAULT_COLLECTOR,
    held_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
) -> AbstractAsyncContextManager[AsyncioRuntime]:
    """[`open_runtime`][inert.open_runtime] for an asyncio application, with the same
    parameters: use it as ``async with open_asyncio_runtime(log=..., tools=...) as runtime``
    under a running loop; ``runtime`` is an [`AsyncioRuntime`][inert.AsyncioRuntime], and the
    runtime stops when the block ends."""
    return _open_guest(
        lambda: open_runtime(
            log=log,
            create=create,
            tools=tools,
            check=check,
            limits=limits,
            validation_timeout=validation_timeout,
            inbox_size=inbox_size,
            max_busy_actors=max_busy_actors,
            operators=operators,
            ledger_horizon=ledger_horizon,
            retention=retention,
            process=process,
            lease_time=lease_time,
            tracer_provider=tracer_provider,
            collector=collector,
            held_bytes=held_bytes,
            snapshot_every=snapshot_every,
            request_timeout=request_timeout,
        )
    )
