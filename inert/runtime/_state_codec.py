"""A runtime's state as data: MessagePack of plain values, made back into objects of an explicit
list of types, never into anything the bytes name.

A snapshot row is written by whoever can write the log's storage, and read by every runtime
that opens the log: what it holds must not be able to choose code to run. So the state is
written as MessagePack values (nil, booleans, integers, floats, strings, bytes, arrays, maps)
and a few extension values this module defines. A value of a kind MessagePack has no type for
(a tuple, a set, a read-only or ordered map, a queue, an event, an object of one of the classes
of a ``Shapes`` list) is written as an array whose first item is a marker
naming the kind (for an object, the class's index in the list), then its items or fields; a time,
a duration and an array of integers are extension values of their own. Loading reads the whole
state in one pass of MessagePack's reader, which hands each such array, once read, to the
builder of its kind: an object is made by its shape's builder (see ``_state_shapes``), which
checks each field against its declared type. Anything else (an index outside the list, a marker
anywhere but first in an array, a value of another type, a reference to a value not made yet,
nesting past a bound) makes the state unreadable.

An object met a second time is written as a reference to the first, so that what the state
shares (a turn's view, a response's end) is shared again once loaded, as it was. References
count values in the order their writing starts, which is the order their reading starts.
"""

from __future__ import annotations

import collections
import datetime as dt
import sys
from array import array
from collections.abc import Callable
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import msgpack

from ..events._codec import DEFAULT_CODEC
from ._state_shapes import UNSET, Shape, Shapes, StateNotWritable, StateUnreadable

MAX_DEPTH = 64
"""Nesting of marked values (objects, tuples, sets...) beyond which a state is unreadable: the
deepest state inert writes nests about a dozen."""

# Extension types.
_START = 1
_REF = 2
_DATETIME = 3
_TIMEDELTA = 4
_ARRAY = 5
_UNSET = 6

# Kinds of marked arrays; an object's marker is its class's index after these.
_TUPLE = 0
_SET = 1
_FROZENSET = 2
_PROXY = 3
_ORDERED = 4
_DEQUE = 5
_EVENT = 6
_OBJECTS = 8

_ARRAY_CODES = frozenset("bBhHiIlLqQ")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NAIVE_EPOCH = dt.datetime(1970, 1, 1)
_MICROSECOND = dt.timedelta(microseconds=1)
_UNSET_EXTENSION = msgpack.ExtType(_UNSET, b"")


def _marker(kind: int) -> msgpack.ExtType:
    return msgpack.ExtType(_START, kind.to_bytes(2, "big"))


# --- writing ---------------------------------------------------------------------------------


class Writer:
    """Writes values as MessagePack, objects by the shapes; one state at a time."""

    def __init__(self, shapes: Shapes) -> None:
        self._shapes = shapes
        markers = [_marker(kind) for kind in range(_OBJECTS + len(shapes.shapes))]
        self._writers: dict[type, Callable[[Any], object]] = {
            tuple: lambda value: [markers[_TUPLE], *value],
            set: lambda value: [markers[_SET], *value],
            frozenset: lambda value: [markers[_FROZENSET], *value],
            MappingProxyType: lambda value: [markers[_PROXY], dict(value)],
            collections.OrderedDict: lambda value: [markers[_ORDERED], dict(value)],
            collections.deque: lambda value: [markers[_DEQUE], value.maxlen, list(value)],
            dt.datetime: lambda value: msgpack.ExtType(
                _DATETIME, msgpack.packb(_datetime_values(value))
            ),
            dt.timedelta: lambda value: msgpack.ExtType(
                _TIMEDELTA, msgpack.packb([value.days, value.seconds, value.microseconds])
            ),
            array: lambda value: msgpack.ExtType(_ARRAY, _array_bytes(value)),
            **dict.fromkeys(DEFAULT_CODEC.event_types.values(), _event_writer(markers[_EVENT])),
            **{
                shape.cls: _object_writer(shape, markers[_OBJECTS + code], shapes.attributes[code])
                for code, shape in enumerate(shapes.shapes)
            },
        }
        self._memo: dict[int, int] = {}
        # The reference to each value met again, made once: most are met many times.
        self._references: dict[int, msgpack.ExtType] = {}
        self._kept: list[object] = []
        self._packer = msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True)

    def __call__(self, value: object) -> bytes:
        """The bytes of one value, sharing what it shares; nothing kept afterwards."""
        try:
            packed: bytes = self._packer.pack(value)
            return packed
        finally:
            self._memo.clear()
            self._references.clear()
            self._kept.clear()
            self._packer.reset()

    def _default(self, value: Any) -> object:
        reference = self._references.get(id(value))
        if reference is not None:
            return reference
        memo = self._memo
        known = memo.get(id(value))
        if known is not None:
            reference = self._references[id(value)] = msgpack.ExtType(
                _REF, known.to_bytes(4, "big")
            )
            return reference
        if value is UNSET:
            return _UNSET_EXTENSION
        writer = self._writers.get(type(value))
        if writer is None:
            cls = type(value)
            raise StateNotWritable(
                f"a {cls.__module__}.{cls.__qualname__} is no state of a snapshot"
            )
        memo[id(value)] = len(memo)
        # Held until the state is written, so that no id is taken by another object meanwhile.
        self._kept.append(value)
        return writer(value)


