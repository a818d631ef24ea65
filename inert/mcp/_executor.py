"""Ready calls run on an MCP server: claimed through their actor, sent with ``tools/call`` and
their outcome recorded as the server answered.

The call carries the validated arguments alone (the confirmed edit where the person edited
them), and in its ``_meta`` the call key as an idempotency key and the call's W3C trace
context. A stop request cancels the request (the SDK sends ``notifications/cancelled``, or
closes the request's stream on 2026-07-28 Streamable HTTP); a deadline does the same to a
server that does not answer. A call the server makes a task (MCP's tasks extension) is
followed to its end, and cancelled with ``tasks/cancel``, as ``TaskFollower`` says. A
connection that breaks mid-call is not reported: whether the tool ran is unknown, and the next
restart records the call ``outcome_unknown``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Mapping
from typing import Any, cast

import anyio
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, RequestParamsMeta, Tool
from pydantic import ValidationError

from ..actors import ToolDeclaration
from ..events import CallKey, ClaimRefused, InertError
from ..runtime import Dispatch, ReadyCall
from ._declarations import ConfirmationRule, confirm_unless_harmless, declaration_from_tool
from ._following import TaskFollower
from ._outcome import Outcome, Runtime, ServerRun
from ._tasks import CreatedTask, TaskCreated

IDEMPOTENCY_KEY = "inert/idempotency-key"
"""The ``_meta`` key of a call's idempotency key: its call key's stream name, the same for
every request of the call (a convention of this integration: a server may run a resent call
again, which inert itself never sends)."""

DEFAULT_INPUT_LIFETIME = 600.0
"""Seconds the person has to answer a task's request for input, where the executor asks
(``ask_person``), within the call's deadline."""

DEFAULT_DEADLINE = 300.0
"""Seconds a server has to answer a call before the request is cancelled and the call
recorded failed ``deadline_exceeded``."""

_LISTING_PAGES = 100
"""The most pages of ``tools/list`` read: a server whose cursor never ends cannot hang a read."""


class ServerError(InertError):
    """An MCP server could not be asked: its connection broke or closed, or it answered a
    request with a JSON-RPC error (``code``; never its message, which may quote arguments)."""

    def __init__(self, what: str, code: int | None = None) -> None:
        super().__init__(what if code is None else f"{what} (JSON-RPC error {code})")
        self.code = code


def call_meta(dispatch: Dispatch) -> RequestParamsMeta:
    """The ``_meta`` a call's ``tools/call`` carries: its idempotency key and, where the
    runtime makes spans, the W3C context of the call's span (``traceparent``,
    ``tracestate``), so that the server's work continues the call's trace."""
    meta: dict[str, Any] = {IDEMPOTENCY_KEY: dispatch.key.stream}
    if dispatch.trace is not None:
        meta["traceparent"] = dispatch.trace.traceparent
        if dispatch.trace.tracestate:
            meta["tracestate"] = dispatch.trace.tracestate
    # An open map (extra items of any key), which mypy does not read from its TypedDict.
    return cast(RequestParamsMeta, meta)


