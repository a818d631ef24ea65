"""The toolset wrapper through which a pydantic-ai agent's tools run only when inert dispatches
them: each call is looked up in inert, claimed through its actor, run with the arguments inert
validated (or the person's confirmed edit), stopped when inert asks, and its outcome recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_ai import ApprovalRequired, CallDeferred, RunContext, ToolFailed
from pydantic_ai.toolsets import ToolsetTool, WrapperToolset

from ..events import ClaimRefused
from ..runtime import Dispatch

if TYPE_CHECKING:
    from ._capability import InertTurn


def _plain(value: Any) -> Any:
    """Arguments as the JSON values a tool's validator takes (a dispatch holds read-only ones)."""
    if isinstance(value, Mapping):
        return {key: _plain(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(inner) for inner in value]
    return value


@dataclass
class GatedToolset(WrapperToolset[Any]):
    """Runs the wrapped toolset's calls as inert dispatches them (``InertTurn`` puts it around
    the agent's toolset)."""

    owner: InertTurn | None = None

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        owner = self.owner
        assert owner is not None, "a GatedToolset is made by InertTurn"
        await owner._ensure_turn()
        runtime = owner.runtime
        call = ctx.tool_call_id or ""
        key = owner.key_of(call)
        if key is None:
            raise ToolFailed(
                f"inert holds no call {call!r} of this turn: a call inert did not see streamed"
                " does not run"
            )
        ready = await owner._decided(key)
        if ready is None:
            pending = await runtime.pending_confirmation(key)
            if pending is not None:
                raise ApprovalRequired(
                    metadata={
                        "inert_call": key.stream,
                        "arguments_digest": pending.arguments_digest,
                    }
                )
            raise ToolFailed(owner._refusal(key))
        try:
            dispatch = await runtime.claim(ready, executor=owner.executor)
        except ClaimRefused:
            raise ToolFailed(owner._refusal(key)) from None
        try:
            arguments = tool.args_validator.validate_python(
                _plain(dispatch.arguments), context=ctx.validation_context
            )
        except ValidationError:
            await runtime.fail(dispatch, "invalid_arguments")
            raise ToolFailed("the tool refused the arguments inert validated: not run") from None
        if arguments != tool_args:
            # What pydantic-ai would run is not what inert validated and the person confirmed
            # (a hook rewrote it, or an approval overrode it outside inert): nothing runs.
            await runtime.fail(dispatch, "arguments_changed")
            raise ToolFailed(
                "the arguments pydantic-ai passed differ from those inert dispatched: not run"
            )
        return await self._run(dispatch, name, arguments, ctx, tool)

    async def _run(
        self,
        dispatch: Dispatch,
        name: str,
        arguments: dict[str, Any],
        ctx: RunContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        owner = self.owner
        assert owner is not None
        runtime = owner.runtime
        task = asyncio.ensure_future(self.wrapped.call_tool(name, arguments, ctx, tool))
        stop = asyncio.ensure_future(runtime.wait_for_stop(dispatch))
        try:
            await asyncio.wait((task, stop), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # The run was cancelled: its turn is cancelled in inert, which stops this call,
            # and the outcome is recorded before the cancellation goes on.
            task.cancel()
            await asyncio.shield(owner._stop_cancelled(dispatch, task))
            raise
        finally:
            stop.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait((task,))
            await runtime.stopped(dispatch)
            raise ToolFailed(f"inert stopped the call: {dispatch.stop.reason}")
        error = task.exception()
        if error is None:
            await runtime.complete(dispatch)
            return task.result()
        if isinstance(error, ApprovalRequired | CallDeferred):
            await runtime.fail(dispatch, type(error).__name__)
            raise ToolFailed(
                "the tool deferred a call inert had dispatched already: declare its confirmation"
                " instead, so that inert asks before it runs"
            ) from None
        # The error's type alone: its message may quote the arguments. A ``ModelRetry`` or
        # ``ToolFailed`` goes on to pydantic-ai as the tool raised it; a retry is a new call.
        failure = type(error).__name__
        await runtime.fail(dispatch, failure if _identifier(failure) else "Exception")
        raise error


def _identifier(name: str) -> bool:
    """Whether a class name is an identifier the log records (ASCII, at most 64 long)."""
    return name.isascii() and name.isidentifier() and len(name) <= 64
