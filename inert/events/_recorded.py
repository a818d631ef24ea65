"""An event as the log hands it back: its envelope, and what retention left of it."""

from __future__ import annotations

from datetime import datetime

import attrs
from attrs import frozen

from ._base import Event, TraceContext


@frozen(kw_only=True)
class Redacted:
    """What remains of a payload after retention: its length and digest and, for an event type
    that names its sensitive fields, the event with those fields emptied (``remains``)."""

    length: int
    digest: str
    remains: Event | None = None


@frozen(kw_only=True)
class RecordedEvent:
    """An event as the log holds it: the envelope and the event (or what redaction left)."""

    position: int
    event_id: str
    stream: str
    version: int
    recorded_at: datetime
    event_type: str
    schema_version: int
    trace: TraceContext | None
    event: Event | Redacted

    @property
    def kept(self) -> Event | None:
        """The event, or what retention kept of it (``None`` where it kept nothing)."""
        event = self.event
        return event.remains if isinstance(event, Redacted) else event


def without_sensitive(event: Event) -> Event:
    """The event with the fields its type names ``SENSITIVE`` emptied: what retention keeps."""
    names = type(event).SENSITIVE
    if not names:
        return event
    emptied = {
        name: None if getattr(event, name) is None else type(getattr(event, name))()
        for name in names
    }
    return attrs.evolve(event, **emptied)
