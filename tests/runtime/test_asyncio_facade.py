"""inert inside asyncio: the Trio runtime as a guest of asyncio's loop, driven from coroutines."""

from __future__ import annotations

import asyncio

import anthropic
import openai
import pytest
from adapter_support import FIXTURES
from builders import call_key
from replay_server import threaded_replay_server

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    Event,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    open_asyncio_runtime,
)
from inert.adapters import AnthropicAdapter, OpenAIResponsesAdapter

TOOLS = [
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
]


def key(call: str) -> CallKey:
    return call_key(call, item=call)


def opening(call: str, tool: str, data: bytes) -> list[Event]:
    return [
        CallOpened(key=key(call), tool=tool, sequence=0),
        ArgumentsAppended(key=key(call), data=data, first_sequence=1, last_sequence=1),
    ]


async def two_calls() -> tuple[list[str], str | None, str | None]:
    """A turn with two calls: one confirmed and run, one refused by its person mid-stream."""
    ran: list[str] = []
    async with open_asyncio_runtime(log="memory://", tools=TOOLS) as runtime:
        await runtime.start_turn(
            tenant="acme", conversation="c1", turn="t1", principal="user:alice"
        )
        await runtime.feed(opening("a", "send_email", b'{"to": "bob"}'))
        await runtime.feed(opening("b", "send_email", b'{"to": "eve"'))
        await runtime.deny(key("b"), principal="user:alice", reason="not eve")
        await runtime.feed(
            [
                CallEnded(key=key("a"), terminal=TerminalRef(sequence=2)),
                CallEnded(key=key("b"), terminal=TerminalRef(sequence=2)),
                ResponseEnded(
                    response=key("a").response_ref,
                    reason=ResponseEndReason.COMPLETED,
                    terminal=TerminalRef(sequence=9),
                ),
            ]
        )
        await runtime.settle()
        pending = await runtime.pending_confirmation(key("a"))
        assert pending is not None
        await runtime.confirm(
            key("a"), principal="user:alice", arguments_digest=pending.arguments_digest
        )
        for ready in await runtime.ready():
            dispatch = await runtime.claim(ready, executor="asyncio-worker")
            ran.append(dispatch.key.call)
            await runtime.complete(dispatch)
        for call in ("a", "b"):
            with pytest.raises(ClaimRefused):
                await runtime.claim(key(call), executor="asyncio-worker")
        ledger = runtime.projections.ledger
        row_a, row_b = ledger.row(key("a")), ledger.row(key("b"))
        assert row_a is not None
        assert row_b is not None
        return ran, row_a.outcome, row_b.terminal_reason


def test_a_turn_runs_under_asyncio_exactly_once_and_a_stopped_call_never() -> None:
    """From asyncio: the confirmed call runs once, the one its person stopped never runs."""
    ran, outcome, reason = asyncio.run(two_calls())
    assert ran == ["a"]
    assert outcome == "completed"
    assert reason == "confirmation_denied"


def test_an_error_of_the_runtime_reaches_the_asyncio_caller() -> None:
    """A refusal inside Trio is raised to the coroutine that asked, as the same error."""

    async def refused() -> None:
        async with open_asyncio_runtime(log="memory://", tools=TOOLS) as runtime:
            await runtime.claim(key("nothing"), executor="asyncio-worker")

    with pytest.raises(ClaimRefused):
        asyncio.run(refused())


def test_the_anthropic_async_client_s_events_feed_inert_under_asyncio() -> None:
    """Under asyncio, the official anthropic async client's events, through the Anthropic
    adapter and the facade, run the captured tool call once."""
    body = (FIXTURES / "anthropic" / "text-then-tool-use.sse").read_bytes()
    body = body.rstrip(b"\n") + b"\n\n"

    async def run(url: str) -> list[str]:
        ran: list[str] = []
        tools = [ToolDeclaration(name="get_weather")]
        async with open_asyncio_runtime(log="memory://", tools=tools) as runtime:
            turn = await runtime.start_turn(
                tenant="acme", conversation="c1", turn="t1", principal="user:alice"
            )
            adapter = AnthropicAdapter(turn)
            async with anthropic.AsyncAnthropic(
                base_url=url, api_key="test", max_retries=0
            ) as client:
                stream = await client.messages.create(
                    model="claude-sonnet-4-5",
                    max_tokens=64,
                    messages=[{"role": "user", "content": "weather?"}],
                    stream=True,
                )
                async with stream:
                    async for event in stream:
                        await runtime.feed(adapter.feed_event(event))
            await runtime.feed(adapter.close())
            for ready in await runtime.ready():
                dispatch = await runtime.claim(ready, executor="asyncio-worker")
                ran.append(dispatch.tool)
                await runtime.complete(dispatch)
        return ran

    with threaded_replay_server(body) as url:
        assert asyncio.run(run(url)) == ["get_weather"]


def test_the_openai_async_client_s_responses_events_feed_inert_under_asyncio() -> None:
    """Under asyncio, the official openai async client's Responses stream events, through the
    OpenAI Responses adapter and the facade, run each of the two captured tool calls once."""
    body = (FIXTURES / "openai-responses" / "two-function-calls-gpt-4o.sse").read_bytes()
    body = body.rstrip(b"\n") + b"\n\n"

    async def run(url: str) -> tuple[list[str], list[str | None]]:
        ran: list[str] = []
        tools = [ToolDeclaration(name="search"), ToolDeclaration(name="weather")]
        async with open_asyncio_runtime(log="memory://", tools=tools) as runtime:
            turn = await runtime.start_turn(
                tenant="acme", conversation="c1", turn="t1", principal="user:alice"
            )
            adapter = OpenAIResponsesAdapter(turn)
            async with openai.AsyncOpenAI(
                base_url=f"{url}/v1", api_key="test", max_retries=0
            ) as client:
                stream = await client.responses.create(
                    model="gpt-4o", input="weather and the game?", stream=True
                )
                async with stream:
                    async for event in stream:
                        await runtime.feed(adapter.feed_event(event))
            await runtime.feed(adapter.close())
            for ready in await runtime.ready():
                dispatch = await runtime.claim(ready, executor="asyncio-worker")
                ran.append(dispatch.tool)
                await runtime.complete(dispatch)
            await runtime.settle()
            rows = list(runtime.projections.ledger.rows())
            for row in rows:
                with pytest.raises(ClaimRefused):
                    await runtime.claim(row.key, executor="asyncio-worker")
        return ran, [row.outcome for row in rows]

    with threaded_replay_server(body) as url:
        ran, outcomes = asyncio.run(run(url))
    assert sorted(ran) == ["search", "weather"]
    assert outcomes == ["completed", "completed"]


def test_many_operations_in_flight_at_once_all_answer() -> None:
    """Hundreds of concurrent coroutines each crossing into Trio: every one gets its answer."""

    async def many() -> int:
        async with open_asyncio_runtime(log="memory://", tools=TOOLS) as runtime:
            turns = await asyncio.gather(
                *(
                    runtime.start_turn(
                        tenant="acme", conversation=f"c{n}", turn="t1", principal="user:alice"
                    )
                    for n in range(300)
                )
            )
            return len(turns)

    assert asyncio.run(many()) == 300
