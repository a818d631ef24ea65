"""Asking the provider through its official async SDK: ``openai`` for the Responses API (and the
local replay, which speaks it), ``anthropic`` for the Messages API.

The request is the Trio example's, to the letter; the SDK's stream of events then goes to
inert's ``feed_stream``, which picks the adapter's reading of each event and ends the stream as
its protocol says.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

import anthropic
import openai

from examples.agent_server import Provider, ProviderError
from examples.agent_server._providers import Protocol
from inert import ToolDeclaration

READ_TIMEOUT = 120.0
"""Seconds the provider may stay silent mid-stream; inert cancels a call idle for 60 anyway."""
MAX_ERROR_SHOWN = 300
"""Characters of a provider's error body shown to the person."""

Ask = Callable[[str], Awaitable[AsyncIterable[object]]]
"""Asks the provider for a streamed response to a message: the SDK's stream of its events."""

SDK_ERRORS = (openai.APIError, anthropic.APIError)
"""What asking a provider, or reading its stream, raises when the provider fails (the HTTP
client's errors wrapped)."""


@asynccontextmanager
async def sdk_client(provider: Provider, tools: Sequence[ToolDeclaration]) -> AsyncIterator[Ask]:
    """How to ask ``provider`` for a response offering ``tools``, through the official client of
    its API, open while the block runs."""
    # No retries: a provider that fails says so to the person at once, as in the Trio example.
    if provider.protocol is Protocol.OPENAI_RESPONSES:
        async with openai.AsyncOpenAI(
            api_key=provider.api_key,
            base_url=provider.base_url,
            timeout=openai.Timeout(30.0, read=READ_TIMEOUT),
            max_retries=0,
        ) as responses:

            async def ask_openai(message: str) -> AsyncIterable[object]:
                body = provider.request(message, tools)
                stream: AsyncIterable[object] = await responses.responses.create(**body)
                return stream

            yield ask_openai
    else:
        async with anthropic.AsyncAnthropic(
            api_key=provider.api_key,
            base_url=provider.base_url,
            timeout=anthropic.Timeout(30.0, read=READ_TIMEOUT),
            max_retries=0,
        ) as messages:

            async def ask_anthropic(message: str) -> AsyncIterable[object]:
                body = provider.request(message, tools)
                stream: AsyncIterable[object] = await messages.messages.create(**body)
                return stream

            yield ask_anthropic


def failure(provider: Provider, error: Exception) -> ProviderError:
    """What the person is told of a provider's failure (one of :data:`SDK_ERRORS`)."""
    if isinstance(error, openai.APIStatusError | anthropic.APIStatusError):
        said = error.response.text[:MAX_ERROR_SHOWN]
        return ProviderError(
            f"{provider.name} answered HTTP {error.status_code}, not a stream: {said}"
        )
    # The SDKs wrap the HTTP client's error: its name says what broke.
    broke = type(error.__cause__ or error).__name__
    return ProviderError(f"the stream from {provider.name} broke: {broke}")
