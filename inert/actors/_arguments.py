"""Parsing tool-call arguments once, strictly, and their canonical form.

Rules (RFC 8259, I-JSON RFC 7493, and the failures seen in real agent stacks), each with a
stable problem code and checked in this order:

- size: more than ``max_bytes`` is ``too_large``, before anything else looks at the bytes;
- a byte order mark is ``bom`` (RFC 8259 forbids senders to add one; accepting it only for
  bytes, as the standard library does, would make two paths disagree);
- bytes that are not UTF-8 are ``invalid_utf8``;
- nesting deeper than ``max_depth`` is ``too_deep``, found by a scan before the parser runs so
  that no parser recursion limit is ever reached;
- anything that is not one JSON text is ``syntax`` (trailing data, comments, trailing commas,
  raw control characters, single quotes...);
- a name repeated in one object is ``duplicate_key`` (parsers disagree on which one wins);
- ``NaN``, ``Infinity`` and numbers that overflow a double (``1e400``) are
  ``non_finite_number``; numbers beyond +-(2**53 - 1), written as integers or not, are
  ``number_too_large`` (the range where every integer is exact in a double);
- a lone surrogate or a Unicode noncharacter (U+FDD0..U+FDEF, U+xFFFE, U+xFFFF: I-JSON forbids
  them) is ``invalid_unicode``; a NUL character is ``nul_character``;
- a string longer than ``max_string_length`` characters is ``string_too_long``, an object with
  more than ``max_object_keys`` names is ``too_many_keys``;
- a top-level value that is not an object is ``not_an_object``.

Problems name a path into the arguments where there is one, never a value nor a name the
arguments hold: the parser runs before any schema, so its paths are made of array indexes and
the positions of names in their objects as written, counted from 1 (``$.<key #2>[3]``; see
``inert.actors._places``), and a name refused itself (a NUL in it, too long) is said to be one
(``in the name``). ``described_by_earlier_rules`` gives the detail turns judged by rules before
8 recorded, which named the names themselves: a replay of their logs must decide the same.

The canonical form is RFC 8785 (JSON Canonicalization Scheme): names sorted by UTF-16 code
units, no whitespace, numbers as ECMAScript prints them, strings with the minimal escapes, UTF-8.
Its SHA-256 digest names the exact arguments for confirmation and audit.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from attrs import field, frozen, validators

from ._places import Index, Position, Step, argument_path

MAX_SAFE_INTEGER = 2**53 - 1
_BOM = b"\xef\xbb\xbf"


class ArgumentProblem(enum.StrEnum):
    """Why arguments were refused; stable codes for the ledger and for tests."""

    TOO_LARGE = "too_large"
    BOM = "bom"
    INVALID_UTF8 = "invalid_utf8"
    TOO_DEEP = "too_deep"
    SYNTAX = "syntax"
    DUPLICATE_KEY = "duplicate_key"
    NON_FINITE_NUMBER = "non_finite_number"
    NUMBER_TOO_LARGE = "number_too_large"
    INVALID_UNICODE = "invalid_unicode"
    NUL_CHARACTER = "nul_character"
    STRING_TOO_LONG = "string_too_long"
    TOO_MANY_KEYS = "too_many_keys"
    NOT_AN_OBJECT = "not_an_object"


@frozen(kw_only=True)
class ArgumentLimits:
    """Bounds on one call's arguments (defaults of the design, all configurable)."""

    max_bytes: int = field(default=256 * 1024, validator=validators.ge(2))
    max_depth: int = field(default=64, validator=validators.ge(1))
    max_string_length: int = field(default=64 * 1024, validator=validators.ge(0))
    max_object_keys: int = field(default=1000, validator=validators.ge(0))


def arguments_digest(canonical: bytes, key: bytes = b"") -> str:
    """The digest that names canonical arguments: keyed by the log where a key is given
    (``hmac-sha256:`` and its hex: nobody without the log's secret can tell which arguments
    it names by trying some), ``sha256:`` and its hex otherwise (turns of rules before 10)."""
    if key:
        return "hmac-sha256:" + hmac.new(key, canonical, hashlib.sha256).hexdigest()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


@frozen(kw_only=True)
class ParsedArguments:
    """Arguments that passed every rule: a deeply immutable value and its canonical form."""

    value: Mapping[str, Any]
    canonical: bytes
    digest: str


@frozen(kw_only=True)
class RejectedArguments:
    """Arguments that broke a rule: which one, and where (a path of array indexes and the
    positions of names, never a value nor a name)."""

    problem: ArgumentProblem
    path: str = "$"
    detail: str = ""

    def describe(self) -> str:
        suffix = f": {self.detail}" if self.detail else ""
        return f"{self.problem.value} at {self.path}{suffix}"


