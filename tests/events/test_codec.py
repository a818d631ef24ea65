"""The codec: every failure is a CodecError naming the tag, nothing is coerced, old payloads upcast.

The test-only event classes here carry ``TAG`` and ``SCHEMA_VERSION`` as plain class attributes and
are given to a ``Codec`` of their own: ``event_type`` would register them with every codec.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

import attrs
import msgpack
import pytest
from attrs import frozen
from hypothesis import example, given, settings
from hypothesis import strategies as st

from inert import (
    ArgumentsAppended,
    CallKey,
    CallOpened,
    CodecError,
    Event,
    InertError,
    StreamLost,
    TerminalRef,
    TextReceived,
    TurnRef,
)
from inert.events import (
    DEFAULT_CODEC,
    CallAwaitingConfirmation,
    CallCancelled,
    CallTerminalCandidate,
    CancelReason,
    Codec,
    OfferedTool,
    ToolDisabled,
    TurnStarted,
    event_type,
    registered_event_types,
)

TAGS = sorted(registered_event_types())

KEY = CallKey(tenant="t", conversation="c", turn="u", response="r", item="i", call="k")
RESPONSE = KEY.response_ref
EXPIRES = datetime(2030, 5, 17, 12, 30, 15, 123456, tzinfo=UTC)

# One event for each kind of field the catalog uses; their encoded maps are mutated below.
SAMPLES: dict[str, Event] = {
    event.TAG: event
    for event in [
        CallOpened(key=KEY, tool="get_weather", sequence=3),
        TextReceived(response=RESPONSE, characters=12),
        StreamLost(response=RESPONSE, resumable=True, last_sequence=7),
        ToolDisabled(tool="delete_files", tenant="t", operator="ops", reason="incident"),
        ArgumentsAppended(
            key=KEY, data=b'{"city":', first_sequence=4, last_sequence=5, fragments=2
        ),
        CallCancelled(key=KEY, cause=9, reason=CancelReason.SUPERSEDED),
        CallAwaitingConfirmation(
            key=KEY, cause=9, arguments_digest="sha256:ab", expires_at=EXPIRES
        ),
        TurnStarted(
            turn=KEY.turn_ref,
            principal="user-1",
            tools=(OfferedTool(name="get_weather", digest="sha256:cd"),),
        ),
    ]
}


def pack(value: object) -> bytes:
    payload: bytes = msgpack.packb(value, use_bin_type=True)
    return payload


def fields_of(tag: str) -> dict[str, Any]:
    """The encoded field map of the sample event of ``tag``, ready to be spoilt."""
    fields: dict[str, Any] = msgpack.unpackb(DEFAULT_CODEC.encode(SAMPLES[tag])[2], raw=False)
    return fields


def decode_error(
    tag: str, payload: bytes, version: int | None = None, codec: Codec = DEFAULT_CODEC
) -> str:
    """The message of the CodecError that decoding raises (at the tag's current schema version
    unless given); it always names the tag."""
    if version is None:
        cls = codec.event_types.get(tag)
        version = 1 if cls is None else cls.SCHEMA_VERSION
    with pytest.raises(CodecError) as caught:
        codec.decode(tag, version, payload)
    message = str(caught.value)
    assert repr(tag) in message
    return message


# --- tags, versions and bytes --------------------------------------------------------------


def test_the_samples_decode_back_unchanged() -> None:
    """The unspoilt sample payloads decode to their events, so every refusal below is earned."""
    for tag, event in SAMPLES.items():
        assert DEFAULT_CODEC.decode(tag, type(event).SCHEMA_VERSION, pack(fields_of(tag))) == event


def test_an_unknown_tag_is_a_codec_error() -> None:
    """A tag no class is registered under is a CodecError naming that tag."""
    payload = pack(fields_of("ingress.call_opened"))
    for tag in ["ingress.call_openned", "", "Ingress.Call_Opened", "ingress"]:
        decode_error(tag, payload)


@pytest.mark.parametrize("version", [0, -1, 2, 1_000_000], ids=lambda version: f"v{version}")
def test_a_schema_version_outside_the_known_ones_is_a_codec_error(version: int) -> None:
    """Version 0, a negative one or one above the class's own is refused, naming the version."""
    message = decode_error("ingress.call_opened", pack(fields_of("ingress.call_opened")), version)
    assert str(version) in message
    assert "1..1" in message


