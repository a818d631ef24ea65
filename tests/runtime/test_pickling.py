"""How a snapshot's state is pickled: objects as their fields, identities through the tables."""

from __future__ import annotations

import copyreg
import io
import pickle
import pickletools
from typing import Any, NamedTuple

import attrs
import pytest

from inert.actors._slot import Slot
from inert.events import CallKey, Phase, ResponseRef, TurnRef
from inert.log import StoredSnapshot
from inert.log._snapshots import state_digest
from inert.projections._calls import Call
from inert.runtime._pickling import Dumper, _Fields, _Identity, fields_of
from inert.runtime._snapshot import SnapshotUnusable, _loading, _StateUnpickler, restore

STAMP = "test-stamp"


def _load(data: bytes) -> Any:
    """What ``restore`` makes of a state pickle (it must hold a runtime's state to be kept)."""
    snapshot = StoredSnapshot(
        name="", position=1, stamp=STAMP, state=data, digest=state_digest(data)
    )
    return restore(snapshot, stamp=STAMP)


def _round_trip(value: object) -> Any:
    # The loading side of restore, without its check that the value is a runtime's state.
    with _loading():
        return _StateUnpickler(io.BytesIO(Dumper()(value))).load()


def _key(call: str = "c") -> CallKey:
    return CallKey(tenant="t", conversation="v", turn="u", response="r", item="i", call=call)


def test_a_slotted_object_is_written_as_one_tuple_of_its_fields() -> None:
    """A call's slot in the fold goes into the pickle as its class and the values of its slots,
    without a dictionary of them, and comes back with every slot as it was."""
    slot = Slot(_key())
    slot.tool = "search"
    slot.phase = Phase.VALIDATED
    data = Dumper()(slot)
    opcodes = {opcode.name for opcode, _, _ in pickletools.genops(data)}
    assert "EMPTY_DICT" not in opcodes
    assert len(data) < len(pickle.dumps(slot, protocol=pickle.HIGHEST_PROTOCOL))
    loaded = _round_trip(slot)
    assert type(loaded) is Slot
    assert fields_of(Slot) is not None
    assert all(getattr(loaded, name) == getattr(slot, name) for name in fields_of(Slot) or ())


def test_objects_shared_in_the_state_stay_shared_when_loaded() -> None:
    """Two slots naming one list load naming one list, and an object reached again through its
    own fields (a cycle) loads as itself, as pickle's own way keeps them."""
    first, second = Slot(_key("a")), Slot(_key("b"))
    shared: list[Any] = [first]
    first.expected = second.expected = shared
    loaded_first, loaded_second = _round_trip((first, second))
    assert loaded_first.expected is loaded_second.expected
    assert loaded_first.expected[0] is loaded_first


def test_a_loaded_identity_is_the_one_alive() -> None:
    """A call key, a response and a turn load as the objects of their values that are alive,
    the ones decoded events name."""
    key = _key("alive")
    loaded_key, loaded_response, loaded_turn = _round_trip(
        (attrs.evolve(key), attrs.evolve(key.response_ref), attrs.evolve(key.turn_ref))
    )
    assert loaded_key == key
    assert loaded_response is loaded_key.response_ref
    assert loaded_turn is loaded_key.turn_ref
    assert _round_trip(key) is loaded_key


def test_an_object_with_a_slot_not_set_takes_pickles_own_way() -> None:
    """A slot never set cannot be written as a field: the object is pickled as pickle does,
    and loads without that slot."""
    slot = Slot(_key("unset"))
    del slot.validating
    loaded = _round_trip(slot)
    assert not hasattr(loaded, "validating")
    assert loaded.key == slot.key


def test_a_class_that_pickles_itself_keeps_its_own_way() -> None:
    """The ledger's record of a call writes itself (its array of fragments received as a
    tuple), and comes back with every slot as it was."""
    assert fields_of(Call) is None
    call = Call(_key("receiving"))
    call.receive()
    call.add(7, 2, 40)
    call.record((7, "decision.collecting", Phase.COLLECTING, "tool search"))
    loaded = _round_trip(call)
    assert (loaded.fragments, loaded.bytes, list(loaded.taken)) == (2, 40, [7, 2, 40])
    assert [getattr(loaded, name) for name in Call.__slots__ if name != "taken"] == [
        getattr(call, name) for name in Call.__slots__ if name != "taken"
    ]


def test_a_class_with_a_dict_or_its_own_getstate_is_not_written_as_fields() -> None:
    """Instances with a ``__dict__``, classes that pickle themselves (attrs classes with their own
    ``__getstate__``, named tuples) and attrs classes over slots attrs does not know keep
    pickle's way."""

    class Plain:
        pass

    @attrs.define
    class OwnState:
        value: int

        def __getstate__(self) -> dict[str, int]:
            return {"value": self.value}

    class Slotted:
        __slots__ = ("extra",)

    @attrs.define
    class OverSlots(Slotted):
        value: int

    class Pair(NamedTuple):
        first: int
        second: int

    assert fields_of(Plain) is None
    assert fields_of(OwnState) is None
    assert fields_of(OverSlots) is None
    assert fields_of(Pair) is None
    assert fields_of(Slotted) == ("extra",)
    assert fields_of(TurnRef) == ("tenant", "conversation", "turn")


def _forged(reduction: tuple[Any, ...]) -> bytes:
    """A pickle of a call's slot reduced as ``reduction`` says."""
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {Slot: lambda slot: reduction}
    pickler.dump(Slot(_key()))
    return out.getvalue()


_NEWOBJ = copyreg.__newobj__  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "reduction",
    [
        (_NEWOBJ, (Slot,), (1, 2), None, None, _Fields),
        (_NEWOBJ, (Slot,), "not a tuple", None, None, _Fields),
        (_Identity, (Slot, "a", "b")),
        (_Identity, (ResponseRef, "only two", "values")),
        (_Identity, (TurnRef, "t", "", "u")),
    ],
    ids=["short-fields", "fields-not-a-tuple", "not-an-identity", "too-few-values", "empty"],
)
def test_a_forged_state_is_unusable_not_an_error(reduction: tuple[Any, ...]) -> None:
    """Fields that do not match their class, or an identity of another class, of another
    length or failing an identity's checks make the snapshot unusable."""
    with pytest.raises(SnapshotUnusable, match="cannot be read"):
        _load(_forged(reduction))
