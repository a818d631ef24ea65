"""The one base of the adapters whose wire is SSE with one JSON object per event (OpenAI
Responses, OpenAI Chat Completions, Anthropic Messages, Gemini): feeding raw chunks or decoded
events, decoding each event's data, and the end of the body, alike for all. The protocol's own
rules are the subclass's: what an event means, how a violation ends its response, what a body
that ends early leaves unfinished, and the few events a protocol sends that are not JSON."""

from __future__ import annotations

import abc
import json
from collections.abc import Mapping

from ..events import Event
from ._adapter import JSONObject, as_object
from ._envelope import EnvelopeRefused, read_event_json
from ._sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder


class SSEAdapter(abc.ABC):
    """An adapter reading SSE events whose data is one JSON object each."""

    PROTOCOL = "event"
    """How the protocol's streams are named in errors."""

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self._decoder = SSEDecoder(max_event_size=max_event_size)
        self._closed = False

    def feed(self, chunk: bytes | str) -> list[Event]:
        """Raw body bytes (or text) as they come off the wire, split anywhere."""
        self._check_open()
        if not isinstance(chunk, bytes | str):
            raise TypeError(f"a body chunk is bytes or str, not {type(chunk).__name__}")
        return self._read(self._decoder.feed(chunk))

    def feed_event(self, event: object) -> list[Event]:
        """One decoded event: its JSON object, or the provider SDK's event object."""
        self._check_open()
        return self._handle(as_object(event))

    def close(self) -> list[Event]:
        """The body ended: what it left unfinished is lost."""
        if self._closed:
            return []
        events = self._read(self._decoder.close())
        self._closed = True
        return events + self._unfinished()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"the {self.PROTOCOL} stream was closed")

    def _read(self, sent: list[ServerSentEvent]) -> list[Event]:
        events: list[Event] = []
        for message in sent:
            events += self._event_of(message)
        return events

    def _event_of(self, message: ServerSentEvent) -> list[Event]:
        if message.refused:
            return self._violate(message.refused)
        special = self._not_json(message)
        if special is not None:
            return special
        try:
            payload = read_event_json(message.data)
        except EnvelopeRefused as refused:
            # Cut off with the connection, the last event is a lost stream, which close()
            # reports; anywhere else it breaks the protocol.
            return self._violate(refused.msg) if message.complete else []
        except json.JSONDecodeError:
            return self._violate("an event whose data is not JSON") if message.complete else []
        if not isinstance(payload, Mapping):
            return self._violate("an event whose data is not a JSON object")
        return self._handle(payload)

    def _not_json(self, message: ServerSentEvent) -> list[Event] | None:
        """The events of a message the protocol sends without a JSON object (``[DONE]``, an
        error event), or None for a message to read as one."""
        return None

    @abc.abstractmethod
    def _handle(self, event: JSONObject) -> list[Event]:
        """The portable events of one provider event; an event that breaks the protocol ends
        its response as a violation (a ``ProtocolBreak`` raised inside is caught here)."""

    @abc.abstractmethod
    def _violate(self, detail: str) -> list[Event]:
        """End the response being streamed as a protocol violation."""

    @abc.abstractmethod
    def _unfinished(self) -> list[Event]:
        """At the end of the body: the responses it left without their terminal event."""
