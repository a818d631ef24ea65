"""A runtime's state as data: MessagePack of plain values, made back into objects of an explicit
list of types, never into anything the bytes name.

A snapshot row is written by whoever can write the log's storage, and read by every runtime
that opens the log: what it holds must not be able to choose code to run. So the state is
written as MessagePack values (nil, booleans, integers, floats, strings, bytes, arrays, maps)
and extension values of a few kinds this module defines: a tuple, a set, a date, an array of
integers, a reference to a value met before, an event (through the log's own codec), and an
object of one of the classes of a :class:`Shapes` list, by its index there. Loading makes an
object of a listed class without calling it (``object.__new__``), sets the fields its shape
declares and nothing else, and checks each value against the field's declared type; anything
else (an index outside the list, a field too many or missing, a value of another type, a
reference to a value not made yet, nesting past a bound) makes the state unreadable. A class
with its own way of being written (a chain to flatten, an index to rebuild) says so in its
shape, with functions of this package; the bytes only ever pick among the shapes.

An object met a second time is written as a reference to the first, so that what the state
shares (a turn's view, a response's end) is shared again once loaded, as it was.
"""

from __future__ import annotations

import collections
import datetime as dt
import enum
import sys
import typing
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType, NoneType, UnionType
from typing import Any

import attrs
import msgpack

from ..events import Event
from ..events._codec import DEFAULT_CODEC
from ..events._structure import interned, is_identity

MAX_DEPTH = 64
"""Nesting of extension values (objects, tuples, sets...) beyond which a state is unreadable:
the deepest state inert writes nests about a dozen."""

_REF = 0
_TUPLE = 1
_SET = 2
_FROZENSET = 3
_DATETIME = 5
_TIMEDELTA = 6
_PROXY = 7
_ORDERED = 8
_DEQUE = 9
_ARRAY = 10
_EVENT = 11
_OBJECT = 12
_UNSET = 13

_ARRAY_CODES = frozenset("bBhHiIlLqQ")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NAIVE_EPOCH = dt.datetime(1970, 1, 1)
_MICROSECOND = dt.timedelta(microseconds=1)


class StateUnreadable(Exception):
    """Bytes that are not a state of these shapes."""


class StateNotWritable(Exception):
    """A value in the state that no shape or kind of this module writes: a bug of inert."""


Check = Callable[[object], bool] | None
"""Whether a value is of a field's declared type (``None``: any value loading can make)."""


@attrs.frozen
class Shape:
    """How objects of one class are written and made again.

    ``fields`` names the values written, in order, with their declared types. ``dump`` gives
    those values of an object (by default its attributes of those names) and ``load`` sets them
    on an object made without calling its class (by default as attributes); both are
    functions of this package. ``kind`` says how the object is made: ``"object"`` without
    calling its class, ``"identity"`` through the identity tables, ``"tuple"`` a named tuple,
    ``"enum"`` a member by its value.
    """

    cls: type
    fields: tuple[tuple[str, Any], ...]
    kind: str = "object"
    dump: Callable[[Any], Sequence[Any]] | None = None
    load: Callable[[Any, list[Any]], None] | None = None


def object_shape(
    cls: type,
    types: Mapping[str, Any] | None = None,
    *,
    dump: Callable[[Any], Sequence[Any]] | None = None,
    load: Callable[[Any, list[Any]], None] | None = None,
) -> Shape:
    """The shape of a class: an attrs class's fields and their types as declared, or, for any
    other class, the attributes and types given."""
    if types is None:
        if not attrs.has(cls):
            raise TypeError(f"{cls.__qualname__} is no attrs class: name its fields and types")
        hints = typing.get_type_hints(cls)
        types = {field.name: hints[field.name] for field in attrs.fields(cls)}
    kind = "identity" if is_identity(cls) else "object"
    return Shape(cls, tuple(types.items()), kind, dump, load)


def tuple_shape(cls: type) -> Shape:
    """The shape of a named tuple: its fields and their declared types."""
    hints = typing.get_type_hints(cls)
    names: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
    return Shape(cls, tuple((name, hints[name]) for name in names), "tuple")


