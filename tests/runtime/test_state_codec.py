"""A runtime's state as data: what the writer writes, the reader makes again, and nothing else."""

from __future__ import annotations

import collections
import contextlib
from array import array
from datetime import UTC, datetime, timedelta, timezone, tzinfo
from types import MappingProxyType
from typing import Any

import attrs
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inert.actors._buffer import RangeBuffer, SequencedBuffer, chain_of, links_of
from inert.actors._scope import Scope
from inert.actors._slot import Later, Slot
from inert.events import CallKey, Phase, TurnRef
from inert.projections import Projections
from inert.projections._calls import Call
from inert.runtime._state_codec import MAX_DEPTH, Reader, Writer
from inert.runtime._state_shapes import (
    UNSET,
    Shapes,
    StateNotWritable,
    StateUnreadable,
    object_shape,
)
from inert.runtime._state_types import state_shapes

SHAPES = state_shapes()


def _round_trip(value: object) -> Any:
    return Reader(SHAPES)(Writer(SHAPES)(value))


def _key(call: str = "c") -> CallKey:
    return CallKey(tenant="t", conversation="v", turn="u", response="r", item="i", call=call)


def _marker(kind: int) -> msgpack.ExtType:
    """The first item of a marked array: kinds 0 to 7 are containers, 8 on objects."""
    return msgpack.ExtType(1, kind.to_bytes(2, "big"))


def _object(cls: type, *fields: object) -> list[object]:
    """An object of a listed class as a writer writes it (fields unchecked)."""
    return [_marker(8 + SHAPES.index[cls]), *fields]


def _reference(index: int, size: int = 4) -> msgpack.ExtType:
    return msgpack.ExtType(2, index.to_bytes(size, "big"))


def _read(value: object) -> Any:
    return Reader(SHAPES)(msgpack.packb(value, use_bin_type=True))


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        7,
        -(2**63),
        1.5,
        "text",
        b"bytes",
        [1, [2, "three"]],
        {"a": 1, 2: "b"},
        (1, (2, 3), ()),
        {1, 2},
        frozenset({"a"}),
        datetime(2026, 12, 7, 3, 4, 5, 678901, tzinfo=UTC),
        datetime(2026, 12, 7, 3, 4, 5, tzinfo=timezone(timedelta(hours=-5))),
        datetime(1969, 7, 20, 20, 17),
        timedelta(days=-3, seconds=7, microseconds=9),
        MappingProxyType({"a": MappingProxyType({"b": (1, 2)})}),
        collections.OrderedDict([(_key("a"), None), (_key("b"), 2)]),
        collections.deque([1, 2], maxlen=5),
        Phase.VALIDATED,
        _key(),
        {(1, "x"): frozenset({_key()})},
    ],
    ids=repr,
)
def test_every_kind_of_value_comes_back_equal_and_of_its_type(value: Any) -> None:
    """Plain values, containers, times, read-only maps, enums and identities round-trip exactly."""
    loaded: Any = _round_trip(value)
    assert loaded == value
    assert type(loaded) is type(value)
    if isinstance(value, datetime):
        assert loaded.tzinfo == value.tzinfo
        assert loaded.utcoffset() == value.utcoffset()


def test_an_array_of_integers_and_a_bytearray_field_come_back_as_themselves() -> None:
    """A ledger call's positions stay an array, a buffer's prefix a bytearray one can extend."""
    call = Call(_key())
    call.taken = array("q", [1, -2, 3])
    loaded = _round_trip(call)
    assert type(loaded.taken) is array
    assert loaded.taken.typecode == "q"
    assert list(loaded.taken) == [1, -2, 3]
    buffer = RangeBuffer(bytearray(b"{}"), 2)
    assert type(_round_trip(buffer).data) is bytearray


def test_an_identity_comes_back_as_the_one_alive_of_its_value() -> None:
    """Identities are made through the identity tables: a key loaded while another of its value
    is held is that one."""
    held = _round_trip([_key("held")])[0]
    assert _round_trip([_key("held")])[0] is held


def test_what_the_state_shares_stays_shared_and_a_slot_not_set_stays_unset() -> None:
    """Two slots naming one object load naming one object; an unset slot is left unset."""
    later = Later()
    first, second = Slot(_key("a")), Slot(_key("b"))
    first.later = second.later = later
    loaded = _round_trip([first, second])
    assert loaded[0].later is loaded[1].later
    assert type(loaded[0]) is Slot
    assert loaded[0].key == _key("a")
    shapes = Shapes([object_shape(_Pair, {"left": int, "right": int})])
    half = _Pair.__new__(_Pair)
    half.left = 1  # type: ignore[attr-defined]
    made = Reader(shapes)(Writer(shapes)(half))
    assert made.left == 1
    assert not hasattr(made, "right")


