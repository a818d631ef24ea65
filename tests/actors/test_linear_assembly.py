"""Assembling a 256 KiB argument from one-character deltas costs linear time.

A quadratic step anywhere on the path (copying the buffer on every fragment, rescanning what
was received, joining strings over and over) makes eight times the deltas cost sixty-four times
the time; linear work costs eight times. The test runs the path at 32 Ki and at 256 Ki deltas
and requires less than thirty-two times: a wide margin for a machine whose other processes
slow this one's CPU time too (seen: 17.5 times under a load of five on two cores, 9 times
alone), and half of what any quadratic step would cost. The clock is the process's CPU time,
not the wall.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from inert import (
    ArgumentLimits,
    ArgumentsAppended,
    CallEnded,
    CallLimits,
    CallOpened,
    Event,
    Phase,
    TurnRef,
)
from inert.actors import CallContext, CallState, Input, TurnView, step
from inert.adapters import OpenAIChatAdapter
from inert.events import OfferedTool

TURN = TurnRef(tenant="acme", conversation="conv-1", turn="t1")
LIMITS = CallLimits(
    arguments=ArgumentLimits(max_bytes=1 << 20, max_string_length=1 << 20),
    max_fragments=1 << 20,
)
CONTEXT = CallContext(
    turn=TurnView(
        principal="user:alice", tools={"write": OfferedTool(name="write", digest="sha256:0")}
    ),
    blocked=None,
    limits=LIMITS,
)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def chat_body(size: int) -> tuple[bytes, int]:
    """A Chat Completions body whose one call streams ``size`` bytes of arguments one
    character per chunk; and the number of deltas."""
    arguments = json.dumps({"text": "x" * (size - 12)})
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m"}

    def chunk(delta: dict[str, object], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return "data: " + json.dumps({**base, "choices": [choice]}) + "\n\n"

    opening = {"index": 0, "id": "call_1", "function": {"name": "write", "arguments": ""}}
    parts = [chunk({"tool_calls": [opening]})]
    parts += [
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": character}}]})
        for character in arguments
    ]
    parts.append(chunk({}, "tool_calls"))
    parts.append("data: [DONE]\n\n")
    return "".join(parts).encode(), len(arguments)


def adapt(body: bytes) -> tuple[list[Event], float]:
    start = time.process_time()
    adapter = OpenAIChatAdapter(TURN)
    events = adapter.feed(body) + adapter.close()
    return events, time.process_time() - start


def assemble(events: list[Event]) -> tuple[CallState, float]:
    calls = [
        event for event in events if isinstance(event, CallOpened | ArgumentsAppended | CallEnded)
    ]
    state = CallState(key=calls[0].key)
    start = time.process_time()
    for position, event in enumerate(calls, 1):
        received = Input(event=event, position=position, event_id=f"e{position}", at=NOW)
        state, _ = step(state, received, CONTEXT)
    return state, time.process_time() - start


@pytest.mark.slow(seconds=20)
def test_a_256_kib_argument_of_one_character_deltas_assembles_in_linear_time() -> None:
    """Eight times the one-character deltas cost well under thirty-two times the CPU time, in
    the adapter and in the call's decider alike, and the call is whole at its end."""
    small_body, small_size = chat_body(32 * 1024)
    large_body, large_size = chat_body(256 * 1024)
    small_events, small_adapter = adapt(small_body)
    large_events, large_adapter = adapt(large_body)
    small_state, small_decider = assemble(small_events)
    large_state, large_decider = assemble(large_events)
    assert large_size == 256 * 1024
    assert large_state.phase is Phase.TERMINAL_CANDIDATE
    assert large_state.size == large_size
    assert large_state.fragments == large_size
    assert small_state.phase is Phase.TERMINAL_CANDIDATE
    assert small_size * 8 == large_size
    assert large_adapter < 32 * small_adapter, (small_adapter, large_adapter)
    assert large_decider < 32 * small_decider, (small_decider, large_decider)
