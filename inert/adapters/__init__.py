"""Provider streams to portable ingress events: sans-IO, importing only ``inert.events``."""

from ._sse import ServerSentEvent, SSEDecoder
from ._tracker import ResponseCalls, ResumedCall, StreamAdapter, as_object, event_digest

__all__ = [
    "ResponseCalls",
    "ResumedCall",
    "SSEDecoder",
    "ServerSentEvent",
    "StreamAdapter",
    "as_object",
    "event_digest",
]
