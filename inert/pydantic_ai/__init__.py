"""pydantic-ai agents whose tool calls pass through inert (the ``pydantic-ai`` extra:
``pip install 'inert[pydantic-ai]'``).

``InertTurn`` is a pydantic-ai capability for the runs of one inert turn: it feeds the model's
streamed responses to inert and runs a tool only when inert dispatches the call;
``ModelStreamAdapter`` turns pydantic-ai's part events into inert's ingress events for those
who feed them themselves. The documentation's page on pydantic-ai says what it guarantees and
what it cannot.
"""

from ..events import ConfigurationError

try:
    from ._capability import Decision, InertTurn
    from ._declarations import ConfirmationRule, declaration_from_tool_def, requires_approval
    from ._stream import ModelStreamAdapter
except ModuleNotFoundError as error:
    # The framework is an optional dependency: say which extra brings it.
    if error.name is None or error.name.split(".")[0] not in {"pydantic_ai", "pydantic_graph"}:
        raise
    raise ConfigurationError(
        f"inert.pydantic_ai needs pydantic-ai: pip install 'inert[pydantic-ai]' ({error})"
    ) from None

__all__ = [
    "ConfirmationRule",
    "Decision",
    "InertTurn",
    "ModelStreamAdapter",
    "declaration_from_tool_def",
    "requires_approval",
]