def _event_writer(marker: msgpack.ExtType) -> Callable[[Any], object]:
    return lambda event: [marker, *DEFAULT_CODEC.encode(event)]


def _object_writer(
    shape: Shape, marker: msgpack.ExtType, attributes: frozenset[str] | None
) -> Callable[[Any], object]:
    """Writes an object of a shape: its marker, then its fields."""
    if shape.kind == "enum":
        return lambda member: [marker, member.value]
    if shape.kind == "tuple":
        return lambda value: [marker, *value]
    dump = shape.dump
    if dump is not None:
        return lambda value: [marker, *dump(value)]
    names = tuple(name for name, _ in shape.fields)
    fields = attrgetter(*names) if len(names) > 1 else None

    def write(value: Any) -> object:
        if attributes is not None and value.__dict__.keys() != attributes:
            raise StateNotWritable(
                f"a {type(value).__qualname__} has attributes {sorted(value.__dict__)}, and its"
                f" shape names {sorted(names)}"
            )
        if fields is not None:
            try:
                return [marker, *fields(value)]
            except AttributeError:
                pass
        # A slot not set is written as such.
        return [marker, *(getattr(value, name, UNSET) for name in names)]

    return write


def _datetime_values(value: dt.datetime) -> list[int | None]:
    zone = value.tzinfo
    if zone is None:
        return [(value - _NAIVE_EPOCH) // _MICROSECOND, None]
    if type(zone) is not dt.timezone:
        raise StateNotWritable(f"a time in the zone {zone!r}, which no snapshot writes")
    offset = value.utcoffset()
    assert offset is not None
    return [(value - _EPOCH) // _MICROSECOND, offset // _MICROSECOND]


def _array_bytes(value: array[Any]) -> bytes:
    if value.typecode not in _ARRAY_CODES:
        raise StateNotWritable(f"an array of {value.typecode!r}, which no snapshot writes")
    copy = array(value.typecode, value)
    if sys.byteorder == "big":
        copy.byteswap()
    return value.typecode.encode() + copy.tobytes()


# --- reading ---------------------------------------------------------------------------------


class _Start:
    """The marker of an array being read, one per kind: what its builder is."""

    __slots__ = ("kind",)

    def __init__(self, kind: int) -> None:
        self.kind = kind


class Reader:
    """Makes values of the bytes a ``Writer`` of the same shapes wrote; one state at a time."""

    def __init__(self, shapes: Shapes) -> None:
        self._shapes = shapes
        self._builders = shapes.builders
        self._starts = {
            kind.to_bytes(2, "big"): _Start(kind) for kind in range(_OBJECTS + len(shapes.shapes))
        }
        self._made: list[Any] = []
        # The reference numbers of the marked arrays being read, innermost last: arrays end in
        # the reverse order they begin.
        self._open: list[int] = []

    def __call__(self, data: bytes | memoryview) -> Any:
        """The value of the bytes; ``StateUnreadable`` if they are not one of these shapes."""
        try:
            value = msgpack.unpackb(
                data,
                ext_hook=self._extension,
                list_hook=self._array,
                raw=False,
                strict_map_key=False,
                use_list=True,
            )
            if self._open:
                raise StateUnreadable("a marker that begins no array")
        except StateUnreadable:
            raise
        except RecursionError:
            raise StateUnreadable("it nests too deep") from None
        except Exception as error:
            raise StateUnreadable(f"{type(error).__name__}: {error}") from None
        else:
            return value
        finally:
            self._made.clear()
            self._open.clear()

    def _extension(self, code: int, data: bytes) -> Any:
        made = self._made
        if code == _REF:
            index = int.from_bytes(data, "big")
            if index >= len(made) or made[index] is _PENDING or len(data) != 4:
                raise StateUnreadable("a reference to a value not made before it")
            return made[index]
        if code == _START:
            start = self._starts.get(data)
            if start is None:
                raise StateUnreadable("a marker of no kind a snapshot writes")
            if len(self._open) >= MAX_DEPTH:
                raise StateUnreadable(f"it nests deeper than {MAX_DEPTH}")
            self._open.append(len(made))
            made.append(_PENDING)
            return start
        if code == _UNSET:
            return UNSET
        value = _plain_extension(code, data)
        made.append(value)
        return value

    def _array(self, values: list[Any]) -> Any:
        if not values:
            return values
        start = values[0]
        if type(start) is not _Start:
            return values
        index = self._open.pop()
        kind = start.kind
        value = (
            self._builders[kind - _OBJECTS](values)
            if kind >= _OBJECTS
            else _container(kind, values)
        )
        self._made[index] = value
        return value


class _Pending:
    """A value being made: a reference to it is a reference forward, which no writer makes."""

    __slots__ = ()


_PENDING: Any = _Pending()


def _container(kind: int, values: list[Any]) -> Any:
    if kind == _TUPLE:
        return tuple(values[1:])
    if kind == _SET:
        return set(values[1:])
    if kind == _FROZENSET:
        return frozenset(values[1:])
    if kind in (_PROXY, _ORDERED):
        if len(values) != 2 or type(values[1]) is not dict:
            raise StateUnreadable("a map of a kind that holds no map")
        return MappingProxyType(values[1]) if kind == _PROXY else collections.OrderedDict(values[1])
    if kind == _DEQUE:
        if len(values) != 3:
            raise StateUnreadable("a queue that is not a bound and its items")
        _, maxlen, items = values
        if (maxlen is not None and type(maxlen) is not int) or type(items) is not list:
            raise StateUnreadable("a queue that is not a bound and its items")
        return collections.deque(items, maxlen)
    if kind == _EVENT:
        if len(values) != 4:
            raise StateUnreadable("an event that is not a tag, a version and a payload")
        _, tag, version, payload = values
        if type(tag) is not str or type(version) is not int or type(payload) is not bytes:
            raise StateUnreadable("an event that is not a tag, a version and a payload")
        return DEFAULT_CODEC.decode(tag, version, payload)
    raise StateUnreadable(f"a value of kind {kind}, which no snapshot writes")


def _plain_extension(code: int, data: bytes) -> Any:
    if code == _DATETIME:
        micros, offset = _pair(msgpack.unpackb(data))
        if type(micros) is not int or (offset is not None and type(offset) is not int):
            raise StateUnreadable("a time that is not microseconds and an offset")
        if offset is None:
            return _NAIVE_EPOCH + dt.timedelta(microseconds=micros)
        zone = dt.timezone(dt.timedelta(microseconds=offset))
        return (_EPOCH + dt.timedelta(microseconds=micros)).astimezone(zone)
    if code == _TIMEDELTA:
        values = msgpack.unpackb(data)
        if type(values) is not list or len(values) != 3 or any(type(v) is not int for v in values):
            raise StateUnreadable("a duration that is not 3 integers")
        return dt.timedelta(days=values[0], seconds=values[1], microseconds=values[2])
    if code == _ARRAY:
        typecode = chr(data[0]) if data else ""
        if typecode not in _ARRAY_CODES:
            raise StateUnreadable("an array that is not a type code and its bytes")
        made = array(typecode)
        if (len(data) - 1) % made.itemsize:
            raise StateUnreadable("an array whose bytes are not whole items")
        made.frombytes(data[1:])
        if sys.byteorder == "big":
            made.byteswap()
        return made
    raise StateUnreadable(f"a value of kind {code}, which no snapshot writes")


def _pair(values: object) -> tuple[Any, Any]:
    if type(values) is not list or len(values) != 2:
        raise StateUnreadable("a pair was expected")
    return values[0], values[1]
