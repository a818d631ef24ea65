"""The one base of the adapters whose wire is SSE with one JSON object per event (OpenAI
Responses, OpenAI Chat Completions, Anthropic Messages, Gemini): feeding raw chunks or decoded
events, decoding each event's data, and the end of the body, alike for all. The protocol's own
rules are the subclass's: what an event means, which response an event ends, what a body that
ends early leaves unfinished, and the few events a protocol sends that are not JSON.

An event the SSE reader refuses (past ``max_event_size``), or one whose ``data`` or ``event``
bytes were not UTF-8, ends the response being streamed as a protocol violation; with no
response open to end (before the first one began, or after the last one ended) it raises
``ProtocolError`` instead, and nothing more is read: an event refused unsaid would leave the
caller reading a stream it can learn nothing from. An event the body ends before its blank line
is no event (the SSE rules discard it): the stream ended early, and its responses are lost."""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping
from typing import ClassVar, cast

from ..events import Event
from ._adapter import JSONObject, ProtocolError, as_object, kind_of
from ._calls import ResponseCalls
from ._envelope import EnvelopeRefused, read_event_json, read_event_text
from ._sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder

_NOT_UTF8 = "an event whose bytes are not UTF-8"


class SSEAdapter(abc.ABC):
    """An adapter reading SSE events whose data is one JSON object each."""

    PROTOCOL = "event"
    """How the protocol's streams are named in errors."""

    _SPECIAL_KINDS: ClassVar[frozenset[str]] = frozenset()
    """The message types ``_not_json`` reads whatever their data; a message of another type
    whose data is a JSON object is never one of those it reads."""

    _FAST: ClassVar[bool] = True
    """Whether chunks are read by the fast path (``SSEDecoder.feed_fast``, ``read_event_text``,
    ``_handle_fast``), which reads every stream as the reference path does, only sooner; the
    tests read the same streams both ways and compare."""

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self._decoder = SSEDecoder(max_event_size=max_event_size)
        self._closed = False
        self._refused: ProtocolError | None = None
        self._first: str | None = None
        """What the first event read was, until one of the protocol is read."""
        self._read_one = False
        """Whether an event of the protocol was read."""
        self._fed = False
        """Whether a chunk or an event was fed and read."""

    def feed(self, chunk: bytes | str) -> list[Event]:
        """Raw body bytes (or text) as they come off the wire, split anywhere."""
        if self._refused is not None or self._closed:
            self._check_open()
        if not isinstance(chunk, bytes | str):
            raise TypeError(
                f"a body chunk is bytes or str, not {type(chunk).__name__}: pass a decoded"
                " event or an SDK event object to feed_event()"
            )
        if not self._FAST:
            events = self._read(self._decoder.feed(chunk))
        else:
            sent = self._decoder.feed_fast(chunk)
            if len(sent) == 1 and type(sent[0]) is tuple:
                kind, data = sent[0]
                events = self._event_fast(kind, data)
            elif sent and type(sent[0]) is tuple:
                events = []
                for kind, data in sent:
                    events += self._event_fast(kind, data)
            else:
                events = self._read(cast(list[ServerSentEvent], sent))
        self._fed = True
        return events

    def feed_event(self, event: object) -> list[Event]:
        """One decoded event: its JSON object, or the provider SDK's event object."""
        self._check_open()
        payload = as_object(event)
        self._note(payload, f"a {type(event).__name__}")
        events = self._handle(payload)
        self._fed = True
        return events

    def close(self) -> list[Event]:
        """The body ended: what it left unfinished is lost. A stream that had events, none of
        them of the protocol, raises ``ProtocolError``: it was not this protocol's, and read
        as it, it would have been passed over in silence."""
        if self._closed:
            return []
        self._decoder.close()
        self._closed = True
        if self._first is not None and not self._read_one and self._refused is None:
            raise ProtocolError(
                self.PROTOCOL,
                f"none of its events is one of the protocol (the first was {self._first});"
                " pass the stream to the adapter of its protocol",
                "at its end",
            )
        return self._unfinished()

    def _note(self, payload: JSONObject, what: str) -> None:
        """Note whether an event read is one of the protocol."""
        if self._read_one:
            return
        if self._of_protocol(payload):
            self._read_one = True
        elif self._first is None:
            kind = kind_of(payload)
            self._first = what + (f" of type {kind!r}" if kind is not None else "")

    def _check_open(self) -> None:
        if self._refused is not None:
            raise self._refused.again()
        if self._closed:
            raise ValueError(f"the {self.PROTOCOL} stream was closed")

    def _read(self, sent: list[ServerSentEvent]) -> list[Event]:
        events: list[Event] = []
        for message in sent:
            if message.refused:
                events += self._refuse(message.refused, events)
            elif message.replaced:
                events += self._refuse(_NOT_UTF8, events)
            else:
                events += self._event_of(message)
        return events

    def _refuse(self, detail: str, before: list[Event]) -> list[Event]:
        """The reader refused an event: the open response ends, or the stream is refused."""
        ended = self._violate(detail)
        if ended:
            return ended
        latest = self._latest()
        where = (
            "before any response began"
            if latest is None
            else f"after response {latest.ref.response!r} ended"
        )
        self._refused = ProtocolError(self.PROTOCOL, detail, where)
        raise ProtocolError(self.PROTOCOL, detail, where, before)

    def _violate(self, detail: str) -> list[Event]:
        """End the response being streamed as a protocol violation (nothing, if none is open)."""
        latest = self._latest()
        if latest is None or latest.ended:
            return []
        return latest.violate(detail)

    def _event_fast(self, kind: str, data: str) -> list[Event]:
        """``_event_of`` a message of type ``kind`` read by the decoder's fast path."""
        if data[:1] != "{" or kind in self._SPECIAL_KINDS:
            special = self._not_json(kind, data)
            if special is not None:
                return special
        try:
            payload = read_event_text(data)
        except EnvelopeRefused as refused:
            return self._violate(refused.msg)
        except json.JSONDecodeError:
            return self._violate("an event whose data is not JSON")
        if type(payload) is not dict and not isinstance(payload, Mapping):
            return self._violate("an event whose data is not a JSON object")
        if not self._read_one:
            self._note(payload, "an event")
        return self._handle_fast(payload)

    def _handle_fast(self, event: JSONObject) -> list[Event]:
        """``_handle``, with the protocol's hot events (argument deltas) read by a path of
        their own where the state they meet is the usual one; the reference reads the rest."""
        return self._handle(event)

    def _event_of(self, message: ServerSentEvent) -> list[Event]:
        special = self._not_json(message.event, message.data)
        if special is not None:
            return special
        try:
            payload = read_event_json(message.data)
        except EnvelopeRefused as refused:
            return self._violate(refused.msg)
        except json.JSONDecodeError:
            return self._violate("an event whose data is not JSON")
        if not isinstance(payload, Mapping):
            return self._violate("an event whose data is not a JSON object")
        self._note(payload, "an event")
        return self._handle(payload)

    @abc.abstractmethod
    def _of_protocol(self, event: JSONObject) -> bool:
        """Whether ``event`` is one the protocol sends (of whatever content), as opposed to
        an object of another protocol or of an SDK's helper that adds nothing to its events."""

    def _not_json(self, kind: str, data: str) -> list[Event] | None:
        """The events of a message (of type ``kind``) the protocol sends without a JSON object
        (``[DONE]``, an error event), or None for a message to read as one. A message whose
        data starts a JSON object is one only if its type is in ``_SPECIAL_KINDS``."""
        return None

    @abc.abstractmethod
    def _handle(self, event: JSONObject) -> list[Event]:
        """The portable events of one provider event; an event that breaks the protocol ends
        its response as a violation (a ``ProtocolBreak`` raised inside is caught here)."""

    @abc.abstractmethod
    def _latest(self) -> ResponseCalls | None:
        """The calls of the response streamed last (open or ended), or None before any."""

    @abc.abstractmethod
    def _unfinished(self) -> list[Event]:
        """At the end of the body: the responses it left without their terminal event."""
