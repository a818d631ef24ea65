"""What the tests of the MCP executor share: a client of the tests' own MCP server
(``tests/mcp_server.py``) over stdio or Streamable HTTP, readers of its journal, and helpers
that make a call ready as a model would stream it.

The fixtures that start the server are in ``tests/integrations/conftest.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import pytest
import trio
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_fixtures import SERVER

from inert import (
    ArgumentsAppended,
    AsyncioRuntime,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    open_runtime,
)
from inert.mcp import MCPExecutor, ServerRun

PRINCIPAL = "user:alice"


@asynccontextmanager
async def connected(
    transport: str,
    journal: Path,
    url: str | None,
    errlog: TextIO,
    extensions: Sequence[ClientExtension] = (),
) -> AsyncIterator[Client]:
    """A client of the server, over the transport and protocol version asked for."""
    mode = "legacy" if transport.endswith("2025-11-25") else "auto"
    if url is not None:
        async with Client(url, mode=mode, extensions=extensions) as client:
            yield client
        return
    command = [str(SERVER), "stdio", str(journal)]
    params = StdioServerParameters(command=sys.executable, args=command)
    async with Client(
        stdio_client(params, errlog=errlog), mode=mode, extensions=extensions
    ) as client:
        yield client


def steps(journal: Path, key: CallKey) -> list[dict[str, Any]]:
    """What the server's tools recorded for one call."""
    if not journal.exists():
        return []
    entries = [json.loads(line) for line in journal.read_text().splitlines()]
    return [entry for entry in entries if entry["key"] == key.stream]


async def until_step(journal: Path, key: CallKey, step: str, within: float = 20.0) -> None:
    """Until the server has recorded this step of the call."""
    with trio.fail_after(within):
        # Another process writes the journal: nothing here could set an event.
        while not any(entry["step"] == step for entry in steps(journal, key)):  # noqa: ASYNC110
            await trio.sleep(0.05)


async def run_cancelled_midway(
    executor: MCPExecutor, runtime: Runtime, key: CallKey, journal: Path
) -> ServerRun:
    """Run the call on the server, and cancel its turn once the server has started it: what
    the executor reports."""
    runs: list[ServerRun] = []
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            runs.append(await executor.run(runtime, key))

        nursery.start_soon(run)
        await until_step(journal, key, "started")
        await runtime.cancel_turn(key.turn_ref, principal=PRINCIPAL)
    return runs[0]


async def check_a_restart_mid_run(
    client: Client, journal: Path, tmp_path: Path, tool: str
) -> CallKey:
    """Run a call of ``tool`` (one that waits) and stop the process following it once the
    server has started it: the restarted runtime records the call ``outcome_unknown``, and
    the executor never sends it again. The call."""
    log = f"sqlite:///{tmp_path / 'inert.db'}"
    executor = MCPExecutor(client)
    tools = await executor.declarations()
    async with open_runtime(log=log, create=True, tools=tools) as runtime:
        await start(runtime)
        key = await ready(runtime, "w", tool, {"seconds": 60})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(executor.run, runtime, key)
            await until_step(journal, key, "started")
            # The executor's process stops here: nothing it followed is reported.
            nursery.cancel_scope.cancel()
    async with open_runtime(log=log, tools=tools) as runtime:
        await runtime.settle()
        row = runtime.ledger.row(key)
        assert row is not None
        assert row.outcome == "unknown"
        with trio.move_on_after(1):
            await executor.serve(runtime)
        with pytest.raises(ClaimRefused):
            await executor.run(runtime, key)
    return key


async def ready(
    runtime: Runtime | AsyncioRuntime,
    call: str,
    tool: str,
    arguments: dict[str, Any],
    *,
    confirm: bool = True,
) -> CallKey:
    """Stream one whole call of ``tool`` as a model would, end its response, and confirm it
    for the person where it asks for confirmation: then it is ready."""
    key = CallKey(
        tenant="acme", conversation="c1", turn="t1", response=f"r-{call}", item="i", call=call
    )
    data = json.dumps(arguments).encode()
    await runtime.feed(
        [
            CallOpened(key=key, tool=tool, sequence=0),
            ArgumentsAppended(key=key, data=data, offset=0, first_sequence=1, last_sequence=1),
            CallEnded(key=key, terminal=TerminalRef(sequence=2)),
            ResponseEnded(
                response=key.response_ref,
                reason=ResponseEndReason.COMPLETED,
                terminal=TerminalRef(sequence=3),
            ),
        ]
    )
    await runtime.settle()
    pending = await runtime.pending_confirmation(key)
    if pending is not None and confirm:
        await runtime.confirm(key, principal=PRINCIPAL, arguments_digest=pending.arguments_digest)
    return key


async def start(runtime: Runtime | AsyncioRuntime) -> None:
    await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL)
