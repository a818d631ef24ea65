"""Restart from a snapshot against a replay of the whole log.

``python -m benchmarks.restart [--events N] [--live N] [--runs N] [--json]``

An SQLite log (WAL, synchronous=FULL) of ``--events`` events (1,000,000): copies of a unit a
real runtime recorded (one turn of four calls, claimed and completed, see
``benchmarks.call_actors.record_unit``), each followed by its turn's ``TurnRetired`` as a
runtime with a horizon writes it, then ``--live`` calls (10,000) left ready to claim (copies of
the same turn, not claimed). The runtimes keep every payload (``Retention`` off): a restart
then redacts nothing, and what is measured is the restart alone, from ``open_runtime`` until it
yields, ready to serve:

- **replay**: without a snapshot (``snapshot_every=None``), every event folded;
- **from snapshot**: from the snapshot a first restart wrote (``snapshot_every`` at its default
  unless ``--snapshot-every`` says), nothing left to fold;
- the floor beside it: reading that snapshot alone from the log (``read_snapshot``).

Each restart must find every live call ready, and both reach the same digest. Targets (issue 17):
from the snapshot under 1 s, and at least 20x faster than the replay. Runs interleaved; medians.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import trio

from benchmarks.append_throughput import machine_facts
from benchmarks.call_actors import (
    KEEP_PAYLOADS,
    PAGE,
    TOOL,
    UNIT_CALLS,
    Relabel,
    limits_for,
    record_unit_for,
    sqlite_url,
)
from inert import Event, RecordedEvent, TurnRef, open_runtime
from inert.events import TurnRetired
from inert.log import NewEvent, SQLiteLog
from inert.runtime._snapshot import DEFAULT_SNAPSHOT_EVERY

TARGET_SECONDS = 1.0
TARGET_RATIO = 20.0


def _copy(unit: Sequence[RecordedEvent], copy: int, base: int) -> list[NewEvent]:
    """Copy ``copy`` of the unit, its first event at position ``base + 1``."""
    relabel = Relabel(copy, base)
    events = []
    for recorded in unit:
        template = recorded.event
        if not isinstance(template, Event):
            raise TypeError(f"restart: the unit's {recorded.event_type} was redacted")
        event = relabel.event(template)
        events.append(NewEvent(stream=relabel.stream(recorded.stream, event), event=event))
    return events


def _turn_of(unit: Sequence[RecordedEvent]) -> TurnRef:
    for recorded in unit:
        turn = getattr(recorded.event, "turn", None)
        if isinstance(turn, TurnRef):
            return turn
    raise RuntimeError("restart: the unit starts no turn")


async def build_log(
    path: Path,
    events: int,
    live: int,
    finished: Sequence[RecordedEvent],
    ready: Sequence[RecordedEvent],
) -> int:
    """The log: finished copies, each turn retired, then copies left ready; its head."""
    live_copies = math.ceil(live / UNIT_CALLS)
    finished_copies = max(0, (events - live_copies * len(ready)) // (len(finished) + 1))
    turn = _turn_of(finished)
    async with SQLiteLog.open(path, synchronous="NORMAL") as log:
        batch: list[NewEvent] = []
        base = 0
        for copy in range(finished_copies + live_copies):
            unit = finished if copy < finished_copies else ready
            batch.extend(_copy(unit, copy, base))
            base += len(unit)
            if copy < finished_copies:
                retired = Relabel(copy, 0).identity(turn)
                batch.append(NewEvent(stream=retired.stream, event=TurnRetired(turn=retired)))
                base += 1
            if len(batch) >= PAGE:
                await log.append(batch)
                batch = []
        if batch:
            await log.append(batch)
        head = await log.head()
    if head != base:
        raise RuntimeError(f"restart: the log holds {head} events, {base} were written")
    return head


async def _restart(url: str, snapshot_every: int | None, live: int) -> dict[str, Any]:
    started = time.perf_counter()
    async with open_runtime(
        log=url,
        create=True,
        tools=[TOOL],
        limits=limits_for(live),
        snapshot_every=snapshot_every,
        retention=KEEP_PAYLOADS,
    ) as runtime:
        seconds = time.perf_counter() - started
        ready = len(runtime.projections.queue.ready())
        if ready != live:
            raise RuntimeError(f"restart: {ready} calls ready after the restart, not {live}")
        return {
            "seconds": seconds,
            "restored_from": runtime.restored_from,
            "digest": runtime.digest(),
        }


async def _read_snapshot(path: Path) -> float:
    async with SQLiteLog.open(path) as log:
        started = time.perf_counter()
        snapshot = await log.read_snapshot("")
        seconds = time.perf_counter() - started
    if snapshot is None:
        raise RuntimeError("restart: no snapshot to read")
    return seconds


def measure(events: int, live: int, runs: int, every: int, directory: Path) -> dict[str, Any]:
    path = directory / "restart.db"
    finished = record_unit_for(path)
    ready = record_unit_for(path, finished=False)
    head = trio.run(build_log, path, events, live, finished, ready)
    url = sqlite_url(path)
    first = trio.run(_restart, url, every, live)
    if first["restored_from"] is not None:
        raise RuntimeError("restart: the first restart found a snapshot")
    replays: list[float] = []
    restores: list[float] = []
    reads: list[float] = []
    for _ in range(runs):
        replayed = trio.run(_restart, url, None, live)
        restored = trio.run(_restart, url, every, live)
        if restored["restored_from"] != head:
            raise RuntimeError(f"restart: started from {restored['restored_from']}, not {head}")
        if not replayed["digest"] == restored["digest"] == first["digest"]:
            raise RuntimeError("restart: the restarts reached different digests")
        replays.append(replayed["seconds"])
        restores.append(restored["seconds"])
        reads.append(trio.run(_read_snapshot, path))
    replay, restore = statistics.median(replays), statistics.median(restores)
    return {
        "events": head,
        "live_calls": live,
        "runs": runs,
        "snapshot_every": every,
        "replay_and_write_snapshot_seconds": first["seconds"],
        "replay_seconds": replays,
        "from_snapshot_seconds": restores,
        "read_snapshot_seconds": reads,
        "median_replay_seconds": replay,
        "median_from_snapshot_seconds": restore,
        "median_read_snapshot_seconds": statistics.median(reads),
        "ratio": replay / restore,
        "target": {
            "seconds": TARGET_SECONDS,
            "ratio": TARGET_RATIO,
            "seconds_met": restore < TARGET_SECONDS,
            "ratio_met": replay / restore >= TARGET_RATIO,
        },
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--snapshot-every", type=int, default=DEFAULT_SNAPSHOT_EVERY, help="at most --events"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the log is built")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if min(args.events, args.live, args.runs, args.snapshot_every) < 1:
        parser.error("--events, --live, --runs and --snapshot-every must be at least 1")
    if args.snapshot_every > args.events:
        parser.error("--snapshot-every must be at most --events: the first restart writes one")
    with tempfile.TemporaryDirectory(prefix="inert-bench-", dir=args.dir) as name:
        directory = Path(name)
        result = {
            "machine": machine_facts(directory),
            **measure(args.events, args.live, args.runs, args.snapshot_every, directory),
        }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    target = result["target"]
    print(f"## Restart ({result['events']:,} events, {result['live_calls']:,} live calls)\n")
    print("| restart | median | runs |")
    print("|---|---:|---|")
    for label, key in (
        ("replay of the whole log", "replay_seconds"),
        ("from the snapshot", "from_snapshot_seconds"),
        ("floor: reading the snapshot", "read_snapshot_seconds"),
    ):
        runs = ", ".join(f"{seconds:.3f}" for seconds in result[key])
        print(f"| {label} | {statistics.median(result[key]):.3f} s | {runs} |")
    print(
        f"\nThe first restart replayed and wrote the snapshot in"
        f" {result['replay_and_write_snapshot_seconds']:.2f} s. From the snapshot:"
        f" {result['ratio']:.1f}x faster than the replay (target {TARGET_RATIO:.0f}x:"
        f" {'met' if target['ratio_met'] else '**NOT met**'}), under {TARGET_SECONDS:.0f} s:"
        f" {'met' if target['seconds_met'] else '**NOT met**'}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