def enum_shape(cls: type[enum.Enum]) -> Shape:
    """The shape of an enumeration: a member written as its value."""
    return Shape(cls, (), "enum")


class Shapes:
    """The classes a state may hold, each by its index, and their compiled checks."""

    def __init__(self, shapes: Iterable[Shape]) -> None:
        self.shapes = tuple(shapes)
        self.index = {shape.cls: code for code, shape in enumerate(self.shapes)}
        if len(self.index) != len(self.shapes):
            raise ValueError("a class is listed twice")
        self._checks: list[tuple[Check, ...]] = [
            tuple(self.check_of(kind) for _, kind in shape.fields) for shape in self.shapes
        ]
        self.names = [tuple(name for name, _ in shape.fields) for shape in self.shapes]
        # MessagePack writes a bytearray as bytes: a field declared one is made one again.
        self._mutable_bytes = [
            tuple(at for at, (_, kind) in enumerate(shape.fields) if kind is bytearray)
            for shape in self.shapes
        ]

    def describe(self) -> str:
        """Every class and field with its declared type: part of a snapshot's stamp."""
        return "\n".join(
            f"{shape.kind} {shape.cls.__module__}.{shape.cls.__qualname__}"
            + "".join(f" {name}:{kind}" for name, kind in shape.fields)
            for shape in self.shapes
        )

    # --- checks ---

    def check_of(self, kind: Any) -> Check:
        """The check of a declared type (``None`` for one any value passes)."""
        if kind is Any or kind is object:
            return None
        if isinstance(kind, typing.TypeVar):
            return None if kind.__bound__ is None else self.check_of(kind.__bound__)
        if kind is None or kind is NoneType:
            return _is_none
        if kind is float:
            return _is_number
        origin = typing.get_origin(kind)
        if origin is None:
            if isinstance(kind, type):
                return _instance_of(kind)
            raise TypeError(f"no check of {kind!r}")
        arguments = typing.get_args(kind)
        if origin is typing.Union or origin is UnionType:
            return _any_of([self.check_of(argument) for argument in arguments])
        if origin is typing.Literal:
            allowed = frozenset(arguments)
            return lambda value: type(value) in (str, int, bool) and value in allowed
        if origin is tuple:
            if arguments in (((),), ()):
                return lambda value: value == () and type(value) is tuple
            if len(arguments) == 2 and arguments[1] is Ellipsis:
                return _items_of(tuple, self.check_of(arguments[0]))
            return _fixed_tuple([self.check_of(argument) for argument in arguments])
        if origin in (list, set, frozenset, collections.deque):
            return _items_of(origin, self.check_of(arguments[0]))
        if origin in (collections.abc.Sequence, collections.abc.Iterable):
            return _items_of((list, tuple), self.check_of(arguments[0]))
        if origin in (dict, collections.OrderedDict, collections.abc.Mapping):
            container = (dict, MappingProxyType) if origin is collections.abc.Mapping else origin
            return _entries_of(container, self.check_of(arguments[0]), self.check_of(arguments[1]))
        if origin is array:
            return _instance_of(array)
        if isinstance(origin, type):
            return _instance_of(origin)
        raise TypeError(f"no check of {kind!r}")

    def check_fields(self, code: int, values: list[Any]) -> None:
        """Check an object's values against its fields' types (a field declared a bytearray
        takes its bytes as one)."""
        for at in self._mutable_bytes[code]:
            if type(values[at]) is bytes:
                values[at] = bytearray(values[at])
        for check, value, name in zip(self._checks[code], values, self.names[code], strict=True):
            if check is not None and value is not _UNSET_VALUE and not check(value):
                shape = self.shapes[code]
                raise StateUnreadable(
                    f"a {shape.cls.__qualname__}'s {name} is a {type(value).__name__}, not"
                    f" {_type_name(dict(shape.fields)[name])}"
                )


def _type_name(kind: Any) -> str:
    return getattr(kind, "__qualname__", None) or str(kind)


def _is_none(value: object) -> bool:
    return value is None


def _is_number(value: object) -> bool:
    return type(value) is float or type(value) is int


