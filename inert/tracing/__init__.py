"""W3C trace context values, OpenTelemetry spans and their export."""

from ._context import (
    MAX_TRACESTATE_BYTES,
    MAX_TRACESTATE_MEMBERS,
    IncomingTrace,
    read_trace_headers,
)

__all__ = [
    "MAX_TRACESTATE_BYTES",
    "MAX_TRACESTATE_MEMBERS",
    "IncomingTrace",
    "read_trace_headers",
]
