"""An MCP server of the tests' own, made with the official SDK's server side.

``python tests/mcp_server.py stdio JOURNAL`` serves on stdin and stdout; ``python
tests/mcp_server.py http JOURNAL PORT`` serves Streamable HTTP on ``127.0.0.1:PORT/mcp``. Each
tool appends what it did to JOURNAL, one JSON line per step, with the idempotency key the
request carried: the tests read there what ran on the server, how often, and with what.

The server speaks MCP's tasks extension (``io.modelcontextprotocol/tasks``, 2026-07-28) for the
tools named ``task_*``: to a client that declares the extension, a call of one of them answers
a task handle at once and runs in the background, polled with ``tasks/get``, answered with
``tasks/update`` where it asks for input, and cancelled with ``tasks/cancel`` (which the journal
records, as ``tasks/update`` and ``tasks/cancel``, under the call's key; the ``task_stubborn``
tool's task acknowledges a cancel and works on).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, RequestParams, ToolAnnotations

from inert.mcp import IDEMPOTENCY_KEY

REFUSAL_CODE = 4242
"""The JSON-RPC error code of the ``refuse`` tool."""

TASKS = "io.modelcontextprotocol/tasks"
"""The tasks extension's identifier."""
TASK_FAILURE_CODE = 4343
"""The JSON-RPC error code a failed task of ``task_refuse`` carries."""
_STAMP = "2026-01-01T00:00:00Z"


@dataclass
class _Task:
    """One task's state on the server."""

    key: str | None
    tool: str
    status: str = "working"
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    answers: dict[str, Any] = field(default_factory=dict)
    answered: anyio.Event = field(default_factory=anyio.Event)


_tasks: dict[str, _Task] = {}
_runner: list[anyio.abc.TaskGroup] = []
_current: ContextVar[_Task] = ContextVar("_current")


def journal(entry: dict[str, Any]) -> None:
    """Append one entry to the journal."""
    with Path(sys.argv[2]).open("a") as file:
        file.write(json.dumps(entry) + "\n")


class TaskParams(RequestParams):
    """The params of ``tasks/get`` and ``tasks/cancel``."""

    task_id: str


class UpdateParams(TaskParams):
    """The params of ``tasks/update``."""

    input_responses: dict[str, Any]


def _shown(task_id: str, task: _Task) -> dict[str, Any]:
    """The task as ``tasks/get`` shows it: with its result, error or input requests."""
    shown: dict[str, Any] = {
        "taskId": task_id,
        "status": task.status,
        "createdAt": _STAMP,
        "lastUpdatedAt": _STAMP,
        "ttlMs": None,
        "pollIntervalMs": 50,
    }
    payload = {
        "result": task.result,
        "error": task.error,
        "inputRequests": task.input_requests,
    }
    return {**shown, **{name: value for name, value in payload.items() if value is not None}}


def _known(params: TaskParams) -> tuple[str, _Task]:
    task = _tasks.get(params.task_id)
    if task is None:
        raise MCPError(-32602, "Failed to retrieve task: Task not found")
    return params.task_id, task


