"""The Bedrock ConverseStream adapter: the event-stream framing, identities, ends, exceptions,
the captured streams and the awkward-order suite through its wire format."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from adapter_support import FIXTURES, outcome, run_stream, turn_ref
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import (
    ArgumentsAppended,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    StreamLost,
    TextReceived,
    TurnRef,
)
from inert.adapters import (
    BedrockAdapter,
    EventStreamDecoder,
    ProtocolError,
    event_stream_message,
)
from inert.testing.contracts import (
    AdapterContract,
    End,
    EndResponse,
    Fragment,
    Open,
    Renderer,
    Stream,
)

DIRECTORY = FIXTURES / "bedrock"


def frames(*events: dict[str, Any]) -> bytes:
    """Decoded events (``{"<type>": {...}}``) framed as Bedrock sends them."""
    return b"".join(
        event_stream_message(kind, body, exception=kind.endswith("Exception"))
        for event in events
        for kind, body in event.items()
    )


def tool_start(index: int, identity: str, name: str = "get_weather") -> dict[str, Any]:
    start = {"toolUse": {"toolUseId": identity, "name": name}}
    return {"contentBlockStart": {"contentBlockIndex": index, "start": start}}


def tool_input(index: int, piece: str) -> dict[str, Any]:
    return {
        "contentBlockDelta": {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}
    }


def block_stop(index: int) -> dict[str, Any]:
    return {"contentBlockStop": {"contentBlockIndex": index}}


def message_stop(reason: str = "tool_use") -> dict[str, Any]:
    return {"messageStop": {"stopReason": reason}}


MESSAGE_START = {"messageStart": {"role": "assistant"}}


def adapt(*events: dict[str, Any], close: bool = True) -> list[Event]:
    adapter = BedrockAdapter(turn_ref(), response="req-1")
    produced = adapter.feed(frames(*events))
    return produced + adapter.close() if close else produced


def kinds(events: list[Event]) -> list[str]:
    return [type(event).__name__ for event in events]


# --- the framing ------------------------------------------------------------------------------


def test_the_decoder_reads_headers_and_payload_of_each_message() -> None:
    """Each event-stream message gives its headers and its JSON payload."""
    [(headers, payload)] = EventStreamDecoder().feed(frames(message_stop()))
    assert headers[":event-type"] == "messageStop"
    assert headers[":message-type"] == "event"
    assert json.loads(payload) == {"stopReason": "tool_use"}


@pytest.mark.parametrize("damage", ["prelude checksum", "message checksum", "impossible length"])
def test_a_damaged_frame_ends_the_message_as_a_violation_and_stops_reading(damage: str) -> None:
    """A frame whose checksums or lengths fail cannot be trusted, nor anything after it: its
    message ends as a violation, and a later feed raises the refusal again instead of reading
    on."""
    good = frames(MESSAGE_START, tool_start(0, "t1"))
    bad = bytearray(frames(tool_input(0, "{}")))
    if damage == "prelude checksum":
        bad[9] ^= 0xFF
    elif damage == "message checksum":
        bad[-1] ^= 0xFF
    else:
        bad[0:4] = struct.pack(">I", 3)
    adapter = BedrockAdapter(turn_ref(), response="req-1")
    events = adapter.feed(good + bytes(bad))
    with pytest.raises(ProtocolError, match="nothing more of it is read"):
        adapter.feed(frames(message_stop()))
    assert adapter.close() == []
    assert kinds(events) == ["CallOpened", "ResponseEnded"]
    ended = events[-1]
    assert isinstance(ended, ResponseEnded)
    assert ended.reason is ResponseEndReason.PROTOCOL_VIOLATION


def test_text_is_refused_by_the_binary_wire() -> None:
    """The event stream is bytes: text is a TypeError, not a guess at an encoding."""
    with pytest.raises(TypeError, match="bytes"):
        BedrockAdapter(turn_ref(), response="req-1").feed("not bytes")


def test_a_stream_needs_its_response_named() -> None:
    """ConverseStream names no message: the agent server must."""
    with pytest.raises(ValueError, match="response id"):
        BedrockAdapter(turn_ref(), response="")


# --- the protocol's rules ----------------------------------------------------------------------


def test_a_tool_block_is_a_call_keyed_by_the_named_response_and_block_index() -> None:
    """The response the server named, the block index and the toolUseId make the key."""
    events = adapt(MESSAGE_START, tool_start(1, "tooluse_a"), tool_input(1, '{"a":1}'), close=False)
    opened = events[0]
    assert isinstance(opened, CallOpened)
    assert (opened.key.response, opened.key.item, opened.key.call) == ("req-1", "1", "tooluse_a")
    assert [e.data for e in events if isinstance(e, ArgumentsAppended)] == [b'{"a":1}']


def test_block_stop_ends_the_call_and_message_stop_the_response() -> None:
    """contentBlockStop is the call's end; messageStop with tool_use completes the message."""
    events = adapt(
        MESSAGE_START, tool_start(0, "t"), tool_input(0, "{}"), block_stop(0), message_stop()
    )
    assert kinds(events) == ["CallOpened", "ArgumentsAppended", "CallEnded", "ResponseEnded"]


