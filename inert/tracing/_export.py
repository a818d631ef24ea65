"""Where spans go: OTLP or the console as the standard ``OTEL_*`` variables say, or an OTLP
JSON file.

I/O at the edge: the pure span-making lives in ``inert.tracing``; this module only builds the
OpenTelemetry SDK's provider and exporters that carry the spans out. What the SDK's exporters
log while they fail (a warning per retry) is kept, not printed: a command ends with one line
saying how many spans did not leave, where to and why (``ExportFailures``).
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from ..events import ConfigurationError, InertError


def _resource() -> Resource:
    return Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", "inert")})


# The loggers of the SDK's exporters (a warning per failed attempt) and of its span processors
# (spans dropped from a full queue).
_EXPORT_LOGGERS = (
    "opentelemetry.exporter",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
)


class ExportFailures(SpanExporter):
    """An OTLP exporter whose failures are counted, for a summary once the spans are flushed."""

    def __init__(self, exporter: SpanExporter, destination: str) -> None:
        self._exporter = exporter
        self.destination = destination
        self.spans = 0
        self.lost = 0
        self.errors: list[str] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        try:
            result = self._exporter.export(spans)
        except Exception as error:
            # Raised or returned, a failure loses the batch alike; the SDK would log the
            # traceback between the command's lines.
            self.errors.append(str(error))
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.lost += len(spans)
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)

    def summary(self) -> str | None:
        """One line on the spans that did not leave (``None``: every one did)."""
        if not self.lost:
            return None
        why = _why(self.errors)
        return f"{self.lost} of {self.spans} spans were not exported to {self.destination}" + (
            f" ({why})" if why else ""
        )


def _why(errors: Sequence[str]) -> str | None:
    """The cause the failures' messages name, the operating system's first (a refused
    connection, a name not found), else the last message, shortened."""
    for message in reversed(errors):
        found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", message)
        if found:
            return found[1].strip()
    if not errors:
        return None
    last = " ".join(errors[-1].split())
    return last if len(last) <= 160 else last[:157] + "..."


class _Kept(logging.Handler):
    def __init__(self, kept: list[str]) -> None:
        super().__init__(logging.WARNING)
        self._kept = kept

    def emit(self, record: logging.LogRecord) -> None:
        self._kept.append(record.getMessage())


@contextmanager
def export_warnings_kept(failures: ExportFailures) -> Iterator[None]:
    """While the block runs, what the SDK's exporters log is kept as the causes of
    ``failures``, not written between the command's lines."""
    handler = _Kept(failures.errors)
    loggers = [logging.getLogger(name) for name in _EXPORT_LOGGERS]
    propagated = [logger.propagate for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, propagated, strict=True):
            logger.removeHandler(handler)
            logger.propagate = propagate


def provider_from_environment(
    exporters: Collection[str] = ("otlp",),
) -> tuple[TracerProvider, ExportFailures | None]:
    """A provider exporting in batches with ``exporters`` (``otlp``, ``console``), and the
    failures of its OTLP exporter (``None`` without one). OTLP as the ``OTEL_*`` variables say:
    HTTP with protobuf by default, gRPC where ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` (or
    ``OTEL_EXPORTER_OTLP_PROTOCOL``) says ``grpc``; the console writes each span as JSON to
    standard error (standard output is the command's)."""
    provider = TracerProvider(resource=_resource())
    failures = None
    if "otlp" in exporters:
        failures = ExportFailures(*_otlp_exporter())
        provider.add_span_processor(BatchSpanProcessor(failures))
    if "console" in exporters:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    return provider, failures


def _otlp_exporter() -> tuple[SpanExporter, str]:
    """The OTLP exporter the variables ask for, and where it sends the spans."""
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if protocol == "http/protobuf":
        base = (endpoint or "http://localhost:4318").rstrip("/")
        return OTLPSpanExporter(), traces or f"{base}/v1/traces"
    if protocol == "grpc":
        try:
            grpc = importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
        except ImportError:
            raise ConfigurationError(
                "OTLP over gRPC needs its exporter: pip install 'inert[otlp-grpc]'"
            ) from None
        exporter: SpanExporter = grpc.OTLPSpanExporter()
        return exporter, traces or endpoint or "http://localhost:4317"
    raise ConfigurationError(
        f"OTLP protocol {protocol!r} is not one inert exports with: http/protobuf or grpc"
    )


class OTLPJSONFile(SpanExporter):
    """Spans kept until shutdown, then written as one OTLP JSON document (what Jaeger's UI
    loads)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._spans: list[ReadableSpan] = []
        self._written = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self._spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        # Once only: the provider's exit handler calls this again after a failed shutdown, and
        # an error raised there would be a traceback at the process's exit.
        if self._written:
            return
        self._written = True
        try:
            self.path.write_text(MessageToJson(encode_spans(self._spans)), encoding="utf-8")
        except OSError as error:
            raise InertError(f"cannot write the spans to {self.path}: {error.strerror}") from None


def provider_for_file(path: Path) -> TracerProvider:
    """A provider whose spans are written to ``path`` as OTLP JSON when it shuts down; a path
    that cannot be written is refused now, before anything runs."""
    try:
        with path.open("w", encoding="utf-8"):
            pass
    except (OSError, ValueError) as error:
        why = error.strerror if isinstance(error, OSError) else str(error)
        raise ConfigurationError(f"cannot write the spans file {path}: {why}") from None
    provider = TracerProvider(resource=_resource())
    provider.add_span_processor(SimpleSpanProcessor(OTLPJSONFile(path)))
    return provider
