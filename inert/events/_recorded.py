"""An event as the log hands it back: its envelope, and what retention left of it."""

from __future__ import annotations

from collections.abc import Callable
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


def recorded_event_maker() -> Callable[
    [int, str, str, int, datetime, str, int, TraceContext | None, Event | Redacted],
    RecordedEvent,
]:
    """A function that makes a ``RecordedEvent`` from its fields in order, equal to the one its
    ``__init__`` makes, at half the cost: a replay makes one per event, and the class has no
    validator, converter or default for ``__init__`` to apply, so its slots are set directly."""
    fields = attrs.fields(RecordedEvent)
    if len(fields) != 9 or any(
        field.validator is not None or field.converter is not None for field in fields
    ):
        raise AssertionError("recorded_event_maker sets nine fields that nothing checks")
    setters = tuple(getattr(RecordedEvent, field.name).__set__ for field in fields)
    (position_, event_id_, stream_, version_, at_, type_, schema_, trace_, event_) = setters
    new = object.__new__

    # In the order of the fields, positional: the caller is the replay's loop over rows.
    def make(  # noqa: PLR0917
        position: int,
        event_id: str,
        stream: str,
        version: int,
        recorded_at: datetime,
        event_type: str,
        schema_version: int,
        trace: TraceContext | None,
        event: Event | Redacted,
    ) -> RecordedEvent:
        recorded = new(RecordedEvent)
        position_(recorded, position)
        event_id_(recorded, event_id)
        stream_(recorded, stream)
        version_(recorded, version)
        at_(recorded, recorded_at)
        type_(recorded, event_type)
        schema_(recorded, schema_version)
        trace_(recorded, trace)
        event_(recorded, event)
        return recorded

    return make


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
