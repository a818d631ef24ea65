"""OpenTelemetry's conventions for a library: spans go to the global tracer provider the
application set, and a turn started inside a span continues its trace. Each case runs in a
child process, since a process sets its global provider once."""

from __future__ import annotations

import json
import subprocess
import sys

from locations import ROOT

APPLICATION = """
import json, trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from inert import open_runtime
from inert.events import TurnStarted

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
if SET_GLOBAL:
    trace.set_tracer_provider(provider)

async def main():
    async with open_runtime(log="memory://") as runtime:
        with provider.get_tracer("app").start_as_current_span("request") as request:
            turn = await runtime.start_turn(
                tenant="acme", conversation="c1", turn="t1", principal="user:alice"
            )
        recorded = [r for r in await runtime.log.read() if r.event_type == TurnStarted.TAG]
    spans = {span.name: span for span in exporter.get_finished_spans()}
    print(json.dumps({
        "spans": sorted(spans),
        "request_trace": format(request.get_span_context().trace_id, "032x"),
        "turn_traceparent": recorded[0].trace.traceparent if recorded[0].trace else None,
        "turn_span_trace": (
            format(spans["inert.turn"].context.trace_id, "032x") if "inert.turn" in spans else None
        ),
    }))

trio.run(main)
"""


def _run(set_global: bool) -> dict[str, object]:
    script = f"SET_GLOBAL = {set_global}\n{APPLICATION}"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_spans_go_to_the_global_provider_in_the_caller_s_trace() -> None:
    """With a global provider set and no ``tracer_provider`` given, the turn's span is made,
    in the trace of the span current where the turn started, which the log records too."""
    result = _run(set_global=True)
    assert "inert.turn" in result["spans"]  # type: ignore[operator]
    trace_id = result["request_trace"]
    assert result["turn_span_trace"] == trace_id
    assert f"-{trace_id}-" in str(result["turn_traceparent"])


def test_without_a_global_provider_no_span_is_made_but_the_trace_is_recorded() -> None:
    """With no provider set anywhere, the runtime makes no span (the API's stand-in would send
    them nowhere), and the turn still records the caller's trace for correlation."""
    result = _run(set_global=False)
    assert result["spans"] == ["request"]
    assert f"-{result['request_trace']}-" in str(result["turn_traceparent"])
