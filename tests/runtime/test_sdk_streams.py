"""An official SDK's async stream fed through the right adapter: the ends the SDK hides, a stream
that breaks, a consumer that leaves early, under asyncio and under Trio alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anthropic
import openai
import pytest
import trio
from adapter_support import FIXTURES, recorded_body
from replay_server import threaded_replay_server

from inert import (
    AsyncioRuntime,
    ConfigurationError,
    Event,
    LedgerRow,
    Phase,
    ProtocolError,
    Runtime,
    ToolDeclaration,
    TurnRef,
    feed_stream,
    open_asyncio_runtime,
    open_runtime,
)
from inert.adapters import PROVIDERS, OpenAIChatAdapter

CHAT = recorded_body(FIXTURES / "openai-chat" / "parallel-tool-calls-gpt-4o.sse")
RESPONSES = recorded_body(FIXTURES / "openai-responses" / "two-function-calls-gpt-4o.sse")
MESSAGES = recorded_body(FIXTURES / "anthropic" / "text-then-tool-use.sse")

STREAMS = {
    "openai-chat": (CHAT, ["get_country", "get_product_name"]),
    "openai-responses": (RESPONSES, ["search", "weather"]),
    "anthropic": (MESSAGES, ["get_weather"]),
}
"""Each SDK stream's captured body and the tools of its calls."""

TOOLS = sorted({tool for _, tools in STREAMS.values() for tool in tools})

CUT = CHAT.index(b'"finish_reason":"tool_calls"')
"""Within the chunk that would end both calls of the Chat Completions body."""


def declarations(names: Iterable[str] = TOOLS) -> list[ToolDeclaration]:
    return [ToolDeclaration(name=name) for name in names]


async def open_turn(runtime: Runtime | AsyncioRuntime) -> TurnRef:
    return await runtime.start_turn(
        tenant="acme", conversation="c1", turn="t1", principal="user:alice"
    )


@asynccontextmanager
async def sdk_stream(url: str, provider: str) -> AsyncIterator[Any]:
    """The official SDK's own async stream of one request, as a server would get it."""
    if provider == "anthropic":
        async with anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0) as client:
            messages = await client.messages.create(
                model="claude-sonnet-4-5",
                max_tokens=64,
                messages=[{"role": "user", "content": "weather?"}],
                stream=True,
            )
            async with messages:
                yield messages
        return
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0) as client:
        if provider == "openai-chat":
            stream: Any = await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "?"}], stream=True
            )
        else:
            stream = await client.responses.create(model="gpt-4o", input="?", stream=True)
        async with stream:
            yield stream


async def run_ready(runtime: Runtime | AsyncioRuntime) -> list[str]:
    """Claim and complete every ready call; their tools."""
    await runtime.settle()
    ran = []
    for key in runtime.projections.queue.ready():
        dispatch = await runtime.claim(key, executor="worker")
        ran.append(dispatch.tool)
        await runtime.complete(dispatch)
    return sorted(ran)


async def rows(runtime: Runtime | AsyncioRuntime) -> list[LedgerRow]:
    """The ledger's rows once the runtime has settled."""
    await runtime.settle()
    return list(runtime.projections.ledger.rows())


def lost(row: LedgerRow) -> bool:
    return row.state is Phase.CANCELLED and row.terminal_reason == "connection_lost"


def dumped(events: Sequence[Any]) -> list[tuple[str, object]]:
    return [(type(event).__name__, event.model_dump()) for event in events]


async def replayed(events: Iterable[object]) -> AsyncIterator[object]:
    """Events as a plain async iterator yields them, neither an SDK's nor a loop's."""
    for event in events:
        yield event


def chat_chunks() -> list[dict[str, Any]]:
    """The Chat Completions body's chunks as the SDK yields them: ``[DONE]`` left out."""
    lines = [line.removeprefix(b"data: ") for line in CHAT.splitlines()]
    return [json.loads(data) for data in lines if data.startswith(b"{")]