def _plain(value: Any) -> Any:
    """Arguments as JSON values the SDK sends (the dispatch holds read-only mappings)."""
    if isinstance(value, Mapping):
        return {key: _plain(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(inner) for inner in value]
    return value


class MCPExecutor:
    """Runs the ready calls of the tools an MCP server serves on that server.

    ``client`` is an entered ``mcp.Client`` (stdio or Streamable HTTP). ``confirm`` decides
    which tools' calls wait for the person's confirmation (see ``confirm_unless_harmless``);
    ``deadline`` bounds each call (seconds, ``None`` for none); ``name`` is the executor's name
    in the log's claims.

    ``ask_person``: a task that asks for input (``input_required``) asks the call's principal
    through the runtime (``pending_input``, then ``give_input`` or ``deny_input``), who has
    ``input_lifetime`` seconds to answer (within the deadline). Off by default: an embedding
    that shows no pending input would keep the task waiting on its server until the
    deadline, so by default the task is cancelled and the call fails ``input_required``.
    """

    def __init__(
        self,
        client: Client,
        *,
        confirm: ConfirmationRule = confirm_unless_harmless,
        deadline: float | None = DEFAULT_DEADLINE,
        name: str = "mcp",
        ask_person: bool = False,
        input_lifetime: float = DEFAULT_INPUT_LIFETIME,
    ) -> None:
        self.client = client
        self.confirm = confirm
        self.deadline = deadline
        self.name = name
        self.ask_person = ask_person
        self.input_lifetime = input_lifetime
        self._served: set[str] = set()

    async def declarations(self) -> list[ToolDeclaration]:
        """The server's tools as declarations, read now with ``tools/list`` (past any cache):
        register them with the runtime, and offer them to the turn they were read for."""
        declarations = [
            declaration_from_tool(tool, confirm=self.confirm) for tool in await self._listed()
        ]
        self._served.update(declaration.name for declaration in declarations)
        return declarations

    def serves(self, tool: str) -> bool:
        """Whether the server listed this tool when ``declarations`` last read it."""
        return tool in self._served

    async def _listed(self) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        try:
            for _ in range(_LISTING_PAGES):
                page = await self.client.list_tools(cursor=cursor, cache_mode="refresh")
                tools += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    break
        except MCPError as error:
            raise ServerError("the MCP server refused tools/list", error.code) from None
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, ValidationError):
            raise ServerError("the MCP server's tools/list could not be read") from None
        return tools

    async def run(self, runtime: Runtime, call: CallKey | ReadyCall) -> ServerRun:
        """Claim a ready call, run it on the server and record its outcome.

        Before the request, the server's listing is read again: a tool it no longer lists, or
        lists with another declaration than the turn offered (renamed, its schema or its
        annotations changed), is not called, and the call fails ``tool_changed``
        (``server_unavailable`` where the listing cannot be read within the deadline).
        ``ClaimRefused`` (from the claim) is raised as the runtime raises it.
        """
        dispatch = await runtime.claim(call, executor=self.name)
        deadline = math.inf if self.deadline is None else self.deadline
        try:
            with anyio.fail_after(deadline):
                changed = await self._changed(dispatch)
        except (ServerError, TimeoutError):
            # Nothing was sent: the call did not run.
            await runtime.fail(dispatch, "server_unavailable")
            return ServerRun(dispatch=dispatch, outcome=Outcome.FAILED, error="server_unavailable")
        if changed:
            await runtime.fail(dispatch, "tool_changed")
            return ServerRun(dispatch=dispatch, outcome=Outcome.FAILED, error="tool_changed")
        if dispatch.stop.requested:
            # Asked to stop before anything was sent: nothing is.
            await runtime.stopped(dispatch)
            return ServerRun(dispatch=dispatch, outcome=Outcome.STOPPED)
        return await self._call(runtime, dispatch, deadline)

    async def _changed(self, dispatch: Dispatch) -> bool:
        listed = {tool.name: tool for tool in await self._listed()}
        tool = listed.get(dispatch.tool)
        if tool is None:
            return True
        return declaration_from_tool(tool, confirm=self.confirm).digest != dispatch.tool_digest

    async def _call(self, runtime: Runtime, dispatch: Dispatch, deadline: float) -> ServerRun:
        result: CallToolResult | None = None
        stopped = False

        async def stop_when_asked(scope: anyio.CancelScope) -> None:
            nonlocal stopped
            await runtime.wait_for_stop(dispatch)
            stopped = True
            scope.cancel()

        refused: MCPError | None = None
        created: CreatedTask | None = None
        lost = invalid = False
        started = anyio.current_time()
        async with anyio.create_task_group() as group:
            with anyio.move_on_after(deadline) as call_scope:
                group.start_soon(stop_when_asked, call_scope)
                try:
                    result = await self.client.call_tool(
                        dispatch.tool, _plain(dispatch.arguments), meta=call_meta(dispatch)
                    )
                except TaskCreated as handle:
                    created = handle.task
                except MCPError as error:
                    refused = error
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    lost = True
                except (ValidationError, RuntimeError):
                    # The SDK's refusals of what the server answered (off the protocol, off the
                    # tool's output schema, input asked past its rounds, an extension's shape):
                    # their messages quote the values, so only the kind is kept.
                    invalid = True
            group.cancel_scope.cancel()
        if created is not None:
            lifetime = self.input_lifetime if self.ask_person else None
            follow = TaskFollower(self.client, runtime, dispatch, created, input_lifetime=lifetime)
            return await follow.run(started + deadline)
        if lost or (refused is not None and refused.code == CONNECTION_CLOSED):
            return ServerRun(dispatch=dispatch, outcome=Outcome.UNREPORTED)
        if invalid:
            await runtime.fail(dispatch, "invalid_result")
            return ServerRun(dispatch=dispatch, outcome=Outcome.FAILED, error="invalid_result")
        if refused is not None:
            # The code alone: the message may quote the arguments.
            failure = f"mcp_error:{refused.code}"
            await runtime.fail(dispatch, failure)
            return ServerRun(dispatch=dispatch, outcome=Outcome.FAILED, error=failure)
        if result is not None:
            if result.is_error:
                await runtime.fail(dispatch, "tool_error")
                return ServerRun(
                    dispatch=dispatch, outcome=Outcome.FAILED, error="tool_error", result=result
                )
            await runtime.complete(dispatch)
            return ServerRun(dispatch=dispatch, outcome=Outcome.COMPLETED, result=result)
        if stopped:
            await runtime.stopped(dispatch)
            return ServerRun(dispatch=dispatch, outcome=Outcome.STOPPED)
        await runtime.fail(dispatch, "deadline_exceeded")
        return ServerRun(dispatch=dispatch, outcome=Outcome.FAILED, error="deadline_exceeded")

    async def serve(self, runtime: Runtime, *, tools: Collection[str] | None = None) -> None:
        """Run every ready call of the server's tools (``tools``, by default those
        ``declarations`` read), each once and concurrently, until cancelled."""
        names = set(self._served if tools is None else tools)
        async with anyio.create_task_group() as group:
            async for ready in runtime.ready_calls():
                if ready.tool in names:
                    group.start_soon(self._run_claimable, runtime, ready)

    async def _run_claimable(self, runtime: Runtime, ready: ReadyCall) -> None:
        # A call cancelled or claimed elsewhere since it was ready is not this loop's to run.
        with contextlib.suppress(ClaimRefused):
            await self.run(runtime, ready)
