"""W3C trace context values, OpenTelemetry spans and their export."""

from ._context import (
    MAX_TRACESTATE_BYTES,
    MAX_TRACESTATE_MEMBERS,
    IncomingTrace,
    read_trace_headers,
)
from ._spans import DEFAULT_MAX_LINKS, CallSpans, current_trace, global_tracer_provider

__all__ = [
    "DEFAULT_MAX_LINKS",
    "MAX_TRACESTATE_BYTES",
    "MAX_TRACESTATE_MEMBERS",
    "CallSpans",
    "IncomingTrace",
    "current_trace",
    "global_tracer_provider",
    "read_trace_headers",
]
