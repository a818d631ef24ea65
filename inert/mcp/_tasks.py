"""MCP's tasks extension (``io.modelcontextprotocol/tasks``, specification of 2026-07-28), as
the executor speaks it: the client declares it, the server decides per call whether to answer
a task handle instead of a result, and the executor follows the task with ``tasks/get``,
answers its requests for input with ``tasks/update`` and cancels it with ``tasks/cancel``.

The SDK parses a handle through the claim this module's extension registers; the claim hands
the handle back to the executor (``TaskCreated``) rather than resolving it inside the SDK, so
that the executor, which hears inert's stops, follows the task itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, NoReturn

from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp_types import EmptyResult, Request, RequestParams, Result
from pydantic import Field

from ..events import InertError

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The extension's identifier, as clients and servers declare it."""

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]

TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
"""The statuses a task never leaves."""


class CreatedTask(Result):
    """A server's task handle, answered to ``tools/call`` in place of its result."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: TaskStatus
    poll_interval_ms: int | None = Field(default=None, ge=0)


class TaskState(Result):
    """A task as ``tasks/get`` shows it: its status, and by status its final result, its
    JSON-RPC error or the input it waits for (never recorded: they may quote arguments)."""

    task_id: str
    status: TaskStatus
    poll_interval_ms: int | None = Field(default=None, ge=0)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None


class _TaskParams(RequestParams):
    task_id: str


class _UpdateParams(_TaskParams):
    input_responses: dict[str, Any]


class _GetTask(Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: _TaskParams
    # The extension routes its requests by the task's id (the ``Mcp-Name`` header on HTTP).
    name_param = "taskId"


class _UpdateTask(Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: _UpdateParams
    name_param = "taskId"


class _CancelTask(Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: _TaskParams
    name_param = "taskId"


class TaskCreated(InertError):
    """Raised out of ``call_tool`` when the server answered a task handle: the executor
    catches it and follows the task. A client that calls tools itself with ``tasks()`` among
    its extensions sees it too, and follows the handle as it likes."""

    def __init__(self, task: CreatedTask) -> None:
        super().__init__(f"the server made the call a task ({task.status})")
        self.task = task


async def _hand_back(task: CreatedTask, context: ClaimContext) -> NoReturn:
    raise TaskCreated(task)


class _Tasks(ClientExtension):
    identifier = TASKS_EXTENSION

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=_hand_back)]


def tasks() -> ClientExtension:
    """The tasks extension for an ``mcp.Client`` an ``MCPExecutor`` uses:
    ``Client(server, extensions=[tasks()])``. The SDK declares it on 2026-07-28 connections
    only; on 2025-11-25 calls run as plain ``tools/call``."""
    return _Tasks()


async def get_task(session: ClientSession, task_id: str) -> TaskState:
    """The task as the server shows it now (``tasks/get``)."""
    return await session.send_request(_GetTask(params=_TaskParams(task_id=task_id)), TaskState)


async def update_task(session: ClientSession, task_id: str, responses: dict[str, Any]) -> None:
    """Answer the task's requests for input (``tasks/update``): ``responses`` keyed as the
    task's ``inputRequests`` are; the server acknowledges at once, and ``tasks/get`` shows
    what the task does next."""
    params = _UpdateParams(task_id=task_id, input_responses=responses)
    await session.send_request(_UpdateTask(params=params), EmptyResult)


async def cancel_task(session: ClientSession, task_id: str) -> None:
    """Ask the server to cancel the task (``tasks/cancel``); it answers at once, and the task
    may still end otherwise."""
    await session.send_request(_CancelTask(params=_TaskParams(task_id=task_id)), EmptyResult)
