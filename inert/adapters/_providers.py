"""Every provider inert reads, by the name the command line, the example server and the tests
give it: the one registry of adapters. A new adapter is added here and nowhere else."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol

from ..events import TurnRef
from ._adapter import StreamAdapter
from ._anthropic import AnthropicAdapter
from ._bedrock import BedrockAdapter
from ._gemini import GeminiAdapter
from ._openai_chat import OpenAIChatAdapter
from ._openai_responses import OpenAIResponsesAdapter


class AdapterFactory(Protocol):
    """Builds a provider's adapter for one stream of a turn.

    ``response`` names the stream where its protocol carries no response id of its own (a
    Bedrock stream; a Gemini stream without ``responseId``); ``resumable`` says the stream runs
    in background mode and may be continued (OpenAI Responses). A protocol that has no use for
    one of them ignores it.
    """

    def __call__(
        self, turn: TurnRef, *, response: str, resumable: bool = False
    ) -> StreamAdapter: ...


def _openai_responses(turn: TurnRef, *, response: str, resumable: bool = False) -> StreamAdapter:
    return OpenAIResponsesAdapter(turn, resumable=resumable)


def _openai_chat(turn: TurnRef, *, response: str, resumable: bool = False) -> StreamAdapter:
    return OpenAIChatAdapter(turn)


def _anthropic(turn: TurnRef, *, response: str, resumable: bool = False) -> StreamAdapter:
    return AnthropicAdapter(turn)


def _bedrock(turn: TurnRef, *, response: str, resumable: bool = False) -> StreamAdapter:
    return BedrockAdapter(turn, response=response)


def _gemini(turn: TurnRef, *, response: str, resumable: bool = False) -> StreamAdapter:
    return GeminiAdapter(turn, response=response)


PROVIDERS: Mapping[str, AdapterFactory] = MappingProxyType(
    {
        "openai-responses": _openai_responses,
        "openai-chat": _openai_chat,
        "anthropic": _anthropic,
        "bedrock": _bedrock,
        "gemini": _gemini,
    }
)
"""The adapter of every provider, by its name."""
