"""The call actors end to end: feed -> log -> router -> actors -> projections, beside baselines.

Run with ``python -m benchmarks.call_actors [--runs R] [--large-runs R] [--fragments N]
[--latency-calls N] [--memory-calls N] [--traced-calls N] [--events N] [--case NAME ...] [--json]
[--dir DIR]``.

Every case is measured beside its baseline in the same run. Timed cases are repeated ``--runs``
times (the 10,000-call cases of case 1 ``--large-runs`` times) with the runs of the cases
interleaved, and the median is reported; every run writes to a fresh SQLite file (WAL,
``synchronous=FULL`` unless a case says otherwise) in a temporary directory. Calls are spread
over turns of ten calls (each turn in its own conversation), each call in its own provider
response (so that each call has its own ingress stream and feeder), on one tenant;
``CallLimits`` are raised so that no limit fails a call. A case that cannot complete raises, and
the run exits non-zero; a stated target missed is reported (``NOT met``, and named again on the
last line and in ``targets_missed``), and the run still exits 0.

1. ``fragments``: end-to-end fragments/s at 1, 100 and 10,000 concurrent calls. Each call is its
   own Trio task that feeds its ``ArgumentsAppended`` (32 bytes each at their offsets, made
   before the clock starts as the floor's rows are) with one ``runtime.feed([...])`` per
   fragment, or eight per ``feed`` in the coalescing variant. The calls are opened before the
   clock starts; timed from the first feed until ``settle()`` has returned (every fragment in
   the log and folded), and the ledger is then checked to have counted every fragment. One
   call gets a tenth of ``--fragments`` (it pays one commit per feed), 100 calls share
   ``--fragments``, and 10,000 calls get eight each. Baselines: a plain dict mapping each
   ``CallKey`` to a list of bytes, fed the same (key, bytes) deltas; and, at 100 calls, the
   runtime on a ``memory://`` log (no disk: the Trio side alone) and a floor: Python's
   ``sqlite3`` inserting one prebuilt row per delta (the shape of an event row: position, event
   id, stream id, version, time, type and the fragment as payload, no index but the primary
   key) into a fresh file, in transactions of 1,024 rows. At 100 and 10,000 calls, also the
   runtime leaving the garbage collector alone (``collector=None``).
2. ``latency``: at 1,000 concurrent calls, each opened and fed its fragments and end event; then
   each call's response ends (one response per call), and the time from the ``ResponseEnded``
   feed until the key is in ``runtime.projections.queue.ready()`` is taken (a subclass of
   ``Projections`` notes the moment after each event it applies). Burst: all 1,000 responses end
   at once; one at a time: each ends after the previous call is ready. Beside: the same on a
   ``memory://`` log (the Trio side alone), and the log alone doing the two commits the path
   needed before rules 7 (``ResponseEnded``, then ``CallValidated``) per call, at the same
   concurrency; and the log alone doing the one commit the path needs now that a call is
   validated at its own end (``ResponseEnded``). The target is stated against the two.
3. ``memory``: ``--memory-calls`` calls (100,000 by default, the target's count) opened, each
   with two small fragments, on a SQLite log with ``synchronous=NORMAL`` and the runtime's
   default settings (snapshots included: 100,000 calls make three). Memory per live collecting
   call by RSS from ``/proc/self/status`` once ``settle()`` has returned (the last snapshot
   written; the process's peak RSS, reached while one was taken and written, is reported
   beside), and, where the bytes are, by tracemalloc (current traced size after minus before,
   over ``--traced-calls`` calls, 10,000 by default: tracing slows every allocation), each in
   its own fresh process (tracemalloc's own bookkeeping would inflate the RSS; one probe alone:
   ``--probe-memory inert|naive [--probe-traced] [--probe-without-snapshots]`` prints its
   measurement as JSON, the last with ``snapshot_every=None``). Per call, RSS
   grows with the count (larger tables, caches past their bounds, snapshots of more calls):
   measured at 10,000 calls it understates the target's figure. Baseline: the naive dict of
   lists holding the same fragments. Beside it, once the memory is measured: how long the
   runtime's capture of a snapshot of all the calls takes (it holds the runtime meanwhile), and
   the size of the last snapshot it wrote.
4. ``replay``: a log of ``--events`` events built from a unit recorded by a real runtime (a turn,
   four calls in one response with eight fragments each, their end events, the response's end,
   the actors' decisions, a claim and a completion per call; retention off, so that every
   payload is kept to be copied), copied with fresh identities and appended in batches of
   4,096. Timed: reading it page by page (``log.read(position, limit=4096)``) and folding every
   event through a ``CallFold(live=False)`` and a ``Projections``, as ``inert replay`` does
   (under the collector thresholds a runtime sets, as it does too); also reading and decoding
   alone. Baseline: eventsourcing's SQLite application recorder
   holding the same payloads, read back with ``select_notifications`` pages of 4,096 and each
   payload decoded with msgpack.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar, cast

import attrs
import msgpack
import trio
from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from benchmarks.append_throughput import _remove_database, machine_facts
from inert import (
    DEFAULT_LIMITS,
    ArgumentLimits,
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    ClaimRefused,
    CollectorSettings,
    Event,
    PartitionedRuntime,
    Phase,
    ReadyCall,
    RecordedEvent,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    Retention,
    Runtime,
    TerminalRef,
    ToolDeclaration,
    TurnRef,
    open_log,
    open_runtime,
)
from inert.actors import CallFold
from inert.actors._call import DIGEST_KEY
from inert.events import CallCollecting, CallValidated
from inert.log import NewEvent, SQLiteLog, new_event_id
from inert.projections import Projections
from inert.runtime._collector import thresholds_of
from inert.runtime._snapshot import DEFAULT_SNAPSHOT_EVERY, capture

ROOT = Path(__file__).resolve().parent.parent
CASES = ("fragments", "latency", "memory", "replay")

DEFAULT_RUNS = 3
DEFAULT_FRAGMENTS = 20_000
DEFAULT_LATENCY_CALLS = 1_000
DEFAULT_MEMORY_CALLS = 100_000
DEFAULT_TRACED_CALLS = 10_000
DEFAULT_EVENTS = 100_000

TENANT = "bench"
PRINCIPAL = "user:bench"
TOOL = ToolDeclaration(
    name="web_search",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "units": {"enum": ["metric", "imperial"]},
            "days": {"type": "integer", "minimum": 1},
        },
        "additionalProperties": False,
    },
)
CALLS_PER_TURN = 10
FRAGMENT = b'{"query": "weather in Lisbon", "'
CONCURRENCY = (1, 100, 10_000)
LARGE = 10_000
CEILING_CALLS = 100
DEFAULT_LARGE_RUNS = 1
COALESCED = 8
FLOOR_BATCH = 1024
SINGLE_CALL_FRACTION = 10
SETUP_WORKERS = 256
IDLE_TIMEOUT = timedelta(hours=1)
PAGE = 4096

RUNTIME_COLLECTOR = CollectorSettings()
"""The runtime's own collector settings (its default)."""

TARGET_FRAGMENTS_PER_SECOND = 100_000.0
TARGET_FRAGMENTS_VS_FLOOR = 1.0
TARGET_P99_SECONDS = 0.005
TARGET_MEMORY_BYTES = 200_000_000
TARGET_MEMORY_CALLS = 100_000
TARGET_REPLAY_RATE = 300_000.0
TARGET_REPLAY_VS_EVENTSOURCING = 3.0
TARGET_BURST_P99_VS_LOG_ONLY = 1.5

T = TypeVar("T")


# --- common ----------------------------------------------------------------------------------


def call_key(index: int) -> CallKey:
    """Call ``index``: ten calls to a turn, each turn its own conversation, each call its own
    provider response; providers reuse ``call_0``."""
    return CallKey(
        tenant=TENANT,
        conversation=f"conversation-{index // CALLS_PER_TURN}",
        turn="turn-1",
        response=f"response-{index}",
        item=f"item-{index}",
        call="call_0",
    )


def limits_for(calls: int, *, fragments_per_call: int = 1, size: int = 0) -> CallLimits:
    """The default limits, raised so that none of them fails or times out a call."""
    return CallLimits(
        arguments=ArgumentLimits(max_bytes=max(DEFAULT_LIMITS.max_bytes, size + 1024)),
        max_fragments=max(DEFAULT_LIMITS.max_fragments, fragments_per_call),
        max_live_per_turn=max(DEFAULT_LIMITS.max_live_per_turn, CALLS_PER_TURN),
        max_live_per_tenant=max(DEFAULT_LIMITS.max_live_per_tenant, calls),
        # Opening 100,000 calls takes longer than the default minute of idleness.
        idle_timeout=max(DEFAULT_LIMITS.idle_timeout, IDLE_TIMEOUT),
    )


