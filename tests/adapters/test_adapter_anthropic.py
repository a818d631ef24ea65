"""The Anthropic Messages adapter: identities, ends, server tools, splices, the captured streams
and the awkward-order suite through its wire format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

import pytest
from adapter_support import FIXTURES, outcome, run_stream, turn_ref
from anthropic.types import RawMessageStreamEvent
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from inert import (
    ArgumentsAppended,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    ServerToolCalled,
    StreamLost,
    TextReceived,
    TurnRef,
)
from inert.adapters import AnthropicAdapter
from inert.testing.contracts import (
    AdapterContract,
    End,
    EndResponse,
    Fragment,
    Open,
    Renderer,
    Stream,
)

DIRECTORY = FIXTURES / "anthropic"
MESSAGE: dict[str, Any] = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events
    )


def start(identity: str = "msg_1") -> dict[str, Any]:
    return {"type": "message_start", "message": {**MESSAGE, "id": identity}}


def tool_use(index: int, identity: str, name: str = "get_weather") -> dict[str, Any]:
    block = {"type": "tool_use", "id": identity, "name": name, "input": {}}
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, piece: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "input_json_delta", "partial_json": piece},
    }


def stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def end(reason: str = "tool_use") -> list[dict[str, Any]]:
    return [
        {"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
    ]


def adapt(*events: dict[str, Any], close: bool = True) -> list[Event]:
    adapter = AnthropicAdapter(turn_ref())
    produced = adapter.feed(sse(*events))
    return produced + adapter.close() if close else produced


def kinds(events: list[Event]) -> list[str]:
    return [type(event).__name__ for event in events]


# --- the protocol's rules ----------------------------------------------------------------------


def test_a_tool_use_block_is_a_call_keyed_by_message_and_block_index() -> None:
    """The message id, the block index and the toolu_ id together make the call key."""
    events = adapt(start(), tool_use(1, "toolu_a"), delta(1, '{"city":'), delta(1, '"Oslo"}'))
    opened = events[0]
    assert isinstance(opened, CallOpened)
    assert (opened.key.response, opened.key.item, opened.key.call) == ("msg_1", "1", "toolu_a")
    assert b"".join(e.data for e in events if isinstance(e, ArgumentsAppended)) == (
        b'{"city":"Oslo"}'
    )


def test_the_empty_first_partial_json_is_no_fragment() -> None:
    """Anthropic's first input_json_delta is often empty: it carries nothing."""
    events = adapt(start(), tool_use(0, "toolu_a"), delta(0, ""), close=False)
    assert kinds(events) == ["CallOpened"]


def test_content_block_stop_ends_the_call_and_message_stop_the_response() -> None:
    """A call's own end is its block's stop; the message's stop with tool_use completes it."""
    events = adapt(start(), tool_use(0, "toolu_a"), delta(0, "{}"), stop(0), *end())
    assert kinds(events) == ["CallOpened", "ArgumentsAppended", "CallEnded", "ResponseEnded"]
    ended = events[-1]
    assert isinstance(ended, ResponseEnded)
    assert ended.reason is ResponseEndReason.COMPLETED


@pytest.mark.parametrize(
    ("stop_reason", "reason"),
    [
        ("end_turn", ResponseEndReason.COMPLETED),
        ("stop_sequence", ResponseEndReason.COMPLETED),
        ("max_tokens", ResponseEndReason.LENGTH),
        ("refusal", ResponseEndReason.REFUSAL),
        ("pause_turn", ResponseEndReason.PAUSED),
        ("model_context_window_exceeded", ResponseEndReason.CONTEXT_WINDOW_EXCEEDED),
        ("something_new", ResponseEndReason.INCOMPLETE),
    ],
)
def test_each_stop_reason_ends_the_message_as_it_means(
    stop_reason: str, reason: ResponseEndReason
) -> None:
    """Only end_turn, tool_use and stop_sequence are a successful end."""
    [ended] = [e for e in adapt(start(), *end(stop_reason)) if isinstance(e, ResponseEnded)]
    assert ended.reason is reason


