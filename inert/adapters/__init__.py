"""Provider streams to portable ingress events: sans-IO, importing only ``inert.events``."""

from ._adapter import ProtocolError, StreamAdapter, as_object, event_digest
from ._anthropic import AnthropicAdapter
from ._bedrock import (
    DEFAULT_MAX_FRAME_SIZE,
    BedrockAdapter,
    EventStreamDecoder,
    event_stream_message,
)
from ._calls import ResponseCalls, ResumedCall
from ._gemini import GeminiAdapter
from ._openai_chat import OpenAIChatAdapter
from ._openai_responses import OpenAIResponsesAdapter
from ._providers import PROVIDERS, AdapterFactory
from ._sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder

__all__ = [
    "DEFAULT_MAX_EVENT_SIZE",
    "DEFAULT_MAX_FRAME_SIZE",
    "PROVIDERS",
    "AdapterFactory",
    "AnthropicAdapter",
    "BedrockAdapter",
    "EventStreamDecoder",
    "GeminiAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "ProtocolError",
    "ResponseCalls",
    "ResumedCall",
    "SSEDecoder",
    "ServerSentEvent",
    "StreamAdapter",
    "as_object",
    "event_digest",
    "event_stream_message",
]
