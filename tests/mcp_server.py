"""An MCP server of the tests' own, made with the official SDK's server side.

``python tests/mcp_server.py stdio JOURNAL`` serves on stdin and stdout; ``python
tests/mcp_server.py http JOURNAL PORT`` serves Streamable HTTP on ``127.0.0.1:PORT/mcp``. Each
tool appends what it did to JOURNAL, one JSON line per step, with the idempotency key the
request carried: the tests read there what ran on the server, how often, and with what.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations

from inert.mcp import IDEMPOTENCY_KEY

REFUSAL_CODE = 4242
"""The JSON-RPC error code of the ``refuse`` tool."""

server = MCPServer("inert-tests", log_level="ERROR")


def note(ctx: Context, tool: str, step: str, **more: Any) -> None:
    """Append one step of a tool's run to the journal, named by the call's idempotency key."""
    meta = dict(ctx.request_context.meta or {})
    entry = {"key": meta.get(IDEMPOTENCY_KEY), "tool": tool, "step": step, **more}
    with Path(sys.argv[2]).open("a") as journal:
        journal.write(json.dumps(entry) + "\n")


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


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run()
    else:
        server.run("streamable-http", port=int(sys.argv[3]))
