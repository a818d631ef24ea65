"""Where the model's response comes from, and which inert adapter reads it.

OpenAI's Responses API when ``OPENAI_API_KEY`` is set, Anthropic's Messages API when
``ANTHROPIC_API_KEY`` is, and otherwise a local replay of a recorded stream, which speaks the
Responses protocol and needs neither a key nor the network. Each is asked for a streamed
response offering the demo tools; the raw body goes to the adapter as it arrives (the asyncio
twin, ``examples.fastapi_server``, asks the same through the providers' official SDKs).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

from attrs import field, frozen

from inert import InertError, ToolDeclaration, TurnRef
from inert.adapters import PROVIDERS, StreamAdapter

OPENAI_URL = "https://api.openai.com/v1"
OPENAI_MODEL = "gpt-4.1-mini"
ANTHROPIC_URL = "https://api.anthropic.com"
ANTHROPIC_MODEL = "claude-sonnet-4-5"
ANTHROPIC_VERSION = "2023-06-01"
INSTRUCTIONS = (
    "You are the assistant of an example agent server. Use the tools to act on the user's "
    "request; the user confirms each email before it is sent."
)


class ProviderError(InertError):
    """The provider could not be asked, or answered something other than a stream."""


class Protocol(enum.StrEnum):
    """The wire protocol of a provider, named as inert's registry of adapters names it."""

    OPENAI_RESPONSES = "openai-responses"
    ANTHROPIC_MESSAGES = "anthropic"


@frozen(kw_only=True)
class Provider:
    """One provider endpoint: where to send the request, how, and how to read the answer."""

    protocol: Protocol
    base_url: str
    """The API's root, as the provider's official SDK takes it."""
    api_key: str = field(repr=False)
    model: str
    name: str

    @property
    def url(self) -> str:
        """Where the streamed response is asked for."""
        if self.protocol is Protocol.OPENAI_RESPONSES:
            return self.base_url + "/responses"
        return self.base_url + "/v1/messages"

    @property
    def headers(self) -> Mapping[str, str]:
        """The request's credentials (and, for Anthropic, the API version)."""
        if self.protocol is Protocol.OPENAI_RESPONSES:
            return {"authorization": f"Bearer {self.api_key}"}
        return {"x-api-key": self.api_key, "anthropic-version": ANTHROPIC_VERSION}

    def request(self, message: str, tools: Sequence[ToolDeclaration]) -> dict[str, Any]:
        """The JSON body asking for a streamed response to ``message`` offering ``tools``."""
        if self.protocol is Protocol.OPENAI_RESPONSES:
            return {
                "model": self.model,
                "instructions": INSTRUCTIONS,
                "input": message,
                "stream": True,
                "tools": [
                    {
                        "type": "function",
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": dict(tool.parameters),
                        # inert validates the arguments against the schema itself.
                        "strict": False,
                    }
                    for tool in tools
                ],
            }
        return {
            "model": self.model,
            "system": INSTRUCTIONS,
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": message}],
            "stream": True,
            "tools": [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": dict(tool.parameters),
                }
                for tool in tools
            ],
        }

    def adapter(self, turn: TurnRef) -> StreamAdapter:
        """A fresh adapter for one response of ``turn``."""
        return PROVIDERS[self.protocol](turn, response=self.name)


def openai_responses(
    *, api_key: str, base_url: str = OPENAI_URL, model: str = OPENAI_MODEL, name: str = "openai"
) -> Provider:
    """OpenAI's Responses API (or a server that speaks it) at ``base_url``."""
    return Provider(
        protocol=Protocol.OPENAI_RESPONSES,
        base_url=base_url.rstrip("/"),
        api_key=api_key,
        model=model,
        name=name,
    )


def anthropic_messages(
    *, api_key: str, base_url: str = ANTHROPIC_URL, model: str = ANTHROPIC_MODEL
) -> Provider:
    """Anthropic's Messages API (or a server that speaks it) at ``base_url``."""
    return Provider(
        protocol=Protocol.ANTHROPIC_MESSAGES,
        base_url=base_url.rstrip("/"),
        api_key=api_key,
        model=model,
        name="anthropic",
    )


def replayed(base_url: str) -> Provider:
    """The local replay server at ``base_url``, asked as OpenAI's Responses API is."""
    return openai_responses(
        api_key="replay", base_url=base_url.rstrip("/") + "/v1", model="replay", name="replay"
    )


def provider_from_environment(environ: Mapping[str, str]) -> Provider | None:
    """The real provider the environment names a key for (OpenAI first), or ``None``."""
    if environ.get("OPENAI_API_KEY"):
        return openai_responses(
            api_key=environ["OPENAI_API_KEY"],
            base_url=environ.get("OPENAI_BASE_URL") or OPENAI_URL,
            model=environ.get("OPENAI_MODEL") or OPENAI_MODEL,
        )
    if environ.get("ANTHROPIC_API_KEY"):
        return anthropic_messages(
            api_key=environ["ANTHROPIC_API_KEY"],
            base_url=environ.get("ANTHROPIC_BASE_URL") or ANTHROPIC_URL,
            model=environ.get("ANTHROPIC_MODEL") or ANTHROPIC_MODEL,
        )
    return None
