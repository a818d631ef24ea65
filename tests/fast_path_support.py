"""The adapters' fast path against their reference path, for the tests that compare them.

Every SSE adapter reads chunks by a fast path (``SSEDecoder.feed_fast``, ``read_event_text``,
each adapter's ``_handle_fast`` for its argument deltas); the reference path (``_FAST = False``)
is the reading the fast one must equal. ``assert_same_reading`` feeds the same chunks to both
and requires each feed and the close to give the same events, or to raise the same error with
the same events.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from adapter_support import turn_ref

from inert.adapters import (
    AnthropicAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ProtocolError,
)
from inert.adapters._sse_adapter import SSEAdapter


class ReferenceResponses(OpenAIResponsesAdapter):
    _FAST = False


class ReferenceChat(OpenAIChatAdapter):
    _FAST = False


class ReferenceAnthropic(AnthropicAdapter):
    _FAST = False


class ReferenceGemini(GeminiAdapter):
    _FAST = False


LIMIT = 512
"""A small event limit for the generated streams, so that some of their events pass it."""

Make = Callable[[int], SSEAdapter]

ADAPTERS: dict[str, tuple[Make, Make]] = {
    "openai-responses": (
        lambda limit: OpenAIResponsesAdapter(turn_ref(), max_event_size=limit),
        lambda limit: ReferenceResponses(turn_ref(), max_event_size=limit),
    ),
    "openai-chat": (
        lambda limit: OpenAIChatAdapter(turn_ref(), max_event_size=limit),
        lambda limit: ReferenceChat(turn_ref(), max_event_size=limit),
    ),
    "anthropic": (
        lambda limit: AnthropicAdapter(turn_ref(), max_event_size=limit),
        lambda limit: ReferenceAnthropic(turn_ref(), max_event_size=limit),
    ),
    "gemini": (
        lambda limit: GeminiAdapter(turn_ref(), response="req-1", max_event_size=limit),
        lambda limit: ReferenceGemini(turn_ref(), response="req-1", max_event_size=limit),
    ),
}


def _outcome(step: Callable[[], list[Any]]) -> tuple[Any, ...]:
    try:
        return ("events", step())
    except ProtocolError as error:
        return ("protocol error", str(error), error.events)
    except (ValueError, TypeError) as error:
        return (type(error).__name__, str(error))


def _read(adapter: SSEAdapter, chunks: Sequence[bytes | str]) -> list[tuple[Any, ...]]:
    """What each feed of the chunks, then the close, gave."""
    seen = [_outcome(lambda chunk=chunk: adapter.feed(chunk)) for chunk in chunks]  # type: ignore[misc]
    return [*seen, _outcome(adapter.close)]


def assert_same_reading(
    provider: str, chunks: Sequence[bytes | str], limit: int = LIMIT
) -> list[tuple[Any, ...]]:
    fast, reference = ADAPTERS[provider]
    read = _read(fast(limit), chunks)
    assert read == _read(reference(limit), chunks)
    return read


def split(body: bytes, cuts: Sequence[int]) -> list[bytes]:
    bounds = sorted({0, *(cut % (len(body) + 1) for cut in cuts), len(body)})
    return [body[start:end] for start, end in itertools.pairwise(bounds)]


def events_of(body: bytes) -> list[bytes]:
    """One chunk per event, as a provider flushes them."""
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


VALUES: list[Any] = [
    0,
    1,
    2,
    3,
    "stop",
    -1,
    True,
    None,
    1.0,
    "",
    "x",
    "fc_0",
    "fc_1",
    "0",
    [],
    {},
    "\ud800",
    'é\u2028"\\',
]
"""Values a field of a provider event is changed to: of every JSON type, the usual ones'
neighbours, identities of the streams, a lone surrogate and characters JSON escapes."""

NAMES = [
    "extra",
    "type",
    "error",
    "id",
    "name",
    "content",
    "refusal",
    "finish_reason",
    "function_call",
    "sequence_number",
    "item_id",
    "output_index",
    "index",
    "delta",
]
"""Fields added to an object of a provider event: the ones some protocol reads."""
