"""Ready calls run on a real MCP server of the tests' own (``tests/mcp_server.py``), over stdio
and Streamable HTTP, each on both protocol versions the SDK speaks: a call runs once, a stop
cancels it on the server, a restart in the middle leaves it unknown and never runs it again, a
hanging server is bounded by the deadline, and an error is recorded without the arguments."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import pytest
import trio
from mcp import Client
from mcp.server import Server
from mcp_server import REFUSAL_CODE
from mcp_support import (
    PRINCIPAL,
    check_a_restart_mid_run,
    connected,
    ready,
    run_cancelled_midway,
    start,
    steps,
    until_step,
)
from mcp_types import CallToolResult, ListToolsResult, Tool, ToolAnnotations
from opentelemetry.sdk.trace import TracerProvider

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    open_asyncio_runtime,
    open_runtime,
)
from inert.events import ExecutionFailed
from inert.mcp import IDEMPOTENCY_KEY, MCPExecutor, Outcome, confirm_unless_harmless

# Each test starts an MCP server process, and the SDK takes seconds to import.
pytestmark = pytest.mark.slow(seconds=10)

# The SDK's Streamable HTTP client of 2025-11-25 leaves the async generators of its standalone
# response stream to the garbage collector, which Trio reports as unraisable ResourceWarnings.
_SDK_STREAMS_LEFT_OPEN = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object"
    " (PoolByteStream|Response|EventSource)[.]:pytest.PytestUnraisableExceptionWarning"
)
TRANSPORTS = [
    "stdio",
    "stdio-2025-11-25",
    "http",
    pytest.param("http-2025-11-25", marks=_SDK_STREAMS_LEFT_OPEN),
]
SECRET = "hunter2-never-logged"


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """Each transport, on the protocol version the SDK asks for and on the handshake one."""
    return str(request.param)


async def test_a_call_runs_once_with_its_arguments_key_and_trace(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """A ready call runs on the server once, with its validated arguments, its call key as the
    idempotency key and its span's traceparent in ``_meta``; the result comes back, the ledger
    says completed, and a second run is refused before anything is sent."""
    async with connected(transport, journal, server_url, errlog) as client:
        executor = MCPExecutor(client)
        tools = await executor.declarations()
        async with open_runtime(
            log="memory://", tools=tools, tracer_provider=TracerProvider()
        ) as runtime:
            await start(runtime)
            key = await ready(runtime, "a", "echo", {"text": "hello"})
            run = await executor.run(runtime, key)
            assert run.outcome is Outcome.COMPLETED
            assert run.result is not None
            assert run.result.structured_content == {"result": "hello"}
            with pytest.raises(ClaimRefused):
                await executor.run(runtime, key)
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "completed"
    [ran] = steps(journal, key)
    assert ran["arguments"] == {"text": "hello"}
    assert ran["meta"][IDEMPOTENCY_KEY] == key.stream
    assert run.dispatch.trace is not None
    assert ran["meta"]["traceparent"] == run.dispatch.trace.traceparent


async def test_a_stopped_call_is_cancelled_on_the_server(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """Cancelling the turn while the tool runs cancels the request: the server's handler is
    interrupted and the call is recorded stopped."""
    async with connected(transport, journal, server_url, errlog) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "w", "wait", {"seconds": 60})
            stopped = await run_cancelled_midway(executor, runtime, key, journal)
            assert stopped.outcome is Outcome.STOPPED
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "stopped"
            await until_step(journal, key, "cancelled")
    assert [entry["step"] for entry in steps(journal, key)] == ["started", "cancelled"]


async def test_a_restart_mid_call_gives_outcome_unknown_and_never_a_second_run(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO, tmp_path: Path
) -> None:
    """The process holding the call goes away while the tool runs: the restarted runtime
    records the call ``outcome_unknown``, and its executor never sends it again."""
    async with connected(transport, journal, server_url, errlog) as client:
        key = await check_a_restart_mid_run(client, journal, tmp_path, "wait")
    assert [entry["step"] for entry in steps(journal, key)].count("started") == 1


async def test_a_server_that_dies_mid_call_leaves_the_outcome_to_the_restart(
    journal: Path, errlog: TextIO, tmp_path: Path
) -> None:
    """The server's process exits while the tool runs: nothing is reported (whether the tool
    acted is unknown), the call stays dispatched, and a restart records it unknown."""
    log = f"sqlite:///{tmp_path / 'inert.db'}"
    async with connected("stdio", journal, None, errlog) as client:
        executor = MCPExecutor(client)
        tools = await executor.declarations()
        async with open_runtime(log=log, create=True, tools=tools) as runtime:
            await start(runtime)
            key = await ready(runtime, "c", "crash", {})
            run = await executor.run(runtime, key)
            assert run.outcome is Outcome.UNREPORTED
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome is None
    async with open_runtime(log=log, tools=tools) as runtime:
        await runtime.settle()
        row = runtime.ledger.row(key)
        assert row is not None
        assert row.outcome == "unknown"
    assert [entry["step"] for entry in steps(journal, key)] == ["started"]


async def test_a_server_that_hangs_is_bounded_by_the_deadline(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """A tool that does not answer within the deadline is cancelled on the server and the
    call recorded failed ``deadline_exceeded``."""
    async with connected(transport, journal, server_url, errlog) as client:
        executor = MCPExecutor(client, deadline=1.0)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "w", "wait", {"seconds": 600})
            with trio.fail_after(30):
                run = await executor.run(runtime, key)
            assert (run.outcome, run.error) == (Outcome.FAILED, "deadline_exceeded")
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "failed"
            await until_step(journal, key, "cancelled")


async def test_an_error_is_recorded_failed_without_the_arguments(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """An error result is ``tool_error`` and a JSON-RPC error its code: the failure recorded
    holds neither the server's message nor the argument it quoted."""
    async with connected(transport, journal, server_url, errlog) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            broken = await ready(runtime, "b", "broken", {"secret": SECRET})
            refused = await ready(runtime, "r", "refuse", {"secret": SECRET})
            assert (await executor.run(runtime, broken)).error == "tool_error"
            assert (await executor.run(runtime, refused)).error == f"mcp_error:{REFUSAL_CODE}"
            await runtime.settle()
            for key, error in ((broken, "tool_error"), (refused, f"mcp_error:{REFUSAL_CODE}")):
                row = runtime.ledger.row(key)
                assert row is not None
                assert row.outcome == "failed"
                recorded = [
                    record.event for record in await runtime.log.read_stream(key.request_stream)
                ]
                [failed] = [event for event in recorded if isinstance(event, ExecutionFailed)]
                assert failed.error == error
                assert SECRET not in repr(recorded)
                assert SECRET not in repr(runtime.ledger.history(key))