@pytest.mark.parametrize("provider", sorted(STREAMS))
def test_an_sdk_stream_runs_its_calls_once_and_hands_its_events_on_unchanged(
    provider: str,
) -> None:
    """Under asyncio, each SDK's stream runs its calls once, with no ``[DONE]`` fed by hand, and
    the helper hands on exactly the events the SDK yields."""
    body, tools = STREAMS[provider]

    async def run(url: str) -> tuple[list[Any], list[Any], list[str], list[str]]:
        async with sdk_stream(url, provider) as stream:
            direct = [event async for event in stream]
        async with open_asyncio_runtime(log="memory://", tools=declarations()) as runtime:
            turn = await open_turn(runtime)
            async with (
                sdk_stream(url, provider) as stream,
                feed_stream(runtime, stream, turn=turn) as events,
            ):
                handed_on = [event async for event in events]
            ran = await run_ready(runtime)
            outcomes = [str(row.outcome) for row in await rows(runtime)]
        return direct, handed_on, ran, outcomes

    with threaded_replay_server(body) as url:
        direct, handed_on, ran, outcomes = asyncio.run(run(url))
    assert dumped(handed_on) == dumped(direct)
    assert ran == tools
    assert outcomes == ["completed"] * len(tools)


def test_run_feeds_a_whole_chat_completions_stream() -> None:
    """``run()`` feeds a whole stream without its events being looked at."""

    async def run(url: str) -> list[str]:
        async with open_asyncio_runtime(log="memory://", tools=declarations()) as runtime:
            turn = await open_turn(runtime)
            async with sdk_stream(url, "openai-chat") as stream:
                await feed_stream(runtime, stream, turn=turn).run()
            return await run_ready(runtime)

    with threaded_replay_server(CHAT) as url:
        assert asyncio.run(run(url)) == ["get_country", "get_product_name"]