@settings(max_examples=200, deadline=None)
@given(tag=st.sampled_from(TAGS), payload=st.binary(max_size=64))
@example(tag="ingress.call_opened", payload=b"")
@example(tag="ingress.call_opened", payload=b"\xc1")  # a byte msgpack never uses
@example(tag="ingress.call_opened", payload=b"\x81\xa1")  # truncated inside a key
@example(tag="ingress.call_opened", payload=b"\x80\x80")  # a map followed by extra data
@example(tag="ingress.call_opened", payload=b"\x81\xa1\xff\x01")  # a key that is not UTF-8
@example(tag="ingress.call_opened", payload=b"\x81\x01\x01")  # an integer key
@example(tag="ingress.call_opened", payload=b"\xd6\xff\x00\x00\x00\x00")  # a msgpack timestamp
def test_arbitrary_bytes_decode_to_the_tags_class_or_raise_codec_error(
    tag: str, payload: bytes
) -> None:
    """Whatever the bytes, decoding gives an event of the tag's class or a CodecError."""
    outcome: Event | CodecError
    try:
        outcome = DEFAULT_CODEC.decode(tag, 1, payload)
    except CodecError as error:
        outcome = error
    if isinstance(outcome, CodecError):
        assert repr(tag) in str(outcome)
    else:
        assert type(outcome) is registered_event_types()[tag]


@pytest.mark.parametrize(
    "payload",
    [pack([]), pack(["key", "tool"]), pack(5), pack("map"), pack(None), pack(b"\x80"), pack(True)],
    ids=["empty array", "array", "int", "str", "nil", "bin", "bool"],
)
def test_msgpack_that_is_not_a_map_is_a_codec_error(payload: bytes) -> None:
    """A payload that is valid msgpack but not a map is a CodecError, not an AttributeError."""
    assert "map" in decode_error("ingress.call_opened", payload)


def test_a_corrupt_payload_keeps_the_original_error_as_its_cause() -> None:
    """The msgpack error behind a corrupt payload is kept as ``__cause__``."""
    with pytest.raises(CodecError) as caught:
        DEFAULT_CODEC.decode("ingress.call_opened", 1, b"\xc1")
    assert caught.value.__cause__ is not None
    assert not isinstance(caught.value.__cause__, InertError)


# --- fields --------------------------------------------------------------------------------


def test_a_missing_field_is_a_codec_error() -> None:
    """A payload without a required field is a CodecError naming the field."""
    fields = fields_of("ingress.call_opened")
    del fields["tool"]
    assert "tool" in decode_error("ingress.call_opened", pack(fields))


def test_a_missing_field_inside_an_identity_is_a_codec_error() -> None:
    """A call key without one of its components is a CodecError naming the component."""
    fields = fields_of("ingress.call_opened")
    del fields["key"]["item"]
    assert "item" in decode_error("ingress.call_opened", pack(fields))


def test_a_missing_field_with_a_default_takes_the_default() -> None:
    """A field left out that has a default decodes to that default."""
    fields = fields_of("ingress.call_opened")
    del fields["sequence"]
    decoded = DEFAULT_CODEC.decode("ingress.call_opened", 1, pack(fields))
    assert decoded == CallOpened(key=KEY, tool="get_weather", sequence=None)


