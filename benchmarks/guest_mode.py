"""What running under asyncio costs: the same workload through the native Trio runtime and
through the asyncio facade (Trio as a guest of asyncio's loop), side by side in one run.

Run with ``python -m benchmarks.guest_mode [--calls N] [--fragments N] [--runs R] [--json]``.

The workload of ``benchmarks.tracing_overhead``: whole call lifecycles on a SQLite log
(``synchronous=FULL``), fed by concurrent tasks (Trio tasks natively; asyncio tasks, each
operation crossing into Trio, under asyncio), then claimed and completed. The cases alternate
run by run; the median of each is reported, and the overhead is guest over native minus one.
The target (issue 21): at most 20%; the command fails when the run misses it.

Where the difference goes, measured beside it: the round trip of an operation that does
nothing, one at a time and from 100 tasks at once (the crossing alone: a request handed to
Trio, Trio woken, the answer set), against awaiting the same nothing natively.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from benchmarks.tracing_overhead import TOOL, call_key, lifecycle, workload
from inert import CallKey, CallLimits, open_asyncio_runtime

TARGET_OVERHEAD = 0.20
"""At most this much longer under asyncio than natively (issue 21)."""

CROSSINGS = 5000
"""No-op operations per measurement of the crossing alone."""


def limits(calls: int) -> CallLimits:
    return CallLimits(max_live_per_turn=calls, max_live_per_tenant=calls * 2)


def conversations(keys: list[CallKey]) -> list[str]:
    return sorted({key.conversation for key in keys})


async def guest(path: Path, calls: int, fragments: int) -> float:
    keys = [call_key(index) for index in range(calls)]
    async with open_asyncio_runtime(
        log=f"sqlite:///{path}", create=True, tools=[TOOL], limits=limits(calls)
    ) as rt:
        for conversation in conversations(keys):
            await rt.start_turn(tenant="bench", conversation=conversation, turn="t1", principal="b")
        start = time.perf_counter()

        async def run_call(key: CallKey) -> None:
            for events in lifecycle(key, fragments):
                await rt.feed(events)

        await asyncio.gather(*(run_call(key) for key in keys))
        await rt.settle()
        for key in keys:
            await rt.complete(await rt.claim(key, executor="bench"))
        await rt.settle()
        return time.perf_counter() - start


async def nothing() -> None:
    """An operation that does nothing: what is measured is getting it done."""


async def crossing_costs(crossings: int, tasks: int) -> dict[str, float]:
    """Microseconds per no-op operation crossing into Trio and back, one at a time and from
    ``tasks`` tasks at once, and per native await of the same no-op."""
    async with open_asyncio_runtime(log="memory://", tools=[TOOL]) as rt:
        crossing = rt._crossing
        start = time.perf_counter()
        for _ in range(crossings):
            await crossing.call(nothing)
        one_at_a_time = (time.perf_counter() - start) / crossings

        async def caller() -> None:
            for _ in range(crossings // tasks):
                await crossing.call(nothing)

        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(tasks)))
        concurrent = (time.perf_counter() - start) / (crossings // tasks * tasks)
    start = time.perf_counter()
    for _ in range(crossings):
        await nothing()
    native = (time.perf_counter() - start) / crossings
    return {
        "one_at_a_time_us": one_at_a_time * 1e6,
        "concurrent_us": concurrent * 1e6,
        "native_await_us": native * 1e6,
    }


def operations(calls: int, fragments: int) -> int:
    """The operations of the workload that cross into Trio under asyncio."""
    return calls * len(lifecycle(call_key(0), fragments)) + 2 * calls + 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--fragments", type=int, default=20)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args(argv)
    times: dict[str, list[float]] = {"native": [], "guest": []}
    with tempfile.TemporaryDirectory(prefix="inert-guest-") as folder:
        for run in range(arguments.runs):
            native_path = Path(folder) / f"native-{run}.db"
            elapsed, _ = trio.run(
                workload, native_path, arguments.calls, arguments.fragments, False
            )
            times["native"].append(elapsed)
            guest_path = Path(folder) / f"guest-{run}.db"
            times["guest"].append(
                asyncio.run(guest(guest_path, arguments.calls, arguments.fragments))
            )
    native_time, guest_time = statistics.median(times["native"]), statistics.median(times["guest"])
    costs = asyncio.run(crossing_costs(CROSSINGS, arguments.calls))
    crossed = operations(arguments.calls, arguments.fragments)
    overhead = guest_time / native_time - 1
    result: dict[str, Any] = {
        "arguments": vars(arguments),
        "native_seconds": native_time,
        "guest_seconds": guest_time,
        "native_runs": times["native"],
        "guest_runs": times["guest"],
        "overhead": overhead,
        "target": TARGET_OVERHEAD,
        "met": overhead <= TARGET_OVERHEAD,
        "operations_crossing": crossed,
        "crossing": costs,
    }
    if arguments.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{arguments.calls} call lifecycles of {arguments.fragments} fragments, SQLite FULL,"
            f" median of {arguments.runs} runs each, alternating"
        )
        print("| case | seconds | overhead |")
        print("|---|---:|---:|")
        print(f"| native Trio | {native_time:.3f} |  |")
        print(f"| asyncio facade (Trio guest mode) | {guest_time:.3f} | {overhead:+.1%} |")
        print()
        print(
            f"- the crossing of a no-op operation: {costs['one_at_a_time_us']:.1f} us one at a"
            f" time, {costs['concurrent_us']:.1f} us each from {arguments.calls} tasks at once"
            f" (a native await of it: {costs['native_await_us']:.2f} us)"
        )
        print(
            f"- {crossed:,} operations cross in the workload: at the concurrent cost,"
            f" {crossed * costs['concurrent_us'] / 1e3:.0f} ms of the"
            f" {(guest_time - native_time) * 1e3:.0f} ms difference"
        )
        print(
            f"- target: at most {TARGET_OVERHEAD:.0%} over native Trio:"
            f" {'met' if result['met'] else 'NOT met'}"
        )
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
