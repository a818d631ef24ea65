"""Strict parsing of tool-call arguments and their canonical form."""

from __future__ import annotations

import hashlib
import json
import struct
from types import MappingProxyType
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from inert.actors._arguments import (
    ArgumentLimits,
    ArgumentProblem,
    ParsedArguments,
    RejectedArguments,
    canonical_json,
    parse_arguments,
)

P = ArgumentProblem

BAD_INPUTS: list[tuple[str, bytes, ArgumentProblem]] = [
    ("duplicate key", b'{"a":1,"a":2}', P.DUPLICATE_KEY),
    ("nested duplicate key", b'{"o":{"k":1,"k":1}}', P.DUPLICATE_KEY),
    ("NaN", b'{"x":NaN}', P.NON_FINITE_NUMBER),
    ("Infinity", b'{"x":Infinity}', P.NON_FINITE_NUMBER),
    ("-Infinity", b'{"x":-Infinity}', P.NON_FINITE_NUMBER),
    ("overflowing float", b'{"x":1e400}', P.NON_FINITE_NUMBER),
    ("5000-digit integer", b'{"x":' + b"9" * 5000 + b"}", P.NUMBER_TOO_LARGE),
    ("2**53", b'{"x":9007199254740992}', P.NUMBER_TOO_LARGE),
    ("-2**53", b'{"x":-9007199254740992}', P.NUMBER_TOO_LARGE),
    ("large float", b'{"x":1e300}', P.NUMBER_TOO_LARGE),
    ("2**53 as a float", b'{"x":9007199254740992.0}', P.NUMBER_TOO_LARGE),
    ("100,000 open brackets", b"[" * 100_000, P.TOO_DEEP),
    ("65 nested objects", b'{"a":' * 65 + b"1" + b"}" * 65, P.TOO_DEEP),
    ("lone high surrogate", b'{"x":"\\ud800"}', P.INVALID_UNICODE),
    ("lone low surrogate in a name", b'{"\\udc00":1}', P.INVALID_UNICODE),
    ("invalid UTF-8", b'{"x":"\xff"}', P.INVALID_UTF8),
    ("overlong UTF-8", b'{"x":"\xc0\xaf"}', P.INVALID_UTF8),
    ("UTF-8 byte order mark", b"\xef\xbb\xbf{}", P.BOM),
    ("escaped NUL", b'{"x":"\\u0000"}', P.NUL_CHARACTER),
    ("two texts", b"{} {}", P.SYNTAX),
    ("concatenated objects", b'{}{"stock":"MSFT"}', P.SYNTAX),
    ("comment", b'{"a":1}//', P.SYNTAX),
    ("block comment", b'/* x */{"a":1}', P.SYNTAX),
    ("trailing comma", b'{"a":[1,]}', P.SYNTAX),
    ("trailing comma in object", b'{"a":1,}', P.SYNTAX),
    ("raw control character", b'{"a":"\x01"}', P.SYNTAX),
    ("raw newline in a string", b'{"a":"\n"}', P.SYNTAX),
    ("single quotes", b"{'a':1}", P.SYNTAX),
    ("unquoted name", b"{a:1}", P.SYNTAX),
    ("truncated prefix", b'{"city": "Par', P.SYNTAX),
    ("empty", b"", P.SYNTAX),
    ("whitespace only", b"  ", P.SYNTAX),
    ("leading zero", b'{"a":01}', P.SYNTAX),
    ("hex number", b'{"a":0x10}', P.SYNTAX),
    ("plus sign", b'{"a":+1}', P.SYNTAX),
    ("bad escape", b'{"a":"\\x41"}', P.SYNTAX),
    ("Python literal", b'{"a":True}', P.SYNTAX),
    ("top-level string", b'"x"', P.NOT_AN_OBJECT),
    ("top-level number", b"12", P.NOT_AN_OBJECT),
    ("top-level array", b"[1,2]", P.NOT_AN_OBJECT),
    ("top-level null", b"null", P.NOT_AN_OBJECT),
]


