"""Tool declarations and the registry that validates calls against the turn's declaration.

A turn offers tools by name and digest: the digest is the SHA-256 of the declaration's canonical
JSON (RFC 8785), so a tool changed under the same name is another declaration. The registry keeps
every declaration it was given by digest, so that during a release a call of an older turn is
validated against the declaration that turn offered, never against its successor; a call whose
turn offered a declaration the registry does not hold fails as ``unknown_tool``.

Until schema and business validation are built, a declaration is its name, an optional JSON
Schema kept as data, and whether a call of it needs the person's confirmation.
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import cached_property
from types import MappingProxyType
from typing import Any

import jsonschema_rs
from attrs import field, frozen, validators

from ..events import CallKey, ConfigurationError, FailReason, IntentScope, OfferedTool
from ._arguments import canonical_json
from ._call import ValidationRequested, ValidationResult, Validator
from ._places import MAX_IDENTIFIER_LENGTH, SchemaPlaces, bounded, is_identifier
from ._schemas import MAX_REPORTED_PROBLEMS, _listed, _thawed, compile_schema, schema_problems


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


class FieldProblem(ValueError):
    """One problem a business validator found: where (a JSON pointer into the arguments, RFC
    6901: ``""`` or ``"/items/0/sku"``) and what kind (an identifier: an ASCII letter or ``_``,
    then letters, digits and ``_ . : -``, at most 64 characters), no value.

    A validator raises one, or an ``ExceptionGroup`` of them, one per problem. The path is
    recorded as every path into the arguments is (the schema's declared names, indexes, the
    positions of other names: see [What a detail may say][what-a-detail-may-say]), the kind as
    it is. A kind that is not an identifier, or a path that is not a pointer, is refused where
    the problem is made (``ConfigurationError``): raised in a validator, it fails the call
    ``validator_error``.
    """

    def __init__(self, path: str, kind: str) -> None:
        if not isinstance(path, str) or (path and not path.startswith("/")):
            raise ConfigurationError(
                "a FieldProblem's path is a JSON pointer into the arguments ('' or '/a/0'),"
                f" not a {type(path).__name__} that starts otherwise"
            )
        if not isinstance(kind, str) or not is_identifier(kind):
            length = len(kind) if isinstance(kind, str) else 0
            raise ConfigurationError(
                "a FieldProblem's kind is an identifier (an ASCII letter or _, then letters,"
                f" digits and _ . : -, at most {MAX_IDENTIFIER_LENGTH} characters), not a"
                f" {type(kind).__name__} of {length} characters that is not one: it is recorded"
                " in the log, which keeps no values"
            )
        # The message is the kind alone: a path may hold names the model wrote.
        super().__init__(kind)
        self.path = path
        self.kind = kind


@frozen(kw_only=True)
class CallUnderValidation:
    """What a business validator or permission policy is shown of a call: the turn's own
    tenant and principal (never identities from model output), the tool, the parsed arguments
    (read-only)."""

    key: CallKey
    tenant: str
    principal: str
    tool: str
    arguments: Mapping[str, Any]


BusinessValidator = Callable[[CallUnderValidation], Awaitable[None]]
"""Raises ``FieldProblem`` (or a group of them) for arguments the business does not take."""

PermissionPolicy = Callable[[CallUnderValidation], Awaitable[bool]]
"""Says whether the turn's principal may run this call."""


def _intent_scope(value: object) -> IntentScope | None:
    """``None``, an ``IntentScope`` or its value (``"turn"``, ``"conversation"``)."""
    if value is None or isinstance(value, IntentScope):
        return value
    if isinstance(value, str) and value in IntentScope._value2member_map_:
        return IntentScope(value)
    choices = ", ".join(repr(scope.value) for scope in IntentScope)
    raise ConfigurationError(
        f"one_action_per_intent is None, {choices} or an IntentScope, not {value!r}"
    )


