"""The one converter between events and bytes (cattrs + msgpack).

An event is stored as its tag, its schema version and a msgpack map of its fields. Decoding is
strict: a field of the wrong type, a missing or an extra field, or bytes that are not msgpack are
a ``CodecError``, never a silent coercion (cattrs alone would turn ``5`` into ``"5"``) and never an
exception of msgpack or cattrs. Datetimes are stored as integer microseconds since the Unix epoch
in UTC; naive datetimes are refused, since their meaning depends on the machine that wrote them.

Payloads written with an older schema version of an event are brought up to date by upcasters,
one step at a time, before they are structured.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, TypeVar

import cattrs
import msgpack

from ._base import Event, Upcaster, registered_event_types
from ._errors import CodecError
from ._recorded import without_sensitive
from ._structure import GIVE_UP, Structure, fast_structure
from ._times import datetime_to_micros, micros_to_datetime

T = TypeVar("T")


def _strict(expected: type[T]) -> Callable[[object, type[T]], T]:
    def structure(value: object, _: type[T]) -> T:
        if type(value) is not expected:
            raise TypeError(f"expected {expected.__name__}, got {type(value).__name__}")
        return value

    return structure


def _structure_float(value: object, _: type[float]) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise TypeError(f"expected float, got {type(value).__name__}")


def _structure_datetime(value: object, _: type[datetime]) -> datetime:
    if type(value) is not int:
        raise TypeError(f"expected integer microseconds, got {type(value).__name__}")
    return micros_to_datetime(value)


def _is_tuple(cls: Any) -> bool:
    return typing.get_origin(cls) is tuple


def _structure_tuple(value: object, cls: Any) -> tuple[Any, ...]:
    # cattrs alone would take any iterable: "" or {} would become ().
    if type(value) is not list:
        raise TypeError(f"expected an array, got {type(value).__name__}")
    item_type, ellipsis = typing.get_args(cls)
    if ellipsis is not Ellipsis:
        raise TypeError(f"only variable-length tuples are event fields, not {cls}")
    return tuple(CONVERTER.structure(item, item_type) for item in value)


def _structure_enum(value: object, cls: type[enum.Enum]) -> enum.Enum:
    if type(value) is not str:
        raise TypeError(f"expected a {cls.__name__} value, got {type(value).__name__}")
    return cls(value)


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    # Single-dispatch hooks win over cattrs' own primitive hooks (which coerce: str(5) == "5").
    # A StrEnum is a str too; its own hook, earlier in its MRO than str, keeps it an enum.
    for primitive in (str, int, bool, bytes):
        converter.register_structure_hook(primitive, _strict(primitive))
    converter.register_structure_hook(float, _structure_float)
    converter.register_unstructure_hook(datetime, datetime_to_micros)
    converter.register_structure_hook(datetime, _structure_datetime)
    converter.register_structure_hook(enum.StrEnum, _structure_enum)
    converter.register_structure_hook_func(_is_tuple, _structure_tuple)
    return converter


CONVERTER = _make_converter()


def _describe_exception(error: BaseException, _: type[Any] | None) -> str:
    # The messages of inert's own hooks and of attrs validators name the field and the rule;
    # cattrs' default wording ("invalid value") would drop them.
    if isinstance(error, KeyError):
        return "required field missing"
    return f"{type(error).__name__}: {error}"


def _describe_structure_error(error: Exception, cls: type[Any]) -> str:
    if isinstance(error, cattrs.BaseValidationError):
        return "; ".join(
            cattrs.transform_error(error, path=cls.__name__, format_exception=_describe_exception)
        )
    return f"{type(error).__name__}: {error}"


class Codec:
    """Encodes events to ``(tag, schema version, payload)`` and back.

    ``event_types`` defaults to every registered event class; upcasters are registered per tag and
    per schema version they upgrade from.
    """

    def __init__(self, event_types: Mapping[str, type[Event]] | None = None) -> None:
        self._types: dict[str, type[Event]] = dict(
            registered_event_types() if event_types is None else event_types
        )
        self._upcasters: dict[tuple[str, int], Upcaster] = {
            (tag, version): upcaster
            for tag, cls in self._types.items()
            for version, upcaster in cls.UPCASTERS.items()
        }
        # Looked up once per class rather than dispatched on every event: encoding is on the
        # hot path of every append.
        self._unstructure = {
            cls: CONVERTER.get_unstructure_hook(cls) for cls in self._types.values()
        }
        self._last_time = (0, micros_to_datetime(0))
        self._structure: dict[type[Event], Structure | None] = {
            cls: fast_structure(cls) for cls in self._types.values()
        }
        self._current: dict[str, tuple[str, int, Structure]] = {
            tag: (cls.TAG, cls.SCHEMA_VERSION, structure)
            for tag, cls in self._types.items()
            if (structure := self._structure[cls]) is not None
        }

    def tag(self, stored: str) -> str:
        """The tag of a registered event type as one shared string (a stored row's is a fresh
        copy, which the projections would otherwise keep once per event); ``stored`` itself
        when no registered type has it."""
        cls = self._types.get(stored)
        return stored if cls is None else cls.TAG

    def time(self, micros: int) -> datetime:
        """The datetime of a stored time; events appended together share it, so the last one is
        kept rather than built again for each."""
        last = self._last_time
        if last[0] == micros:
            return last[1]
        at = micros_to_datetime(micros)
        self._last_time = (micros, at)
        return at

    @property
    def current(self) -> Mapping[str, tuple[str, int, Structure]]:
        """By stored tag, for the types with a generated structuring function: the shared tag,
        the schema version this codec writes, and that function (which returns ``GIVE_UP``
        where ``decode`` must judge). A page of rows is decoded through it without a call
        of ``decode`` per row."""
        return self._current

    @property
    def event_types(self) -> Mapping[str, type[Event]]:
        return dict(self._types)

    def register_upcaster(self, tag: str, from_version: int, upcaster: Upcaster) -> None:
        """Teach the codec to turn a ``from_version`` payload of ``tag`` into the next version."""
        cls = self._types.get(tag)
        if cls is None:
            raise CodecError(f"cannot register an upcaster for unknown event tag {tag!r}")
        if not 1 <= from_version < cls.SCHEMA_VERSION:
            raise CodecError(
                f"an upcaster of {tag!r} must start from a version in 1..{cls.SCHEMA_VERSION - 1},"
                f" not {from_version}"
            )
        if (tag, from_version) in self._upcasters:
            raise CodecError(f"{tag!r} already has an upcaster from version {from_version}")
        self._upcasters[(tag, from_version)] = upcaster

    def encode(self, event: Event) -> tuple[str, int, bytes]:
        """The tag, schema version and msgpack payload of an event."""
        cls = type(event)
        unstructure = self._unstructure.get(cls)
        if unstructure is None:
            raise CodecError(f"{cls.__name__} is not a registered event type of this codec")
        try:
            payload: bytes = msgpack.packb(unstructure(event), use_bin_type=True)
        except CodecError as error:
            raise CodecError(f"cannot encode {cls.TAG!r}: {error}") from error
        except Exception as error:
            raise CodecError(f"cannot encode {cls.TAG!r}: {type(error).__name__}: {error}") from (
                error
            )
        return cls.TAG, cls.SCHEMA_VERSION, payload

    def without_sensitive(self, tag: str, schema_version: int, payload: bytes) -> tuple[int, bytes]:
        """The schema version and payload of the event stored as ``payload`` with the fields
        its type names ``SENSITIVE`` emptied (``without_sensitive``): what retention keeps.

        A payload at its type's schema version is a map this codec wrote, field by field in
        their order (it reads no other): its sensitive fields are emptied in the map itself, and
        nothing else of it changes. An older one is decoded, upcast and encoded again."""
        cls = self._types.get(tag)
        if cls is not None and schema_version == cls.SCHEMA_VERSION:
            emptied = _emptied(payload, cls.SENSITIVE)
            if emptied is not None:
                return schema_version, emptied
        _, version, remains = self.encode(
            without_sensitive(self.decode(tag, schema_version, payload))
        )
        return version, remains

    def decode(self, tag: str, schema_version: int, payload: bytes) -> Event:
        """The event stored as ``payload`` under ``tag`` and ``schema_version``."""
        cls = self._types.get(tag)
        if cls is None:
            raise CodecError(f"unknown event tag {tag!r}: written by a newer or another program?")
        if not 1 <= schema_version <= cls.SCHEMA_VERSION:
            raise CodecError(
                f"{tag!r} payload has schema version {schema_version}; this inert reads versions"
                f" 1..{cls.SCHEMA_VERSION}"
            )
        try:
            fields = msgpack.unpackb(payload, raw=False, strict_map_key=True)
        except Exception as error:
            raise CodecError(
                f"corrupt {tag!r} payload ({len(payload)} bytes): {type(error).__name__}"
            ) from error
        if not isinstance(fields, dict):
            raise CodecError(f"corrupt {tag!r} payload: a map was expected, got {type(fields)}")
        for version in range(schema_version, cls.SCHEMA_VERSION):
            upcaster = self._upcasters.get((tag, version))
            if upcaster is None:
                raise CodecError(
                    f"no upcaster turns {tag!r} version {version} into version {version + 1}"
                )
            try:
                fields = upcaster(fields)
            except Exception as error:
                raise CodecError(
                    f"upcaster of {tag!r} from version {version} failed: {type(error).__name__}"
                ) from error
        fast = self._structure[cls]
        if fast is not None:
            event = fast(fields)
            if event is not GIVE_UP:
                return typing.cast(Event, event)
        try:
            return CONVERTER.structure(fields, cls)
        except Exception as error:
            raise CodecError(
                f"corrupt {tag!r} payload: {_describe_structure_error(error, cls)}"
            ) from error


DEFAULT_CODEC = Codec()


def _emptied(payload: bytes, names: tuple[str, ...]) -> bytes | None:
    """The map ``payload`` with the fields ``names`` (bytes or text, or ``None``) emptied, or
    ``None`` where it is not such a map (the event is then decoded and encoded again)."""
    try:
        fields = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except Exception:
        return None
    if not isinstance(fields, dict):
        return None
    for name in names:
        if name not in fields:
            return None
        value = fields[name]
        if value is None:
            continue
        if type(value) not in (bytes, str):
            return None
        fields[name] = type(value)()
    packed: bytes = msgpack.packb(fields, use_bin_type=True)
    return packed