async def test_edited_arguments_are_the_only_ones_sent(
    journal: Path, errlog: TextIO, tmp_path: Path
) -> None:
    """A call the person edited while confirming runs with the edit, never the model's
    arguments."""
    async with connected("stdio", journal, None, errlog) as client:
        executor = MCPExecutor(client, confirm=lambda tool: True)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "e", "echo", {"text": "model's"}, confirm=False)
            pending = await runtime.pending_confirmation(key)
            assert pending is not None
            await runtime.confirm(
                key,
                principal=PRINCIPAL,
                arguments_digest=pending.arguments_digest,
                arguments={"text": "person's"},
            )
            assert (await executor.run(runtime, key)).outcome is Outcome.COMPLETED
    [ran] = steps(journal, key)
    assert ran["arguments"] == {"text": "person's"}


async def test_declarations_are_the_listing_and_confirmation_follows_the_annotations(
    journal: Path, errlog: TextIO
) -> None:
    """Each listed tool becomes a declaration with the server's input schema; a read-only or
    non-destructive tool runs without confirmation, an unannotated one waits for it, and a
    rule of one's own overrides that."""
    async with connected("stdio", journal, None, errlog) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        declared = {
            declaration.name: declaration
            for declaration in await MCPExecutor(client).declarations()
        }
        assert set(declared) == set(listed)
        assert dict(declared["echo"].parameters) == listed["echo"].input_schema
        confirmed = {name for name, tool in declared.items() if tool.needs_confirmation}
        assert confirmed == {
            "wait",
            "broken",
            "refuse",
            "crash",
            "retire",
            "task_echo",
            "task_wait",
            "task_stubborn",
            "task_forget",
            "task_refuse",
            "task_ask",
        }
        assert confirmed == {name for name, tool in listed.items() if confirm_unless_harmless(tool)}
        everything = await MCPExecutor(client, confirm=lambda tool: True).declarations()
        assert all(declaration.needs_confirmation for declaration in everything)


