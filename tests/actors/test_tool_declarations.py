"""Tool declarations read from the providers' own formats (the TOOLS.json of ``inert feed``)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any, Literal

import attrs
import pytest

from inert import (
    ConfigurationError,
    IntentScope,
    ToolDeclaration,
    declaration_from_function,
    declarations_from_json,
)
from inert.actors import ToolRegistry

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}


def test_an_openai_responses_declaration() -> None:
    """A Responses function tool keeps its name, description and parameters."""
    [tool] = declarations_from_json(
        [{"type": "function", "name": "get_weather", "description": "d", "parameters": SCHEMA}]
    )
    assert tool == ToolDeclaration(name="get_weather", description="d", parameters=SCHEMA)


def test_a_chat_completions_declaration() -> None:
    """A Chat Completions tool is read from its nested function object."""
    [tool] = declarations_from_json(
        [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}}]
    )
    assert tool == ToolDeclaration(name="get_weather", parameters=SCHEMA)


def test_an_anthropic_declaration() -> None:
    """An Anthropic tool's input_schema is its parameters."""
    [tool] = declarations_from_json([{"name": "get_weather", "input_schema": SCHEMA}])
    assert tool == ToolDeclaration(name="get_weather", parameters=SCHEMA)


def test_a_bedrock_declaration() -> None:
    """A Bedrock toolSpec's inputSchema.json is its parameters."""
    [tool] = declarations_from_json(
        [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": SCHEMA}}}]
    )
    assert tool == ToolDeclaration(name="get_weather", parameters=SCHEMA)


def test_gemini_function_declarations() -> None:
    """Every function of a Gemini functionDeclarations list is a declaration."""
    tools = declarations_from_json(
        [{"functionDeclarations": [{"name": "a", "parameters": SCHEMA}, {"name": "b"}]}]
    )
    assert [tool.name for tool in tools] == ["a", "b"]
    assert dict(tools[1].parameters) == {}


def test_x_inert_max_bytes_and_strict_are_read() -> None:
    """A size allowance and strictness are inert's own settings of a declaration."""
    [tool] = declarations_from_json(
        [{"name": "note", "x-inert": {"max_bytes": 4096, "strict": False}}]
    )
    assert (tool.max_bytes, tool.strict) == (4096, False)


def test_x_inert_confirm_makes_a_tool_need_confirmation() -> None:
    """inert's own setting under x-inert asks for the person's confirmation."""
    [tool] = declarations_from_json([{"name": "send_email", "x-inert": {"confirm": True}}])
    assert tool.needs_confirmation


def test_x_inert_one_action_per_intent_is_read() -> None:
    """inert's own setting under x-inert runs each intent of the tool once in its scope."""
    [tool] = declarations_from_json(
        [{"name": "refund", "x-inert": {"one_action_per_intent": "conversation"}}]
    )
    assert tool.one_action_per_intent is IntentScope.CONVERSATION


def test_one_action_per_intent_is_part_of_the_declaration_and_of_what_the_turn_records() -> None:
    """Set, the scope changes the declaration's digest and travels with the tool a turn offers;
    unset, the digest is what it always was."""
    plain = ToolDeclaration(name="refund", parameters=SCHEMA)
    once = ToolDeclaration(name="refund", parameters=SCHEMA, one_action_per_intent="turn")
    assert once.one_action_per_intent is IntentScope.TURN
    assert once.digest != plain.digest
    assert plain.digest == ToolDeclaration(name="refund", parameters=SCHEMA).digest
    assert once.offered().one_action_per_intent is IntentScope.TURN
    assert plain.offered().one_action_per_intent is None
    assert ToolRegistry().register(attrs.evolve(once, strict=False)) == once.offered()


@pytest.mark.parametrize("value", ["day", "TURN", 1, True])
def test_a_scope_that_is_not_one_is_a_configuration_error(value: object) -> None:
    """Only None, "turn", "conversation" or an IntentScope name a scope; anything else says
    which ones do."""
    with pytest.raises(ConfigurationError, match="'turn', 'conversation'"):
        ToolDeclaration(name="refund", one_action_per_intent=value)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"name": "a"}, "JSON list"),
        (["a"], "not a JSON object"),
        ([{"parameters": SCHEMA}], "has no name"),
        ([{"name": "a", "parameters": []}], "parameters is not a JSON object"),
        ([{"name": "a"}, {"name": "a", "input_schema": {}}], "more than once: a"),
        ([{"name": "a", "x-inert": {"confirm": "yes"}}], "confirm and strict are true or false"),
        ([{"name": "a", "x-inert": {"retries": 3}}], "unknown x-inert settings: retries"),
        ([{"functionDeclarations": {}}], "functionDeclarations is not a list"),
        ([{"name": "a", "x-inert": {"max_bytes": "4k"}}], "max_bytes is a count"),
        (
            [{"name": "a", "x-inert": {"one_action_per_intent": "day"}}],
            "tool 'a': x-inert one_action_per_intent is None, 'turn', 'conversation'",
        ),
    ],
)
def test_a_bad_document_is_a_configuration_error(document: object, message: str) -> None:
    """A document that is not a list of declarations is refused with what is wrong."""
    with pytest.raises(ConfigurationError, match=message):
        declarations_from_json(document)


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


async def get_weather(
    city: str,
    *,
    unit: Unit = Unit.CELSIUS,
    days: int | None = None,
    hours: list[int] | None = None,
    labels: dict[str, str] | None = None,
    mode: Literal["fast", "exact"] = "fast",
    alerts: bool = False,
    ratio: float = 1.0,
) -> None:
    """The weather in a city.

    Only the first paragraph describes the tool.
    """


def test_a_declaration_from_a_function_s_signature() -> None:
    """Each parameter is a property of its type, required without a default, nothing else
    allowed, described by the docstring's first paragraph; strict schemas register."""
    tool = declaration_from_function(get_weather, needs_confirmation=True)
    assert (tool.name, tool.description, tool.needs_confirmation) == (
        "get_weather",
        "The weather in a city.",
        True,
    )
    assert dict(tool.parameters) == {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "days": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "hours": {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]},
            "labels": {
                "anyOf": [
                    {"type": "object", "additionalProperties": {"type": "string"}},
                    {"type": "null"},
                ]
            },
            "mode": {"enum": ["fast", "exact"]},
            "alerts": {"type": "boolean"},
            "ratio": {"type": "number"},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    ToolRegistry([tool])
    once = declaration_from_function(get_weather, one_action_per_intent="turn")
    assert once.one_action_per_intent is IntentScope.TURN


def _untyped(city, *rest: str) -> None:  # type: ignore[no-untyped-def]
    """Not a tool."""


def _unsupported(when: set[str]) -> None:
    """Not a tool either."""


@pytest.mark.parametrize(
    ("function", "message"),
    [(_untyped, "has no annotation"), (_unsupported, "has no JSON Schema inert derives")],
    ids=["missing annotation", "unsupported type"],
)
def test_a_signature_without_a_schema_is_a_configuration_error(
    function: Callable[..., Any], message: str
) -> None:
    """A parameter without an annotation, or of a type with no JSON Schema, is refused."""
    with pytest.raises(ConfigurationError, match=message):
        declaration_from_function(function)
