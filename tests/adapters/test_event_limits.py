"""The event-limit contract (``inert.testing.contracts.EventLimitContract``) through every
adapter: an event past the limit ends the open response or raises ``ProtocolError``, at once,
wherever it comes and however the body is split."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest
from adapter_support import turn_ref

from inert.adapters import (
    AnthropicAdapter,
    BedrockAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    event_stream_message,
)
from inert.testing.contracts import (
    EventLimitContract,
    LimitWire,
    Oversized,
    sse_fitting,
    sse_oversized,
)


def sse(*events: dict[str, Any], named: bool = False) -> bytes:
    """Each event as one SSE event (``event:`` naming its type where ``named``)."""
    lines = []
    for event in events:
        head = f"event: {event['type']}\n" if named else ""
        lines.append(f"{head}data: {json.dumps(event)}\n\n")
    return "".join(lines).encode()


class TestOpenAIResponses(EventLimitContract):
    @pytest.fixture
    def wire(self) -> LimitWire:
        response = {"id": "resp_1", "status": "in_progress"}
        item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather"}
        return LimitWire(
            adapter=lambda limit: OpenAIResponsesAdapter(turn_ref(), max_event_size=limit),
            preamble=b": keep-alive\n\n",
            opening=sse(
                {"type": "response.created", "sequence_number": 0, "response": response},
                {
                    "type": "response.output_item.added",
                    "sequence_number": 1,
                    "output_index": 0,
                    "item": {**item, "arguments": ""},
                },
                named=True,
            ),
            ending=sse(
                {
                    "type": "response.function_call_arguments.delta",
                    "sequence_number": 2,
                    "item_id": "fc_1",
                    "output_index": 0,
                    "delta": "{}",
                },
                {
                    "type": "response.function_call_arguments.done",
                    "sequence_number": 3,
                    "item_id": "fc_1",
                    "output_index": 0,
                    "arguments": "{}",
                },
                {
                    "type": "response.completed",
                    "sequence_number": 4,
                    "response": {**response, "status": "completed"},
                },
                named=True,
            ),
            oversized=sse_oversized,
            fitting=sse_fitting,
        )


class TestOpenAIChat(EventLimitContract):
    @pytest.fixture
    def wire(self) -> LimitWire:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice]}

        function = {"name": "get_weather", "arguments": ""}
        opening = {"index": 0, "id": "call_1", "type": "function", "function": function}
        more = {"index": 0, "function": {"arguments": "{}"}}
        return LimitWire(
            adapter=lambda limit: OpenAIChatAdapter(turn_ref(), max_event_size=limit),
            preamble=b": OPENROUTER PROCESSING\n\n",
            opening=sse(chunk({"tool_calls": [opening]})),
            ending=sse(chunk({"tool_calls": [more]}), chunk({}, "tool_calls"))
            + b"data: [DONE]\n\n",
            oversized=sse_oversized,
            fitting=sse_fitting,
        )


class TestAnthropic(EventLimitContract):
    @pytest.fixture
    def wire(self) -> LimitWire:
        message = {"id": "msg_1", "type": "message", "role": "assistant", "content": []}
        block = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
        delta = {"type": "input_json_delta", "partial_json": "{}"}
        return LimitWire(
            adapter=lambda limit: AnthropicAdapter(turn_ref(), max_event_size=limit),
            preamble=sse({"type": "ping"}, named=True),
            opening=sse(
                {"type": "message_start", "message": message},
                {"type": "content_block_start", "index": 0, "content_block": block},
                named=True,
            ),
            ending=sse(
                {"type": "content_block_delta", "index": 0, "delta": delta},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
                {"type": "message_stop"},
                named=True,
            ),
            oversized=sse_oversized,
            fitting=sse_fitting,
        )


class TestGemini(EventLimitContract):
    @pytest.fixture
    def wire(self) -> LimitWire:
        def chunk(candidate: dict[str, Any]) -> dict[str, Any]:
            return {"responseId": "r_1", "candidates": [{"index": 0, **candidate}]}

        call = {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}
        return LimitWire(
            adapter=lambda limit: GeminiAdapter(turn_ref(), max_event_size=limit),
            preamble=b": ping\n\n",
            opening=sse(chunk({"content": {"role": "model", "parts": [call]}})),
            ending=sse(chunk({"content": {"role": "model", "parts": []}, "finishReason": "STOP"})),
            oversized=sse_oversized,
            fitting=sse_fitting,
        )


def _frame_of(size: int, kind: str, body: dict[str, Any], *, exception: bool = False) -> bytes:
    """An event-stream message of exactly ``size`` bytes, padded in its payload's ``pad``."""
    empty = len(event_stream_message(kind, {**body, "pad": ""}, exception=exception))
    return event_stream_message(kind, {**body, "pad": "p" * (size - empty)}, exception=exception)


def _announced(size: int) -> bytes:
    """A prelude announcing ``size`` bytes (its checksum right), and the start of its headers."""
    prelude = struct.pack(">II", size, 0)
    return prelude + struct.pack(">I", zlib.crc32(prelude)) + b"\x00" * 64


def _frames_oversized(limit: int, excess: int) -> list[Oversized]:
    size = limit + excess
    delta = {"contentBlockIndex": 0, "delta": {"text": ""}}
    return [
        Oversized("a frame past the limit", _frame_of(size, "contentBlockDelta", delta)),
        Oversized(
            "an exception frame past the limit",
            _frame_of(size, "throttlingException", {"message": ""}, exception=True),
        ),
        Oversized("a frame announced past the limit", _announced(size), endless=True),
    ]


class TestBedrock(EventLimitContract):
    @pytest.fixture
    def wire(self) -> LimitWire:
        start = {"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "t1", "name": "w"}}}
        delta = {"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{}"}}}
        return LimitWire(
            adapter=lambda limit: BedrockAdapter(
                turn_ref(), response="req-1", max_event_size=limit
            ),
            preamble=event_stream_message("metadata", {"usage": {"inputTokens": 1}}),
            opening=event_stream_message("messageStart", {"role": "assistant"})
            + event_stream_message("contentBlockStart", start),
            ending=event_stream_message("contentBlockDelta", delta)
            + event_stream_message("contentBlockStop", {"contentBlockIndex": 0})
            + event_stream_message("messageStop", {"stopReason": "tool_use"}),
            oversized=_frames_oversized,
            fitting=lambda limit: _frame_of(limit, "metadata", {"usage": {}}),
        )
