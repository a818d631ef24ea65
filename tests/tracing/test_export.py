"""Spans leave the process as OTLP: over HTTP to a receiver the ``OTEL_*`` variables name, or as
an OTLP JSON file from ``inert demo --traces``, or to the console; without either, nothing is
set up at all. Every variable docs/tracing.md lists is tested here, and a dead endpoint is said
in one line."""

from __future__ import annotations

import gzip
import json
import os
import re
import socket
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
from inert.cli._tracing import exported_spans, exporters_asked, spans_asked
from inert.tracing._export import provider_from_environment

SECRET = b'{"path": "/home/secret-value"}'
UPSTREAM = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture(autouse=True)
def no_otel_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no ``OTEL_*`` variable but those it sets itself."""
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)


class Received(list[ExportTraceServiceRequest]):
    """The export requests a receiver got, and the headers each came with."""

    headers: list[dict[str, str]]


class Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver: each POST to /v1/traces is one protobuf export request."""

    received: Received

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.received.headers.append({name.lower(): value for name, value in self.headers.items()})
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.received.append(request)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        """Quiet: the test reads what arrived, not the access log."""


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Iterator[Received]:
    received = Received()
    received.headers = []
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


@pytest.mark.parametrize(
    "variable", ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"]
)
def test_an_otlp_protocol_other_than_http_or_grpc_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The protocol variables are read: one inert cannot export with is an error."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv(variable, "http/json")
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
    provider, _ = provider_from_environment()
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


# --- the OTEL_* variables, each as docs/tracing.md lists it ----------------------------------


def test_the_docs_list_the_variables_tested_here() -> None:
    """docs/tracing.md lists exactly the ``OTEL_*`` variables this module tests (``HONOURED``
    names the test of each)."""
    page = (ROOT / "docs" / "tracing.md").read_text()
    table = page.split("## The `OTEL_*` variables", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(OTEL_[A-Z_]+)`", table, flags=re.MULTILINE))
    assert listed == set(HONOURED)


@pytest.mark.parametrize(
    ("variables", "exporters"),
    [
        ({}, set()),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, {"otlp"}),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, {"otlp"}),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, {"otlp"}),
        ({"OTEL_TRACES_EXPORTER": "console"}, {"console"}),
        ({"OTEL_TRACES_EXPORTER": " OTLP , console "}, {"otlp", "console"}),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, set()),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, set()),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "console"}, set()),
        ({"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "console"}, {"console"}),
    ],
)
def test_the_variables_ask_for_these_exporters(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], exporters: set[str]
) -> None:
    """``OTEL_SDK_DISABLED`` turns every exporter off; ``OTEL_TRACES_EXPORTER`` names them
    (``otlp`` by default where an endpoint is named); no span is asked for without one."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert exporters_asked() == exporters
    assert spans_asked() == bool(exporters)


def test_an_exporter_inert_does_not_have_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """``OTEL_TRACES_EXPORTER=zipkin`` is an error naming what inert exports with."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp,zipkin")
    with pytest.raises(ConfigurationError, match=r"'zipkin': inert exports with otlp, console"):
        exporters_asked()


async def test_the_console_exporter_writes_each_span_to_standard_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``OTEL_TRACES_EXPORTER=console`` writes the spans as JSON on standard error, standard
    output left to the command."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    with exported_spans() as provider:
        assert provider is not None
        async with open_runtime(log="memory://", tracer_provider=provider) as runtime:
            await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="a")
    printed = capsys.readouterr()
    assert printed.out == ""
    assert '"name": "inert.turn"' in printed.err


async def test_the_otlp_variables_reach_the_receiver(
    monkeypatch: pytest.MonkeyPatch, receiver: Received
) -> None:
    """The traces endpoint, the headers, gzip compression, the service's name and the resource's
    attributes are the exporter's as the variables say."""
    base = os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{base}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=acme,x-token=t0ken")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "agent-server")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging")
    await two_calls_one_dispatched_one_cancelled()
    assert receiver
    for headers in receiver.headers:
        assert (headers["x-tenant"], headers["x-token"]) == ("acme", "t0ken")
        assert headers["content-encoding"] == "gzip"
    resource = {
        attribute.key: attribute.value.string_value
        for request in receiver
        for spans in request.resource_spans
        for attribute in spans.resource.attributes
    }
    assert resource["service.name"] == "agent-server"
    assert resource["deployment.environment"] == "staging"


async def test_a_sampler_that_keeps_nothing_exports_nothing(
    monkeypatch: pytest.MonkeyPatch, receiver: Received
) -> None:
    """``OTEL_TRACES_SAMPLER=traceidratio`` with ``OTEL_TRACES_SAMPLER_ARG=0`` keeps no span."""
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    await two_calls_one_dispatched_one_cancelled()
    assert spans_of(receiver) == []


@pytest.mark.slow(seconds=8)
def test_a_dead_endpoint_is_said_in_one_line() -> None:
    """A command whose OTLP endpoint refuses every connection says so in one line once its
    spans are flushed (within ``OTEL_EXPORTER_OTLP_TIMEOUT``), not a warning per retry between
    its own lines; its output and its exit status are those of a run without spans."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    environment = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
    }
    demo = subprocess.run(
        [sys.executable, "-m", "inert", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        env=environment,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    assert "dispatched" in demo.stdout
    [line] = demo.stderr.splitlines()
    assert re.fullmatch(
        rf"inert: (\d+) of \1 spans were not exported to http://127\.0\.0\.1:{port}/v1/traces"
        r" \(Connection refused\)",
        line,
    ), line


HONOURED = {
    "OTEL_SDK_DISABLED": (test_the_variables_ask_for_these_exporters),
    "OTEL_TRACES_EXPORTER": (test_the_variables_ask_for_these_exporters),
    "OTEL_EXPORTER_OTLP_ENDPOINT": (test_spans_reach_an_otlp_http_receiver),
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": (test_the_otlp_variables_reach_the_receiver),
    "OTEL_EXPORTER_OTLP_PROTOCOL": (
        test_spans_reach_an_otlp_grpc_receiver_when_the_protocol_says_grpc
    ),
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": (
        test_an_otlp_protocol_other_than_http_or_grpc_is_refused
    ),
    "OTEL_EXPORTER_OTLP_HEADERS": (test_the_otlp_variables_reach_the_receiver),
    "OTEL_EXPORTER_OTLP_COMPRESSION": (test_the_otlp_variables_reach_the_receiver),
    "OTEL_EXPORTER_OTLP_TIMEOUT": (test_a_dead_endpoint_is_said_in_one_line),
    "OTEL_SERVICE_NAME": (test_the_otlp_variables_reach_the_receiver),
    "OTEL_RESOURCE_ATTRIBUTES": (test_the_otlp_variables_reach_the_receiver),
    "OTEL_TRACES_SAMPLER": (test_a_sampler_that_keeps_nothing_exports_nothing),
    "OTEL_TRACES_SAMPLER_ARG": (test_a_sampler_that_keeps_nothing_exports_nothing),
}
"""Each variable docs/tracing.md lists, and the test that shows it honoured."""
