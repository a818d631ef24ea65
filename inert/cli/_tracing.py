"""Where a command's spans go: by the standard ``OTEL_*`` variables, or to an OTLP JSON file.

The OpenTelemetry SDK and its exporters are the ``otlp`` extra: they are loaded only when spans
are asked for, and asked for without them is an error that says what to install.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from opentelemetry.trace import TracerProvider

from ..events import ConfigurationError

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def spans_asked(traces: Path | None = None) -> bool:
    """Whether spans are to be exported: to a file, or where an ``OTEL_*`` endpoint says (and
    ``OTEL_TRACES_EXPORTER`` is not ``none``)."""
    if traces is not None:
        return True
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return any(os.environ.get(name) for name in _ENDPOINTS)


@contextmanager
def exported_spans(traces: Path | None = None) -> Iterator[TracerProvider | None]:
    """The provider a command's runtime makes its spans with, flushed and shut down when the
    block ends; ``None`` (and nothing loaded) where no span is asked for."""
    if not spans_asked(traces):
        yield None
        return
    try:
        from ..tracing import _export  # noqa: PLC0415
    except ImportError as error:
        raise ConfigurationError(
            f"exporting spans needs the OpenTelemetry SDK and its OTLP exporter ({error.name} is"
            " missing): pip install 'inert[otlp]'"
        ) from None
    provider = (
        _export.provider_for_file(traces)
        if traces is not None
        else _export.provider_from_environment()
    )
    try:
        yield provider
    finally:
        provider.shutdown()
