"""Agents of the OpenAI Agents SDK run as inert turns (the ``openai-agents`` extra:
``pip install 'inert[openai-agents]'``).

``AgentTurn`` starts a turn for an agent and gives the agent to run with
``Runner.run_streamed``: its model's streams are fed into the runtime as the SDK reads them, its
function tools run only the calls inert dispatches, its approvals are inert's confirmations and
its cancellation inert's; the documentation's page on the Agents SDK says what it guarantees
and what it cannot.
"""

from ..events import ConfigurationError

try:
    from ._declarations import declaration_from_tool
    from ._turn import EXECUTOR, AgentTurn, CallNotFed
except ModuleNotFoundError as error:
    # The SDK is an optional dependency: say which extra brings it, not which module is missing.
    if error.name is None or error.name.split(".")[0] not in {"agents", "openai"}:
        raise
    raise ConfigurationError(
        f"inert.openai_agents needs the OpenAI Agents SDK: pip install 'inert[openai-agents]'"
        f" ({error})"
    ) from None

__all__ = [
    "EXECUTOR",
    "AgentTurn",
    "CallNotFed",
    "declaration_from_tool",
]