@pytest.mark.parametrize(("case", "data", "problem"), BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_gives_one_stable_problem(
    case: str, data: bytes, problem: ArgumentProblem
) -> None:
    """Each catalogued bad input is refused with its own stable problem code."""
    result = parse_arguments(data)
    assert isinstance(result, RejectedArguments), case
    assert result.problem is problem, result.describe()


def test_size_is_checked_before_anything_else() -> None:
    """Arguments over the byte limit are refused as too large, whatever they contain."""
    limits = ArgumentLimits(max_bytes=16)
    result = parse_arguments(b"\xef\xbb\xbf" + b"[" * 100, limits)
    assert isinstance(result, RejectedArguments)
    assert result.problem is P.TOO_LARGE
    assert "103 bytes, the limit is 16" in result.detail


def test_string_and_key_limits_name_the_path_not_the_value() -> None:
    """Over-long strings and objects with too many names are refused with a path only."""
    limits = ArgumentLimits(max_string_length=8, max_object_keys=2)
    long_string = parse_arguments(b'{"items":[{"note":"secret-value"}]}', limits)
    assert isinstance(long_string, RejectedArguments)
    assert (long_string.problem, long_string.path) == (P.STRING_TOO_LONG, "$.<key #1>[0].<key #1>")
    assert "secret" not in long_string.describe()
    many = parse_arguments(b'{"a":1,"b":2,"c":3}', limits)
    assert isinstance(many, RejectedArguments)
    assert many.problem is P.TOO_MANY_KEYS


def test_depth_limit_counts_brackets_outside_strings_only() -> None:
    """Brackets inside strings do not count towards the nesting depth."""
    limits = ArgumentLimits(max_depth=2)
    assert isinstance(parse_arguments(b'{"a":"[[[[{{{{","b":{"c":1}}', limits), ParsedArguments)
    assert isinstance(parse_arguments(b'{"a":{"b":{"c":1}}}', limits), RejectedArguments)
    assert isinstance(parse_arguments(b'{"a":"\\"[[[["}', limits), ParsedArguments)


def test_depth_limit_holds_at_its_boundary() -> None:
    """Nesting exactly at the limit is accepted and one level past it refused, however few
    brackets the text holds besides."""
    limits = ArgumentLimits(max_depth=2)
    assert isinstance(parse_arguments(b'{"a":{"b":1}}', limits), ParsedArguments)
    refused = parse_arguments(b'{"a":{"b":[1]}}', limits)
    assert isinstance(refused, RejectedArguments)
    assert refused.problem is P.TOO_DEEP


def test_good_arguments_are_immutable_and_canonical() -> None:
    """Accepted arguments are a read-only value with RFC 8785 bytes and their SHA-256 digest."""
    result = parse_arguments(b'{ "units": "metric", "city": "Paris", "days": [1, 2.50] }')
    assert isinstance(result, ParsedArguments)
    assert result.canonical == b'{"city":"Paris","days":[1,2.5],"units":"metric"}'
    assert result.digest == "sha256:" + hashlib.sha256(result.canonical).hexdigest()
    assert isinstance(result.value, MappingProxyType)
    assert result.value["days"] == (1, 2.5)
    with pytest.raises(TypeError):
        result.value["city"] = "Rome"  # type: ignore[index]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (100.0, "100"),
        (1.5e-7, "1.5e-7"),
        (0.000001, "0.000001"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (123456789012345680000.0, "123456789012345680000"),
        (-1.25, "-1.25"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (0.1 + 0.2, "0.30000000000000004"),
        (333333333.3333333, "333333333.3333333"),
    ],
)
def test_numbers_print_as_ecmascript_does(value: float, expected: str) -> None:
    """Canonical numbers follow RFC 8785's ECMAScript serialisation."""
    assert canonical_json(value) == expected.encode()


def test_names_sort_by_utf16_code_units() -> None:
    """Object names are ordered by UTF-16 code units, as RFC 8785 requires."""
    value = {"\U0001f600": 1, "\ufb01": 2, "a": 3}
    assert canonical_json(value).decode() == '{"a":3,"\U0001f600":1,"\ufb01":2}'


def test_strings_use_the_minimal_escapes() -> None:
    """Only quotes, backslashes and control characters are escaped; the rest is UTF-8."""
    assert canonical_json({"s": 'é"\\\n\x1f\u2028'}) == '{"s":"é\\"\\\\\\n\\u001f\u2028"}'.encode()


NONCHARACTERS = "".join(
    [chr(code) for code in range(0xFDD0, 0xFDF0)]
    + [chr(plane * 0x10000 + last) for plane in range(17) for last in (0xFFFE, 0xFFFF)]
)
"""Characters I-JSON forbids: the parser refuses them, so the round trip draws none."""
VALID_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\x00" + NONCHARACTERS))

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | st.floats(min_value=-(2**53 - 1), max_value=2**53 - 1)
    | VALID_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(VALID_TEXT, children, max_size=4)
    ),
    max_leaves=20,
)


