"""Provider streams to portable ingress events: sans-IO, importing only ``inert.events``."""

from ._anthropic import AnthropicAdapter
from ._bedrock import BedrockAdapter, EventStreamDecoder, event_stream_message
from ._gemini import GeminiAdapter
from ._openai_chat import OpenAIChatAdapter
from ._openai_responses import OpenAIResponsesAdapter
from ._sse import ServerSentEvent, SSEDecoder
from ._tracker import ResponseCalls, ResumedCall, StreamAdapter, as_object, event_digest

__all__ = [
    "AnthropicAdapter",
    "BedrockAdapter",
    "EventStreamDecoder",
    "GeminiAdapter",
    "OpenAIChatAdapter",
    "OpenAIResponsesAdapter",
    "ResponseCalls",
    "ResumedCall",
    "SSEDecoder",
    "ServerSentEvent",
    "StreamAdapter",
    "as_object",
    "event_digest",
    "event_stream_message",
]
