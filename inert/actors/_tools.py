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

import hashlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from attrs import field, frozen, validators

from ..events import ConfigurationError, FailReason, OfferedTool
from ._arguments import canonical_json
from ._decider import ValidationRequested, ValidationResult


def _frozen_mapping(value: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


@frozen(kw_only=True)
class ToolDeclaration:
    """A tool the agent server may offer to the model."""

    name: str = field(validator=validators.and_(validators.instance_of(str), validators.min_len(1)))
    parameters: Mapping[str, Any] = field(factory=dict, converter=_frozen_mapping)
    needs_confirmation: bool = False
    description: str = ""

    @property
    def digest(self) -> str:
        """``sha256:`` and the hex digest of the canonical JSON of the declaration."""
        document = {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
            "needs_confirmation": self.needs_confirmation,
        }
        try:
            canonical = canonical_json(document)
        except TypeError as error:
            raise ConfigurationError(
                f"the parameters of tool {self.name!r} are not JSON: {error}"
            ) from None
        return "sha256:" + hashlib.sha256(canonical).hexdigest()

    def offered(self) -> OfferedTool:
        return OfferedTool(name=self.name, digest=self.digest)


Check = Callable[[ValidationRequested], Awaitable[ValidationResult]]
"""A further check of a call whose declaration is known: business rules, permission policy."""


class ToolRegistry:
    """Every declaration registered, by digest, and the latest one of each name.

    ``check``, when given, is called once per call whose declaration the registry holds; its
    result is recorded in the call's decision (a call needs confirmation when its declaration or
    the check says so).
    """

    def __init__(
        self, declarations: Iterable[ToolDeclaration] = (), *, check: Check | None = None
    ) -> None:
        self._by_digest: dict[str, ToolDeclaration] = {}
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
        declaration = self.by_digest(request.tool.digest)
        if declaration is None or declaration.name != request.tool.name:
            return ValidationResult(
                failure=FailReason.UNKNOWN_TOOL,
                detail=f"the declaration of {request.tool.name!r} the turn offered"
                f" ({request.tool.digest[:19]}...) is not registered",
            )
        if self._check is None:
            return ValidationResult(needs_confirmation=declaration.needs_confirmation)
        result = await self._check(request)
        if result.accepted and declaration.needs_confirmation:
            return ValidationResult(needs_confirmation=True, detail=result.detail)
        return result