def _thaw(value: Any) -> Any:
    if isinstance(value, MappingProxyType):
        return {name: _thaw(item) for name, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value


@given(st.dictionaries(st.text(), json_values, max_size=5))
def test_canonical_form_parses_back_to_the_same_value(value: dict[str, Any]) -> None:
    """Any JSON object survives canonicalisation and a strict parse unchanged."""
    result = parse_arguments(canonical_json(value))
    if any(
        "\x00" in name or not _encodable(name) or set(name) & set(NONCHARACTERS) for name in value
    ):
        assert isinstance(result, RejectedArguments)
        return
    assert isinstance(result, ParsedArguments), result
    assert _thaw(result.value) == value
    assert canonical_json(result.value) == result.canonical
    assert json.loads(result.canonical) is not None


@given(st.dictionaries(VALID_TEXT, json_values, max_size=5))
def test_canonical_form_is_that_of_the_rfc8785_package(value: dict[str, Any]) -> None:
    """Parsing and the canonical form write the bytes the ``rfc8785`` package writes."""
    expected = rfc8785.dumps(value)
    assert canonical_json(value) == expected
    result = parse_arguments(json.dumps(value).encode())
    assert isinstance(result, ParsedArguments), result
    assert result.canonical == expected


def test_names_beyond_the_basic_plane_sort_by_utf16_code_units_once_parsed() -> None:
    """A name beyond U+FFFF sorts before U+FB01 in the canonical form of parsed arguments."""
    result = parse_arguments(json.dumps({"\ufb01": 2, "\U0001f600": 1, "a": 3}).encode())
    assert isinstance(result, ParsedArguments)
    assert result.canonical.decode() == '{"a":3,"\U0001f600":1,"\ufb01":2}'


@pytest.mark.parametrize(
    ("text", "path", "problem"),
    [
        ('{"a b": [{"x": "\\u0000"}]}', "$.<key #1>[0].<key #1>", P.NUL_CHARACTER),
        ('{"o": {"k\\u0000": 1}}', "$.<key #1>.<key #1>", P.NUL_CHARACTER),
        ('{"l": [1, [2, "\\ud800"]]}', "$.<key #1>[1][1]", P.INVALID_UNICODE),
        ('{"a": 1, "b": {"c": 2, "d": "\\u0000"}}', "$.<key #2>.<key #2>", P.NUL_CHARACTER),
        ('{"x": 1}', "$", None),
    ],
)
def test_a_refusal_names_the_path_to_the_value(
    text: str, path: str, problem: ArgumentProblem | None
) -> None:
    """The path of a refusal steps through the positions of names, as written, and indexes."""
    result = parse_arguments(text.encode())
    if problem is None:
        assert isinstance(result, ParsedArguments)
        return
    assert isinstance(result, RejectedArguments)
    assert (result.problem, result.path) == (problem, path)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    """Whatever the bytes, the parser answers with a result and never raises."""
    assert isinstance(parse_arguments(data), ParsedArguments | RejectedArguments)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_canonical_numbers_round_trip_exactly(value: float) -> None:
    """Every finite double prints to text that reads back as the same double."""
    text = canonical_json(value).decode()
    assert struct.pack(">d", float(text)) == struct.pack(">d", value + 0.0)