def test_a_body_cut_mid_way_loses_its_calls_and_the_sdk_s_error_reaches_the_caller() -> None:
    """The connection drops mid-body: the open calls are reported lost, none runs, and the very
    exception the SDK raised reaches the caller."""
    raised: list[BaseException] = []

    async def recorded(stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for event in stream:
                yield event
        except BaseException as error:
            raised.append(error)
            raise

    async def run(url: str) -> tuple[list[LedgerRow], list[str]]:
        async with open_asyncio_runtime(log="memory://", tools=declarations()) as runtime:
            turn = await open_turn(runtime)
            async with sdk_stream(url, "openai-chat") as stream:
                with pytest.raises(openai.APIConnectionError) as caught:
                    await feed_stream(runtime, recorded(stream), turn=turn).run()
            assert [caught.value] == raised
            return await rows(runtime), await run_ready(runtime)

    with threaded_replay_server(CHAT, cut_after=CUT) as url:
        cut, ran = asyncio.run(run(url))
    assert [row.tool for row in cut] == ["get_country", "get_product_name"]
    assert all(lost(row) for row in cut)
    assert ran == []


def test_a_consumer_that_leaves_early_loses_the_calls_and_closes_the_sdk_stream() -> None:
    """A ``break`` out of the block: what was unfinished is reported lost, nothing runs, and the
    SDK stream's connection is closed."""

    async def run(url: str) -> tuple[list[LedgerRow], list[str], bool]:
        async with open_asyncio_runtime(log="memory://", tools=declarations()) as runtime:
            turn = await open_turn(runtime)
            async with sdk_stream(url, "openai-responses") as stream:
                async with feed_stream(runtime, stream, turn=turn) as events:
                    async for event in events:
                        if event.type == "response.function_call_arguments.delta":
                            break
                closed = stream.response.is_closed
            return await rows(runtime), await run_ready(runtime), closed

    with threaded_replay_server(RESPONSES) as url:
        left, ran, closed = asyncio.run(run(url))
    assert [row.tool for row in left] == ["search"]
    assert all(lost(row) for row in left)
    assert ran == []
    assert closed


def test_a_cancelled_consumer_under_asyncio_still_reports_the_loss() -> None:
    """The task feeding is cancelled while the SDK waits: the calls are reported lost and the
    cancellation is not swallowed."""

    async def run() -> tuple[list[LedgerRow], bool]:
        waiting = asyncio.Event()

        async def stalled() -> AsyncIterator[dict[str, Any]]:
            for chunk in chat_chunks()[:4]:
                yield chunk
            waiting.set()
            await asyncio.Event().wait()

        async with open_asyncio_runtime(log="memory://", tools=declarations()) as runtime:
            turn = await open_turn(runtime)
            task = asyncio.create_task(feed_stream(runtime, stalled(), turn=turn).run())
            await waiting.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await rows(runtime), task.cancelled()

    opened, cancelled = asyncio.run(run())
    assert [row.tool for row in opened] == ["get_country", "get_product_name"]
    assert all(lost(row) for row in opened)
    assert cancelled


async def test_the_helper_feeds_a_trio_runtime_from_plain_events() -> None:
    """Under Trio, with the Trio runtime: decoded chunks of a Chat Completions stream (without
    its ``[DONE]``, as the SDK yields them) run both calls once."""
    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        await feed_stream(runtime, replayed(chat_chunks()), turn=turn).run()
        assert await run_ready(runtime) == ["get_country", "get_product_name"]


async def test_a_stream_that_raises_under_trio_loses_its_calls() -> None:
    """Under Trio: a stream that raises mid-way reports its calls lost, is closed, and its
    exception reaches the caller unchanged."""
    failure = ConnectionResetError("reset by peer")
    closed = trio.Event()

    async def breaking() -> AsyncIterator[dict[str, Any]]:
        try:
            for chunk in chat_chunks()[:4]:
                yield chunk
            raise failure
        finally:
            closed.set()

    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        with pytest.raises(ConnectionResetError) as caught:
            await feed_stream(runtime, breaking(), turn=turn).run()
        assert caught.value is failure
        assert closed.is_set()
        assert [lost(row) for row in await rows(runtime)] == [True, True]


async def test_a_trio_cancellation_is_not_swallowed() -> None:
    """Under Trio, a cancellation while the stream waits ends the feed and reaches its scope;
    the stream is closed."""
    closed = trio.Event()

    async def slow() -> AsyncIterator[dict[str, Any]]:
        try:
            for chunk in chat_chunks():
                await trio.lowlevel.checkpoint()
                yield chunk
        finally:
            closed.set()

    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        with trio.CancelScope() as scope:
            async with feed_stream(runtime, slow(), turn=turn) as events:
                async for _ in events:
                    scope.cancel()
            pytest.fail("the cancellation was swallowed")
        assert scope.cancelled_caught
        assert closed.is_set()


async def test_an_event_the_adapter_cannot_read_is_raised_and_the_calls_lost() -> None:
    """An event that is no JSON object nor SDK event raises the adapter's ``TypeError``; the
    calls it leaves unfinished are reported lost."""

    async def odd() -> AsyncIterator[object]:
        for chunk in chat_chunks()[:4]:
            yield chunk
        yield 42

    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        with pytest.raises(TypeError, match="not int"):
            await feed_stream(runtime, odd(), turn=turn).run()
        assert [lost(row) for row in await rows(runtime)] == [True, True]


async def test_an_adapter_given_is_used_and_ended_as_its_protocol_says() -> None:
    """A Chat Completions adapter given in place of the turn is ended by the ``[DONE]`` the
    iteration's end stands for."""
    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        chunks = replayed(chat_chunks())
        await feed_stream(runtime, chunks, adapter=OpenAIChatAdapter(turn)).run()
        assert await run_ready(runtime) == ["get_country", "get_product_name"]


class RawBody:
    """An adapter of a stream that yields the raw body in chunks, each fed as wire bytes."""

    def __init__(self, adapter: OpenAIChatAdapter) -> None:
        self.adapter = adapter

    def feed(self, chunk: bytes | str) -> list[Event]:
        return self.adapter.feed(chunk)

    def feed_event(self, event: object) -> list[Event]:
        assert isinstance(event, bytes)
        return self.adapter.feed(event)

    def close(self) -> list[Event]:
        return self.adapter.close()


async def test_a_refused_stream_feeds_what_came_before_and_raises() -> None:
    """An adapter that refuses the stream (an event past its limit after the completion
    ended) raises ``ProtocolError`` out of the feed at once, after feeding the events it read
    before in the same chunk: the completed calls run, none is lost."""
    oversized = b"data: " + b"x" * 70_000 + b"\n\n"

    async def body() -> AsyncIterator[bytes]:
        yield CHAT + oversized
        yield CHAT

    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        adapter = RawBody(OpenAIChatAdapter(turn, max_event_size=65_536))
        with pytest.raises(ProtocolError, match=r"after response 'chatcmpl-.*' ended.* 65536"):
            await feed_stream(runtime, body(), adapter=adapter).run()
        assert not any(lost(row) for row in await rows(runtime))
        assert await run_ready(runtime) == ["get_country", "get_product_name"]


async def test_a_first_event_of_no_known_stream_is_a_clear_error() -> None:
    """A first event of none of the streams told apart raises ``ValueError`` naming it; nothing
    is fed and the stream is closed."""
    closed = trio.Event()

    async def unknown() -> AsyncIterator[dict[str, Any]]:
        try:
            yield {"type": "candidate", "text": "hello"}
        finally:
            closed.set()

    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        with pytest.raises(
            ValueError, match=r"first event .* of type 'candidate'.*pass its adapter"
        ):
            await feed_stream(runtime, unknown(), turn=turn).run()
        assert closed.is_set()
        assert await rows(runtime) == []


class NoRuntime:
    """A runtime that is never to be fed."""

    async def feed(self, events: Sequence[Event], *, trace: object = None) -> None:
        raise AssertionError("nothing is fed")


def test_the_turn_or_the_adapter_is_required_and_both_must_agree() -> None:
    """Neither a turn nor an adapter is a ``TypeError`` saying which to pass; both are taken
    when the adapter is of that turn, and refused naming both turns when it is not."""
    turn = TurnRef(tenant="acme", conversation="c1", turn="t1")
    other = TurnRef(tenant="acme", conversation="c1", turn="t2")
    with pytest.raises(TypeError, match=r"turn .* or its adapter"):
        feed_stream(NoRuntime(), replayed([]))
    feed_stream(NoRuntime(), replayed([]), turn=turn, adapter=OpenAIChatAdapter(turn))
    with pytest.raises(ConfigurationError, match=r"turn 't2'.* adapter of turn 't1'"):
        feed_stream(NoRuntime(), replayed([]), turn=other, adapter=OpenAIChatAdapter(turn))


def helper_stream(client: Any, provider: str) -> Any:
    """The manager of each SDK's ``.stream()`` helper for one request (no request made yet)."""
    if provider == "anthropic":
        return client.messages.stream(
            model="claude-sonnet-4-5", max_tokens=64, messages=[{"role": "user", "content": "?"}]
        )
    if provider == "openai-chat":
        return client.chat.completions.stream(
            model="gpt-4o", messages=[{"role": "user", "content": "?"}]
        )
    return client.responses.stream(model="gpt-4o", input="?")


@asynccontextmanager
async def client_of(url: str, provider: str) -> AsyncIterator[Any]:
    if provider == "anthropic":
        async with anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0) as client:
            yield client
        return
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0) as client:
        yield client


