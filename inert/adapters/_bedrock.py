"""AWS Bedrock ConverseStream to portable ingress events, from the binary event stream or boto3.

ConverseStream carries no message id: the agent server names the response (the request id
Bedrock answered with, ``x-amzn-requestid``); a second message in the same stream is
``<response>#2``, and so on. A message's content blocks are the items, named by their
``contentBlockIndex``; a tool block's ``toolUseId`` and ``name`` arrive on its
``contentBlockStart`` and are bound to the index there. A call's arguments are the concatenated
``delta.toolUse.input`` strings; ``contentBlockStop`` is its end event. The message ends at
``messageStop``: ``end_turn``, ``tool_use`` and ``stop_sequence`` are a successful end.

On the wire each event is one message of the AWS event-stream framing: a prelude (total length,
headers length, their CRC32), headers (``:message-type``, ``:event-type``, ``:exception-type``),
a JSON payload and the CRC32 of the whole message. The decoder checks both checksums and the
lengths; a frame that fails them ends the message as a protocol violation, and nothing after it
is read (its framing can no longer be trusted): with no message open for it to end (before the
first one, or after the last one's ``messageStop``) ``feed`` raises ``ProtocolError`` instead,
and every later ``feed`` raises it again. boto3 hands out the same events decoded, one
key each (``{"contentBlockDelta": {...}}``), which ``feed_event`` takes.

Rules this adapter keeps:

- A tool delta or stop for a block never started, a block started again at an open index, a
  tool block without an id and a name, a block event after ``messageStop`` without a new
  ``messageStart``, or a payload that is not an object, ends the message as a protocol
  violation. Text blocks may have no start, and a stream's first message its
  ``messageStart`` (the agent server names it).
- An in-stream exception (``throttlingException``, ``modelStreamErrorException``, ...) ends the
  open message ``error``, with the exception's name as detail, never its message.
- ``delta.text`` counts as text for the status; reasoning content is neither text nor call data.
- There is no resume: a body that ends before ``messageStop`` loses its message.
- A stream that had events, none of them of ConverseStream (another protocol's), makes
  ``close`` raise ``ProtocolError``: it is never passed over in silence.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Mapping
from typing import Any

from ..events import Event, ResponseEndReason, TerminalRef, TurnRef
from ._adapter import JSONObject, ProtocolBreak, ProtocolError, as_object, event_digest
from ._calls import ResponseCalls
from ._envelope import EnvelopeRefused, read_event_json

_STOP_REASONS = {
    "end_turn": ResponseEndReason.COMPLETED,
    "tool_use": ResponseEndReason.COMPLETED,
    "stop_sequence": ResponseEndReason.COMPLETED,
    "max_tokens": ResponseEndReason.LENGTH,
    "guardrail_intervened": ResponseEndReason.CONTENT_FILTER,
    "content_filtered": ResponseEndReason.CONTENT_FILTER,
    "model_context_window_exceeded": ResponseEndReason.CONTEXT_WINDOW_EXCEEDED,
}
_KINDS = frozenset(
    {
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    }
)
"""The event types of ConverseStream (beside its exceptions)."""
_PRELUDE = 12
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
"""The largest event-stream message read by default; a larger length in a frame's prelude ends
the response at once, before its body is buffered."""
# Header value types of the event-stream encoding and the width of their fixed-size values.
_FIXED_WIDTHS = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}
_SIZED = frozenset({6, 7})


def _headers(data: bytes) -> dict[str, object]:
    headers: dict[str, object] = {}
    offset = 0
    while offset < len(data):
        length = data[offset]
        name = _text(data[offset + 1 : offset + 1 + length])
        offset += 1 + length
        if offset >= len(data):
            raise ProtocolBreak("a frame header without a value")
        kind = data[offset]
        offset += 1
        if kind in _SIZED:
            (size,) = struct.unpack_from(">H", data, offset)
            raw = data[offset + 2 : offset + 2 + size]
            headers[name] = _text(raw) if kind == 7 else raw
            offset += 2 + size
        elif kind in _FIXED_WIDTHS:
            offset += _FIXED_WIDTHS[kind]
            headers[name] = kind == 0 if kind in (0, 1) else None
        else:
            raise ProtocolBreak(f"a frame header of unknown type {kind}")
        if offset > len(data):
            raise ProtocolBreak("a frame header longer than its frame")
    return headers


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolBreak("a frame header whose bytes are not UTF-8") from None


def _string_header(name: str, value: str) -> bytes:
    encoded_name, encoded_value = name.encode(), value.encode()
    return (
        bytes([len(encoded_name)])
        + encoded_name
        + b"\x07"
        + struct.pack(">H", len(encoded_value))
        + encoded_value
    )


def event_stream_message(
    event_type: str, payload: Mapping[str, Any] | bytes, *, exception: bool = False
) -> bytes:
    """One event-stream message as Bedrock frames a ConverseStream event (or, with
    ``exception``, an in-stream exception named ``event_type``): for replaying recorded
    streams to a client or an adapter. A ``bytes`` payload is framed as it is."""
    kind = "exception" if exception else "event"
    headers = (
        _string_header(":exception-type" if exception else ":event-type", event_type)
        + _string_header(":content-type", "application/json")
        + _string_header(":message-type", kind)
    )
    body = (
        payload
        if isinstance(payload, bytes)
        else json.dumps(payload, separators=(",", ":")).encode()
    )
    prelude = struct.pack(">II", _PRELUDE + len(headers) + len(body) + 4, len(headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers + body
    return head + struct.pack(">I", zlib.crc32(head))


class EventStreamDecoder:
    """The AWS event-stream framing, split anywhere: each complete message's headers and
    payload. A message whose checksums or lengths fail stops the decoder: ``broken`` says why,
    and nothing after it is read, since where the next message starts is no longer known."""

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < _PRELUDE + 4:
            raise ValueError(
                f"max_frame_size must be at least {_PRELUDE + 4}, not {max_frame_size}"
            )
        self._max = max_frame_size
        self._buffer = bytearray()
        self.broken: str | None = None

    def feed(self, chunk: bytes) -> list[tuple[dict[str, object], bytes]]:
        messages: list[tuple[dict[str, object], bytes]] = []
        if self.broken is not None:
            return messages
        self._buffer += chunk
        try:
            while len(self._buffer) >= _PRELUDE:
                message = self._next()
                if message is None:
                    break
                messages.append(message)
        except ProtocolBreak as problem:
            self.broken = str(problem)
            self._buffer.clear()
        return messages

    def _next(self) -> tuple[dict[str, object], bytes] | None:
        total, header_length, prelude_crc = struct.unpack_from(">III", self._buffer)
        if zlib.crc32(self._buffer[:8]) != prelude_crc:
            raise ProtocolBreak("a frame whose prelude checksum does not match")
        if total > self._max:
            raise ProtocolBreak(f"a frame of {total} bytes, longer than {self._max}")
        if total < _PRELUDE + header_length + 4:
            raise ProtocolBreak(f"a frame of impossible length {total}")
        if len(self._buffer) < total:
            return None
        frame = bytes(self._buffer[:total])
        del self._buffer[:total]
        (message_crc,) = struct.unpack_from(">I", frame, total - 4)
        if zlib.crc32(frame[: total - 4]) != message_crc:
            raise ProtocolBreak("a frame whose message checksum does not match")
        headers = _headers(frame[_PRELUDE : _PRELUDE + header_length])
        return headers, frame[_PRELUDE + header_length : total - 4]


class BedrockAdapter:
    """One ConverseStream of one turn; ``response`` names its message (Bedrock does not)."""

    def __init__(
        self, turn: TurnRef, *, response: str, max_event_size: int = DEFAULT_MAX_FRAME_SIZE
    ) -> None:
        if not response:
            raise ValueError("a Bedrock stream needs the response id the agent server gives it")
        ResponseCalls(turn, response)  # a name that cannot name a response fails here, at once
        self.turn = turn
        self.response = response
        self._frames = EventStreamDecoder(max_frame_size=max_event_size)
        self._message: ResponseCalls | None = None
        self._messages = 0
        self._started: set[str] = set()
        self._closed = False
        self._refused: ProtocolError | None = None
        self._first: str | None = None
        """What the first event read was, until one of the protocol is read."""
        self._read_one = False

    def feed(self, chunk: bytes | str) -> list[Event]:
        """Raw event-stream bytes, split anywhere."""
        self._check_open()
        if isinstance(chunk, str):
            raise TypeError("a Bedrock stream is binary: feed bytes")
        events: list[Event] = []
        for headers, payload in self._frames.feed(chunk):
            events += self._frame(headers, payload)
        broken = self._frames.broken
        if broken is not None:
            # Where the next frame starts is unknown: nothing after this one can be read.
            ended = self._violate(broken)
            self._refused = ProtocolError("Bedrock", broken, self._where(ended=bool(ended)))
            if not ended:
                raise ProtocolError("Bedrock", broken, self._refused.where, events)
            events += ended
        return events

    def _where(self, *, ended: bool) -> str:
        """Where in the stream its framing broke, for the error that says so."""
        message = self._message
        if message is None:
            return "before any message began"
        name = message.ref.response
        return f"in message {name!r}" if ended else f"after message {name!r} ended"

    def feed_event(self, event: object) -> list[Event]:
        """One decoded event as boto3 gives it: ``{"<eventType>": {...}}``."""
        self._check_open()
        decoded = as_object(event)
        if len(decoded) != 1:
            if self._first is None:
                self._first = f"an object of {len(decoded)} keys, not one event type"
            return self._violate("a decoded event without exactly one event type")
        [(kind, body)] = decoded.items()
        return self._handle(str(kind), body)

    def close(self) -> list[Event]:
        """The body ended: a message without ``messageStop`` is lost (no resume). A stream that
        had events, none of them of ConverseStream, raises ``ProtocolError``."""
        if self._closed:
            return []
        self._closed = True
        if self._first is not None and not self._read_one and self._refused is None:
            raise ProtocolError(
                "Bedrock",
                f"none of its events is one of the protocol (the first was {self._first});"
                " pass the stream to the adapter of its protocol",
                "at its end",
            )
        message = self._message
        if message is not None and not message.ended:
            return message.lost(resumable=False)
        return []

    def _check_open(self) -> None:
        if self._refused is not None:
            raise self._refused.again()
        if self._closed:
            raise ValueError("the stream was closed")

    def _frame(self, headers: Mapping[str, object], payload: bytes) -> list[Event]:
        kind = headers.get(":message-type")
        name = headers.get(":exception-type") if kind == "exception" else None
        name = name if name is not None else headers.get(":event-type")
        if kind == "error":
            name = headers.get(":error-code") or "error"
            return self._exception(str(name))
        try:
            body = read_event_json(payload) if payload else {}
        except EnvelopeRefused as refused:
            return self._violate(f"a {name} frame refused: {refused.msg}")
        except json.JSONDecodeError:
            return self._violate(f"a {name} frame whose payload is not JSON")
        if kind == "exception":
            return self._exception(str(name))
        return self._handle(str(name), body)

    def _handle(self, kind: str, body: object) -> list[Event]:
        if kind in _KINDS:
            self._read_one = True
        elif self._first is None and not kind.endswith("Exception"):
            self._first = f"of type {kind!r}"
        if kind.endswith("Exception"):
            return self._exception(kind)
        if not isinstance(body, dict):
            return self._violate(f"{kind} whose payload is not an object")
        try:
            return self._dispatch(kind, body)
        except ProtocolBreak as problem:
            return self._violate(str(problem))

    def _dispatch(self, kind: str, body: JSONObject) -> list[Event]:
        if kind == "messageStart":
            return self._message_start()
        if kind == "metadata":
            return []
        message = self._message
        if message is None:
            # The stream is one message named by the agent server: a missing messageStart
            # (seen in recorded streams) hides nothing that identifies it.
            self._message_start()
            message = self._message
            assert message is not None
        if message.ended:
            raise ProtocolBreak(f"{kind} after messageStop, outside a message")
        if kind == "contentBlockStart":
            return self._block_start(message, body)
        if kind == "contentBlockDelta":
            return self._block_delta(message, body)
        if kind == "contentBlockStop":
            slot = _index(kind, body)
            if message.is_open(slot):
                self._started.discard(slot)
                return message.end(slot)
            if message.knows(slot):
                raise ProtocolBreak(f"contentBlockStop for tool block {slot} twice")
            self._started.discard(slot)
            return []
        if kind == "messageStop":
            reason = body.get("stopReason")
            stop = reason if isinstance(reason, str) else None
            identity = {"response": message.ref.response, "stopReason": stop}
            return message.end_response(
                _STOP_REASONS.get(stop or "", ResponseEndReason.INCOMPLETE),
                TerminalRef(digest=event_digest(identity)),
                detail=stop or "no stop reason",
            )
        return []  # event types added to the protocol later carry no call data

    def _message_start(self) -> list[Event]:
        events: list[Event] = []
        if self._message is not None and not self._message.ended:
            events += self._message.violate("a new message started before messageStop")
        self._messages += 1
        name = self.response if self._messages == 1 else f"{self.response}#{self._messages}"
        try:
            self._message = ResponseCalls(self.turn, name)
        except ValueError:
            self._message = None
            raise ProtocolBreak("a message name that cannot name a response") from None
        self._started = set()
        return events

    def _block_start(self, message: ResponseCalls, body: JSONObject) -> list[Event]:
        slot = _index("contentBlockStart", body)
        if slot in self._started or message.is_open(slot):
            raise ProtocolBreak(f"block {slot} started again while open")
        self._started.add(slot)
        start = body.get("start")
        tool = start.get("toolUse") if isinstance(start, dict) else None
        if tool is None:
            return []
        if not isinstance(tool, dict):
            raise ProtocolBreak(f"block {slot} whose toolUse is not an object")
        call, name = tool.get("toolUseId"), tool.get("name")
        if not isinstance(call, str) or not call or not isinstance(name, str) or not name:
            raise ProtocolBreak(f"tool block {slot} without a toolUseId and a name")
        return message.open(slot, call=call, tool=name)

    def _block_delta(self, message: ResponseCalls, body: JSONObject) -> list[Event]:
        slot = _index("contentBlockDelta", body)
        delta = body.get("delta")
        if not isinstance(delta, dict):
            raise ProtocolBreak(f"contentBlockDelta of block {slot} without a delta")
        tool = delta.get("toolUse")
        if tool is not None:
            if not message.is_open(slot):
                raise ProtocolBreak(f"tool input for block {slot}, which is not an open tool")
            piece = tool.get("input") if isinstance(tool, dict) else None
            if not isinstance(piece, str):
                raise ProtocolBreak(f"tool input of block {slot} that is not a string")
            return message.append(slot, piece.encode("utf-8", "surrogatepass"))
        text = delta.get("text")
        if isinstance(text, str):
            return message.text(len(text))
        return []

    def _exception(self, name: str) -> list[Event]:
        self._read_one = True
        message = self._message
        if message is None or message.ended:
            return []
        identity = {"response": message.ref.response, "exception": name}
        return message.end_response(
            ResponseEndReason.ERROR, TerminalRef(digest=event_digest(identity)), detail=name
        )

    def _violate(self, detail: str) -> list[Event]:
        message = self._message
        if message is None or message.ended:
            return []
        return message.violate(detail)


def _index(kind: str, body: JSONObject) -> str:
    index = body.get("contentBlockIndex")
    if type(index) is not int or index < 0:
        raise ProtocolBreak(f"{kind} without a content block index")
    return str(index)
