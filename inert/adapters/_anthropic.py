"""Anthropic Messages streams to portable ingress events.

A message is one response, named by its ``message.id``; its content blocks are the items, named by
their ``index`` (the only identity a delta carries), and a ``tool_use`` block's ``toolu_`` id is
the call id, bound to the index when the block starts. A call's arguments are the concatenated
``partial_json`` of its ``input_json_delta`` events; ``content_block_stop`` is its end event. The
message ends at ``message_stop``, with the ``stop_reason`` its ``message_delta`` gave: only
``end_turn``, ``tool_use`` and ``stop_sequence`` are a successful end.

Rules this adapter keeps:

- ``server_tool_use`` and ``mcp_tool_use`` blocks ran at Anthropic: they are recorded as server
  tools, never as calls; their input deltas are not call data.
- ``text_delta`` counts characters for the status; thinking, signatures and citations are
  neither text for the person nor call data.
- A block started again at an index that is open, a delta or a stop for an index that never
  started, a block event before any ``message_start``, or a payload that is not an object of
  the protocol's shape, ends the message as a protocol violation.
- A second ``message_start`` while a message is open (a proxy that splices two requests) ends the
  open message as a protocol violation: its calls fail, and the new message starts afresh.
- An ``error`` event after the HTTP 200 ends the open message ``error`` (detail: the error type).
- There is no resume: a body that ends before ``message_stop`` loses its message.
"""

from __future__ import annotations

from typing import Any

from ..events import Event, ResponseEndReason, TerminalRef, TurnRef
from ._adapter import JSONObject, ProtocolBreak, event_digest, kind_of
from ._calls import ResponseCalls
from ._sse import DEFAULT_MAX_EVENT_SIZE
from ._sse_adapter import SSEAdapter

_STOP_REASONS = {
    "end_turn": ResponseEndReason.COMPLETED,
    "tool_use": ResponseEndReason.COMPLETED,
    "stop_sequence": ResponseEndReason.COMPLETED,
    "max_tokens": ResponseEndReason.LENGTH,
    "refusal": ResponseEndReason.REFUSAL,
    "pause_turn": ResponseEndReason.PAUSED,
    "model_context_window_exceeded": ResponseEndReason.CONTEXT_WINDOW_EXCEEDED,
}
_SERVER_BLOCKS = frozenset({"server_tool_use", "mcp_tool_use"})
_KINDS = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        "error",
    }
)
"""The events of the protocol. The ``anthropic`` SDK's ``messages.stream()`` helper adds its
own (``text``, ``input_json``, ``citation``, ``thinking``, ``signature``), each made of an event
of the protocol the helper yields too: read as kinds added to the protocol later, nothing."""


