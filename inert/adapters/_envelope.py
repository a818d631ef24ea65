"""The one strict reader of a provider event's JSON: every adapter reads its envelopes here.

A provider event is read as strictly as the arguments it carries, because a lenient reader and
a strict one can see different events in the same bytes: with a repeated key, Python's
last-wins reading could run another tool than a first-wins reader (a gateway, an audit copy)
saw. So an event is refused, and its response ends as a protocol violation, when its bytes are
not UTF-8 (replacing them with U+FFFD would turn a damaged argument into a different value),
when an object repeats a key, when it holds ``NaN`` or ``Infinity``, when it nests deeper than
``MAX_DEPTH`` or when a number is longer than ``MAX_NUMBER_LENGTH`` characters (so that no
input makes the reader recurse without bound or convert a huge number).

``EnvelopeRefused`` is a ``json.JSONDecodeError``: where an adapter reads data that is not JSON
as a broken protocol (or, cut off with the connection, as a lost stream), it reads a refused
envelope alike; its ``msg`` says what was refused, never with a value.

``read_event_text`` is the same reading of an event already decoded to text, at the cost of the
JSON parser alone: the adapters read every event of a stream with it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 64
"""Arrays and objects nested in one event: provider envelopes nest a few levels."""

MAX_NUMBER_LENGTH = 64
"""Characters of one number literal."""

_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class EnvelopeRefused(json.JSONDecodeError):
    """A provider event the strict reader refuses; ``msg`` says why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "", 0)

    def __str__(self) -> str:
        return self.msg


def read_event_json(data: str | bytes) -> Any:
    """The JSON value of one provider event, read strictly (see the module's rules)."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise EnvelopeRefused("an event whose bytes are not UTF-8") from None
    else:
        text = data
    # Counting brackets is cheap; only an event with many of them is measured for depth.
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(text) > MAX_DEPTH:
        raise EnvelopeRefused(f"an event nested deeper than {MAX_DEPTH} levels")
    return json.loads(
        text,
        object_pairs_hook=_unique_keys,
        parse_constant=_no_constant,
        parse_int=_integer,
        parse_float=_float,
    )


def read_event_text(text: str) -> Any:
    """``read_event_json`` of text, with one parser made once rather than one an event."""
    if text.count("[") + text.count("{") > MAX_DEPTH:
        return read_event_json(text)
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        # Not a value from the first character (whitespace, a byte-order mark, no JSON):
        # judged by the whole reading, as is a value with anything after it.
        return read_event_json(text)
    if end != len(text):
        return read_event_json(text)
    return value


def _depth(text: str) -> int:
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRINGS.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise EnvelopeRefused("an event whose JSON repeats a key")
    return found


def _no_constant(name: str) -> Any:
    raise EnvelopeRefused(f"an event whose JSON holds {name}")


def _integer(literal: str) -> int:
    if len(literal) > MAX_NUMBER_LENGTH:
        raise EnvelopeRefused(f"an event with a number longer than {MAX_NUMBER_LENGTH} characters")
    return int(literal)


def _float(literal: str) -> float:
    if len(literal) > MAX_NUMBER_LENGTH:
        raise EnvelopeRefused(f"an event with a number longer than {MAX_NUMBER_LENGTH} characters")
    value = float(literal)
    if not math.isfinite(value):
        raise EnvelopeRefused("an event with a number too large for a float")
    return value


# json.loads makes a decoder (and its scanner) at every call given hooks: this one is made once.
_STRICT = json.JSONDecoder(
    object_pairs_hook=_unique_keys,
    parse_constant=_no_constant,
    parse_int=_integer,
    parse_float=_float,
)
_SCAN: Callable[[str, int], tuple[Any, int]] = _STRICT.scan_once  # type: ignore[attr-defined]
