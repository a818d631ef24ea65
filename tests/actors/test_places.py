"""Places in the arguments: every path inert writes names the schema's declared properties,
array indexes and the positions of other names, never a name the model wrote, over many
schemas and names; details, identifiers and unoffered tool names are bounded."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import pytest
from bad_inputs import CANARY, HOSTILE_KEYS
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import CallKey, ConfigurationError, FieldProblem, ToolDeclaration
from inert.actors import (
    ParsedArguments,
    ToolRegistry,
    ValidationRequested,
    ValidationResult,
    parse_arguments,
)
from inert.actors._arguments import ArgumentLimits, RejectedArguments, described_by_earlier_rules
from inert.actors._places import (
    MAX_DETAIL_LENGTH,
    MAX_PATH_LENGTH,
    UNKNOWN,
    Declared,
    Index,
    Position,
    SchemaPlaces,
    Step,
    argument_path,
    bounded,
    is_identifier,
    unoffered_tool,
)
from inert.actors._schemas import compile_schema, schema_problems
from inert.events import FailReason

KEY = CallKey(tenant="acme", conversation="c1", turn="t1", response="r1", item="i1", call="call_1")
DECLARED = ["city", "days", "first name", "x-id", "a/b~c", "tags", "sku"]
"""The property names the generated schemas declare (some not identifiers)."""


def test_each_kind_of_step_is_written_its_own_way() -> None:
    """Declared names as written (quoted where not plain), indexes, positions, the unknown."""
    steps: list[Step] = [Declared("items"), Index(3), Position(2), Declared("first name"), UNKNOWN]
    assert argument_path(steps) == '$.items[3].<key #2>["first name"].<?>'
    assert argument_path([]) == "$"


def test_a_long_path_keeps_its_last_steps_within_its_bound() -> None:
    """Past MAX_PATH_LENGTH characters a path keeps the steps nearest to the value."""
    path = argument_path([Position(n) for n in range(1, 40)] + [Index(7)])
    assert len(path) <= MAX_PATH_LENGTH
    assert path.startswith("$...")
    assert path.endswith(".<key #39>[7]")
    assert len(argument_path([Declared("d" * 500)])) <= MAX_PATH_LENGTH


@given(
    steps=st.lists(
        st.one_of(
            st.builds(Declared, st.text()),
            st.builds(Index, st.integers(0, 10**6)),
            st.builds(Position, st.integers(1, 1001)),
            st.just(UNKNOWN),
        ),
        max_size=80,
    )
)
def test_every_path_is_bounded(steps: list[Any]) -> None:
    """Whatever its steps, a path starts at the top and fits its bound."""
    path = argument_path(steps)
    assert path.startswith("$")
    assert len(path) <= MAX_PATH_LENGTH


@given(st.text(max_size=1000))
def test_a_bounded_detail_fits_and_bounding_again_changes_nothing(detail: str) -> None:
    """A detail is cut to MAX_DETAIL_LENGTH characters, and one that fits stays as it is (a
    replay bounds the recorded detail again and must find the same)."""
    once = bounded(detail)
    assert len(once) <= MAX_DETAIL_LENGTH
    assert bounded(once) == once
    assert once == detail or len(detail) > MAX_DETAIL_LENGTH


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("maximum", True),
        ("refunds_elsewhere", True),
        ("ToolError", True),
        ("weather.unavailable:503", True),
        ("_private", True),
        ("a" * 64, True),
        ("a" * 65, False),
        ("", False),
        ("1st", False),
        ("value was 42", False),
        ("naïve", False),
        ("a\nb", False),
        ("Authorization: Bearer sk-1", False),
    ],
)
def test_identifiers_are_short_and_plain(text: str, expected: bool) -> None:
    """An identifier: an ASCII letter or _, then letters, digits and _ . : -, 64 at most."""
    assert is_identifier(text) is expected


@given(st.text())
def test_an_unoffered_tool_is_named_by_length_and_digest_only(name: str) -> None:
    """The stand-in holds no character of the name beyond its length and digest, is bounded,
    and is its own stand-in."""
    shown = unoffered_tool(name)
    assert re.fullmatch(r"<unoffered tool of \d+ characters, sha256:[0-9a-f]{16}>", shown)
    assert unoffered_tool(shown) == shown
    assert unoffered_tool("CANARY-TOOL") != unoffered_tool("CANARY-TOOM")


# --- schemas and names ------------------------------------------------------------------------

leaves: st.SearchStrategy[dict[str, Any]] = st.sampled_from(
    [
        {"type": "string", "maxLength": 3},
        {"type": "integer", "minimum": 0},
        {"enum": [1, 2]},
        {"type": "boolean"},
        {},
    ]
)


def _object(properties: dict[str, Any], extra: Any, required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(set(required)),
        "additionalProperties": extra,
    }


def _schemas(leaf: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.builds(
                _object,
                st.dictionaries(st.sampled_from(DECLARED), inner, max_size=3),
                st.one_of(st.just(False), inner),
                st.lists(st.sampled_from(DECLARED), max_size=2),
            ),
            st.builds(lambda items: {"type": "array", "items": items}, inner),
            st.builds(
                lambda prefix, items: {"type": "array", "prefixItems": prefix, "items": items},
                st.lists(inner, min_size=1, max_size=2),
                inner,
            ),
            st.builds(lambda one, two: {"allOf": [one, two]}, inner, inner),
            st.builds(lambda one, two: {"anyOf": [one, two]}, inner, inner),
            st.builds(
                lambda inner_schema: {
                    "type": "object",
                    "patternProperties": {"^x": inner_schema},
                    "additionalProperties": False,
                },
                inner,
            ),
        ),
        max_leaves=8,
    )


schemas = st.builds(
    lambda shared, body: {**body, "$defs": {"shared": shared}},
    _schemas(leaves),
    _schemas(st.one_of(leaves, st.just({"$ref": "#/$defs/shared"}))),
)
"""Schemas of maps, arrays, prefixes, combinators, and references to a shared definition."""

plain_text = st.text(st.characters(exclude_categories=("Cs", "Cc", "Cn")), max_size=6)
"""Text the strict parse takes (no NUL, surrogate or noncharacter)."""
names = st.one_of(
    st.sampled_from(DECLARED),
    st.sampled_from(HOSTILE_KEYS),
    plain_text.map(lambda text: f"CANARY{text}"),
)
values = st.recursive(
    st.one_of(
        st.integers(-5, 5),
        st.booleans(),
        st.none(),
        plain_text.map(lambda text: f"CANARY-VAL{text}"),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(names, inner, max_size=4)),
    max_leaves=12,
)


def _declared_in(schema: object) -> set[str]:
    """Every name declared under properties (or required) anywhere in the schema."""
    found: set[str] = set()
    if isinstance(schema, dict):
        found.update(schema.get("properties", {}))
        found.update(schema.get("required", []))
        for inner in schema.values():
            found |= _declared_in(inner)
    elif isinstance(schema, list):
        for inner in schema:
            found |= _declared_in(inner)
    return found


_STEP = re.compile(
    r'\.([A-Za-z_][A-Za-z0-9_]*)|\[("(?:[^"\\]|\\.)*")\]|\[\d+\]|\.<key #\d+>|\.<\?>'
)


def _shown_names(path: str) -> set[str]:
    """The declared names a path shows; asserts it is made of steps and nothing else."""
    assert path.startswith("$"), path
    rest = path.removeprefix("$...") if path.startswith("$...") else path[1:]
    shown: set[str] = set()
    position = 0
    while position < len(rest):
        step = _STEP.match(rest, position)
        assert step is not None, (path, rest[position:])
        if step[1]:
            shown.add(step[1])
        elif step[2]:
            shown.add(json.loads(step[2]))
        position = step.end()
    return shown


def _pointers(value: object, path: str = "") -> list[str]:
    if isinstance(value, dict):
        found = []
        for name, inner in value.items():
            step = f"{path}/{name.replace('~', '~0').replace('/', '~1')}"
            found += [step, *_pointers(inner, step)]
        return found
    if isinstance(value, list):
        return [
            p
            for i, inner in enumerate(value)
            for p in [f"{path}/{i}", *_pointers(inner, f"{path}/{i}")]
        ]
    return []


@settings(max_examples=300, deadline=None)
@given(schema=schemas, arguments=st.dictionaries(names, values, max_size=6))
def test_schema_problems_show_declared_names_and_nothing_the_model_wrote(
    schema: dict[str, Any], arguments: dict[str, Any]
) -> None:
    """Over generated schemas (maps, arrays, prefixes, combinators, references) and arguments
    with hostile names: every problem's path is made of steps, the names it shows are the
    schema's, no canary is shown, and the detail is bounded."""
    declaration = ToolDeclaration(name="t", parameters=schema, strict=False)
    compiled = compile_schema(declaration)
    parsed = parse_arguments(json.dumps(arguments).encode())
    assert isinstance(parsed, ParsedArguments)
    detail = schema_problems(compiled, parsed, SchemaPlaces(schema))
    assert CANARY not in detail
    assert len(detail) <= MAX_DETAIL_LENGTH
    declared = _declared_in(schema)
    for problem in filter(None, re.split(r"; (?:and \d+ more)?", detail)):
        path, _, kind = problem.rpartition(" ")
        assert re.fullmatch(r"[a-z_]+", kind), problem
        assert _shown_names(path) <= declared, (path, declared)


