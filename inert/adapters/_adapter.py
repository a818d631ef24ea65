"""The adapter interface every provider adapter implements, and what adapters share to read a
provider's events: JSON objects (an SDK's event objects dumped as on the wire), their kind, a
stable digest of an event without a sequence number, and the one exception that says an event
broke its protocol."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..events import (
    Event,
    InertError,
)

JSONObject = Mapping[str, Any]


class StreamAdapter(Protocol):
    """One provider stream of one turn, turned into portable ingress events.

    ``feed`` takes the raw HTTP body as it comes off the wire, split anywhere; ``feed_event``
    takes one decoded event (the JSON object, or the event object of the provider's SDK);
    ``close`` says the body ended, and reports the responses it left unfinished as lost.
    Bytes the reader refuses end the response being streamed as a protocol violation, or, where
    no response is open to end, raise ``ProtocolError``: never are they passed over unsaid.
    """

    def feed(self, chunk: bytes | str) -> list[Event]: ...

    def feed_event(self, event: object) -> list[Event]: ...

    def close(self) -> list[Event]: ...


def kind_of(value: JSONObject) -> str | None:
    """An object's ``type`` where it is a string, else ``None``: a provider's JSON may put any
    value there, and a list or an object cannot even be looked up in a set of known kinds."""
    kind = value.get("type")
    return kind if isinstance(kind, str) else None


def as_object(event: object) -> JSONObject:
    """An event as the JSON object the provider sent: SDK models are dumped as on the wire."""
    if isinstance(event, Mapping):
        return event
    to_dict = getattr(event, "to_dict", None)
    if callable(to_dict):
        dumped = to_dict()
    else:
        model_dump = getattr(event, "model_dump", None)
        if not callable(model_dump):
            kind = type(event).__name__
            raise TypeError(f"a provider event must be a JSON object or an SDK event, not {kind}")
        dumped = model_dump(mode="json", by_alias=True, exclude_unset=True)
    if not isinstance(dumped, Mapping):
        raise TypeError(f"{type(event).__name__} does not dump to a JSON object")
    return dumped


def event_digest(event: JSONObject) -> str:
    """A stable identity for a provider event that has no sequence number of its own."""
    canonical = json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


class ProtocolBreak(Exception):
    """An event (or a frame) that does not have the shape its protocol gives it; the message
    says how, naming identities only, never a value of the arguments. The adapter catches it and
    ends the response being streamed as a protocol violation."""


class ProtocolError(InertError, ValueError):
    """The reader of a provider stream refused an event (longer than the adapter's event limit,
    bytes that are not UTF-8, an event-stream frame whose framing fails) while no response was
    open for it to end: before any response began, or after the last one ended. Nothing more of
    the stream is read: every later ``feed`` or ``feed_event`` of the adapter raises it again,
    and ``close`` ends the adapter.

    ``events`` are the events the same call read before the refused one, whole: feed them
    before giving up on the stream (a response may have ended in the same chunk).
    """

    def __init__(
        self, protocol: str, detail: str, where: str, events: Sequence[Event] = ()
    ) -> None:
        super().__init__(
            f"the {protocol} stream was refused {where}: {detail}; nothing more of it is read"
        )
        self.protocol = protocol
        self.detail = detail
        self.where = where
        self.events: tuple[Event, ...] = tuple(events)

    def again(self) -> ProtocolError:
        """The same refusal for a later call, without the events already handed out."""
        return ProtocolError(self.protocol, self.detail, self.where)
