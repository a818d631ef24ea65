"""The base of every event: a stable type tag, a schema version, and the tag registry.

Tags are written by hand and never derived from module paths, so that moving or renaming a class
never changes what is stored. A class whose fields change in an incompatible way gets a higher
``SCHEMA_VERSION`` and an upcaster (see the codec) for the payloads written before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

from attrs import frozen

_TAG_PATTERN = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


@frozen(kw_only=True)
class Event:
    """Base class of every event. Subclasses are registered with
    [`event_type`][inert.events.event_type]."""

    TAG: ClassVar[str]
    SCHEMA_VERSION: ClassVar[int]
    SENSITIVE: ClassVar[tuple[str, ...]] = ()
    """Fields that may hold argument values: emptied by retention, the rest of the event kept."""
    UPCASTERS: ClassVar[Mapping[int, Upcaster]] = {}
    """The class's own upcasters, by the schema version each upgrades from."""


Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
"""Turns the fields of a payload of one schema version into those of the next."""


E = TypeVar("E", bound=type[Event])

_REGISTRY: dict[str, type[Event]] = {}


def event_type(
    tag: str, schema_version: int = 1, *, upcasters: Mapping[int, Upcaster] | None = None
) -> Callable[[E], E]:
    """Give an event class its stable tag and schema version, and register it, with the
    upcasters that read its payloads of every earlier version (every codec applies them)."""
    if not _TAG_PATTERN.fullmatch(tag):
        raise ValueError(f"event tag {tag!r} must be dotted lower-case words, e.g. 'call.opened'")
    if schema_version < 1:
        raise ValueError(f"schema version of {tag!r} must be at least 1, not {schema_version}")
    steps = dict(upcasters or {})
    if sorted(steps) != list(range(1, schema_version)):
        raise ValueError(
            f"{tag!r} at schema version {schema_version} needs one upcaster from each of the"
            f" versions 1..{schema_version - 1}, not from {sorted(steps)}"
        )

    def register(cls: E) -> E:
        if tag in _REGISTRY and _REGISTRY[tag] is not cls:
            raise ValueError(f"event tag {tag!r} is already used by {_REGISTRY[tag].__name__}")
        cls.TAG = tag
        cls.SCHEMA_VERSION = schema_version
        cls.UPCASTERS = steps
        _REGISTRY[tag] = cls
        return cls

    return register


def registered_event_types() -> Mapping[str, type[Event]]:
    """Every event class inert knows, by tag."""
    return dict(_REGISTRY)


@frozen(kw_only=True)
class TraceContext:
    """W3C trace context as it arrived: opaque, for correlation only.

    It is stored beside an event, never inside it, and never orders, deduplicates or authorises
    anything.
    """

    traceparent: str
    tracestate: str | None = None
