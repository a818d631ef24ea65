"""Identities: what a component may be, the streams named after them, and their projections."""

from __future__ import annotations

import pickle
from typing import Any
from urllib.parse import quote, unquote

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import CallKey, ResponseRef, TurnRef
from inert.events import control_stream
from inert.events._identity import MAX_IDENTITY_LENGTH, _stream

IDENTITY_CLASSES: list[type[Any]] = [TurnRef, ResponseRef, CallKey]
COMPONENTS = [(cls, field.name) for cls in IDENTITY_CLASSES for field in attrs.fields(cls)]
COMPONENT_IDS = [f"{cls.__name__}.{name}" for cls, name in COMPONENTS]


def valid_values(cls: type[Any]) -> dict[str, str]:
    return {field.name: f"{field.name}-1" for field in attrs.fields(cls)}


# Components drawn from a few characters, so that different keys often look alike: the slash
# that joins a stream name, the percent sign that escapes it, and what an escape is made of.
lookalike_components = st.text(alphabet="a/%2Ff", min_size=1, max_size=5)
components = lookalike_components | st.text(min_size=1, max_size=12)
call_keys = st.builds(
    CallKey,
    tenant=components,
    conversation=components,
    turn=components,
    response=components,
    item=components,
    call=components,
)
turn_refs = st.builds(TurnRef, tenant=components, conversation=components, turn=components)


def test_the_component_names_are_the_documented_ones() -> None:
    """The identities have exactly the components the streams are built from, in that order."""
    assert [field.name for field in attrs.fields(TurnRef)] == ["tenant", "conversation", "turn"]
    assert [field.name for field in attrs.fields(ResponseRef)] == [
        "tenant",
        "conversation",
        "turn",
        "response",
    ]
    assert [field.name for field in attrs.fields(CallKey)] == [
        "tenant",
        "conversation",
        "turn",
        "response",
        "item",
        "call",
    ]


@pytest.mark.parametrize(("cls", "name"), COMPONENTS, ids=COMPONENT_IDS)
def test_an_empty_component_is_refused(cls: type[Any], name: str) -> None:
    """An empty string is refused with a ValueError naming the component."""
    with pytest.raises(ValueError, match=f"^{name} must not be empty$"):
        cls(**{**valid_values(cls), name: ""})


@pytest.mark.parametrize(("cls", "name"), COMPONENTS, ids=COMPONENT_IDS)
@pytest.mark.parametrize(
    ("value", "type_name"),
    [(5, "int"), (None, "NoneType"), (b"t", "bytes"), (["t"], "list")],
    ids=["int", "None", "bytes", "list"],
)
def test_a_component_that_is_not_a_str_is_refused(
    cls: type[Any], name: str, value: object, type_name: str
) -> None:
    """A value that is not a str is refused with a TypeError naming the component and type."""
    with pytest.raises(TypeError, match=f"^{name} must be a str, not {type_name}$"):
        cls(**{**valid_values(cls), name: value})


def test_a_str_subclass_is_refused_as_a_component() -> None:
    """Only an exact str is a component: a subclass could compare or hash differently."""

    class Sneaky(str):
        __slots__ = ()

    with pytest.raises(TypeError, match=r"^tenant must be a str, not Sneaky$"):
        TurnRef(tenant=Sneaky("t"), conversation="c", turn="u")


@pytest.mark.parametrize(("cls", "name"), COMPONENTS, ids=COMPONENT_IDS)
def test_an_over_long_component_is_refused_and_the_longest_allowed_is_kept(
    cls: type[Any], name: str
) -> None:
    """512 characters are allowed; 513 are refused with a message giving length and limit."""
    assert MAX_IDENTITY_LENGTH == 512
    longest = "é" * MAX_IDENTITY_LENGTH
    assert getattr(cls(**{**valid_values(cls), name: longest}), name) == longest
    with pytest.raises(ValueError, match=f"^{name} is 513 characters, the limit is 512$"):
        cls(**{**valid_values(cls), name: longest + "x"})


