"""The event vocabulary and its codec: every event round-trips; bad bytes are CodecErrors."""

from __future__ import annotations

import contextlib
import enum
import types
import typing
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import attrs
import msgpack
import pytest
from attrs import frozen
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from inert import (
    DEFAULT_CODEC,
    CallKey,
    Codec,
    CodecError,
    Event,
    TurnRef,
    control_stream,
    registered_event_types,
)

EXPECTED_TAGS = {
    "decision.awaiting_confirmation",
    "decision.cancelled",
    "decision.collecting",
    "decision.confirmed",
    "decision.dispatched",
    "decision.failed",
    "decision.rejected",
    "decision.terminal_candidate",
    "decision.validated",
    "ingress.arguments_appended",
    "ingress.call_ended",
    "ingress.call_opened",
    "ingress.response_ended",
    "ingress.stream_lost",
    "ingress.stream_resumed",
    "ingress.text_received",
    "ingress.turn_started",
    "operator.response_quarantined",
    "operator.tenant_resumed",
    "operator.tenant_stopped",
    "operator.tool_disabled",
    "operator.tool_enabled",
    "outcome.completed",
    "outcome.failed",
    "outcome.unknown",
    "request.claim",
    "user.confirmation_denied",
    "user.confirmation_given",
    "user.turn_cancelled",
    "user.turn_superseded",
}
EVENT_TYPES = registered_event_types()
TAGS = sorted(EVENT_TYPES)

datetimes = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
)
identity_text = st.text(min_size=1, max_size=12)


def strategy_for(annotation: Any) -> st.SearchStrategy[Any]:
    """A Hypothesis strategy for a field type of an event class."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return st.one_of([strategy_for(option) for option in typing.get_args(annotation)])
    if origin is tuple:
        item, _ = typing.get_args(annotation)
        return st.lists(strategy_for(item), max_size=3).map(tuple)
    if annotation is type(None):
        return st.none()
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from(list(annotation))
    if annotation is str:
        return identity_text
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(min_value=0, max_value=2**62)
    if annotation is bytes:
        return st.binary(max_size=64)
    if annotation is datetime:
        return datetimes
    if attrs.has(annotation):
        return instances(annotation)
    raise AssertionError(f"no strategy for {annotation!r}")


def instances(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Valid instances of an attrs class, its validators respected by rejection."""
    attrs.resolve_types(cls)
    fields = {field.name: strategy_for(field.type) for field in attrs.fields(cls)}

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        values = {name: draw(strategy) for name, strategy in fields.items()}
        try:
            return cls(**values)
        except (ValueError, TypeError):
            assume(False)

    return build()


def test_every_tag_is_pinned() -> None:
    """The stored tags are exactly the listed ones, so none can change silently."""
    assert set(EVENT_TYPES) == EXPECTED_TAGS
    assert all(tag == cls.TAG for tag, cls in EVENT_TYPES.items())