class _Refused(Exception):
    def __init__(self, problem: ArgumentProblem, detail: str = "") -> None:
        super().__init__(problem.value)
        self.problem = problem
        self.detail = detail
        self.in_name = False
        """The value refused is a name of an object, not a value."""
        self.within: list[tuple[Step, str | None]] = []
        """The steps from the top down to the value refused, innermost first, each with the
        name it passes (the earlier rules' paths show it): added as the refusal leaves each
        level, so that no path is written for values that pass."""

    def rejection(self, *, names_shown: bool) -> RejectedArguments:
        steps = list(reversed(self.within))
        if names_shown:
            path = "$" + "".join(
                argument_path([step])[1:] if name is None else _step_to(name)
                for step, name in steps
            )
            return RejectedArguments(problem=self.problem, path=path, detail=self.detail)
        detail = self.detail
        if self.in_name:
            detail = f"in the name, {detail}" if detail else "in the name"
        return RejectedArguments(
            problem=self.problem, path=argument_path(step for step, _ in steps), detail=detail
        )


def _depth_exceeds(text: str, max_depth: int) -> bool:
    # Nesting never goes deeper than the brackets that open it, counted in C; only arguments
    # with more of them than the limit (inside strings or not) are walked character by character.
    if text.count("[") + text.count("{") <= max_depth:
        return False
    depth = 0
    in_string = escaped = False
    for character in text:
        if in_string:
            if escaped:
                escaped = False
            elif character == "\\":
                escaped = True
            elif character == '"':
                in_string = False
        elif character == '"':
            in_string = True
        elif character in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif character in "]}":
            depth -= 1
    return False


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise _Refused(ArgumentProblem.DUPLICATE_KEY, detail="a name appears twice")
        result[name] = value
    return result


def _constant(name: str) -> float:
    raise _Refused(ArgumentProblem.NON_FINITE_NUMBER, detail=name)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(ArgumentProblem.NON_FINITE_NUMBER, detail="overflows a double")
    # Every double this large is a whole number, and its canonical form is written as an
    # integer: it must fall under the same bound as integers, or the canonical bytes of an
    # accepted value would be refused when parsed again.
    if abs(value) > MAX_SAFE_INTEGER:
        raise _Refused(ArgumentProblem.NUMBER_TOO_LARGE, detail="beyond +-(2**53 - 1)")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > 16:
        raise _Refused(ArgumentProblem.NUMBER_TOO_LARGE, detail=f"{len(text)} digits")
    value = int(text)
    if abs(value) > MAX_SAFE_INTEGER:
        raise _Refused(ArgumentProblem.NUMBER_TOO_LARGE, detail="beyond +-(2**53 - 1)")
    return value


_NONCHARACTER = re.compile(
    "[\ufdd0-\ufdef"
    + "".join(
        f"{chr(plane * 0x10000 + 0xFFFE)}{chr(plane * 0x10000 + 0xFFFF)}" for plane in range(17)
    )
    + "]"
)


def _check_string(text: str, limits: ArgumentLimits) -> None:
    if len(text) > limits.max_string_length:
        raise _Refused(
            ArgumentProblem.STRING_TOO_LONG,
            detail=f"{len(text)} characters, the limit is {limits.max_string_length}",
        )
    if "\x00" in text:
        raise _Refused(ArgumentProblem.NUL_CHARACTER)
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _Refused(ArgumentProblem.INVALID_UNICODE, detail="lone surrogate") from None
    if _NONCHARACTER.search(text):
        raise _Refused(ArgumentProblem.INVALID_UNICODE, detail="noncharacter")


def _step_to(name: str) -> str:
    return f".{name}" if name.isidentifier() else f"[{json.dumps(name)}]"


class _Freezer:
    """Checks a parsed value and freezes it, noting whether the standard library's encoder
    writes its canonical form (``plain``): it does unless a number is a float (ECMAScript
    prints those) or a name holds a character beyond the Basic Multilingual Plane (names are
    sorted by UTF-16 code units, which order those apart from code points)."""

    __slots__ = ("limits", "plain")

    def __init__(self, limits: ArgumentLimits) -> None:
        self.limits = limits
        self.plain = True

    def freeze(self, value: Any) -> Any:
        kind = type(value)
        if kind is dict:
            limits = self.limits
            if len(value) > limits.max_object_keys:
                raise _Refused(
                    ArgumentProblem.TOO_MANY_KEYS,
                    detail=f"{len(value)} names, the limit is {limits.max_object_keys}",
                )
            frozen_items = {}
            for position, (name, item) in enumerate(value.items(), start=1):
                try:
                    try:
                        _check_string(name, limits)
                    except _Refused as refused:
                        refused.in_name = True
                        raise
                    frozen_items[name] = self.freeze(item)
                except _Refused as refused:
                    refused.within.append((Position(position), name))
                    raise
                if self.plain and not name.isascii() and max(name) > "\uffff":
                    self.plain = False
            return MappingProxyType(frozen_items)
        if kind is list:
            items = []
            for index, item in enumerate(value):
                try:
                    items.append(self.freeze(item))
                except _Refused as refused:
                    refused.within.append((Index(index), None))
                    raise
            return tuple(items)
        if kind is str:
            _check_string(value, self.limits)
        elif kind is float:
            self.plain = False
        return value


