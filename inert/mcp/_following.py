"""A call the server made a task, followed to its end: polled with ``tasks/get`` until the task
ends, cancelled with ``tasks/cancel`` when inert stops the call or the deadline passes, and its
outcome recorded as the server's last answer says. The task's id is noted in the log as soon as
it is known (``Runtime.note_task``).

How a task's statuses map onto inert's outcomes (the documentation's page on MCP servers says
the same in a table): ``working`` is the call dispatched and running; ``completed`` is
``completed`` (``failed tool_error`` for an error result); ``failed`` is ``failed
mcp_error:<code>``; ``cancelled`` is ``stopped`` where inert asked, ``failed task_cancelled``
where the server cancelled on its own. ``input_required``, where the executor asks the person
(``ask_person``), goes to the call's principal (``Runtime.ask_for_input``): the answer given is
sent with ``tasks/update`` and the task followed on; a denial, or no answer before the request
expires, cancels the task (``failed input_denied``, ``failed input_expired``, as the
cancellation ends it). Otherwise it ends the call: the task is cancelled and the call recorded
as the cancellation ends it (``failed input_required`` where it is cancelled).
"""

from __future__ import annotations

import contextlib
from datetime import timedelta

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from pydantic import ValidationError

from ..events import ConfigurationError
from ..runtime import Dispatch
from ._outcome import Outcome, Runtime, ServerRun
from ._tasks import TERMINAL, CreatedTask, TaskState, cancel_task, get_task, update_task

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
        self,
        client: Client,
        runtime: Runtime,
        dispatch: Dispatch,
        created: CreatedTask,
        *,
        input_lifetime: float | None = None,
    ) -> None:
        self.client = client
        self.runtime = runtime
        self.dispatch = dispatch
        self.task_id = created.task_id
        self.input_lifetime = input_lifetime
        """Seconds the person has to answer a request for input; ``None``: the task's asking
        ends the call."""
        self._interval = _interval(created.poll_interval_ms)
        self._state: TaskState | None = None

    async def run(self, deadline: float) -> ServerRun:
        """Follow the task until it ends, inert stops the call or ``deadline`` (on anyio's
        clock) passes; a request for input goes to the person, or ends the call."""
        # A handle the log cannot keep (too long, spaces) is followed all the same; only a
        # restart will not name it.
        with contextlib.suppress(ConfigurationError):
            await self.runtime.note_task(self.dispatch, self.task_id)
        failure: str | None = None
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
                    failure = await self._follow(deadline)
                except (MCPError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                    # The server no longer shows the task (an error, a broken connection):
                    # whether it ran is unknown.
                    lost = True
                except ValidationError:
                    invalid = True
            group.cancel_scope.cancel()
        state = self._state
        if lost:
            return self._run(Outcome.UNREPORTED)
        if invalid:
            return await self._cancel_then("invalid_result")
        if state is not None and state.status in TERMINAL:
            return await self._record(state, stopped=False)
        if stopped:
            return await self._cancel_then(None)
        return await self._cancel_then(failure or "deadline_exceeded")

    async def _follow(self, deadline: float) -> str | None:
        """Poll until the task ends (``None``), and take its requests for input to the
        person; the failure to record where the task is to be cancelled instead."""
        first = True
        answered: set[str] = set()
        while True:
            state = await self._until_settled(first=first)
            first = False
            if state.status in TERMINAL:
                return None
            if self.input_lifetime is None:
                return "input_required"
            asked = {
                name: request
                for name, request in (state.input_requests or {}).items()
                if name not in answered
            }
            if state.input_requests and not asked:
                # Answered already: the server has not taken the answer up yet.
                continue
            lifetime = min(self.input_lifetime, max(deadline - anyio.current_time(), 0))
            answer = await self.runtime.ask_for_input(
                self.dispatch, asked, expires_in=timedelta(seconds=lifetime)
            )
            if answer is None:
                return "input_expired"
            if not answer.given:
                return "input_denied"
            if not isinstance(answer.value, dict):
                # Input is the task's ``inputResponses``, keyed as its requests are.
                return "input_refused"
            answered.update(asked)
            try:
                await update_task(self.client.session, self.task_id, answer.value)
            except MCPError:
                # The server refused the answer (a key it did not ask, a shape it does not
                # take): the message may quote the input, the task is cancelled.
                return "input_refused"

    async def _until_settled(self, *, first: bool = False) -> TaskState:
        """Poll until the task ends or asks for input."""
        while True:
            if not first:
                await anyio.sleep(self._interval)
            first = False
            state = self._state = await get_task(self.client.session, self.task_id)
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
