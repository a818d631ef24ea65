"""Adapter throughput: raw wire bytes/s and provider events/s per adapter, beside the official
SDK's own stream accumulation of the same stream, in the same run.

Run with ``python -m benchmarks.adapters [--calls N] [--argument-bytes B] [--delta-bytes D]
[--runs R] [--json]``.

Each provider gets one synthetic stream in its own wire format, built once before timing: one
response with ``--calls`` tool calls in a row, each streaming ``--argument-bytes`` of JSON
arguments in deltas of ``--delta-bytes`` (about a token each), then the response's successful
end. Timed, on the same bytes handed over in 16 KiB chunks as a socket would:

- inert: a fresh adapter's ``feed`` of every chunk, then ``close`` (SSE or event-stream decoding,
  JSON parsing, identities, the portable events);
- the SDK: what the official client does with the same body after HTTP: its SSE decoder, JSON,
  its event models (``construct_type``), and its accumulation of the stream into the final
  message: openai-python's ``ChatCompletionStreamState`` (Chat Completions) and
  ``ResponseStreamState`` (Responses), anthropic-sdk-python's ``accumulate_event``. Bedrock and
  Gemini have no such SDK installed here: their baseline is the floor of any adapter, decoding
  the frames or SSE and ``json.loads`` of every event, nothing else.

Runs of the cases are interleaved; the median of ``--runs`` is reported, and the ratio is
inert's rate over the baseline's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from anthropic._models import construct_type as anthropic_construct
from anthropic._streaming import SSEDecoder as AnthropicSSEDecoder
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from openai._models import construct_type as openai_construct
from openai._streaming import SSEDecoder as OpenAISSEDecoder
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from inert import TurnRef
from inert.adapters import (
    AnthropicAdapter,
    BedrockAdapter,
    GeminiAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    SSEDecoder,
    StreamAdapter,
    event_stream_message,
)

CHUNK = 16 * 1024
TURN = TurnRef(tenant="bench", conversation="c", turn="t")


# --- synthetic streams -----------------------------------------------------------------------


def argument_deltas(index: int, size: int, delta: int) -> list[str]:
    """The arguments of call ``index``: a JSON object of about ``size`` bytes, in pieces."""
    filler = "lorem ipsum dolor sit amet " * (size // 27 + 1)
    text = json.dumps({"call": index, "text": filler[: max(0, size - 30)]})
    return [text[start : start + delta] for start in range(0, len(text), delta)]


def sse(event: dict[str, Any], *, named: bool = False) -> str:
    data = json.dumps(event, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n" if named else f"data: {data}\n\n"


def responses_stream(
    calls: int, size: int, delta: int, *, response_id: str = "resp_bench"
) -> tuple[bytes, int]:
    response = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": response},
    ]
    output = []
    for index in range(calls):
        item = {
            "type": "function_call",
            "id": f"fc_{index}",
            "call_id": f"call_{index}",
            "name": "lookup",
            "arguments": "",
            "status": "in_progress",
        }
        pieces = argument_deltas(index, size, delta)
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events += [
            {
                "type": "response.function_call_arguments.delta",
                "item_id": item["id"],
                "output_index": index,
                "delta": piece,
            }
            for piece in pieces
        ]
        arguments = "".join(pieces)
        events.append(
            {
                "type": "response.function_call_arguments.done",
                "item_id": item["id"],
                "output_index": index,
                "name": "lookup",
                "arguments": arguments,
            }
        )
        done = {**item, "arguments": arguments, "status": "completed"}
        output.append(done)
        events.append({"type": "response.output_item.done", "output_index": index, "item": done})
    events.append(
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": output},
        }
    )
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return "".join(sse(event, named=True) for event in events).encode(), len(events)


def chat_stream(
    calls: int, size: int, delta: int, *, response_id: str = "chatcmpl-bench"
) -> tuple[bytes, int]:
    base = {"id": response_id, "object": "chat.completion.chunk", "created": 0, "model": "m"}

    def chunk(delta_object: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta_object, "finish_reason": finish}
        return {**base, "choices": [choice]}

    events = [chunk({"role": "assistant", "content": None})]
    for index in range(calls):
        pieces = argument_deltas(index, size, delta)
        first = {
            "index": index,
            "id": f"call_{index}",
            "type": "function",
            "function": {"name": "lookup", "arguments": ""},
        }
        events.append(chunk({"tool_calls": [first]}))
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in pieces
        ]
    events.append(chunk({}, "tool_calls"))
    body = "".join(sse(event) for event in events) + "data: [DONE]\n\n"
    return body.encode(), len(events) + 1


def anthropic_stream(
    calls: int, size: int, delta: int, *, response_id: str = "msg_bench"
) -> tuple[bytes, int]:
    message: dict[str, Any] = {
        "id": response_id,
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": message}]
    for index in range(calls):
        block = {"type": "tool_use", "id": f"toolu_{index}", "name": "lookup", "input": {}}
        events.append({"type": "content_block_start", "index": index, "content_block": block})
        events += [
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
            for piece in argument_deltas(index, size, delta)
        ]
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 10},
        }
    )
    events.append({"type": "message_stop"})
    return "".join(sse(event, named=True) for event in events).encode(), len(events)


def gemini_stream(calls: int, size: int, delta: int) -> tuple[bytes, int]:
    """Gemini API calls arrive whole, one per chunk (it has no argument deltas)."""
    events = []
    for index in range(calls):
        arguments = json.loads("".join(argument_deltas(index, size, delta)))
        part = {"functionCall": {"name": "lookup", "args": arguments}}
        candidate = {"content": {"role": "model", "parts": [part]}, "index": 0}
        events.append({"candidates": [candidate], "responseId": "gemini-bench"})
    events.append(
        {
            "candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "STOP"}],
            "responseId": "gemini-bench",
        }
    )
    return "".join(sse(event) for event in events).encode(), len(events)


def bedrock_stream(calls: int, size: int, delta: int) -> tuple[bytes, int]:
    frames: list[tuple[str, dict[str, Any]]] = [("messageStart", {"role": "assistant"})]
    for index in range(calls):
        start = {"toolUse": {"toolUseId": f"tooluse_{index}", "name": "lookup"}}
        frames.append(("contentBlockStart", {"contentBlockIndex": index, "start": start}))
        frames += [
            (
                "contentBlockDelta",
                {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}},
            )
            for piece in argument_deltas(index, size, delta)
        ]
        frames.append(("contentBlockStop", {"contentBlockIndex": index}))
    frames.append(("messageStop", {"stopReason": "tool_use"}))
    return b"".join(event_stream_message(kind, body) for kind, body in frames), len(frames)


# --- the sides being compared ----------------------------------------------------------------


def chunks_of(body: bytes) -> Iterator[bytes]:
    return (body[start : start + CHUNK] for start in range(0, len(body), CHUNK))


def inert_side(make: Callable[[], StreamAdapter]) -> Callable[[bytes], int]:
    def run(body: bytes) -> int:
        adapter = make()
        produced = 0
        for chunk in chunks_of(body):
            produced += len(adapter.feed(chunk))
        return produced + len(adapter.close())

    return run


def openai_chat_sdk(body: bytes) -> int:
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for event in OpenAISSEDecoder().iter_bytes(chunks_of(body)):
        if event.data.startswith("[DONE]"):
            break
        chunk = openai_construct(type_=ChatCompletionChunk, value=json.loads(event.data))
        state.handle_chunk(chunk)  # type: ignore[arg-type]
    return len(state.get_final_completion().choices[0].message.tool_calls or [])


def openai_responses_sdk(body: bytes) -> int:
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=[], text_format=None)  # type: ignore[arg-type]
    handled = 0
    for event in OpenAISSEDecoder().iter_bytes(chunks_of(body)):
        raw = openai_construct(type_=ResponseStreamEvent, value=json.loads(event.data))
        handled += len(state.handle_event(raw))  # type: ignore[arg-type]
    return handled


def anthropic_sdk(body: bytes) -> int:
    snapshot = None
    buffers: dict[int, bytes] = {}
    for event in AnthropicSSEDecoder().iter_bytes(chunks_of(body)):
        raw = anthropic_construct(type_=RawMessageStreamEvent, value=json.loads(event.data))
        snapshot = accumulate_event(
            event=raw,  # type: ignore[arg-type]
            current_snapshot=snapshot,
            json_bufs=buffers,
        )
    assert snapshot is not None
    return len(snapshot.content)


def sse_json_floor(body: bytes) -> int:
    decoder = SSEDecoder()
    parsed = 0
    for chunk in chunks_of(body):
        for event in decoder.feed(chunk):
            json.loads(event.data)
            parsed += 1
    return parsed


def eventstream_json_floor(body: bytes) -> int:
    parsed = offset = 0
    while offset < len(body):
        total, headers = struct.unpack_from(">II", body, offset)
        start = offset + 12 + headers
        json.loads(body[start : offset + total - 4])
        parsed += 1
        offset += total
    return parsed


@dataclass
class Case:
    provider: str
    baseline: str
    body: bytes
    events: int
    inert: Callable[[bytes], int]
    reference: Callable[[bytes], int]
    inert_seconds: list[float]
    reference_seconds: list[float]


def build_cases(calls: int, size: int, delta: int) -> list[Case]:
    specs: list[tuple[str, str, tuple[bytes, int], Callable[[], StreamAdapter], Any]] = [
        (
            "openai-responses",
            "openai ResponseStreamState",
            responses_stream(calls, size, delta),
            lambda: OpenAIResponsesAdapter(TURN),
            openai_responses_sdk,
        ),
        (
            "openai-chat",
            "openai ChatCompletionStreamState",
            chat_stream(calls, size, delta),
            lambda: OpenAIChatAdapter(TURN),
            openai_chat_sdk,
        ),
        (
            "anthropic",
            "anthropic accumulate_event",
            anthropic_stream(calls, size, delta),
            lambda: AnthropicAdapter(TURN),
            anthropic_sdk,
        ),
        (
            "bedrock",
            "frames + json.loads only",
            bedrock_stream(calls, size, delta),
            lambda: BedrockAdapter(TURN, response="bedrock-bench"),
            eventstream_json_floor,
        ),
        (
            "gemini",
            "SSE + json.loads only",
            gemini_stream(calls, size, delta),
            lambda: GeminiAdapter(TURN, response="gemini-bench"),
            sse_json_floor,
        ),
    ]
    return [
        Case(provider, baseline, body, events, inert_side(make), reference, [], [])
        for provider, baseline, (body, events), make, reference in specs
    ]


def timed(run: Callable[[bytes], int], body: bytes) -> float:
    start = time.perf_counter()
    run(body)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--argument-bytes", type=int, default=16 * 1024)
    parser.add_argument("--delta-bytes", type=int, default=4)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args(argv)
    cases = build_cases(arguments.calls, arguments.argument_bytes, arguments.delta_bytes)
    for case in cases:
        # A warm-up run of each side also checks that both read the whole stream.
        if case.inert(case.body) <= 0 or case.reference(case.body) <= 0:
            raise RuntimeError(f"{case.provider}: a side read nothing")
    for _ in range(arguments.runs):
        for case in cases:
            case.inert_seconds.append(timed(case.inert, case.body))
            case.reference_seconds.append(timed(case.reference, case.body))
    results: list[dict[str, Any]] = []
    for case in cases:
        inert_time = statistics.median(case.inert_seconds)
        reference_time = statistics.median(case.reference_seconds)
        results.append(
            {
                "provider": case.provider,
                "baseline": case.baseline,
                "stream_bytes": len(case.body),
                "provider_events": case.events,
                "inert_bytes_per_s": len(case.body) / inert_time,
                "inert_events_per_s": case.events / inert_time,
                "baseline_bytes_per_s": len(case.body) / reference_time,
                "baseline_events_per_s": case.events / reference_time,
                "ratio": reference_time / inert_time,
            }
        )
    if arguments.json:
        print(json.dumps({"arguments": vars(arguments), "results": results}, indent=2))
        return 0
    print(
        f"{arguments.calls} calls x {arguments.argument_bytes:,} bytes of arguments in"
        f" {arguments.delta_bytes}-byte deltas, median of {arguments.runs} runs"
    )
    print(
        "| provider | stream | inert MB/s | inert events/s | baseline | baseline MB/s |"
        " baseline events/s | ratio |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|")
    for result in results:
        print(
            f"| {result['provider']} | {result['stream_bytes'] / 1e6:.1f} MB"
            f" | {result['inert_bytes_per_s'] / 1e6:.1f}"
            f" | {result['inert_events_per_s']:,.0f} | {result['baseline']}"
            f" | {result['baseline_bytes_per_s'] / 1e6:.1f}"
            f" | {result['baseline_events_per_s']:,.0f} | {result['ratio']:.2f}x |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