async def test_a_tool_changed_on_the_server_mid_turn_is_not_called(
    journal: Path, errlog: TextIO
) -> None:
    """The server stops listing a tool after the turn offered it: the call of it fails
    ``tool_changed`` and nothing is sent to the server."""
    async with connected("stdio", journal, None, errlog) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "e", "echo", {"text": "hello"})
            await client.call_tool("retire", {"name": "echo"})
            run = await executor.run(runtime, key)
            assert (run.outcome, run.error) == (Outcome.FAILED, "tool_changed")
    assert steps(journal, key) == []


def test_under_asyncio_a_call_runs_and_a_stop_cancels_it_on_the_server(
    journal: Path, errlog: TextIO
) -> None:
    """With the asyncio facade and the SDK on asyncio, a call completes and a stopped call is
    cancelled on the server and recorded stopped."""

    async def main() -> tuple[Outcome, Outcome, CallKey, CallKey]:
        async with (
            connected("stdio", journal, None, errlog) as client,
            open_asyncio_runtime(log="memory://") as runtime,
        ):
            executor = MCPExecutor(client)
            await runtime.start_turn(
                tenant="acme",
                conversation="c1",
                turn="t1",
                principal=PRINCIPAL,
                tools=await executor.declarations(),
            )
            echo = await ready(runtime, "e", "echo", {"text": "hello"})
            wait = await ready(runtime, "w", "wait", {"seconds": 60})
            echoed = await executor.run(runtime, echo)
            waiting = asyncio.ensure_future(executor.run(runtime, wait))
            # Another process writes the journal: nothing here could set an event.
            while not steps(journal, wait):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            await runtime.cancel_turn(wait.turn_ref, principal=PRINCIPAL)
            waited = await asyncio.wait_for(waiting, 30)
            return echoed.outcome, waited.outcome, echo, wait

    echoed, waited, echo, wait = asyncio.run(main())
    assert (echoed, waited) == (Outcome.COMPLETED, Outcome.STOPPED)
    assert [entry["step"] for entry in steps(journal, echo)] == ["ran"]
    deadline = time.monotonic() + 20
    while "cancelled" not in [entry["step"] for entry in steps(journal, wait)]:
        assert time.monotonic() < deadline, steps(journal, wait)
        time.sleep(0.05)