@pytest.mark.parametrize("given", ["turn", "adapter"])
@pytest.mark.parametrize("provider", sorted(STREAMS))
def test_the_stream_of_an_sdk_s_stream_helper_runs_its_calls(provider: str, given: str) -> None:
    """The stream each SDK's ``.stream()`` helper gives (the ``openai`` Chat Completions one
    wraps each chunk in a ``chunk`` event beside ``content.delta`` and the like) is read, with
    the turn or with its adapter: its calls run once, each event handed on unchanged."""
    body, tools = STREAMS[provider]

    async def run(url: str) -> tuple[list[str], list[str], int]:
        async with open_asyncio_runtime(log="memory://", tools=declarations()) as runtime:
            turn = await open_turn(runtime)
            chosen: dict[str, Any] = (
                {"turn": turn}
                if given == "turn"
                else {"adapter": PROVIDERS[provider](turn, response="req-1")}
            )
            async with (
                client_of(url, provider) as client,
                helper_stream(client, provider) as stream,
                feed_stream(runtime, stream, **chosen) as events,
            ):
                kinds = [event.type async for event in events]
            return await run_ready(runtime), kinds, len(await rows(runtime))

    with threaded_replay_server(body) as url:
        ran, kinds, calls = asyncio.run(run(url))
    assert ran == tools
    assert calls == len(tools)
    if provider == "openai-chat":
        assert {"chunk", "tool_calls.function.arguments.delta"} <= set(kinds)


