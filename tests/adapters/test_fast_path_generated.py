"""The adapters' fast path against the reference path it replaced, kept as the oracle:
generated streams of every provider with deviations of every kind from the usual shape, and
every deviation of each provider's argument delta met in every state a stream can be in (see
``fast_path_support``).
"""

from __future__ import annotations

import copy as copy_module
import json
from typing import Any

import pytest
from fast_path_support import (
    LIMIT,
    NAMES,
    VALUES,
    assert_same_reading,
    split,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
        parent[name] = draw(st.sampled_from(VALUES))
    else:
        parent[draw(st.sampled_from(NAMES))] = draw(st.sampled_from(VALUES))
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
_CHANGES: list[Any] = [*VALUES, 3, 4, -0.0, "ab", "r", "c", "m", "i", "input_json_delta"]


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
            for name in NAMES:
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
