"""No adapter raises on what a provider (or a broken proxy) may send: every malformed byte and
every strangely shaped event becomes a protocol violation, a lost stream, or nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from adapter_support import FIXTURES, provider_adapter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inert import Event
from inert.adapters import (
    PROVIDERS,
    ProtocolError,
    StreamAdapter,
    event_stream_message,
)

scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=8)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


def real_events(provider: str) -> list[dict[str, Any]]:
    """The decoded events of the provider's captures, as seeds for mutation."""
    found: list[dict[str, Any]] = []
    for path in sorted((FIXTURES / provider).iterdir()):
        if path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                try:
                    found.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        else:
            found.extend(
                json.loads(line[5:])
                for line in path.read_text().splitlines()
                if line.startswith("data:") and line[5:].strip().startswith("{")
            )
    return found


SEEDS = {provider: real_events(provider) for provider in PROVIDERS}


def mutated(seed: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """The event with one field replaced, removed, or one nested field replaced."""
    event: dict[str, Any] = json.loads(json.dumps(seed))
    target: Any = event
    for _ in range(data.draw(st.integers(0, 3), label="depth")):
        keys = list(target) if isinstance(target, dict) else []
        inner = [key for key in keys if isinstance(target[key], dict | list)]
        if not inner:
            break
        target = target[data.draw(st.sampled_from(inner), label="into")]
        if isinstance(target, list):
            if not target or not isinstance(target[0], dict):
                return event
            target = target[0]
    if isinstance(target, dict) and target:
        key = data.draw(st.sampled_from(sorted(target)), label="key")
        if data.draw(st.booleans(), label="remove"):
            del target[key]
        else:
            target[key] = data.draw(json_values, label="value")
    return event


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_real_events_never_raise(provider: str, data: st.DataObject) -> None:
    """Real events with a field removed or replaced by any JSON value are judged, not crashed on;
    a stream none of whose events is left one of the protocol is said so at its end."""
    adapter = provider_adapter(provider, resumable=True)
    seeds = SEEDS[provider]
    produced: list[Event] = []
    for _ in range(data.draw(st.integers(1, 12), label="events")):
        event = mutated(data.draw(st.sampled_from(seeds), label="seed"), data)
        if provider == "bedrock":
            produced += adapter.feed_event(event) if len(event) == 1 else []
        else:
            produced += adapter.feed_event(event)
    assert all(isinstance(event, Event) for event in produced + _closed(adapter))


def _closed(adapter: StreamAdapter) -> list[Event]:
    """What ``close`` reports; nothing where it says none of the events was of the protocol,
    the one ``ProtocolError`` it may raise."""
    try:
        return adapter.close()
    except ProtocolError as refused:
        detail = refused.detail
    assert "none of its events is one of the protocol" in detail
    return []


UNHASHABLE: tuple[Any, ...] = ([], {}, ["tool_use"], {"type": "tool_use"})
"""JSON values a set of known kinds cannot even look up."""


def _paths(value: Any, depth: int = 2) -> list[tuple[str, ...]]:
    """The keys of an event and of the objects inside it, ``depth`` levels down."""
    if not isinstance(value, dict) or depth < 0:
        return []
    found: list[tuple[str, ...]] = []
    for key, inner in value.items():
        found.append((key,))
        found.extend((key, *rest) for rest in _paths(inner, depth - 1))
    return found


def _replaced(event: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(event))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_any_field_holding_a_list_or_an_object_is_judged_not_raised(provider: str) -> None:
    """Every field of the first events of a real stream, replaced in its place by a list or an
    object, ends as events of the protocol, never as an exception out of the adapter."""
    stream = SEEDS[provider][:48]
    for index, event in enumerate(stream):
        for path in _paths(event):
            for value in UNHASHABLE:
                adapter = provider_adapter(provider, resumable=True)
                fed = [*stream[:index], _replaced(event, path, value), *stream[index + 1 :]]
                produced: list[Event] = []
                for each in fed:
                    if provider != "bedrock" or len(each) == 1:
                        produced += adapter.feed_event(each)
                produced += _closed(adapter)
                assert all(isinstance(item, Event) for item in produced), (index, path)


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(provider: str, body: bytes) -> None:
    """Any bytes on the wire, SSE or event-stream, are read without an exception, but the
    ``ProtocolError`` that says the reader refused bytes with no response open to end, or
    that none of the stream's events was one of the protocol."""
    adapter = provider_adapter(provider, resumable=True)
    prefix = (
        event_stream_message("messageStart", {"role": "assistant"})
        if provider == "bedrock"
        else b'data: {"type": "message_start"}\n\n'
    )
    try:
        produced = adapter.feed(prefix + body)
    except ProtocolError as refused:
        produced = list(refused.events)
    assert all(isinstance(event, Event) for event in produced + _closed(adapter))


SSE_CAPTURES = sorted(path for path in FIXTURES.glob("*/*.sse") if path.parent.name != "bedrock")
JUNK = st.sampled_from(
    [b"\xff", b"\xff\n", b"\xff\n\n", b"\xc3(", b"\xed\xa0\x80", b"\xef\xbb", b"\r", b"\n\n", b":"]
) | st.binary(min_size=1, max_size=6)


def _read(provider: str, chunks: list[bytes]) -> tuple[list[Event], bool]:
    """The events an adapter gives for the chunks and the end of the body, and whether it
    refused the stream (the events a refusal carries included, as a caller feeds them)."""
    adapter = provider_adapter(provider)
    events: list[Event] = []
    refused = False
    for chunk in chunks:
        try:
            events += adapter.feed(chunk)
        except ProtocolError as error:
            events += error.events
            refused = True
            break
    try:
        events += adapter.close()
    except ProtocolError:
        refused = True
    return events, refused


@pytest.mark.parametrize("path", SSE_CAPTURES, ids=lambda path: f"{path.parent.name}/{path.name}")
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_junk_anywhere_in_a_captured_stream_decides_alike_however_it_is_split(
    path: Path, data: st.DataObject
) -> None:
    """A captured body with junk bytes inserted anywhere (before any event too) gives the same
    events, and the same refusal or none, fed whole, split anywhere or byte by byte."""
    body = path.read_bytes()
    for _ in range(data.draw(st.integers(1, 2), label="junks")):
        place = data.draw(st.integers(0, len(body)), label="place")
        body = body[:place] + data.draw(JUNK, label="junk") + body[place:]
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=30), label="cuts"))
    chunks = [body[start:end] for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    whole = _read(path.parent.name, [body])
    assert _read(path.parent.name, chunks) == whole
    assert _read(path.parent.name, [body[at : at + 1] for at in range(len(body))]) == whole


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
@pytest.mark.parametrize("other", sorted(PROVIDERS))
def test_events_of_another_protocol_are_said_so_when_the_stream_ends(
    provider: str, other: str
) -> None:
    """Another provider's decoded events fed to an adapter are none of its protocol: ``close``
    raises ``ProtocolError`` naming the first, never an empty turn in silence. The adapter's
    own events close as they always did."""
    adapter = provider_adapter(provider)
    events = [event for seed in SEEDS[other][:20] for event in adapter.feed_event(seed)]
    if other == provider:
        assert all(isinstance(event, Event) for event in events + adapter.close())
        return
    with pytest.raises(ProtocolError, match=r"none of its events is one of the protocol \(the"):
        adapter.close()