@settings(max_examples=300, deadline=None)
@given(schema=schemas, arguments=st.dictionaries(names, values, max_size=6), data=st.data())
def test_field_paths_show_declared_names_and_nothing_the_model_wrote(
    schema: dict[str, Any], arguments: dict[str, Any], data: st.DataObject
) -> None:
    """A business validator's JSON pointer to any place of the arguments, or to none, is
    shown by the same steps: declared names only, positions and indexes for the rest."""
    parsed = parse_arguments(json.dumps(arguments).encode())
    assert isinstance(parsed, ParsedArguments)
    places = SchemaPlaces(schema)
    pointers = [
        *_pointers(arguments),
        "",
        "/CANARY-absent/0",
        data.draw(st.text().map(lambda t: "/" + t)),
    ]
    declared = _declared_in(schema)
    for pointer in pointers:
        path = places.pointer_path(parsed.value, pointer)
        assert CANARY not in path, (pointer, path)
        assert _shown_names(path) <= declared


def test_a_declared_name_is_shown_through_references_and_items() -> None:
    """Names declared behind $ref, items, prefixItems and allOf are shown; a map's names are
    positions, counted as the arguments wrote them; a required name absent is named."""
    schema = {
        "type": "object",
        "properties": {
            "orders": {"type": "array", "items": {"$ref": "#/$defs/order"}},
            "pair": {"type": "array", "prefixItems": [{"allOf": [{"$ref": "#/$defs/order"}]}]},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "$defs": {
            "order": {
                "type": "object",
                "properties": {"sku": {"type": "string"}},
                "required": ["qty"],
            }
        },
    }
    places = SchemaPlaces(schema)
    arguments = {
        "headers": {"b": "1", "Authorization: Bearer sk": "2"},
        "orders": [{"sku": 1}],
        "pair": [{"sku": 2}],
    }
    assert places.path(arguments, ["orders", 0, "sku"]) == "$.orders[0].sku"
    assert places.path(arguments, ["orders", 0], missing="qty") == "$.orders[0].qty"
    assert places.path(arguments, ["orders", 0], missing="other") == "$.orders[0].<?>"
    assert places.path(arguments, ["pair", 0, "sku"]) == "$.pair[0].sku"
    assert places.path(arguments, ["absent", 0, "sku"]) == "$.<?>.<?>.<?>"
    assert places.path(arguments, ["headers", "Authorization: Bearer sk"]) == "$.headers.<key #2>"
    assert places.pointer_path(arguments, "/headers/Authorization: Bearer sk") == (
        "$.headers.<key #2>"
    )
    assert places.pointer_path(arguments, "/orders/0/sku") == "$.orders[0].sku"
    assert places.pointer_path(arguments, "/orders/9") == "$.orders.<?>"


# --- the parser -------------------------------------------------------------------------------

_PARSER_PATH = re.compile(r"\$(?:\.\.\.)?(?:\.<key #\d+>|\[\d+\])*")
BAD_STRINGS = ["\x00", "\ud800", "\uffff", "\ufdd0", "x" * 70]


def _with_bad(value: Any, bad: str, path: list[int], in_name: bool) -> Any:
    """The value with ``bad`` put at one of its places (in a name or as a value)."""
    if not path:
        return {bad: 1} if in_name else bad
    step, rest = path[0], path[1:]
    if isinstance(value, dict) and value:
        name = list(value)[step % len(value)]
        return {**value, name: _with_bad(value[name], bad, rest, in_name)}
    if isinstance(value, list) and value:
        index = step % len(value)
        return [*value[:index], _with_bad(value[index], bad, rest, in_name), *value[index + 1 :]]
    return {f"CANARY-{bad}" if in_name else "CANARY": _with_bad(None, bad, [], in_name)}


@settings(max_examples=300, deadline=None)
@given(
    arguments=st.dictionaries(names, values, min_size=1, max_size=5),
    bad=st.sampled_from(BAD_STRINGS),
    path=st.lists(st.integers(0, 10), max_size=5),
    in_name=st.booleans(),
)
def test_a_refused_parse_names_positions_and_indexes_only(
    arguments: dict[str, Any], bad: str, path: list[int], in_name: bool
) -> None:
    """A NUL, a surrogate, a noncharacter or a string past its limit anywhere, in a name or
    a value, among names that hold canaries: the refusal's path is indexes and positions,
    its detail bounded, no name shown; the earlier rules' detail named them."""
    damaged = _with_bad(arguments, bad, path, in_name)
    data = json.dumps(damaged).encode()
    limits = ArgumentLimits(max_string_length=64)
    refused = parse_arguments(data, limits)
    assert isinstance(refused, RejectedArguments)
    assert _PARSER_PATH.fullmatch(refused.path), refused.path
    described = refused.describe()
    assert CANARY not in described
    assert len(described) <= MAX_DETAIL_LENGTH
    assert described_by_earlier_rules(data, limits).startswith(refused.problem.value)


# --- business validators ----------------------------------------------------------------------


async def _validated(declaration: ToolDeclaration, data: bytes) -> tuple[FailReason | None, str]:
    registry = ToolRegistry([declaration])
    arguments = parse_arguments(data)
    assert isinstance(arguments, ParsedArguments)
    result = await registry.validate(
        ValidationRequested(
            key=KEY,
            tool=declaration.offered(),
            principal="user:alice",
            arguments=arguments,
            cause=1,
            at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    )
    return result.failure, result.detail


@pytest.mark.parametrize("kind", ["value was 42", "", "a" * 65, "naïve", "x\ny", "1st"])
def test_a_field_problem_whose_kind_is_not_an_identifier_is_refused(kind: str) -> None:
    """A kind that could hold a value is a ConfigurationError where the problem is made; the
    error names the rule, not the kind."""
    with pytest.raises(ConfigurationError, match="identifier") as raised:
        FieldProblem("/amount", kind)
    assert kind not in str(raised.value) or kind == ""


@pytest.mark.parametrize("path", ["amount", "$.amount", "items/0"])
def test_a_field_problem_whose_path_is_not_a_pointer_is_refused(path: str) -> None:
    """A field path is a JSON pointer: '' or starting with '/'."""
    with pytest.raises(ConfigurationError, match="JSON pointer"):
        FieldProblem(path, "maximum")


def test_a_field_problem_says_its_kind_not_its_path() -> None:
    """The message of a FieldProblem is its kind alone: its path may hold the model's names."""
    problem = FieldProblem("/headers/Authorization: Bearer CANARY", "forbidden")
    assert str(problem) == "forbidden"
    assert CANARY not in repr(problem)


async def test_a_validator_that_writes_a_value_into_a_kind_fails_as_an_error() -> None:
    """The refusal of the kind, raised in the validator, fails the call validator_error,
    named by the error's type."""

    async def leaky(call: Any) -> None:
        raise FieldProblem("/note", f"not {call.arguments['note']}")

    declaration = ToolDeclaration(name="t", validator=leaky)
    assert await _validated(declaration, b'{"note": "CANARY-VAL"}') == (
        FailReason.VALIDATOR_ERROR,
        "ConfigurationError",
    )


async def test_a_check_s_long_detail_is_bounded() -> None:
    """What a registry's check says is cut to MAX_DETAIL_LENGTH characters."""

    async def wordy(request: ValidationRequested) -> ValidationResult:
        return ValidationResult(failure=FailReason.BUSINESS_INVALID, detail="x" * 5000)

    declaration = ToolDeclaration(name="t")
    registry = ToolRegistry([declaration], check=wordy)
    arguments = parse_arguments(b"{}")
    assert isinstance(arguments, ParsedArguments)
    result = await registry.validate(
        ValidationRequested(
            key=KEY,
            tool=declaration.offered(),
            principal="user:alice",
            arguments=arguments,
            cause=1,
            at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    )
    assert result.failure is FailReason.BUSINESS_INVALID
    assert len(result.detail) == MAX_DETAIL_LENGTH