async def each(items: Sequence[T], work: Callable[[T], Awaitable[object]], workers: int) -> None:
    """Run ``work`` on every item, from at most ``workers`` tasks."""

    async def worker(start: int) -> None:
        for item in items[start::workers]:
            await work(item)

    async with trio.open_nursery() as nursery:
        for start in range(min(workers, len(items))):
            nursery.start_soon(worker, start)


async def start_turns(runtime: Runtime, keys: Sequence[CallKey]) -> None:
    turns = list(dict.fromkeys(key.turn_ref for key in keys))

    async def start(turn: TurnRef) -> None:
        await runtime.start_turn(
            tenant=turn.tenant,
            conversation=turn.conversation,
            turn=turn.turn,
            principal=PRINCIPAL,
        )

    await each(turns, start, SETUP_WORKERS)


def check_phases(runtime: Runtime, keys: Sequence[CallKey], phase: Phase, case: str) -> None:
    wrong = [key for key in keys if runtime.phase(key) is not phase]
    if wrong:
        raise RuntimeError(
            f"{case}: {len(wrong)} of {len(keys)} calls are not {phase.value}"
            f" (the first is {runtime.phase(wrong[0]).value})"
        )


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def sqlite_url(path: Path, *, synchronous: str = "FULL") -> str:
    return f"sqlite:///{path}?synchronous={synchronous}"


@dataclass
class Timed:
    """A case timed once per run: ``items`` per run, the seconds of each run."""

    key: str
    label: str
    items: int
    run: Callable[[Path], float]
    most_runs: int | None = None
    """Take part in at most this many of the runs (the slowest cases)."""
    seconds: list[float] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [self.items / seconds for seconds in self.seconds]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)


def run_interleaved(cases: Sequence[Timed], runs: int, directory: Path, title: str) -> float:
    """Every case once per run, in order; the whole time taken."""
    started = time.perf_counter()
    for run in range(runs):
        for case in cases:
            if case.most_runs is not None and run >= case.most_runs:
                continue
            path = directory / f"{case.key}-{run}.db"
            # What an earlier case left for the collector is not this case's to pay for.
            gc.collect()
            try:
                case.seconds.append(case.run(path))
            finally:
                _remove_database(path)
            print(
                f"{title} run {run + 1}/{runs} {case.label}: {case.rates[-1]:,.0f}/s",
                file=sys.stderr,
            )
    return time.perf_counter() - started


def _calls(count: int) -> str:
    return f"{count:,} call" + ("" if count == 1 else "s")


def fmt(value: float) -> str:
    return f"{value:,.0f}"


def verdict(met: bool) -> str:
    return "met" if met else "NOT met"


def missed_targets(document: dict[str, Any]) -> list[str]:
    """The stated targets a run missed, named by their keys in the JSON: a miss is reported, not
    a failure (a case that cannot complete raises, and the run exits non-zero)."""
    missed: list[str] = []

    def walk(prefix: str, target: dict[str, Any]) -> None:
        for name, value in target.items():
            if isinstance(value, dict):
                walk(f"{prefix}.{name}", value)
            elif value is False and "met" in name.split("_"):
                missed.append(f"{prefix}.{name}")

    for case in CASES:
        if case in document:
            walk(f"{case}.target", document[case]["target"])
    return missed


# --- 1. fragments end to end -----------------------------------------------------------------