_DECODER = json.JSONDecoder(
    object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float, parse_int=_int
)


def parse_arguments(
    data: bytes, limits: ArgumentLimits | None = None, *, digest_key: bytes = b""
) -> ParsedArguments | RejectedArguments:
    """Parse the assembled argument bytes of one call, once, by the rules of this module; the
    digest keyed by ``digest_key`` where one is given (see ``arguments_digest``)."""
    return _parsed(data, limits or ArgumentLimits(), names_shown=False, digest_key=digest_key)


def described_by_earlier_rules(data: bytes, limits: ArgumentLimits) -> str:
    """The detail of refused arguments as a turn judged by rules before 8 recorded it: its
    path named each name of the arguments on the way (``$["a b"].c``), as they were written."""
    rejected = _parsed(data, limits, names_shown=True)
    assert isinstance(rejected, RejectedArguments)
    return rejected.describe()


def _parsed(
    data: bytes, limits: ArgumentLimits, *, names_shown: bool, digest_key: bytes = b""
) -> ParsedArguments | RejectedArguments:
    if len(data) > limits.max_bytes:
        return RejectedArguments(
            problem=ArgumentProblem.TOO_LARGE,
            detail=f"{len(data)} bytes, the limit is {limits.max_bytes}",
        )
    if data.startswith(_BOM):
        return RejectedArguments(problem=ArgumentProblem.BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        return RejectedArguments(
            problem=ArgumentProblem.INVALID_UTF8, detail=f"at byte {error.start}"
        )
    if text.startswith("\ufeff"):
        return RejectedArguments(problem=ArgumentProblem.BOM)
    if _depth_exceeds(text, limits.max_depth):
        return RejectedArguments(
            problem=ArgumentProblem.TOO_DEEP, detail=f"the limit is {limits.max_depth}"
        )
    try:
        value = _DECODER.decode(text)
        if not isinstance(value, dict):
            raise _Refused(ArgumentProblem.NOT_AN_OBJECT, detail=type(value).__name__)
        freezer = _Freezer(limits)
        frozen_value = freezer.freeze(value)
    except _Refused as refused:
        return refused.rejection(names_shown=names_shown)
    except json.JSONDecodeError as error:
        return RejectedArguments(
            problem=ArgumentProblem.SYNTAX, detail=f"{error.msg} at character {error.pos}"
        )
    except RecursionError:
        return RejectedArguments(problem=ArgumentProblem.TOO_DEEP)
    except ValueError as error:
        return RejectedArguments(problem=ArgumentProblem.SYNTAX, detail=type(error).__name__)
    canonical = (
        _PLAIN_ENCODER.encode(value).encode("utf-8") if freezer.plain else canonical_json(value)
    )
    return ParsedArguments(
        value=frozen_value,
        canonical=canonical,
        digest=arguments_digest(canonical, digest_key),
    )


def _number(value: float) -> str:
    """A double as ECMAScript's Number.prototype.toString prints it (RFC 8785 section 3.2.2.3)."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    count = len(digits)
    if count <= point <= 21:
        return sign + digits + "0" * (point - count)
    if 0 < point <= 21:
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * -point + digits
    shown = point - 1
    exponent_text = ("+" if shown > 0 else "-") + str(abs(shown))
    if count == 1:
        return sign + digits + "e" + exponent_text
    return sign + digits[0] + "." + digits[1:] + "e" + exponent_text


def _canonical(value: Any, out: list[str]) -> None:
    if isinstance(value, Mapping):
        out.append("{")
        for index, name in enumerate(sorted(value, key=lambda n: n.encode("utf-16-be"))):
            if index:
                out.append(",")
            out.append(json.dumps(name, ensure_ascii=False))
            out.append(":")
            _canonical(value[name], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _canonical(item, out)
        out.append("]")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_number(value))
    else:
        raise TypeError(f"{type(value).__name__} is not a JSON value")


# Names sorted, no whitespace, the same minimal string escapes as ``_canonical``: for a value
# without floats whose names sort alike by code points and by UTF-16 code units, RFC 8785.
_PLAIN_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)


def canonical_json(value: Any) -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of a JSON value."""
    out: list[str] = []
    _canonical(value, out)
    return "".join(out).encode("utf-8")
