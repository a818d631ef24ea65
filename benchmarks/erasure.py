"""What erasing argument bytes from storage costs per call, on SQLite and PostgreSQL: the
library's default retention beside retention off, in the same run.

``python -m benchmarks.erasure [--calls N] [--runs R] [--url URL] [--json]``

One runtime on a fresh log (an SQLite file with ``synchronous=FULL``; a fresh schema of the
PostgreSQL server at ``--url``, default env ``INERT_BENCH_POSTGRESQL`` or the local ``test``
database) starts a turn per ten calls, feeds each call as one batch (opened, four fragments, its
end, its response's end), claims and completes each as soon as it is ready, and settles. Timed
from the first turn until ``settle()`` returns: with retention on, that is once every redaction
is made and its bytes left storage (SQLite: rows rewritten under ``secure_delete``, the
write-ahead log checkpointed and truncated; PostgreSQL: sealed payloads whose keys are destroyed,
the table of keys rewritten), so the difference between the two medians, divided by the calls,
is what erasure costs a call. The runs of the two settings are interleaved; medians of
``--runs``. Nothing is asserted: the figures are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
import trio

from benchmarks.call_actors import (
    TOOL,
    call_key,
    call_lifecycle,
    complete_every_ready_call,
    each,
    every_outcome,
    limits_for,
    sqlite_url,
    start_turns,
)
from inert import (
    CallKey,
    Retention,
    open_runtime,
)

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_CALLS = 300
DEFAULT_RUNS = 3
FEEDERS = 64
KEEP_EVERYTHING = Retention(fragments=False, arguments=False)
SETTINGS = {"retention on": Retention(), "retention off": KEEP_EVERYTHING}


async def _run(url: str, calls: int, retention: Retention) -> float:
    keys = [call_key(index) for index in range(calls)]
    async with (
        open_runtime(
            log=url, create=True, tools=[TOOL], limits=limits_for(calls), retention=retention
        ) as runtime,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(complete_every_ready_call, runtime, "bench")
        start = time.perf_counter()
        await start_turns(runtime, keys)

        async def feed(key: CallKey) -> None:
            await runtime.feed(call_lifecycle(key))

        await each(keys, feed, FEEDERS)
        await every_outcome(runtime, keys)
        await runtime.settle()
        elapsed = time.perf_counter() - start
        outcomes = {row.outcome for key in keys if (row := runtime.ledger.row(key))}
        if outcomes != {"completed"}:
            raise RuntimeError(f"erasure: outcomes {outcomes}, every call completed expected")
        nursery.cancel_scope.cancel()
    return elapsed


def _postgres(server: str) -> tuple[str, Callable[[], None]]:
    schema = f"inert_bench_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(server)
    query = "&".join(filter(None, [parts.query, urlencode({"schema": schema})]))

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")

    return parts._replace(query=query).geturl(), drop


def measure(calls: int, runs: int, server: str) -> list[dict[str, Any]]:
    """The median seconds of each backend and setting, and the cost per call of erasure."""
    results: list[dict[str, Any]] = []
    for backend in ("sqlite", "postgresql"):
        seconds: dict[str, list[float]] = {name: [] for name in SETTINGS}
        for _ in range(runs):
            for name, retention in SETTINGS.items():
                with tempfile.TemporaryDirectory() as directory:
                    if backend == "sqlite":
                        url, cleanup = sqlite_url(Path(directory) / "erasure.db"), None
                    else:
                        url, cleanup = _postgres(server)
                    try:
                        seconds[name].append(trio.run(_run, url, calls, retention))
                    finally:
                        if cleanup is not None:
                            cleanup()
        on = statistics.median(seconds["retention on"])
        off = statistics.median(seconds["retention off"])
        results.append(
            {
                "backend": backend,
                "calls": calls,
                "runs": runs,
                "retention_on_s": on,
                "retention_off_s": off,
                "erasure_ms_per_call": (on - off) / calls * 1000,
                "on_vs_off": on / off,
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--url", default=os.environ.get("INERT_BENCH_POSTGRESQL", DEFAULT_URL))
    parser.add_argument("--json", action="store_true")
    arguments = parser.parse_args()
    results = measure(arguments.calls, arguments.runs, arguments.url)
    if arguments.json:
        for result in results:
            print(json.dumps(result))
        return
    print(
        f"erasure: {arguments.calls:,} calls fed, claimed and completed, settled;"
        f" medians of {arguments.runs}"
    )
    for result in results:
        print(
            f"  {result['backend']:<10}  retention on {result['retention_on_s']:.3f} s,"
            f" off {result['retention_off_s']:.3f} s: {result['on_vs_off']:.2f}x,"
            f" {result['erasure_ms_per_call']:.3f} ms a call"
        )


if __name__ == "__main__":
    main()