class _Pair:
    __slots__ = ("left", "right")


def test_a_chain_of_fragments_is_written_flat_however_long() -> None:
    """An unpositioned buffer's chain nests a tuple per fragment; the writer flattens it, so ten
    thousand fragments write and load within the nesting bound."""
    chain = chain_of([part for order in range(10_000) for part in (order, b"x")])
    buffer = SequencedBuffer(chain, 10_000)
    loaded = _round_trip(buffer)
    assert links_of(loaded.parts) == links_of(chain)
    with pytest.raises(ValueError, match="pairs"):
        chain_of([1, b"a", 2])
    with pytest.raises(ValueError, match="pairs"):
        chain_of(["1", b"a"])


def test_a_value_of_no_listed_class_is_not_written() -> None:
    """What no shape or kind names is a bug of inert, said by its class, never written."""

    class Stray:
        pass

    with pytest.raises(StateNotWritable, match="Stray is no state"):
        Writer(SHAPES)([Stray()])
    with pytest.raises(StateNotWritable, match="zone"):
        Writer(SHAPES)(datetime(2026, 1, 1, tzinfo=_Zone()))


class _Zone(tzinfo):
    def utcoffset(self, _: object) -> timedelta:
        return timedelta(0)

    def dst(self, _: object) -> None:
        return None

    def tzname(self, _: object) -> str:
        return "Z"


def test_an_object_with_attributes_its_shape_does_not_name_is_not_written() -> None:
    """A class of the state given a new attribute fails loudly until its shape names it."""
    scope = Scope()
    scope.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(StateNotWritable, match="extra"):
        Writer(SHAPES)(scope)


def test_every_listed_class_names_exactly_the_attributes_its_objects_have() -> None:
    """Each shape of a slotted object names every slot of its class (the projections' routes,
    their own bound methods, are made again, not written; ``Projections`` keeps no position of
    its own). Objects with attributes are checked as they are written."""
    for shape in SHAPES.shapes:
        if shape.kind != "object" or attrs.has(shape.cls):
            continue
        names = {name for name, _ in shape.fields}
        slots = {
            name
            for base in shape.cls.__mro__
            for name in base.__dict__.get("__slots__", ())
            if name not in ("__weakref__", "_routes")
        }
        if shape.cls.__dictoffset__:
            assert not slots, shape.cls
            continue
        if shape.cls is Projections:
            slots.discard("_position")
        assert names == slots, shape.cls


