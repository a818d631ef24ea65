"""The provider's event envelope is read as strictly as the arguments: a repeated key, bytes that
are not UTF-8, nesting past the limit or an endless number anywhere in a real captured event end
its response as a protocol violation in every adapter, and never raise."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from adapter_support import FIXTURES, provider_adapter
from hypothesis import given
from hypothesis import strategies as st

from inert import Event, ResponseEnded, ResponseEndReason
from inert.adapters import (
    PROVIDERS,
    event_stream_message,
)
from inert.adapters._envelope import (
    MAX_DEPTH,
    MAX_NUMBER_LENGTH,
    EnvelopeRefused,
    read_event_json,
)

DEEP = "[" * 10_000 + "]" * 10_000
LONG_NUMBER = "9" * 10_000


def _first_key_twice(text: str) -> str:
    """The object with its first key given twice: another value first, the real one last (a
    first-wins reader and a last-wins reader see different events)."""
    key = next(iter(json.loads(text)))
    return "{" + json.dumps(key) + ':"another",' + text.lstrip()[1:]


def _first_value(replacement: str) -> Callable[[str], str]:
    def corrupt(text: str) -> str:
        event = json.loads(text)
        key = next(iter(event))
        rest = json.dumps({name: value for name, value in event.items() if name != key})
        return "{" + json.dumps(key) + ":" + replacement + ("," + rest[1:] if rest != "{}" else "}")

    return corrupt


CORRUPTIONS: dict[str, Callable[[str], str]] = {
    "a repeated key": _first_key_twice,
    "nesting past the limit": _first_value(DEEP),
    "a number of 10,000 digits": _first_value(LONG_NUMBER),
    "NaN": _first_value("NaN"),
}


def _sse_events(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    return [line[5:].strip() for line in lines if line.startswith("data:")]


def captures() -> list[tuple[str, Path]]:
    return [
        (provider, path)
        for provider in sorted(PROVIDERS)
        for path in sorted((FIXTURES / provider).iterdir())
        if path.suffix == (".jsonl" if provider == "bedrock" else ".sse")
    ]


def _payloads(provider: str, path: Path) -> list[tuple[str, bytes]]:
    """Each event of a capture: its event-stream name (Bedrock) and its JSON payload."""
    if provider != "bedrock":
        return [("", data.encode()) for data in _sse_events(path)]
    found = []
    for line in path.read_text().splitlines():
        [(kind, inner)] = json.loads(line).items()
        found.append((kind, json.dumps(inner).encode()))
    return found


def _wire(provider: str, payloads: list[tuple[str, bytes]]) -> bytes:
    """The payloads as the provider sends them: SSE data lines, or event-stream frames."""
    if provider != "bedrock":
        return b"".join(b"data: " + payload + b"\n\n" for _, payload in payloads)
    return b"".join(event_stream_message(kind, payload) for kind, payload in payloads)


def _violations(produced: list[Event]) -> list[ResponseEnded]:
    return [
        event
        for event in produced
        if isinstance(event, ResponseEnded) and event.reason is ResponseEndReason.PROTOCOL_VIOLATION
    ]


def _ended(produced: list[Event]) -> bool:
    return any(isinstance(event, ResponseEnded) for event in produced)


def _run(provider: str, payloads: list[tuple[str, bytes]]) -> list[Event]:
    adapter = provider_adapter(provider)
    return adapter.feed(_wire(provider, payloads)) + adapter.close()


@pytest.mark.parametrize("corruption", [*CORRUPTIONS, "bytes that are not UTF-8"])
@pytest.mark.parametrize(
    ("provider", "path"), captures(), ids=[f"{p}/{path.stem}" for p, path in captures()]
)
def test_a_damaged_envelope_anywhere_in_a_real_stream_ends_its_response(
    provider: str, path: Path, corruption: str
) -> None:
    """Each event of a real capture, damaged in turn while its response is open, ends that
    response as a protocol violation; nothing raises out of the adapter."""
    payloads = _payloads(provider, path)
    judged = 0
    for index, (kind, payload) in enumerate(payloads):
        if not payload.lstrip().startswith(b"{"):
            continue
        before = _run(provider, payloads[:index])
        if _ended(before) or not before:
            # Nothing open to end yet, or the response ended already.
            continue
        if corruption == "bytes that are not UTF-8":
            damaged = payload[:-1] + b"\xff\xfe" + payload[-1:]
        else:
            damaged = CORRUPTIONS[corruption](payload.decode()).encode()
        produced = _run(provider, [*payloads[:index], (kind, damaged), *payloads[index + 1 :]])
        assert all(isinstance(event, Event) for event in produced)
        assert _violations(produced), (index, corruption)
        judged += 1
    assert judged or provider == "gemini", "no event of the capture was judged"


@given(
    st.recursive(
        st.none()
        | st.booleans()
        | st.integers(-(10**40), 10**40)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
        max_leaves=20,
    )
)
def test_what_json_dumps_writes_is_read_back_as_json_loads_reads_it(value: Any) -> None:
    """The strict reader reads every well-formed, unrepeated, shallow document as json does."""
    text = json.dumps(value)
    assert read_event_json(text) == json.loads(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"a": 1, "a": 2}', "repeats a key"),
        ('{"a": [{"b": {"c": 1, "c": 1}}]}', "repeats a key"),
        ('{"a": NaN}', "NaN"),
        ('{"a": -Infinity}', "-Infinity"),
        ('{"a": 1e999}', "too large"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "deeper"),
        ('{"a": ' + "1" * (MAX_NUMBER_LENGTH + 1) + "}", "longer"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b'{"a": "\xed\xa0\x80"}', "not UTF-8"),
    ],
)
def test_the_strict_reader_refuses_each_class_and_says_which(text: str | bytes, why: str) -> None:
    """Each refusal is an EnvelopeRefused (a JSONDecodeError) whose message names the class."""
    with pytest.raises(EnvelopeRefused) as refused:
        read_event_json(text)
    assert why in str(refused.value)
    assert isinstance(refused.value, json.JSONDecodeError)


def test_brackets_inside_strings_are_not_nesting() -> None:
    """Brackets in string values, escaped quotes included, do not count as depth."""
    text = json.dumps({"a": "[" * 1000 + '\\"{' * 100})
    assert read_event_json(text) == json.loads(text)
