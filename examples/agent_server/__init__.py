"""An example agent server: Starlette on Hypercorn's Trio worker, with inert in the same loop.

A chat streams a model response (from a local replay by default, from OpenAI or Anthropic when
their API key is set) through inert; the person watches the status cues as server-sent events,
confirms or stops calls, and the demo tools run only when inert dispatches them, at most once.
Run it with ``python -m examples.agent_server``.
"""

from ._agent import Agent, open_agent
from ._app import create_app
from ._options import server_options
from ._providers import (
    Provider,
    ProviderError,
    anthropic_messages,
    openai_responses,
    provider_from_environment,
    replayed,
)
from ._replay import TWO_CALLS, Replay, replay_app, two_calls
from ._serve import run, serve
from ._tools import TOOLS, Toolbox
from ._turns import AgentCore, Refusal, TurnSession

__all__ = [
    "TOOLS",
    "TWO_CALLS",
    "Agent",
    "AgentCore",
    "Provider",
    "ProviderError",
    "Refusal",
    "Replay",
    "Toolbox",
    "TurnSession",
    "anthropic_messages",
    "create_app",
    "open_agent",
    "openai_responses",
    "provider_from_environment",
    "replay_app",
    "replayed",
    "run",
    "serve",
    "server_options",
    "two_calls",
]