@pytest.mark.parametrize("where", ["event", "key"])
def test_an_extra_field_is_a_codec_error(where: str) -> None:
    """A field the class does not have, at the top or in a nested identity, is a CodecError."""
    fields = fields_of("ingress.call_opened")
    (fields if where == "event" else fields["key"])["priority"] = 1
    assert "priority" in decode_error("ingress.call_opened", pack(fields))


WRONG_TYPES = [
    pytest.param("ingress.call_opened", "tool", 5, id="str given an int"),
    pytest.param("ingress.call_opened", "tool", b"get_weather", id="str given bytes"),
    pytest.param("ingress.call_opened", "tool", None, id="str given nil"),
    pytest.param("operator.tool_disabled", "tenant", 5, id="optional str given an int"),
    pytest.param("ingress.text_received", "characters", "5", id="int given a str"),
    pytest.param("ingress.text_received", "characters", True, id="int given true"),
    pytest.param("ingress.text_received", "characters", 5.0, id="int given a float"),
    pytest.param("ingress.call_opened", "sequence", True, id="optional int given true"),
    pytest.param("ingress.call_opened", "sequence", "3", id="optional int given a str"),
    pytest.param("ingress.stream_lost", "resumable", 1, id="bool given an int"),
    pytest.param("ingress.stream_lost", "resumable", "false", id="bool given a str"),
    pytest.param("ingress.arguments_appended", "data", "{}", id="bytes given a str"),
    pytest.param("ingress.arguments_appended", "data", 3, id="bytes given an int"),
    pytest.param("ingress.arguments_appended", "data", [123, 125], id="bytes given an array"),
    pytest.param("ingress.call_opened", "key", "t/c/u/r/i/k", id="identity given a str"),
    pytest.param("ingress.call_opened", "key", [], id="identity given an array"),
    pytest.param("decision.cancelled", "reason", "no_longer_wanted", id="enum given a non-member"),
    pytest.param("decision.cancelled", "reason", "SUPERSEDED", id="enum given a member's name"),
    pytest.param("decision.cancelled", "reason", 1, id="enum given an int"),
    pytest.param("decision.cancelled", "reason", b"superseded", id="enum given bytes"),
    pytest.param(
        "decision.awaiting_confirmation", "expires_at", 1.9e15, id="datetime given a float"
    ),
    pytest.param("decision.awaiting_confirmation", "expires_at", True, id="datetime given true"),
    pytest.param(
        "decision.awaiting_confirmation",
        "expires_at",
        "2030-05-17T12:30:15+00:00",
        id="datetime given an ISO string",
    ),
    pytest.param(
        "decision.awaiting_confirmation", "expires_at", 2**62, id="datetime beyond year 9999"
    ),
    pytest.param("ingress.turn_started", "tools", None, id="tuple given nil"),
    pytest.param("ingress.turn_started", "tools", "ab", id="tuple given a str"),
    pytest.param("ingress.turn_started", "tools", [{"name": "x"}], id="tuple item missing a field"),
    # cattrs alone turns any empty iterable into an empty tuple: "no tools" from a damaged field.
    pytest.param("ingress.turn_started", "tools", "", id="tuple given an empty str"),
    pytest.param("ingress.turn_started", "tools", b"", id="tuple given empty bytes"),
    pytest.param("ingress.turn_started", "tools", {}, id="tuple given an empty map"),
]


@pytest.mark.parametrize(("tag", "name", "value"), WRONG_TYPES)
def test_a_field_of_the_wrong_type_is_a_codec_error_not_a_coercion(
    tag: str, name: str, value: object
) -> None:
    """A field holding a value of another type (or out of range) is refused, never converted."""
    fields = fields_of(tag)
    fields[name] = value
    assert name in decode_error(tag, pack(fields))