def _instance_of(cls: type) -> Callable[[object], bool]:
    if cls in (int, str, bytes, bool):
        return lambda value: type(value) is cls or (cls is int and type(value) is bool)
    return lambda value: isinstance(value, cls)


def _any_of(checks: list[Check]) -> Check:
    if any(check is None for check in checks):
        return None
    actual = [check for check in checks if check is not None]
    if len(actual) == 2:
        first, second = actual
        return lambda value: first(value) or second(value)
    return lambda value: any(check(value) for check in actual)


def _items_of(container: type | tuple[type, ...], item: Check) -> Callable[[object], bool]:
    if item is None:
        return lambda value: isinstance(value, container)
    return lambda value: isinstance(value, container) and all(map(item, value))  # type: ignore[call-overload]


def _fixed_tuple(items: list[Check]) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        return (
            type(value) is tuple
            and len(value) == len(items)
            and all(each is None or each(part) for each, part in zip(items, value, strict=True))
        )

    return check


def _entries_of(container: Any, key: Check, item: Check) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        if not isinstance(value, container):
            return False
        if key is not None and not all(map(key, value)):
            return False
        return item is None or all(map(item, value.values()))

    return check


class _Unset:
    """A slot an object had not set: left unset when loaded."""

    __slots__ = ()


_UNSET_VALUE: Any = _Unset()
_UNSET_EXTENSION = msgpack.ExtType(_UNSET, b"")


# --- writing ---------------------------------------------------------------------------------


class Writer:
    """Writes values as MessagePack, objects by the shapes; one state at a time."""

    def __init__(self, shapes: Shapes) -> None:
        self._shapes = shapes
        self._memo: dict[int, int] = {}
        self._kept: list[object] = []
        self._packers: list[msgpack.Packer] = []
        self._depth = 0

    def __call__(self, value: object) -> bytes:
        """The bytes of one value, sharing what it shares; nothing kept afterwards."""
        try:
            return self._pack(value)
        finally:
            self._memo.clear()
            self._kept.clear()

    def _pack(self, value: object) -> bytes:
        depth = self._depth
        if depth == len(self._packers):
            self._packers.append(
                msgpack.Packer(default=self._extension, strict_types=True, use_bin_type=True)
            )
        self._depth = depth + 1
        try:
            packed: bytes = self._packers[depth].pack(value)
        finally:
            self._depth = depth
        return packed

    def _extension(self, value: object) -> msgpack.ExtType:
        if value is _UNSET_VALUE:
            return _UNSET_EXTENSION
        memo = self._memo
        known = memo.get(id(value))
        if known is not None:
            return msgpack.ExtType(_REF, _int_bytes(known))
        memo[id(value)] = len(memo)
        # Held until the state is written, so that no id is taken by another object meanwhile.
        self._kept.append(value)
        code, data = self._encode(value)
        return msgpack.ExtType(code, data)

    def _encode(self, value: Any) -> tuple[int, bytes]:
        cls = type(value)
        code = self._shapes.index.get(cls)
        if code is not None:
            return _OBJECT, self._pack([code, *self._fields(code, value)])
        if cls is tuple:
            return _TUPLE, self._pack(list(value))
        if cls is set or cls is frozenset:
            return (_SET if cls is set else _FROZENSET), self._pack(list(value))
        if cls is dt.datetime:
            return _DATETIME, self._pack(_datetime_values(value))
        if cls is dt.timedelta:
            return _TIMEDELTA, self._pack([value.days, value.seconds, value.microseconds])
        if cls is MappingProxyType:
            return _PROXY, self._pack(dict(value))
        if cls is collections.OrderedDict:
            return _ORDERED, self._pack(dict(value))
        if cls is collections.deque:
            return _DEQUE, self._pack([value.maxlen, list(value)])
        if cls is array:
            return _ARRAY, self._pack(_array_values(value))
        if isinstance(value, Event) and cls in DEFAULT_CODEC.event_types.values():
            return _EVENT, self._pack(list(DEFAULT_CODEC.encode(value)))
        raise StateNotWritable(f"a {cls.__module__}.{cls.__qualname__} is no state of a snapshot")

    def _fields(self, code: int, value: object) -> Sequence[Any]:
        shape = self._shapes.shapes[code]
        if shape.kind == "enum":
            return (value.value,)  # type: ignore[attr-defined]
        if shape.kind == "tuple":
            return value  # type: ignore[return-value]
        if shape.dump is not None:
            return shape.dump(value)
        names = self._shapes.names[code]
        attributes = getattr(value, "__dict__", None)
        if attributes is not None and attributes.keys() != set(names):
            raise StateNotWritable(
                f"a {type(value).__qualname__} has attributes {sorted(attributes)}, and its"
                f" shape names {sorted(names)}"
            )
        return [getattr(value, name, _UNSET_VALUE) for name in names]


