"""How a snapshot's state is pickled: each object as the values of its fields, nothing more.

Pickle's own way with an object of a slotted class writes a dictionary of its slots, and keeps
that dictionary (and a tuple around it) alive in the pickler's memo until the whole state is
written: for 100,000 live calls that is hundreds of megabytes of small objects made and freed
at once, which is what a snapshot costs at its peak and, once freed, leaves behind as pools the
allocator cannot return. Here an object of a slotted class of ours is written as its class and
one tuple of its fields' values, set back in order when loaded; an identity (a call key, a turn,
a response) is written as its values and loaded through the identity tables, so that a loaded
call's key is the one object of its value that later decoded events name.

A class takes pickle's own way where this one could lose something: one that pickles itself
(``__getstate__``, ``__reduce__``, other than what attrs writes), one whose instances have a
``__dict__``, or an instance with a slot not set.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections.abc import Callable
from functools import cache
from operator import attrgetter
from types import MappingProxyType
from typing import Any

import attrs

from ..events._structure import interned, is_identity

_PICKLES_ITSELF = (
    "__getstate__",
    "__setstate__",
    "__reduce__",
    "__reduce_ex__",
    "__getnewargs__",
    "__getnewargs_ex__",
)
_NEWOBJ = copyreg.__newobj__  # type: ignore[attr-defined]

Reduction = tuple[Any, ...]


class Dumper:
    """Pickles values one after another, each a whole pickle of its own, with one pickler."""

    def __init__(self) -> None:
        self._out = io.BytesIO()
        self._pickler = pickle.Pickler(self._out, protocol=pickle.HIGHEST_PROTOCOL)
        self._pickler.dispatch_table = _Reductions()

    def __call__(self, value: object) -> bytes:
        out = self._out
        out.seek(0)
        out.truncate()
        self._pickler.clear_memo()
        self._pickler.dump(value)
        return out.getvalue()


class _Reductions(dict[type, Callable[[Any], Reduction]]):
    """The reduction of each class, decided the first time the pickler meets one."""

    def __missing__(self, cls: type) -> Callable[[Any], Reduction]:
        if issubclass(cls, type):
            # A class (an enum's, say) is written by its name: pickle does that once told that
            # the table has nothing for its metaclass.
            raise KeyError(cls)
        found = self[cls] = _reduction_of(cls)
        return found


def _reduction_of(cls: type) -> Callable[[Any], Reduction]:
    if cls is MappingProxyType:
        return _reduce_proxy
    fields = fields_of(cls)
    if fields is None:
        return _pickles_own_way
    values = _values_of(fields)
    if is_identity(cls):

        def reduce_identity(identity: Any) -> Reduction:
            return _Identity, (cls, *values(identity))

        return reduce_identity
    arguments = (cls,)

    def reduce_fields(instance: Any) -> Reduction:
        try:
            state = values(instance)
        except AttributeError:
            return _pickles_own_way(instance)
        return _NEWOBJ, arguments, state, None, None, _Fields

    return reduce_fields


def _pickles_own_way(instance: Any) -> Reduction:
    reduction: Reduction = instance.__reduce_ex__(pickle.HIGHEST_PROTOCOL)
    return reduction


def _values_of(fields: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if len(fields) == 1:
        (only,) = fields
        return lambda instance: (getattr(instance, only),)
    return attrgetter(*fields)


@cache
def fields_of(cls: Any) -> tuple[str, ...] | None:
    """The fields written of an instance of ``cls``, in order; ``None`` where pickle's own way
    is taken."""
    bases = cls.__mro__[:-1]
    if not bases or any("__slots__" not in base.__dict__ for base in bases):
        return None
    if any(_pickles_itself(base) for base in bases):
        return None
    if attrs.has(cls):
        # Slots of a base that attrs does not know of would not be written.
        if any(_declared(base) for base in bases if not attrs.has(base)):
            return None
        return tuple(field.name for field in attrs.fields(cls))
    slots = [name for base in reversed(bases) for name in _declared(base)]
    if any(name == "__dict__" or name.startswith("__") for name in slots):
        return None
    return tuple(slots)


def _declared(base: type) -> list[str]:
    declared = base.__dict__["__slots__"]
    names = [declared] if isinstance(declared, str) else list(declared)
    return [name for name in names if name != "__weakref__"]


def _pickles_itself(base: type) -> bool:
    """Whether the class defines how it pickles: attrs writes ``__getstate__`` and
    ``__setstate__`` for a slotted class, and those do not count."""
    prefix = f"{base.__qualname__}."
    return any(
        getattr(method, "__qualname__", prefix).startswith(prefix)
        for name in _PICKLES_ITSELF
        if (method := base.__dict__.get(name)) is not None
    )


class _Fields:
    """Sets a loaded object's fields back, in the order they were written. A class, so that
    loading, which names classes alone, can name it."""

    def __new__(cls, instance: Any, state: tuple[Any, ...]) -> None:  # type: ignore[misc]
        fields = fields_of(instance.__class__)
        if fields is None or type(state) is not tuple or len(state) != len(fields):
            raise ValueError(f"the fields of a {type(instance).__name__} do not match its class")
        setter = object.__setattr__
        for name, value in zip(fields, state, strict=True):
            setter(instance, name, value)


class _Identity:
    """Loads an identity through the identity tables: the object of its value that is alive,
    or a new one, checked as a decoded one is."""

    def __new__(cls, kind: type, *values: str) -> Any:
        fields = fields_of(kind) if isinstance(kind, type) and is_identity(kind) else None
        if fields is None or len(values) != len(fields):
            raise ValueError(f"{kind!r} is not an identity of {len(values)} fields")
        return interned(kind, values, lambda: kind(**dict(zip(fields, values, strict=True))))


def _reduce_proxy(proxy: MappingProxyType[Any, Any]) -> Reduction:
    # Parsed arguments are read-only mappings all the way down; pickle has no reduction of its
    # own for them.
    return _ReadOnly, (dict(proxy),)


class _ReadOnly:
    """Makes a read-only mapping again: pickle cannot name the type of one, but names this."""

    def __new__(cls, items: dict[Any, Any]) -> MappingProxyType[Any, Any]:  # type: ignore[misc]
        return MappingProxyType(items)
