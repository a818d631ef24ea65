"""W3C trace context values, OpenTelemetry spans and their export."""
