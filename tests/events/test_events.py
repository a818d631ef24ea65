"""The event vocabulary: pinned tags, a round trip for every event type, immutable classes.

Instances are built by Hypothesis from each attrs class's own field types and validators, so a new
event type is covered without touching this file, and a field with a validator this file does not
know stops the suite instead of being generated wrongly.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import attrs
import msgpack
import pytest
from attrs import validators
from hypothesis import given, settings
from hypothesis import strategies as st

import inert
import inert.events
from inert import ArgumentsAppended, CallKey, CodecError, Event, ResponseRef, TerminalRef, TurnRef
from inert.events import (
    DEFAULT_CODEC,
    RULES_VERSION,
    CallCancelled,
    CallOpened,
    CancelReason,
    OfferedTool,
    registered_event_types,
)
from inert.events._codec import CONVERTER
from inert.events._identity import MAX_IDENTITY_LENGTH, _identity_component, shared_key
from inert.events._recorded import RecordedEvent, recorded_event_maker
from inert.events._structure import _FIRST_SWEEP, _IDENTITIES, GIVE_UP, fast_structure

# Every stored tag and its schema version. Changing a tag breaks every log written before, so a
# change has to be made here too, on purpose.
EXPECTED_EVENT_TYPES: dict[str, tuple[type[Event], int]] = {
    "ingress.turn_started": (inert.events.TurnStarted, 3),
    "ingress.call_opened": (inert.CallOpened, 1),
    "ingress.arguments_appended": (inert.ArgumentsAppended, 2),
    "ingress.call_ended": (inert.CallEnded, 1),
    "ingress.events_discarded": (inert.events.EventsDiscarded, 1),
    "ingress.response_ended": (inert.ResponseEnded, 1),
    "ingress.stream_lost": (inert.StreamLost, 1),
    "ingress.stream_resumed": (inert.StreamResumed, 1),
    "ingress.text_received": (inert.TextReceived, 1),
    "ingress.server_tool_called": (inert.ServerToolCalled, 1),
    "user.turn_cancelled": (inert.events.TurnCancelled, 1),
    "user.turn_superseded": (inert.events.TurnSuperseded, 1),
    "user.confirmation_given": (inert.events.ConfirmationGiven, 2),
    "user.confirmation_denied": (inert.events.ConfirmationDenied, 1),
    "operator.response_quarantined": (inert.events.ResponseQuarantined, 1),
    "operator.tool_disabled": (inert.events.ToolDisabled, 1),
    "operator.tool_enabled": (inert.events.ToolEnabled, 1),
    "operator.tenant_stopped": (inert.events.TenantStopped, 1),
    "operator.tenant_resumed": (inert.events.TenantResumed, 1),
    "operator.control_refused": (inert.events.ControlRefused, 1),
    "process.turn_leased": (inert.events.TurnLeased, 1),
    "process.heartbeat": (inert.events.ProcessHeartbeat, 1),
    "process.left": (inert.events.ProcessLeft, 1),
    "process.turn_retired": (inert.events.TurnRetired, 1),
    "request.claim": (inert.events.ClaimRequested, 1),
    "request.deadline": (inert.events.DeadlineReached, 1),
    "decision.collecting": (inert.events.CallCollecting, 1),
    "decision.terminal_candidate": (inert.events.CallTerminalCandidate, 1),
    "decision.validated": (inert.events.CallValidated, 2),
    "decision.awaiting_confirmation": (inert.events.CallAwaitingConfirmation, 1),
    "decision.confirmed": (inert.events.CallConfirmed, 2),
    "decision.ready": (inert.events.CallReady, 1),
    "decision.dispatched": (inert.events.CallDispatched, 1),
    "decision.cancelled": (inert.events.CallCancelled, 2),
    "decision.failed": (inert.events.CallFailed, 1),
    "decision.rejected": (inert.events.EventRejected, 1),
    "decision.stop_requested": (inert.events.CallStopRequested, 1),
    "decision.edit_refused": (inert.events.EditRefused, 1),
    "outcome.completed": (inert.events.ExecutionCompleted, 1),
    "outcome.failed": (inert.events.ExecutionFailed, 1),
    "outcome.stopped": (inert.events.ExecutionStopped, 1),
    "outcome.unknown": (inert.events.ExecutionOutcomeUnknown, 2),
    "note.task_created": (inert.events.ExecutionTaskCreated, 1),
    "note.input_requested": (inert.events.ExecutionInputRequested, 1),
    "note.input_given": (inert.events.ExecutionInputGiven, 1),
    "note.input_denied": (inert.events.ExecutionInputDenied, 1),
}

EVENT_TYPES = registered_event_types()
TAGS = sorted(EVENT_TYPES)
VALUE_TYPES: list[type[Any]] = [TurnRef, ResponseRef, CallKey, TerminalRef, OfferedTool]

# --- strategies derived from the attrs classes ---------------------------------------------

MAX_UINT64 = 2**64 - 1
MIN_INT64 = -(2**63)

non_negative = st.integers(min_value=0, max_value=MAX_UINT64)
texts = st.text(max_size=40)
non_empty_texts = st.text(min_size=1, max_size=40)
identity_components = st.one_of(
    st.text(min_size=1, max_size=24),
    # '/' and '%' are what stream names are built with; they must survive as data.
    st.text(alphabet="/%2Fa", min_size=1, max_size=8),
    # The longest allowed, built by repetition: drawing 512 characters one by one is slow.
    st.text(min_size=1, max_size=4).map(
        lambda text: (text * MAX_IDENTITY_LENGTH)[:MAX_IDENTITY_LENGTH]
    ),
)
utc_datetimes = st.datetimes(
    min_value=datetime(1900, 1, 1), max_value=datetime(2200, 12, 31), timezones=st.just(UTC)
)

# The validators of the catalog, with the field type each is used on and what satisfies it.
KNOWN_VALIDATORS: list[tuple[object, object, st.SearchStrategy[Any]]] = [
    (validators.ge(0), int, non_negative),
    (validators.ge(1), int, st.integers(min_value=1, max_value=MAX_UINT64)),
    (validators.optional(validators.ge(0)), int | None, st.none() | non_negative),
    (validators.min_len(1), str, non_empty_texts),
    (_identity_component, str, identity_components),
    (
        validators.and_(validators.ge(1), validators.le(RULES_VERSION)),
        int,
        st.integers(min_value=1, max_value=RULES_VERSION),
    ),
]


def _not_duplicate(reason: CancelReason) -> bool:
    return reason is not CancelReason.DUPLICATE_OF


# Constraints across fields (checked in __attrs_post_init__): the fields named are drawn together.
JOINT_FIELDS: dict[type[Any], tuple[tuple[str, ...], st.SearchStrategy[tuple[Any, ...]]]] = {
    # A terminal reference needs a provider sequence or a non-empty digest.
    TerminalRef: (
        ("sequence", "digest"),
        st.one_of(
            st.tuples(non_negative, st.none() | texts),
            st.tuples(st.none(), non_empty_texts),
        ),
    ),
    # An earlier call named exactly where the call was cancelled as its duplicate.
    CallCancelled: (
        ("reason", "duplicate_of"),
        st.one_of(
            st.tuples(st.sampled_from(CancelReason).filter(_not_duplicate), st.none()),
            st.tuples(st.just(CancelReason.DUPLICATE_OF), st.deferred(lambda: instances(CallKey))),
        ),
    ),
    # Both sequences or neither, and the last never before the first.
    ArgumentsAppended: (
        ("first_sequence", "last_sequence"),
        st.one_of(
            st.tuples(st.none(), st.none()),
            st.tuples(non_negative, non_negative).map(lambda pair: (min(pair), max(pair))),
        ),
    ),
}


def strategy_for_type(annotation: Any) -> st.SearchStrategy[Any]:
    """Values of a field type that has no validator."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin in (types.UnionType, typing.Union):
        return st.one_of([strategy_for_type(option) for option in arguments])
    if origin is tuple and len(arguments) == 2 and arguments[1] is Ellipsis:
        return st.lists(strategy_for_type(arguments[0]), max_size=3).map(tuple)
    if annotation is type(None):
        return st.none()
    if annotation is str:
        return texts
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(min_value=MIN_INT64, max_value=MAX_UINT64)
    if annotation is bytes:
        return st.binary(max_size=64)
    if annotation is datetime:
        return utc_datetimes
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from(annotation)
    if isinstance(annotation, type) and attrs.has(annotation):
        return instances(annotation)
    raise LookupError(f"no strategy for the field type {annotation!r}; teach test_events.py")


