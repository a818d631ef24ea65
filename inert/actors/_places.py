"""Places in a call's arguments, named so that no text of the arguments can be in the name.

A model writes the arguments' values and also the names of their objects' members: a map-typed
parameter (headers, labels, metadata) takes any name, and a prompt-injected model writes
``"Authorization: Bearer sk-..."`` as one at will. Every detail that says where something is in
the arguments (the parser's refusals, the schema's problems, a business validator's field
paths, an edit's) is written by ``argument_path`` from steps that cannot hold such text:

- ``Declared``: a name the tool's schema declares under ``properties`` at that point of the path
  (``.city``, ``["first name"]``). Only ``SchemaPlaces`` makes one, from the schema's own names;
  the parser runs before any schema and never does.
- ``Index``: an index of an array of the arguments (``[3]``).
- ``Position``: any other name of the arguments, by its position in its object as the arguments
  wrote it, counted from 1 (``.<key #2>``).
- ``UNKNOWN``: a step that is neither declared nor in the arguments (a business validator's
  path to something absent): ``.<?>``.

A path longer than ``MAX_PATH_LENGTH`` keeps its last steps (``$....items[3].<key #2>``); every
detail of a decision is at most ``MAX_DETAIL_LENGTH`` characters (``bounded``). What the embedding
code names (a business validator's problem kinds, the error an executor reports) is an
identifier (``is_identifier``), and a tool the turn did not offer is named by its length and a
digest of its name (``unoffered_tool``), never by its text.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from attrs import frozen

MAX_PATH_LENGTH = 80
"""The characters of a path into the arguments; a longer one keeps its last steps."""
MAX_DETAIL_LENGTH = 200
"""The characters of a decision's detail (rules 9 on); a longer one is cut."""
MAX_IDENTIFIER_LENGTH = 64
"""The characters of an identifier the embedding code gives (``is_identifier``)."""

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IDENTIFIER = re.compile(rf"[A-Za-z_][A-Za-z0-9_.:-]{{0,{MAX_IDENTIFIER_LENGTH - 1}}}")
_ELIDED = "$..."
_CUT = "..."


@frozen
class Declared:
    """A property name the tool's schema declares at this point of the path."""

    name: str


@frozen
class Index:
    """An index of an array of the arguments."""

    index: int


@frozen
class Position:
    """A name of the arguments, by its position in its object as written, counted from 1."""

    position: int


@frozen
class Unknown:
    """A step that names nothing declared and nothing in the arguments."""


UNKNOWN = Unknown()

Step = Declared | Index | Position | Unknown


def _shown(step: Step) -> str:
    match step:
        case Declared(name=name):
            return f".{name}" if _PLAIN_NAME.fullmatch(name) else f"[{json.dumps(name)}]"
        case Index(index=index):
            return f"[{index}]"
        case Position(position=position):
            return f".<key #{position}>"
    return ".<?>"


def argument_path(steps: Iterable[Step]) -> str:
    """The path of these steps from the top of the arguments (``$``), its last steps where it
    is longer than ``MAX_PATH_LENGTH``: the one way inert writes a place in the arguments."""
    shown = [_shown(step) for step in steps]
    whole = "$" + "".join(shown)
    if len(whole) <= MAX_PATH_LENGTH:
        return whole
    budget = MAX_PATH_LENGTH - len(_ELIDED)
    tail: list[str] = []
    for part in reversed(shown):
        if len(part) > budget:
            if not tail:
                tail.append(part[: budget - len(_CUT)] + _CUT)
            break
        tail.append(part)
        budget -= len(part)
    return _ELIDED + "".join(reversed(tail))


def bounded(detail: str) -> str:
    """The detail, cut to ``MAX_DETAIL_LENGTH`` characters (the same when it fits)."""
    if len(detail) <= MAX_DETAIL_LENGTH:
        return detail
    return detail[: MAX_DETAIL_LENGTH - len(_CUT)] + _CUT


def is_identifier(text: str) -> bool:
    """Whether ``text`` is an identifier: an ASCII letter or ``_``, then letters, digits and
    ``_ . : -``, at most ``MAX_IDENTIFIER_LENGTH`` characters in all."""
    return _IDENTIFIER.fullmatch(text) is not None


_UNOFFERED = re.compile(r"<unoffered tool of \d{1,9} characters, (?:hmac-)?sha256:[0-9a-f]{16}>")


def unoffered_tool(name: str, key: bytes = b"") -> str:
    """What stands for the name of a tool the turn did not offer, wherever it is shown or
    recorded: its length and the start of a digest of its UTF-8 bytes, never its text (a
    stand-in is its own). The digest is keyed by the log where a key is given (rules 10 on):
    a short name cannot be found again by trying names."""
    if _UNOFFERED.fullmatch(name):
        return name
    data = name.encode("utf-8", "surrogatepass")
    if key:
        digest = "hmac-sha256:" + hmac.new(key, data, hashlib.sha256).hexdigest()[:16]
    else:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()[:16]
    return f"<unoffered tool of {len(name)} characters, {digest}>"


# --- paths through a schema ------------------------------------------------------------------

_ABSENT = object()
_MAX_SUBSCHEMAS = 256
"""Subschemas looked at for one step: past them a name is not known to be declared there."""


