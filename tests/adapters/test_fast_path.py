"""The adapters' fast path against the reference path it replaced, kept as the oracle.

Every SSE adapter reads chunks by a fast path (``SSEDecoder.feed_fast``, ``read_event_text``,
each adapter's ``_handle_fast`` for its argument deltas); the reference path (``_FAST = False``)
is the reading the fast one must equal. The same streams go through both, split the same way:
the captured provider streams, generated streams of the usual shape and of every deviation
from it, the bad-input corpus in the envelope and in the arguments, bytes that are not UTF-8,
every line ending, events past the size limit. Each feed and each close must give the same
events, or raise the same error with the same events.
"""

from __future__ import annotations

import copy as copy_module
import itertools
import json
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from adapter_support import FIXTURES, recorded_body, turn_ref
from bad_inputs import CANARY_CASES, CORPUS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inert.adapters import (
    AnthropicAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    ProtocolError,
    ServerSentEvent,
    SSEDecoder,
)
from inert.adapters._envelope import EnvelopeRefused, read_event_json, read_event_text
from inert.adapters._sse_adapter import SSEAdapter


class _ReferenceResponses(OpenAIResponsesAdapter):
    _FAST = False


class _ReferenceChat(OpenAIChatAdapter):
    _FAST = False


class _ReferenceAnthropic(AnthropicAdapter):
    _FAST = False


class _ReferenceGemini(GeminiAdapter):
    _FAST = False


LIMIT = 512
"""A small event limit for the generated streams, so that some of their events pass it."""

Make = Callable[[int], SSEAdapter]

