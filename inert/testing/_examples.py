"""Example arguments made from a tool's JSON Schema, for a tool declared without any.

A simulation streams, for each call, one of its tool's example payloads (or a malformed variant
the plan derives from one). A tool given as a bare declaration or as a function has none: they
are made here from its schema, the same in every process, so that a seed replays exactly.

The valid bodies vary what the schema leaves open: each string, number and choice a business
check looks at, and which optional properties are present. A few bodies break the schema (a
required property left out, a value of another type, a choice not offered), so that its refusal
is exercised too. Each body is checked against the schema itself: one meant valid that the
schema refuses (a ``pattern`` the samples do not follow, say) is left out, and so is one meant
to break it that the schema accepts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import jsonschema_rs

from ..actors import ToolDeclaration
from ..actors._schemas import _thawed, compile_schema
from ..events import ConfigurationError

VALID = 6
"""Valid bodies made for a tool, at most (a schema with few open values gives fewer)."""

INVALID = 3
"""Bodies that break the schema, at most: about one call in three of the tool's."""

MAX_DEPTH = 6
"""How deep optional properties and array items are made: a recursive schema stops there."""

_STRINGS = (
    "Paris",
    "T\u014dky\u014d",
    "a note, with 'quotes' and spaces",
    "x",
    "Zo\u00eb",
    "42",
    "ABC",
    "",
)
_INTEGERS = (1, 42, 0, 1234, -7, 100_000)
_NUMBERS = (1.5, 42, 0.25, 1234.5, -7.75, 100_000)
_FORMATS = {
    "email": "user{n}@example.com",
    "date": "2026-01-{day:02d}",
    "date-time": "2026-01-{day:02d}T12:30:00Z",
    "time": "12:30:{day:02d}Z",
    "uri": "https://example.com/item/{n}",
    "uuid": "00000000-0000-4000-8000-0000000000{day:02d}",
    "ipv4": "192.0.2.{n}",
    "hostname": "host{n}.example.com",
}


def schema_examples(declaration: ToolDeclaration) -> tuple[bytes, ...]:
    """Argument payloads for a tool from its schema: up to ``VALID`` it accepts, then up to
    ``INVALID`` it refuses; a ``ConfigurationError`` when none it accepts could be made."""
    schema = compile_schema(declaration)
    root = _thawed(declaration.parameters)
    # Arguments are an object: a schema that does not say (none at all, say) means one.
    top = root if "type" in root else {"type": "object", **root}
    valid: list[bytes] = []
    for variant in range(VALID):
        value = _value(top, root, variant, 0)
        body = _dump(value)
        if isinstance(value, dict) and _accepts(schema, value) and body not in valid:
            valid.append(body)
    if not valid:
        raise ConfigurationError(
            f"tool {declaration.name!r}: no arguments made from its schema pass it (a pattern or"
            " a format the samples do not follow?): give it examples of your own with"
            " SimulatedTool(declaration=..., examples=[...])"
        )
    invalid: list[bytes] = []
    for broken in _breaking(root, json.loads(valid[0])):
        body = _dump(broken)
        if len(invalid) < INVALID and not _accepts(schema, broken) and body not in invalid:
            invalid.append(body)
    return (*valid, *invalid)


def _dump(value: object) -> bytes:
    # Spaced as a model writes it: the plan cuts the bytes into fragments anywhere.
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode()


def _accepts(schema: jsonschema_rs.Validator | None, value: object) -> bool:
    return schema is None or schema.is_valid(value)


def _resolved(schema: object, root: Mapping[str, Any]) -> object:
    """A schema with its local ``$ref`` (``#/$defs/...``) followed; any other stays as it is."""
    seen = 0
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and seen < 16:
        reference: str = schema["$ref"]
        if not reference.startswith("#"):
            return schema
        target: object = root
        for part in [part for part in reference[1:].split("/") if part]:
            step = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or step not in target:
                return schema
            target = target[step]
        schema, seen = target, seen + 1
    return schema


def _value(schema: object, root: Mapping[str, Any], variant: int, depth: int) -> Any:
    """A value the schema should accept, the ``variant``-th of the ones made for it."""
    schema = _resolved(schema, root)
    if not isinstance(schema, Mapping):
        # ``true`` (anything) or ``false`` (nothing, which the check of the body finds).
        return _STRINGS[variant % len(_STRINGS)]
    if "const" in schema:
        return schema["const"]
    choices = schema.get("enum")
    if isinstance(choices, list) and choices:
        return choices[variant % len(choices)]
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            return _value(branches[variant % len(branches)], root, variant, depth)
    parts = schema.get("allOf")
    if isinstance(parts, list):
        schema = _merged([schema, *(_resolved(part, root) for part in parts)])
    match _kind(schema, variant):
        case "object":
            return _object(schema, root, variant, depth)
        case "array":
            return _array(schema, root, variant, depth)
        case "integer":
            return _bounded(schema, _INTEGERS[variant % len(_INTEGERS)])
        case "number":
            return _bounded(schema, _NUMBERS[variant % len(_NUMBERS)])
        case "boolean":
            return variant // 2 % 2 == 0
        case "null":
            return None
    return _string(schema, variant)