@pytest.mark.parametrize(
    ("tag", "name", "value"),
    [
        ("ingress.arguments_appended", "fragments", 0),
        ("ingress.arguments_appended", "offset", -1),
        ("ingress.arguments_appended", "last_sequence", 3),
        ("ingress.arguments_appended", "last_sequence", None),
        ("ingress.call_opened", "sequence", -1),
        ("ingress.text_received", "characters", -1),
    ],
)
def test_a_value_the_class_validators_refuse_is_a_codec_error(
    tag: str, name: str, value: object
) -> None:
    """A stored value of the right type that the class would refuse is a CodecError."""
    # The message names the tag and the class, not the field: cattrs reports a validator's
    # refusal as "invalid value @ ArgumentsAppended" (see the report).
    fields = fields_of(tag)
    fields[name] = value
    decode_error(tag, pack(fields))


@pytest.mark.parametrize(
    ("component", "value"), [("tenant", 5), ("call", ""), ("item", "x" * 513), ("turn", None)]
)
def test_an_invalid_identity_component_in_a_payload_is_a_codec_error(
    component: str, value: object
) -> None:
    """A stored call key whose component the identity would refuse is a CodecError."""
    fields = fields_of("ingress.call_opened")
    fields["key"][component] = value
    assert "key" in decode_error("ingress.call_opened", pack(fields))


# --- datetimes -----------------------------------------------------------------------------


def test_a_datetime_is_stored_as_integer_microseconds_since_the_epoch() -> None:
    """A datetime is written as an integer count of microseconds in UTC, exactly."""
    fields = fields_of("decision.awaiting_confirmation")
    assert fields["expires_at"] == 1_905_251_415_123_456
    assert type(fields["expires_at"]) is int


def test_a_naive_datetime_is_refused_at_encode_time() -> None:
    """Encoding an event holding a naive datetime is a CodecError, not a guess at its zone."""
    event = CallAwaitingConfirmation(
        key=KEY, cause=9, arguments_digest="sha256:ab", expires_at=datetime(2030, 5, 17, 12, 30)
    )
    with pytest.raises(CodecError, match="naive datetime"):
        DEFAULT_CODEC.encode(event)
    # The message names neither the tag nor the field (see the report); only the cause is checked.


def test_an_aware_datetime_in_another_zone_decodes_to_the_same_instant_in_utc() -> None:
    """A datetime with an offset is stored as its instant and read back in UTC."""
    plus_two = timezone(timedelta(hours=2))
    event = CallAwaitingConfirmation(
        key=KEY,
        cause=9,
        arguments_digest="d",
        expires_at=datetime(2030, 5, 17, 14, 30, 15, 1, plus_two),
    )
    decoded = DEFAULT_CODEC.decode(*DEFAULT_CODEC.encode(event))
    assert isinstance(decoded, CallAwaitingConfirmation)
    assert decoded.expires_at == event.expires_at
    assert decoded.expires_at.tzinfo is UTC
    assert decoded.expires_at == datetime(2030, 5, 17, 12, 30, 15, 1, UTC)


offsets = st.builds(
    timezone, st.timedeltas(min_value=timedelta(hours=-23), max_value=timedelta(hours=23))
)


@settings(max_examples=100, deadline=None)
@given(moment=st.datetimes(timezones=offsets))
# An aware datetime whose UTC instant lies outside datetime's range (0001-01-01 00:00 at +05:00
# is still in year 0 in UTC) must be refused at encode time: its payload could never be decoded.
@example(moment=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))))
@example(moment=datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5))))
def test_every_datetime_that_encodes_decodes_again(moment: datetime) -> None:
    """An event either is refused at encode time or its payload decodes to an equal event."""
    event = CallAwaitingConfirmation(key=KEY, cause=9, arguments_digest="d", expires_at=moment)
    try:
        stored = DEFAULT_CODEC.encode(event)
    except CodecError:
        return
    assert DEFAULT_CODEC.decode(*stored) == event


