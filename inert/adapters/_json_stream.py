"""What the adapters whose wire is SSE with one JSON object per event share: feeding raw chunks
or decoded events, decoding each event's data, and the end of the body. The protocol's own rules
are the subclass's: what an event means, how a violation ends its response, what a body that
ends early leaves unfinished."""

from __future__ import annotations

import abc
import json

from ..events import Event
from ._adapter import JSONObject, ProtocolBreak, as_object
from ._envelope import EnvelopeRefused, read_event_json
from ._sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder


class JSONEventStream(abc.ABC):
    """An adapter reading SSE events whose data is one JSON object each."""

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        self._decoder = SSEDecoder(max_event_size=max_event_size)
        self._closed = False

    def feed(self, chunk: bytes | str) -> list[Event]:
        """Raw SSE body, split anywhere."""
        self._check_open()
        return self._events(self._decoder.feed(chunk))

    def feed_event(self, event: object) -> list[Event]:
        """One decoded event: its JSON object, or the provider SDK's event object."""
        self._check_open()
        return self._handle(as_object(event))

    def close(self) -> list[Event]:
        """The body ended: what it left unfinished is lost."""
        if self._closed:
            return []
        events = self._events(self._decoder.close())
        self._closed = True
        return events + self._unfinished()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("the stream was closed")

    def _events(self, sent: list[ServerSentEvent]) -> list[Event]:
        events: list[Event] = []
        for message in sent:
            if message.refused:
                events += self._violate(message.refused)
                continue
            try:
                payload = read_event_json(message.data)
            except EnvelopeRefused as refused:
                if message.complete:
                    events += self._violate(refused.msg)
                continue
            except json.JSONDecodeError:
                # A last event cut off with the connection is a lost stream, which close()
                # reports; anywhere else, data that is not JSON breaks the protocol.
                if message.complete:
                    events += self._violate("an event whose data is not JSON")
                continue
            except ProtocolBreak as problem:
                events += self._violate(str(problem))
                continue
            if not isinstance(payload, dict):
                events += self._violate("an event whose data is not a JSON object")
                continue
            events += self._handle(payload)
        return events

    @abc.abstractmethod
    def _handle(self, event: JSONObject) -> list[Event]:
        """The portable events of one provider event."""

    @abc.abstractmethod
    def _violate(self, detail: str) -> list[Event]:
        """End the response being streamed as a protocol violation."""

    @abc.abstractmethod
    def _unfinished(self) -> list[Event]:
        """At the end of the body: the responses it left without their terminal event."""