@pytest.mark.parametrize(
    ("stop_reason", "reason"),
    [
        ("end_turn", ResponseEndReason.COMPLETED),
        ("stop_sequence", ResponseEndReason.COMPLETED),
        ("max_tokens", ResponseEndReason.LENGTH),
        ("guardrail_intervened", ResponseEndReason.CONTENT_FILTER),
        ("content_filtered", ResponseEndReason.CONTENT_FILTER),
        ("model_context_window_exceeded", ResponseEndReason.CONTEXT_WINDOW_EXCEEDED),
        ("something_new", ResponseEndReason.INCOMPLETE),
    ],
)
def test_each_stop_reason_ends_the_message_as_it_means(
    stop_reason: str, reason: ResponseEndReason
) -> None:
    """Only end_turn, tool_use and stop_sequence are a successful end."""
    [ended] = [
        e for e in adapt(MESSAGE_START, message_stop(stop_reason)) if isinstance(e, ResponseEnded)
    ]
    assert ended.reason is reason


@pytest.mark.parametrize("wire", [True, False], ids=["framed", "decoded"])
def test_an_in_stream_exception_ends_the_message_with_its_name(wire: bool) -> None:
    """A throttlingException mid-stream fails the message's calls; its message is not kept."""
    exception = {"throttlingException": {"message": "arguments were {secret}"}}
    adapter = BedrockAdapter(turn_ref(), response="req-1")
    if wire:
        events = adapter.feed(frames(MESSAGE_START, tool_start(0, "t"), exception))
    else:
        events = [
            e
            for item in (MESSAGE_START, tool_start(0, "t"), exception)
            for e in adapter.feed_event(item)
        ]
    ended = events[-1]
    assert isinstance(ended, ResponseEnded)
    assert (ended.reason, ended.detail) == (ResponseEndReason.ERROR, "throttlingException")


def test_text_counts_characters_and_needs_no_block_start() -> None:
    """Text deltas count for the status, even without a contentBlockStart."""
    text = {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "hello"}}}
    events = adapt(MESSAGE_START, text, block_stop(0), close=False)
    assert [e.characters for e in events if isinstance(e, TextReceived)] == [5]


VIOLATION = ResponseEndReason.PROTOCOL_VIOLATION


@pytest.mark.parametrize(
    ("events", "ends"),
    [
        ([MESSAGE_START, tool_input(3, "{}")], [VIOLATION]),
        ([MESSAGE_START, tool_start(0, "a"), tool_start(0, "b")], [VIOLATION]),
        ([MESSAGE_START, tool_start(0, "a"), MESSAGE_START], [VIOLATION]),
        # The message had ended: a stray block has no open message left to fail.
        ([MESSAGE_START, message_stop(), tool_start(0, "a")], [ResponseEndReason.COMPLETED]),
    ],
    ids=["input before start", "index reused", "second messageStart", "block after stop"],
)
def test_what_the_protocol_forbids_ends_the_open_message_as_a_violation(
    events: list[dict[str, Any]], ends: list[ResponseEndReason]
) -> None:
    """Tool input for a block never started, a reused index and a new message while one is open
    end the open message as a protocol violation; nothing after messageStop opens a call."""
    produced = adapt(*events, close=False)
    assert [e.reason for e in produced if isinstance(e, ResponseEnded)] == ends
    assert not any(isinstance(e, CallOpened) and e.key.call == "b" for e in produced)


def test_a_second_message_after_the_first_ended_is_the_next_response() -> None:
    """One stream may carry messages one after the other: the second is ``<response>#2``."""
    events = adapt(MESSAGE_START, message_stop("end_turn"), MESSAGE_START, tool_start(0, "t"))
    opened = [e for e in events if isinstance(e, CallOpened)]
    assert opened[0].key.response == "req-1#2"


def test_a_body_that_ends_before_message_stop_loses_the_message() -> None:
    """No resume here: an early end is a lost connection."""
    events = adapt(MESSAGE_START, tool_start(0, "t"), tool_input(0, "{"))
    lost = events[-1]
    assert isinstance(lost, StreamLost)
    assert not lost.resumable


def test_a_decoded_event_with_several_types_is_a_violation() -> None:
    """boto3 gives one event type per item; two at once is no event of the protocol."""
    adapter = BedrockAdapter(turn_ref(), response="req-1")
    adapter.feed_event(MESSAGE_START)
    [ended] = adapter.feed_event({**message_stop(), **block_stop(0)})
    assert isinstance(ended, ResponseEnded)
    assert ended.reason is ResponseEndReason.PROTOCOL_VIOLATION