# --- encoding ------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [2**64, 2**100], ids=["2**64", "2**100"])
def test_an_integer_msgpack_cannot_hold_is_a_codec_error_at_encode_time(size: int) -> None:
    """An integer beyond 64 bits is refused at encode time with a CodecError naming the tag."""
    event = CallTerminalCandidate(
        key=KEY,
        cause=9,
        terminal=TerminalRef(sequence=1),
        fragments=1,
        size=size,
        arguments_digest="d",
    )
    with pytest.raises(CodecError, match=re.escape("decision.terminal_candidate")):
        DEFAULT_CODEC.encode(event)


def test_a_string_that_is_not_unicode_is_a_codec_error_at_encode_time() -> None:
    """A lone surrogate, which UTF-8 cannot carry, is refused at encode time with a CodecError."""
    with pytest.raises(CodecError, match=re.escape("ingress.call_opened")):
        DEFAULT_CODEC.encode(CallOpened(key=KEY, tool="get_\ud800weather"))


@frozen(kw_only=True)
class Unlisted(Event):
    """A test-only event that no codec but its own knows."""

    TAG: ClassVar[str] = "test.unlisted"
    SCHEMA_VERSION: ClassVar[int] = 1

    note: str


def test_encoding_an_event_class_the_codec_does_not_know_is_a_codec_error() -> None:
    """An event of a class outside the codec's types is refused, naming the class."""
    with pytest.raises(CodecError, match="Unlisted"):
        DEFAULT_CODEC.encode(Unlisted(note="x"))
    with pytest.raises(CodecError, match="CallOpened"):
        Codec(event_types={Unlisted.TAG: Unlisted}).encode(SAMPLES["ingress.call_opened"])
    own = Codec(event_types={Unlisted.TAG: Unlisted})
    assert own.decode(*own.encode(Unlisted(note="x"))) == Unlisted(note="x")
    assert Unlisted.TAG not in registered_event_types()
    decode_error(Unlisted.TAG, pack({"note": "x"}))


# --- upcasting -----------------------------------------------------------------------------


@frozen(kw_only=True)
class Renamed(Event):
    """A test-only event at schema version 3.

    Version 1 stored ``{"name": str}``; version 2 renamed it to ``title``; version 3 added
    ``count``.
    """

    TAG: ClassVar[str] = "test.renamed"
    SCHEMA_VERSION: ClassVar[int] = 3

    title: str
    count: int


def one_to_two(fields: dict[str, Any]) -> dict[str, Any]:
    return {"title": fields.pop("name"), **fields}


def two_to_three(fields: dict[str, Any]) -> dict[str, Any]:
    return {**fields, "count": 0}


def renamed_codec(*steps: int) -> tuple[Codec, list[int]]:
    """A codec of ``Renamed`` with the upcasters from the given versions, and a log of calls."""
    upcasters = {1: one_to_two, 2: two_to_three}
    calls: list[int] = []
    codec = Codec(event_types={Renamed.TAG: Renamed})
    for step in steps:

        def upcast(fields: dict[str, Any], step: int = step) -> dict[str, Any]:
            calls.append(step)
            return upcasters[step](fields)

        codec.register_upcaster(Renamed.TAG, step, upcast)
    return codec, calls


@pytest.mark.parametrize(
    ("version", "fields", "steps"),
    [
        (1, {"name": "old"}, [1, 2]),
        (2, {"title": "old"}, [2]),
        (3, {"title": "old", "count": 0}, []),
    ],
    ids=["v1", "v2", "v3"],
)
def test_an_old_payload_is_upcast_step_by_step_to_the_current_class(
    version: int, fields: dict[str, Any], steps: list[int]
) -> None:
    """A payload of version n goes through the upcasters n, n+1, ... once each, in order."""
    codec, calls = renamed_codec(2, 1)
    assert codec.decode(Renamed.TAG, version, pack(fields)) == Renamed(title="old", count=0)
    assert calls == steps