ADAPTERS: dict[str, tuple[Make, Make]] = {
    "openai-responses": (
        lambda limit: OpenAIResponsesAdapter(turn_ref(), max_event_size=limit),
        lambda limit: _ReferenceResponses(turn_ref(), max_event_size=limit),
    ),
    "openai-chat": (
        lambda limit: OpenAIChatAdapter(turn_ref(), max_event_size=limit),
        lambda limit: _ReferenceChat(turn_ref(), max_event_size=limit),
    ),
    "anthropic": (
        lambda limit: AnthropicAdapter(turn_ref(), max_event_size=limit),
        lambda limit: _ReferenceAnthropic(turn_ref(), max_event_size=limit),
    ),
    "gemini": (
        lambda limit: GeminiAdapter(turn_ref(), response="req-1", max_event_size=limit),
        lambda limit: _ReferenceGemini(turn_ref(), response="req-1", max_event_size=limit),
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


def sse_of(lines: Sequence[bytes], *, named: bool = True) -> bytes:
    """A body of ``data`` lines (JSON Lines fixtures), with an ``event`` line where named."""
    body = b""
    for line in lines:
        kind = b""
        if named:
            try:
                value = json.loads(line)
            except ValueError:
                value = None
            if isinstance(value, dict) and isinstance(value.get("type"), str):
                kind = b"event: " + value["type"].encode() + b"\n"
        body += kind + b"data: " + line + b"\n\n"
    return body


def fixture_bodies() -> list[tuple[str, str, bytes]]:
    bodies = []
    for provider in ADAPTERS:
        for path in sorted((FIXTURES / provider).iterdir()):
            if path.suffix == ".sse":
                interactions = path.read_bytes().count(b": interaction ") or 1
                bodies += [
                    (provider, f"{path.name}#{number}", recorded_body(path, number))
                    for number in range(interactions)
                ]
            elif path.suffix == ".jsonl":
                lines = [line for line in path.read_bytes().splitlines() if line.strip()]
                bodies += [
                    (provider, f"{path.name}:{named}", sse_of(lines, named=named))
                    for named in (True, False)
                ]
    return bodies


FIXTURE_BODIES = fixture_bodies()


@pytest.mark.parametrize(
    ("provider", "body"),
    [(provider, body) for provider, _, body in FIXTURE_BODIES],
    ids=[f"{provider}/{name}" for provider, name, _ in FIXTURE_BODIES],
)
def test_every_captured_stream_reads_alike_however_it_is_split(provider: str, body: bytes) -> None:
    """A captured provider stream gives the same events by both paths: one event a chunk, the
    whole body at once, as text, with CR LF line ends, and split at random places."""
    assert_same_reading(provider, events_of(body), limit=1 << 24)
    assert_same_reading(provider, [body], limit=1 << 24)
    assert_same_reading(provider, [body.decode("utf-8", "replace")], limit=1 << 24)
    assert_same_reading(provider, events_of(body.replace(b"\n", b"\r\n")), limit=1 << 24)
    chance = random.Random(len(body))
    for _ in range(8):
        cuts = [chance.randrange(len(body) + 1) for _ in range(chance.randrange(1, 40))]
        assert_same_reading(provider, split(body, cuts), limit=1 << 24)
    assert_same_reading(provider, events_of(body), limit=300)


# --- generated streams --------------------------------------------------------------------


def _junk(draw: st.DrawFn) -> bytes:
    """A deviation from the usual framing, where one may go."""
    return draw(
        st.sampled_from(
            [
                b": a comment\n",
                b"id: 7\n",
                b"retry: 10\n",
                b"\n",
                b"data: [DONE]\n\n",
                b"data:{}\n\n",
                b"data: not json\n\n",
                b"data: [1, 2]\n\n",
                b'event: error\ndata: {"error": {"type": "overloaded"}}\n\n',
                b"data: \xff\xfe\n\n",
                b'data: {"a": "\xc3"}\n\n',
                b"\xef\xbb\xbf",
                b'data: {"x": "' + b"y" * LIMIT + b'"}\n\n',
                b"event: ping\n\n",
                b'data: {"a": 1, "a": 2}\n\n',
                b'data: {"n": 1e400}\n\n',
                b"data: " + b"[" * 70 + b"]" * 70 + b"\n\n",
            ]
        )
    )


_VALUES: list[Any] = [
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


_NAMES = [
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


def _mutated(draw: st.DrawFn, event: dict[str, Any]) -> dict[str, Any]:
    """The event with one of its fields (at any depth) changed, dropped or added, or one of
    its lists given a second element."""
    places: list[tuple[dict[str, Any], str]] = []
    lists: list[list[Any]] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            places.append((value, ""))
            for name, inner in value.items():
                places.append((value, name))
                walk(inner)
        elif isinstance(value, list):
            lists.append(value)
            for inner in value:
                walk(inner)

    copy = copy_module.deepcopy(event)
    walk(copy)
    parent, name = draw(st.sampled_from(places))
    action = draw(st.sampled_from(["drop", "change", "change", "add", "twice"]))
    if action == "twice" and lists:
        chosen = draw(st.sampled_from(lists))
        if chosen:
            chosen.append(json.loads(json.dumps(chosen[0])))
    elif action == "drop" and name:
        del parent[name]
    elif action == "change" and name:
        parent[name] = draw(st.sampled_from(_VALUES))
    else:
        parent[draw(st.sampled_from(_NAMES))] = draw(st.sampled_from(_VALUES))
    return copy


def _text(draw: st.DrawFn, event: dict[str, Any]) -> bytes:
    """The event's JSON as a provider may write it, now and then with a key written twice."""
    separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    text = json.dumps(event, separators=separators, ensure_ascii=draw(st.booleans()))
    if draw(st.integers(0, 20)) == 0 and text.startswith("{") and len(text) > 2:
        text = '{"type": 1,' + text[1:]
    return text.encode("utf-8", "surrogatepass")


def _frame(draw: st.DrawFn, event: dict[str, Any]) -> bytes:
    kind = event.get("type")
    line = b"data: " + _text(draw, event) + b"\n"
    if isinstance(kind, str) and draw(st.booleans()):
        line = b"event: " + kind.encode("utf-8", "surrogatepass") + b"\n" + line
    return line + b"\n"


def _responses_events(draw: st.DrawFn) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": "resp_1"}}]
    for index in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["function_call", "function_call", "custom_tool_call"]))
        item = {"type": kind, "id": f"fc_{index}", "call_id": f"call_{index}", "name": "tool"}
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        delta = (
            "response.function_call_arguments.delta"
            if kind == "function_call"
            else "response.custom_tool_call_input.delta"
        )
        pieces = draw(st.lists(st.text(max_size=6), max_size=6))
        events += [
            {"type": delta, "item_id": f"fc_{index}", "output_index": index, "delta": piece}
            for piece in pieces
        ]
        arguments = "".join(pieces)
        done = {**item, "arguments": arguments, "input": arguments, "status": "completed"}
        events.append({"type": "response.output_item.done", "output_index": index, "item": done})
    events.append({"type": "response.completed", "response": {"id": "resp_1"}})
    numbered = draw(st.booleans())
    for number, event in enumerate(events):
        if numbered:
            event["sequence_number"] = number
    return events


def _chat_events(draw: st.DrawFn) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "created": 1,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events = []
    for index in range(draw(st.integers(1, 2))):
        first = {"index": index, "id": f"call_{index}", "function": {"name": "tool"}}
        events.append(chunk({"tool_calls": [first]}))
        for piece in draw(st.lists(st.text(max_size=6), max_size=6)):
            fragment: dict[str, Any] = {"index": index, "function": {"arguments": piece}}
            if draw(st.booleans()):
                fragment["id"] = ""
                fragment["function"]["name"] = ""
            events.append(chunk({"tool_calls": [fragment]}))
    events.append(chunk({}, "tool_calls"))
    return events


def _anthropic_events(draw: st.DrawFn) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = [{"type": "message_start", "message": {"id": "msg_1"}}]
    for index in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["tool_use", "tool_use", "server_tool_use", "text"]))
        block = {"type": kind, "id": f"toolu_{index}", "name": "tool", "text": ""}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in draw(st.lists(st.text(max_size=6), max_size=6))
        ]
        events.append({"type": "content_block_stop", "index": index})
    events.append({"type": "message_delta", "delta": {"stop_reason": "tool_use"}})
    events.append({"type": "message_stop"})
    return events


