"""Structuring of decoded payloads by code generated once per event class: the fast path.

cattrs dispatches every field of every event through its hook machinery; on replay that is the
largest single cost of reading an event. For each attrs class an event is made of, this module
writes one plain function that checks each field's exact type inline and calls the class once.

The fast path only ever accepts what the checked path (the codec's cattrs converter) accepts
and builds the same value: any payload it is not sure of (a missing or extra field, a type that
is not exactly the one declared, a validator that refuses) makes it give up, and the codec then
structures the payload through the converter, which builds the value or says what is wrong.
Identities (call keys, turns, responses, offered tools) are interned by their exact fields:
most events name an identity seen a moment ago, and handing back the same object skips its
validation and lets what it caches (its hash, a response's stream) serve every later event.
The tables hold their identities weakly: an identity something still holds (a live call's
key, a turn the ledger keeps) is the one object of its value however many are alive, and one
nothing holds any more leaves its table at the next sweep, so that the tables follow what is
alive, not the history decoded.
"""

from __future__ import annotations

import enum
import typing
import weakref
from collections.abc import Callable
from datetime import datetime
from types import NoneType, UnionType
from typing import Any

import attrs

from ._times import micros_to_datetime

Structure = Callable[[object], Any]
"""Structures a payload map into its class, or returns ``GIVE_UP``."""

GIVE_UP: Any = object()
"""What a fast structuring function returns where the checked path must decide."""

# A table is swept of the identities nothing holds any more once it has doubled since its last
# sweep (and holds at least this many): a sweep costs one look per entry, so its cost per
# identity kept stays constant, and a table never holds more than twice what was alive at its
# last sweep.
_FIRST_SWEEP = 4096


class _Unsupported(Exception):
    """A field type the generator does not write code for: the class takes the checked path."""


class _Table(dict[tuple[object, ...], "weakref.ReferenceType[Any]"]):
    """The identities of one class by their fields' values in field order, held weakly."""

    __slots__ = ("sweep_at",)

    def __init__(self) -> None:
        super().__init__()
        self.sweep_at = _FIRST_SWEEP


_IDENTITIES: dict[type, _Table] = {}
"""One table per identity class, for the decoded payloads and for what identities derive from
each other (a call's response and turn)."""

_T = typing.TypeVar("_T")


def _table(cls: type) -> _Table:
    found = _IDENTITIES.get(cls)
    if found is None:
        found = _IDENTITIES[cls] = _Table()
    return found


def interned(cls: type[_T], values: tuple[str, ...], build: Callable[[], _T]) -> _T:
    """The identity of ``cls`` with these field values: the one alive if there is one, else
    what ``build`` makes, kept for the next."""
    known = _table(cls)
    reference = known.get(values)
    found: _T | None = None if reference is None else reference()
    if found is None:
        found = build()
        _keep(known, values, found)
    return found


def _keep(known: _Table, values: tuple[object, ...], value: object) -> None:
    if len(known) >= known.sweep_at:
        # From a copy taken in one step, and tolerant of entries gone meanwhile: runtimes in
        # other threads decode through the same tables.
        for dead, reference in list(known.items()):
            if reference() is None:
                known.pop(dead, None)
        known.sweep_at = max(_FIRST_SWEEP, 2 * len(known))
    known[values] = weakref.ref(value)


class _Interned:
    """Values of one identity class by their payload's values, held weakly.

    Only a payload holding exactly the class's fields, in the order the codec writes them, is
    looked up (its values then say everything): any other is built without being kept. Keyed
    by the values alone, an identity costs one small tuple and a weak reference here rather
    than a pair per field.
    """

    def __init__(self, cls: type, build: Structure, names: tuple[str, ...]) -> None:
        self._build = build
        self._names = names
        self._known = _table(cls)

    def __call__(self, value: object) -> Any:
        if type(value) is not dict:
            return GIVE_UP
        if tuple(value) != self._names:
            return self._build(value)
        try:
            values = tuple(value.values())
            reference = self._known.get(values)
        except TypeError:
            return GIVE_UP
        if reference is not None:
            known = reference()
            if known is not None:
                return known
        built = self._build(value)
        if built is not GIVE_UP:
            _keep(self._known, values, built)
        return built


def is_identity(cls: type) -> bool:
    """Whether ``cls`` is an identity, interned by its fields' values: a hashable attrs class
    of strings alone."""
    # Equal payload fields are then the same value (an int field would let ``True`` find what
    # ``1`` built), and every hot path keys dicts on them.
    if not attrs.has(cls):
        return False
    fields = attrs.fields(cls)
    hashable = getattr(cls, "__hash__", None) not in (None, object.__hash__)
    weakly_held = getattr(cls, "__weakrefoffset__", 0) != 0
    return hashable and weakly_held and all(field.type is str for field in fields)