def test_an_error_event_ends_the_open_message_with_its_type() -> None:
    """An overloaded_error after the HTTP 200 fails the message's calls."""
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    [ended] = [e for e in adapt(start(), tool_use(0, "t"), error) if isinstance(e, ResponseEnded)]
    assert (ended.reason, ended.detail) == (ResponseEndReason.ERROR, "overloaded_error")


def test_server_tools_are_recorded_and_their_input_is_not_call_data() -> None:
    """server_tool_use and mcp_tool_use blocks become ServerToolCalled, their deltas nothing."""
    server = {
        "type": "content_block_start",
        "index": 0,
        "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"},
    }
    events = adapt(start(), server, delta(0, '{"query":"x"}'), stop(0), close=False)
    assert kinds(events) == ["ServerToolCalled"]
    assert isinstance(events[0], ServerToolCalled)


def test_text_counts_characters_for_the_status() -> None:
    """Text deltas become TextReceived counts, never call data."""
    text_start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    text = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "hi"},
    }
    events = adapt(start(), text_start, text, close=False)
    assert [e.characters for e in events if isinstance(e, TextReceived)] == [2]


@pytest.mark.parametrize(
    "events",
    [
        [start(), delta(3, "{}")],
        [start(), stop(3)],
        [start(), tool_use(0, "toolu_a"), tool_use(0, "toolu_b")],
        [tool_use(0, "toolu_a")],
    ],
    ids=["delta before start", "stop before start", "index reused while open", "no message"],
)
def test_what_the_protocol_forbids_ends_the_message_as_a_violation(
    events: list[dict[str, Any]],
) -> None:
    """Deltas or stops of blocks never started, and a block index reused while open, are
    violations; a block outside any message has no response to end."""
    ended = [e for e in adapt(*events, close=False) if isinstance(e, ResponseEnded)]
    if events[0]["type"] != "message_start":
        assert ended == []
    else:
        assert [e.reason for e in ended] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_a_second_message_start_fails_the_open_message_and_starts_afresh() -> None:
    """A spliced stream: the unfinished message's calls fail, the new one reuses indexes."""
    events = adapt(start("msg_a"), tool_use(1, "toolu_a"), start("msg_b"), tool_use(1, "toolu_b"))
    assert kinds(events)[:3] == ["CallOpened", "ResponseEnded", "CallOpened"]
    first_end = events[1]
    assert isinstance(first_end, ResponseEnded)
    assert first_end.response.response == "msg_a"
    assert first_end.reason is ResponseEndReason.PROTOCOL_VIOLATION


def test_a_body_that_ends_before_message_stop_loses_the_message() -> None:
    """No resume in this protocol: an early end is a lost connection, not resumable."""
    events = adapt(start(), tool_use(0, "toolu_a"), delta(0, '{"a"'))
    lost = events[-1]
    assert isinstance(lost, StreamLost)
    assert not lost.resumable


def test_a_cut_last_event_is_a_lost_connection_not_a_violation() -> None:
    """A last event without its blank line that does not parse was cut with the connection."""
    adapter = AnthropicAdapter(turn_ref())
    events = adapter.feed(sse(start(), tool_use(0, "toolu_a")) + b'data: {"type": "conte')
    events += adapter.close()
    assert kinds(events) == ["CallOpened", "StreamLost"]


def test_feed_event_takes_dicts_and_refuses_other_values() -> None:
    """Decoded events are objects; anything else is a TypeError that names it."""
    adapter = AnthropicAdapter(turn_ref())
    assert kinds(adapter.feed_event(start()) + adapter.feed_event(tool_use(0, "t"))) == [
        "CallOpened"
    ]
    with pytest.raises(TypeError, match="list"):
        adapter.feed_event([1])


