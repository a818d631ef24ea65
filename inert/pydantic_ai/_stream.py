"""A pydantic-ai agent run's model-stream events to inert's portable ingress events.

pydantic-ai streams each model response as part events: a part starts (``PartStartEvent``),
grows by deltas (``PartDeltaEvent``), and the stream of the response ends. Its ``PartEndEvent``
is not a call's end: pydantic-ai ends a part when the next one starts, and the deltas of two
interleaved calls keep coming after it. So a call ends here when its response's stream ends,
and no sooner.

A call is opened once its name is settled: at its first argument bytes, or at the end of the
response. A name that still changes after that (a rename in flight) opens the call again as
another tool, which its actor refuses. Arguments streamed as JSON text are fed as fragments;
arguments given as an object (merged by pydantic-ai, not appended) are fed whole with the
call's end. A response is named by its origin (``run_id:run_step:attempt``); a later attempt at
the same step replaces the earlier one, which ends ``cancelled`` and whose later events are
dropped.

Pure: no I/O, no event loop.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from attrs import define, field
from pydantic_ai.messages import (
    NativeToolCallPart,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)

from ..adapters import ResponseCalls
from ..events import CallKey, Event, ResponseEndReason, TerminalRef, TurnRef

FINISH_REASONS: Mapping[str | None, ResponseEndReason] = {
    "length": ResponseEndReason.LENGTH,
    "content_filter": ResponseEndReason.CONTENT_FILTER,
    "error": ResponseEndReason.ERROR,
}
"""pydantic-ai's finish reasons that end a response other than completed (any other, or none,
is a response that ended as the model meant it to)."""


@define
class _Part:
    name: str
    call: str
    opened: bool = False
    output: bool = False
    text: bool = False
    whole: dict[str, Any] | None = None


@define
class _Response:
    calls: ResponseCalls
    step: tuple[str, int] | None
    rank: tuple[int, int]
    parts: dict[int, _Part] = field(factory=dict)
    events: int = 0


class ModelStreamAdapter:
    """The model responses of one inert turn, from the part events of pydantic-ai's runs.

    ``feed_event`` takes each event of an agent run's stream with the name of the response it
    belongs to where the event carries no origin; ``end`` says a response's stream ended, and
    how. ``keys`` maps each tool call id to the key of the call opened under it last. The calls
    of the tools named in ``outputs`` (the agent's output tools: the run's answer, which no
    toolset runs) are not fed.
    """

    def __init__(self, turn: TurnRef) -> None:
        self.turn = turn
        self.keys: dict[str, CallKey] = {}
        self.outputs: set[str] = set()
        self._responses: dict[str, _Response] = {}
        self._ended: set[str] = set()
        self._latest: dict[tuple[str, int], str] = {}

    def streaming(self, response: str) -> bool:
        """Whether events of this response arrived and its stream has not ended."""
        return response in self._responses

    def open_responses(self) -> list[str]:
        return list(self._responses)

    def feed_event(self, event: object, *, response: str) -> list[Event]:
        """The ingress events of one event of the run's stream (none for most)."""
        if not isinstance(event, PartStartEvent | PartDeltaEvent):
            return []
        origin = event.origin
        if origin is not None:
            response = origin.response_id
            step: tuple[str, int] | None = (origin.run_id, origin.run_step)
            rank = (origin.attempt, origin.execution_attempt)
        else:
            step, rank = None, (1, 1)
        if response in self._ended:
            return []
        emitted: list[Event] = []
        current = self._responses.get(response)
        if current is None:
            if step is not None:
                replaced = self._latest.get(step)
                if replaced is not None and replaced != response:
                    earlier = self._responses.get(replaced)
                    if earlier is not None and earlier.rank > rank:
                        # The events of a response a later attempt replaced already.
                        return []
                    emitted += self.end(replaced, ResponseEndReason.CANCELLED)
                self._latest[step] = response
            current = self._responses[response] = _Response(
                calls=ResponseCalls(self.turn, response), step=step, rank=rank
            )
        current.events += 1
        if isinstance(event, PartStartEvent):
            emitted += self._start(current, event.index, event.part)
        else:
            emitted += self._delta(current, event.index, event.delta)
        return emitted

    def end(self, response: str, reason: ResponseEndReason) -> list[Event]:
        """The stream of ``response`` ended: every call of it ends, then the response."""
        current = self._responses.pop(response, None)
        if current is None:
            return []
        self._ended.add(response)
        emitted: list[Event] = []
        for slot, part in current.parts.items():
            if not part.opened:
                opened = self._open(current, slot, part)
                if opened is None:
                    continue
                emitted += opened
            if part.output:
                continue
            final = None
            if part.whole is not None:
                final = json.dumps(part.whole, separators=(",", ":")).encode()
            emitted += current.calls.end(str(slot), final)
        terminal = TerminalRef(sequence=current.events)
        return emitted + current.calls.end_response(reason, terminal)

    def _start(self, response: _Response, index: int, part: object) -> list[Event]:
        calls = response.calls
        if isinstance(part, TextPart):
            return calls.text(len(part.content))
        if isinstance(part, NativeToolCallPart):
            return calls.server_tool(str(index), call=part.tool_call_id, tool=part.tool_name)
        if not isinstance(part, ToolCallPart):
            return []
        known = response.parts.get(index)
        if known is not None:
            # pydantic-ai replaces a part started again at an index; inert cannot take back
            # what it was fed, so only the same call, with nothing more to say, passes.
            if part.tool_name == known.name and part.tool_call_id == known.call and not part.args:
                return []
            return calls.violate(f"part {index} started again as another call")
        started = response.parts[index] = _Part(name=part.tool_name, call=part.tool_call_id)
        return self._arguments(response, index, started, part.args)

    def _delta(self, response: _Response, index: int, delta: object) -> list[Event]:
        calls = response.calls
        if isinstance(delta, TextPartDelta):
            return calls.text(len(delta.content_delta))
        if not isinstance(delta, ToolCallPartDelta):
            return []
        part = response.parts.get(index)
        if part is None:
            return calls.violate(f"a delta of part {index}, which never started as a call")
        emitted: list[Event] = []
        if delta.tool_call_id is not None and delta.tool_call_id != part.call:
            if part.opened:
                return calls.violate(f"part {index} named another call id")
            part.call = delta.tool_call_id
        if delta.tool_name_delta:
            part.name += delta.tool_name_delta
            if part.opened and not part.output:
                # A rename in flight: the call's actor sees it opened again as another tool.
                emitted += calls.open(str(index), call=part.call, tool=part.name)
        return emitted + self._arguments(response, index, part, delta.args_delta)

    def _arguments(
        self, response: _Response, index: int, part: _Part, args: str | dict[str, Any] | None
    ) -> list[Event]:
        calls = response.calls
        if not args or part.output:
            return []
        if isinstance(args, str):
            if part.whole is not None:
                return calls.violate(f"part {index} mixed text arguments with an object")
            emitted: list[Event] = []
            if not part.opened:
                opened = self._open(response, index, part)
                if opened is None:
                    return []
                emitted = opened
            part.text = True
            return emitted + calls.append(str(index), args.encode("utf-8", "surrogatepass"))
        if part.text:
            return calls.violate(f"part {index} mixed an object with text arguments")
        part.whole = {**(part.whole or {}), **args}
        return []

    def _open(self, response: _Response, index: int, part: _Part) -> list[Event] | None:
        """The call's opening; ``None`` for an output tool's call, which is not fed."""
        part.opened = True
        if part.name in self.outputs:
            part.output = True
            return None
        if not part.name:
            return response.calls.violate(f"part {index} has arguments but no tool name")
        opened = response.calls.open(str(index), call=part.call, tool=part.name)
        if response.calls.knows(str(index)):
            self.keys[part.call] = response.calls.key_of(str(index))
        return opened
