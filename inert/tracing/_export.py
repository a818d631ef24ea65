"""Where spans go: OTLP as the standard ``OTEL_*`` variables say, or an OTLP JSON file.

I/O at the edge: the pure span-making lives in ``inert.tracing``; this module only builds the
OpenTelemetry SDK's provider and exporters that carry the spans out.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path

from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from ..events import ConfigurationError, InertError


def _resource() -> Resource:
    return Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", "inert")})


def provider_from_environment() -> TracerProvider:
    """A provider exporting in batches over OTLP as the ``OTEL_*`` variables say: HTTP with
    protobuf by default, gRPC where ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` (or
    ``OTEL_EXPORTER_OTLP_PROTOCOL``) says ``grpc``."""
    provider = TracerProvider(resource=_resource())
    provider.add_span_processor(BatchSpanProcessor(_exporter()))
    return provider


def _exporter() -> SpanExporter:
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol == "http/protobuf":
        return OTLPSpanExporter()
    if protocol == "grpc":
        try:
            grpc = importlib.import_module("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
        except ImportError:
            raise ConfigurationError(
                "OTLP over gRPC needs its exporter: pip install 'inert[otlp-grpc]'"
            ) from None
        exporter: SpanExporter = grpc.OTLPSpanExporter()
        return exporter
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