@frozen(kw_only=True)
class ToolDeclaration:
    """A tool the agent server may offer to the model."""

    name: str = field(validator=validators.and_(validators.instance_of(str), validators.min_len(1)))
    parameters: Mapping[str, Any] = field(factory=dict, converter=_frozen_mapping)
    needs_confirmation: bool = False
    description: str = ""
    max_bytes: int | None = field(
        default=None, validator=validators.optional(validators.ge(2)), kw_only=True
    )
    """The size the tool allows its canonical arguments, below the runtime's own limit."""
    one_action_per_intent: IntentScope | None = field(
        default=None, converter=_intent_scope, kw_only=True
    )
    """Where a call identical to one dispatched already (same tool, same canonical arguments)
    is cancelled ``duplicate_of`` instead of running again: within its turn
    (``IntentScope.TURN``, or ``"turn"``) or its conversation (``"conversation"``); ``None``
    (the default) runs every call. Part of the declaration its turn records."""
    validator: BusinessValidator | None = field(default=None, eq=False)
    """Checks the arguments once per call after the schema; code, so not part of the digest."""
    policy: PermissionPolicy | None = field(default=None, eq=False)
    """Decides once per call whether the principal may run it; code, not part of the digest."""
    strict: bool = field(default=True, eq=False)
    """Refuse at registration a schema with an object that lets any other property through
    (no ``additionalProperties`` or ``unevaluatedProperties``, or ``true``); a choice about
    registering, not part of the declaration's digest."""

    @cached_property
    def digest(self) -> str:
        """``sha256:`` and the hex digest of the canonical JSON of the declaration (computed
        once: every turn that offers the tool binds it)."""
        document: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
            "needs_confirmation": self.needs_confirmation,
        }
        if self.max_bytes is not None:
            # Only when set, so that the digests of declarations without one stay what they were.
            document["max_bytes"] = self.max_bytes
        if self.one_action_per_intent is not None:
            document["one_action_per_intent"] = self.one_action_per_intent.value
        try:
            canonical = canonical_json(document)
        except TypeError as error:
            raise ConfigurationError(
                f"the parameters of tool {self.name!r} are not JSON: {error}"
            ) from None
        except UnicodeEncodeError:
            raise ConfigurationError(
                f"the declaration of tool {self.name!r} holds a lone surrogate: not valid Unicode"
            ) from None
        return "sha256:" + hashlib.sha256(canonical).hexdigest()

    def offered(self) -> OfferedTool:
        return OfferedTool(
            name=self.name,
            digest=self.digest,
            one_action_per_intent=self.one_action_per_intent,
        )


