"""Spans leave the process as OTLP: over HTTP to a receiver the ``OTEL_*`` variables name, or as
an OTLP JSON file from ``inert demo --traces``; without either, nothing is set up at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import grpc
import pytest
import trio
from builders import call_key
from locations import ROOT, TESTS
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ConfigurationError,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    TraceContext,
    open_runtime,
)
from inert.cli import main
from inert.cli._tracing import spans_asked
from inert.tracing._export import provider_from_environment

SECRET = b'{"path": "/home/secret-value"}'
UPSTREAM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: each POST to /v1/traces is one protobuf export request."""

    received: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.received.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        """Quiet: the test reads what arrived, not the access log."""


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ExportTraceServiceRequest]]:
    received: list[ExportTraceServiceRequest] = []
    handler = type("Handler", (Receiver,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{server.server_port}")
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    yield received
    server.shutdown()
    server.server_close()


def spans_of(requests: list[ExportTraceServiceRequest]) -> list[Span]:
    """Every span the receiver got, in the order it got them."""
    return [
        span
        for request in requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]


def feed_in_the_caller_s_trace(tmp_path: Path) -> None:
    """``inert feed`` of a captured Anthropic stream, executed, continuing ``UPSTREAM``."""
    stream = TESTS / "fixtures" / "provider-streams" / "anthropic" / "text-then-tool-use.sse"
    tools = ROOT / "examples" / "tools" / "TOOLS.json"
    argv = ["feed", str(stream), "--provider", "anthropic", "--tools", str(tools)]
    log = f"sqlite:///{tmp_path / 'traced.db'}"
    assert main([*argv, "--log", log, "--execute", "--traceparent", UPSTREAM]) == 0


def names_in_the_caller_s_trace(requests: list[ExportTraceServiceRequest]) -> set[str]:
    """The names of the spans received in ``UPSTREAM``'s trace."""
    caller = bytes.fromhex(UPSTREAM.split("-")[1])
    return {span.name for span in spans_of(requests) if span.trace_id == caller}


def test_without_an_endpoint_no_span_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """No OTEL endpoint, or OTEL_TRACES_EXPORTER=none: tracing is not set up, and costs nothing."""
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert not spans_asked()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert not spans_asked()
    monkeypatch.delenv("OTEL_TRACES_EXPORTER")
    assert spans_asked()


def test_an_otlp_protocol_other_than_http_or_grpc_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``OTEL_EXPORTER_OTLP_PROTOCOL`` is read: one inert cannot export with is an error."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigurationError, match=r"'http/json'.*http/protobuf or grpc"):
        provider_from_environment()


def test_spans_asked_for_without_the_sdk_say_what_to_install() -> None:
    """Without the OpenTelemetry SDK (the ``otlp`` extra), a command asked for spans fails with
    one line naming the extra; without being asked, it runs."""
    script = (
        "import sys; sys.modules['opentelemetry.sdk'] = None\n"
        "from inert.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )

    def demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script, "demo"],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )

    asked = demo({**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert asked.returncode == 1
    assert "pip install 'inert[otlp]'" in asked.stderr
    quiet = demo({k: v for k, v in os.environ.items() if k != "OTEL_EXPORTER_OTLP_ENDPOINT"})
    assert quiet.returncode == 0, quiet.stderr


def test_a_fed_stream_s_spans_reach_the_receiver_in_the_caller_s_trace(
    tmp_path: Path, receiver: list[ExportTraceServiceRequest]
) -> None:
    """``inert feed --traceparent ... --execute`` exports by the ``OTEL_*`` variables: the turn,
    its call and the call's dispatch, in the caller's trace."""
    feed_in_the_caller_s_trace(tmp_path)
    assert {
        "inert.turn",
        "inert.call get_weather",
        "inert.dispatch",
    } <= names_in_the_caller_s_trace(receiver)


def key(call: str) -> CallKey:
    return call_key(call, response=f"r_{call}", item="fc")


async def two_calls_one_dispatched_one_cancelled() -> None:
    provider = provider_from_environment()
    assert provider is not None
    tools = [ToolDeclaration(name="read_file"), ToolDeclaration(name="delete_file")]
    async with open_runtime(log="memory://", tools=tools, tracer_provider=provider) as runtime:
        turn = await runtime.start_turn(
            tenant="acme", conversation="c1", turn="t1", principal="user:alice"
        )
        for call, tool, done in (("call_1", "read_file", True), ("call_2", "delete_file", False)):
            events = [
                CallOpened(key=key(call), tool=tool, sequence=0),
                ArgumentsAppended(key=key(call), data=SECRET, first_sequence=1, last_sequence=1),
            ]
            if done:
                events += [
                    CallEnded(key=key(call), terminal=TerminalRef(sequence=2)),
                    ResponseEnded(
                        response=key(call).response_ref,
                        reason=ResponseEndReason.COMPLETED,
                        terminal=TerminalRef(sequence=3),
                    ),
                ]
            await runtime.feed(events, trace=TraceContext(traceparent=UPSTREAM))
        await runtime.settle()
        dispatch = await runtime.claim(key("call_1"), executor="worker")
        await runtime.complete(dispatch)
        await runtime.cancel_turn(turn, principal="user:alice")
        await runtime.settle()
    await trio.to_thread.run_sync(provider.shutdown)


async def test_spans_reach_an_otlp_http_receiver(
    receiver: list[ExportTraceServiceRequest],
) -> None:
    """A turn with a dispatched and a cancelled call arrives as one trace: the turn, two calls
    under it (linked to the context their stream was fed under), validation and dispatch under
    the dispatched one, their states and reasons, and no argument value in the payload."""
    await two_calls_one_dispatched_one_cancelled()
    spans = spans_of(receiver)
    by_name = {span.name: span for span in spans}
    assert {span.trace_id for span in spans} == {by_name["inert.turn"].trace_id}
    turn = by_name["inert.turn"]
    for name in ("inert.call read_file", "inert.call delete_file"):
        assert by_name[name].parent_span_id == turn.span_id
    dispatched = by_name["inert.call read_file"]
    assert [link.span_id.hex() for link in dispatched.links] == ["b7ad6b7169203331"]
    children = {span.name for span in spans if span.parent_span_id == dispatched.span_id}
    assert children == {"inert.validation", "inert.dispatch"}
    attributes = {
        attribute.key: attribute.value.string_value
        for attribute in by_name["inert.call delete_file"].attributes
    }
    assert attributes["inert.terminal_reason"] == "turn_cancelled"
    assert all(b"secret-value" not in request.SerializeToString() for request in receiver)


def test_the_demo_writes_its_spans_as_otlp_json(tmp_path: Path) -> None:
    """``inert demo --traces FILE`` leaves an OTLP JSON document of turns and calls, no value."""
    traces = tmp_path / "traces.json"
    assert main(["demo", "--traces", str(traces)]) == 0
    document = json.loads(traces.read_text())
    names = {
        span["name"]
        for resource in document["resourceSpans"]
        for scope in resource["scopeSpans"]
        for span in scope["spans"]
    }
    assert {"inert.turn", "inert.call get_weather", "inert.validation"} <= names
    assert "Reykjavik" not in traces.read_text()


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.received: list[ExportTraceServiceRequest] = []

    def Export(
        self, request: ExportTraceServiceRequest, context: object
    ) -> ExportTraceServiceResponse:
        self.received.append(request)
        return ExportTraceServiceResponse()


def test_spans_reach_an_otlp_grpc_receiver_when_the_protocol_says_grpc(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OTEL_EXPORTER_OTLP_PROTOCOL=grpc`` sends a command's spans over OTLP/gRPC, in the
    caller's trace."""
    collector = _Collector()
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
        feed_in_the_caller_s_trace(tmp_path)
    finally:
        server.stop(grace=None)
    names = names_in_the_caller_s_trace(collector.received)
    assert {"inert.turn", "inert.call get_weather", "inert.dispatch"} <= names