@pytest.mark.parametrize("tag", TAGS)
@settings(max_examples=60, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_event_round_trips_through_the_codec(tag: str, data: st.DataObject) -> None:
    """decode(encode(event)) equals the event, under the class's own tag and version."""
    cls = EVENT_TYPES[tag]
    event = data.draw(instances(cls))
    encoded_tag, version, payload = DEFAULT_CODEC.encode(event)
    assert (encoded_tag, version) == (cls.TAG, cls.SCHEMA_VERSION)
    assert DEFAULT_CODEC.decode(encoded_tag, version, payload) == event


@pytest.mark.parametrize("tag", TAGS)
@settings(max_examples=1)
@given(data=st.data())
def test_events_are_frozen_slotted_and_keyword_only(tag: str, data: st.DataObject) -> None:
    """Every event class is immutable, has slots and refuses positional arguments."""
    cls = EVENT_TYPES[tag]
    assert "__slots__" in cls.__dict__
    event = data.draw(instances(cls))
    first = attrs.fields(cls)[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(event, first, getattr(event, first))
    with pytest.raises(TypeError):
        cls(*attrs.astuple(event, recurse=False))


# --- decoding bad input ----------------------------------------------------------------


KEY = {"tenant": "t", "conversation": "c", "turn": "1", "response": "r", "item": "i", "call": "x"}


@pytest.mark.parametrize(
    ("tag", "version", "payload", "message"),
    [
        ("no.such_event", 1, b"\x80", "unknown event tag 'no.such_event'"),
        ("decision.cancelled", 0, b"\x80", "schema version 0"),
        ("decision.cancelled", 2, b"\x80", "schema version 2"),
        ("decision.cancelled", -1, b"\x80", "schema version -1"),
        ("decision.cancelled", 1, b"\xc1", "corrupt 'decision.cancelled'"),
        ("decision.cancelled", 1, b"", "corrupt 'decision.cancelled'"),
        ("decision.cancelled", 1, b"\x93\x01\x02\x03", "a map was expected"),
        ("decision.cancelled", 1, msgpack.packb({"reason": "superseded"}), "key"),
        (
            "decision.cancelled",
            1,
            msgpack.packb({"key": KEY, "reason": "superseded", "extra": 1}),
            "extra",
        ),
        ("decision.cancelled", 1, msgpack.packb({"key": KEY, "reason": "nope"}), "CancelReason"),
        (
            "decision.cancelled",
            1,
            msgpack.packb({"key": {**KEY, "tenant": 5}, "reason": "superseded"}),
            "tenant",
        ),
        (
            "ingress.text_received",
            1,
            msgpack.packb(
                {
                    "response": {"tenant": "t", "conversation": "c", "turn": "1", "response": "r"},
                    "characters": True,
                }
            ),
            "characters",
        ),
        (
            "user.confirmation_given",
            1,
            msgpack.packb(
                {
                    "key": KEY,
                    "principal": "p",
                    "tool_digest": "d",
                    "arguments_digest": "a",
                    "nonce": "n",
                    "expires_at": 1.5,
                }
            ),
            "expires_at",
        ),
    ],
)
def test_bad_stored_events_are_codec_errors(
    tag: str, version: int, payload: bytes, message: str
) -> None:
    """Unknown tags, unknown versions and damaged payloads raise CodecError with a clear reason."""
    with pytest.raises(CodecError, match=message.replace("(", r"\(")) as caught:
        DEFAULT_CODEC.decode(tag, version, payload)
    assert type(caught.value) is CodecError


def test_no_coercion_of_wrong_types() -> None:
    """An int is not turned into a str, nor a bool into an int, on decode."""
    good = {"key": KEY, "tool": "get_weather", "sequence": 3}
    assert DEFAULT_CODEC.decode("ingress.call_opened", 1, msgpack.packb(good))
    for bad in ({**good, "tool": 5}, {**good, "sequence": True}, {**good, "sequence": "3"}):
        with pytest.raises(CodecError):
            DEFAULT_CODEC.decode("ingress.call_opened", 1, msgpack.packb(bad))


@pytest.mark.parametrize("tag", TAGS)
@settings(max_examples=30)
@given(garbage=st.binary(max_size=80))
def test_arbitrary_bytes_decode_or_raise_codec_error(tag: str, garbage: bytes) -> None:
    """Random payload bytes never raise anything but CodecError."""
    with contextlib.suppress(CodecError):
        assert isinstance(DEFAULT_CODEC.decode(tag, 1, garbage), EVENT_TYPES[tag])


def test_naive_datetimes_are_refused_on_encode() -> None:
    """A datetime without a time zone cannot be stored."""
    cls = EVENT_TYPES["decision.awaiting_confirmation"]
    key = CallKey(**KEY)
    event = cls(key=key, arguments_digest="sha256:x", expires_at=datetime(2026, 1, 1))  # type: ignore[call-arg]
    with pytest.raises(CodecError, match="naive datetime"):
        DEFAULT_CODEC.encode(event)
    aware = cls(  # type: ignore[call-arg]
        key=key,
        arguments_digest="sha256:x",
        expires_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(microseconds=7),
    )
    assert DEFAULT_CODEC.decode(*DEFAULT_CODEC.encode(aware)) == aware


# --- upcasting -------------------------------------------------------------------------


@frozen(kw_only=True)
class Greeting(Event):
    """A test-only event at schema version 3: version 1 had ``text``, version 2 ``words``."""

    TAG: ClassVar[str] = "test.greeting"
    SCHEMA_VERSION: ClassVar[int] = 3
    words: tuple[str, ...]
    loud: bool


def test_upcasters_bring_old_payloads_to_the_current_version() -> None:
    """A version-1 payload passes every upcaster in order before it is structured."""
    codec = Codec(event_types={Greeting.TAG: Greeting})
    codec.register_upcaster(Greeting.TAG, 1, lambda old: {"words": old["text"].split()})
    codec.register_upcaster(Greeting.TAG, 2, lambda old: {**old, "loud": False})
    version_one = msgpack.packb({"text": "hello there"})
    assert codec.decode(Greeting.TAG, 1, version_one) == Greeting(
        words=("hello", "there"), loud=False
    )
    current = Greeting(words=("hi",), loud=True)
    assert codec.decode(*codec.encode(current)) == current


def test_upcasting_problems_are_codec_errors() -> None:
    """A missing step, a failing upcaster and bad registrations are CodecErrors."""
    codec = Codec(event_types={Greeting.TAG: Greeting})
    codec.register_upcaster(Greeting.TAG, 2, lambda old: {**old, "loud": old["shout"]})
    with pytest.raises(CodecError, match="version 1 into version 2"):
        codec.decode(Greeting.TAG, 1, msgpack.packb({"text": "x"}))
    with pytest.raises(CodecError, match=r"upcaster of 'test\.greeting' from version 2 failed"):
        codec.decode(Greeting.TAG, 2, msgpack.packb({"words": ["hi"]}))
    with pytest.raises(CodecError, match="already has an upcaster"):
        codec.register_upcaster(Greeting.TAG, 2, lambda old: old)
    with pytest.raises(CodecError, match="unknown event tag"):
        codec.register_upcaster("test.nothing", 1, lambda old: old)
    with pytest.raises(CodecError, match=r"1\.\.2"):
        codec.register_upcaster(Greeting.TAG, 3, lambda old: old)
    with pytest.raises(CodecError, match="not a registered event type"):
        DEFAULT_CODEC.encode(Greeting(words=(), loud=False))


# --- identities ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [("", "must not be empty"), (5, "must be a str"), ("x" * 513, "the limit is 512")],
)
def test_identities_refuse_bad_components(value: Any, message: str) -> None:
    """Empty, non-string and over-long identity components are refused with a clear message."""
    with pytest.raises((ValueError, TypeError), match=message):
        TurnRef(tenant=value, conversation="c", turn="t")
    with pytest.raises((ValueError, TypeError), match=message):
        CallKey(**{**KEY, "call": value})


@given(instances(CallKey), instances(CallKey))
def test_different_keys_never_share_a_stream(left: CallKey, right: CallKey) -> None:
    """Stream names are injective in the key, even with '/' and '%' in components."""
    assert (left.stream == right.stream) == (left == right)
    assert (left.request_stream == right.request_stream) == (left == right)
    assert left.stream != left.request_stream


def test_slashes_in_components_cannot_forge_another_key() -> None:
    """A '/' inside a component is escaped, so it cannot shift the other components."""
    one = CallKey(**{**KEY, "item": "a/b", "call": "c"})
    two = CallKey(**{**KEY, "item": "a", "call": "b/c"})
    assert one.stream != two.stream
    assert one.stream.count("/") == 6


def test_projections_of_a_key() -> None:
    """A key's turn and response references carry exactly its components."""
    key = CallKey(**KEY)
    assert key.turn_ref == TurnRef(tenant="t", conversation="c", turn="1")
    assert key.response_ref.turn_ref == key.turn_ref
    assert key.response_ref.stream == "response/t/r"
    assert control_stream() == "control/global"
    assert control_stream("t/1") == "control/tenant/t%2F1"