def _is_delta(event: dict[str, Any]) -> bool:
    text = json.dumps(event)
    return any(mark in text for mark in ('delta"', '"arguments"', "partial_json"))


GENERATORS = {
    "openai-responses": _responses_events,
    "openai-chat": _chat_events,
    "anthropic": _anthropic_events,
}


@st.composite
def streams(draw: st.DrawFn, provider: str) -> list[bytes]:
    """A provider's stream, one event a chunk, with events changed, dropped, repeated or
    moved, junk between them, other line ends, and some chunks split or joined."""
    events = GENERATORS[provider](draw)
    deltas = [at for at, event in enumerate(events) if _is_delta(event)]
    for _ in range(draw(st.integers(0, 3))):
        # Most changes go to the argument deltas: the events the fast path reads.
        if deltas and draw(st.integers(0, 2)) > 0:
            at = draw(st.sampled_from(deltas))
        else:
            at = draw(st.integers(0, len(events) - 1))
        events[at] = _mutated(draw, events[at])
    if draw(st.booleans()) and events:
        moved = events.pop(draw(st.integers(0, len(events) - 1)))
        events.insert(draw(st.integers(0, len(events))), moved)
    if draw(st.booleans()) and events:
        events.append(events[draw(st.integers(0, len(events) - 1))])
    chunks: list[bytes] = []
    for event in events:
        if draw(st.integers(0, 5)) == 0:
            chunks.append(_junk(draw))
        chunks.append(_frame(draw, event))
    if draw(st.integers(0, 3)) == 0:
        ending = draw(st.sampled_from([b"\r\n", b"\r"]))
        chunks = [chunk.replace(b"\n", ending) for chunk in chunks]
    if chunks and draw(st.integers(0, 3)) == 0:
        # The body ends inside its last event.
        chunks[-1] = chunks[-1][: draw(st.integers(0, len(chunks[-1]) - 1))]
    body = b"".join(chunks)
    shape = draw(st.sampled_from(["events", "events", "cut", "whole"]))
    if shape == "cut":
        return split(body, draw(st.lists(st.integers(0, len(body)), max_size=12)))
    if shape == "whole":
        return [body]
    return chunks


@pytest.mark.parametrize("provider", sorted(GENERATORS))
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_streams_read_alike(provider: str, data: st.DataObject) -> None:
    """A generated stream of the provider, with deviations of every kind from the usual
    shape, gives the same events, errors and refusals by both paths."""
    chunks = data.draw(streams(provider))
    assert_same_reading(provider, chunks)


# --- every deviation of the hot event, in every state ------------------------------------

_RESPONSES_OPEN: list[dict[str, Any]] = [
    {"type": "response.created", "response": {"id": "r"}},
    {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"type": "function_call", "id": "fc_0", "call_id": "c", "name": "t"},
    },
]
_RESPONSES_DELTA: dict[str, Any] = {
    "type": "response.function_call_arguments.delta",
    "item_id": "fc_0",
    "output_index": 0,
    "delta": "ab",
}
_CHAT_OPEN: list[dict[str, Any]] = [
    {
        "id": "c",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "id": "i", "function": {"name": "t"}}]},
            }
        ],
    }
]
_CHAT_DELTA = {
    "id": "c",
    "choices": [
        {
            "index": 0,
            "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "ab"}}]},
            "finish_reason": None,
        }
    ],
}
_ANTHROPIC_START: dict[str, Any] = {"type": "message_start", "message": {"id": "m"}}
_ANTHROPIC_DELTA = {
    "type": "content_block_delta",
    "index": 0,
    "delta": {"type": "input_json_delta", "partial_json": "ab"},
}


