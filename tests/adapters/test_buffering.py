"""Bounded, linear buffering of the wire: an SSE event or an event-stream frame past its limit
ends the response when the limit is crossed, not when the body ends, and a line that never ends
costs time and memory in proportion to what arrived."""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable

import pytest
from adapter_support import FIXTURES, turn_ref
from hypothesis import given
from hypothesis import strategies as st

from inert import Event, ResponseEnded, ResponseEndReason
from inert.adapters import (
    AnthropicAdapter,
    BedrockAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ServerSentEvent,
    SSEDecoder,
    StreamAdapter,
    event_stream_message,
)

LIMIT = 20_000

SSE_ADAPTERS: dict[str, tuple[Callable[[], StreamAdapter], str]] = {
    "openai-responses": (
        lambda: OpenAIResponsesAdapter(turn_ref(), max_event_size=LIMIT),
        "openai-responses/two-function-calls-gpt-4o.sse",
    ),
    "openai-chat": (
        lambda: OpenAIChatAdapter(turn_ref(), max_event_size=LIMIT),
        "openai-chat/parallel-tool-calls-gpt-4o.sse",
    ),
    "anthropic": (
        lambda: AnthropicAdapter(turn_ref(), max_event_size=LIMIT),
        "anthropic/text-then-tool-use.sse",
    ),
    "gemini": (
        lambda: GeminiAdapter(turn_ref(), response="named", max_event_size=LIMIT),
        "gemini/gemini-two-whole-function-calls.sse",
    ),
}


def _violated(produced: list[Event]) -> bool:
    return any(
        isinstance(event, ResponseEnded) and event.reason is ResponseEndReason.PROTOCOL_VIOLATION
        for event in produced
    )


def _open(adapter: StreamAdapter, path: str) -> None:
    """Feed the capture's events until the adapter has something open (a call, or text)."""
    body = (FIXTURES / path).read_bytes().replace(b"\r\n", b"\n")
    # Gemini's capture is one chunk that also ends the response: without its finish reason,
    # the response stays open.
    body = body.replace(b'"finishReason": "STOP",', b"")
    for event in body.split(b"\n\n"):
        produced = adapter.feed(event + b"\n\n")
        assert not _violated(produced)
        if produced:
            return
    raise AssertionError(f"nothing of {path} opened")


@pytest.mark.parametrize("provider", sorted(SSE_ADAPTERS))
def test_an_event_past_the_limit_ends_its_response_as_the_limit_is_crossed(provider: str) -> None:
    """A data line that keeps growing ends the response in the very chunk that takes it past
    the adapter's limit; the chunks before it end nothing."""
    make, path = SSE_ADAPTERS[provider]
    adapter = make()
    _open(adapter, path)
    assert not _violated(adapter.feed(b"data: " + b"x" * (LIMIT // 2)))
    crossing = adapter.feed(b"x" * LIMIT)
    assert _violated(crossing)
    assert not _violated(adapter.feed(b"x" * 100_000))


def test_a_frame_announcing_more_than_the_limit_ends_its_response_at_its_prelude() -> None:
    """An event-stream frame whose prelude announces more than the limit ends the response
    once its 12-byte prelude is in, before any of its body."""
    adapter = BedrockAdapter(turn_ref(), response="req-1", max_event_size=LIMIT)
    adapter.feed(event_stream_message("messageStart", {"role": "assistant"}))
    big = event_stream_message("contentBlockDelta", {"pad": "x" * (2 * LIMIT)})
    assert _violated(adapter.feed(big[:12]))


@given(
    size=st.integers(LIMIT + 1, 4 * LIMIT),
    cuts=st.lists(st.integers(1, 4 * LIMIT), max_size=12),
)
def test_the_refusal_comes_once_where_the_limit_is_crossed_however_the_body_is_split(
    size: int, cuts: list[int]
) -> None:
    """Split anywhere, an event of ``size`` characters past the limit gives one refusal, in the
    chunk that crosses the limit, and the event after it is read whole."""
    body = b"data: " + b"x" * size + b"\n\ndata: {}\n\n"
    bounds = sorted({0, *(cut for cut in cuts if cut < len(body)), len(body)})
    decoder = SSEDecoder(max_event_size=LIMIT)
    seen: list[tuple[int, ServerSentEvent]] = []
    for start, end in itertools.pairwise(bounds):
        seen += [(end, event) for event in decoder.feed(body[start:end])]
    assert [event for _, event in seen][1:] == [ServerSentEvent("message", "{}")]
    [(at, refused)] = seen[:1]
    assert refused.refused == f"an event longer than {LIMIT} characters"
    crossing = next(end for end in bounds if end > LIMIT)
    assert at == crossing


def test_a_line_that_never_ends_is_buffered_in_linear_time() -> None:
    """Ten megabytes of one line in 20,000 chunks are taken in one pass: a decoder that joined
    what it held with every chunk would copy about 100 GB and never finish here."""
    decoder = SSEDecoder(max_event_size=64 * 1024 * 1024)
    piece = b"y" * 500
    assert decoder.feed(b"data: ") == []
    for _ in range(20_000):
        assert decoder.feed(piece) == []
    [event] = decoder.feed(b"\n\n")
    assert len(event.data) == 10_000_000


def _split_lines_cpu_time(body: bytes, chunk: int) -> tuple[int, float]:
    """The events of ``body`` fed in chunks of ``chunk`` bytes, and the CPU time they took,
    the garbage collector held off: its full passes over the many events alive grow faster
    than the body, which is the collector's cost, not the decoder's."""
    decoder = SSEDecoder()
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        events = sum(len(decoder.feed(body[at : at + chunk])) for at in range(0, len(body), chunk))
        return events, time.process_time() - start
    finally:
        gc.enable()


@pytest.mark.slow(seconds=5)
@pytest.mark.parametrize(
    ("data", "newline", "chunk"),
    [
        (b"{}", b"\r", 1 << 30),
        (b"{}", b"\n", 1 << 30),
        (b"{}", b"\r\n", 1 << 30),
        (b"{}", b"\r\n", 9),
        (b"\xff\xfe", b"\n", 1 << 30),
    ],
    ids=["CR", "LF", "CR LF", "CR LF split between chunks", "bytes not UTF-8"],
)
def test_lines_are_split_in_linear_time_whatever_ends_them(
    data: bytes, newline: bytes, chunk: int
) -> None:
    """Eight times the body costs well under thirty-two times the CPU time, for a body in one
    piece whose lines all end with CR, LF or CR LF, for one in chunks that cut CR LF pairs, and
    for one in one piece with bytes that are not UTF-8 in every event: a search for the line
    ending not used that ran to the body's end at every line, or a copy of the rest of the body
    at every bad byte, would cost sixty-four times."""
    event = b"data: " + data + newline + newline
    small_events, small = _split_lines_cpu_time(event * 40_000, chunk)
    large_events, large = _split_lines_cpu_time(event * 320_000, chunk)
    assert (small_events, large_events) == (40_000, 320_000)
    assert large < 32 * max(small, 0.001), (small, large)