@pytest.mark.parametrize("provider", sorted(STREAMS))
def test_the_manager_of_an_sdk_s_stream_helper_is_refused_naming_what_to_pass(
    provider: str,
) -> None:
    """The context manager a ``.stream()`` helper returns is no stream: refused at once, naming
    its type and how to pass the stream it gives."""
    turn = TurnRef(tenant="acme", conversation="c1", turn="t1")

    async def run(url: str) -> None:
        async with client_of(url, provider) as client:
            manager = helper_stream(client, provider)
            name = type(manager).__name__
            with pytest.raises(TypeError, match=rf"{name}.*pass the stream it gives"):
                feed_stream(NoRuntime(), manager, turn=turn)
            async with manager:
                pass  # the request the manager holds is made and closed

    with threaded_replay_server(STREAMS[provider][0]) as url:
        asyncio.run(run(url))


async def test_helper_events_without_their_chunks_are_refused_when_the_stream_ends() -> None:
    """Only the events the ``openai`` helper derives from the chunks (``content.delta``, the
    arguments' deltas), the chunks left out: no call could be read from them, so the end of
    the stream raises ``ProtocolError`` naming the first, never a silent empty turn."""
    derived = [
        {"type": "content.delta", "delta": "Hi", "snapshot": "Hi", "parsed": None},
        {
            "type": "tool_calls.function.arguments.delta",
            "name": "get_country",
            "index": 0,
            "arguments": "{}",
            "parsed_arguments": {},
            "arguments_delta": "{}",
        },
    ]
    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        with pytest.raises(ProtocolError, match=r"first was a dict of type 'content.delta'"):
            await feed_stream(runtime, replayed(derived), adapter=OpenAIChatAdapter(turn)).run()
        assert await rows(runtime) == []


@pytest.mark.parametrize("provider", ["openai-responses", "anthropic"])
async def test_events_of_another_protocol_are_refused_when_the_stream_ends(provider: str) -> None:
    """Chat Completions chunks fed to the adapter of another protocol are none of its events:
    the end of the stream raises ``ProtocolError`` saying so, and nothing is fed."""
    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        adapter = PROVIDERS[provider](turn, response="req-1")
        with pytest.raises(ProtocolError, match="none of its events is one of the protocol"):
            await feed_stream(runtime, replayed(chat_chunks()), adapter=adapter).run()
        assert await rows(runtime) == []


async def body_in_chunks(body: bytes, size: int = 100) -> AsyncIterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