@pytest.mark.parametrize(
    ("value", "refusal"),
    [
        ([_marker(8 + 10_000)], "no kind"),
        ([_marker(8 + len(SHAPES.shapes))], "no kind"),
        (msgpack.ExtType(1, b"\x00\x00\x00"), "no kind"),
        ([_marker(7)], "kind 7"),
        (_marker(0), "begins no array"),
        ([1, _marker(0)], "begins no array"),
        ({"a": _marker(0)}, "begins no array"),
        (_object(TurnRef, "t", "c"), "2 fields, not 3"),
        (_object(TurnRef, "t", "c", 3), "turn is a int"),
        (_object(Slot, *[None] * 14), "key is a NoneType"),
        (_object(Phase, "nonsense"), "no Phase"),
        (_object(Phase, ["x"]), "unhashable"),
        (_object(Phase), "not one value"),
        (_reference(5), "not made before"),
        (_reference(0), "not made before"),
        ([[_marker(0), _reference(0)]], "not made before"),
        ([_reference(0, 1)], "not made before"),
        (msgpack.ExtType(99, b""), "kind 99"),
        ([_marker(1), [1]], "unhashable"),
        ([_marker(3), [1]], "holds no map"),
        ([_marker(4)], "holds no map"),
        ([_marker(5), -1, [1]], "ValueError"),
        ([_marker(5), "x", [1]], "bound and its items"),
        (msgpack.ExtType(3, msgpack.packb(["x", None])), "microseconds"),
        (msgpack.ExtType(3, msgpack.packb([2**63 - 1, None])), "OverflowError"),
        (msgpack.ExtType(3, b"\xc1"), "FormatError"),
        (msgpack.ExtType(4, msgpack.packb([1, 2])), "3 integers"),
        (msgpack.ExtType(5, b"d12345678"), "type code"),
        (msgpack.ExtType(5, b""), "type code"),
        (msgpack.ExtType(5, b"q123"), "whole items"),
        ([_marker(6), "no.such.tag", 1, b""], "unknown event tag"),
        ([_marker(6), "ingress.call_opened", 1, b"\x80"], "corrupt"),
        ([_marker(6), "ingress.call_opened"], "a tag, a version and a payload"),
        ({(1,): 1}, "unhashable"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_bytes_that_are_no_state_are_refused_by_what_is_wrong(value: object, refusal: str) -> None:
    """An unknown class, a field too many or too few, a value of another type, a reference
    forward, an unknown kind, a malformed time, array or event: unreadable, nothing made."""
    with pytest.raises(StateUnreadable, match=refusal):
        _read(value)


def test_nesting_past_the_bound_is_refused_before_the_stack_is() -> None:
    """Objects nested deeper than the bound are refused; so is plain nesting past msgpack's."""
    nested: object = 1
    for _ in range(MAX_DEPTH + 1):
        nested = [_marker(0), nested]
    with pytest.raises(StateUnreadable, match="deeper"):
        _read(nested)
    deep = b"\x91" * 100_000 + b"\xc0"
    with pytest.raises(StateUnreadable):
        Reader(SHAPES)(deep)


def test_a_huge_length_declared_in_a_few_bytes_is_refused_without_allocating_it() -> None:
    """A header claiming four billion items or bytes is refused at once."""
    for data in (b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff"):
        with pytest.raises(StateUnreadable):
            Reader(SHAPES)(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_any_bytes_are_read_or_refused_never_anything_else(data: bytes) -> None:
    """Arbitrary bytes make a value or ``StateUnreadable``, never another exception."""
    with contextlib.suppress(StateUnreadable):
        Reader(SHAPES)(data)


_FIELDS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.text(max_size=8)
    | st.binary(max_size=8)
    | st.builds(_marker, st.integers(0, 70))
    | st.builds(_reference, st.integers(0, 8))
    | st.builds(msgpack.ExtType, st.integers(0, 8), st.binary(max_size=9)),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=16,
)


@settings(max_examples=400, deadline=None)
@given(st.integers(0, len(SHAPES.shapes) + 10), st.lists(_FIELDS, max_size=20))
def test_any_marked_array_of_any_kind_is_read_or_refused(kind: int, fields: list[object]) -> None:
    """Marked arrays of every kind and class (and past the list) with arbitrary items, markers,
    references and extension values among them: a value or ``StateUnreadable``, never another
    exception or an object of a listed class with a field of another type."""
    try:
        value = _read([_marker(kind), *fields])
    except StateUnreadable:
        return
    if kind >= 8:
        shape = SHAPES.shapes[kind - 8]
        assert isinstance(value, shape.cls)
        for (name, declared), field in zip(shape.fields, fields, strict=True):
            check = SHAPES.check_of(declared)
            assert check is None or check(field) or field is UNSET, (shape.cls, name)


def test_a_value_of_a_listed_class_is_its_declared_type_or_refused() -> None:
    """Every field is checked: a slot whose phase is a string, or whose key is a turn, is
    refused; the same slot with each field of its type is made."""
    slot = Slot(_key())
    names = SHAPES.names[SHAPES.index[Slot]]
    fields = {name: getattr(slot, name) for name in names}
    assert Reader(SHAPES)(_ForgingWriter(SHAPES)(_FieldsOf(Slot, fields))).key == _key()
    turn = TurnRef(tenant="t", conversation="v", turn="u")
    for name, wrong in (("phase", "validated"), ("key", turn), ("later", _key()), ("tool", 1)):
        forged = _FieldsOf(Slot, {**fields, name: wrong})
        with pytest.raises(StateUnreadable, match=f"Slot's {name} is a"):
            Reader(SHAPES)(_ForgingWriter(SHAPES)(forged))


class _FieldsOf:
    """Writes as an object of ``cls`` with these fields, whatever their types."""

    def __init__(self, cls: type, fields: dict[str, object]) -> None:
        self.cls = cls
        self.fields = fields


class _ForgingWriter(Writer):
    """Writes a ``_FieldsOf`` as the object it names, as a writer of bad state would."""

    def _default(self, value: Any) -> object:
        if isinstance(value, _FieldsOf):
            # Counted as the object it stands for, so that later references are numbered so.
            self._memo[id(value)] = len(self._memo)
            self._kept.append(value)
            return _object(value.cls, *value.fields.values())
        return super()._default(value)
