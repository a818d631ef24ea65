"""What tracing costs end to end: the same workload with no tracer and with spans batched to an
exporter, side by side in one run.

Run with ``python -m benchmarks.tracing_overhead [--calls N] [--fragments N] [--runs R]
[--json]``.

The workload is whole call lifecycles on a SQLite log (``synchronous=FULL``): ``--calls`` calls
(ten per turn, each in its own response, fed by concurrent tasks), each with ``--fragments``
fragments of 32 bytes, its end event and its response's end, then claimed and completed: every
span kind a call makes (turn, call, validation, dispatch) is made. Traced: an OpenTelemetry
``TracerProvider`` with a ``BatchSpanProcessor`` whose exporter encodes every span as OTLP
protobuf (the work an OTLP exporter does before the network) and drops it. The cases alternate
run by run; the median time of each is reported, and the overhead is traced over untraced minus
one. Target: at most 15%.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
)

TOOL = ToolDeclaration(name="lookup")
FRAGMENT = b'"0123456789abcdef0123456789abc",'


class EncodingExporter(SpanExporter):
    """Encodes each batch as an OTLP request would be, then drops it."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        encode_spans(spans).SerializeToString()
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def call_key(index: int) -> CallKey:
    return CallKey(
        tenant="bench",
        conversation=f"c{index // 10}",
        turn="t1",
        response=f"resp_{index}",
        item="fc_1",
        call=f"call_{index}",
    )


def lifecycle(key: CallKey, fragments: int) -> list[list[Event]]:
    body = [b"[", *[FRAGMENT] * fragments, b"0]"]
    arguments = b'{"values": ' + b"".join(body) + b"}"
    pieces = [arguments[i : i + 32] for i in range(0, len(arguments), 32)]
    feeds: list[list[Event]] = [[CallOpened(key=key, tool=TOOL.name, sequence=0)]]
    feeds += [
        [ArgumentsAppended(key=key, data=piece, first_sequence=n, last_sequence=n)]
        for n, piece in enumerate(pieces, 1)
    ]
    end = len(pieces) + 1
    feeds.append(
        [
            CallEnded(key=key, terminal=TerminalRef(sequence=end)),
            ResponseEnded(
                response=key.response_ref,
                reason=ResponseEndReason.COMPLETED,
                terminal=TerminalRef(sequence=end + 1),
            ),
        ]
    )
    return feeds


async def workload(path: Path, calls: int, fragments: int, traced: bool) -> tuple[float, int]:
    provider: TracerProvider | None = None
    exporter = EncodingExporter()
    if traced:
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
    keys = [call_key(index) for index in range(calls)]
    limits = CallLimits(max_live_per_turn=calls, max_live_per_tenant=calls * 2)
    async with open_runtime(
        log=f"sqlite:///{path}", create=True, tools=[TOOL], limits=limits, tracer_provider=provider
    ) as runtime:
        for conversation in sorted({key.conversation for key in keys}):
            await runtime.start_turn(
                tenant="bench", conversation=conversation, turn="t1", principal="bench"
            )
        start = time.perf_counter()

        async def run_call(key: CallKey) -> None:
            for events in lifecycle(key, fragments):
                await runtime.feed(events)

        async with trio.open_nursery() as nursery:
            for key in keys:
                nursery.start_soon(run_call, key)
        await runtime.settle()
        for key in keys:
            dispatch = await runtime.claim(key, executor="bench")
            await runtime.complete(dispatch)
        await runtime.settle()
        elapsed = time.perf_counter() - start
    if provider is not None:
        provider.shutdown()
    return elapsed, exporter.spans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--fragments", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args(argv)
    times: dict[str, list[float]] = {"untraced": [], "traced": []}
    spans = 0
    with tempfile.TemporaryDirectory(prefix="inert-tracing-") as folder:
        for run in range(arguments.runs):
            for case in ("untraced", "traced"):
                path = Path(folder) / f"{case}-{run}.db"
                elapsed, made = trio.run(
                    workload, path, arguments.calls, arguments.fragments, case == "traced"
                )
                times[case].append(elapsed)
                spans = max(spans, made)
    untraced, traced = statistics.median(times["untraced"]), statistics.median(times["traced"])
    result: dict[str, Any] = {
        "arguments": vars(arguments),
        "untraced_seconds": untraced,
        "traced_seconds": traced,
        "spans_per_run": spans,
        "overhead": traced / untraced - 1,
    }
    if arguments.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{arguments.calls} call lifecycles of {arguments.fragments} fragments, SQLite FULL,"
        f" median of {arguments.runs} runs each, alternating"
    )
    print("| case | seconds | spans | overhead | target <= 15% |")
    print("|---|---:|---:|---:|---|")
    print(f"| no tracer | {untraced:.3f} | 0 |  |  |")
    met = "yes" if result["overhead"] <= 0.15 else "**no**"
    overhead = f"{result['overhead']:+.1%}"
    print(f"| batched spans, OTLP-encoded | {traced:.3f} | {spans} | {overhead} | {met} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