def fragments_per_call(calls: int, fragments: int) -> int:
    """One call pays one commit per feed: it gets a tenth of the fragments; every call gets at
    least eight, so that the coalescing variant feeds eight at a time."""
    if calls == 1:
        return max(COALESCED, fragments // SINGLE_CALL_FRACTION)
    return max(COALESCED, fragments // calls)


async def _open_collecting(runtime: Runtime, keys: Sequence[CallKey]) -> None:
    await start_turns(runtime, keys)

    async def open_call(key: CallKey) -> None:
        await runtime.feed([CallOpened(key=key, tool=TOOL.name, sequence=0)])

    await each(keys, open_call, SETUP_WORKERS)
    await runtime.settle()


async def _fragments_end_to_end(
    url: str, calls: int, per_call: int, per_feed: int, collector: CollectorSettings | None
) -> float:
    keys = [call_key(index) for index in range(calls)]
    limits = limits_for(calls, fragments_per_call=per_call, size=per_call * len(FRAGMENT))
    async with open_runtime(
        log=url, create=True, tools=[TOOL], limits=limits, collector=collector
    ) as runtime:
        await _open_collecting(runtime, keys)
        check_phases(runtime, keys, Phase.COLLECTING, "fragments")

        # Each call's feeds are made before the clock starts, as the floor's rows are: what is
        # timed is taking the deltas in, not making them (benchmarks/adapters.py times that).
        feeds = {key: _feeds_of(key, per_call, per_feed) for key in keys}

        async def caller(key: CallKey) -> None:
            for events in feeds[key]:
                await runtime.feed(events)

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for key in keys:
                nursery.start_soon(caller, key)
        await runtime.settle()
        elapsed = time.perf_counter() - start
        counted = 0
        for key in keys:
            row = runtime.ledger.row(key)
            if row is None or row.state != "collecting" or row.fragments != per_call:
                raise RuntimeError(f"fragments: the ledger row of {key.stream} is {row}")
            counted += row.fragments
        if counted != calls * per_call:
            raise RuntimeError(f"fragments: {counted} counted, {calls * per_call} fed")
    return elapsed


def _feeds_of(key: CallKey, per_call: int, per_feed: int) -> list[list[Event]]:
    """A call's ``per_call`` deltas at their offsets, ``per_feed`` to a feed."""
    deltas: list[Event] = [
        ArgumentsAppended(
            key=key,
            data=FRAGMENT,
            offset=(number - 1) * len(FRAGMENT),
            first_sequence=number,
            last_sequence=number,
        )
        for number in range(1, per_call + 1)
    ]
    return [deltas[start : start + per_feed] for start in range(0, per_call, per_feed)]


def fragments_case(
    calls: int,
    per_call: int,
    per_feed: int,
    *,
    memory: bool = False,
    collector: CollectorSettings | None = RUNTIME_COLLECTOR,
) -> Callable[[Path], float]:
    def run(path: Path) -> float:
        url = "memory://" if memory else sqlite_url(path)
        return trio.run(_fragments_end_to_end, url, calls, per_call, per_feed, collector)

    return run


def naive_case(calls: int, per_call: int) -> Callable[[Path], float]:
    """A dict of lists fed the same deltas, round robin over the calls (as concurrent streams
    arrive); repeated until it has run for a measurable time, the time of one pass returned."""
    keys = [call_key(index) for index in range(calls)]
    deltas = [(key, FRAGMENT) for _ in range(per_call) for key in keys]

    def run(_: Path) -> float:
        passes = 0
        start = time.perf_counter()
        while True:
            accumulated: dict[CallKey, list[bytes]] = {}
            for key, data in deltas:
                accumulated.setdefault(key, []).append(data)
            passes += 1
            elapsed = time.perf_counter() - start
            if elapsed >= 0.2:
                break
        if sum(len(parts) for parts in accumulated.values()) != len(deltas):
            raise RuntimeError("naive: fragments lost")
        return elapsed / passes

    return run


def sqlite_floor_case(calls: int, per_call: int) -> Callable[[Path], float]:
    """The least a durable log of the deltas costs: sqlite3 inserting one row per delta, round
    robin over the calls, in transactions of 1,024 rows; the rows are built before the clock."""

    def run(path: Path) -> float:
        recorded_at = time.time_ns() // 1000
        rows = [
            (
                number * calls + call + 1,
                new_event_id(),
                call + 1,
                number + 1,
                recorded_at,
                ArgumentsAppended.TAG,
                FRAGMENT,
            )
            for number in range(per_call)
            for call in range(calls)
        ]
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = FULL")
            connection.execute(
                "CREATE TABLE events (position INTEGER PRIMARY KEY, event_id TEXT NOT NULL,"
                " stream_id INTEGER NOT NULL, version INTEGER NOT NULL, recorded_at INTEGER"
                " NOT NULL, event_type TEXT NOT NULL, payload BLOB NOT NULL)"
            )
            start = time.perf_counter()
            for offset in range(0, len(rows), FLOOR_BATCH):
                connection.execute("BEGIN IMMEDIATE")
                connection.executemany(
                    "INSERT INTO events VALUES (?,?,?,?,?,?,?)", rows[offset : offset + FLOOR_BATCH]
                )
                connection.execute("COMMIT")
            elapsed = time.perf_counter() - start
            (written,) = connection.execute("SELECT count(*) FROM events").fetchone()
        finally:
            connection.close()
        if written != len(rows):
            raise RuntimeError(f"sqlite3 floor: {written} rows stored, {len(rows)} inserted")
        return elapsed

    return run


def build_fragment_cases(fragments: int, large_runs: int) -> list[Timed]:
    cases: list[Timed] = []
    for calls in CONCURRENCY:
        per_call = fragments_per_call(calls, fragments)
        total = calls * per_call
        most_runs = large_runs if calls >= LARGE else None
        cases.append(
            Timed(
                f"inert_{calls}_single",
                f"inert, {_calls(calls)}, 1 fragment per feed",
                total,
                fragments_case(calls, per_call, 1),
                most_runs,
            )
        )
        cases.append(
            Timed(
                f"inert_{calls}_coalesced",
                f"inert, {_calls(calls)}, {COALESCED} fragments per feed",
                total,
                fragments_case(calls, per_call, COALESCED),
                most_runs,
            )
        )
        if calls >= CEILING_CALLS:
            cases.append(
                Timed(
                    f"inert_{calls}_collector_untouched",
                    f"inert, {_calls(calls)}, 1 fragment per feed, collector=None",
                    total,
                    fragments_case(calls, per_call, 1, collector=None),
                    most_runs,
                )
            )
        if calls == CEILING_CALLS:
            cases.append(
                Timed(
                    f"inert_{calls}_memory",
                    f"inert, {_calls(calls)}, 1 fragment per feed, memory:// log",
                    total,
                    fragments_case(calls, per_call, 1, memory=True),
                    most_runs,
                )
            )
            cases.append(
                Timed(
                    f"sqlite3_floor_{calls}",
                    f"sqlite3 floor, 1 row per fragment, {FLOOR_BATCH:,} per transaction",
                    total,
                    sqlite_floor_case(calls, per_call),
                    most_runs,
                )
            )
        cases.append(
            Timed(
                f"naive_{calls}",
                f"naive dict of lists, {_calls(calls)}",
                total,
                naive_case(calls, per_call),
                most_runs,
            )
        )
    return cases


def fragments_summary(cases: Sequence[Timed]) -> dict[str, Any]:
    rate = {case.key: case.median_rate for case in cases}
    summary: dict[str, Any] = {"ratios": {}}
    for calls in CONCURRENCY:
        naive = rate[f"naive_{calls}"]
        summary["ratios"][str(calls)] = {
            "single_vs_naive": rate[f"inert_{calls}_single"] / naive,
            "coalesced_vs_naive": rate[f"inert_{calls}_coalesced"] / naive,
            "coalesced_vs_single": rate[f"inert_{calls}_coalesced"] / rate[f"inert_{calls}_single"],
        }
    summary["sqlite_vs_memory_at_100"] = rate["inert_100_single"] / rate["inert_100_memory"]
    summary["collector_settings"] = {
        str(calls): rate[f"inert_{calls}_single"] / rate[f"inert_{calls}_collector_untouched"]
        for calls in CONCURRENCY
        if calls >= CEILING_CALLS
    }
    floor = rate[f"sqlite3_floor_{CEILING_CALLS}"]
    summary["sqlite3_floor_at_100"] = {
        "rows_per_second": floor,
        "single_vs_floor": rate["inert_100_single"] / floor,
    }
    at_100 = rate["inert_100_single"]
    summary["target"] = {
        "value": at_100,
        "target": TARGET_FRAGMENTS_PER_SECOND,
        "met": at_100 >= TARGET_FRAGMENTS_PER_SECOND,
        "coalesced_value": rate["inert_100_coalesced"],
        "coalesced_met": rate["inert_100_coalesced"] >= TARGET_FRAGMENTS_PER_SECOND,
        "vs_floor": at_100 / floor,
        "vs_floor_target": TARGET_FRAGMENTS_VS_FLOOR,
        "vs_floor_met": at_100 / floor >= TARGET_FRAGMENTS_VS_FLOOR,
    }
    return summary


def fragments_report(cases: Sequence[Timed], summary: dict[str, Any], runs: int) -> list[str]:
    lines = [
        "1. Fragments end to end (feed -> log -> actors -> ledger), median of the runs listed"
        f" ({runs} at most)",
        "",
    ]
    width = max(len(case.label) for case in cases)
    lines.append(f"{'case':<{width}}  {'fragments':>9}  {'fragments/s':>11}  runs (fragments/s)")
    lines.append("-" * (width + 2 + 9 + 2 + 11 + 2 + 18))
    for case in cases:
        per_run = " / ".join(fmt(rate) for rate in case.rates)
        lines.append(
            f"{case.label:<{width}}  {case.items:>9,}  {fmt(case.median_rate):>11}  {per_run}"
        )
    lines.append("")
    lines.append("Ratios (medians):")
    for calls, entry in summary["ratios"].items():
        lines.append(
            f"  {_calls(int(calls)):>12}: 1 per feed / naive {entry['single_vs_naive']:.4f}x,"
            f" {COALESCED} per feed / naive {entry['coalesced_vs_naive']:.4f}x,"
            f" {COALESCED} per feed / 1 per feed {entry['coalesced_vs_single']:.2f}x"
        )
    lines.append(
        "     100 calls: SQLite / memory:// (the Trio side alone), 1 per feed"
        f" {summary['sqlite_vs_memory_at_100']:.2f}x"
    )
    for calls, ratio in summary["collector_settings"].items():
        lines.append(
            f"  {_calls(int(calls)):>12}: the runtime's collector settings / collector=None,"
            f" 1 per feed {ratio:.2f}x"
        )
    floor = summary["sqlite3_floor_at_100"]
    lines.append(
        f"     100 calls: 1 per feed / sqlite3 floor ({fmt(floor['rows_per_second'])} rows/s)"
        f" {floor['single_vs_floor']:.4f}x"
    )
    target = summary["target"]
    lines.append(
        f"  target >= {fmt(target['target'])} fragments/s at 100 calls: 1 per feed"
        f" {fmt(target['value'])} ({verdict(target['met'])}); {COALESCED} per feed"
        f" {fmt(target['coalesced_value'])} ({verdict(target['coalesced_met'])})"
    )
    lines.append(
        f"  target >= {target['vs_floor_target']:.1f}x the sqlite3 floor at 100 calls, 1 per feed:"
        f" {target['vs_floor']:.2f}x ({verdict(target['vs_floor_met'])})"
    )
    return lines


# --- 2. latency from the terminal event to a ready call --------------------------------------


class WatchedProjections(Projections):
    """The runtime's projections, noting when each call key is first in the dispatch queue."""

    __slots__ = ("call_of_response", "ready_at", "wake")

    def __init__(self, keys: Sequence[CallKey]) -> None:
        super().__init__()
        # One call per response here: a call validated at its own end is ready at its
        # response's end, an event that names the response only.
        self.call_of_response = {key.response_ref: key for key in keys}
        self.ready_at: dict[CallKey, float] = {}
        self.wake = trio.Event()

    def apply(self, recorded: RecordedEvent) -> None:
        super().apply(recorded)
        event = recorded.event
        key = getattr(event, "key", None)
        if isinstance(event, ResponseEnded):
            key = self.call_of_response.get(event.response)
        if isinstance(key, CallKey) and key not in self.ready_at and key in self.queue:
            self.ready_at[key] = time.perf_counter()
            self.wake.set()


LATENCY_PARTS = (b'{"query": "', b"weather in ", b"Lisbon", b'"}')


def _latency_setup_events(key: CallKey) -> list[Event]:
    events: list[Event] = [CallOpened(key=key, tool=TOOL.name, sequence=0)]
    offset = 0
    for number, part in enumerate(LATENCY_PARTS, start=1):
        events.append(
            ArgumentsAppended(
                key=key, data=part, offset=offset, first_sequence=number, last_sequence=number
            )
        )
        offset += len(part)
    events.append(CallEnded(key=key, terminal=TerminalRef(sequence=len(LATENCY_PARTS) + 1)))
    return events


def _response_ended(key: CallKey) -> ResponseEnded:
    return ResponseEnded(
        response=key.response_ref,
        reason=ResponseEndReason.COMPLETED,
        terminal=TerminalRef(sequence=len(LATENCY_PARTS) + 2),
    )


async def complete_every_ready_call(runtime: Runtime | PartitionedRuntime, executor: str) -> None:
    """Claim every call the runtime offers as it becomes ready, and complete each, each in a
    task of its own; a claim refused (another executor's won) is left. Runs until cancelled."""
    async with trio.open_nursery() as nursery:

        async def complete(call: ReadyCall) -> None:
            try:
                dispatch = await runtime.claim(call, executor=executor)
            except ClaimRefused:
                return
            await runtime.complete(dispatch)

        async for call in runtime.ready_calls():
            nursery.start_soon(complete, call)


async def every_outcome(runtime: Runtime, keys: Sequence[CallKey]) -> None:
    """Until each call of ``keys`` has its outcome in the runtime's ledger. Calls finish about
    in the order they were fed: waiting on the first unfinished one looks at each call about
    once, where checking them all at every change would not."""
    waiting = iter(keys)
    first = next(waiting, None)
    async for _ in runtime.changes():
        while first is not None and (row := runtime.ledger.row(first)) and row.outcome:
            first = next(waiting, None)
        if first is None:
            return


def call_lifecycle(key: CallKey) -> list[Event]:
    """A whole call in one batch: opened, four fragments, its end and its response's end."""
    return [*_latency_setup_events(key), _response_ended(key)]


async def _runtime_latencies(url: str, calls: int, burst: bool) -> list[float]:
    keys = [call_key(index) for index in range(calls)]
    async with open_runtime(
        log=url, create=True, tools=[TOOL], limits=limits_for(calls)
    ) as runtime:
        if runtime.projections.position != 0:
            raise RuntimeError("latency: the log was not empty")
        watched = runtime.projections = WatchedProjections(keys)
        await start_turns(runtime, keys)

        async def set_up(key: CallKey) -> None:
            await runtime.feed(_latency_setup_events(key))

        await each(keys, set_up, SETUP_WORKERS)
        await runtime.settle()
        # Validated at their own end (rules 7), waiting for their responses.
        check_phases(runtime, keys, Phase.VALIDATED, "latency")
        waiting = [key for key in keys if key in watched.queue]
        if waiting:
            raise RuntimeError(f"latency: {len(waiting)} calls ready before their response ended")
        sent: dict[CallKey, float] = {}

        async def end(key: CallKey) -> None:
            sent[key] = time.perf_counter()
            await runtime.feed([_response_ended(key)])

        if burst:
            async with trio.open_nursery() as nursery:
                for key in keys:
                    nursery.start_soon(end, key)
            while len(watched.ready_at) < calls:
                watched.wake = trio.Event()
                await watched.wake.wait()
        else:
            for key in keys:
                await end(key)
                while key not in watched.ready_at:
                    watched.wake = trio.Event()
                    await watched.wake.wait()
        await runtime.settle()
        check_phases(runtime, keys, Phase.VALIDATED, "latency")
        return [watched.ready_at[key] - sent[key] for key in keys]


async def _log_latencies(path: Path, calls: int, burst: bool, appends: int = 2) -> list[float]:
    keys = [call_key(index) for index in range(calls)]
    async with SQLiteLog.open(path, synchronous="FULL") as log:
        # The streams exist already, as they do for the runtime's calls.
        for start in range(0, calls, PAGE // 2):
            batch: list[NewEvent] = []
            for key in keys[start : start + PAGE // 2]:
                batch.append(
                    NewEvent(
                        stream=key.response_ref.stream,
                        event=CallOpened(key=key, tool=TOOL.name, sequence=0),
                    )
                )
                batch.append(
                    NewEvent(stream=key.stream, event=CallCollecting(key=key, cause=1, tool="x"))
                )
            await log.append(batch)
        latencies: dict[CallKey, float] = {}

        async def path_of_one(key: CallKey) -> None:
            start = time.perf_counter()
            await log.append([NewEvent(stream=key.response_ref.stream, event=_response_ended(key))])
            if appends == 1:
                latencies[key] = time.perf_counter() - start
                return
            validated = CallValidated(
                key=key,
                cause=1,
                tool=TOOL.name,
                tool_digest=TOOL.digest,
                arguments=b'{"query":"weather in Lisbon"}',
                arguments_digest="sha256:" + "0" * 64,
                needs_confirmation=False,
            )
            await log.append([NewEvent(stream=key.stream, event=validated)])
            latencies[key] = time.perf_counter() - start

        if burst:
            async with trio.open_nursery() as nursery:
                for key in keys:
                    nursery.start_soon(path_of_one, key)
        else:
            for key in keys:
                await path_of_one(key)
        return [latencies[key] for key in keys]


@dataclass
class LatencyCase:
    key: str
    label: str
    run: Callable[[Path], list[float]]
    samples: list[list[float]] = field(default_factory=list)

    def _median_of(self, fraction: float) -> float:
        return statistics.median(percentile(run, fraction) for run in self.samples)

    @property
    def p50(self) -> float:
        return self._median_of(0.50)

    @property
    def p99(self) -> float:
        return self._median_of(0.99)

    @property
    def worst(self) -> float:
        return statistics.median(max(run) for run in self.samples)


def _latency_run(calls: int, *, burst: bool, log: str) -> Callable[[Path], list[float]]:
    def run(path: Path) -> list[float]:
        if log == "sqlite":
            return trio.run(_runtime_latencies, sqlite_url(path), calls, burst)
        if log == "memory":
            return trio.run(_runtime_latencies, "memory://", calls, burst)
        if log == "alone-1":
            return trio.run(_log_latencies, path, calls, burst, 1)
        return trio.run(_log_latencies, path, calls, burst)

    return run


def build_latency_cases(calls: int) -> list[LatencyCase]:
    cases: list[LatencyCase] = []
    for burst, name, mode in ((True, "burst", "burst"), (False, "sequential", "one at a time")):
        cases += [
            LatencyCase(
                f"inert_sqlite_{name}",
                f"inert, SQLite FULL, {mode}",
                _latency_run(calls, burst=burst, log="sqlite"),
            ),
            LatencyCase(
                f"inert_memory_{name}",
                f"inert, memory://, {mode}",
                _latency_run(calls, burst=burst, log="memory"),
            ),
            LatencyCase(
                f"log_only_{name}",
                f"log alone, 2 appends, SQLite FULL, {mode}",
                _latency_run(calls, burst=burst, log="alone"),
            ),
            LatencyCase(
                f"log_one_append_{name}",
                f"log alone, 1 append, SQLite FULL, {mode}",
                _latency_run(calls, burst=burst, log="alone-1"),
            ),
        ]
    return cases


def run_latency_cases(cases: Sequence[LatencyCase], runs: int, directory: Path) -> float:
    started = time.perf_counter()
    for run in range(runs):
        for case in cases:
            path = directory / f"{case.key}-{run}.db"
            gc.collect()
            try:
                case.samples.append(case.run(path))
            finally:
                _remove_database(path)
            last = case.samples[-1]
            p50, p99 = percentile(last, 0.5) * 1000, percentile(last, 0.99) * 1000
            print(
                f"latency run {run + 1}/{runs} {case.label}: p50 {p50:.2f} ms, p99 {p99:.2f} ms",
                file=sys.stderr,
            )
    return time.perf_counter() - started


def latency_summary(cases: Sequence[LatencyCase]) -> dict[str, Any]:
    by_key = {case.key: case for case in cases}
    summary: dict[str, Any] = {"ratios": {}, "target": {}}
    for name in ("burst", "sequential"):
        inert = by_key[f"inert_sqlite_{name}"]
        memory = by_key[f"inert_memory_{name}"]
        alone = by_key[f"log_only_{name}"]
        one_append = by_key[f"log_one_append_{name}"]
        summary["ratios"][name] = {
            "p50_vs_log_only": inert.p50 / alone.p50,
            "p99_vs_log_only": inert.p99 / alone.p99,
            "p99_vs_one_append": inert.p99 / one_append.p99,
            "p99_memory_vs_sqlite": memory.p99 / inert.p99,
        }
        summary["target"][name] = {
            "p99": inert.p99,
            "target": TARGET_P99_SECONDS,
            "met": inert.p99 < TARGET_P99_SECONDS,
        }
    burst = summary["ratios"]["burst"]["p99_vs_log_only"]
    summary["target"]["burst"]["vs_log_only"] = burst
    summary["target"]["burst"]["vs_log_only_target"] = TARGET_BURST_P99_VS_LOG_ONLY
    summary["target"]["burst"]["vs_log_only_met"] = burst <= TARGET_BURST_P99_VS_LOG_ONLY
    return summary


def latency_report(
    cases: Sequence[LatencyCase], summary: dict[str, Any], calls: int, runs: int
) -> list[str]:
    lines = [
        f"2. ResponseEnded fed -> key in queue.ready(), {calls:,} calls, median of {runs} run(s)",
        "",
    ]
    width = max(len(case.label) for case in cases)
    lines.append(f"{'case':<{width}}  {'p50 ms':>7}  {'p99 ms':>7}  {'max ms':>7}  runs (p99 ms)")
    lines.append("-" * (width + 2 + 7 + 2 + 7 + 2 + 7 + 2 + 13))
    for case in cases:
        per_run = " / ".join(f"{percentile(run, 0.99) * 1000:.2f}" for run in case.samples)
        lines.append(
            f"{case.label:<{width}}  {case.p50 * 1000:>7.2f}  {case.p99 * 1000:>7.2f}"
            f"  {case.worst * 1000:>7.2f}  {per_run}"
        )
    lines.append("")
    lines.append("Ratios (medians):")
    for name, entry in summary["ratios"].items():
        target = summary["target"][name]
        lines.append(
            f"  {name}: inert / log alone p50 {entry['p50_vs_log_only']:.2f}x,"
            f" p99 {entry['p99_vs_log_only']:.2f}x (over one append"
            f" {entry['p99_vs_one_append']:.2f}x); memory:// / SQLite p99"
            f" {entry['p99_memory_vs_sqlite']:.2f}x; target p99 < 5 ms:"
            f" {target['p99'] * 1000:.2f} ms ({verdict(target['met'])})"
        )
    burst = summary["target"]["burst"]
    lines.append(
        f"  burst: target p99 <= {burst['vs_log_only_target']:g}x the log alone:"
        f" {burst['vs_log_only']:.2f}x ({verdict(burst['vs_log_only_met'])})"
    )
    return lines


# --- 3. memory per live collecting call ------------------------------------------------------


def rss_bytes(field: str = "VmRSS") -> int:
    """The process's resident memory now (``VmHWM``: its peak so far)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _memory_fragments(index: int) -> tuple[bytes, bytes]:
    # Fresh bytes per call, as deltas from a network are.
    return bytes(bytearray(b'{"query": "')), f'item {index}"}}'.encode()


async def _inert_memory(
    directory: str, calls: int, traced: bool, snapshots: bool = True
) -> dict[str, Any]:
    path = Path(directory) / "memory.db"
    async with open_runtime(
        log=sqlite_url(path, synchronous="NORMAL"),
        create=True,
        tools=[TOOL],
        limits=limits_for(calls),
        snapshot_every=DEFAULT_SNAPSHOT_EVERY if snapshots else None,
    ) as runtime:
        gc.collect()
        if traced:
            tracemalloc.start()
        traced_before = tracemalloc.get_traced_memory()[0] if traced else 0
        rss_before = rss_bytes()
        start = time.perf_counter()
        # Built inside the measurement, as an adapter builds each call's key: the runtime keeps
        # the keys it was fed, and the baseline builds its keys inside its measurement too.
        keys = [call_key(index) for index in range(calls)]
        await start_turns(runtime, keys)

        async def open_call(index: int) -> None:
            key = keys[index]
            first, second = _memory_fragments(index)
            await runtime.feed(
                [
                    CallOpened(key=key, tool=TOOL.name, sequence=0),
                    ArgumentsAppended(
                        key=key, data=first, offset=0, first_sequence=1, last_sequence=1
                    ),
                    ArgumentsAppended(
                        key=key,
                        data=second,
                        offset=len(first),
                        first_sequence=2,
                        last_sequence=2,
                    ),
                ]
            )

        await each(range(calls), open_call, 1024)
        await runtime.settle()
        elapsed = time.perf_counter() - start
        gc.collect()
        traced_after = tracemalloc.get_traced_memory()[0] if traced else 0
        rss_after = rss_bytes()
        rss_peak = rss_bytes("VmHWM")
        if traced:
            tracemalloc.stop()
        snapshot = await _snapshot_cost(runtime) if snapshots and not traced else {}
        check_phases(runtime, keys, Phase.COLLECTING, "memory")
        rows = runtime.ledger.rows()
        events = await runtime.log.head()
        turns = len({key.turn_ref for key in keys})
        if len(rows) != calls or any(row.fragments != 2 for row in rows):
            raise RuntimeError("memory: the ledger does not show every call with 2 fragments")
        # Per call: its opening, its two fragments as one event, its collecting decision.
        if events != turns + 3 * calls:
            raise RuntimeError(f"memory: {events} events in the log")
    return {
        "calls": calls,
        "events": events,
        "seconds": elapsed,
        "traced_before": traced_before,
        "traced_after": traced_after,
        "rss_before": rss_before,
        "rss_after": rss_after,
        "rss_peak": rss_peak,
        **snapshot,
    }


async def _snapshot_cost(runtime: Runtime) -> dict[str, Any]:
    """How long taking a snapshot of all these calls holds the runtime (its own capture of its
    state, then what its collector settings do after a capture, timed after the memory was
    measured), and the size of the last one it wrote (none below ``snapshot_every`` events)."""
    written = await runtime.log.read_snapshot("")
    state, binding = runtime._snapshots._state(await runtime.log.head())
    start = time.perf_counter()
    capture(state, name="", stamp="", binding=binding)
    captured = time.perf_counter()
    runtime._snapshots.captured()
    return {
        "snapshot_capture_seconds": captured - start,
        "snapshot_collector_seconds": time.perf_counter() - captured,
        "snapshot_bytes": None
        if written is None
        else len(written.state) + sum(len(p.data) for p in written.payloads),
        "snapshot_position": None if written is None else written.position,
    }


def _naive_memory(calls: int, traced: bool) -> dict[str, Any]:
    gc.collect()
    if traced:
        tracemalloc.start()
    traced_before = tracemalloc.get_traced_memory()[0] if traced else 0
    rss_before = rss_bytes()
    start = time.perf_counter()
    accumulated: dict[CallKey, list[bytes]] = {}
    for index in range(calls):
        key = call_key(index)
        for data in _memory_fragments(index):
            accumulated.setdefault(key, []).append(data)
    elapsed = time.perf_counter() - start
    gc.collect()
    traced_after = tracemalloc.get_traced_memory()[0] if traced else 0
    rss_after = rss_bytes()
    if traced:
        tracemalloc.stop()
    if len(accumulated) != calls:
        raise RuntimeError("naive memory: calls lost")
    return {
        "calls": calls,
        "events": 2 * calls,
        "seconds": elapsed,
        "traced_before": traced_before,
        "traced_after": traced_after,
        "rss_before": rss_before,
        "rss_after": rss_after,
    }


def memory_probe(
    kind: str, calls: int, traced: bool, directory: str, snapshots: bool = True
) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    if kind == "inert":
        with tempfile.TemporaryDirectory(prefix="inert-bench-memory-", dir=directory) as name:
            return trio.run(_inert_memory, name, calls, traced, snapshots)
    return _naive_memory(calls, traced)


def run_memory_probes(calls: int, traced_calls: int, directory: Path) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for kind in ("inert", "naive"):
        for traced in (False, True):
            count = traced_calls if traced else calls
            command = [
                sys.executable,
                "-m",
                "benchmarks.call_actors",
                "--probe-memory",
                kind,
                "--memory-calls",
                str(count),
                "--dir",
                str(directory),
            ]
            if traced:
                command.append("--probe-traced")
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"memory probe {kind} failed:\n{done.stderr}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
            name = f"{kind}_{'traced' if traced else 'rss'}"
            results[name] = result
            per_call = (
                (result["traced_after"] - result["traced_before"])
                if traced
                else (result["rss_after"] - result["rss_before"])
            ) / count
            print(
                f"memory {name}, {count:,} calls: {per_call:,.0f} bytes per call"
                f" ({result['seconds']:.1f} s)",
                file=sys.stderr,
            )
    return results


def memory_summary(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def per_call(name: str, measure: str) -> float:
        result = results[name]
        return float(result[f"{measure}_after"] - result[f"{measure}_before"]) / int(
            result["calls"]
        )

    inert_traced = per_call("inert_traced", "traced")
    inert_rss = per_call("inert_rss", "rss")
    naive_traced = per_call("naive_traced", "traced")
    naive_rss = per_call("naive_rss", "rss")
    budget = TARGET_MEMORY_BYTES / TARGET_MEMORY_CALLS
    return {
        "calls": results["inert_rss"]["calls"],
        "traced_calls": results["inert_traced"]["calls"],
        "log": "sqlite, synchronous=NORMAL",
        "bytes_per_call": {
            "inert_traced": inert_traced,
            "inert_rss": inert_rss,
            "naive_traced": naive_traced,
            "naive_rss": naive_rss,
        },
        "ratios": {
            "traced_vs_naive": inert_traced / naive_traced,
            "rss_vs_naive": inert_rss / naive_rss if naive_rss > 0 else None,
        },
        "at_100000_calls": {
            "traced_mb": inert_traced * TARGET_MEMORY_CALLS / 1e6,
            "rss_mb": inert_rss * TARGET_MEMORY_CALLS / 1e6,
            "process_rss_mb": results["inert_rss"]["rss_after"] / 1e6,
            "process_peak_rss_mb": results["inert_rss"]["rss_peak"] / 1e6,
        },
        "snapshot": {
            "capture_seconds": results["inert_rss"]["snapshot_capture_seconds"],
            "collector_seconds": results["inert_rss"]["snapshot_collector_seconds"],
            "bytes": results["inert_rss"]["snapshot_bytes"],
            "position": results["inert_rss"]["snapshot_position"],
        },
        "target": {
            "bytes_per_call": budget,
            "met_traced": inert_traced <= budget,
            "met_rss": inert_rss <= budget,
        },
        "seconds": {name: result["seconds"] for name, result in results.items()},
        "events": results["inert_rss"]["events"],
    }


def memory_report(summary: dict[str, Any]) -> list[str]:
    calls = summary["calls"]
    per = summary["bytes_per_call"]
    at = summary["at_100000_calls"]
    target = summary["target"]
    seconds = summary["seconds"]
    snapshot = summary["snapshot"]
    written = (
        "none"
        if snapshot["position"] is None
        else f"{snapshot['bytes'] / 1e6:,.1f} MB at position {snapshot['position']:,}"
    )
    lines = [
        f"3. Memory per live collecting call, {calls:,} calls with 2 fragments each"
        f" ({summary['events']:,} events; tracemalloc: {summary['traced_calls']:,} calls), log:"
        " SQLite synchronous=NORMAL; each figure from its own fresh process",
        "",
        f"{'case':<40}  {'bytes/call':>10}  {'for 100,000 calls':>17}  {'seconds':>7}",
        "-" * (40 + 2 + 10 + 2 + 17 + 2 + 7),
        f"{'inert, tracemalloc':<40}  {per['inert_traced']:>10,.0f}"
        f"  {at['traced_mb']:>14,.0f} MB  {seconds['inert_traced']:>7.1f}",
        f"{'inert, RSS':<40}  {per['inert_rss']:>10,.0f}"
        f"  {at['rss_mb']:>14,.0f} MB  {seconds['inert_rss']:>7.1f}",
        f"{'naive dict of lists, tracemalloc':<40}  {per['naive_traced']:>10,.0f}"
        f"  {per['naive_traced'] * TARGET_MEMORY_CALLS / 1e6:>14,.0f} MB"
        f"  {seconds['naive_traced']:>7.1f}",
        f"{'naive dict of lists, RSS':<40}  {per['naive_rss']:>10,.0f}"
        f"  {per['naive_rss'] * TARGET_MEMORY_CALLS / 1e6:>14,.0f} MB"
        f"  {seconds['naive_rss']:>7.1f}",
        "",
        f"  inert / naive: tracemalloc {summary['ratios']['traced_vs_naive']:.1f}x;"
        f" process RSS at the end {at['process_rss_mb']:,.0f} MB, at its peak"
        f" {at['process_peak_rss_mb']:,.0f} MB (a snapshot being taken and written)",
        f"  taking a snapshot of all {calls:,} calls holds the runtime"
        f" {snapshot['capture_seconds']:.2f} s, then the collector"
        f" {snapshot['collector_seconds']:.2f} s; the last one written: {written}",
        f"  target <= {TARGET_MEMORY_BYTES / 1e6:,.0f} MB for 100,000 calls"
        f" ({target['bytes_per_call']:,.0f} bytes per call):"
        f" tracemalloc {verdict(target['met_traced'])}, RSS {verdict(target['met_rss'])}",
    ]
    return lines


# --- 4. replay -------------------------------------------------------------------------------

UNIT_CALLS = 4
UNIT_FRAGMENTS = 8
KEEP_PAYLOADS = Retention(fragments=False, arguments=False)


def _unit_arguments(call: int) -> list[bytes]:
    text = f'{{"query": "weather in Lisbon, call {call}", "units": "metric", "days": 3}}'.encode()
    step = math.ceil(len(text) / UNIT_FRAGMENTS)
    return [text[start : start + step] for start in range(0, len(text), step)]


async def record_unit(*, finished: bool = True, log_url: str = "memory://") -> list[RecordedEvent]:
    """The events a real runtime writes for one turn of four calls, claimed and completed (or,
    not ``finished``, left ready to claim); with retention off, so that the fragments and
    arguments are there to copy."""
    async with (
        open_log(log_url) as log,
        open_runtime(log=log, tools=[TOOL], retention=KEEP_PAYLOADS) as runtime,
    ):
        await runtime.start_turn(
            tenant=TENANT, conversation="conversation", turn="turn-1", principal=PRINCIPAL
        )
        response = ResponseRef(
            tenant=TENANT, conversation="conversation", turn="turn-1", response="response"
        )
        keys: list[CallKey] = []
        sequence = 0
        for call in range(UNIT_CALLS):
            key = CallKey(
                tenant=TENANT,
                conversation="conversation",
                turn="turn-1",
                response="response",
                item=f"item-{call}",
                call=f"call_{call}",
            )
            keys.append(key)
            await runtime.feed([CallOpened(key=key, tool=TOOL.name, sequence=sequence)])
            for part in _unit_arguments(call):
                sequence += 1
                await runtime.feed(
                    [
                        ArgumentsAppended(
                            key=key, data=part, first_sequence=sequence, last_sequence=sequence
                        )
                    ]
                )
            sequence += 1
            await runtime.feed([CallEnded(key=key, terminal=TerminalRef(sequence=sequence))])
            sequence += 1
        await runtime.feed(
            [
                ResponseEnded(
                    response=response,
                    reason=ResponseEndReason.COMPLETED,
                    terminal=TerminalRef(sequence=sequence),
                )
            ]
        )
        await runtime.settle()
        for key in keys if finished else ():
            dispatch = await runtime.claim(key, executor="bench-executor")
            await runtime.complete(dispatch)
        await runtime.settle()
        unit = await log.read(1)
    forbidden = [
        recorded.event_type
        for recorded in unit
        if hasattr(recorded.event, "rejected_event_id")
        or hasattr(recorded.event, "confirmation_event_id")
    ]
    if forbidden:
        raise RuntimeError(f"replay: the recorded unit holds {forbidden}, which name event ids")
    return unit


def record_unit_for(path: Path, *, finished: bool = True) -> list[RecordedEvent]:
    """The unit as the log at ``path`` (made here, empty) would record it: recorded in a copy
    of that log, which shares its secret, so that copies appended to it carry digests keyed
    by its key (a replay of them decides as they say)."""
    trio.run(_create, path)
    scratch = path.with_name(path.name + ".unit")
    shutil.copyfile(path, scratch)
    try:
        return trio.run(partial(record_unit, finished=finished, log_url=sqlite_url(scratch)))
    finally:
        _remove_database(scratch)


async def _create(path: Path) -> None:
    async with SQLiteLog.open(path):
        pass


def digest_key_of(path: Path) -> bytes:
    """The key of the arguments digests of the log at ``path``."""
    return trio.run(_digest_key_of, path)


async def _digest_key_of(path: Path) -> bytes:
    async with SQLiteLog.open(path) as log:
        return log.key(DIGEST_KEY)


Identity = TypeVar("Identity", CallKey, TurnRef, ResponseRef)


class Relabel:
    """One copy of the unit: every identity gets the copy's suffix, every cause its offset."""

    def __init__(self, copy: int, offset: int) -> None:
        self.suffix = f"-{copy}"
        self.offset = offset
        self._identities: dict[object, object] = {}
        self._streams: dict[str, str] = {}

    def identity(self, value: Identity) -> Identity:
        found = self._identities.get(value)
        if found is None:
            changes = {"conversation": value.conversation + self.suffix}
            if not isinstance(value, TurnRef):
                changes["response"] = value.response + self.suffix
            found = self._identities[value] = attrs.evolve(value, **changes)
        return cast(Identity, found)

    def event(self, event: Event) -> Event:
        changes: dict[str, object] = {}
        for name in _identity_fields(type(event)):
            value = getattr(event, name)
            if name == "cause":
                changes[name] = value + self.offset
            else:
                changes[name] = self.identity(value)
        return attrs.evolve(event, **changes)

    def stream(self, template: str, event: Event) -> str:
        found = self._streams.get(template)
        if found is None:
            kind = template.split("/", 1)[0]
            key = getattr(event, "key", None)
            if kind == "turn":
                found = cast(TurnRef, getattr(event, "turn")).stream  # noqa: B009
            elif kind == "response":
                ref = key.response_ref if isinstance(key, CallKey) else getattr(event, "response")  # noqa: B009
                found = cast(ResponseRef, ref).stream
            elif kind == "call" and isinstance(key, CallKey):
                found = key.stream
            elif kind == "request" and isinstance(key, CallKey):
                found = key.request_stream
            else:
                raise RuntimeError(f"replay: cannot relabel stream {template!r}")
            self._streams[template] = found
        return found


_FIELDS: dict[type, tuple[str, ...]] = {}


def _identity_fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(
            attribute.name
            for attribute in attrs.fields(cls)
            if attribute.name in ("key", "turn", "response", "cause")
        )
    return names


async def build_replay_log(path: Path, events: int, unit: Sequence[RecordedEvent]) -> None:
    """``events`` events: copies of the unit with fresh identities, in batches of 4,096."""
    async with SQLiteLog.open(path, synchronous="NORMAL") as log:
        batch: list[NewEvent] = []
        relabel = Relabel(0, 0)
        for index in range(events):
            copy, at = divmod(index, len(unit))
            if at == 0:
                relabel = Relabel(copy, copy * len(unit))
            recorded = unit[at]
            template = recorded.event
            if not isinstance(template, Event):
                raise TypeError(f"replay: the unit's {recorded.event_type} was redacted")
            event = relabel.event(template)
            batch.append(NewEvent(stream=relabel.stream(recorded.stream, event), event=event))
            if len(batch) == PAGE:
                await log.append(batch)
                batch = []
        if batch:
            await log.append(batch)
        if await log.head() != events:
            raise RuntimeError("replay: the log was not built whole")


def build_eventsourcing_store(source: Path, target: Path) -> None:
    """eventsourcing's application recorder, holding the payloads of the inert log."""
    reader = sqlite3.connect(source)
    datastore = SQLiteDatastore(str(target))
    try:
        recorder = SQLiteApplicationRecorder(datastore)
        recorder.create_table()
        ids: dict[str, uuid.UUID] = {}
        cursor = reader.execute(
            "SELECT s.name, e.version, e.event_type, e.payload FROM events AS e"
            " JOIN streams AS s ON s.stream_id = e.stream_id ORDER BY e.position"
        )
        while True:
            rows = cursor.fetchmany(PAGE)
            if not rows:
                break
            stored = []
            for name, version, event_type, payload in rows:
                originator = ids.get(name)
                if originator is None:
                    originator = ids[name] = uuid.uuid5(uuid.NAMESPACE_URL, name)
                stored.append(
                    StoredEvent(
                        originator_id=originator,
                        originator_version=version,
                        topic=event_type,
                        state=payload,
                    )
                )
            recorder.insert_events(stored)
    finally:
        datastore.close()
        reader.close()


async def _inert_replay(path: Path, events: int, unit: int, fold_too: bool) -> float:
    with thresholds_of():
        return await _replayed(path, events, unit, fold_too)


async def _replayed(path: Path, events: int, unit: int, fold_too: bool) -> float:
    async with SQLiteLog.open(path) as log:
        fold = CallFold(live=False, digest_key=log.key(DIGEST_KEY))
        projections = Projections()
        count = 0
        position = 1
        start = time.perf_counter()
        while True:
            page = await log.read(position, limit=PAGE)
            if not page:
                break
            if fold_too:
                for recorded in page:
                    fold.apply(recorded)
                    projections.apply(recorded)
            count += len(page)
            position = page[-1].position + 1
        elapsed = time.perf_counter() - start
    if count != events:
        raise RuntimeError(f"replay: read {count} events of {events}")
    if fold_too:
        if fold.position != events or projections.position != events:
            raise RuntimeError("replay: the fold or the projections stopped short")
        completed = sum(1 for row in projections.ledger.rows() if row.outcome == "completed")
        if completed < events // unit * UNIT_CALLS:
            raise RuntimeError(f"replay: {completed} calls completed, fewer than expected")
    return elapsed


def inert_replay_case(
    source: Path, events: int, unit: int, *, fold_too: bool
) -> Callable[[Path], float]:
    def run(_: Path) -> float:
        return trio.run(_inert_replay, source, events, unit, fold_too)

    return run


def eventsourcing_read_case(source: Path, events: int) -> Callable[[Path], float]:
    def run(_: Path) -> float:
        datastore = SQLiteDatastore(str(source))
        try:
            recorder = SQLiteApplicationRecorder(datastore)
            count = 0
            position = 1
            start = time.perf_counter()
            while True:
                page = recorder.select_notifications(position, limit=PAGE)
                if not page:
                    break
                for notification in page:
                    msgpack.unpackb(notification.state, raw=False)
                count += len(page)
                position = page[-1].id + 1
            elapsed = time.perf_counter() - start
        finally:
            datastore.close()
        if count != events:
            raise RuntimeError(f"eventsourcing: read {count} events of {events}")
        return elapsed

    return run


def unpack_floor_case(source: Path, events: int) -> Callable[[Path], float]:
    """The floor of any reader of these payloads: each unpacked once by msgpack, read into
    memory beforehand (no SQLite, no event made)."""

    def run(_: Path) -> float:
        with closing(sqlite3.connect(source)) as connection:
            payloads = [
                payload
                for (payload,) in connection.execute("SELECT payload FROM events ORDER BY position")
            ]
        if len(payloads) != events:
            raise RuntimeError(f"unpack floor: read {len(payloads)} payloads of {events}")
        unpackb = msgpack.unpackb
        start = time.perf_counter()
        for payload in payloads:
            unpackb(payload, raw=False, strict_map_key=True)
        return time.perf_counter() - start

    return run


def prepare_replay(directory: Path, events: int) -> tuple[list[Timed], dict[str, Any]]:
    inert_path = directory / "replay-inert.db"
    unit = record_unit_for(inert_path)
    kinds: dict[str, int] = {}
    for recorded in unit:
        kinds[recorded.event_type] = kinds.get(recorded.event_type, 0) + 1
    eventsourcing_path = directory / "replay-eventsourcing.db"
    started = time.perf_counter()
    trio.run(build_replay_log, inert_path, events, unit)
    built = time.perf_counter() - started
    started = time.perf_counter()
    build_eventsourcing_store(inert_path, eventsourcing_path)
    built_eventsourcing = time.perf_counter() - started
    print(
        f"replay: built {events:,} events in {built:.1f} s (eventsourcing {built_eventsourcing:.1f}"
        " s)",
        file=sys.stderr,
    )
    cases = [
        Timed(
            "inert_replay",
            "inert: read, decode, CallFold + Projections",
            events,
            inert_replay_case(inert_path, events, len(unit), fold_too=True),
        ),
        Timed(
            "inert_read",
            "inert: read and decode only",
            events,
            inert_replay_case(inert_path, events, len(unit), fold_too=False),
        ),
        Timed(
            "eventsourcing_read",
            "eventsourcing: select_notifications + msgpack",
            events,
            eventsourcing_read_case(eventsourcing_path, events),
        ),
        Timed(
            "unpack_floor",
            "msgpack alone: the same payloads, unpacked from memory",
            events,
            unpack_floor_case(inert_path, events),
        ),
    ]
    facts = {
        "unit_events": len(unit),
        "unit_kinds": kinds,
        "build_seconds": built,
        "build_eventsourcing_seconds": built_eventsourcing,
        "file_bytes": inert_path.stat().st_size,
    }
    return cases, facts


def replay_summary(cases: Sequence[Timed]) -> dict[str, Any]:
    rate = {case.key: case.median_rate for case in cases}
    replay = rate["inert_replay"]
    eventsourcing = rate["eventsourcing_read"]
    return {
        "ratios": {
            "replay_vs_eventsourcing": replay / eventsourcing,
            "read_vs_eventsourcing": rate["inert_read"] / eventsourcing,
            "share_of_time_reading": replay / rate["inert_read"],
            # What a replay 3x eventsourcing may spend on an event beyond unpacking its payload.
            "unpack_us": 1e6 / rate["unpack_floor"],
            "budget_beyond_unpack_us": 1e6 / (TARGET_REPLAY_VS_EVENTSOURCING * eventsourcing)
            - 1e6 / rate["unpack_floor"],
        },
        "target": {
            "value": replay,
            "target": TARGET_REPLAY_RATE,
            "met": replay >= TARGET_REPLAY_RATE,
            "vs_eventsourcing_target": TARGET_REPLAY_VS_EVENTSOURCING,
            "vs_eventsourcing_met": replay / eventsourcing >= TARGET_REPLAY_VS_EVENTSOURCING,
        },
    }


def replay_report(
    cases: Sequence[Timed], summary: dict[str, Any], facts: dict[str, Any], runs: int
) -> list[str]:
    events = cases[0].items
    kinds = ", ".join(f"{kind} {count}" for kind, count in facts["unit_kinds"].items())
    lines = [
        f"4. Replay of a {events:,}-event log, median of {runs} run(s)",
        f"   unit of {facts['unit_events']} events: {kinds}",
        f"   built in {facts['build_seconds']:.1f} s ({facts['file_bytes'] / 1e6:,.0f} MB),"
        f" eventsourcing's store in {facts['build_eventsourcing_seconds']:.1f} s",
        "",
    ]
    width = max(len(case.label) for case in cases)
    lines.append(f"{'case':<{width}}  {'events':>9}  {'events/s':>9}  runs (events/s)")
    lines.append("-" * (width + 2 + 9 + 2 + 9 + 2 + 15))
    for case in cases:
        per_run = " / ".join(fmt(rate) for rate in case.rates)
        lines.append(
            f"{case.label:<{width}}  {case.items:>9,}  {fmt(case.median_rate):>9}  {per_run}"
        )
    ratios = summary["ratios"]
    target = summary["target"]
    lines += [
        "",
        f"  replay / eventsourcing {ratios['replay_vs_eventsourcing']:.2f}x (target >="
        f" {TARGET_REPLAY_VS_EVENTSOURCING:g}x:"
        f" {verdict(target['vs_eventsourcing_met'])}); read and decode alone / eventsourcing"
        f" {ratios['read_vs_eventsourcing']:.2f}x; reading and decoding is"
        f" {ratios['share_of_time_reading']:.0%} of the replay's time",
        f"  target >= {fmt(target['target'])} events/s: {fmt(target['value'])}"
        f" ({verdict(target['met'])})",
        f"  {TARGET_REPLAY_VS_EVENTSOURCING:g}x eventsourcing leaves"
        f" {ratios['budget_beyond_unpack_us']:.2f} us per event beyond unpacking its payload"
        f" ({ratios['unpack_us']:.2f} us, msgpack alone) for reading, checking, making the"
        f" event and folding it; the replay takes {1e6 / target['value']:.1f} us",
    ]
    return lines


# --- the run ---------------------------------------------------------------------------------


def git_facts() -> dict[str, str]:
    def git(*arguments: str) -> str:
        done = subprocess.run(
            ["git", "--no-optional-locks", *arguments],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout.strip() if done.returncode == 0 else "unknown"

    changed = git("status", "--porcelain", "--", "inert")
    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "inert_changed": "yes" if changed and changed != "unknown" else "no",
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.call_actors", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--case",
        action="append",
        choices=CASES,
        help="run only this case (repeatable; default: all four)",
    )
    parser.add_argument(
        "--runs", type=int, default=DEFAULT_RUNS, help="runs per timed case (default %(default)s)"
    )
    parser.add_argument(
        "--fragments",
        type=int,
        default=DEFAULT_FRAGMENTS,
        help="fragments of case 1 at 100 calls (a tenth at 1 call, 8 per call at 10,000;"
        " default %(default)s)",
    )
    parser.add_argument(
        "--large-runs",
        type=int,
        default=DEFAULT_LARGE_RUNS,
        help="runs of the 10,000-call cases of case 1, at most --runs (default %(default)s)",
    )
    parser.add_argument(
        "--latency-calls",
        type=int,
        default=DEFAULT_LATENCY_CALLS,
        help="concurrent calls of case 2 (default %(default)s)",
    )
    parser.add_argument(
        "--memory-calls",
        type=int,
        default=DEFAULT_MEMORY_CALLS,
        help="calls of case 3, measured by RSS (default %(default)s, the target's)",
    )
    parser.add_argument(
        "--traced-calls",
        type=int,
        default=DEFAULT_TRACED_CALLS,
        help="calls of case 3 measured by tracemalloc, which slows them (default %(default)s)",
    )
    parser.add_argument(
        "--events",
        type=int,
        default=DEFAULT_EVENTS,
        help="events of the replay log of case 4 (default %(default)s)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print a JSON object (the tables go to stderr)"
    )
    parser.add_argument(
        "--dir", default=None, help="where to make the temporary directory (default: the system's)"
    )
    parser.add_argument("--probe-memory", choices=("inert", "naive"), help=argparse.SUPPRESS)
    parser.add_argument("--probe-traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--probe-without-snapshots", action="store_true", help=argparse.SUPPRESS)
    return parser


def _run_fragments(args: argparse.Namespace, directory: Path) -> tuple[dict[str, Any], list[str]]:
    cases = build_fragment_cases(args.fragments, args.large_runs)
    seconds = run_interleaved(cases, args.runs, directory, "fragments")
    summary = fragments_summary(cases)
    document = {
        "seconds_total": seconds,
        "results": [_timed_json(case) for case in cases],
        **summary,
    }
    return document, fragments_report(cases, summary, args.runs)


def _run_latency(args: argparse.Namespace, directory: Path) -> tuple[dict[str, Any], list[str]]:
    cases = build_latency_cases(args.latency_calls)
    seconds = run_latency_cases(cases, args.runs, directory)
    summary = latency_summary(cases)
    document = {
        "seconds_total": seconds,
        "calls": args.latency_calls,
        "results": [
            {
                "key": case.key,
                "label": case.label,
                "p50_seconds": case.p50,
                "p99_seconds": case.p99,
                "max_seconds": case.worst,
                "p99_per_run": [percentile(run, 0.99) for run in case.samples],
            }
            for case in cases
        ],
        **summary,
    }
    return document, latency_report(cases, summary, args.latency_calls, args.runs)


def _run_memory(args: argparse.Namespace, directory: Path) -> tuple[dict[str, Any], list[str]]:
    started = time.perf_counter()
    results = run_memory_probes(args.memory_calls, args.traced_calls, directory)
    summary = memory_summary(results)
    document = {"seconds_total": time.perf_counter() - started, "probes": results, **summary}
    return document, memory_report(summary)


def _run_replay(args: argparse.Namespace, directory: Path) -> tuple[dict[str, Any], list[str]]:
    started = time.perf_counter()
    cases, facts = prepare_replay(directory, args.events)
    run_interleaved(cases, args.runs, directory, "replay")
    summary = replay_summary(cases)
    document = {
        "seconds_total": time.perf_counter() - started,
        "facts": facts,
        "results": [_timed_json(case) for case in cases],
        **summary,
    }
    return document, replay_report(cases, summary, facts, args.runs)


RUNNERS = {
    "fragments": _run_fragments,
    "latency": _run_latency,
    "memory": _run_memory,
    "replay": _run_replay,
}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.probe_memory:
        result = memory_probe(
            args.probe_memory,
            args.memory_calls,
            args.probe_traced,
            args.dir or tempfile.gettempdir(),
            snapshots=not args.probe_without_snapshots,
        )
        print(json.dumps(result))
        return 0
    counts = (args.runs, args.large_runs, args.latency_calls, args.memory_calls, args.traced_calls)
    if min(*counts, args.events) < 1 or (args.fragments < 100):
        parser.error(
            "--runs, --large-runs, --latency-calls, --memory-calls, --traced-calls and --events"
            " must be at least 1,"
            " --fragments at least 100"
        )
    selected = args.case or list(CASES)
    document: dict[str, Any] = {"runs": args.runs}
    sections: list[list[str]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="inert-bench-", dir=args.dir) as name:
        directory = Path(name)
        facts = {**machine_facts(directory), **git_facts()}
        document["facts"] = facts
        for case in CASES:
            if case in selected:
                document[case], lines = RUNNERS[case](args, directory)
                sections.append(lines)
    total = time.perf_counter() - started
    document["seconds_total"] = total
    changed = " (inert/ has uncommitted changes)" if facts["inert_changed"] == "yes" else ""
    header = [
        "Call actors end to end (SQLite log, WAL, synchronous=FULL unless said otherwise)",
        f"Python {facts['python']} ({facts['python_implementation']}), SQLite {facts['sqlite']},"
        f" {facts['cpu_count']} CPUs, {facts['platform']}, temporary files on"
        f" {facts['filesystem']}; commit {facts['commit']}{changed}",
    ]
    report = "\n\n".join("\n".join(lines) for lines in [header, *sections])
    missed = document["targets_missed"] = missed_targets(document)
    report += f"\n\nmeasured in {total:.1f} s; " + (
        f"stated targets NOT met ({len(missed)}, reported, not a failure): {', '.join(missed)}"
        if missed
        else "every stated target met"
    )
    if args.json:
        print(report, file=sys.stderr)
        print(json.dumps(document, indent=2))
    else:
        print(report)
    return 0


def _timed_json(case: Timed) -> dict[str, Any]:
    return {
        "key": case.key,
        "label": case.label,
        "items": case.items,
        "seconds": case.seconds,
        "per_second": case.rates,
        "median_per_second": case.median_rate,
    }


if __name__ == "__main__":
    sys.exit(main())
