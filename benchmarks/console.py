"""The operator console with 10,000 calls in the ledger: does a page stay responsive?

``python -m benchmarks.console [--calls N] [--requests R] [--json]``

A runtime on a memory log opens ``--calls`` calls (100 per turn, each with one fragment, all
collecting), and a console follows the same log. Measured, beside the floor of the projections
alone (``Projections`` folding the same log, and ``Ledger.rows()`` reading every row):

- **fold**: the console's view (the projections and its notes of each call) folding the log;
- **page**: ``GET /`` (the first page of 100 rows, the one changed last first), ``GET
  /?page=50`` (a page from the middle) and ``GET /?tenant=...`` (a filter keeping 1% of the
  calls), through the whole ASGI application (authentication, rendering, headers), R requests
  each: median and 95th percentile;
- **live**: a fragment fed to one call, until the console's view has folded it and built the
  server-sent event a page listening gets (the rows changed, as JSON): median and 95th
  percentile.

Targets: a page in under ``PAGE_TARGET_MS`` at the 95th percentile, a live update in under
``LIVE_TARGET_MS``; a missed target exits 1.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import httpx
import trio

from inert import (
    ArgumentsAppended,
    CallKey,
    CallOpened,
    Event,
    Runtime,
    ToolDeclaration,
    open_runtime,
)
from inert.console import Console, ConsoleSettings
from inert.console._view import ConsoleView, RowFilter
from inert.projections import Projections

PAGE_TARGET_MS = 100.0
LIVE_TARGET_MS = 50.0
CALLS_PER_TURN = 100
TOKEN = "bench-token-0123456789abcdef"


def _key(turn: int, call: int) -> CallKey:
    return CallKey(
        tenant=f"tenant-{turn % 100}",
        conversation=f"c{turn}",
        turn=f"t{turn}",
        response=f"resp_{turn}",
        item=f"fc_{call}",
        call=f"call_{turn}_{call}",
    )


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p95_ms": round(ordered[max(int(len(ordered) * 0.95) - 1, 0)] * 1000, 2),
    }


async def _open_calls(runtime: Runtime, calls: int) -> None:
    """Open ``calls`` calls, ``CALLS_PER_TURN`` a turn, each with one fragment."""
    turns = (calls + CALLS_PER_TURN - 1) // CALLS_PER_TURN
    for turn in range(turns):
        await runtime.start_turn(
            tenant=f"tenant-{turn % 100}",
            conversation=f"c{turn}",
            turn=f"t{turn}",
            principal="user:bench",
        )
        events: list[Event] = []
        for call in range(min(CALLS_PER_TURN, calls - turn * CALLS_PER_TURN)):
            key = _key(turn, call)
            events.append(CallOpened(key=key, tool="get_weather", sequence=2 * call))
            events.append(
                ArgumentsAppended(
                    key=key,
                    data=b'{"city": "Os',
                    offset=0,
                    first_sequence=2 * call + 1,
                    last_sequence=2 * call + 1,
                )
            )
        await runtime.feed(events)


async def run(calls: int, requests: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"calls": calls, "requests": requests}
    tools = [ToolDeclaration(name="get_weather")]
    async with open_runtime(log="memory://", tools=tools, snapshot_every=None) as runtime:
        await _open_calls(runtime, calls)
        await runtime.settle()
        log = runtime.log
        records = await log.read(1)
        figures["events"] = len(records)

        started = time.perf_counter()
        floor = Projections()
        for recorded in records:
            floor.apply(recorded)
        rows = floor.ledger.rows()
        figures["floor_fold_s"] = round(time.perf_counter() - started, 3)
        started = time.perf_counter()
        floor.ledger.rows()
        figures["floor_rows_ms"] = round((time.perf_counter() - started) * 1000, 2)
        assert len(rows) == calls, len(rows)

        started = time.perf_counter()
        view = ConsoleView()
        for recorded in records:
            view.apply(recorded)
        figures["console_fold_s"] = round(time.perf_counter() - started, 3)
        figures["fold_ratio"] = round(figures["console_fold_s"] / figures["floor_fold_s"], 2)

        settings = ConsoleSettings(tokens={TOKEN: "operator:bench"}, operators=["operator:bench"])
        console = Console(log, settings)
        transport = httpx.ASGITransport(app=console.app, client=("127.0.0.1", 1))
        async with (
            console.running(),
            httpx.AsyncClient(
                transport=transport,
                base_url="http://console.bench",
                headers={"authorization": f"Bearer {TOKEN}"},
            ) as client,
        ):
            for name, path in [
                ("first_page", "/"),
                ("middle_page", "/?page=50"),
                ("filtered", "/?tenant=tenant-7"),
            ]:
                samples = []
                for _ in range(requests):
                    started = time.perf_counter()
                    response = await client.get(path)
                    samples.append(time.perf_counter() - started)
                    assert response.status_code == 200
                    assert "call_" in response.text
                figures[name] = _percentiles(samples)

            samples = []
            feed = console.feed
            for index in range(requests):
                key = _key(index % (calls // CALLS_PER_TURN), index % CALLS_PER_TURN)
                sequence = feed.view.sequence
                fragment = ArgumentsAppended(
                    key=key,
                    data=b"l",
                    offset=12 + index // calls,
                    first_sequence=10_000 + index,
                    last_sequence=10_000 + index,
                )
                started = time.perf_counter()
                await runtime.feed([fragment])
                await feed.changed_after(sequence)
                changed = feed.view.changed_after(sequence, RowFilter(), limit=100)
                message = json.dumps([call.json(feed.now()) for call in changed])
                samples.append(time.perf_counter() - started)
                assert key.call in message
            figures["live_update"] = _percentiles(samples)
    pages = [figures[name]["p95_ms"] for name in ("first_page", "middle_page", "filtered")]
    figures["page_target_met"] = max(pages) < PAGE_TARGET_MS
    figures["live_target_met"] = figures["live_update"]["p95_ms"] < LIVE_TARGET_MS
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.console")
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    figures = trio.run(run, options.calls, options.requests)
    if options.json:
        print(json.dumps(figures))
    else:
        print(f"console with {figures['calls']:,} calls ({figures['events']:,} events)")
        print(
            f"  fold: console view {figures['console_fold_s']} s, projections alone"
            f" {figures['floor_fold_s']} s ({figures['fold_ratio']}x); every ledger row read"
            f" {figures['floor_rows_ms']} ms"
        )
        for name in ("first_page", "middle_page", "filtered", "live_update"):
            shown = figures[name]
            print(f"  {name:<12} median {shown['median_ms']} ms, p95 {shown['p95_ms']} ms")
        for target, met in (
            (f"page p95 < {PAGE_TARGET_MS:g} ms", figures["page_target_met"]),
            (f"live update p95 < {LIVE_TARGET_MS:g} ms", figures["live_target_met"]),
        ):
            print(f"  target {target}: {'met' if met else 'NOT met'}")
    return 0 if figures["page_target_met"] and figures["live_target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