def strategy_for_field(cls: type[Any], field: attrs.Attribute[Any], annotation: Any) -> Any:
    """Values of one field that its validator accepts."""
    if field.validator is None:
        return strategy_for_type(annotation)
    for validator, field_type, strategy in KNOWN_VALIDATORS:
        if field.validator == validator:
            assert annotation == field_type, f"{cls.__name__}.{field.name}: {annotation!r}"
            return strategy
    raise LookupError(
        f"{cls.__name__}.{field.name} has a validator this test does not know: "
        f"{field.validator!r}; teach test_events.py"
    )


_INSTANCES: dict[type[Any], st.SearchStrategy[Any]] = {}


def instances(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Valid instances of an attrs class, built without rejection sampling."""
    if cls in _INSTANCES:
        return _INSTANCES[cls]
    hints = typing.get_type_hints(cls)
    joint_names, joint = JOINT_FIELDS.get(cls, ((), st.just(())))
    independent = {
        field.name: strategy_for_field(cls, field, hints[field.name])
        for field in attrs.fields(cls)
        if field.name not in joint_names
    }

    def build(parts: tuple[dict[str, Any], tuple[Any, ...]]) -> Any:
        values, joint_values = parts
        return cls(**values, **dict(zip(joint_names, joint_values, strict=True)))

    strategy = st.tuples(st.fixed_dictionaries(independent), joint).map(build)
    _INSTANCES[cls] = strategy
    return strategy


def events(cls: type[Event]) -> st.SearchStrategy[Event]:
    """Valid instances of one event class."""
    return instances(cls)


# Values where coercions hide: empties, zeros, booleans, lookalikes of other types.
PLAIN_WRONG_VALUES: list[Any] = [
    None,
    False,
    True,
    0,
    1,
    -1,
    0.0,
    1.0,
    "",
    "1",
    "true",
    b"",
    b"1",
    [],
    [1],
    {},
    [{}],
    MAX_UINT64,
]

# Any value msgpack can carry, for payloads that a writer other than inert might have stored.
msgpack_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=MIN_INT64, max_value=MAX_UINT64)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children)
    ),
    max_leaves=6,
)


def typed(value: Any) -> Any:
    """A msgpack value with the type of every part kept, so that ``1 != True != 1.0 != "1"``."""
    if isinstance(value, dict):
        return ("map", tuple(sorted((key, typed(item)) for key, item in value.items())))
    if isinstance(value, list):
        return ("array", tuple(typed(item) for item in value))
    return (type(value).__name__, value)


def unpack(payload: bytes) -> dict[str, Any]:
    fields: dict[str, Any] = msgpack.unpackb(payload, raw=False)
    return fields


def pack(fields: dict[str, Any]) -> bytes:
    payload: bytes = msgpack.packb(fields, use_bin_type=True)
    return payload


# --- tests ---------------------------------------------------------------------------------


def test_the_registered_tags_are_exactly_the_pinned_ones() -> None:
    """The registry holds exactly the pinned tags, classes and schema versions."""
    registered = {tag: (cls, cls.SCHEMA_VERSION) for tag, cls in EVENT_TYPES.items()}
    assert registered == EXPECTED_EVENT_TYPES
    assert all(tag == cls.TAG for tag, cls in EVENT_TYPES.items())
    assert set(DEFAULT_CODEC.event_types) == set(EXPECTED_EVENT_TYPES)


@pytest.mark.parametrize("tag", TAGS)
@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_every_event_type_round_trips_through_the_codec(tag: str, data: st.DataObject) -> None:
    """decode(encode(event)) equals the event, stored under the class's own tag and version."""
    cls = EVENT_TYPES[tag]
    event = data.draw(events(cls), label="event")
    encoded_tag, version, payload = DEFAULT_CODEC.encode(event)
    assert encoded_tag == cls.TAG == tag
    assert version == cls.SCHEMA_VERSION
    assert type(payload) is bytes
    decoded = DEFAULT_CODEC.decode(encoded_tag, version, payload)
    assert type(decoded) is cls
    assert decoded == event
    for field in attrs.fields(cls):
        value = getattr(decoded, field.name)
        if isinstance(value, datetime):
            assert value.tzinfo is UTC
    # Encoding is deterministic: the decoded event is stored as the very same bytes.
    assert DEFAULT_CODEC.encode(decoded) == (encoded_tag, version, payload)


SENSITIVE_TAGS = [tag for tag in TAGS if EVENT_TYPES[tag].SENSITIVE]


def emptied_by_decoding(tag: str, schema_version: int, payload: bytes) -> tuple[int, bytes]:
    """The reference: decode, empty the sensitive fields, encode again."""
    event = inert.events.without_sensitive(DEFAULT_CODEC.decode(tag, schema_version, payload))
    _, version, remains = DEFAULT_CODEC.encode(event)
    return version, remains


@pytest.mark.parametrize("tag", SENSITIVE_TAGS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_emptying_a_payload_in_its_map_is_decoding_emptying_and_encoding_it(
    tag: str, data: st.DataObject
) -> None:
    """What the codec keeps of an event with sensitive fields, emptied in its stored map, is
    the very payload that decoding it, emptying them and encoding it again gives."""
    event = data.draw(events(EVENT_TYPES[tag]), label="event")
    _, version, payload = DEFAULT_CODEC.encode(event)
    assert DEFAULT_CODEC.without_sensitive(tag, version, payload) == emptied_by_decoding(
        tag, version, payload
    )


def test_an_older_payload_is_emptied_once_upcast() -> None:
    """A payload of an older schema version is upcast before its sensitive fields are emptied,
    and kept at the current version; one that is no map is refused as decoding refuses it."""
    key = CallKey(tenant="t", conversation="c", turn="u", response="r", item="i", call="a")
    fields = {
        "key": unpack(DEFAULT_CODEC.encode(ArgumentsAppended(key=key, data=b"x"))[2])["key"],
        "cause": 1,
        "tool": "t",
        "tool_digest": "d",
        "arguments": b'{"pin": 1}',
        "arguments_digest": "a",
        "needs_confirmation": False,
    }
    older = pack(fields)
    version, remains = DEFAULT_CODEC.without_sensitive("decision.validated", 1, older)
    assert (version, remains) == emptied_by_decoding("decision.validated", 1, older)
    assert version == EVENT_TYPES["decision.validated"].SCHEMA_VERSION
    assert unpack(remains)["arguments"] == b""
    with pytest.raises(CodecError, match="a map was expected"):
        DEFAULT_CODEC.without_sensitive("decision.validated", 2, msgpack.packb([1]))


def check_accepted_payload_is_canonical(tag: str, fields: dict[str, Any]) -> None:
    """Decoding gives a CodecError naming the tag, or an event that is stored as ``fields``."""
    cls = EVENT_TYPES[tag]
    decoded: Event | CodecError
    try:
        decoded = DEFAULT_CODEC.decode(tag, cls.SCHEMA_VERSION, pack(fields))
    except CodecError as error:
        decoded = error
    if isinstance(decoded, CodecError):
        assert repr(tag) in str(decoded)
    else:
        assert type(decoded) is cls
        assert typed(unpack(DEFAULT_CODEC.encode(decoded)[2])) == typed(fields), fields


FIELDS = [(tag, field.name) for tag in TAGS for field in attrs.fields(EVENT_TYPES[tag])]


@pytest.mark.parametrize(("tag", "name"), FIELDS, ids=[f"{tag}.{name}" for tag, name in FIELDS])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_a_payload_the_codec_accepts_is_one_it_would_write(
    tag: str, name: str, data: st.DataObject
) -> None:
    """A field, or a part of one, holding another value is refused or read exactly, not coerced."""
    # Caught, while this was written, cattrs' coercions: 5 read as "5", True as 1, 1 as True,
    # [1, 2] as bytes, and "", b"" or {} as an empty tuple of tools.
    fields = unpack(DEFAULT_CODEC.encode(data.draw(events(EVENT_TYPES[tag]), label="event"))[2])
    for value in [*PLAIN_WRONG_VALUES, data.draw(msgpack_values, label="value")]:
        check_accepted_payload_is_canonical(tag, {**fields, name: value})
        if isinstance(fields[name], dict):
            for part in fields[name]:
                check_accepted_payload_is_canonical(
                    tag, {**fields, name: {**fields[name], part: value}}
                )


@pytest.mark.parametrize(("tag", "name"), FIELDS, ids=[f"{tag}.{name}" for tag, name in FIELDS])
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_the_generated_structuring_builds_what_the_converter_builds(
    tag: str, name: str, data: st.DataObject
) -> None:
    """The generated fast path reads a payload as written, and any spoilt one either exactly as
    the converter does or not at all (leaving it to the converter)."""
    cls = EVENT_TYPES[tag]
    fast = fast_structure(cls)
    assert fast is not None, f"{cls.__name__} has a field type the generator does not know"
    fields = unpack(DEFAULT_CODEC.encode(data.draw(events(cls), label="event"))[2])
    assert fast(fields) == CONVERTER.structure(fields, cls)
    for value in [*PLAIN_WRONG_VALUES, data.draw(msgpack_values, label="value")]:
        spoilt = [
            {**fields, name: value},
            {other: kept for other, kept in fields.items() if other != name},
            {**fields, f"{name}_": value},
        ]
        if isinstance(fields[name], dict):
            spoilt.extend({**fields, name: {**fields[name], part: value}} for part in fields[name])
        for payload in spoilt:
            built = fast(payload)
            if built is not GIVE_UP:
                assert type(built) is cls
                assert built == CONVERTER.structure(payload, cls), payload


def test_the_strategies_cover_the_boundaries_of_the_validators() -> None:
    """The generated values include the smallest and largest values the validators allow."""
    # Guards the strategies themselves: were they to draw only easy values, the round trip would
    # prove little.
    seen: dict[str, set[object]] = {"sequence": set(), "lengths": set(), "digest": set()}

    # Derandomized: a guard of the strategies must not pass or fail by the luck of a run.
    @settings(max_examples=300, deadline=None, derandomize=True, database=None)
    @given(key=instances(CallKey), terminal=instances(TerminalRef))
    def draw(key: CallKey, terminal: TerminalRef) -> None:
        seen["lengths"].update(len(part) for part in key._parts())
        seen["sequence"].add(terminal.sequence)
        seen["digest"].add(terminal.digest)

    draw()
    assert {1, MAX_IDENTITY_LENGTH} <= seen["lengths"]
    assert {None, 0} <= seen["sequence"]
    assert {None, ""} <= seen["digest"]


@pytest.mark.parametrize(
    "cls", [EVENT_TYPES[tag] for tag in TAGS] + VALUE_TYPES, ids=lambda cls: cls.__name__
)
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_event_classes_are_frozen_slotted_and_keyword_only(
    cls: type[Any], data: st.DataObject
) -> None:
    """Every event and value class is an immutable slotted attrs class taking keywords only."""
    instance = data.draw(instances(cls), label="instance")
    assert "__slots__" in vars(cls)
    assert not hasattr(instance, "__dict__")
    fields = attrs.fields(cls)
    assert all(field.kw_only for field in fields)
    values = {field.name: getattr(instance, field.name) for field in fields}
    for name, value in values.items():
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            setattr(instance, name, value)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(instance, "not_a_field", 1)  # noqa: B010 - the name is not an attribute
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        delattr(instance, fields[0].name)
    assert values == {field.name: getattr(instance, field.name) for field in fields}
    construct: Callable[..., Any] = cls
    with pytest.raises(TypeError, match="positional argument"):
        construct(*values.values())
    assert construct(**values) == instance


def test_an_identity_written_in_another_field_order_is_not_taken_for_a_known_one() -> None:
    """Identities are interned by their values only in the codec's field order: the same
    values under other fields build the identity those fields say."""
    structure = fast_structure(CallKey)
    assert structure is not None
    names = ("tenant", "conversation", "turn", "response", "item", "call")
    values = ("a", "b", "c", "d", "e", "f")
    known = structure(dict(zip(names, values, strict=True)))
    assert known == CallKey(**dict(zip(names, values, strict=True)))
    assert structure(dict(zip(names, values, strict=True))) is known
    swapped = structure(dict(zip(reversed(names), values, strict=True)))
    assert swapped == CallKey(**dict(zip(reversed(names), values, strict=True)))
    assert swapped.tenant == "f"


def test_a_shared_key_is_the_one_decoded_events_of_its_call_name() -> None:
    """``shared_key`` keeps the first of equal keys: events of that call decoded afterwards
    name that very object, and an equal key shared later gets it back."""
    key = CallKey(tenant="shared", conversation="b", turn="c", response="d", item="e", call="fed")
    assert shared_key(key) is key
    decoded = DEFAULT_CODEC.decode(*DEFAULT_CODEC.encode(CallOpened(key=key, tool="t")))
    assert isinstance(decoded, CallOpened)
    assert decoded.key is key
    assert shared_key(attrs.evolve(key)) is key


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_the_recorded_event_maker_makes_what_the_class_makes(data: st.DataObject) -> None:
    """``recorded_event_maker`` (the replay's way to make an envelope) makes a
    ``RecordedEvent`` equal, field by field, to the one its ``__init__`` makes."""
    event = data.draw(instances(EVENT_TYPES[data.draw(st.sampled_from(TAGS))]))
    fields = {
        "position": data.draw(st.integers(min_value=1)),
        "event_id": data.draw(st.text()),
        "stream": data.draw(st.text()),
        "version": data.draw(st.integers(min_value=1)),
        "recorded_at": data.draw(st.datetimes(timezones=st.just(UTC))),
        "event_type": event.TAG,
        "schema_version": event.SCHEMA_VERSION,
        "trace": None,
        "event": event,
    }
    made = recorded_event_maker()(*fields.values())
    assert type(made) is RecordedEvent
    assert attrs.asdict(made, recurse=False) == fields
    assert made == RecordedEvent(**fields)


@attrs.frozen(kw_only=True)
class _Passing:
    """An identity of its own for the tests of the tables: its table holds what they decode
    alone, whatever other tests decoded before in the same process."""

    tenant: str
    turn: str


def test_the_identity_tables_follow_what_is_alive() -> None:
    """Decoding many more distinct identities than a table sweeps at, none of them kept, leaves
    the table within a sweep's threshold: what the tables hold does not grow with the history
    decoded."""
    structure = fast_structure(_Passing)
    assert structure is not None
    for index in range(5 * _FIRST_SWEEP):
        assert isinstance(structure(_payload("passing", index)), _Passing)
        assert len(_IDENTITIES[_Passing]) <= _FIRST_SWEEP
    last = _payload("passing", 5 * _FIRST_SWEEP)
    assert structure(dict(last)) is structure(dict(last))


def test_an_identity_something_holds_stays_the_one_decoded() -> None:
    """However many other identities are decoded and dropped meanwhile, the one a live call
    holds is the object every later event of its value decodes to."""
    structure = fast_structure(_Passing)
    assert structure is not None
    held = structure(_payload("held", 0))
    for index in range(1, 3 * _FIRST_SWEEP):
        structure(_payload("held", index))
    assert structure(_payload("held", 0)) is held
    assert len(_IDENTITIES[_Passing]) <= _FIRST_SWEEP


def _payload(tenant: str, index: int) -> dict[str, str]:
    return {"tenant": tenant, "turn": f"turn-{index}"}