def test_identities_are_validated_on_evolve_too() -> None:
    """A changed copy of an identity is validated like a new one."""
    key = CallKey(**valid_values(CallKey))
    with pytest.raises(ValueError, match=r"^call must not be empty$"):
        attrs.evolve(key, call="")


def test_stream_names_have_a_fixed_form() -> None:
    """Stream names are the kind followed by the percent-encoded components, slash-separated."""
    key = CallKey(tenant="acme", conversation="c 1", turn="t/2", response="r%3", item="i", call="é")
    assert key.stream == "call/acme/c%201/t%2F2/r%253/i/%C3%A9"
    assert key.request_stream == "request/acme/c%201/t%2F2/r%253/i/%C3%A9"
    assert key.turn_ref.stream == "turn/acme/c%201/t%2F2"
    assert key.response_ref.stream == "response/acme/r%253"


@settings(max_examples=200)
@given(key=call_keys)
def test_a_call_stream_name_spells_out_every_component(key: CallKey) -> None:
    """Splitting a call's stream names at '/' and unescaping gives back the key's components."""
    components = key._parts()
    for stream, kind in [(key.stream, "call"), (key.request_stream, "request")]:
        first, *parts = stream.split("/")
        assert first == kind
        assert [unquote(part) for part in parts] == list(components)


@settings(max_examples=300)
@given(left=call_keys, right=call_keys)
def test_different_call_keys_never_share_a_stream(left: CallKey, right: CallKey) -> None:
    """Two call keys have the same stream, or the same request stream, only if they are equal."""
    assert (left.stream == right.stream) == (left == right)
    assert (left.request_stream == right.request_stream) == (left == right)
    assert left.stream != right.request_stream


@settings(max_examples=300)
@given(left=turn_refs, right=turn_refs)
def test_different_turns_never_share_a_stream(left: TurnRef, right: TurnRef) -> None:
    """Two turns have the same stream only if they are equal."""
    assert (left.stream == right.stream) == (left == right)


@pytest.mark.parametrize(
    ("left", "right"),
    [
        ({"tenant": "a/b", "conversation": "c"}, {"tenant": "a", "conversation": "b/c"}),
        ({"tenant": "a%2Fb"}, {"tenant": "a/b"}),
        ({"tenant": "a%252F"}, {"tenant": "a%2F"}),
        ({"item": "i/c", "call": "k"}, {"item": "i", "call": "c/k"}),
        ({"call": "%"}, {"call": "%25"}),
    ],
    ids=[
        "slash moved",
        "escape spelt out",
        "escape of an escape",
        "slash eats the call",
        "percent",
    ],
)
def test_lookalike_keys_have_different_streams(left: dict[str, str], right: dict[str, str]) -> None:
    """Keys whose raw components joined by '/' would read alike still name different streams."""
    base = valid_values(CallKey)
    left_key, right_key = CallKey(**{**base, **left}), CallKey(**{**base, **right})
    assert left_key != right_key
    assert left_key.stream != right_key.stream
    assert left_key.request_stream != right_key.request_stream


@settings(max_examples=100)
@given(tenant=components, response=components, other_tenant=components, other_response=components)
def test_responses_of_different_tenants_or_ids_have_different_streams(
    tenant: str, response: str, other_tenant: str, other_response: str
) -> None:
    """A response's ingress stream differs whenever its tenant or its response id differs."""
    one = ResponseRef(tenant=tenant, conversation="c", turn="u", response=response)
    other = ResponseRef(tenant=other_tenant, conversation="c", turn="u", response=other_response)
    assert (one.stream == other.stream) == ((tenant, response) == (other_tenant, other_response))


@settings(max_examples=100)
@given(key=call_keys)
def test_a_key_projects_to_its_turn_and_response(key: CallKey) -> None:
    """``turn_ref`` and ``response_ref`` keep exactly the matching components of the key."""
    assert key.turn_ref == TurnRef(tenant=key.tenant, conversation=key.conversation, turn=key.turn)
    assert key.response_ref == ResponseRef(
        tenant=key.tenant, conversation=key.conversation, turn=key.turn, response=key.response
    )
    assert key.response_ref.turn_ref == key.turn_ref