async def test_a_raw_body_in_chunks_is_fed_through_the_adapter_given() -> None:
    """An async iterator of the body's raw chunks is fed to the adapter's ``feed``: whole, its
    own ``[DONE]`` ends it and the calls run; cut before its ``[DONE]``, nothing stands for the
    ``[DONE]`` and the calls are lost."""
    done = CHAT.index(b"data: [DONE]")
    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        await feed_stream(runtime, body_in_chunks(CHAT), adapter=OpenAIChatAdapter(turn)).run()
        assert await run_ready(runtime) == ["get_country", "get_product_name"]
    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        cut = body_in_chunks(CHAT[:done])
        await feed_stream(runtime, cut, adapter=OpenAIChatAdapter(turn)).run()
        assert [lost(row) for row in await rows(runtime)] == [True, True]


def raw_response(client: Any, provider: str) -> Any:
    """The manager of each SDK's raw response to one streamed request, whose ``iter_bytes()``
    is the body as it comes off the wire."""
    if provider == "anthropic":
        return client.messages.with_streaming_response.create(
            model="claude-sonnet-4-5",
            max_tokens=64,
            messages=[{"role": "user", "content": "?"}],
            stream=True,
        )
    if provider == "openai-chat":
        return client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "?"}], stream=True
        )
    return client.responses.with_streaming_response.create(model="gpt-4o", input="?", stream=True)


@pytest.mark.parametrize("provider", sorted(STREAMS))
def test_an_sdk_s_raw_bytes_are_fed_through_the_adapter_given(provider: str) -> None:
    """The raw body each SDK gives through ``with_streaming_response`` (``iter_bytes()``), as
    docs/adapters.md shows it, goes through the adapter given: its calls run once."""
    body, tools = STREAMS[provider]

    async def run(url: str) -> list[str]:
        async with open_runtime(log="memory://", tools=declarations()) as runtime:
            turn = await open_turn(runtime)
            adapter = PROVIDERS[provider](turn, response="req-1")
            async with client_of(url, provider) as client, raw_response(client, provider) as raw:
                await feed_stream(runtime, raw.iter_bytes(), adapter=adapter).run()
            return await run_ready(runtime)

    with threaded_replay_server(body) as url:
        assert trio.run(run, url) == tools


async def test_raw_chunks_without_an_adapter_or_mixed_with_events_are_refused() -> None:
    """Raw chunks do not say their protocol: with only the turn they are refused, asking for
    the adapter; a stream that yields chunks and then an event is refused naming both."""

    async def mixed() -> AsyncIterator[object]:
        yield CHAT[:50]
        yield chat_chunks()[0]

    async with open_runtime(log="memory://", tools=declarations()) as runtime:
        turn = await open_turn(runtime)
        with pytest.raises(TypeError, match=r"raw chunks \(bytes\).*pass its adapter"):
            await feed_stream(runtime, body_in_chunks(CHAT), turn=turn).run()
        with pytest.raises(TypeError, match="chunks of a body, then an event"):
            await feed_stream(runtime, mixed(), adapter=OpenAIChatAdapter(turn)).run()


def _sync_events() -> Iterator[object]:
    yield from chat_chunks()


@pytest.mark.parametrize(
    ("stream", "says"),
    [
        (CHAT, r"not bytes: feed a body's bytes to the adapter's feed\(\)"),
        ("data: [DONE]", r"not str: feed a body's bytes"),
        (chat_chunks(), r"not a list: pass the async client's stream"),
        (_sync_events(), r"not a generator: pass the async client's stream"),
        (42, r"not a int: pass what the async client's create"),
    ],
    ids=["bytes", "str", "list", "generator", "int"],
)
def test_what_feed_stream_cannot_iterate_is_refused_naming_it(stream: object, says: str) -> None:
    """Bytes, text, a synchronous iterable or anything else that is no async stream is refused
    at once, naming what was passed and what to pass instead."""
    turn = TurnRef(tenant="acme", conversation="c1", turn="t1")
    with pytest.raises(TypeError, match=says):
        feed_stream(NoRuntime(), stream, turn=turn)  # type: ignore[arg-type]
