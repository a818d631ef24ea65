"""What running under asyncio costs: the same workload through the native Trio runtime and
through the asyncio facade (Trio as a guest of asyncio's loop), side by side in one run.

Run with ``python -m benchmarks.guest_mode [--calls N] [--fragments N] [--runs R] [--json]``.

The workload of ``benchmarks.tracing_overhead``: whole call lifecycles on a SQLite log
(``synchronous=FULL``), fed by concurrent tasks (Trio tasks natively; asyncio tasks, each
operation crossing into Trio, under asyncio), then claimed and completed. The cases alternate
run by run; the median of each is reported, and the overhead is guest over native minus one.
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


def limits(calls: int) -> CallLimits:
    return CallLimits(max_live_per_turn=calls, max_live_per_tenant=calls * 2)


def conversations(keys: list[CallKey]) -> list[str]:
    return sorted({key.conversation for key in keys})


async def guest(path: Path, calls: int, fragments: int) -> float:
    keys = [call_key(index) for index in range(calls)]
    async with open_asyncio_runtime(
        log=f"sqlite:///{path}", tools=[TOOL], limits=limits(calls)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--fragments", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
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
    result: dict[str, Any] = {
        "arguments": vars(arguments),
        "native_seconds": native_time,
        "guest_seconds": guest_time,
        "overhead": guest_time / native_time - 1,
    }
    if arguments.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{arguments.calls} call lifecycles of {arguments.fragments} fragments, SQLite FULL,"
        f" median of {arguments.runs} runs each, alternating"
    )
    print("| case | seconds | overhead |")
    print("|---|---:|---:|")
    print(f"| native Trio | {native_time:.3f} |  |")
    print(f"| asyncio facade (Trio guest mode) | {guest_time:.3f} | {result['overhead']:+.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