class _Generator:
    def __init__(self) -> None:
        self._functions: dict[type, Structure] = {}

    def function(self, cls: type) -> Structure:
        found = self._functions.get(cls)
        if found is None:
            found = self._write(cls)
            if is_identity(cls):
                found = _Interned(cls, found, tuple(field.name for field in attrs.fields(cls)))
            self._functions[cls] = found
        return found

    def _write(self, cls: type) -> Structure:
        attrs.resolve_types(cls)
        fields = attrs.fields(cls)
        names: dict[str, object] = {
            "GIVE_UP": GIVE_UP,
            "cls": cls,
            "MISSING": _MISSING,
            "micros_to_datetime": micros_to_datetime,
        }
        lines = [
            "def structure(value):",
            "    if type(value) is not dict:",
            "        return GIVE_UP",
        ]
        lines.append("    found = 0")
        required: list[str] = []
        optional: list[str] = []
        for index, field in enumerate(fields):
            if not field.init or field.alias != field.name:
                raise _Unsupported(f"{cls.__name__}.{field.name}")
            local = f"v{index}"
            has_default = field.default is not attrs.NOTHING
            lines.append(f"    {local} = value.get({field.name!r}, MISSING)")
            lines.append(f"    if {local} is MISSING:")
            lines.append("        pass" if has_default else "        return GIVE_UP")
            lines.append("    else:")
            lines.append("        found += 1")
            lines.extend(
                f"        {line}" for line in self._check(local, field.type, names, f"t{index}")
            )
            (optional if has_default else required).append(field.name)
        lines.append("    if found != len(value):")
        lines.append("        return GIVE_UP")
        arguments = [f"{name}=v{_index_of(fields, name)}" for name in required]
        if optional:
            # The codec writes every field: a payload holding them all passes them by name.
            every = ", ".join(f"{field.name}=v{index}" for index, field in enumerate(fields))
            lines.append(f"    if found == {len(fields)}:")
            lines.append("        try:")
            lines.append(f"            return cls({every})")
            lines.append("        except Exception:")
            lines.append("            return GIVE_UP")
            lines.append("    extra = {}")
            for name in optional:
                local = f"v{_index_of(fields, name)}"
                lines.append(f"    if {local} is not MISSING:")
                lines.append(f"        extra[{name!r}] = {local}")
            arguments.append("**extra")
        lines.append("    try:")
        lines.append(f"        return cls({', '.join(arguments)})")
        lines.append("    except Exception:")
        lines.append("        return GIVE_UP")
        namespace: dict[str, Any] = {}
        exec(compile("\n".join(lines), f"<structure {cls.__qualname__}>", "exec"), names, namespace)
        return typing.cast(Structure, namespace["structure"])

    def _check(self, local: str, kind: object, names: dict[str, object], name: str) -> list[str]:
        """Lines that check ``local`` against ``kind`` and replace it by its structured value,
        returning ``GIVE_UP`` where it does not fit."""
        if kind in (str, int, bool, bytes):
            names[name] = kind
            return [f"if type({local}) is not {name}:", "    return GIVE_UP"]
        if kind is float:
            return [
                f"if type({local}) is int:",
                f"    {local} = float({local})",
                f"elif type({local}) is not float:",
                "    return GIVE_UP",
            ]
        if kind is datetime:
            return [
                f"if type({local}) is not int:",
                "    return GIVE_UP",
                "try:",
                f"    {local} = micros_to_datetime({local})",
                "except OverflowError:",
                "    return GIVE_UP",
            ]
        if isinstance(kind, type) and issubclass(kind, enum.StrEnum):
            names[name] = kind
            return [
                f"if type({local}) is not str:",
                "    return GIVE_UP",
                "try:",
                f"    {local} = {name}({local})",
                "except ValueError:",
                "    return GIVE_UP",
            ]
        if isinstance(kind, type) and attrs.has(kind):
            names[name] = self.function(kind)
            return [f"{local} = {name}({local})", f"if {local} is GIVE_UP:", "    return GIVE_UP"]
        arguments = typing.get_args(kind)
        if isinstance(kind, UnionType) and len(arguments) == 2 and NoneType in arguments:
            (inner,) = (argument for argument in arguments if argument is not NoneType)
            nested = self._check(local, inner, names, name)
            return [f"if {local} is not None:", *(f"    {line}" for line in nested)]
        if typing.get_origin(kind) is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
            item = f"{name}_item"
            nested = self._check(item, arguments[0], names, f"{name}_of")
            return [
                f"if type({local}) is not list:",
                "    return GIVE_UP",
                f"{name}_items = []",
                f"for {item} in {local}:",
                *(f"    {line}" for line in nested),
                f"    {name}_items.append({item})",
                f"{local} = tuple({name}_items)",
            ]
        raise _Unsupported(repr(kind))


_MISSING = object()


def _index_of(fields: tuple[attrs.Attribute[Any], ...], name: str) -> int:
    return next(index for index, field in enumerate(fields) if field.name == name)


_GENERATOR = _Generator()


def fast_structure(cls: type) -> Structure | None:
    """The generated structuring function of an attrs class; ``None`` where some field type has
    no generated check (the class then always takes the checked path)."""
    try:
        return _GENERATOR.function(cls)
    except _Unsupported:
        return None
