"""JSON Schemas of tool declarations: compiled once, and what a call's arguments break of
them, as a detail that names each problem's place and kind (never a value, never a name the
model wrote: ``inert.actors._places``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import jsonschema_rs

from ..events import ConfigurationError
from ._arguments import ParsedArguments
from ._places import MAX_DETAIL_LENGTH, SchemaPlaces, bounded

if TYPE_CHECKING:
    from ._tools import ToolDeclaration


MAX_REPORTED_PROBLEMS = 8
"""Schema problems named in a failed call's detail; the count of the rest follows them."""


def compile_schema(declaration: ToolDeclaration) -> jsonschema_rs.Validator | None:
    """The declaration's JSON Schema compiled once, with formats asserted, remote references
    refused and regular expressions matched in linear time; None for a tool without one."""
    if not declaration.parameters:
        return None
    if declaration.strict:
        loose = _loose_objects(declaration.parameters, "")
        if loose:
            raise ConfigurationError(
                f"the parameters of tool {declaration.name!r} let the model add properties"
                f" nobody declared (at {', '.join(loose[:3])}): set additionalProperties: false"
                ' there, or register the tool with strict=False (x-inert: {"strict": false})'
            )
    try:
        return jsonschema_rs.validator_for(
            _thawed(declaration.parameters),
            validate_formats=True,
            pattern_options=jsonschema_rs.RegexOptions(),
            offline=True,
        )
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ConfigurationError(
            f"the parameters of tool {declaration.name!r} are not a JSON Schema inert can"
            f" use: {first}"
        ) from None


_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_ONES = (
    "items",
    "additionalItems",
    "additionalProperties",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "propertyNames",
)
_OBJECT_KEYWORDS = ("properties", "patternProperties", "required")


def _loose_objects(schema: object, pointer: str) -> list[str]:
    """JSON pointers of the object schemas that let unknown properties through."""
    if not isinstance(schema, Mapping):
        return []
    found: list[str] = []
    kind = schema.get("type")
    is_object = kind == "object" or (isinstance(kind, list | tuple) and "object" in kind)
    # An object schema is loose when nothing says what other properties may be: neither
    # additionalProperties nor unevaluatedProperties, or only ``true``. A schema for them (a map
    # of strings, say) is a declaration too.
    if (is_object or any(keyword in schema for keyword in _OBJECT_KEYWORDS)) and all(
        schema.get(keyword, True) is True
        for keyword in ("additionalProperties", "unevaluatedProperties")
    ):
        found.append(pointer or "/")
    for keyword in _SCHEMA_MAPS:
        inner = schema.get(keyword)
        if isinstance(inner, Mapping):
            for name, sub in inner.items():
                found += _loose_objects(sub, f"{pointer}/{keyword}/{name}")
    for keyword in (*_SCHEMA_LISTS, "items"):
        inner = schema.get(keyword)
        if isinstance(inner, list | tuple):
            for index, sub in enumerate(inner):
                found += _loose_objects(sub, f"{pointer}/{keyword}/{index}")
    for keyword in _SCHEMA_ONES:
        found += _loose_objects(schema.get(keyword), f"{pointer}/{keyword}")
    return found


def schema_problems(
    schema: jsonschema_rs.Validator | None, arguments: ParsedArguments, places: SchemaPlaces
) -> str:
    """Where and how the arguments break the schema, as ``path kind`` pairs: never a value,
    never a name of the arguments the schema does not declare (``places``). A required
    property that is absent is named (the schema's name); a property nobody declared, by its
    position."""
    if schema is None:
        return ""
    value = arguments.value
    problems = _schema_errors(schema.iter_errors(json.loads(arguments.canonical)))
    count = 0
    shown: list[str] = []
    for steps, kind, missing in problems:
        count += 1
        if len(shown) < MAX_REPORTED_PROBLEMS:
            shown.append(f"{places.path(value, steps, missing=missing)} {kind}")
    return _listed(shown, count)


def _schema_errors(
    errors: Iterable[jsonschema_rs.ValidationError],
) -> Iterable[tuple[list[str | int], str, str]]:
    """Each problem as the steps of its place, its kind and, for a required property, its name:
    a property not allowed is a problem of its own, at that property."""
    for error in errors:
        kind = error.kind
        name = _snake(type(kind).__name__)
        steps = list(error.instance_path)
        if isinstance(
            kind,
            jsonschema_rs.ValidationErrorKind.AdditionalProperties
            | jsonschema_rs.ValidationErrorKind.UnevaluatedProperties,
        ):
            for unexpected in kind.unexpected:
                yield [*steps, unexpected], name, ""
        elif isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
            yield steps, name, str(kind.property)
        else:
            yield steps, name, ""


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


def _thawed(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thawed(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_thawed(inner) for inner in value]
    return value


def _listed(shown: Iterable[str], count: int) -> str:
    """The first problems (at most ``MAX_REPORTED_PROBLEMS``, in ``MAX_DETAIL_LENGTH``
    characters), and how many more there were."""
    listed: list[str] = []
    length = 0
    for problem in shown:
        if len(listed) == MAX_REPORTED_PROBLEMS:
            break
        more = count - len(listed) - 1
        room = length + len(problem) + (2 if listed else 0)
        if room + (len(f"; and {more} more") if more else 0) > MAX_DETAIL_LENGTH and listed:
            break
        listed.append(problem)
        length = room
    more = count - len(listed)
    text = "; ".join(listed)
    return bounded(f"{text}; and {more} more" if more > 0 else text)
