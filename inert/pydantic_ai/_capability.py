"""``InertTurn``: one inert turn served to a pydantic-ai agent, as a capability of its runs.

It starts the turn (or takes up one started before, for the same principal) with the agent's
tools as declarations, feeds the model's streamed responses to inert as they come (through the
run's event stream, which pydantic-ai then streams for every way of running the agent), and
puts its ``GatedToolset`` around the agent's toolset so that a tool runs only when inert
dispatches the call. A run cancelled from outside cancels the turn: inert then stops the call
that runs and none of the others runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, RunCancelled, ToolDenied
from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
from pydantic_ai.messages import AgentStreamEvent, ModelResponse
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext, ToolApproved, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset

from ..actors import Phase, ToolDeclaration
from ..events import CallKey, RefusedError, ResponseEndReason, TurnRef
from ..runtime import AsyncioRuntime, Dispatch, PendingConfirmation, ReadyCall
from ._declarations import declaration_from_tool_def
from ._stream import FINISH_REASONS, ModelStreamAdapter
from ._toolset import GatedToolset

Decision = bool | Mapping[str, Any]
"""The person's answer to a confirmation: ``True`` to run the call as shown, ``False`` to
refuse it, or the arguments as they edited them."""


@dataclass
class InertTurn(AbstractCapability[Any]):
    """One inert turn for a pydantic-ai agent: pass it to each run of the turn
    (``agent.run(..., capabilities=[turn])``, or the agent's own list for an agent per turn).

    ``runtime`` is the asyncio facade on the agent's loop; ``tenant``, ``conversation``,
    ``turn`` and ``principal`` name the turn and the authenticated person it belongs to.
    ``declare`` makes each tool definition a declaration (confirmation, one action per intent);
    ``executor`` is the name the claims carry in the log.
    """

    runtime: AsyncioRuntime
    _: KW_ONLY
    tenant: str
    conversation: str
    turn: str
    principal: str
    declare: Callable[[ToolDefinition], ToolDeclaration] = declaration_from_tool_def
    executor: str = "pydantic-ai"
    _adapter: ModelStreamAdapter = field(init=False, repr=False)
    _started: bool = field(default=False, init=False, repr=False)
    _finish: dict[str, str | None] = field(default_factory=dict, init=False, repr=False)
    _ends: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    """Set when a response's stream ends (and replaced): a call may then be decided."""

    def __post_init__(self) -> None:
        self._adapter = ModelStreamAdapter(self.ref)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        return None  # holds a live runtime: not part of an agent's spec

    @property
    def ref(self) -> TurnRef:
        """The turn, as inert names it."""
        return TurnRef(tenant=self.tenant, conversation=self.conversation, turn=self.turn)

    # --- the turn ---

    async def _ensure_turn(self, tools: list[ToolDefinition] | None = None) -> None:
        """Start the turn with these tools, or take up the turn started before for the same
        principal (a run resumed with the person's approvals, or a turn the application
        started itself)."""
        if self._started:
            return
        owner = self.runtime.turn_principal(self.ref)
        if owner is None:
            if tools is None:
                raise RefusedError(
                    f"turn {self.ref.stream!r} was never started: its first run starts it"
                )
            try:
                await self.runtime.start_turn(
                    tenant=self.tenant,
                    conversation=self.conversation,
                    turn=self.turn,
                    principal=self.principal,
                    tools=[self.declare(tool) for tool in tools],
                )
            except RefusedError:
                # Another run of the turn started it meanwhile: take it up as below, once the
                # views have read its start.
                await self.runtime.settle()
                owner = self.runtime.turn_principal(self.ref)
                if owner is None:
                    raise
        if owner is not None and owner != self.principal:
            raise RefusedError(f"turn {self.ref.stream!r} belongs to another principal")
        self._started = True

    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        # The turn offers the tools of its first step: a tool renamed or changed later is not
        # what the turn offered, and its calls fail in inert.
        await self._ensure_turn(tool_defs)
        return tool_defs

    async def prepare_output_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        # Output tools give the run's answer and no toolset runs them: their calls are not fed.
        self._adapter.outputs.update(tool.name for tool in tool_defs)
        return tool_defs

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        try:
            return await handler()
        except (asyncio.CancelledError, RunCancelled):
            await asyncio.shield(self._cancel("run_cancelled"))
            raise

    async def _cancel(self, reason: str) -> None:
        if self.runtime.turn_principal(self.ref) is not None:
            await self.runtime.cancel_turn(self.ref, principal=self.principal, reason=reason)

    async def _stop_cancelled(self, dispatch: Dispatch, task: asyncio.Future[Any]) -> None:
        """A run cancelled while its call ran: the turn is cancelled (inert asks the call to
        stop), the tool's task ends, and the call is recorded stopped."""
        await self._cancel("run_cancelled")
        await asyncio.wait((task,))
        await self.runtime.stopped(dispatch)

    # --- the model's streamed responses ---

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        self._finish[f"{ctx.run_id}:{ctx.run_step}:"] = response.finish_reason
        return response

    async def wrap_run_event_stream(
        self, ctx: RunContext[Any], *, stream: AsyncIterable[AgentStreamEvent]
    ) -> AsyncIterator[AgentStreamEvent]:
        step = f"{ctx.run_id}:{ctx.run_step}:"
        completed = False
        try:
            async for event in stream:
                events = self._adapter.feed_event(event, response=f"{step}1")
                if events:
                    await self.runtime.feed(events)
                yield event
            completed = True
        finally:
            reason = ResponseEndReason.CANCELLED
            if completed:
                finish = self._finish.pop(step, None)
                reason = FINISH_REASONS.get(finish, ResponseEndReason.COMPLETED)
            ended = [
                event
                for response in self._adapter.open_responses()
                if response.startswith(step)
                for event in self._adapter.end(response, reason)
            ]
            if ended:
                await asyncio.shield(self.runtime.feed(ended))
            ends, self._ends = self._ends, asyncio.Event()
            ends.set()

    # --- the calls ---

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return GatedToolset(toolset, owner=self)

    def key_of(self, call: str) -> CallKey | None:
        """The key of the call of this turn with this tool call id (the one opened last)."""
        key = self._adapter.keys.get(call)
        if key is not None:
            return key
        # A call streamed in an earlier run of the turn, in another process: the log has it.
        found = [
            row
            for row in self.runtime.ledger.rows()
            if row.call == call
            and (row.tenant, row.conversation, row.turn)
            == (self.tenant, self.conversation, self.turn)
        ]
        if len(found) != 1:
            return None
        row = found[0]
        return CallKey(
            tenant=row.tenant,
            conversation=row.conversation,
            turn=row.turn,
            response=row.response,
            item=row.item,
            call=row.call,
        )

    async def _decided(self, key: CallKey) -> ReadyCall | None:
        """The call once inert has decided it: ready to claim, or ``None`` (waiting for the
        person, or ended, or never finished). Waits while its response still streams."""
        while True:
            ends = self._ends
            await self.runtime.settle()
            ready = self.runtime.ready_call(key)
            if ready is not None:
                return ready
            phase = self.runtime.phase(key)
            if phase in (Phase.DISPATCHED, Phase.CANCELLED, Phase.FAILED):
                return None
            if await self.runtime.pending_confirmation(key) is not None:
                return None
            if not self._adapter.streaming(key.response):
                return None
            await ends.wait()

    def _refusal(self, key: CallKey) -> str:
        """What the model is told of a call inert does not run (no argument values)."""
        row = self.runtime.ledger.row(key)
        if row is None:
            return "inert took no such call (its turn may have ended): not run"
        if row.state is Phase.DISPATCHED:
            shown = f" ({row.outcome})" if row.outcome is not None else ""
            return f"inert dispatched this call already{shown}: it runs once"
        if row.state in (Phase.CANCELLED, Phase.FAILED):
            return f"inert {row.state} this call ({row.terminal_reason}): not run"
        return f"inert has not finished this call ({row.state}): not run"

    # --- confirmation ---

    async def approve(
        self,
        requests: DeferredToolRequests,
        decide: Callable[[PendingConfirmation], Awaitable[Decision]],
    ) -> DeferredToolResults:
        """Ask the person about each call pydantic-ai holds for approval, and give the answers
        to both: inert's confirmation bound to the digest of the arguments shown (or the edit),
        and the ``DeferredToolResults`` to resume the run with. A call inert is not waiting to
        have confirmed is denied, and the person is not asked."""
        results = DeferredToolResults()
        for call in requests.approvals:
            key = self.key_of(call.tool_call_id)
            pending = None if key is None else await self.runtime.pending_confirmation(key)
            if key is None or pending is None:
                refusal = "inert holds no such call" if key is None else self._refusal(key)
                results.approvals[call.tool_call_id] = ToolDenied(refusal)
                continue
            decision = await decide(pending)
            if decision is False:
                await self.runtime.deny(key, principal=self.principal, reason="denied")
                results.approvals[call.tool_call_id] = ToolDenied()
                continue
            edit = None if decision is True else dict(decision)
            await self.runtime.confirm(
                key,
                principal=self.principal,
                arguments_digest=pending.arguments_digest,
                arguments=edit,
            )
            results.approvals[call.tool_call_id] = (
                True if edit is None else ToolApproved(override_args=edit)
            )
        return results
