"""One inert turn run by the Agents SDK: its agent's stream fed, its tools run through
dispatch, its approvals inert's confirmations, its cancellation inert's."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Mapping
from typing import Any

from agents import (
    Agent,
    CodeInterpreterTool,
    FileSearchTool,
    FunctionTool,
    HostedMCPTool,
    ImageGenerationTool,
    Model,
    MultiProvider,
    RunContextWrapper,
    RunResultStreaming,
    RunState,
    ToolApprovalItem,
    WebSearchTool,
)
from agents.tool_context import ToolContext

from ..actors import ToolDeclaration
from ..actors._places import is_identifier
from ..events import CallKey, ClaimRefused, ConfigurationError, InertError, TurnRef
from ..runtime import AsyncioRuntime, Dispatch, PendingConfirmation
from ._declarations import declaration_from_tool
from ._model import Calls, FedModel

EXECUTOR = "openai-agents"
"""The executor's name in the log's claims of the calls an agent's tools run."""

_HOSTED = (CodeInterpreterTool, FileSearchTool, HostedMCPTool, ImageGenerationTool, WebSearchTool)
"""Tools the provider runs on its side: the adapter records their calls as the provider's own,
and nothing of them runs here."""


class CallNotFed(InertError):
    """The SDK asked for a call inert never saw streamed: the agent's model was replaced on the
    way (a ``RunConfig`` model or provider), or the call came from outside the turn."""


