"""Routes: per class of event, the handlers of the projections that the class can change.

Folding a long log is mostly asking, for each record, which of a projection's rules apply to it.
A chain of ``isinstance`` checks answers that again for every record; a route answers it once
per class (with the same checks, in the same order, so a subclass of an event goes where it
went before) and then costs one dict lookup. A route lists only handlers that may change state,
so a record no projection cares about costs nothing beyond its lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

from ..events import Event, RecordedEvent, Redacted

Handler: TypeAlias = Callable[[RecordedEvent, Any], None]
"""A projection's rule for one kind of event: the record and what it kept of the event."""

Choose: TypeAlias = Callable[[type[Event], bool], tuple[Handler, ...]]
"""A projection's handlers for a class of event, given whether the record's payload was
redacted (``()`` for a class that cannot change its state)."""


class Routes(dict[type[Event] | type[Redacted], tuple[Handler, ...]]):
    """The handlers for each class of ``RecordedEvent.event``, chosen on its first record.

    A redacted record is routed by the class of what retention kept of it, to the handlers
    chosen for a redacted payload of that class (a projection may not trust, or may not see,
    what was taken out).
    """

    __slots__ = ("_choose", "_remains")

    def __init__(self, choose: Choose) -> None:
        super().__init__()
        self._choose = choose
        self._remains: dict[type[Event], tuple[Handler, ...]] = {}

    def __missing__(self, kind: type[Event] | type[Redacted]) -> tuple[Handler, ...]:
        handlers = (self._redacted,) if issubclass(kind, Redacted) else self._choose(kind, False)
        self[kind] = handlers
        return handlers

    def _redacted(self, recorded: RecordedEvent, redacted: Redacted) -> None:
        remains = redacted.remains
        if remains is None:
            return
        kind = type(remains)
        handlers = self._remains.get(kind)
        if handlers is None:
            handlers = self._remains[kind] = self._choose(kind, True)
        for handler in handlers:
            handler(recorded, remains)


class Routed:
    """A projection folded record by record: each record routed to the handlers of its event's
    class, a record at or before the projection's position skipped (so that resuming a read at
    a checkpoint is harmless). A snapshot of it leaves the routes out (they hold its bound
    methods, which are code, not state) and loading it chooses them again (``route``)."""

    __slots__ = ("_position", "_routes")

    _handlers: Choose

    def __init__(self) -> None:
        self._position = 0
        self._routes = Routes(self._handlers)

    @property
    def position(self) -> int:
        """The position of the last record applied (0 before any)."""
        return self._position

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event; a record at or before ``position`` was folded already."""
        position = recorded.position
        if position <= self._position:
            return
        self._position = position
        event = recorded.event
        for handler in self._routes[type(event)]:
            handler(recorded, event)

    def route(self) -> None:
        """Choose the routes again: for a projection whose fields were set without its
        ``__init__`` (a snapshot's, loaded)."""
        object.__setattr__(self, "_routes", Routes(self._handlers))
