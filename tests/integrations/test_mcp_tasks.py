"""Calls a real MCP server of the tests' own (``tests/mcp_server.py``) makes tasks, by MCP's tasks
extension of 2026-07-28, over stdio and Streamable HTTP: a task runs once and completes, a
stopped task is cancelled on the server with ``tasks/cancel``, a failed task is recorded with
its code and never its message, a task asking for input ends the call (by default), and a
restart in the middle, or a task the server forgets, leaves the call unknown, naming the task
noted in the log, and never runs it again."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TextIO

import pytest
import trio
from mcp_server import TASK_FAILURE_CODE
from mcp_support import (
    PRINCIPAL,
    check_a_restart_mid_run,
    connected,
    ready,
    run_cancelled_midway,
    start,
    steps,
)

from inert import CallKey, ClaimRefused, open_asyncio_runtime, open_runtime
from inert.events import ExecutionFailed, ExecutionOutcomeUnknown, ExecutionTaskCreated
from inert.mcp import MCPExecutor, Outcome, tasks

# Each test starts an MCP server process, and the SDK takes seconds to import.
pytestmark = pytest.mark.slow(seconds=10)

SECRET = "hunter2-never-logged"


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    """Each transport, on 2026-07-28, the version that has the tasks extension."""
    return str(request.param)


async def test_a_task_runs_once_and_completes(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """The server answers a task handle: the executor polls it to its end, returns the task's
    result and id, records the call completed, and the tool ran once."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "a", "task_echo", {"text": "hello"})
            run = await executor.run(runtime, key)
            assert run.outcome is Outcome.COMPLETED
            assert run.task_id is not None
            assert run.result is not None
            assert run.result.structured_content == {"result": "hello"}
            with pytest.raises(ClaimRefused):
                await executor.run(runtime, key)
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "completed"
    assert [entry["step"] for entry in steps(journal, key)] == ["ran"]