class ToolRegistry:
    """Every declaration registered, by digest, and the latest one of each name.

    ``check``, when given, is called once per call whose declaration the registry holds; its
    result is recorded in the call's decision (a call needs confirmation when its declaration or
    the check says so).
    """

    def __init__(
        self, declarations: Iterable[ToolDeclaration] = (), *, check: Validator | None = None
    ) -> None:
        self._by_digest: dict[str, ToolDeclaration] = {}
        self._schemas: dict[str, jsonschema_rs.Validator | None] = {}
        self._places: dict[str, SchemaPlaces] = {}
        self._latest: dict[str, ToolDeclaration] = {}
        self._check = check
        for declaration in declarations:
            self.register(declaration)

    def register(self, declaration: ToolDeclaration) -> OfferedTool:
        if not isinstance(declaration, ToolDeclaration):
            raise ConfigurationError(
                f"tools are ToolDeclaration values, not {type(declaration).__name__}"
            )
        offered = declaration.offered()
        if offered.digest not in self._by_digest:
            self._schemas[offered.digest] = compile_schema(declaration)
            self._places[offered.digest] = SchemaPlaces(_thawed(declaration.parameters))
        self._by_digest[offered.digest] = declaration
        self._latest[declaration.name] = declaration
        return offered

    def latest(self, name: str) -> ToolDeclaration:
        try:
            return self._latest[name]
        except KeyError:
            known = ", ".join(sorted(self._latest)) or "none"
            raise ConfigurationError(
                f"no tool named {name!r} is registered (known: {known})"
            ) from None

    def by_digest(self, digest: str) -> ToolDeclaration | None:
        return self._by_digest.get(digest)

    def names(self) -> list[str]:
        return sorted(self._latest)

    async def validate(self, request: ValidationRequested) -> ValidationResult:
        """Validate a call against the declaration its turn offered."""
        started = self.start_validation(request)
        return started if isinstance(started, ValidationResult) else await started

    def start_validation(
        self, request: ValidationRequested
    ) -> ValidationResult | Awaitable[ValidationResult]:
        """``validate`` as far as it goes without awaiting: its result where no business
        validator, permission policy or check is to be asked, else the rest to await. A caller
        then needs no deadline (nor a schedule point) for what cannot wait."""
        declaration = self.by_digest(request.tool.digest)
        if declaration is None or declaration.name != request.tool.name:
            return ValidationResult(
                failure=FailReason.UNKNOWN_TOOL,
                detail=f"the declaration of {request.tool.name!r} the turn offered"
                f" ({request.tool.digest[:19]}...) is not registered",
            )
        size = len(request.arguments.canonical)
        if declaration.max_bytes is not None and size > declaration.max_bytes:
            return ValidationResult(
                failure=FailReason.TOO_LARGE,
                detail=f"{size} canonical bytes, tool {declaration.name!r} allows"
                f" {declaration.max_bytes}",
            )
        digest = request.tool.digest
        problems = schema_problems(self._schemas[digest], request.arguments, self._places[digest])
        if problems:
            return ValidationResult(failure=FailReason.SCHEMA_INVALID, detail=problems)
        if declaration.validator is None and declaration.policy is None and self._check is None:
            return ValidationResult(needs_confirmation=declaration.needs_confirmation)
        return self._asked(declaration, request)

    async def _asked(
        self, declaration: ToolDeclaration, request: ValidationRequested
    ) -> ValidationResult:
        """The business validator, the permission policy and the check, of a call whose
        arguments fit its declaration."""
        places = self._places[request.tool.digest]
        refused = await _business_and_permission(declaration, request, places)
        if refused is not None:
            return refused
        if self._check is None:
            return ValidationResult(needs_confirmation=declaration.needs_confirmation)
        result = await self._check(request)
        if result.accepted and declaration.needs_confirmation:
            return ValidationResult(needs_confirmation=True, detail=bounded(result.detail))
        return ValidationResult(
            failure=result.failure,
            detail=bounded(result.detail),
            needs_confirmation=result.needs_confirmation,
        )


async def _business_and_permission(
    declaration: ToolDeclaration, request: ValidationRequested, places: SchemaPlaces
) -> ValidationResult | None:
    """The declaration's business validator, then its permission policy, each once; None when
    both let the call through."""
    if declaration.validator is None and declaration.policy is None:
        return None
    call = CallUnderValidation(
        key=request.key,
        tenant=request.key.tenant,
        principal=request.principal,
        tool=declaration.name,
        arguments=request.arguments.value,
    )
    if declaration.validator is not None:
        try:
            await declaration.validator(call)
        except FieldProblem as problem:
            return _business_invalid([problem], places, call.arguments)
        except ExceptionGroup as group:
            leaves = _problems(group)
            if leaves is None:
                return _validator_error(group)
            return _business_invalid(leaves, places, call.arguments)
        except Exception as error:
            return _validator_error(error)
    if declaration.policy is not None:
        try:
            allowed = await declaration.policy(call)
        except Exception as error:
            return _validator_error(error)
        if allowed is not True:
            return ValidationResult(
                failure=FailReason.PERMISSION_DENIED,
                detail=f"{request.principal} may not run {declaration.name!r}",
            )
    return None


