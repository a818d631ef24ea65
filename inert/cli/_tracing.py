"""Where a command's spans go: by the standard ``OTEL_*`` variables, or to an OTLP JSON file.

The OpenTelemetry SDK and its exporters are the ``otlp`` extra: they are loaded only when spans
are asked for, and asked for without them is an error that says what to install. Spans that
could not be exported are said in one line once the command is done.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from opentelemetry.trace import TracerProvider

from ..events import ConfigurationError

_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_EXPORTERS = ("otlp", "console", "none")


def exporters_asked() -> frozenset[str]:
    """The exporters the ``OTEL_*`` variables ask for: none where ``OTEL_SDK_DISABLED`` is
    ``true``; else those ``OTEL_TRACES_EXPORTER`` names (``none`` is none), or, where it is not
    set, ``otlp`` if an endpoint is named. An exporter inert does not have is refused."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return frozenset()
    named = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if not named:
        return frozenset({"otlp"} if any(os.environ.get(name) for name in _ENDPOINTS) else ())
    names = {name.strip() for name in named.split(",") if name.strip()}
    unknown = sorted(names - set(_EXPORTERS))
    if unknown:
        raise ConfigurationError(
            f"OTEL_TRACES_EXPORTER names {', '.join(map(repr, unknown))}: inert exports with"
            f" {', '.join(_EXPORTERS)}"
        )
    return frozenset(names - {"none"})


def spans_asked(traces: Path | None = None) -> bool:
    """Whether spans are to be exported: to a file, or as the ``OTEL_*`` variables say."""
    return traces is not None or bool(exporters_asked())


@contextmanager
def exported_spans(traces: Path | None = None) -> Iterator[TracerProvider | None]:
    """The provider a command's runtime makes its spans with, flushed and shut down when the
    block ends; ``None`` (and nothing loaded) where no span is asked for. Spans the OTLP
    exporter could not send are said in one line on standard error once they are flushed."""
    exporters = frozenset() if traces is not None else exporters_asked()
    if traces is None and not exporters:
        yield None
        return
    try:
        from ..tracing import _export  # noqa: PLC0415
    except ImportError as error:
        raise ConfigurationError(
            f"exporting spans needs the OpenTelemetry SDK and its OTLP exporter ({error.name} is"
            " missing): pip install 'inert[otlp]'"
        ) from None
    if traces is not None:
        provider, failures = _export.provider_for_file(traces), None
    else:
        provider, failures = _export.provider_from_environment(exporters)
    with ExitStack() as stack:
        if failures is not None:
            stack.enter_context(_export.export_warnings_kept(failures))
        try:
            yield provider
        finally:
            provider.shutdown()
    said = None if failures is None else failures.summary()
    if said is not None:
        print(f"inert: {said}", file=sys.stderr)
