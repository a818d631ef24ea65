"""A call the server made a task, followed to its end: polled with ``tasks/get`` until the task
ends or asks for input, cancelled with ``tasks/cancel`` when inert stops the call, the deadline
passes or the task asks for input, and its outcome recorded as the server's last answer says.

How a task's statuses map onto inert's outcomes (the documentation's page on MCP servers says
the same in a table): ``working`` is the call dispatched and running; ``completed`` is
``completed`` (``failed tool_error`` for an error result); ``failed`` is ``failed
mcp_error:<code>``; ``cancelled`` is ``stopped`` where inert asked, ``failed task_cancelled``
where the server cancelled on its own; ``input_required`` ends the call: the task is cancelled,
and the call recorded as the cancellation ends it (``failed input_required`` where it is
cancelled).
"""

from __future__ import annotations

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from pydantic import ValidationError

from ..runtime import Dispatch
from ._outcome import Outcome, Runtime, ServerRun
from ._tasks import TERMINAL, CreatedTask, TaskState, cancel_task, get_task

CANCEL_GRACE = 10.0
"""Seconds the executor waits, after ``tasks/cancel``, for the task to end before it records
the outcome the cancellation was for (the server may have finished the work meanwhile)."""

_DEFAULT_POLL = 1.0
"""Seconds between two ``tasks/get`` where the server suggests no interval."""

_LEAST_POLL = 0.01
"""The shortest wait between two ``tasks/get``, whatever the server suggests."""


def _interval(milliseconds: int | None) -> float:
    return _DEFAULT_POLL if milliseconds is None else max(milliseconds / 1000, _LEAST_POLL)


class TaskFollower:
    """Follows one dispatched call's task on the server and records its outcome."""

    def __init__(
        self, client: Client, runtime: Runtime, dispatch: Dispatch, created: CreatedTask
    ) -> None:
        self.client = client
        self.runtime = runtime
        self.dispatch = dispatch
        self.task_id = created.task_id
        self._interval = _interval(created.poll_interval_ms)

    async def run(self, deadline: float) -> ServerRun:
        """Follow the task until it ends, asks for input, inert stops the call or
        ``deadline`` (on anyio's clock) passes."""
        state: TaskState | None = None
        stopped = lost = invalid = False

        async def stop_when_asked(scope: anyio.CancelScope) -> None:
            nonlocal stopped
            await self.runtime.wait_for_stop(self.dispatch)
            stopped = True
            scope.cancel()

        async with anyio.create_task_group() as group:
            with anyio.CancelScope(deadline=deadline) as scope:
                group.start_soon(stop_when_asked, scope)
                try:
                    state = await self._until_settled(first=True)
                except (MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    # The server no longer shows the task (an error, a broken connection):
                    # whether it ran is unknown.
                    lost = True
                except ValidationError:
                    invalid = True
            group.cancel_scope.cancel()
        if lost:
            return self._run(Outcome.UNREPORTED)
        if invalid:
            return await self._cancel_then("invalid_result")
        if state is not None and state.status in TERMINAL:
            return await self._record(state, stopped=False)
        if stopped:
            return await self._cancel_then(None)
        if state is not None:
            # ``input_required``: the request for input is not answered here; the call ends.
            return await self._cancel_then("input_required")
        return await self._cancel_then("deadline_exceeded")

    async def _until_settled(self, *, first: bool = False) -> TaskState:
        """Poll until the task ends or asks for input."""
        while True:
            if not first:
                await anyio.sleep(self._interval)
            first = False
            state = await get_task(self.client.session, self.task_id)
            if state.poll_interval_ms is not None:
                self._interval = _interval(state.poll_interval_ms)
            if state.status in TERMINAL or state.status == "input_required":
                return state

    async def _cancel_then(self, failure: str | None) -> ServerRun:
        """Cancel the task, wait a grace for it to end, and record what it ended as: the
        outcome the cancellation was for (``stopped``, or failed with ``failure``) unless the
        server says the task ended otherwise."""
        state: TaskState | None = None
        with anyio.move_on_after(CANCEL_GRACE):
            try:
                await cancel_task(self.client.session, self.task_id)
                while state is None or state.status not in TERMINAL:
                    state = await self._until_settled()
                    if state.status == "input_required":
                        state = None
            except (
                MCPError,
                ValidationError,
                anyio.BrokenResourceError,
                anyio.ClosedResourceError,
            ):
                # The server's answer is lost: the cancellation was sent, and is what is known.
                state = None
        if state is not None and state.status != "cancelled":
            return await self._record(state, stopped=failure is None)
        if failure is None:
            await self.runtime.stopped(self.dispatch)
            return self._run(Outcome.STOPPED)
        await self.runtime.fail(self.dispatch, failure)
        return self._run(Outcome.FAILED, failure)

    async def _record(self, state: TaskState, *, stopped: bool) -> ServerRun:
        """Record the outcome of a task that ended (``stopped``: inert asked it to)."""
        if state.status == "cancelled":
            if stopped:
                await self.runtime.stopped(self.dispatch)
                return self._run(Outcome.STOPPED)
            await self.runtime.fail(self.dispatch, "task_cancelled")
            return self._run(Outcome.FAILED, "task_cancelled")
        if state.status == "failed":
            code = (state.error or {}).get("code")
            # The code alone: the error's message may quote the arguments.
            failure = f"mcp_error:{code}" if isinstance(code, int) else "mcp_error"
            await self.runtime.fail(self.dispatch, failure)
            return self._run(Outcome.FAILED, failure)
        try:
            result = CallToolResult.model_validate(state.result or {}, by_name=False)
            if not result.is_error:
                await self.client.session.validate_tool_result(self.dispatch.tool, result)
        except (ValidationError, RuntimeError):
            await self.runtime.fail(self.dispatch, "invalid_result")
            return self._run(Outcome.FAILED, "invalid_result")
        if result.is_error:
            await self.runtime.fail(self.dispatch, "tool_error")
            return self._run(Outcome.FAILED, "tool_error", result)
        await self.runtime.complete(self.dispatch)
        return self._run(Outcome.COMPLETED, result=result)

    def _run(
        self, outcome: Outcome, error: str = "", result: CallToolResult | None = None
    ) -> ServerRun:
        return ServerRun(
            dispatch=self.dispatch,
            outcome=outcome,
            error=error,
            result=result,
            task_id=self.task_id,
        )
