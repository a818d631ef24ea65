"""The adapters' fast path against the reference path it replaced, kept as the oracle: the
captured provider streams, the bad-input corpus in the envelope and in the arguments, and the
decoder and the envelope reader alone, each read both ways (see ``fast_path_support``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from adapter_support import FIXTURES, recorded_body
from bad_inputs import CANARY_CASES, CORPUS
from fast_path_support import (
    ADAPTERS,
    LIMIT,
    assert_same_reading,
    events_of,
    split,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import ArgumentsAppended
from inert.adapters import (
    ServerSentEvent,
    SSEDecoder,
)
from inert.adapters._envelope import EnvelopeRefused, read_event_json, read_event_text


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
        assert isinstance(appended, ArgumentsAppended)
        assert appended.data == b'{"a"'
