"""Your own tools in a simulation: ``ToolSuite``, and ``load_suite``, which finds them by name.

``inert simulate --tools NAME`` (and ``simulate_many(suite=NAME)``) runs the tools that NAME
gives instead of the demo's. NAME is ``module:attribute``: the module is imported as
``python -m`` would, with the current folder first on ``sys.path``, and the attribute is a
``ToolSuite`` or a list of tools (see ``ToolSuite``). A NAME that ends in ``.json`` is a
TOOLS.json file instead, read as ``inert feed --tools`` reads it (declarations without code).
Every worker process loads the tools again by their name, so they need not be picklable.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from attrs import field, frozen

from ..actors import (
    ToolDeclaration,
    ToolRegistry,
    Validator,
    declaration_from_function,
    declarations_from_json,
)
from ..events import CallFailed, CallOpened, ConfigurationError, FailReason, RecordedEvent
from ._checker import Violation
from ._examples import schema_examples
from ._workload import SimulatedTool


def _simulated_tools(tools: Iterable[object]) -> tuple[SimulatedTool, ...]:
    """Each tool as the simulator runs it: a ``SimulatedTool`` as it is; a ``ToolDeclaration``
    with examples made from its schema; a plain function declared by
    ``declaration_from_function``, then as a declaration."""
    if isinstance(tools, str | bytes | dict) or not isinstance(tools, Iterable):
        raise ConfigurationError(f"tools are a list, not {type(tools).__name__}")
    simulated: list[SimulatedTool] = []
    for index, given in enumerate(tools):
        tool = declaration_from_function(given) if inspect.isroutine(given) else given
        if isinstance(tool, ToolDeclaration):
            tool = SimulatedTool(declaration=tool, examples=schema_examples(tool))
        if not isinstance(tool, SimulatedTool):
            raise ConfigurationError(
                f"tool {index} is a {type(tool).__name__}, not a ToolDeclaration, a"
                " SimulatedTool or a function"
            )
        simulated.append(tool)
    if not simulated:
        raise ConfigurationError("no tools: a simulation needs at least one")
    names = [tool.declaration.name for tool in simulated]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigurationError(f"tools declared more than once: {', '.join(repeated)}")
    # Registered once here, so that a schema the runtime cannot use is refused before a run.
    ToolRegistry(tool.declaration for tool in simulated)
    return tuple(simulated)


@frozen(kw_only=True)
class ToolSuite:
    """The tools a simulation offers and the business check it opens the runtime with.

    Each tool is a ``ToolDeclaration`` (its own ``validator`` and ``policy`` included), a
    ``SimulatedTool`` (a declaration with example arguments of your own) or a plain function
    (declared by ``declaration_from_function``); a tool without examples gets them from its
    schema, valid ones and a few that break it. ``check`` is what ``open_runtime(check=...)``
    is given.
    """

    tools: tuple[SimulatedTool, ...] = field(converter=_simulated_tools)
    check: Validator | None = None


def load_suite(name: str) -> ToolSuite:
    """The tools ``name`` gives: ``module:attribute`` (a ``ToolSuite`` or a list of tools), or
    a TOOLS.json file (a name ending in ``.json``). Every way it can fail is a
    ``ConfigurationError`` that names ``name`` and what was wrong."""
    try:
        if name.endswith(".json"):
            return ToolSuite(tools=_json_declarations(name))
        return _attribute_suite(name)
    except ConfigurationError as error:
        raise ConfigurationError(f"tools {name!r}: {error}") from None


def _json_declarations(name: str) -> list[ToolDeclaration]:
    path = Path(name)
    try:
        if not path.is_file():
            raise ConfigurationError("no such file (a name ending in .json is a TOOLS.json file)")
        content = path.read_bytes()
    except OSError as error:
        raise ConfigurationError(f"cannot read it: {error.strerror}") from None
    try:
        document = json.loads(content.decode("utf-8-sig"))
    except (ValueError, RecursionError) as error:
        raise ConfigurationError(f"not a JSON document: {error}") from None
    return declarations_from_json(document)


def _attribute_suite(name: str) -> ToolSuite:
    module_name, _, attribute = name.partition(":")
    if not module_name or module_name.startswith(".") or not attribute:
        raise ConfigurationError(
            "name them as module:attribute (such as my_tools:TOOLS), or a TOOLS.json file"
        )
    found: object = _imported(module_name)
    for part in attribute.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ConfigurationError(
                f"module {module_name!r} has no attribute {attribute!r}"
            ) from None
    if isinstance(found, ToolSuite):
        return found
    if isinstance(found, Sequence) and not isinstance(found, str | bytes):
        return ToolSuite(tools=found)
    raise ConfigurationError(
        f"{attribute} is of type {type(found).__name__}, not a ToolSuite or a list of tools"
        " (ToolDeclaration, SimulatedTool or function values)"
    )


def _imported(module_name: str) -> object:
    # As ``python -m`` does: the user's project modules are found from where they work.
    folder = os.getcwd()
    if folder not in sys.path and "" not in sys.path:
        sys.path.insert(0, folder)
    # A module written since the last import looked at the folder is found too.
    importlib.invalidate_caches()
    try:
        return importlib.import_module(module_name)
    except Exception as error:
        missing = error.name if isinstance(error, ModuleNotFoundError) else None
        if missing is not None and (module_name + ".").startswith(missing + "."):
            raise ConfigurationError(
                f"no module named {module_name!r} in the current folder or the installed packages"
            ) from None
        raise ConfigurationError(
            f"importing {module_name!r} raised {type(error).__name__}: {error}"
        ) from None


def tool_errors(records: Iterable[RecordedEvent]) -> list[Violation]:
    """A tool's own code that raised: a call failed ``validator_error`` because its validator,
    policy or the business check raised instead of refusing (``FieldProblem``, ``False``, a
    failed ``ValidationResult``). One violation per tool and error, at its first call."""
    tools: dict[str, str] = {}
    found: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for recorded in records:
        event = recorded.event
        if isinstance(event, CallOpened):
            tools.setdefault(event.key.stream, event.tool)
        elif isinstance(event, CallFailed) and event.reason is FailReason.VALIDATOR_ERROR:
            tool = tools.get(event.key.stream, "?")
            # The runtime names the error by its type alone, after these words where the
            # business check raised it.
            error = event.detail.removeprefix("the validator raised ")
            found.setdefault((tool, error), []).append((event.key.stream, recorded.position))
    return [
        Violation(
            invariant="tool_error",
            key=calls[0][0],
            position=calls[0][1],
            detail=f"tool {tool!r}: its validator, policy or check raised {error}"
            + (f" in {len(calls)} calls, the first here" if len(calls) > 1 else ""),
        )
        for (tool, error), calls in found.items()
    ]