async def test_a_stopped_task_is_cancelled_on_the_server(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """Cancelling the turn while the task works sends ``tasks/cancel``: the server cancels the
    task's work, and the call is recorded stopped."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "w", "task_wait", {"seconds": 60})
            stopped = await run_cancelled_midway(executor, runtime, key, journal)
            assert stopped.outcome is Outcome.STOPPED
            assert stopped.task_id is not None
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "stopped"
    assert [entry["step"] for entry in steps(journal, key)] == [
        "started",
        "tasks/cancel",
        "cancelled",
    ]


async def test_a_task_the_server_finishes_despite_the_stop_is_recorded_completed(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """A server that acknowledges ``tasks/cancel`` and finishes the work: the call is recorded
    completed, as the server's last answer says, and its result returned."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "s", "task_stubborn", {"seconds": 1})
            stopped = await run_cancelled_midway(executor, runtime, key, journal)
            assert stopped.outcome is Outcome.COMPLETED
            assert stopped.result is not None
            assert stopped.result.structured_content == {"result": "done anyway"}
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "completed"
    assert [entry["step"] for entry in steps(journal, key)] == [
        "started",
        "tasks/cancel",
        "finished",
    ]


def test_under_asyncio_a_task_completes_and_a_stopped_one_is_cancelled(
    journal: Path, errlog: TextIO
) -> None:
    """With the asyncio facade and the SDK on asyncio, a task completes, and a stopped task is
    cancelled on the server with ``tasks/cancel`` and recorded stopped."""

    async def main() -> tuple[Outcome, Outcome, CallKey]:
        async with (
            connected("stdio", journal, None, errlog, [tasks()]) as client,
            open_asyncio_runtime(log="memory://") as runtime,
        ):
            executor = MCPExecutor(client)
            await runtime.start_turn(
                tenant="acme",
                conversation="c1",
                turn="t1",
                principal=PRINCIPAL,
                tools=await executor.declarations(),
            )
            echo = await ready(runtime, "e", "task_echo", {"text": "hello"})
            wait = await ready(runtime, "w", "task_wait", {"seconds": 60})
            echoed = await executor.run(runtime, echo)
            waiting = asyncio.ensure_future(executor.run(runtime, wait))
            # Another process writes the journal: nothing here could set an event.
            while not steps(journal, wait):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            await runtime.cancel_turn(wait.turn_ref, principal=PRINCIPAL)
            waited = await asyncio.wait_for(waiting, 30)
            return echoed.outcome, waited.outcome, wait

    echoed, waited, wait = asyncio.run(main())
    assert (echoed, waited) == (Outcome.COMPLETED, Outcome.STOPPED)
    assert "tasks/cancel" in [entry["step"] for entry in steps(journal, wait)]


async def test_a_failed_task_is_recorded_with_its_code_alone(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """A task that fails with a JSON-RPC error is recorded failed ``mcp_error:<code>``; the
    error's message, which quotes the argument, is nowhere in the log."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "r", "task_refuse", {"secret": SECRET})
            run = await executor.run(runtime, key)
            assert (run.outcome, run.error) == (Outcome.FAILED, f"mcp_error:{TASK_FAILURE_CODE}")
            await runtime.settle()
            recorded = [
                record.event for record in await runtime.log.read_stream(key.request_stream)
            ]
            [failed] = [event for event in recorded if isinstance(event, ExecutionFailed)]
            assert failed.error == f"mcp_error:{TASK_FAILURE_CODE}"
            assert SECRET not in repr(recorded)
            assert SECRET not in repr(runtime.ledger.history(key))
    assert [entry["step"] for entry in steps(journal, key)] == ["ran"]


async def test_a_task_asking_for_input_ends_the_call(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """A task in ``input_required`` is not answered: the executor cancels it on the server and
    records the call failed ``input_required``; the question is nowhere in the log."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "q", "task_ask", {"question": SECRET})
            with trio.fail_after(30):
                run = await executor.run(runtime, key)
            assert (run.outcome, run.error) == (Outcome.FAILED, "input_required")
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "failed"
            recorded = [
                record.event for record in await runtime.log.read_stream(key.request_stream)
            ]
            assert SECRET not in repr(recorded)
    assert [entry["step"] for entry in steps(journal, key)] == [
        "started",
        "tasks/cancel",
        "cancelled",
    ]


async def test_a_task_the_server_no_longer_shows_is_left_to_the_restart(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO, tmp_path: Path
) -> None:
    """``tasks/get`` answers that the task is not found: whether the tool acted is unknown, so
    nothing is recorded, and a restart records the call ``outcome_unknown``."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        key = await check_a_restart_mid_run(client, journal, tmp_path, "task_wait")
    # A server whose client went away may cancel the task's work as it exits: one start only.
    assert [entry["step"] for entry in steps(journal, key)].count("started") == 1


async def test_a_restart_mid_task_names_the_task_noted_in_the_log(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO, tmp_path: Path
) -> None:
    """The task's id is noted in the log as the server answers the handle, and the
    ``outcome_unknown`` a restart records names it."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        key = await check_a_restart_mid_run(client, journal, tmp_path, "task_wait")
    async with open_runtime(log=f"sqlite:///{tmp_path / 'inert.db'}") as runtime:
        recorded = [record.event for record in await runtime.log.read_stream(key.request_stream)]
    [noted] = [event for event in recorded if isinstance(event, ExecutionTaskCreated)]
    [unknown] = [event for event in recorded if isinstance(event, ExecutionOutcomeUnknown)]
    assert unknown.task_id == noted.task_id
    assert unknown.claim_id == noted.claim_id


@pytest.mark.parametrize("transport", ["stdio-2025-11-25"])
async def test_on_2025_11_25_a_task_tool_runs_as_a_plain_call(
    transport: str, journal: Path, errlog: TextIO
) -> None:
    """On 2025-11-25 the SDK does not declare the extension: the server runs the call as a
    plain ``tools/call``, and the executor records it as one."""
    async with connected(transport, journal, None, errlog, [tasks()]) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "a", "task_echo", {"text": "hello"})
            run = await executor.run(runtime, key)
            assert (run.outcome, run.task_id) == (Outcome.COMPLETED, None)
    assert [entry["step"] for entry in steps(journal, key)] == ["ran"]