# --- the captured streams ----------------------------------------------------------------------

EXPECTED: dict[str, tuple[list[str], dict[str, tuple[object, object, object]], list[str]]] = {
    # file: (tools offered, outcome per "<message>/<block>", calls executed)
    "text-then-tool-use.sse": (
        ["get_weather"],
        {"msg_019Q1hrJbZG26Fb9BQhrkHEr/1": ("dispatched", None, "dispatched")},
        ["msg_019Q1hrJbZG26Fb9BQhrkHEr/1"],
    ),
    # max_tokens cut the input mid-string, with no content_block_stop: never dispatched.
    "tool-use-cut-by-max-tokens.sse": (
        ["make_file"],
        {"msg_01UdjYBBipA9omjYhicnevgq/1": ("failed", "response_failed", "reject")},
        [],
    ),
    # The web search ran at Anthropic: on record, cancelled as it opened, whatever the turn offers.
    "server-tool-use-then-refusal.sse": (
        ["web_search"],
        {"msg_fixture_atool_0001/0": ("cancelled", "server_executed", "reject")},
        [],
    ),
    # The first message's open call is discarded by the second message_start.
    "spliced-message-start.jsonl": (
        ["test-tool"],
        {
            "msg_first/1": ("failed", "protocol_violation", "reject"),
            "msg_second/1": ("dispatched", None, "dispatched"),
        },
        ["msg_second/1"],
    ),
    "three-messages-tool-search-deferred.jsonl": (
        ["readNoteTree", "executeEditorOperation"],
        {
            "msg_01WUP4eZFC22KbkesuJGqVAw/1": ("dispatched", None, "dispatched"),
            "msg_01WUP4eZFC22KbkesuJGqVAw/2": ("cancelled", "server_executed", "reject"),
            "msg_014CbStN8SFzjGbDkZzTtD7i/2": ("dispatched", None, "dispatched"),
        },
        ["msg_01WUP4eZFC22KbkesuJGqVAw/1", "msg_014CbStN8SFzjGbDkZzTtD7i/2"],
    ),
}


def fixture_input(path: Path) -> dict[str, Any]:
    if path.suffix == ".sse":
        return {"chunks": [path.read_bytes()]}
    return {"events": [json.loads(line) for line in path.read_text().splitlines() if line]}


def test_every_captured_stream_has_its_expected_outcome_written_down() -> None:
    """No capture of this provider goes untested."""
    assert sorted(path.name for path in DIRECTORY.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_a_captured_stream_ends_every_call_as_expected(name: str, tmp_path: Path) -> None:
    """Fed through the adapter into a runtime on SQLite, each call ends as written down."""
    tools, expected, executed = EXPECTED[name]
    run = await run_stream(
        AnthropicAdapter, tmp_path, tools=tools, **fixture_input(DIRECTORY / name)
    )
    assert {label: outcome(row) for label, row in run.rows.items()} == expected
    assert sorted(run.executed) == sorted(executed)


@pytest.mark.parametrize("name", sorted(name for name in EXPECTED if name.endswith(".sse")))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_any_split_of_a_captured_body_gives_the_same_events(name: str, data: st.DataObject) -> None:
    """The raw body cut into chunks anywhere gives the events of the whole."""
    body = (DIRECTORY / name).read_bytes()
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=30)))
    adapter = AnthropicAdapter(turn_ref())
    events: list[Event] = []
    for begin, finish in zip([0, *cuts], [*cuts, len(body)], strict=True):
        events += adapter.feed(body[begin:finish])
    whole = AnthropicAdapter(turn_ref())
    assert events + adapter.close() == whole.feed(body) + whole.close()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_decoded_events_and_sdk_objects_give_the_events_of_the_wire(name: str) -> None:
    """The same events as dicts, as SSE text, and as anthropic SDK objects adapt alike (events
    the SDK's union of stream events does not take, ping, error and a thinking block without
    its signature among them, stay dicts)."""
    path = DIRECTORY / name
    if path.suffix == ".sse":
        reader = AnthropicAdapter(turn_ref())
        raw = reader.feed(path.read_bytes()) + reader.close()
        objects = []
        for block in path.read_text().split("\n\n"):
            data = [line[5:].strip() for line in block.splitlines() if line.startswith("data:")]
            if data:
                objects.append(json.loads("".join(data)))
    else:
        objects = fixture_input(path)["events"]
        reader = AnthropicAdapter(turn_ref())
        raw = reader.feed(sse(*objects)) + reader.close()
    as_dicts = AnthropicAdapter(turn_ref())
    from_dicts = [e for o in objects for e in as_dicts.feed_event(o)] + as_dicts.close()
    models = TypeAdapter(RawMessageStreamEvent)
    as_sdk = AnthropicAdapter(turn_ref())
    from_sdk: list[Event] = []
    converted = 0
    for o in objects:
        try:
            event: object = models.validate_python(o)
        except ValidationError:
            event = o
        else:
            converted += 1
        from_sdk += as_sdk.feed_event(event)
    from_sdk += as_sdk.close()
    assert converted >= len(objects) // 2
    assert from_dicts == raw
    assert from_sdk == raw