class AnthropicAdapter(SSEAdapter):
    """One Anthropic Messages stream of one turn."""

    PROTOCOL = "Anthropic Messages"

    def __init__(self, turn: TurnRef, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        super().__init__(max_event_size=max_event_size)
        self.turn = turn
        self._message: ResponseCalls | None = None
        self._stop_reason: str | None = None
        self._started: set[str] = set()

    def _unfinished(self) -> list[Event]:
        """A message without ``message_stop`` is lost (no resume)."""
        if self._message is not None and not self._message.ended:
            return self._message.lost(resumable=False)
        return []

    def _of_protocol(self, event: JSONObject) -> bool:
        return kind_of(event) in _KINDS

    def _handle(self, event: JSONObject) -> list[Event]:
        try:
            return self._dispatch(event)
        except ProtocolBreak as problem:
            return self._violate(str(problem))

    def _handle_fast(self, event: JSONObject) -> list[Event]:
        # An input_json_delta of a tool block started in the open message: what the reference
        # would do, without its many lookups. Every other event, and this one met in any other
        # state, is read by the reference.
        message = self._message
        if message is None or message.ended or event.get("type") != "content_block_delta":
            return self._handle(event)
        index = event.get("index")
        delta = event.get("delta")
        if type(index) is not int or index < 0 or type(delta) is not dict:
            return self._handle(event)
        slot = str(index)
        piece = delta.get("partial_json")
        if (
            delta.get("type") != "input_json_delta"
            or type(piece) is not str
            or slot not in self._started
            or not message.knows(slot)
        ):
            return self._handle(event)
        return message.append_next(slot, piece.encode("utf-8", "surrogatepass"))

    def _dispatch(self, event: JSONObject) -> list[Event]:
        kind = event.get("type")
        if kind == "message_start":
            return self._message_start(event)
        if kind is None:
            raise ProtocolBreak("an event without a type")
        if kind == "ping":
            return []
        if kind == "error":
            return self._error(event)
        message = self._message
        if message is None or message.ended:
            raise ProtocolBreak(f"{kind} outside a message")
        if kind == "content_block_start":
            return self._block_start(message, event)
        if kind == "content_block_delta":
            return self._block_delta(message, event)
        if kind == "content_block_stop":
            slot = _index(event)
            if slot not in self._started:
                raise ProtocolBreak(f"content_block_stop for block {slot}, never started")
            self._started.discard(slot)
            return message.end(slot) if message.is_open(slot) else []
        if kind == "message_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict):
                raise ProtocolBreak("message_delta without a delta object")
            reason = delta.get("stop_reason")
            if reason is not None:
                self._stop_reason = str(reason)
            return []
        if kind == "message_stop":
            return self._message_stop(message)
        return []  # event kinds added to the protocol later carry no call data

    def _message_start(self, event: JSONObject) -> list[Event]:
        body = event.get("message")
        identity = body.get("id") if isinstance(body, dict) else None
        if not isinstance(identity, str) or not identity:
            raise ProtocolBreak("message_start without a message id")
        events: list[Event] = []
        if self._message is not None and not self._message.ended:
            events += self._message.violate(
                "a new message started before this one reached message_stop"
            )
        try:
            self._message = ResponseCalls(self.turn, identity)
        except ValueError:
            self._message = None
            raise ProtocolBreak("a message id that cannot name a response") from None
        self._stop_reason = None
        self._started = set()
        return events

    def _block_start(self, message: ResponseCalls, event: JSONObject) -> list[Event]:
        slot = _index(event)
        block = event.get("content_block")
        if not isinstance(block, dict):
            raise ProtocolBreak(f"content_block_start of block {slot} without a block")
        if slot in self._started:
            raise ProtocolBreak(f"block {slot} started again while open")
        self._started.add(slot)
        kind = kind_of(block)
        if kind == "tool_use" or kind in _SERVER_BLOCKS:
            call, name = block.get("id"), block.get("name")
            if not isinstance(call, str) or not call or not isinstance(name, str) or not name:
                raise ProtocolBreak(f"{kind} block {slot} without an id and a name")
            if kind == "tool_use":
                return message.open(slot, call=call, tool=name)
            return message.server_tool(slot, call=call, tool=name)
        text = block.get("text")
        if kind == "text" and isinstance(text, str):
            return message.text(len(text))
        return []

    def _block_delta(self, message: ResponseCalls, event: JSONObject) -> list[Event]:
        slot = _index(event)
        if slot not in self._started:
            raise ProtocolBreak(f"content_block_delta for block {slot}, never started")
        delta = event.get("delta")
        if not isinstance(delta, dict):
            raise ProtocolBreak(f"content_block_delta of block {slot} without a delta")
        kind = delta.get("type")
        if kind == "input_json_delta":
            piece = delta.get("partial_json")
            if not isinstance(piece, str):
                raise ProtocolBreak(f"input_json_delta of block {slot} without partial_json")
            if message.knows(slot):
                return message.append(slot, piece.encode("utf-8", "surrogatepass"))
            raise ProtocolBreak(f"input_json_delta for block {slot}, which is not a tool")
        if kind == "text_delta":
            text = delta.get("text")
            if not isinstance(text, str):
                raise ProtocolBreak(f"text_delta of block {slot} without text")
            return message.text(len(text))
        return []

    def _message_stop(self, message: ResponseCalls) -> list[Event]:
        stop = self._stop_reason
        reason = _STOP_REASONS.get(stop or "", ResponseEndReason.INCOMPLETE)
        identity = {"message": message.ref.response, "stop_reason": stop}
        return message.end_response(
            reason, TerminalRef(digest=event_digest(identity)), detail=stop or "no stop reason"
        )

    def _error(self, event: JSONObject) -> list[Event]:
        error = event.get("error")
        kind = error.get("type") if isinstance(error, dict) else None
        detail = kind if isinstance(kind, str) and kind else "error"
        message = self._message
        if message is None or message.ended:
            return []
        return message.end_response(
            ResponseEndReason.ERROR, TerminalRef(digest=event_digest(dict(event))), detail=detail
        )

    def _latest(self) -> ResponseCalls | None:
        return self._message


def _index(event: JSONObject) -> str:
    index: Any = event.get("index")
    if type(index) is not int or index < 0:
        raise ProtocolBreak(f"{event.get('type')} without a block index")
    return str(index)
