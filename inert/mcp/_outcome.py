"""What the executor records of a call's run on an MCP server, and what it needs of a runtime."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol

from attrs import frozen
from mcp_types import CallToolResult

from ..events import CallKey, CancelReason
from ..runtime import Dispatch, InputAnswer, ReadyCall


class Outcome(enum.Enum):
    """How a call's run on the server ended, as this executor recorded it."""

    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    UNREPORTED = "unreported"
    """The connection broke mid-call: nothing was recorded, a restart records the call
    ``outcome_unknown``."""


@frozen(kw_only=True)
class ServerRun:
    """One call run on an MCP server: its dispatch, the outcome recorded, the error recorded
    with a failure, the server's result where it answered one (for the model), and the task's
    id where the server ran the call as a task."""

    dispatch: Dispatch
    outcome: Outcome
    error: str = ""
    result: CallToolResult | None = None
    task_id: str | None = None
    """The server's task handle, where the server made the call a task."""


class Runtime(Protocol):
    """What running a call needs of a runtime: the Trio one or its asyncio facade."""

    async def claim(self, call: CallKey | ReadyCall, *, executor: str) -> Dispatch: ...

    async def complete(self, dispatch: Dispatch) -> None: ...

    async def fail(self, dispatch: Dispatch, error: str = "") -> None: ...

    async def stopped(self, dispatch: Dispatch) -> None: ...

    async def wait_for_stop(self, dispatch: Dispatch) -> CancelReason: ...

    async def note_task(self, dispatch: Dispatch, task_id: str) -> None: ...

    async def ask_for_input(
        self, dispatch: Dispatch, request: Mapping[str, Any], *, expires_in: timedelta
    ) -> InputAnswer | None: ...

    def ready_calls(self) -> Any: ...