def _problems(group: BaseExceptionGroup[Exception]) -> list[FieldProblem] | None:
    found: list[FieldProblem] = []
    for error in group.exceptions:
        if isinstance(error, FieldProblem):
            found.append(error)
        elif isinstance(error, BaseExceptionGroup):
            inner = _problems(error)
            if inner is None:
                return None
            found += inner
        else:
            return None
    return found


def _business_invalid(
    problems: list[FieldProblem], places: SchemaPlaces, arguments: Mapping[str, Any]
) -> ValidationResult:
    shown = (
        f"{places.pointer_path(arguments, problem.path)} {problem.kind}"
        for problem in problems[:MAX_REPORTED_PROBLEMS]
    )
    detail = _listed(shown, len(problems))
    return ValidationResult(failure=FailReason.BUSINESS_INVALID, detail=detail)


def _validator_error(error: BaseException) -> ValidationResult:
    # Only the exception's type: its message may quote the arguments.
    return ValidationResult(failure=FailReason.VALIDATOR_ERROR, detail=type(error).__name__)


def declaration_from_function(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    needs_confirmation: bool = False,
    max_bytes: int | None = None,
    one_action_per_intent: IntentScope | str | None = None,
) -> ToolDeclaration:
    """A declaration whose schema is the function's signature: each parameter a property of its
    annotated type (``str``, ``int``, ``float``, ``bool``, ``None``, ``Literal``, an ``Enum``,
    ``list[T]``, ``dict[str, T]``, unions of these), required unless it has a default, no other
    property allowed; the description is the docstring's first paragraph."""
    tool = name or function.__name__
    try:
        hints = typing.get_type_hints(function)
    except (NameError, TypeError) as error:
        raise ConfigurationError(
            f"tool {tool!r}: its annotations cannot be read: {error}"
        ) from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ConfigurationError(
                f"tool {tool!r}: *{parameter.name} cannot be a property of the arguments"
            )
        if parameter.name not in hints:
            raise ConfigurationError(
                f"tool {tool!r}: parameter {parameter.name!r} has no annotation"
            )
        properties[parameter.name] = _schema_of(hints[parameter.name], f"{tool}.{parameter.name}")
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    description = inspect.getdoc(function) or ""
    return ToolDeclaration(
        name=tool,
        parameters=schema,
        needs_confirmation=needs_confirmation,
        description=description.split("\n\n")[0].replace("\n", " "),
        max_bytes=max_bytes,
        one_action_per_intent=_intent_scope(one_action_per_intent),
    )


_PLAIN_TYPES: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _schema_of(annotation: Any, where: str) -> dict[str, Any]:
    if annotation is type(None) or annotation is None:
        return {"type": "null"}
    if annotation in _PLAIN_TYPES:
        return {"type": _PLAIN_TYPES[annotation]}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"enum": [member.value for member in annotation]}
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return {"enum": list(arguments)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema_of(argument, where) for argument in arguments]}
    if origin is list and len(arguments) == 1:
        return {"type": "array", "items": _schema_of(arguments[0], where)}
    if origin is dict and len(arguments) == 2 and arguments[0] is str:
        return {"type": "object", "additionalProperties": _schema_of(arguments[1], where)}
    raise ConfigurationError(f"{where}: {annotation!r} has no JSON Schema inert derives")


