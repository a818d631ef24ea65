"""Ready calls run on MCP servers (the ``mcp`` extra: ``pip install 'inert[mcp]'``).

``MCPExecutor`` reads an MCP server's tools as declarations (``tools/list``) and runs the
ready calls of those tools there (``tools/call``), recording each outcome as the server
answered, following the call as a task where the server makes it one (MCP's tasks extension:
give the client ``extensions=[tasks()]``); the documentation's page on MCP servers says what it
guarantees and what it cannot.
"""

from ..events import ConfigurationError

try:
    from ._declarations import ConfirmationRule, confirm_unless_harmless, declaration_from_tool
    from ._executor import (
        DEFAULT_DEADLINE,
        DEFAULT_INPUT_LIFETIME,
        IDEMPOTENCY_KEY,
        MCPExecutor,
        ServerError,
        call_meta,
    )
    from ._following import CANCEL_GRACE
    from ._outcome import Outcome, ServerRun
    from ._tasks import TASKS_EXTENSION, TaskCreated, tasks
except ModuleNotFoundError as error:
    # The SDK is an optional dependency: say which extra brings it, not which module is missing.
    if error.name is None or error.name.split(".")[0] not in {"mcp", "mcp_types"}:
        raise
    raise ConfigurationError(
        f"inert.mcp needs the MCP SDK: pip install 'inert[mcp]' ({error})"
    ) from None

__all__ = [
    "CANCEL_GRACE",
    "DEFAULT_DEADLINE",
    "DEFAULT_INPUT_LIFETIME",
    "IDEMPOTENCY_KEY",
    "TASKS_EXTENSION",
    "ConfirmationRule",
    "MCPExecutor",
    "Outcome",
    "ServerError",
    "ServerRun",
    "TaskCreated",
    "call_meta",
    "confirm_unless_harmless",
    "declaration_from_tool",
    "tasks",
]
