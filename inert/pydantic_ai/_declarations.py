"""Tool declarations made of the tool definitions a pydantic-ai agent offers its model.

A declaration takes the definition's name, description and JSON schema as the agent would send
them to the model, and whether a call waits for the person's confirmation by a rule that reads
the definition: by default, the tools pydantic-ai itself holds for approval
(``requires_approval=True``, kind ``unapproved``).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic_ai.tools import ToolDefinition

from ..actors import ToolDeclaration
from ..events import IntentScope

ConfirmationRule = Callable[[ToolDefinition], bool]
"""Whether a call of this pydantic-ai tool waits for the person's confirmation."""


def requires_approval(tool: ToolDefinition) -> bool:
    """The default rule: confirm the calls of the tools pydantic-ai holds for approval."""
    return tool.kind == "unapproved"


def declaration_from_tool_def(
    tool: ToolDefinition,
    *,
    confirm: ConfirmationRule = requires_approval,
    one_action_per_intent: IntentScope | str | None = None,
) -> ToolDeclaration:
    """The declaration of one tool definition.

    Its schema is the one pydantic-ai generated for the model, registered without inert's
    strict check (a generated schema does not always close its objects), so a call's arguments
    are validated against exactly what the model was offered. ``one_action_per_intent``
    (``"turn"`` or ``"conversation"``) runs a call identical to one dispatched already in that
    scope never again.
    """
    return ToolDeclaration(
        name=tool.name,
        parameters=tool.parameters_json_schema,
        needs_confirmation=confirm(tool),
        description=tool.description or "",
        one_action_per_intent=one_action_per_intent,
        strict=False,
    )