def _int_bytes(number: int) -> bytes:
    return number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")


def _datetime_values(value: dt.datetime) -> list[int | None]:
    zone = value.tzinfo
    if zone is None:
        return [(value - _NAIVE_EPOCH) // _MICROSECOND, None]
    if type(zone) is not dt.timezone:
        raise StateNotWritable(f"a time in the zone {zone!r}, which no snapshot writes")
    offset = value.utcoffset()
    assert offset is not None
    return [(value - _EPOCH) // _MICROSECOND, offset // _MICROSECOND]


def _array_values(value: array[Any]) -> list[object]:
    if value.typecode not in _ARRAY_CODES:
        raise StateNotWritable(f"an array of {value.typecode!r}, which no snapshot writes")
    copy = array(value.typecode, value)
    if sys.byteorder == "big":
        copy.byteswap()
    return [value.typecode, copy.tobytes()]


# --- reading ---------------------------------------------------------------------------------


class Reader:
    """Makes values of the bytes a ``Writer`` of the same shapes wrote; one state at a time."""

    def __init__(self, shapes: Shapes) -> None:
        self._shapes = shapes
        self._made: list[Any] = []
        self._depth = 0

    def __call__(self, data: bytes | memoryview) -> Any:
        """The value of the bytes; ``StateUnreadable`` if they are not one of these shapes."""
        try:
            return self._unpack(data)
        except StateUnreadable:
            raise
        except RecursionError:
            raise StateUnreadable("it nests too deep") from None
        except Exception as error:
            raise StateUnreadable(f"{type(error).__name__}: {error}") from None
        finally:
            self._made.clear()
            self._depth = 0

    def _unpack(self, data: bytes | memoryview) -> Any:
        return msgpack.unpackb(
            data,
            ext_hook=self._extension,
            raw=False,
            strict_map_key=False,
            use_list=True,
        )

    def _extension(self, code: int, data: bytes) -> Any:
        if code == _UNSET:
            return _UNSET_VALUE
        if code == _REF:
            index = int.from_bytes(data, "big")
            made = self._made
            if not data or index >= len(made) or made[index] is _PENDING:
                raise StateUnreadable("a reference to a value not made before it")
            return made[index]
        if self._depth >= MAX_DEPTH:
            raise StateUnreadable(f"it nests deeper than {MAX_DEPTH}")
        at = len(self._made)
        self._made.append(_PENDING)
        self._depth += 1
        try:
            value = self._decode(code, data)
        finally:
            self._depth -= 1
        self._made[at] = value
        return value

    def _list(self, data: bytes) -> list[Any]:
        values = self._unpack(data)
        if type(values) is not list:
            raise StateUnreadable(f"an array was expected, not a {type(values).__name__}")
        return values

    def _decode(self, code: int, data: bytes) -> Any:
        if code == _OBJECT:
            return self._object(self._list(data))
        if code == _TUPLE:
            return tuple(self._list(data))
        if code == _SET:
            return set(self._list(data))
        if code == _FROZENSET:
            return frozenset(self._list(data))
        if code == _DATETIME:
            return _datetime(self._list(data))
        if code == _TIMEDELTA:
            days, seconds, micros = _integers(self._list(data), 3)
            return dt.timedelta(days=days, seconds=seconds, microseconds=micros)
        if code == _PROXY:
            return MappingProxyType(self._mapping(self._unpack(data)))
        if code == _ORDERED:
            return collections.OrderedDict(self._mapping(self._unpack(data)))
        if code == _DEQUE:
            maxlen, items = _pair(self._list(data))
            if (maxlen is not None and type(maxlen) is not int) or type(items) is not list:
                raise StateUnreadable("a queue that is not a bound and its items")
            return collections.deque(items, maxlen)
        if code == _ARRAY:
            return _array(self._list(data))
        if code == _EVENT:
            tag, version, payload = _triple(self._list(data))
            if type(tag) is not str or type(version) is not int or type(payload) is not bytes:
                raise StateUnreadable("an event that is not a tag, a version and a payload")
            return DEFAULT_CODEC.decode(tag, version, payload)
        raise StateUnreadable(f"a value of kind {code}, which no snapshot writes")

    def _mapping(self, value: Any) -> dict[Any, Any]:
        if type(value) is not dict:
            raise StateUnreadable(f"a map was expected, not a {type(value).__name__}")
        return value

    def _object(self, values: list[Any]) -> Any:
        if not values or type(values[0]) is not int:
            raise StateUnreadable("an object without its class")
        code = values[0]
        shapes = self._shapes
        if not 0 <= code < len(shapes.shapes):
            raise StateUnreadable(f"an object of class {code}, which no snapshot holds")
        shape = shapes.shapes[code]
        cls = shape.cls
        fields = values[1:]
        if shape.kind == "enum":
            if len(fields) != 1:
                raise StateUnreadable(f"a {cls.__qualname__} that is not one value")
            member = cls._value2member_map_.get(fields[0])  # type: ignore[attr-defined]
            if member is None:
                raise StateUnreadable(f"no {cls.__qualname__} of that value")
            return member
        if len(fields) != len(shape.fields):
            raise StateUnreadable(
                f"a {cls.__qualname__} of {len(fields)} fields, not {len(shape.fields)}"
            )
        shapes.check_fields(code, fields)
        if shape.kind == "tuple":
            return tuple.__new__(cls, fields)
        if shape.kind == "identity":
            if _UNSET_VALUE in fields:
                raise StateUnreadable(f"a {cls.__qualname__} without all its fields")
            names = [name for name, _ in shape.fields]
            return interned(
                cls, tuple(fields), lambda: cls(**dict(zip(names, fields, strict=True)))
            )
        made: Any = object.__new__(cls)
        if shape.load is not None:
            shape.load(made, fields)
        else:
            setter = object.__setattr__
            for (name, _), value in zip(shape.fields, fields, strict=True):
                if value is not _UNSET_VALUE:
                    setter(made, name, value)
        return made


class _Pending:
    """A value being made: a reference to it is a reference forward, which no writer makes."""

    __slots__ = ()


_PENDING: Any = _Pending()


def _integers(values: list[Any], count: int) -> list[int]:
    if len(values) != count or any(type(value) is not int for value in values):
        raise StateUnreadable(f"{count} integers were expected")
    return values


def _pair(values: list[Any]) -> tuple[Any, Any]:
    if len(values) != 2:
        raise StateUnreadable("a pair was expected")
    return values[0], values[1]


def _triple(values: list[Any]) -> tuple[Any, Any, Any]:
    if len(values) != 3:
        raise StateUnreadable("three values were expected")
    return values[0], values[1], values[2]


def _datetime(values: list[Any]) -> dt.datetime:
    micros, offset = _pair(values)
    if type(micros) is not int or (offset is not None and type(offset) is not int):
        raise StateUnreadable("a time that is not microseconds and an offset")
    if offset is None:
        return _NAIVE_EPOCH + dt.timedelta(microseconds=micros)
    zone = dt.timezone(dt.timedelta(microseconds=offset))
    return (_EPOCH + dt.timedelta(microseconds=micros)).astimezone(zone)


def _array(values: list[Any]) -> array[Any]:
    typecode, data = _pair(values)
    if typecode not in _ARRAY_CODES or type(data) is not bytes:
        raise StateUnreadable("an array that is not a type code and its bytes")
    made = array(typecode)
    if len(data) % made.itemsize:
        raise StateUnreadable("an array whose bytes are not whole items")
    made.frombytes(data)
    if sys.byteorder == "big":
        made.byteswap()
    return made
