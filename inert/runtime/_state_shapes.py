"""The shapes of a state's objects: for each class a snapshot may hold, its fields, their
declared types, and the one function that makes an object of it from checked values.

A shape's builder is written once per class as plain code (as the events' fast structuring
is): it checks the number of values, checks each against its field's declared type (simple
types inline, containers through a compiled check), makes the object without calling its class
(``object.__new__``) and sets the declared fields and nothing else. Identities are made through
the identity tables, named tuples as tuples, enumeration members by their value. The bytes of a
snapshot only ever choose among these builders, by the class's index in the list.
"""

from __future__ import annotations

import collections
import enum
import itertools
import typing
from array import array
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType, NoneType, UnionType
from typing import Any

import attrs

from ..events._structure import interned, is_identity


class StateUnreadable(Exception):
    """Bytes that are not a state of these shapes."""


class StateNotWritable(Exception):
    """A value in the state that no shape or kind of this module writes: a bug of inert."""


Check = Callable[[object], bool] | None
"""Whether a value is of a field's declared type (``None``: any value loading can make)."""

Build = Callable[[list[Any]], Any]
"""Makes an object of a shape from its written values (its marker first, then its fields)."""


class _Unset:
    """A slot an object had not set: left unset when loaded."""

    __slots__ = ()


UNSET: Any = _Unset()


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
    dump: Callable[[Any], list[Any]] | None = None
    load: Callable[[Any, list[Any]], None] | None = None


