"""The operator console with 10,000 calls in the ledger: does a page stay responsive? And with
20,000 calls waiting, ready and running, do the controls answer while heavy pages are drawn?

``python -m benchmarks.console [--calls N] [--requests R] [--load-calls N] [--rounds R] [--json]``

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

Then, under load (``--load-calls``, 20,000 by default: half waiting for a person, a quarter
ready, a quarter running), the console served by Hypercorn on a socket and asked from another
process (so that the clients' work is not the server's):

- **controls alone**: ``GET /controls`` (the page the emergency stop starts from), one after
  another: median and 95th percentile, the floor;
- **controls under load**: in each of ``--rounds`` rounds, eight heavy pages asked for at once
  (``/waiting``, its 40th page of ready calls, the ledger filtered by a tenant, the overview,
  twice each), and ``GET /controls`` while they are being drawn: median and 95th percentile,
  and their ratio to the floor; the heavy pages' own median beside.

Before the console drew one page at a time in slices, eight ``/waiting`` of 20,000 calls held
the controls for seconds (each page drawn whole, 9 MB, in the event loop every request shares).

Targets: a page in under ``PAGE_TARGET_MS`` at the 95th percentile, a live update in under
``LIVE_TARGET_MS``, the controls under load in under ``CONTROLS_TARGET_MS`` at the 95th
percentile; a missed target exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from functools import partial
from typing import Any, cast

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import Framework

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
)
from inert.console import Console, ConsoleSettings
from inert.console._view import ConsoleView, RowFilter, Stage
from inert.projections import Projections

PAGE_TARGET_MS = 100.0
LIVE_TARGET_MS = 50.0
CONTROLS_TARGET_MS = 100.0
"""The controls answer within a page's budget however heavy the pages asked for beside."""
CALLS_PER_TURN = 100
TOKEN = "bench-token-0123456789abcdef"
TOKEN_VARIABLE = "INERT_BENCH_CONSOLE_TOKEN"
HEAVY_PAGES = ["/waiting", "/waiting?ready=40", "/?tenant=tenant-7", "/overview"] * 2
"""What eight people ask for at once during an incident, beside the one at the controls."""
ENDED_PER_TURN = 50


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


