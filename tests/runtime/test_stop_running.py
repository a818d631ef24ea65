"""Stopping a tool that is already running (rules 5): the stop request, the executor's signal
and the outcome it reports, under Trio and under asyncio."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial

import pytest
import trio
import trio.testing
from test_runtime import TOOLS, call_events, key_of, ready_call, response_end, running, start

from inert import (
    Dispatch,
    Phase,
    RefusedError,
    Runtime,
    StatusCue,
    open_asyncio_runtime,
)
from inert.events import (
    CallStopRequested,
    CancelReason,
    ExecutionCompleted,
    ExecutionStopped,
)
from inert.log import MemoryLog, MemoryStore
from inert.runtime import StopSignal

KEY = key_of("c1")

Stopper = Callable[[Runtime], Awaitable[object]]

STOPPERS: dict[CancelReason, Stopper] = {
    CancelReason.TURN_CANCELLED: lambda runtime: runtime.cancel_turn(
        KEY.turn_ref, principal="user:alice"
    ),
    CancelReason.SUPERSEDED: lambda runtime: start(runtime, turn="t2"),
    CancelReason.RESPONSE_QUARANTINED: lambda runtime: runtime.quarantine_response(
        KEY.response, operator="ops", reason="incident", tenant=KEY.tenant
    ),
    CancelReason.TOOL_DISABLED: lambda runtime: runtime.disable_tool(
        "get_weather", operator="ops", reason="incident"
    ),
    CancelReason.TENANT_STOPPED: lambda runtime: runtime.stop_tenant(
        KEY.tenant, operator="ops", reason="incident"
    ),
}


async def dispatched(runtime: Runtime) -> Dispatch:
    await start(runtime)
    await ready_call(runtime, KEY)
    return await runtime.claim(KEY, executor="worker")


@pytest.mark.parametrize("reason", list(STOPPERS))
async def test_each_stopping_input_asks_the_running_executor_to_stop(reason: CancelReason) -> None:
    """Cancel, supersede, quarantine, disable or stop a tenant after dispatch: one request,
    with that reason, reaches the executor's signal and the status."""
    async with running() as runtime:
        runtime.operators = {"ops"}.__contains__
        dispatch = await dispatched(runtime)
        assert not dispatch.stop.requested
        await STOPPERS[reason](runtime)
        await runtime.settle()
        assert dispatch.stop.reason is reason
        assert runtime.phase(KEY) is Phase.DISPATCHED
        assert runtime.projections.status.of(KEY) is StatusCue.STOP_REQUESTED
        row = runtime.ledger.row(KEY)
        assert row is not None
        assert row.outcome == "stop_requested"
        await runtime.stopped(dispatch)
        await runtime.settle()
        assert runtime.projections.status.of(KEY) is StatusCue.RUN_STOPPED
        row = runtime.ledger.row(KEY)
        assert row is not None
        assert row.outcome == "stopped"


async def test_a_second_stopping_input_records_nothing_more() -> None:
    """The stop is requested once: a tenant stopped after the turn was cancelled adds nothing."""
    async with running() as runtime:
        runtime.operators = {"ops"}.__contains__
        await dispatched(runtime)
        await runtime.cancel_turn(KEY.turn_ref, principal="user:alice")
        await runtime.stop_tenant(KEY.tenant, operator="ops", reason="incident")
        await runtime.settle()
        reasons = [
            record.event.reason
            for record in await runtime.log.read_stream(KEY.stream)
            if isinstance(record.event, CallStopRequested)
        ]
        assert reasons == [CancelReason.TURN_CANCELLED]


async def test_a_call_whose_outcome_is_recorded_is_not_asked_to_stop() -> None:
    """Once the executor reported, a cancellation of the turn asks nobody to stop."""
    async with running() as runtime:
        dispatch = await dispatched(runtime)
        await runtime.complete(dispatch)
        await runtime.cancel_turn(KEY.turn_ref, principal="user:alice")
        await runtime.settle()
        assert not dispatch.stop.requested
        events = [recorded.event for recorded in await runtime.log.read_stream(KEY.stream)]
        assert not any(isinstance(event, CallStopRequested) for event in events)
        assert runtime.projections.status.of(KEY) is StatusCue.DONE


async def test_execute_stops_a_trio_executor_inside_its_scope_and_records_it() -> None:
    """``execute`` runs the executor in the stop's cancel scope: cancelling the turn ends the
    run, and the outcome recorded is ``stopped``, not completed or failed."""
    async with running() as runtime:
        await start(runtime)
        await ready_call(runtime, KEY)
        started = trio.Event()

        async def slow(dispatch: Dispatch) -> None:
            started.set()
            await trio.sleep_forever()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(runtime.execute, KEY, slow, name="slow"))
            await started.wait()
            await runtime.cancel_turn(KEY.turn_ref, principal="user:alice")
        await runtime.settle()
        outcomes = [
            recorded.event for recorded in await runtime.log.read_stream(KEY.request_stream)
        ]
        assert any(isinstance(event, ExecutionStopped) for event in outcomes)
        assert not any(isinstance(event, ExecutionCompleted) for event in outcomes)
        assert runtime.projections.status.of(KEY) is StatusCue.RUN_STOPPED


async def test_an_executor_that_finishes_despite_the_request_is_completed() -> None:
    """A stop is a request: an executor that polls it and still finishes its work reports the
    run as completed, and the status says done."""
    async with running() as runtime:
        dispatch = await dispatched(runtime)
        await runtime.cancel_turn(KEY.turn_ref, principal="user:alice")
        await runtime.settle()
        assert dispatch.stop.requested
        await runtime.complete(dispatch)
        await runtime.settle()
        assert runtime.projections.status.of(KEY) is StatusCue.DONE
        with pytest.raises(RefusedError):
            await runtime.stopped(dispatch)


async def test_a_stop_signal_cancels_scopes_at_once_once_requested() -> None:
    """A scope entered after the request is cancelled at once; ``wait`` returns the reason."""
    signal = StopSignal()
    signal.request(CancelReason.TENANT_STOPPED)
    signal.request(CancelReason.TURN_CANCELLED)
    assert signal.reason is CancelReason.TENANT_STOPPED
    assert signal.requested
    with signal.scope() as scope:
        await trio.sleep(3600)
    assert scope.cancelled_caught
    assert await signal.wait() is CancelReason.TENANT_STOPPED


def test_asyncio_execute_cancels_the_executor_task_on_a_stop() -> None:
    """Under asyncio, ``execute`` runs the executor as a task that the stop cancels, and
    records the run as stopped."""

    async def main() -> StatusCue | None:
        log = MemoryLog(MemoryStore())
        async with open_asyncio_runtime(log=log, tools=TOOLS) as runtime:
            await runtime.start_turn(
                tenant="acme", conversation="c1", turn="t1", principal="user:alice"
            )
            await runtime.feed([*call_events(KEY), response_end(KEY)])
            await runtime.settle()
            started = asyncio.Event()

            async def slow(dispatch: Dispatch) -> None:
                started.set()
                await asyncio.sleep(3600)

            execution = asyncio.ensure_future(runtime.execute(KEY, slow, name="slow"))
            await started.wait()
            await runtime.cancel_turn(KEY.turn_ref, principal="user:alice")
            await asyncio.wait_for(execution, 10)
            await runtime.settle()
            return runtime.projections.status.of(KEY)

    assert asyncio.run(main()) is StatusCue.RUN_STOPPED