def object_shape(
    cls: type,
    types: Mapping[str, Any] | None = None,
    *,
    dump: Callable[[Any], list[Any]] | None = None,
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
    """The classes a state may hold, each by its index, with their builders."""

    def __init__(self, shapes: Iterable[Shape], *, extra_types: Iterable[type] = ()) -> None:
        """``extra_types``: the classes a state holds beside the shapes' (events, which the
        log's codec makes)."""
        self.shapes = tuple(shapes)
        self.index = {shape.cls: code for code, shape in enumerate(self.shapes)}
        if len(self.index) != len(self.shapes):
            raise ValueError("a class is listed twice")
        self.names = [tuple(name for name, _ in shape.fields) for shape in self.shapes]
        # Whether an object of the class has attributes rather than slots: those are checked
        # to be exactly the ones named when it is written.
        self.attributes = [
            frozenset(names) if shape.cls.__dictoffset__ else None
            for shape, names in zip(self.shapes, self.names, strict=True)
        ]
        self._universe = frozenset(
            {
                NoneType,
                bool,
                int,
                float,
                str,
                bytes,
                bytearray,
                datetime,
                timedelta,
                array,
                *_CONTAINERS,
                *(shape.cls for shape in self.shapes),
                *extra_types,
            }
        )
        self.builders: tuple[Build, ...] = tuple(
            _builder(shape, self.check_of, self.types_of) for shape in self.shapes
        )

    def describe(self) -> str:
        """Every class and field with its declared type: part of a snapshot's stamp."""
        return "\n".join(
            f"{shape.kind} {shape.cls.__module__}.{shape.cls.__qualname__}"
            + "".join(f" {name}:{kind}" for name, kind in shape.fields)
            for shape in self.shapes
        )

    def types_of(self, kind: Any) -> frozenset[type] | None:
        """The types a value of a declared type may be, of all a state's values can be: its
        check is then a lookup of the value's type (``None`` where it takes more, or where any
        value passes)."""
        if kind is None or kind is NoneType:
            return frozenset({NoneType})
        if kind is float:
            return frozenset({float, int, bool})
        if kind is Any or kind is object or isinstance(kind, typing.TypeVar):
            return None
        origin = typing.get_origin(kind)
        if origin is None and isinstance(kind, type):
            if kind in _CONTAINERS:
                return None
            return frozenset(each for each in self._universe if issubclass(each, kind))
        if origin is typing.Union or origin is UnionType:
            parts = [self.types_of(argument) for argument in typing.get_args(kind)]
            if all(part is not None for part in parts):
                return frozenset().union(*(part for part in parts if part is not None))
        return None

    def check_of(self, kind: Any) -> Check:
        """The check of a declared type (``None`` for one any value passes)."""
        if kind is Any or kind is object:
            return None
        if isinstance(kind, typing.TypeVar):
            return None if kind.__bound__ is None else self.check_of(kind.__bound__)
        types = self.types_of(kind)
        if types is not None:
            return lambda value: type(value) in types
        origin = typing.get_origin(kind)
        if origin is None:
            if isinstance(kind, type):
                return lambda value: isinstance(value, kind)
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
                return self._items_of(tuple, arguments[0])
            return self._fixed_tuple(arguments)
        if origin in (list, set, frozenset, collections.deque):
            return self._items_of(origin, arguments[0])
        if origin in (collections.abc.Sequence, collections.abc.Iterable):
            return self._items_of((list, tuple), arguments[0])
        if origin in (dict, collections.OrderedDict, collections.abc.Mapping):
            container = (dict, MappingProxyType) if origin is collections.abc.Mapping else origin
            return self._entries_of(container, arguments[0], arguments[1])
        if isinstance(origin, type):
            return lambda value: isinstance(value, origin)
        raise TypeError(f"no check of {kind!r}")

    def _fixed_tuple(self, items: tuple[Any, ...]) -> Check:
        kinds = [self.types_of(item) for item in items]
        if all(kind is not None for kind in kinds):
            combinations = 1
            for kind in kinds:
                combinations *= len(kind or ())
            if combinations <= _MOST_COMBINATIONS:
                # The types of the items, looked up at once.
                allowed = frozenset(itertools.product(*(kind or () for kind in kinds)))
                return lambda value: type(value) is tuple and tuple(map(type, value)) in allowed
        return _fixed_tuple([self.check_of(item) for item in items])

    def _items_of(self, container: type | tuple[type, ...], item: Any) -> Check:
        types = self.types_of(item)
        if types is not None:
            # Every item's type looked up at once, in C: a state's containers are large.
            return lambda value: (
                isinstance(value, container)
                and types.issuperset(
                    map(type, value)  # type: ignore[call-overload]
                )
            )
        check = self.check_of(item)
        if check is None:
            return lambda value: isinstance(value, container)
        return lambda value: isinstance(value, container) and all(map(check, value))  # type: ignore[call-overload]

    def _entries_of(self, container: Any, key: Any, item: Any) -> Check:
        keys = self._items_of(object, key)
        values = self._items_of(object, item)

        def check(value: Any) -> bool:
            return (
                isinstance(value, container)
                and (keys is None or keys(value))
                and (values is None or values(value.values()))
            )

        return check


_MOST_COMBINATIONS = 4096

_CONTAINERS = frozenset(
    {
        list,
        dict,
        tuple,
        set,
        frozenset,
        collections.OrderedDict,
        collections.deque,
        MappingProxyType,
    }
)


def _is_none(value: object) -> bool:
    return value is None


def _any_of(checks: list[Check]) -> Check:
    if any(check is None for check in checks):
        return None
    actual = [check for check in checks if check is not None]
    if len(actual) == 2:
        first, second = actual
        return lambda value: first(value) or second(value)
    return lambda value: any(check(value) for check in actual)


def _fixed_tuple(items: list[Check]) -> Callable[[object], bool]:
    def check(value: object) -> bool:
        return (
            type(value) is tuple
            and len(value) == len(items)
            and all(each is None or each(part) for each, part in zip(items, value, strict=True))
        )

    return check


# --- builders ----------------------------------------------------------------------------------


def _builder(
    shape: Shape,
    check_of: Callable[[Any], Check],
    types_of: Callable[[Any], frozenset[type] | None],
) -> Build:
    """The function that makes an object of ``shape`` from its written values."""
    cls = shape.cls
    if shape.kind == "enum":
        members = cls._value2member_map_  # type: ignore[attr-defined]

        def build_member(values: list[Any]) -> Any:
            if len(values) != 2:
                raise StateUnreadable(f"a {cls.__qualname__} that is not one value")
            member = members.get(values[1])
            if member is None:
                raise StateUnreadable(f"no {cls.__qualname__} of that value")
            return member

        return build_member
    names: dict[str, object] = {
        "_cls": cls,
        "_new": object.__new__,
        "_set": object.__setattr__,
        "_tuple_new": tuple.__new__,
        "_unset": UNSET,
        "_bad": _bad_value(shape),
        "_wrong": _wrong_count(shape),
        "_interned": interned,
        "_load": shape.load,
        "_bytearray": bytearray,
    }
    count = len(shape.fields)
    values = [f"v{at}" for at in range(count)]
    lines = [
        "def build(values):",
        f"    if len(values) != {count + 1}:",
        "        raise _wrong(values)",
    ]
    if count:
        lines.append(f"    _, {', '.join(values)}{',' if count == 1 else ''} = values")
    for at, (_, kind) in enumerate(shape.fields):
        value = values[at]
        if kind is bytearray:
            # MessagePack writes a bytearray as bytes: a field declared one is made one again.
            lines.append(f"    if type({value}) is bytes: {value} = _bytearray({value})")
        types = types_of(kind)
        if types is not None:
            names[f"_types_{at}"] = types
            expression = f"type({{v}}) in _types_{at}"
        else:
            check = check_of(kind)
            if check is None:
                continue
            names[f"_check_{at}"] = check
            expression = f"_check_{at}({{v}})"
        unset = "" if shape.kind in ("identity", "tuple") else f"{value} is _unset or "
        lines.append(f"    if not ({unset}{expression.format(v=value)}):")
        lines.append(f"        raise _bad({at}, {value})")
    lines.extend(_make(shape, values))
    namespace: dict[str, Any] = {}
    exec(compile("\n".join(lines), f"<build {cls.__qualname__}>", "exec"), names, namespace)
    build: Build = namespace["build"]
    return build


def _make(shape: Shape, values: list[str]) -> list[str]:
    fields = [name for name, _ in shape.fields]
    if shape.kind == "tuple":
        return [f"    return _tuple_new(_cls, ({', '.join(values)}{',' if values else ''}))"]
    if shape.kind == "identity":
        arguments = ", ".join(f"{name}={value}" for name, value in zip(fields, values, strict=True))
        return [
            f"    return _interned(_cls, ({', '.join(values)},), lambda: _cls({arguments}))",
        ]
    lines = ["    made = _new(_cls)"]
    if shape.load is not None:
        lines.append(f"    _load(made, [{', '.join(values)}])")
    else:
        # A class of its own ``__setattr__`` (frozen, or watching its fields) is set around it.
        plain = shape.cls.__setattr__ is object.__setattr__  # type: ignore[comparison-overlap]
        for name, value in zip(fields, values, strict=True):
            assign = f"made.{name} = {value}" if plain else f"_set(made, {name!r}, {value})"
            lines.append(f"    if {value} is not _unset: {assign}")
    lines.append("    return made")
    return lines


def _bad_value(shape: Shape) -> Callable[[int, object], StateUnreadable]:
    def bad(at: int, value: object) -> StateUnreadable:
        name, kind = shape.fields[at]
        return StateUnreadable(
            f"a {shape.cls.__qualname__}'s {name} is a {type(value).__name__}, not"
            f" {getattr(kind, '__qualname__', None) or kind}"
        )

    return bad


def _wrong_count(shape: Shape) -> Callable[[list[Any]], StateUnreadable]:
    def wrong(values: list[Any]) -> StateUnreadable:
        return StateUnreadable(
            f"a {shape.cls.__qualname__} of {len(values) - 1} fields, not {len(shape.fields)}"
        )

    return wrong