async def _end_calls(runtime: Runtime, calls: int) -> None:
    """``calls`` calls that end well, ``ENDED_PER_TURN`` a turn, each turn of a conversation
    of its own: those of every other turn wait for a person, the others are ready; then half
    the ready ones are claimed (running)."""
    for turn in range((calls + ENDED_PER_TURN - 1) // ENDED_PER_TURN):
        tenant = f"tenant-{turn % 100}"
        await runtime.start_turn(
            tenant=tenant, conversation=f"c{turn}", turn=f"t{turn}", principal="user:bench"
        )
        tool = "send_email" if turn % 2 else "get_weather"
        events: list[Event] = []
        for call in range(min(ENDED_PER_TURN, calls - turn * ENDED_PER_TURN)):
            key = CallKey(
                tenant=tenant,
                conversation=f"c{turn}",
                turn=f"t{turn}",
                response=f"resp_{turn}",
                item=f"fc_{call}",
                call=f"call_{turn}_{call}",
            )
            events.append(CallOpened(key=key, tool=tool, sequence=0))
            events.append(
                ArgumentsAppended(
                    key=key, data=b'{"city": "Oslo"}', offset=0, first_sequence=1, last_sequence=1
                )
            )
            events.append(CallEnded(key=key, terminal=TerminalRef(sequence=2)))
        events.append(
            ResponseEnded(
                response=key.response_ref,
                reason=ResponseEndReason.COMPLETED,
                terminal=TerminalRef(sequence=3),
            )
        )
        await runtime.feed(events)
    await runtime.settle()
    claimed = 0
    async for ready in runtime.ready_calls():
        await runtime.claim(ready, executor="bench")
        claimed += 1
        if claimed >= calls // 4:
            break
    await runtime.settle()


async def under_load(calls: int, rounds: int) -> dict[str, Any]:
    """The controls page alone and while heavy pages are drawn, asked from another process."""
    tools = [
        ToolDeclaration(name="get_weather"),
        ToolDeclaration(name="send_email", needs_confirmation=True),
    ]
    async with open_runtime(log="memory://", tools=tools, snapshot_every=None) as runtime:
        await _end_calls(runtime, calls)
        settings = ConsoleSettings(tokens={TOKEN: "operator:bench"}, operators=["operator:bench"])
        console = Console(runtime.log, settings)
        config = Config()
        config.bind = ["127.0.0.1:0"]
        config.accesslog = None
        config.errorlog = None
        async with console.running(), trio.open_nursery() as nursery:
            view = console.feed.view
            stages = {
                stage.value: view.count_in(stage)
                for stage in (Stage.WAITING, Stage.READY, Stage.RUNNING)
            }
            binds: list[str] = await nursery.start(
                partial(serve, cast(Framework, console.app), config)
            )
            command = [sys.executable, "-m", "benchmarks.console", "--probe", binds[0]]
            asked = await trio.run_process(
                [*command, "--rounds", str(rounds)],
                capture_stdout=True,
                env={**os.environ, TOKEN_VARIABLE: TOKEN},
            )
            nursery.cancel_scope.cancel()
    figures: dict[str, Any] = json.loads(asked.stdout)
    figures["load_calls"] = calls
    figures["stages"] = stages
    figures["controls_ratio"] = round(
        figures["controls_loaded"]["p95_ms"] / figures["controls_alone"]["p95_ms"], 1
    )
    figures["controls_target_met"] = figures["controls_loaded"]["p95_ms"] < CONTROLS_TARGET_MS
    return figures


async def probe(url: str, rounds: int) -> dict[str, Any]:
    """The clients of ``under_load``, run in a process of their own."""
    headers = {"authorization": f"Bearer {os.environ[TOKEN_VARIABLE]}"}
    limits = httpx.Limits(max_connections=len(HEAVY_PAGES) + 1)
    figures: dict[str, Any] = {"heavy_pages": HEAVY_PAGES}
    async with (
        httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as operator,
        httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as others,
    ):

        async def timed(client: httpx.AsyncClient, path: str, into: list[float]) -> None:
            started = time.perf_counter()
            response = await client.get(path)
            into.append(time.perf_counter() - started)
            assert response.status_code == 200, (path, response.status_code)
            figures.setdefault("bytes", {})[path] = len(response.content)

        warm: list[float] = []
        for path in ["/controls", *HEAVY_PAGES]:
            await timed(others, path, warm)
        alone: list[float] = []
        for _ in range(max(rounds, 20)):
            await timed(operator, "/controls", alone)
        loaded: list[float] = []
        heavy: list[float] = []
        for _ in range(rounds):
            async with trio.open_nursery() as nursery:
                for path in HEAVY_PAGES:
                    nursery.start_soon(timed, others, path, heavy)
                # Asked while they are being drawn, as an operator would, not before them.
                await trio.sleep(0.005)
                await timed(operator, "/controls", loaded)
    figures["controls_alone"] = _percentiles(alone)
    figures["controls_loaded"] = _percentiles(loaded)
    figures["heavy_page"] = _percentiles(heavy)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.console")
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--load-calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--probe", metavar="URL", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.probe:
        print(json.dumps(trio.run(probe, options.probe, options.rounds)))
        return 0
    figures = trio.run(run, options.calls, options.requests)
    figures["under_load"] = loaded = trio.run(under_load, options.load_calls, options.rounds)
    met = (
        figures["page_target_met"] and figures["live_target_met"] and loaded["controls_target_met"]
    )
    if options.json:
        print(json.dumps(figures))
        return 0 if met else 1
    print(f"console with {figures['calls']:,} calls ({figures['events']:,} events)")
    print(
        f"  fold: console view {figures['console_fold_s']} s, projections alone"
        f" {figures['floor_fold_s']} s ({figures['fold_ratio']}x); every ledger row read"
        f" {figures['floor_rows_ms']} ms"
    )
    for name in ("first_page", "middle_page", "filtered", "live_update"):
        shown = figures[name]
        print(f"  {name:<12} median {shown['median_ms']} ms, p95 {shown['p95_ms']} ms")
    stages = ", ".join(f"{count:,} {stage}" for stage, count in loaded["stages"].items())
    print(f"console with {loaded['load_calls']:,} calls ({stages}), served by Hypercorn")
    for name, label in (
        ("controls_alone", "controls alone"),
        ("controls_loaded", "controls while 8 heavy pages are drawn"),
        ("heavy_page", "a heavy page (8 at once)"),
    ):
        shown = loaded[name]
        print(f"  {label:<40} median {shown['median_ms']} ms, p95 {shown['p95_ms']} ms")
    print(f"  controls under load / alone (p95): {loaded['controls_ratio']}x")
    for target, met in (
        (f"page p95 < {PAGE_TARGET_MS:g} ms", figures["page_target_met"]),
        (f"live update p95 < {LIVE_TARGET_MS:g} ms", figures["live_target_met"]),
        (
            f"controls under load p95 < {CONTROLS_TARGET_MS:g} ms",
            loaded["controls_target_met"],
        ),
    ):
        print(f"  target {target}: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