async def _get(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
    return _shown(*_known(params))


async def _update(ctx: ServerRequestContext[Any, Any], params: UpdateParams) -> HandlerResult:
    _, task = _known(params)
    outstanding = task.input_requests or {}
    if task.status != "input_required" or not set(params.input_responses) <= set(outstanding):
        raise MCPError(-32602, "no such outstanding input request")
    journal({"key": task.key, "tool": task.tool, "step": "tasks/update"})
    task.answers.update(params.input_responses)
    task.input_requests = None
    task.status = "working"
    task.answered.set()
    return {}


async def _cancel(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> HandlerResult:
    _, task = _known(params)
    journal({"key": task.key, "tool": task.tool, "step": "tasks/cancel"})
    # Cancellation is cooperative: a stubborn task acknowledges it and works on.
    if task.tool != "task_stubborn":
        task.scope.cancel()
    return {}


class Tasks(Extension):
    """The tasks extension, for the ``task_*`` tools of a client that declares it."""

    identifier = TASKS

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding(method="tasks/get", params_type=TaskParams, handler=_get),
            MethodBinding(method="tasks/update", params_type=UpdateParams, handler=_update),
            MethodBinding(method="tasks/cancel", params_type=TaskParams, handler=_cancel),
        ]

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        capabilities = ctx.session.client_capabilities
        declared = capabilities.extensions if capabilities is not None else None
        if not params.name.startswith("task_") or not declared or TASKS not in declared:
            return await call_next(ctx)
        task_id = uuid.uuid4().hex
        meta = dict(params.meta or {})
        key = meta.get(IDEMPOTENCY_KEY)
        task = _tasks[task_id] = _Task(key=key if isinstance(key, str) else None, tool=params.name)

        async def run() -> None:
            _current.set(task)
            with task.scope:
                try:
                    result = await call_next(ctx)
                except MCPError as error:
                    task.error = {"code": error.code, "message": error.message}
                    task.status = "failed"
                    return
                assert result is not None
                task.result = (
                    result
                    if isinstance(result, dict)
                    else result.model_dump(by_alias=True, mode="json", exclude_none=True)
                )
                task.status = "completed"
            if task.scope.cancelled_caught:
                task.status = "cancelled"

        _runner[0].start_soon(run)
        return {"resultType": "task", **_shown(task_id, task)}


@asynccontextmanager
async def running_tasks(app: Any) -> AsyncIterator[dict[str, Any]]:
    """A task group for the tasks the server runs past their ``tools/call``."""
    async with anyio.create_task_group() as group:
        _runner.append(group)
        yield {}
        group.cancel_scope.cancel()


server = MCPServer("inert-tests", log_level="ERROR", extensions=[Tasks()], lifespan=running_tasks)


def note(ctx: Context, tool: str, step: str, **more: Any) -> None:
    """Append one step of a tool's run to the journal, named by the call's idempotency key."""
    meta = dict(ctx.request_context.meta or {})
    journal({"key": meta.get(IDEMPOTENCY_KEY), "tool": tool, "step": step, **more})


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def echo(text: str, ctx: Context) -> str:
    """Say the text back; records the request's ``_meta`` and arguments."""
    meta = dict(ctx.request_context.meta or {})
    note(ctx, "echo", "ran", meta=meta, arguments={"text": text})
    return text


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
async def append_note(text: str, ctx: Context) -> str:
    """Add a note (additive: never destroys)."""
    note(ctx, "append_note", "ran")
    return "noted"


@server.tool()
async def wait(seconds: float, ctx: Context) -> str:
    """Sleep, recording whether the sleep ended or was cancelled."""
    note(ctx, "wait", "started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        note(ctx, "wait", "cancelled")
        raise
    note(ctx, "wait", "finished")
    return "waited"


@server.tool()
async def broken(secret: str, ctx: Context) -> str:
    """Fail with an exception whose message holds the argument (an error result)."""
    note(ctx, "broken", "ran")
    raise ValueError(f"cannot use {secret}")


@server.tool()
async def refuse(secret: str, ctx: Context) -> str:
    """Answer a JSON-RPC error whose message holds the argument."""
    note(ctx, "refuse", "ran")
    raise MCPError(REFUSAL_CODE, f"refused {secret}")


@server.tool()
async def crash(ctx: Context) -> str:
    """Exit the server's process in the middle of the call, answering nothing."""
    note(ctx, "crash", "started")
    os._exit(1)


@server.tool()
async def retire(name: str, ctx: Context) -> str:
    """Stop serving the named tool (a release that renamed or removed it)."""
    server.remove_tool(name)
    note(ctx, "retire", "ran")
    return "retired"


@server.tool()
async def task_echo(text: str, ctx: Context) -> str:
    """Say the text back, as a task."""
    note(ctx, "task_echo", "ran")
    return text


@server.tool()
async def task_wait(seconds: float, ctx: Context) -> str:
    """Sleep as a task, recording whether the sleep ended or was cancelled."""
    note(ctx, "task_wait", "started")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        note(ctx, "task_wait", "cancelled")
        raise
    note(ctx, "task_wait", "finished")
    return "waited"


@server.tool()
async def task_stubborn(seconds: float, ctx: Context) -> str:
    """Sleep as a task that ``tasks/cancel`` does not cancel."""
    note(ctx, "task_stubborn", "started")
    await anyio.sleep(seconds)
    note(ctx, "task_stubborn", "finished")
    return "done anyway"


@server.tool()
async def task_forget(ctx: Context) -> str:
    """Work as a task the server then forgets (as one whose time to live has passed)."""
    note(ctx, "task_forget", "started")
    _tasks.pop(next(key for key, task in _tasks.items() if task is _current.get()))
    await anyio.sleep_forever()
    return "never"


@server.tool()
async def task_refuse(secret: str, ctx: Context) -> str:
    """Fail the task with a JSON-RPC error whose message holds the argument."""
    note(ctx, "task_refuse", "ran")
    raise MCPError(TASK_FAILURE_CODE, f"refused {secret}")


@server.tool()
async def task_ask(question: str, ctx: Context) -> str:
    """Ask the client for input mid-task (``input_required``), wait for it and answer what it
    was (the journal records that it came, and its content)."""
    note(ctx, "task_ask", "started")
    task = _current.get()
    task.input_requests = {
        "answer": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": question,
                "requestedSchema": {"type": "object", "properties": {"answer": {"type": "string"}}},
            },
        }
    }
    task.status = "input_required"
    try:
        await task.answered.wait()
    except anyio.get_cancelled_exc_class():
        note(ctx, "task_ask", "cancelled")
        raise
    answer = task.answers["answer"]
    note(ctx, "task_ask", "answered", answer=answer)
    return str(answer.get("content", {}).get("answer", ""))


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run()
    else:
        server.run("streamable-http", port=int(sys.argv[3]))
