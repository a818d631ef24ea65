"""Memory against history: what a runtime holds after finishing many calls.

``python -m benchmarks.history [--calls N] [--without N] [--json]``

A unit recorded by a real runtime (one turn of four calls, each opened, fed eight fragments,
ended, validated, claimed and completed: see ``benchmarks.call_actors.record_unit``) is copied
with fresh identities, one copy a second by the log's times, and folded as a runtime rebuilds
itself from its log (``CallFold`` and ``Projections``, the state a restarted runtime holds).
With retirement, the log holds what a runtime with a horizon of ``HORIZON_UNITS`` seconds
writes: each turn's ``TurnRetired`` that many copies after the turn finished. Without, the same
copies and no retirement: the fold keeps every call (the ledger's rows still age out).

Measured: the resident size (RSS) and the traced size (tracemalloc) of the process after a
fifth of the calls and after all of them; growth per call finished in between. Target (issue
17): a runtime that has finished 1,000,000 calls holds no more than its live calls and its
horizon, i.e. no growth: at most ``TARGET_GROWTH_BYTES`` per call finished, by both measures.
By default 200,000 calls (about five minutes under tracemalloc); ``--calls 1000000`` runs the
issue's count.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
import tracemalloc
from collections import deque
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from benchmarks.append_throughput import machine_facts
from benchmarks.call_actors import UNIT_CALLS, Relabel, digest_key_of, record_unit_for, rss_bytes
from inert import Event, RecordedEvent, TurnRef
from inert.actors import CallFold
from inert.events import TurnRetired
from inert.projections import Projections

HORIZON_UNITS = 100
"""Copies (seconds of the log's time) between a turn's end and its retirement."""
TARGET_GROWTH_BYTES = 16
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def copy_of(unit: Sequence[RecordedEvent], copy: int, base: int) -> list[RecordedEvent]:
    """Copy ``copy`` of the unit, its first event at position ``base + 1``."""
    relabel = Relabel(copy, base)
    at = T0 + timedelta(seconds=copy)
    events = []
    for index, recorded in enumerate(unit, start=1):
        template = recorded.event
        if not isinstance(template, Event):
            raise TypeError(f"history: the unit's {recorded.event_type} was redacted")
        event = relabel.event(template)
        events.append(
            attrs.evolve(
                recorded,
                position=base + index,
                event_id=f"{copy}-{index}",
                stream=relabel.stream(recorded.stream, event),
                recorded_at=at,
                event=event,
            )
        )
    return events


def retirement(turn: TurnRef, position: int, at: datetime) -> RecordedEvent:
    return RecordedEvent(
        position=position,
        event_id=f"retired-{position}",
        stream=turn.stream,
        version=2,
        recorded_at=at,
        event_type=TurnRetired.TAG,
        schema_version=TurnRetired.SCHEMA_VERSION,
        trace=None,
        event=TurnRetired(turn=turn),
    )


def measure(
    unit: Sequence[RecordedEvent], digest_key: bytes, calls: int, retire: bool
) -> dict[str, Any]:
    """Fold ``calls`` calls; memory after a fifth of them and after all."""
    copies = calls // UNIT_CALLS
    fold = CallFold(live=False, digest_key=digest_key)
    projections = Projections(ledger_horizon=timedelta(seconds=HORIZON_UNITS))
    # The turns not retired yet: the benchmark's own memory must not grow either.
    turns: deque[TurnRef] = deque()
    points: list[dict[str, float]] = []
    position = 0
    gc.collect()
    tracemalloc.start()
    started = time.perf_counter()
    for copy in range(copies):
        events = copy_of(unit, copy, position)
        position += len(events)
        turns.append(events[0].event.turn)  # type: ignore[union-attr]
        if retire and len(turns) > HORIZON_UNITS:
            position += 1
            events.append(retirement(turns.popleft(), position, events[-1].recorded_at))
        for recorded in events:
            fold.apply(recorded)
            projections.apply(recorded)
        if copy + 1 in (copies // 5, copies):
            gc.collect()
            points.append(
                {
                    "calls": (copy + 1) * UNIT_CALLS,
                    "rss": rss_bytes(),
                    "traced": tracemalloc.get_traced_memory()[0],
                }
            )
    elapsed = time.perf_counter() - started
    tracemalloc.stop()
    first, last = points
    finished = last["calls"] - first["calls"]
    return {
        "calls": calls,
        "retire": retire,
        "events": position,
        "seconds": elapsed,
        "calls_held_by_fold": len(fold.records),
        "ledger_rows": len(projections.ledger.rows()),
        "points": points,
        "rss_growth_per_call": (last["rss"] - first["rss"]) / finished,
        "traced_growth_per_call": (last["traced"] - first["traced"]) / finished,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="calls with retirement")
    parser.add_argument("--without", type=int, default=40_000, help="calls without it")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "unit.db"
        unit = record_unit_for(path)
        digest_key = digest_key_of(path)
    without = measure(unit, digest_key, args.without, retire=False)
    retired = measure(unit, digest_key, args.calls, retire=True)
    met = all(
        retired[measure_name] <= TARGET_GROWTH_BYTES
        for measure_name in ("rss_growth_per_call", "traced_growth_per_call")
    )
    document = {
        "machine": machine_facts(Path.cwd()),
        "horizon_calls": HORIZON_UNITS * UNIT_CALLS,
        "without_retirement": without,
        "with_retirement": retired,
        "target": {"growth_bytes_per_call": TARGET_GROWTH_BYTES, "met": met},
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(f"## Memory against history ({retired['calls']:,} calls finished)\n")
    print("| log | calls | held by the fold | ledger rows | RSS growth/call | traced growth/call |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, result in (("without retirement", without), ("with retirement", retired)):
        print(
            f"| {name} | {result['calls']:,} | {result['calls_held_by_fold']:,} |"
            f" {result['ledger_rows']:,} | {result['rss_growth_per_call']:,.1f} B |"
            f" {result['traced_growth_per_call']:,.1f} B |"
        )
    print(
        f"\nHorizon: {HORIZON_UNITS * UNIT_CALLS:,} calls. Target: at most {TARGET_GROWTH_BYTES}"
        f" bytes per call finished after the first fifth: {'met' if met else '**NOT met**'}."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