def declarations_from_json(document: object) -> list[ToolDeclaration]:
    """Tool declarations from a provider's own format, as an agent server sends them.

    ``document`` is a list of declarations, each in any of these shapes (told apart by their
    keys): OpenAI Responses ``{"type": "function", "name", "parameters"}``, OpenAI Chat
    Completions ``{"type": "function", "function": {"name", "parameters"}}``, Anthropic
    ``{"name", "input_schema"}``, Bedrock ``{"toolSpec": {"name", "inputSchema": {"json"}}}``, and
    Gemini ``{"functionDeclarations": [...]}`` (each with ``name`` and ``parameters``). inert's
    own settings sit under ``x-inert``: ``{"confirm": true}`` makes a call of the tool wait for
    the person's confirmation; ``{"strict": false}`` accepts a schema that lets the model add
    properties nobody declared; ``{"max_bytes": 4096}`` bounds the tool's canonical arguments;
    ``{"one_action_per_intent": "turn"}`` (or ``"conversation"``) runs a call identical to one
    dispatched already in that scope no more (see ``ToolDeclaration``).
    """
    if not isinstance(document, list):
        raise ConfigurationError(
            f"tool declarations are a JSON list, not {type(document).__name__}"
        )
    declarations: list[ToolDeclaration] = []
    for index, item in enumerate(document):
        if not isinstance(item, Mapping):
            raise ConfigurationError(f"tool declaration {index} is not a JSON object")
        if "functionDeclarations" in item:
            functions = item["functionDeclarations"]
            if not isinstance(functions, list):
                raise ConfigurationError(
                    f"tool declaration {index}: functionDeclarations is not a list"
                )
            declarations += [
                _declaration(f"{index}.{inner}", function, "parameters", settings=item)
                for inner, function in enumerate(functions)
            ]
        elif "toolSpec" in item:
            spec = item["toolSpec"]
            schema = spec.get("inputSchema", {}) if isinstance(spec, Mapping) else None
            if not isinstance(schema, Mapping):
                raise ConfigurationError(f"tool declaration {index}: toolSpec is not an object")
            declarations.append(
                _declaration(
                    str(index),
                    {**spec, "parameters": schema.get("json", {})},
                    "parameters",
                    settings=item,
                )
            )
        elif isinstance(item.get("function"), Mapping):
            declarations.append(
                _declaration(str(index), item["function"], "parameters", settings=item)
            )
        elif "input_schema" in item:
            declarations.append(_declaration(str(index), item, "input_schema", settings=item))
        else:
            declarations.append(_declaration(str(index), item, "parameters", settings=item))
    names = [declaration.name for declaration in declarations]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigurationError(f"tools declared more than once: {', '.join(repeated)}")
    return declarations


def _declaration(
    where: str, body: Mapping[str, Any], schema_key: str, *, settings: Mapping[str, Any]
) -> ToolDeclaration:
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"tool declaration {where} has no name")
    parameters = body.get(schema_key, {})
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, Mapping):
        raise ConfigurationError(f"tool {name!r}: {schema_key} is not a JSON object")
    description = body.get("description", "")
    if not isinstance(description, str):
        raise ConfigurationError(f"tool {name!r}: description is not a string")
    own = settings.get("x-inert", body.get("x-inert", {}))
    if not isinstance(own, Mapping):
        raise ConfigurationError(f"tool {name!r}: x-inert is not a JSON object")
    unknown = sorted(set(own) - {"confirm", "strict", "max_bytes", "one_action_per_intent"})
    if unknown:
        raise ConfigurationError(f"tool {name!r}: unknown x-inert settings: {', '.join(unknown)}")
    confirm, strict = own.get("confirm", False), own.get("strict", True)
    if not isinstance(confirm, bool) or not isinstance(strict, bool):
        raise ConfigurationError(f"tool {name!r}: x-inert confirm and strict are true or false")
    max_bytes = own.get("max_bytes")
    if max_bytes is not None and (type(max_bytes) is not int or max_bytes < 2):
        raise ConfigurationError(f"tool {name!r}: x-inert max_bytes is a count of at least 2")
    try:
        intent = _intent_scope(own.get("one_action_per_intent"))
    except ConfigurationError as error:
        raise ConfigurationError(f"tool {name!r}: x-inert {error}") from None
    return ToolDeclaration(
        name=name,
        parameters=parameters,
        needs_confirmation=confirm,
        description=description,
        strict=strict,
        max_bytes=max_bytes,
        one_action_per_intent=intent,
    )