def test_keys_that_differ_only_in_the_call_share_their_turn_and_response() -> None:
    """Two calls of one response project to the same turn and response, but not the same key."""
    first = CallKey(**valid_values(CallKey))
    second = attrs.evolve(first, item="item-2", call="call-2")
    assert first != second
    assert first.turn_ref == second.turn_ref
    assert first.response_ref == second.response_ref
    assert first.stream != second.stream


def test_calls_of_one_turn_hold_one_turn_object_and_one_response_object_per_response() -> None:
    """Derived turns and responses are shared between the calls (and events) that name them."""
    first = CallKey(**valid_values(CallKey))
    sibling = attrs.evolve(first, item="item-2", call="call-2")
    elsewhere = attrs.evolve(first, response="response-2")
    assert first.response_ref is sibling.response_ref
    assert first.turn_ref is sibling.turn_ref is elsewhere.turn_ref
    assert elsewhere.response_ref is not first.response_ref


@settings(max_examples=300)
@given(parts=st.lists(st.text(min_size=1), min_size=1, max_size=4))
def test_stream_names_quote_every_component_as_urllib_does(parts: list[str]) -> None:
    """A stream name is its kind and each component percent-encoded by ``quote(safe="")``."""
    try:
        expected = "/".join(("kind", *(quote(part, safe="") for part in parts)))
    except UnicodeEncodeError:
        return
    assert _stream("kind", tuple(parts)) == expected


def test_control_streams_are_global_or_per_tenant() -> None:
    """``control_stream(None)`` is the global stream; a tenant gets its own, escaped."""
    assert control_stream() == control_stream(None) == "control/global"
    assert control_stream("t") == "control/tenant/t"
    assert control_stream("a/b") == "control/tenant/a%2Fb"
    # A tenant named "global" does not reach the global controls.
    assert control_stream("global") != control_stream(None)
    assert len({control_stream(None), control_stream("t"), control_stream("u")}) == 3


def test_a_lone_surrogate_is_refused_as_a_component() -> None:
    """A component that is not valid Unicode is refused when the identity is made."""
    with pytest.raises(ValueError, match="lone surrogates"):
        CallKey(tenant="t", conversation="c", turn="1", response="r", item="i", call="\ud800")


def test_an_empty_tenant_has_no_control_stream() -> None:
    """control_stream refuses an empty tenant, as every identity does."""
    with pytest.raises(ValueError, match="must not be empty"):
        control_stream("")


@pytest.mark.parametrize("cls", IDENTITY_CLASSES, ids=lambda cls: cls.__name__)
def test_equal_identities_hash_alike_and_a_copy_hashes_by_its_values(cls: type[Any]) -> None:
    """Equal identities hash alike, the hash is a plain integer kept with the identity, and a
    pickled identity carries no hash: it hashes by its values where it is loaded."""
    identity = cls(**valid_values(cls))
    other = attrs.evolve(identity)
    assert other is not identity
    assert hash(other) == hash(identity)
    assert type(hash(identity)) is int
    assert type(identity._hash) is int
    state = identity.__getstate__()
    assert set(state) == {field.name for field in attrs.fields(cls)}
    loaded = pickle.loads(pickle.dumps(identity))
    assert loaded == identity
    assert hash(loaded) == hash(identity)
    assert {identity: 1}[loaded] == 1


@given(call_keys, call_keys)
def test_identities_of_different_values_are_different_keys(left: CallKey, right: CallKey) -> None:
    """Keys equal by value are one dict key; keys that differ are two, whatever their hash."""
    table = {left: "left", right: "right"}
    assert len(table) == (1 if left == right else 2)
    assert (left == right) == (attrs.astuple(left) == attrs.astuple(right))
