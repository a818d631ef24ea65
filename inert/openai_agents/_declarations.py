"""The Agents SDK's function tools as inert's declarations."""

from __future__ import annotations

from agents import FunctionTool

from ..actors import ToolDeclaration
from ..events import ConfigurationError


def declaration_from_tool(
    tool: FunctionTool, *, needs_confirmation: bool | None = None
) -> ToolDeclaration:
    """A function tool as a ``ToolDeclaration``: its name (``<namespace>.<name>`` for a tool
    the SDK puts in a namespace, as the model's call names it), its description and the JSON
    schema the SDK made of its parameters.

    Whether its calls wait for the person's confirmation is ``needs_confirmation`` or, by
    default, the tool's ``needs_approval`` where that is a plain ``True`` or ``False``. A
    ``needs_approval`` function decides per call in the SDK, which inert cannot follow (a
    turn binds its declarations at its start): it needs ``needs_confirmation`` given, else
    ``ConfigurationError``. A schema the SDK left non-strict is registered without inert's
    strict check, as the SDK sends it to the model.
    """
    if needs_confirmation is None:
        if not isinstance(tool.needs_approval, bool):
            raise ConfigurationError(
                f"tool {tool.qualified_name!r} decides needs_approval per call with a function,"
                " and a turn binds whether a tool's calls are confirmed when it starts: pass"
                " needs_confirmation= for it"
            )
        needs_confirmation = tool.needs_approval
    return ToolDeclaration(
        name=tool.qualified_name,
        parameters=tool.params_json_schema,
        needs_confirmation=needs_confirmation,
        description=tool.description,
        strict=tool.strict_json_schema,
    )