def test_the_current_version_is_written() -> None:
    """An upcasting codec writes the class's current version, which decodes without upcasting."""
    codec, calls = renamed_codec(1, 2)
    tag, version, payload = codec.encode(Renamed(title="new", count=4))
    assert (tag, version) == ("test.renamed", 3)
    assert codec.decode(tag, version, payload) == Renamed(title="new", count=4)
    assert calls == []


@pytest.mark.parametrize(("present", "missing"), [((2,), 1), ((1,), 2), ((), 1)])
def test_a_missing_upcasting_step_is_a_codec_error_naming_the_versions(
    present: tuple[int, ...], missing: int
) -> None:
    """Without an upcaster for one step, an older payload is a CodecError naming that step."""
    codec, _ = renamed_codec(*present)
    message = decode_error(Renamed.TAG, pack({"name": "old"}), version=1, codec=codec)
    assert f"version {missing} into version {missing + 1}" in message


def test_an_upcaster_that_raises_gives_a_codec_error() -> None:
    """An upcaster's own exception becomes a CodecError naming the tag and version, as cause."""
    codec, _ = renamed_codec(2)
    codec.register_upcaster(Renamed.TAG, 1, one_to_two)
    with pytest.raises(CodecError) as caught:
        codec.decode(Renamed.TAG, 1, pack({"title": "already renamed?"}))
    assert "'test.renamed'" in str(caught.value)
    assert "from version 1" in str(caught.value)
    assert isinstance(caught.value.__cause__, KeyError)


def test_an_upcaster_that_returns_a_wrong_map_gives_a_codec_error() -> None:
    """What an upcaster returns is decoded as strictly as a stored payload."""
    codec = Codec(event_types={Renamed.TAG: Renamed})
    codec.register_upcaster(Renamed.TAG, 1, lambda fields: {**fields, "count": "0"})
    codec.register_upcaster(Renamed.TAG, 2, lambda fields: fields)
    assert "count" in decode_error(Renamed.TAG, pack({"title": "t"}), version=1, codec=codec)


def test_registering_an_upcaster_for_an_unknown_tag_is_a_codec_error() -> None:
    """An upcaster for a tag the codec does not hold is refused, naming the tag."""
    codec = Codec(event_types={Renamed.TAG: Renamed})
    with pytest.raises(CodecError, match=re.escape("ingress.call_opened")):
        codec.register_upcaster("ingress.call_opened", 1, two_to_three)
    with pytest.raises(CodecError, match=re.escape("test.renamed")):
        DEFAULT_CODEC.register_upcaster(Renamed.TAG, 1, one_to_two)


@pytest.mark.parametrize("from_version", [0, -1, 3, 4])
def test_registering_an_upcaster_from_an_out_of_range_version_is_a_codec_error(
    from_version: int,
) -> None:
    """An upcaster must start from a version in 1..SCHEMA_VERSION-1."""
    codec = Codec(event_types={Renamed.TAG: Renamed})
    with pytest.raises(CodecError, match=r"test\.renamed.*1\.\.2"):
        codec.register_upcaster(Renamed.TAG, from_version, two_to_three)


def test_an_event_at_version_one_takes_no_upcaster() -> None:
    """A class still at schema version 1 has no version to upcast from."""
    with pytest.raises(CodecError, match=re.escape("ingress.call_opened")):
        Codec().register_upcaster("ingress.call_opened", 1, two_to_three)


def test_registering_an_upcaster_twice_is_a_codec_error_and_keeps_the_first() -> None:
    """A second upcaster for the same step is refused; the first stays in use."""
    codec, calls = renamed_codec(1, 2)
    with pytest.raises(CodecError, match=r"test\.renamed.*version 1"):
        codec.register_upcaster(Renamed.TAG, 1, lambda fields: {"title": "second"})
    assert codec.decode(Renamed.TAG, 1, pack({"name": "old"})) == Renamed(title="old", count=0)
    assert calls == [1, 2]