def _block(kind: str) -> dict[str, Any]:
    return {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": kind, "id": "tu", "name": "t", "text": ""},
    }


def _numbered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**event, "sequence_number": number} for number, event in enumerate(events)]


_CHAT_SECOND_CHOICE = {
    "id": "c",
    "choices": [
        {"index": 1, "delta": {"tool_calls": [{"index": 0, "id": "j", "function": {"name": "t"}}]}}
    ],
}
_HOT: dict[str, tuple[dict[str, Any], list[list[Any]]]] = {
    "openai-responses": (
        _RESPONSES_DELTA,
        [
            [],
            _RESPONSES_OPEN,
            _numbered(_RESPONSES_OPEN),
            _numbered([*_RESPONSES_OPEN, {**_RESPONSES_DELTA, "delta": ""}]),
            _numbered([*_RESPONSES_OPEN, {"type": "response.completed", "response": {"id": "r"}}]),
            [
                *_RESPONSES_OPEN,
                {**_RESPONSES_DELTA, "type": "response.function_call_arguments.done"},
            ],
            [
                *_RESPONSES_OPEN,
                {
                    "type": "response.output_item.added",
                    "output_index": 1,
                    "item": {"type": "custom_tool_call", "id": "ct", "call_id": "d", "name": "u"},
                },
                {
                    "type": "response.output_item.added",
                    "output_index": 2,
                    "item": {"type": "message", "id": "fc_0"},
                },
            ],
            [*_RESPONSES_OPEN, {**_RESPONSES_DELTA, "sequence_number": 7}],
        ],
    ),
    "openai-chat": (
        _CHAT_DELTA,
        [
            [],
            _CHAT_OPEN,
            [*_CHAT_OPEN, _CHAT_SECOND_CHOICE],
            [*_CHAT_OPEN, {"id": "c", "choices": [{"index": 0, "finish_reason": "stop"}]}],
            [*_CHAT_OPEN, "[DONE]"],
            [*_CHAT_OPEN, {"id": "other", "choices": []}],
            [{**_CHAT_OPEN[0], "id": ""}],
        ],
    ),
    "anthropic": (
        _ANTHROPIC_DELTA,
        [
            [],
            [_ANTHROPIC_START],
            [_ANTHROPIC_START, _block("tool_use")],
            [_ANTHROPIC_START, _block("tool_use"), {"type": "content_block_stop", "index": 0}],
            [_ANTHROPIC_START, _block("tool_use"), {"type": "message_stop"}],
            [_ANTHROPIC_START, _block("text")],
            [_ANTHROPIC_START, _block("server_tool_use")],
        ],
    ),
}
_CHANGES: list[Any] = [*_VALUES, 3, 4, -0.0, "ab", "r", "c", "m", "i", "input_json_delta"]


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every value in ``value`` (keys and list positions), itself first."""
    found = [at]
    if isinstance(value, dict):
        for name, inner in value.items():
            found += _paths(inner, (*at, name))
    elif isinstance(value, list):
        for number, inner in enumerate(value):
            found += _paths(inner, (*at, number))
    return found


def _copy_at(event: dict[str, Any], path: tuple[Any, ...]) -> tuple[dict[str, Any], Any]:
    """A deep copy of the event, and the copy's value at ``path``."""
    copy = copy_module.deepcopy(event)
    value: Any = copy
    for step in path:
        value = value[step]
    return copy, value


