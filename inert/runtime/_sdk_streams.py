"""An official SDK's async stream fed into the runtime, for servers that call the provider through
its SDK rather than reading the HTTP body themselves.

The SDKs hide two ends that decide what may act. The ``openai`` SDK stops iterating a Chat
Completions stream at ``data: [DONE]`` without yielding it: fed event by event, the completion
never ends, and closing its adapter reports it lost. And a stream that raises mid-way (a dropped
connection, a timeout, a cancellation) leaves a hand-written loop without closing its adapter:
its calls stay open until their idle limit instead of being reported lost at once. Here a clean
end of the SDK's iteration stands for the whole body (the HTTP client raises on a body cut
short), and any other end reports what was unfinished as lost, as the provider's protocol says.

It imports neither trio nor asyncio: the same iteration runs under the Trio runtime and under the
asyncio facade.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, Awaitable, Mapping, Sequence
from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar

from ..adapters import (
    AnthropicAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ProtocolError,
    StreamAdapter,
    as_object,
)
from ..events import ConfigurationError, Event, TraceContext, TurnRef

T = TypeVar("T")

_DONE = "[DONE]"
"""The Chat Completions line that ends the body, which the ``openai`` SDK does not yield."""

_ANTHROPIC_KINDS = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
    }
)


class EventFeeder(Protocol):
    """What feeding a stream needs of a runtime: ``Runtime`` and ``AsyncioRuntime`` both have it."""

    def feed(
        self, events: Sequence[Event], *, trace: TraceContext | None = None
    ) -> Awaitable[None]: ...


def feed_stream(
    runtime: EventFeeder,
    stream: AsyncIterable[T],
    *,
    turn: TurnRef | None = None,
    adapter: StreamAdapter | None = None,
    trace: TraceContext | None = None,
) -> StreamFeed[T]:
    """Feed an SDK's async stream of one turn into ``runtime``, through its adapter.

    Use it as ``async with feed_stream(...) as events: async for event in events: ...``: each of
    the SDK's events is fed (with ``trace``) before it is handed on, unchanged; or
    ``await feed_stream(...).run()`` to feed the whole stream without seeing its events.

    ``stream`` is what the async client's ``create(..., stream=True)`` returns, or the stream
    a ``.stream()`` helper gives inside its ``async with`` (the ``openai`` Chat Completions
    helper's ``chunk`` events are read, the events it derives from them add nothing; the
    ``anthropic`` helper's events are its protocol's, with some of its own that add nothing),
    or an async iterator of the raw body's chunks (``bytes``), fed to the adapter's ``feed``.
    Anything else is refused at once with a ``TypeError`` saying what to pass: bytes or text
    themselves, a helper's context manager, a synchronous stream or iterable.

    The adapter is ``adapter``, or the one of the stream's first event, for ``turn``: an
    ``openai`` Responses stream event (``response.*``) takes ``OpenAIResponsesAdapter``, a
    ``ChatCompletionChunk`` (or the Chat Completions helper's ``chunk`` event)
    ``OpenAIChatAdapter``, an ``anthropic`` message stream event ``AnthropicAdapter``; decoded
    JSON objects of those shapes are read alike. A first event of none of them raises
    ``ValueError``, raw chunks with no adapter given a ``TypeError``, and an event the adapter
    cannot read raises its ``TypeError`` or ``ValueError``: no event is passed over. An adapter
    that refuses the stream raises ``ProtocolError`` (a ``ValueError``): the events it read
    before are fed, then the feed ends as below; so does one that read events, none of them of
    its protocol, when the stream ends. A stream of another protocol, or an OpenAI Responses
    stream in background mode (``resumable=True``), needs its adapter given. ``turn`` and
    ``adapter`` may both be given when the adapter is of that turn (else
    ``ConfigurationError``).

    How the feed ends:

    - The SDK's iteration ends: the body was whole. A Chat Completions stream of events is
      ended as by its ``[DONE]``, which the ``openai`` SDK does not yield (each choice's
      ``finish_reason`` still decides whether its calls may act; a raw body holds its own);
      then the adapter is closed and what it reports is fed.
    - The SDK's iteration raises (a dropped connection, a timeout, a cancellation), or feeding
      an event fails: the adapter is closed, the responses it left unfinished are fed as lost,
      and the exception is raised again as it was. Where feeding the loss fails too, that
      failure is raised instead, chained to the first, unless the first is a cancellation (an
      exception that is no ``Exception``), which always wins.
    - The block is left before the end (a ``break``, an error in its body) or ``aclose`` is
      called: as when the iteration raises; the exception of the body, if any, goes on.

    Whichever way it ends, the SDK stream is closed (its ``aclose()`` or ``close()``). Iterated
    without ``async with``, a loop left early leaves the stream open and the loss unfed: leave
    it through ``aclose``.
    """
    _check_stream(stream)
    if adapter is not None:
        adapter_turn = getattr(adapter, "turn", None)
        if turn is not None and isinstance(adapter_turn, TurnRef) and adapter_turn != turn:
            raise ConfigurationError(
                f"feed_stream was given turn {turn.turn!r} of conversation"
                f" {turn.conversation!r} and an adapter of turn {adapter_turn.turn!r} of"
                f" conversation {adapter_turn.conversation!r}: pass the adapter of the"
                " stream's turn"
            )
        return StreamFeed(runtime, stream, adapter, trace=trace)
    if turn is None:
        raise TypeError(
            "feed_stream needs the stream's turn (its adapter is then chosen by the first"
            " event) or its adapter"
        )
    return StreamFeed(runtime, stream, turn, trace=trace)


def _check_stream(stream: object) -> None:
    """Refuse, before anything is read, a stream that ``feed_stream`` cannot iterate, saying
    what to pass instead."""
    if hasattr(stream, "__aiter__"):
        return
    kind = type(stream).__name__
    if isinstance(stream, bytes | bytearray | memoryview | str):
        raise TypeError(
            f"feed_stream takes an async stream of events, not {kind}: feed a body's bytes to"
            " the adapter's feed(), or pass an async iterator of its chunks with adapter="
        )
    if hasattr(stream, "__aenter__"):
        raise TypeError(
            f"feed_stream was given a {kind}, which opens a stream as an async context manager"
            " (an SDK's .stream() helper): pass the stream it gives, as in `async with"
            " client.chat.completions.stream(...) as stream:` then"
            " `await feed_stream(runtime, stream, turn=turn).run()`"
        )
    if hasattr(stream, "__iter__") or hasattr(stream, "__enter__"):
        raise TypeError(
            f"feed_stream takes an async stream, not a {kind}: pass the async client's stream"
            " (openai.AsyncOpenAI, anthropic.AsyncAnthropic), or feed a synchronous stream's"
            " events to the adapter's feed_event() yourself"
        )
    raise TypeError(
        f"feed_stream takes an async stream of an SDK's events, not a {kind}: pass what the"
        " async client's create(..., stream=True) returns, or the stream of its .stream() helper"
    )


class StreamFeed(Generic[T]):
    """An SDK stream being fed into a runtime; [`feed_stream`][inert.feed_stream] makes it and
    says its rules.

    An async iterator of the SDK's own events (each fed before it is handed on) and an async
    context manager that ends the feed when its block is left.
    """

    def __init__(
        self,
        runtime: EventFeeder,
        stream: AsyncIterable[T],
        adapter: StreamAdapter | TurnRef,
        *,
        trace: TraceContext | None,
    ) -> None:
        self._runtime = runtime
        self._stream = stream
        self._events = aiter(stream)
        # Until the first event chooses the adapter, the turn it is to be made for.
        self._adapter = adapter
        self._trace = trace
        self._finished = False
        self._raw: bool | None = None
        """Whether the stream yields its body's raw chunks (else decoded events), once seen."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if error is None:
            await self.aclose()
        else:
            await self._abandon(error)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        if self._finished:
            raise StopAsyncIteration
        try:
            event = await anext(self._events)
        except StopAsyncIteration:
            await self._finish(whole=True)
            raise
        except BaseException as error:
            await self._abandon(error)
            raise
        try:
            try:
                events = self._read(event)
            except ProtocolError as refused:
                # What the adapter read before it refused the stream is whole: fed first.
                await self._feed(list(refused.events))
                raise
            await self._feed(events)
        except BaseException as error:
            await self._abandon(error)
            raise
        return event

    async def run(self) -> None:
        """Feed the whole stream, its events unseen, and end the feed."""
        async with self:
            async for _ in self:
                pass

    async def aclose(self) -> None:
        """End the feed now: what the stream left unfinished is fed as lost, and the SDK stream
        is closed. Nothing happens once the feed has ended."""
        await self._finish(whole=False)

    def _read(self, item: object) -> list[Event]:
        """The events of one item of the stream: an SDK event, or a chunk of the raw body."""
        raw = isinstance(item, bytes | str)
        if self._raw is None:
            self._raw = raw
        elif raw != self._raw:
            first, now = ("chunks of a body", "an event") if self._raw else ("events", "a chunk")
            raise TypeError(
                f"the stream yielded {first}, then {now} ({type(item).__name__}): a stream is"
                " its body's chunks or its decoded events, not both"
            )
        if isinstance(self._adapter, TurnRef):
            if raw:
                raise TypeError(
                    f"the stream yields a body's raw chunks ({type(item).__name__}), which do"
                    " not say their protocol: pass its adapter (adapter=)"
                )
            self._adapter = _adapter_of_first_event(self._adapter, item)
        if isinstance(item, bytes | str):
            return self._adapter.feed(item)
        return self._adapter.feed_event(item)

    async def _feed(self, events: list[Event]) -> None:
        # Most of a stream's events (text, bookkeeping) come to nothing: a runtime behind a
        # loop crossing is not woken for those.
        if events:
            await self._runtime.feed(events, trace=self._trace)

    async def _abandon(self, error: BaseException) -> None:
        """End the feed after ``error``; a cancellation wins over a failure to feed the loss."""
        try:
            await self._finish(whole=False)
        except BaseException:
            if isinstance(error, Exception):
                raise

    async def _finish(self, *, whole: bool) -> None:
        """Close the adapter (after the ``[DONE]`` the SDK hid, where the body was ``whole``),
        feed what it reports, and close the SDK stream."""
        if self._finished:
            return
        self._finished = True
        try:
            adapter = self._adapter
            if not isinstance(adapter, TurnRef):
                # A raw body holds its own [DONE], or lacks it: then it was cut short.
                ending = (
                    adapter.feed_event(_DONE)
                    if whole and not self._raw and isinstance(adapter, OpenAIChatAdapter)
                    else []
                )
                await self._feed(ending + adapter.close())
        finally:
            await _close(self._events)
            if self._stream is not self._events:
                await _close(self._stream)


def _adapter_of_first_event(turn: TurnRef, first: object) -> StreamAdapter:
    """The adapter, for ``turn``, of the stream whose first event (an SDK event object or its
    JSON object) is ``first``; ``ValueError`` where it is of none of the streams told apart."""
    event = as_object(first)
    kind = event.get("type")
    chunk = event.get("chunk")
    if isinstance(kind, str):
        if kind.startswith("response."):
            return OpenAIResponsesAdapter(turn)
        if kind in _ANTHROPIC_KINDS:
            return AnthropicAdapter(turn)
        if kind == "chunk" and isinstance(chunk, Mapping) and "choices" in chunk:
            # The openai SDK's chat.completions.stream() helper wraps each chunk so.
            return OpenAIChatAdapter(turn)
    elif "choices" in event:
        return OpenAIChatAdapter(turn)
    shown = f" of type {kind!r}" if isinstance(kind, str) else ""
    raise ValueError(
        f"the stream's first event (a {type(first).__name__}{shown}) is not one of an OpenAI"
        " Responses, OpenAI Chat Completions or Anthropic Messages stream: pass its adapter"
    )


async def _close(source: object) -> None:
    """Close an async iterator or an SDK stream, whichever way it closes, if it does."""
    close = getattr(source, "aclose", None) or getattr(source, "close", None)
    if callable(close):
        closed = close()
        if inspect.isawaitable(closed):
            await closed