def test_a_value_refused_by_a_validator_names_the_field_and_the_rule() -> None:
    """A decode error from a class validator says which field broke which rule."""
    payload = msgpack.packb(
        {"key": attrs.asdict(KEY), "data": b"x", "fragments": 0}, use_bin_type=True
    )
    with pytest.raises(CodecError, match=r"'fragments' must be >= 1"):
        DEFAULT_CODEC.decode("ingress.arguments_appended", 1, payload)


def test_a_schema_1_fragment_is_read_as_an_unpositioned_fragment() -> None:
    """A fragment written by schema 1 (no offset) decodes through the built-in upcaster, in
    every codec, as a fragment placed by its sequences (``offset=None``)."""
    fields = {
        "key": attrs.asdict(KEY),
        "data": b"{}",
        "first_sequence": 4,
        "last_sequence": 5,
        "fragments": 2,
    }
    expected = ArgumentsAppended(
        key=KEY, data=b"{}", first_sequence=4, last_sequence=5, fragments=2
    )
    for codec in (DEFAULT_CODEC, Codec()):
        assert codec.decode("ingress.arguments_appended", 1, pack(fields)) == expected
    assert ArgumentsAppended.SCHEMA_VERSION == 2
    assert DEFAULT_CODEC.encode(expected)[1] == 2


def test_turns_and_cancellations_written_before_one_action_per_intent_read_as_they_were() -> None:
    """A schema 2 turn's tools run every call (``one_action_per_intent=None``), and a schema 1
    cancellation names no earlier call."""
    turn = TurnRef(tenant="acme", conversation="c", turn="t")
    fields = {
        "turn": attrs.asdict(turn),
        "principal": "user:alice",
        "tools": [{"name": "get_weather", "digest": "sha256:cd"}],
        "rules": 4,
    }
    decoded = DEFAULT_CODEC.decode("ingress.turn_started", 2, pack(fields))
    assert isinstance(decoded, TurnStarted)
    assert decoded.tools == (OfferedTool(name="get_weather", digest="sha256:cd"),)
    assert decoded.tools[0].one_action_per_intent is None
    cancelled = {"key": attrs.asdict(KEY), "cause": 3, "reason": "superseded"}
    assert DEFAULT_CODEC.decode("decision.cancelled", 1, pack(cancelled)) == CallCancelled(
        key=KEY, cause=3, reason=CancelReason.SUPERSEDED
    )


def test_an_event_type_must_bring_an_upcaster_from_every_older_version() -> None:
    """Registering a class at schema version n without upcasters from 1..n-1 is refused."""
    with pytest.raises(ValueError, match=r"versions 1\.\.2"):
        event_type("test.unread", schema_version=3, upcasters={2: one_to_two})


def test_an_encode_error_names_the_event_tag() -> None:
    """A naive datetime refused at encode time is reported with the event's tag."""
    event = CallAwaitingConfirmation(
        key=KEY, cause=9, arguments_digest="d", expires_at=datetime(2026, 1, 1)
    )
    with pytest.raises(CodecError, match=r"cannot encode 'decision\.awaiting_confirmation'"):
        DEFAULT_CODEC.encode(event)


def test_a_call_key_decoded_again_is_the_same_object_and_still_checked() -> None:
    """Events naming the same call decode to one key object; a spoilt key is still refused."""
    first = DEFAULT_CODEC.decode(*DEFAULT_CODEC.encode(SAMPLES["ingress.call_opened"]))
    second = DEFAULT_CODEC.decode(*DEFAULT_CODEC.encode(SAMPLES["ingress.call_opened"]))
    assert isinstance(first, CallOpened)
    assert isinstance(second, CallOpened)
    assert first.key is second.key
    fields = fields_of("ingress.call_opened")
    fields["key"]["tenant"] = ""
    with pytest.raises(CodecError, match="tenant"):
        DEFAULT_CODEC.decode("ingress.call_opened", 1, pack(fields))