def _plain(value: Any) -> Any:
    """Arguments as plain JSON values (the dispatch holds read-only mappings)."""
    if isinstance(value, Mapping):
        return {key: _plain(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(inner) for inner in value]
    return value


class AgentTurn:
    """An inert turn whose agent the Agents SDK runs; make one with
    [`start`][inert.openai_agents.AgentTurn.start] and run ``turn.agent`` with
    ``Runner.run_streamed``."""

    def __init__(
        self,
        runtime: AsyncioRuntime,
        ref: TurnRef,
        *,
        principal: str,
        agent: Agent[Any],
        declarations: Mapping[str, ToolDeclaration],
    ) -> None:
        self.runtime = runtime
        self.ref = ref
        self.principal = principal
        self.declarations = dict(declarations)
        self._calls = Calls()
        self._running: set[asyncio.Future[Any]] = set()
        model = agent.model
        if not isinstance(model, Model):
            model = MultiProvider().get_model(model)
        tools = [
            self._guarded(tool) if isinstance(tool, FunctionTool) else tool for tool in agent.tools
        ]
        self.agent: Agent[Any] = agent.clone(
            model=FedModel(model, runtime, ref, self._calls), tools=tools
        )
        """The agent to run: a copy of the one given whose model's streams are fed into the
        runtime and whose function tools run through inert's dispatch."""

    @classmethod
    async def start(
        cls,
        runtime: AsyncioRuntime,
        agent: Agent[Any],
        *,
        tenant: str,
        conversation: str,
        turn: str,
        principal: str,
        needs_confirmation: Mapping[str, bool] | None = None,
    ) -> AgentTurn:
        """Start a turn for ``principal`` that offers the agent's function tools, and make the
        agent that runs it.

        Each function tool is declared by ``declaration_from_tool``, its confirmation taken from
        ``needs_confirmation`` (by tool name) where given. The agent's tools must be function
        tools or tools the provider runs (web search, file search, code interpreter, image
        generation, hosted MCP); an agent with handoffs, MCP servers or any other tool that runs
        here outside inert (computer, shell, apply-patch, custom tools) is refused with a
        ``ConfigurationError``: its calls could run without inert."""
        _check_runs_nothing_unguarded(agent)
        overrides = needs_confirmation or {}
        declarations = {
            tool.qualified_name: declaration_from_tool(
                tool, needs_confirmation=overrides.get(tool.qualified_name)
            )
            for tool in agent.tools
            if isinstance(tool, FunctionTool)
        }
        ref = await runtime.start_turn(
            tenant=tenant,
            conversation=conversation,
            turn=turn,
            principal=principal,
            tools=declarations.values(),
        )
        return cls(runtime, ref, principal=principal, agent=agent, declarations=declarations)

    def key(self, call_id: str) -> CallKey | None:
        """The key of the call the model streamed with this call id, if this turn fed one."""
        return self._calls.key(call_id)

    # --- approvals ---

    async def pending(self, item: ToolApprovalItem) -> PendingConfirmation:
        """What the person is asked to confirm for an interruption of the run: the arguments
        inert validated (the ones that will run) and their digest."""
        key = self._key_of(item)
        await self.runtime.settle()
        pending = await self.runtime.pending_confirmation(key)
        if pending is None:
            raise InertError(
                f"call {key.stream!r} is {self.runtime.phase(key).value}, not waiting for"
                " confirmation"
            )
        return pending

    async def approve(
        self,
        state: RunState[Any],
        item: ToolApprovalItem,
        *,
        arguments_digest: str,
        arguments: Mapping[str, Any] | bytes | None = None,
    ) -> None:
        """Confirm the call of an interruption for exactly the arguments with this digest (those
        ``pending`` showed the person), then approve it in the SDK's ``state``. ``arguments``
        edits them, as ``confirm`` does. inert refuses (``ConfirmationRefused``) a digest of
        other arguments, and the state is left as it was."""
        await self.runtime.confirm(
            self._key_of(item),
            principal=self.principal,
            arguments_digest=arguments_digest,
            arguments=arguments,
        )
        state.approve(item)

    async def reject(
        self, state: RunState[Any], item: ToolApprovalItem, *, reason: str = ""
    ) -> None:
        """Deny the call of an interruption (it never runs), then reject it in ``state``: the
        model is told the SDK's rejection message."""
        await self.runtime.deny(self._key_of(item), principal=self.principal, reason=reason)
        state.reject(item)

    def _key_of(self, item: ToolApprovalItem) -> CallKey:
        call_id = item.call_id
        key = None if call_id is None else self._calls.key(call_id)
        if key is None:
            raise CallNotFed(f"the approval of call {call_id!r} names no call this turn streamed")
        return key

    # --- cancellation ---

    async def cancel(self, result: RunResultStreaming, *, reason: str = "") -> None:
        """Cancel the turn in inert, wait for the tools it stopped to end, then cancel the SDK's
        run: no call of the turn not yet dispatched runs, and a running one is asked to stop
        (its task cancelled) and recorded ``stopped``."""
        await self.runtime.cancel_turn(self.ref, principal=self.principal, reason=reason)
        await self.runtime.settle()
        if self._running:
            await asyncio.wait(set(self._running))
        result.cancel()

    # --- tools ---

    def _guarded(self, tool: FunctionTool) -> FunctionTool:
        guarded = copy.copy(tool)
        invoke = guarded.on_invoke_tool

        async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
            return await self._invoke(tool.qualified_name, invoke, context)

        async def needs_approval(
            context: RunContextWrapper[Any], parameters: dict[str, Any], call_id: str
        ) -> bool:
            key = self._calls.key(call_id)
            if key is None:
                # Its run refuses it: nothing to approve.
                return False
            await self.runtime.settle()
            return await self.runtime.pending_confirmation(key) is not None

        guarded.on_invoke_tool = on_invoke_tool
        guarded.needs_approval = needs_approval
        return guarded

    async def _invoke(self, name: str, invoke: Any, context: ToolContext[Any]) -> Any:
        key = self._calls.key(context.tool_call_id)
        if key is None:
            raise CallNotFed(
                f"the SDK asked tool {name!r} to run call {context.tool_call_id!r}, which no"
                " stream of this turn opened: run the turn's agent as it is, with no RunConfig"
                " model or model provider"
            )
        await self.runtime.settle()
        try:
            dispatch = await self.runtime.claim(key, executor=EXECUTOR)
        except ClaimRefused as refused:
            return f"inert did not run this call: {refused}"
        if dispatch.tool != name:
            # The SDK would run another tool than the one inert validated the call for.
            await self.runtime.fail(dispatch, "tool_mismatch")
            return f"inert did not run this call: it was made for tool {dispatch.tool!r}"
        recorded = asyncio.get_running_loop().create_future()
        self._running.add(recorded)
        try:
            return await self._run(dispatch, invoke, context)
        finally:
            recorded.set_result(None)
            self._running.discard(recorded)

    async def _run(self, dispatch: Dispatch, invoke: Any, context: ToolContext[Any]) -> Any:
        arguments = json.dumps(_plain(dispatch.arguments), ensure_ascii=False)
        task = asyncio.ensure_future(invoke(context, arguments))
        stop = asyncio.ensure_future(self.runtime.wait_for_stop(dispatch))
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The SDK cancelled the run under the tool (its ``cancel``, a tool timeout): the
            # tool is stopped here too, and its outcome recorded whatever happens to this task.
            task.cancel()
            stop.cancel()
            await asyncio.shield(self._record_cancelled(dispatch, task))
            raise
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if task.cancelled():
                await self.runtime.stopped(dispatch)
                return f"inert stopped this call: {stop.result().value}"
        stop.cancel()
        try:
            result = task.result()
        except Exception as error:
            name = type(error).__name__
            # A class name is an identifier of Python's, not always of the log's (ASCII, 64 long).
            await self.runtime.fail(dispatch, name if is_identifier(name) else "Exception")
            raise
        await self.runtime.complete(dispatch)
        return result

    async def _record_cancelled(self, dispatch: Dispatch, task: asyncio.Future[Any]) -> None:
        await asyncio.gather(task, return_exceptions=True)
        await self.runtime.settle()
        if dispatch.stop.requested:
            await self.runtime.stopped(dispatch)
        else:
            await self.runtime.fail(dispatch, "run_cancelled")


def _check_runs_nothing_unguarded(agent: Agent[Any]) -> None:
    if agent.handoffs:
        raise ConfigurationError(
            f"agent {agent.name!r} has handoffs, whose agents would run tools outside the turn:"
            " run each agent as a turn of its own"
        )
    if agent.mcp_servers:
        raise ConfigurationError(
            f"agent {agent.name!r} has MCP servers, whose tools the SDK would run outside inert:"
            " run them through inert.mcp.MCPExecutor"
        )
    for tool in agent.tools:
        if not isinstance(tool, (FunctionTool, *_HOSTED)):
            raise ConfigurationError(
                f"agent {agent.name!r} has tool {getattr(tool, 'name', tool)!r} of type"
                f" {type(tool).__name__}, which runs here outside inert's dispatch"
            )