def _variants(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The event, and each copy of it with one field (at any depth) dropped or changed, one
    field added to one of its objects, or one of its lists doubled or emptied."""
    variants = [event]
    for path in _paths(event):
        if path:
            copy, parent = _copy_at(event, path[:-1])
            del parent[path[-1]]
            variants.append(copy)
            for new in _CHANGES:
                copy, parent = _copy_at(event, path[:-1])
                parent[path[-1]] = new
                variants.append(copy)
        copy, value = _copy_at(event, path)
        if isinstance(value, dict):
            for name in _NAMES:
                for new in ("x", 1, None, "tool_calls.function.arguments.delta"):
                    copy, value = _copy_at(event, path)
                    value[name] = new
                    variants.append(copy)
        elif isinstance(value, list) and value:
            value.append(copy_module.deepcopy(value[0]))
            variants.append(copy)
            copy, value = _copy_at(event, path)
            value.clear()
            variants.append(copy)
    return variants


def _chunk_of(event: Any) -> bytes:
    if isinstance(event, str):
        return b"data: " + event.encode() + b"\n\n"
    return (
        b"data: "
        + json.dumps(event, separators=(",", ":")).encode("utf-8", "surrogatepass")
        + b"\n\n"
    )


@pytest.mark.parametrize("provider", sorted(_HOT))
def test_every_deviation_of_the_hot_event_in_every_state_reads_alike(provider: str) -> None:
    """Each argument delta with one field dropped, changed, added, doubled or emptied, met in
    each state a stream can be in (nothing open, open, numbered, ended, finished, broken,
    another item or block), then the usual delta after it, gives the same events by both
    paths."""
    hot, prefixes = _HOT[provider]
    for prefix in prefixes:
        numbered = bool(prefix) and isinstance(prefix[0], dict) and "sequence_number" in prefix[0]
        usual = {**hot, "sequence_number": len(prefix)} if numbered else hot
        follow = {**hot, "sequence_number": len(prefix) + 1} if numbered else hot
        for variant in _variants(usual):
            chunks = [_chunk_of(event) for event in [*prefix, variant, follow]]
            assert_same_reading(provider, chunks)


# --- the bad-input corpus -----------------------------------------------------------------


BAD = [*CORPUS, *CANARY_CASES]


def _bad_streams(data: bytes) -> dict[str, list[bytes]]:
    """The bad bytes as an event's whole data, and as the arguments of each provider's
    deltas (escaped in the JSON where they are text; raw in the data line where not)."""
    try:
        escaped = json.dumps(data.decode("utf-8", "surrogatepass")).encode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        escaped = b'"' + data + b'"'
    responses = [
        b'data: {"type":"response.created","response":{"id":"r"}}\n\n',
        b'data: {"type":"response.output_item.added","output_index":0,"item":'
        b'{"type":"function_call","id":"fc","call_id":"c","name":"t"}}\n\n',
        b'data: {"type":"response.function_call_arguments.delta","item_id":"fc",'
        b'"output_index":0,"delta":' + escaped + b"}\n\n",
        b"data: " + data + b"\n\n",
        b'data: {"type":"response.completed","response":{"id":"r"}}\n\n',
    ]
    chat = [
        b'data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"i",'
        b'"function":{"name":"t"}}]}}]}\n\n',
        b'data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
        b'"function":{"arguments":' + escaped + b"}}]}}]}\n\n",
        b"data: " + data + b"\n\n",
        b"data: [DONE]\n\n",
    ]
    anthropic = [
        b'data: {"type":"message_start","message":{"id":"m"}}\n\n',
        b'data: {"type":"content_block_start","index":0,"content_block":'
        b'{"type":"tool_use","id":"tu","name":"t"}}\n\n',
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta",'
        b'"partial_json":' + escaped + b"}}\n\n",
        b"data: " + data + b"\n\n",
        b'data: {"type":"message_stop"}\n\n',
    ]
    return {"openai-responses": responses, "openai-chat": chat, "anthropic": anthropic}


@pytest.mark.parametrize("case", BAD, ids=[case.name for case in BAD])
def test_the_bad_input_corpus_reads_alike(case: Any) -> None:
    """Each bad input of the corpus, as an event's data and as streamed arguments, gives the
    same events and refusals by both paths, one event a chunk and split byte by byte."""
    for provider, chunks in _bad_streams(case.data).items():
        assert_same_reading(provider, chunks, limit=1 << 20)
        if len(case.data) < 200:
            body = b"".join(chunks)
            assert_same_reading(provider, [body[at : at + 1] for at in range(len(body))])


# --- the pieces ---------------------------------------------------------------------------


def _plain(events: Sequence[ServerSentEvent | tuple[str, str]]) -> list[tuple[Any, ...]]:
    return [
        event
        if isinstance(event, tuple)
        else (event.event, event.data)
        if not event.refused and not event.replaced
        else (event.event, event.data, event.refused, event.replaced)
        for event in events
    ]


@settings(max_examples=500)
@given(
    lines=st.lists(
        st.sampled_from(
            [
                b"data: x",
                b"data:y",
                b"data:  z",
                b"data",
                b"event: e",
                b"event:",
                b"event:f:g",
                b": c",
                b"id: 1",
                b"",
                b"",
                b"data: \xff",
                b"data: \xc3",
                b"\xa9",
                b"\xef\xbb\xbfdata: b",
                b"data: " + b"w" * 40,
                b"data: \xed\xa0\x80",
            ]
        ),
        max_size=20,
    ),
    ending=st.sampled_from([b"\n", b"\n", b"\r\n", b"\r"]),
    cuts=st.lists(st.integers(0, 2000), max_size=10),
)
def test_the_decoder_reads_every_split_alike(
    lines: list[bytes], ending: bytes, cuts: list[int]
) -> None:
    """``feed_fast`` gives the events ``feed`` gives, for any lines, line end and split."""
    body = b"".join(line + ending for line in lines)
    fast, reference = SSEDecoder(max_event_size=64), SSEDecoder(max_event_size=64)
    for chunk in split(body, cuts):
        assert _plain(fast.feed_fast(chunk)) == _plain(reference.feed(chunk))


ENVELOPES = [
    '{"a": 1}',
    '{"a":1,"a":2}',
    ' {"a": [1, 2.5, "x"]} ',
    '{"a": 1} x',
    "\ufeff{}",
    "[NaN]",
    '{"n": 1e400}',
    '{"n": ' + "1" * 65 + "}",
    '{"n": ' + "1" * 64 + "}",
    '{"n": -' + "1" * 64 + "}",
    "[" * 65 + "]" * 65,
    "[" * 64 + "]" * 64,
    '{"s": "[[[[' + "[" * 80 + '"}',
    '"\\ud800"',
    '{"\\u0061": 1, "a": 2}',
    "",
    "1",
    "{",
    '{"a": "\x01"}',
]


@settings(max_examples=500)
@given(
    text=st.one_of(
        st.sampled_from(ENVELOPES),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
            ),
        ).map(json.dumps),
        st.text(alphabet='{}[]":,1 ae\\u0', max_size=30),
    )
)
def test_the_envelope_reader_reads_text_alike(text: str) -> None:
    """``read_event_text`` gives the value, or raises the error, ``read_event_json`` does."""

    def outcome(read: Callable[[str], Any]) -> tuple[Any, ...]:
        try:
            return ("value", json.dumps(read(text)))
        except EnvelopeRefused as refused:
            return ("refused", refused.msg)
        except ValueError as error:
            return (type(error).__name__, str(error))

    assert outcome(read_event_text) == outcome(read_event_json)


def test_the_fast_path_reads_the_usual_deltas_without_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The usual argument delta of each provider is read by its fast path: feeding it never
    reaches the reference's per-event handling."""
    bodies: dict[str, list[bytes]] = {
        "openai-responses": [
            b'data: {"type":"response.created","response":{"id":"r"},"sequence_number":0}\n\n',
            b'data: {"type":"response.output_item.added","output_index":0,"sequence_number":1,'
            b'"item":{"type":"function_call","id":"fc","call_id":"c","name":"t"}}\n\n',
        ],
        "openai-chat": [
            b'data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,'
            b'"id":"i","function":{"name":"t","arguments":""}}]}}]}\n\n',
        ],
        "anthropic": [
            b'data: {"type":"message_start","message":{"id":"m"}}\n\n',
            b'data: {"type":"content_block_start","index":0,"content_block":'
            b'{"type":"tool_use","id":"tu","name":"t"}}\n\n',
        ],
    }
    deltas = {
        "openai-responses": b'event: response.function_call_arguments.delta\ndata: {"type":'
        b'"response.function_call_arguments.delta","item_id":"fc","output_index":0,'
        b'"delta":"{\\"a\\"","sequence_number":2}\n\n',
        "openai-chat": b'data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":'
        b'[{"index":0,"function":{"arguments":"{\\"a\\""}}]},"finish_reason":null}]}\n\n',
        "anthropic": b'event: content_block_delta\ndata: {"type":"content_block_delta",'
        b'"index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"a\\""}}\n\n',
    }
    for provider, opening in bodies.items():
        adapter = ADAPTERS[provider][0](LIMIT)
        for chunk in opening:
            adapter.feed(chunk)

        def refuse(*_: object) -> list[Any]:
            raise AssertionError("the reference path read a usual delta")

        monkeypatch.setattr(adapter, "_handle", refuse)
        monkeypatch.setattr(adapter, "_read", refuse)
        [appended] = adapter.feed(deltas[provider])
        assert appended.data == b'{"a"'  # type: ignore[attr-defined]
