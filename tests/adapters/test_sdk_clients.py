"""The official ``openai`` and ``anthropic`` async clients, run under Trio against a local server
that replays captured streams, with the SDK's own event objects fed to inert.

The SDK sends its real request and parses the server's answer with its own SSE decoder and event
models; inert's adapter takes those objects (``feed_event``). The portable events must be the
ones the adapter makes of the raw body, and the calls must end as they do from the raw body.
"""

from __future__ import annotations

from pathlib import Path

import anthropic
import openai
import pytest
from adapter_support import FIXTURES, recorded_body, run_stream, turn_ref
from replay_server import replay_server

from inert import Event
from inert.adapters import AnthropicAdapter, OpenAIChatAdapter, OpenAIResponsesAdapter

TOOLS = ["get_country", "get_product_name", "final_result"]

# The SDKs stop reading at their stream's end marker without closing the async generators
# beneath (their HTTP client's byte iterators); Trio reports each as garbage collected
# unexhausted. Those, and only those, are the SDK's to fix, not a fault of the test.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:Exception ignored in. <async_generator object"
    r" (PoolByteStream|Response\.aiter_bytes|SSEDecoder\.aiter_bytes|AsyncStream\._iter_events)"
    ":pytest.PytestUnraisableExceptionWarning"
)


async def chat_chunks(body: bytes) -> tuple[list[object], str]:
    """The SDK chunk objects of a Chat Completions body, and the path the client asked for."""
    async with replay_server(lambda _: body) as server:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test", max_retries=0)
        async with client:
            stream = await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            async with stream:
                chunks: list[object] = [chunk async for chunk in stream]
    return chunks, server.requests[0].path


async def test_the_openai_chat_client_s_chunks_feed_inert_as_the_raw_body_does(
    tmp_path: Path,
) -> None:
    """``AsyncOpenAI().chat.completions.create(stream=True)`` chunks make the raw body's events.

    The SDK swallows ``data: [DONE]`` (and ends as quietly when a body lacks it), so the agent
    server says the stream ended by feeding ``"[DONE]"`` when its loop ends normally.
    """
    body = recorded_body(FIXTURES / "openai-chat" / "parallel-tool-calls-gpt-4o.sse")
    chunks, path = await chat_chunks(body)
    assert path == "/v1/chat/completions"
    adapter = OpenAIChatAdapter(turn_ref())
    sdk_events: list[Event] = []
    for chunk in [*chunks, "[DONE]"]:
        sdk_events += adapter.feed_event(chunk)
    sdk_events += adapter.close()
    raw = OpenAIChatAdapter(turn_ref())
    assert sdk_events == raw.feed(body) + raw.close()
    run = await run_stream(OpenAIChatAdapter, tmp_path, tools=TOOLS, events=[*chunks, "[DONE]"])
    assert sorted(run.executed) == sorted(run.rows)
    assert len(run.executed) == 2


async def responses_events(body: bytes) -> tuple[list[object], str]:
    """The SDK event objects of a Responses body, and the path the client asked for."""
    async with replay_server(lambda _: body) as server:
        client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="test", max_retries=0)
        async with client:
            stream = await client.responses.create(model="gpt-4o", input="hi", stream=True)
            async with stream:
                events: list[object] = [event async for event in stream]
    return events, server.requests[0].path


async def test_the_openai_responses_client_s_events_feed_inert_as_the_raw_body_does(
    tmp_path: Path,
) -> None:
    """``AsyncOpenAI().responses.create(stream=True)`` events make the raw body's events, and
    both calls of the captured response are executed once."""
    body = recorded_body(FIXTURES / "openai-responses" / "two-function-calls-gpt-4o.sse")
    events, path = await responses_events(body)
    assert path == "/v1/responses"
    adapter = OpenAIResponsesAdapter(turn_ref())
    sdk_events: list[Event] = []
    for event in events:
        sdk_events += adapter.feed_event(event)
    sdk_events += adapter.close()
    raw = OpenAIResponsesAdapter(turn_ref())
    assert sdk_events == raw.feed(body) + raw.close()
    run = await run_stream(
        OpenAIResponsesAdapter, tmp_path, tools=["search", "weather"], events=events
    )
    assert sorted(run.executed) == sorted(run.rows)
    assert len(run.executed) == 2


async def anthropic_events(body: bytes) -> tuple[list[object], str]:
    """The SDK event objects of a Messages body, and the path the client asked for."""
    async with replay_server(lambda _: body) as server:
        client = anthropic.AsyncAnthropic(base_url=server.url, api_key="test", max_retries=0)
        async with client:
            stream = await client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=256,
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
            )
            async with stream:
                events: list[object] = [event async for event in stream]
    return events, server.requests[0].path


async def test_the_anthropic_client_s_events_feed_inert_as_the_raw_body_does(
    tmp_path: Path,
) -> None:
    """``AsyncAnthropic().messages.create(stream=True)`` events make the raw body's events, and
    the captured tool call is executed once."""
    body = recorded_body(FIXTURES / "anthropic" / "text-then-tool-use.sse")
    events, path = await anthropic_events(body)
    assert path == "/v1/messages"
    adapter = AnthropicAdapter(turn_ref())
    sdk_events: list[Event] = []
    for event in events:
        sdk_events += adapter.feed_event(event)
    sdk_events += adapter.close()
    raw = AnthropicAdapter(turn_ref())
    assert sdk_events == raw.feed(body) + raw.close()
    run = await run_stream(AnthropicAdapter, tmp_path, tools=["get_weather"], events=events)
    assert sorted(run.executed) == sorted(run.rows)
    assert len(run.executed) == 1