def test_inert_imports_without_the_sdk_and_inert_mcp_names_the_extra() -> None:
    """``import inert`` never loads the MCP SDK; without it, ``import inert.mcp`` is a
    ``ConfigurationError`` naming the extra to install."""
    program = """
import sys
import inert
assert "mcp" not in sys.modules and "mcp_types" not in sys.modules
sys.modules["mcp"] = None
try:
    import inert.mcp
except inert.ConfigurationError as error:
    print(error)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert "pip install 'inert[mcp]'" in done.stdout


def streamed(key: CallKey, tool: str, arguments: dict[str, Any]) -> list[Any]:
    """A call's events as a model streams it: opened, its arguments in three fragments, its
    end."""
    data = json.dumps(arguments).encode()
    cut = [0, len(data) // 3, 2 * len(data) // 3, len(data)]
    fragments = [
        ArgumentsAppended(
            key=key,
            data=data[cut[index] : cut[index + 1]],
            offset=cut[index],
            first_sequence=index + 1,
            last_sequence=index + 1,
        )
        for index in range(3)
    ]
    return [
        CallOpened(key=key, tool=tool, sequence=0),
        *fragments,
        CallEnded(key=key, terminal=TerminalRef(sequence=4)),
    ]


def response_end(key: CallKey) -> ResponseEnded:
    return ResponseEnded(
        response=key.response_ref,
        reason=ResponseEndReason.COMPLETED,
        terminal=TerminalRef(sequence=5),
    )


async def test_serve_runs_nothing_early_twice_or_after_a_stop(
    journal: Path, errlog: TextIO
) -> None:
    """With ``serve`` running: two interleaved calls reach the server only once their response
    has ended, each once; a call whose turn the person cancels before its end, and a call of a
    turn superseded while its fragments still arrive, never reach it."""

    def key(turn: str, call: str) -> CallKey:
        return CallKey(
            tenant="acme", conversation="c1", turn=turn, response=f"r-{turn}", item=call, call=call
        )

    async with connected("stdio", journal, None, errlog) as client:
        executor = MCPExecutor(client)
        tools = await executor.declarations()
        async with open_runtime(log="memory://", tools=tools) as runtime, trio.open_nursery() as n:
            n.start_soon(executor.serve, runtime)

            async def turn(name: str) -> None:
                await runtime.start_turn(
                    tenant="acme", conversation="c1", turn=name, principal=PRINCIPAL
                )

            await turn("t1")
            a, b = key("t1", "a"), key("t1", "b")
            first, second = streamed(a, "echo", {"text": "a"}), streamed(b, "echo", {"text": "b"})
            await runtime.feed(
                [event for pair in zip(first, second, strict=True) for event in pair]
            )
            await runtime.settle()
            await trio.sleep(0.5)
            assert steps(journal, a) == steps(journal, b) == []
            await runtime.feed([response_end(a)])
            await until_step(journal, a, "ran")
            await until_step(journal, b, "ran")

            await turn("t2")
            c = key("t2", "c")
            cancelled = streamed(c, "echo", {"text": "c"})
            await runtime.feed(cancelled[:2])
            await runtime.cancel_turn(c.turn_ref, principal=PRINCIPAL)
            await runtime.feed([*cancelled[2:], response_end(c)])

            await turn("t3")
            d = key("t3", "d")
            superseded = streamed(d, "echo", {"text": "d"})
            await runtime.feed(superseded[:2])
            await turn("t4")
            await runtime.feed([*superseded[2:], response_end(d)])
            e = key("t4", "e")
            await runtime.feed([*streamed(e, "echo", {"text": "e"}), response_end(e)])
            await until_step(journal, e, "ran")
            await runtime.settle()
            await trio.sleep(0.5)
            n.cancel_scope.cancel()
    assert [len(steps(journal, call)) for call in (a, b, c, d, e)] == [1, 1, 0, 0, 1]
    assert [steps(journal, call)[0]["arguments"] for call in (a, b, e)] == [
        {"text": "a"},
        {"text": "b"},
        {"text": "e"},
    ]


async def test_a_result_the_sdk_refuses_is_recorded_failed_by_its_kind() -> None:
    """A server (in-process here) whose structured result breaks its own output schema: the
    SDK refuses it, the call is recorded failed ``invalid_result``, and the SDK's message,
    which quotes the value, is nowhere."""
    tool = Tool(
        name="count",
        input_schema={"type": "object"},
        output_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        annotations=ToolAnnotations(read_only_hint=True),
    )

    async def list_tools(context: object, params: object) -> ListToolsResult:
        return ListToolsResult(tools=[tool])

    async def call_tool(context: object, params: object) -> CallToolResult:
        return CallToolResult(content=[], structured_content={"n": SECRET})

    server: Server[Any] = Server("invalid", on_list_tools=list_tools, on_call_tool=call_tool)
    async with Client(server) as client:
        executor = MCPExecutor(client)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "n", "count", {})
            run = await executor.run(runtime, key)
            assert (run.outcome, run.error) == (Outcome.FAILED, "invalid_result")
            await runtime.settle()
            recorded = [
                record.event for record in await runtime.log.read_stream(key.request_stream)
            ]
            assert SECRET not in repr(recorded)