# --- the captured streams ----------------------------------------------------------------------

EXPECTED: dict[str, tuple[list[str], dict[str, tuple[object, object, object]]]] = {
    # The recordings start at the first block, without messageStart: the stream is one message
    # the agent server named, so nothing that identifies it is missing.
    "converse-stream-single-tool-use.jsonl": (
        ["test-tool"],
        {"req-1/0": ("dispatched", None, "dispatched")},
    ),
    # The text block (no contentBlockStart) is no call; the two weather calls run.
    "converse-stream-text-then-two-tool-uses.jsonl": (
        ["weather"],
        {
            "req-1/1": ("dispatched", None, "dispatched"),
            "req-1/2": ("dispatched", None, "dispatched"),
        },
    ),
}


def recorded(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (DIRECTORY / name).read_text().splitlines() if line]


def bedrock(turn: TurnRef) -> BedrockAdapter:
    return BedrockAdapter(turn, response="req-1")


def test_every_captured_stream_has_its_expected_outcome_written_down() -> None:
    """No capture of this provider goes untested."""
    assert sorted(path.name for path in DIRECTORY.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("wire", [True, False], ids=["framed", "decoded"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_a_captured_stream_ends_every_call_as_expected(
    name: str, wire: bool, tmp_path: Path
) -> None:
    """Framed as on the wire or decoded as boto3 gives it, each call ends as written down,
    and each call that ran ran once."""
    tools, expected = EXPECTED[name]
    source: dict[str, Any] = (
        {"chunks": [frames(*recorded(name))]} if wire else {"events": recorded(name)}
    )
    run = await run_stream(bedrock, tmp_path, tools=tools, **source)
    assert {label: outcome(row) for label, row in run.rows.items()} == expected
    assert sorted(run.executed) == sorted(
        label for label, row in expected.items() if row[0] == "dispatched"
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_any_split_of_the_framed_stream_gives_the_same_events(
    name: str, data: st.DataObject
) -> None:
    """The framed body cut anywhere gives the events of the whole, and those of boto3's items."""
    body = frames(*recorded(name))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=30)))
    adapter = bedrock(turn_ref())
    events: list[Event] = []
    for begin, finish in zip([0, *cuts], [*cuts, len(body)], strict=True):
        events += adapter.feed(body[begin:finish])
    decoded = bedrock(turn_ref())
    from_items = [e for item in recorded(name) for e in decoded.feed_event(item)]
    assert events + adapter.close() == from_items + decoded.close()


# --- the awkward-order suite -------------------------------------------------------------------


class BedrockRenderer:
    """Renders each step as framed ConverseStream events and parses them with the adapter.

    One adapter per response (ConverseStream carries one message; the agent server names it);
    each call gets the next block index of its message; End is contentBlockStop, EndResponse
    messageStop with the stop reason of the step's end reason.
    """

    def __init__(self) -> None:
        self.adapters: dict[str, BedrockAdapter] = {}
        self.blocks: dict[str, tuple[str, int]] = {}

    def render(self, step: Open | Fragment | End | EndResponse, stream: Stream) -> list[Event]:
        if isinstance(step, Open):
            events: list[Event] = []
            if step.response not in self.adapters:
                adapter = self.adapters[step.response] = BedrockAdapter(
                    stream.turn, response=step.response
                )
                events += adapter.feed(frames(MESSAGE_START))
            index = sum(1 for message, _ in self.blocks.values() if message == step.response)
            self.blocks[step.call] = (step.response, index)
            start = tool_start(index, f"tooluse_{step.call}", step.tool)
            return events + self.adapters[step.response].feed(frames(start))
        if isinstance(step, EndResponse):
            reason = {ResponseEndReason.COMPLETED: "tool_use"}.get(step.reason, "max_tokens")
            return self.adapters[step.response].feed(frames(message_stop(reason)))
        message, index = self.blocks[step.call]
        event = (
            tool_input(index, step.data.decode())
            if isinstance(step, Fragment)
            else block_stop(index)
        )
        return self.adapters[message].feed(frames(event))


class TestAwkwardOrders(AdapterContract):
    """Every awkward order, worded as ConverseStream events, ends as the portable suite expects."""

    @pytest.fixture
    def renderer(self) -> Renderer:
        return BedrockRenderer()


def test_a_response_name_that_cannot_name_a_response_is_refused_at_once() -> None:
    """The name the agent server gives is checked when the adapter is made, not mid-stream."""
    with pytest.raises(ValueError, match="limit is 512"):
        BedrockAdapter(turn_ref(), response="r" * 600)