def _merged(schemas: Sequence[object]) -> dict[str, Any]:
    """The keywords of ``allOf``'s schemas as one: properties and required joined, the rest
    taken from the last one that says it."""
    merged: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for schema in schemas:
        if not isinstance(schema, Mapping):
            continue
        merged.update({key: value for key, value in schema.items() if key != "allOf"})
        properties.update(schema.get("properties") or {})
        required += [name for name in schema.get("required") or [] if name not in required]
    if properties:
        merged["properties"] = properties
    if required:
        merged["required"] = required
    return merged


def _kind(schema: Mapping[str, Any], variant: int) -> str:
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        # ``null`` last, so that the first variants are the values the tool is about.
        ordered = sorted(kind, key=lambda name: name == "null")
        return str(ordered[variant % len(ordered)])
    if isinstance(kind, str):
        return kind
    if any(key in schema for key in ("properties", "required", "additionalProperties")):
        return "object"
    if any(key in schema for key in ("items", "prefixItems", "minItems", "maxItems")):
        return "array"
    if any(key in schema for key in ("minimum", "maximum", "multipleOf")):
        return "number"
    return "string"


def _object(
    schema: Mapping[str, Any], root: Mapping[str, Any], variant: int, depth: int
) -> dict[str, Any]:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    required = [name for name in schema.get("required") or [] if isinstance(name, str)]
    value: dict[str, Any] = {}
    for index, (name, inner) in enumerate(properties.items()):
        # The first variant has every property, the second the required ones only, the others
        # about half, a different half each (and not the half whose values share a parity).
        wanted = variant == 0 or (variant > 1 and (3 * variant + index) % 4 < 2)
        if name in required or (wanted and depth < MAX_DEPTH):
            value[name] = _value(inner, root, variant + index, depth + 1)
    for name in required:
        value.setdefault(name, _STRINGS[variant % len(_STRINGS)])
    extra = schema.get("additionalProperties")
    if not properties and isinstance(extra, Mapping) and depth < MAX_DEPTH:
        # A map (``dict[str, T]``): a few entries.
        for index in range(variant % 3):
            value[f"key{index}"] = _value(extra, root, variant + index, depth + 1)
    return value


def _array(
    schema: Mapping[str, Any], root: Mapping[str, Any], variant: int, depth: int
) -> list[Any]:
    prefix = schema.get("prefixItems")
    prefix = prefix if isinstance(prefix, list) else []
    items = schema.get("items", True)
    least = max(int(schema.get("minItems", 0)), len(prefix))
    most = int(schema.get("maxItems", least + 2))
    count = least if depth >= MAX_DEPTH else min(max(variant % 3, least), most)
    return [
        _value(prefix[index] if index < len(prefix) else items, root, variant + index, depth + 1)
        for index in range(count)
    ]


def _bounded(schema: Mapping[str, Any], sample: float) -> Any:
    low, high = schema.get("minimum"), schema.get("maximum")
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        low = schema["exclusiveMinimum"] + 1
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        high = schema["exclusiveMaximum"] - 1
    value = sample
    if isinstance(low, int | float) and value < low:
        value = low
    if isinstance(high, int | float) and value > high:
        value = high
    step = schema.get("multipleOf")
    if isinstance(step, int | float) and step > 0:
        value = (value // step) * step
        if isinstance(low, int | float) and value < low:
            value += step
    return int(value) if schema.get("type") == "integer" else value


def _string(schema: Mapping[str, Any], variant: int) -> str:
    shape = _FORMATS.get(str(schema.get("format")))
    if shape is not None:
        text = shape.format(n=variant + 1, day=variant + 1)
    else:
        samples = [_STRINGS[(variant + step) % len(_STRINGS)] for step in range(len(_STRINGS))]
        text = next(
            (sample for sample in samples if _matches(schema.get("pattern"), sample)), samples[0]
        )
    shortest, longest = schema.get("minLength"), schema.get("maxLength")
    if isinstance(shortest, int) and len(text) < shortest:
        text += "x" * (shortest - len(text))
    if isinstance(longest, int) and len(text) > longest:
        text = text[:longest]
    return text


def _matches(pattern: object, text: str) -> bool:
    """Whether a ``pattern`` (searched, not anchored, as JSON Schema does) finds the text; true
    without a pattern, or with one Python's engine does not read."""
    if not isinstance(pattern, str):
        return True
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return True


def _breaking(root: Mapping[str, Any], valid: object) -> Iterator[dict[str, Any]]:
    """Variants of a valid body that should break the schema: a required property left out,
    a property of another type, a choice not offered."""
    if not isinstance(valid, dict):
        return
    for name in [name for name in root.get("required") or [] if name in valid]:
        yield {key: value for key, value in valid.items() if key != name}
        break
    for name, value in valid.items():
        yield {**valid, name: _other_type(value)}
        break
    properties = root.get("properties")
    if isinstance(properties, Mapping):
        for name, declared in properties.items():
            inner = _resolved(declared, root)
            if isinstance(inner, Mapping) and isinstance(inner.get("enum"), list):
                yield {**valid, name: "none of the choices"}
                break


def _other_type(value: object) -> object:
    if isinstance(value, str):
        return 12345
    return "text"