# --- the awkward-order suite -------------------------------------------------------------------


class AnthropicRenderer:
    """Renders each step as Anthropic wire bytes and parses them with the adapter.

    One adapter per turn; a response's first opening sends its message_start; each call gets
    the next block index of its message; End is the block's content_block_stop, EndResponse the
    message_delta with the stop reason of the step's end reason, then message_stop.
    """

    STOP_REASONS: ClassVar[dict[ResponseEndReason, str]] = {
        ResponseEndReason.COMPLETED: "tool_use",
        ResponseEndReason.LENGTH: "max_tokens",
        ResponseEndReason.REFUSAL: "refusal",
    }

    def __init__(self) -> None:
        self.adapters: dict[TurnRef, AnthropicAdapter] = {}
        self.messages: dict[str, AnthropicAdapter] = {}
        self.blocks: dict[str, tuple[str, int]] = {}

    def render(self, step: Open | Fragment | End | EndResponse, stream: Stream) -> list[Event]:
        if isinstance(step, Open):
            adapter = self.adapters.setdefault(stream.turn, AnthropicAdapter(stream.turn))
            events: list[Event] = []
            if step.response not in self.messages:
                self.messages[step.response] = adapter
                events += adapter.feed(sse(start(step.response)))
            index = sum(1 for message, _ in self.blocks.values() if message == step.response)
            self.blocks[step.call] = (step.response, index)
            return events + adapter.feed(sse(tool_use(index, f"toolu_{step.call}", step.tool)))
        if isinstance(step, EndResponse):
            reason = self.STOP_REASONS[step.reason]
            return self.messages[step.response].feed(sse(*end(reason)))
        message, index = self.blocks[step.call]
        if isinstance(step, Fragment):
            return self.messages[message].feed(sse(delta(index, step.data.decode())))
        return self.messages[message].feed(sse(stop(index)))


class TestAwkwardOrders(AdapterContract):
    """Every awkward order, worded as Anthropic events, ends as the portable suite expects."""

    @pytest.fixture
    def renderer(self) -> Renderer:
        return AnthropicRenderer()


def test_ids_that_cannot_name_a_call_or_response_end_nothing_but_the_stream_s_trust() -> None:
    """A toolu_ id too long to be an identity violates its message; a message id that cannot
    name a response opens nothing at all; neither raises out of the adapter."""
    long_call = adapt(start(), tool_use(0, "t" * 600), close=False)
    assert [e.reason for e in long_call if isinstance(e, ResponseEnded)] == [
        ResponseEndReason.PROTOCOL_VIOLATION
    ]
    assert adapt(start("m" * 600), tool_use(0, "toolu_a")) == []