class SchemaPlaces:
    """Names the places of arguments checked against one JSON Schema: a name is shown where the
    schema declares it under ``properties`` at that point (through ``$ref`` to the schema's
    own definitions, ``allOf``, ``anyOf``, ``oneOf``, ``if``/``then``/``else``,
    ``dependentSchemas``, ``items`` and ``prefixItems``); any other is a position.

    Where the walk cannot tell which subschemas apply (a reference it does not follow), it
    knows fewer names, never more: those steps are positions. Subschemas of
    ``patternProperties`` are all followed, whatever their patterns (no regular expression is
    run over a name the model wrote): a name is then shown only if some schema inert was
    given declares it there, so it is the schema's text.
    """

    def __init__(self, schema: Mapping[str, Any] | None) -> None:
        self._root: Mapping[str, Any] = schema or {}

    def path(
        self, arguments: Mapping[str, Any], steps: Sequence[str | int], *, missing: str = ""
    ) -> str:
        """The path of a place given as the steps of a schema error's instance path or of a
        JSON pointer (names and indexes, as text or not), and, for a required property that is
        absent, that property (shown only if the schema requires or declares it there)."""
        data: Any = arguments
        schemas = self._expanded([self._root])
        shown: list[Step] = []
        for raw in steps:
            if isinstance(data, list | tuple):
                index = _index(raw)
                if index is not None and index < len(data):
                    shown.append(Index(index))
                    data = data[index]
                else:
                    shown.append(UNKNOWN)
                    data = _ABSENT
                schemas = self._expanded(_items(schemas, index))
                continue
            name = str(raw)
            shown.append(self._name_step(schemas, data, name))
            data = data.get(name, _ABSENT) if isinstance(data, Mapping) else _ABSENT
            schemas = self._expanded(_members(schemas, name))
        if missing:
            required = any(
                missing in _names(schema, "properties") or missing in _required(schema)
                for schema in schemas
            )
            shown.append(Declared(missing) if required else UNKNOWN)
        return argument_path(shown)

    def pointer_path(self, arguments: Mapping[str, Any], pointer: str) -> str:
        """The path of a JSON pointer (RFC 6901) into the arguments."""
        steps = [] if pointer == "" else pointer.split("/")[1:]
        return self.path(arguments, [_unescaped(step) for step in steps])

    @staticmethod
    def _name_step(schemas: list[Mapping[str, Any]], data: Any, name: str) -> Step:
        if any(name in _names(schema, "properties") for schema in schemas):
            return Declared(name)
        if isinstance(data, Mapping) and name in data:
            for position, member in enumerate(data, start=1):
                if member == name:
                    return Position(position)
        return UNKNOWN

    def _expanded(self, schemas: Iterable[object]) -> list[Mapping[str, Any]]:
        """The schemas and every subschema they apply at the same place."""
        found: list[Mapping[str, Any]] = []
        seen: set[int] = set()
        pending = list(schemas)
        while pending and len(found) < _MAX_SUBSCHEMAS:
            schema = pending.pop()
            if not isinstance(schema, Mapping) or id(schema) in seen:
                continue
            seen.add(id(schema))
            found.append(schema)
            reference = schema.get("$ref")
            if isinstance(reference, str):
                pending.append(self._resolved(reference))
            for keyword in ("allOf", "anyOf", "oneOf"):
                inner = schema.get(keyword)
                if isinstance(inner, list | tuple):
                    pending.extend(inner)
            pending.extend(schema.get(keyword) for keyword in ("if", "then", "else"))
            dependent = schema.get("dependentSchemas")
            if isinstance(dependent, Mapping):
                pending.extend(dependent.values())
        return found

    def _resolved(self, reference: str) -> object:
        """The subschema a reference within the schema names; None for any other."""
        if not reference.startswith("#"):
            return None
        pointer = unquote(reference[1:])
        if pointer and not pointer.startswith("/"):
            return None
        target: object = self._root
        for escaped in pointer.split("/")[1:]:
            step = _unescaped(escaped)
            if isinstance(target, Mapping):
                target = target.get(step)
            elif isinstance(target, list | tuple) and (index := _index(step)) is not None:
                target = target[index] if index < len(target) else None
            else:
                return None
        return target


def _index(raw: str | int) -> int | None:
    if isinstance(raw, int):
        return raw if raw >= 0 else None
    if raw.isdigit() and raw.isascii() and (raw == "0" or not raw.startswith("0")):
        return int(raw)
    return None


def _unescaped(step: str) -> str:
    return step.replace("~1", "/").replace("~0", "~")


def _names(schema: Mapping[str, Any], keyword: str) -> Mapping[str, Any]:
    inner = schema.get(keyword)
    return inner if isinstance(inner, Mapping) else {}


def _required(schema: Mapping[str, Any]) -> set[str]:
    names = schema.get("required")
    found = {name for name in names if isinstance(name, str)} if isinstance(names, list) else set()
    for keyword in ("dependentRequired", "dependencies"):
        for inner in _names(schema, keyword).values():
            if isinstance(inner, list | tuple):
                found.update(name for name in inner if isinstance(name, str))
    return found


def _members(schemas: list[Mapping[str, Any]], name: str) -> list[object]:
    """The subschemas that apply to the member ``name`` of an object the schemas describe."""
    found: list[object] = []
    for schema in schemas:
        declared = _names(schema, "properties")
        patterns = _names(schema, "patternProperties")
        if name in declared:
            found.append(declared[name])
        else:
            found.append(schema.get("additionalProperties"))
            found.append(schema.get("unevaluatedProperties"))
        found.extend(patterns.values())
    return found


def _items(schemas: list[Mapping[str, Any]], index: int | None) -> list[object]:
    """The subschemas that apply to the item ``index`` of an array the schemas describe."""
    found: list[object] = []
    for schema in schemas:
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(items, list | tuple):
            # Draft 4 to 2019-09: a list of items is a prefix, the rest ``additionalItems``.
            prefix, items = items, schema.get("additionalItems")
        if isinstance(prefix, list | tuple) and index is not None and index < len(prefix):
            found.append(prefix[index])
        else:
            found.append(items)
    return found
