"""Append throughput of the SQLite log, side by side with eventsourcing and raw sqlite3.

Run with ``python -m benchmarks.append_throughput [--events N] [--runs R] [--json]``.

Every measurement writes to a fresh SQLite file in a temporary directory, in WAL mode under
``synchronous=FULL``, and is repeated ``--runs`` times (the runs of the cases are interleaved);
the median is reported.

- inert: concurrent appenders (Trio tasks of one nursery), each on its own stream (the response
  stream of its own call key), each appending one ``ArgumentsAppended`` of 32 bytes of argument
  data per ``append`` call, in a closed loop, until the events of the case are written. The
  events are built inside the loop, as a real appender builds them. Timed from the first append
  to the last acknowledgement; opening the log is not timed. With group commit, and with
  ``group_commit=False`` (one transaction per append).
- eventsourcing: its SQLite recorders writing the same payload bytes (already serialised: no
  domain-event transcoding is timed, which favours eventsourcing), in batches of 1,024 events
  per ``insert_events`` call, and one event per call.
- sqlite3: ``executemany`` of prebuilt rows of the shape of inert's events table, in batches of
  1,024 (one transaction each) into a one-table schema: the ceiling.

Cases that pay one commit (one fsync) per event write a tenth of the events, so that the whole
run stays short; events per second are comparable all the same.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import (
    SQLiteAggregateRecorder,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteDatastore,
)

from inert.events import DEFAULT_CODEC, ArgumentsAppended, CallKey
from inert.log import NewEvent, SQLiteLog, _sqlite, new_event_id
from inert.log._group import CommittedGroup

DEFAULT_EVENTS = 20_000
DEFAULT_RUNS = 3
BATCH = 1024
PER_COMMIT_FRACTION = 10
ARGUMENT_DATA = b'{"query": "weather in Lisbon", "'

TARGET_RATE = 100_000.0
TARGET_VS_PER_APPEND = 20.0
TARGET_VS_EVENTSOURCING = 2.0

_SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


def _call_key(index: int) -> CallKey:
    return CallKey(
        tenant="bench",
        conversation=f"conversation-{index}",
        turn="turn-1",
        response=f"response-{index}",
        item=f"item-{index}",
        call="call_0",
    )


def _sample_event() -> tuple[str, bytes]:
    """The tag and payload of a representative event, for the cases that store bytes."""
    event = ArgumentsAppended(
        key=_call_key(0), data=ARGUMENT_DATA, first_sequence=0, last_sequence=0
    )
    tag, _, payload = DEFAULT_CODEC.encode(event)
    return tag, payload


EVENT_TAG, PAYLOAD = _sample_event()
TOPIC = "inert.events._catalog:ArgumentsAppended"


def _remove_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _count_rows(path: Path, table: str) -> int:
    connection = sqlite3.connect(path)
    try:
        count: int = connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    finally:
        connection.close()
    return count


def _check_written(written: int, expected: int, case: str) -> None:
    if written != expected:
        raise RuntimeError(f"{case}: {written} events stored, {expected} expected")


def _pragmas(connection: sqlite3.Connection) -> str:
    mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
    level = connection.execute("PRAGMA synchronous").fetchone()[0]
    return f"journal_mode={str(mode).upper()}, synchronous={_SYNCHRONOUS_NAMES.get(level, level)}"


# --- inert -----------------------------------------------------------------------------------


class _NoCommitLog(SQLiteLog):
    """The SQLite log with its commit replaced by nothing: what the Trio side alone can do."""

    def _commit_group(self, group: list[Any]) -> CommittedGroup:
        return CommittedGroup([list(range(len(request.records))) for request in group], [], {})


async def _inert_appends(
    path: Path,
    events: int,
    *,
    appenders: int,
    group_commit: bool,
    per_append: int,
    log_class: type[SQLiteLog],
) -> float:
    async with log_class.open(path, synchronous="FULL", group_commit=group_commit) as log:
        remaining = events

        async def appender(index: int) -> None:
            nonlocal remaining
            key = _call_key(index)
            stream = key.response_ref.stream
            sequence = 0
            while remaining > 0:
                count = min(per_append, remaining)
                remaining -= count
                batch = [
                    NewEvent(
                        stream=stream,
                        event=ArgumentsAppended(
                            key=key, data=ARGUMENT_DATA, first_sequence=n, last_sequence=n
                        ),
                    )
                    for n in range(sequence, sequence + count)
                ]
                await log.append(batch)
                sequence += count

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for index in range(appenders):
                nursery.start_soon(appender, index)
        elapsed = time.perf_counter() - start
        if log_class is SQLiteLog:
            _check_written(await log.head(), events, "inert")
    return elapsed


def inert_case(
    *, appenders: int, group_commit: bool, per_append: int = 1, commit: bool = True
) -> Callable[[Path, int], float]:
    log_class = SQLiteLog if commit else _NoCommitLog

    def run(path: Path, events: int) -> float:
        return trio.run(
            functools.partial(
                _inert_appends,
                path,
                events,
                appenders=appenders,
                group_commit=group_commit,
                per_append=per_append,
                log_class=log_class,
            )
        )

    return run


async def _inert_pragmas(path: Path) -> str:
    async with SQLiteLog.open(path, synchronous="FULL") as log:
        writer = log._writer
        if writer is None:
            raise RuntimeError("the SQLite log has no writer connection")
        return _pragmas(writer)


# --- eventsourcing ---------------------------------------------------------------------------


class _FullSyncConnectionPool(SQLiteConnectionPool):
    """eventsourcing's pool, with ``synchronous=FULL`` set on every connection it makes."""

    def _create_connection(self) -> SQLiteConnection:
        connection = super()._create_connection()
        connection._sqlite_conn.execute("PRAGMA synchronous = FULL")
        return connection


def _eventsourcing_datastore(path: Path, *, full: bool = True) -> SQLiteDatastore:
    datastore = SQLiteDatastore(str(path))
    if full:
        # SQLiteDatastore makes its pool itself and takes no pragmas; its pool connects lazily,
        # so the stock one (still empty) is swapped for one that sets FULL.
        datastore.pool.close()
        datastore.pool = _FullSyncConnectionPool(db_name=str(path))
    return datastore


RecorderClass = type[SQLiteAggregateRecorder]


def eventsourcing_case(
    *, recorder_class: RecorderClass, batch: int, originators: int
) -> Callable[[Path, int], float]:
    def run(path: Path, events: int) -> float:
        datastore = _eventsourcing_datastore(path)
        try:
            recorder = recorder_class(datastore)
            recorder.create_table()
            ids = [uuid.uuid4() for _ in range(originators)]
            versions = [0] * originators
            written = 0
            start = time.perf_counter()
            while written < events:
                stored = []
                for number in range(written, min(written + batch, events)):
                    index = number % originators
                    versions[index] += 1
                    stored.append(
                        StoredEvent(
                            originator_id=ids[index],
                            originator_version=versions[index],
                            topic=TOPIC,
                            state=PAYLOAD,
                        )
                    )
                recorder.insert_events(stored)
                written += len(stored)
            elapsed = time.perf_counter() - start
        finally:
            datastore.close()
        _check_written(_count_rows(path, "stored_events"), events, "eventsourcing")
        return elapsed

    return run


def _eventsourcing_pragmas(path: Path, *, full: bool) -> str:
    datastore = _eventsourcing_datastore(path, full=full)
    try:
        with datastore.get_connection(commit=False) as connection:
            return _pragmas(connection._sqlite_conn)
    finally:
        datastore.close()


# --- raw sqlite3 -----------------------------------------------------------------------------


def _raw_connection(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = FULL")
    return connection


def raw_case(path: Path, events: int) -> float:
    recorded_at = time.time_ns() // 1000
    rows = [
        (
            number + 1,
            new_event_id(),
            number % BATCH + 1,
            number // BATCH + 1,
            recorded_at,
            EVENT_TAG,
            1,
            PAYLOAD,
            len(PAYLOAD),
            None,
            None,
            None,
            0,
        )
        for number in range(events)
    ]
    connection = _raw_connection(path)
    try:
        # inert's own schema, so that the ceiling is measured on exactly the rows inert writes.
        connection.executescript(_sqlite._SCHEMA)
        start = time.perf_counter()
        for offset in range(0, events, BATCH):
            connection.execute("BEGIN IMMEDIATE")
            connection.executemany(
                "INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                rows[offset : offset + BATCH],
            )
            connection.execute("COMMIT")
        elapsed = time.perf_counter() - start
    finally:
        connection.close()
    _check_written(_count_rows(path, "events"), events, "sqlite3")
    return elapsed


# --- the cases -------------------------------------------------------------------------------


@dataclass
class Case:
    key: str
    label: str
    events: int
    run: Callable[[Path, int], float]
    seconds: list[float] = field(default_factory=list)

    @property
    def rates(self) -> list[float]:
        return [self.events / seconds for seconds in self.seconds]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)


def build_cases(events: int) -> list[Case]:
    per_commit = max(1, events // PER_COMMIT_FRACTION)
    return [
        Case(
            "inert_group_commit_1",
            "inert, group commit, 1 appender *",
            per_commit,
            inert_case(appenders=1, group_commit=True),
        ),
        Case(
            "inert_group_commit_64",
            "inert, group commit, 64 appenders",
            events,
            inert_case(appenders=64, group_commit=True),
        ),
        Case(
            "inert_group_commit_1024",
            "inert, group commit, 1,024 appenders",
            events,
            inert_case(appenders=1024, group_commit=True),
        ),
        Case(
            "inert_group_commit_1024_batches_of_8",
            "inert, group commit, 1,024 appenders, 8 events per append",
            events,
            inert_case(appenders=1024, group_commit=True, per_append=8),
        ),
        Case(
            "inert_no_commit_1024",
            "inert, 1,024 appenders, commit replaced by a no-op",
            events,
            inert_case(appenders=1024, group_commit=True, commit=False),
        ),
        Case(
            "inert_per_append_1",
            "inert, 1 transaction per append, 1 appender *",
            per_commit,
            inert_case(appenders=1, group_commit=False),
        ),
        Case(
            "inert_per_append_64",
            "inert, 1 transaction per append, 64 appenders *",
            per_commit,
            inert_case(appenders=64, group_commit=False),
        ),
        Case(
            "eventsourcing_aggregate_batched",
            "eventsourcing aggregate recorder, 1,024 per call",
            events,
            eventsourcing_case(
                recorder_class=SQLiteAggregateRecorder, batch=BATCH, originators=BATCH
            ),
        ),
        Case(
            "eventsourcing_application_batched",
            "eventsourcing application recorder, 1,024 per call",
            events,
            eventsourcing_case(
                recorder_class=SQLiteApplicationRecorder, batch=BATCH, originators=BATCH
            ),
        ),
        Case(
            "eventsourcing_application_single",
            "eventsourcing application recorder, 1 per call *",
            per_commit,
            eventsourcing_case(recorder_class=SQLiteApplicationRecorder, batch=1, originators=1),
        ),
        Case(
            "sqlite3_executemany",
            "sqlite3 executemany, 1,024 per transaction",
            events,
            raw_case,
        ),
    ]


def _filesystem(directory: Path) -> str:
    """The type of the filesystem holding ``directory`` (Linux only; fsync on tmpfs is free)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    target = str(directory.resolve())
    best, kind = "", "unknown"
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount_point = parts[1]
        inside = target == mount_point or target.startswith(mount_point.rstrip("/") + "/")
        if inside and len(mount_point) > len(best):
            best, kind = mount_point, parts[2]
    return kind


def machine_facts(directory: Path) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "filesystem": _filesystem(directory),
    }


def pragma_facts(directory: Path) -> dict[str, str]:
    facts: dict[str, str] = {}
    probe = directory / "pragmas-inert.db"
    facts["inert"] = trio.run(_inert_pragmas, probe) + " (set by SQLiteLog)"
    _remove_database(probe)
    probe = directory / "pragmas-eventsourcing-stock.db"
    facts["eventsourcing_stock"] = (
        _eventsourcing_pragmas(probe, full=False)
        + " (eventsourcing sets only journal_mode; synchronous is SQLite's compiled default)"
    )
    _remove_database(probe)
    probe = directory / "pragmas-eventsourcing.db"
    facts["eventsourcing"] = (
        _eventsourcing_pragmas(probe, full=True) + " (synchronous set by this benchmark)"
    )
    _remove_database(probe)
    probe = directory / "pragmas-sqlite3.db"
    connection = _raw_connection(probe)
    try:
        facts["sqlite3"] = _pragmas(connection) + " (set by this benchmark)"
    finally:
        connection.close()
    _remove_database(probe)
    return facts


def ratios(cases: list[Case]) -> dict[str, dict[str, Any]]:
    rate = {case.key: case.median_rate for case in cases}
    inert = rate["inert_group_commit_1024"]
    eventsourcing_best = max(
        rate["eventsourcing_aggregate_batched"], rate["eventsourcing_application_batched"]
    )
    return {
        "inert_1024_events_per_second": {
            "value": inert,
            "target": TARGET_RATE,
            "meets_target": inert >= TARGET_RATE,
        },
        "inert_1024_vs_inert_per_append_64": {
            "value": inert / rate["inert_per_append_64"],
            "target": TARGET_VS_PER_APPEND,
            "meets_target": inert / rate["inert_per_append_64"] >= TARGET_VS_PER_APPEND,
        },
        "inert_1024_vs_inert_per_append_1": {
            "value": inert / rate["inert_per_append_1"],
            "target": None,
            "meets_target": None,
        },
        "inert_1024_vs_eventsourcing_best_batched": {
            "value": inert / eventsourcing_best,
            "target": TARGET_VS_EVENTSOURCING,
            "meets_target": inert / eventsourcing_best >= TARGET_VS_EVENTSOURCING,
        },
        "inert_1024_vs_sqlite3_executemany": {
            "value": inert / rate["sqlite3_executemany"],
            "target": None,
            "meets_target": None,
        },
    }


def _fmt_rate(value: float) -> str:
    return f"{value:,.0f}"


def format_report(
    *,
    facts: dict[str, Any],
    pragmas: dict[str, str],
    cases: list[Case],
    computed: dict[str, dict[str, Any]],
    events: int,
    runs: int,
) -> str:
    lines = [
        "Append throughput, synchronous=FULL, WAL, fresh SQLite files",
        f"Python {facts['python']} ({facts['python_implementation']}), SQLite {facts['sqlite']},"
        f" {facts['cpu_count']} CPUs, {facts['platform']}, temporary files on"
        f" {facts['filesystem']}",
        f"{events:,} events per case, median of {runs} run(s)",
        "",
        "Pragmas:",
        *(f"  {name}: {value}" for name, value in pragmas.items()),
        "",
    ]
    width = max(len(case.label) for case in cases)
    lines.append(f"{'case':<{width}}  {'events':>7}  {'events/s':>9}  runs (events/s)")
    lines.append("-" * (width + 2 + 7 + 2 + 9 + 2 + 15))
    for case in cases:
        per_run = " / ".join(_fmt_rate(rate) for rate in case.rates)
        lines.append(
            f"{case.label:<{width}}  {case.events:>7,}  {_fmt_rate(case.median_rate):>9}  {per_run}"
        )
    lines.append(
        f"* one commit (one fsync) per event: {max(1, events // PER_COMMIT_FRACTION):,} events"
        " (a tenth) per run"
    )
    lines.append("")
    lines.append("Ratios (medians):")
    names = {
        "inert_1024_events_per_second": "inert group commit @1024, events/s",
        "inert_1024_vs_inert_per_append_64": "inert @1024 / inert 1 transaction per append @64",
        "inert_1024_vs_inert_per_append_1": "inert @1024 / inert 1 transaction per append @1",
        "inert_1024_vs_eventsourcing_best_batched": "inert @1024 / eventsourcing best batched",
        "inert_1024_vs_sqlite3_executemany": "inert @1024 / sqlite3 executemany (ceiling)",
    }
    name_width = max(len(name) for name in names.values())
    for key, entry in computed.items():
        value = entry["value"]
        shown = _fmt_rate(value) if key == "inert_1024_events_per_second" else f"{value:.2f}x"
        target = entry["target"]
        verdict = ""
        if target is not None:
            wanted = _fmt_rate(target) if key == "inert_1024_events_per_second" else f"{target:g}x"
            verdict = f"  (target >= {wanted}: {'met' if entry['meets_target'] else 'NOT met'})"
        lines.append(f"  {names[key]:<{name_width}}  {shown:>9}{verdict}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.append_throughput", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--events", type=int, default=DEFAULT_EVENTS, help="events per case (default %(default)s)"
    )
    parser.add_argument(
        "--runs", type=int, default=DEFAULT_RUNS, help="runs per case (default %(default)s)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print a JSON object (the table goes to stderr)"
    )
    parser.add_argument(
        "--dir", default=None, help="where to make the temporary directory (default: the system's)"
    )
    args = parser.parse_args(argv)
    if args.events < PER_COMMIT_FRACTION or args.runs < 1:
        parser.error(f"--events must be at least {PER_COMMIT_FRACTION} and --runs at least 1")

    with tempfile.TemporaryDirectory(prefix="inert-bench-", dir=args.dir) as name:
        directory = Path(name)
        facts = machine_facts(directory)
        pragmas = pragma_facts(directory)
        cases = build_cases(args.events)
        started = time.perf_counter()
        for run in range(args.runs):
            for case in cases:
                path = directory / f"{case.key}-{run}.db"
                try:
                    case.seconds.append(case.run(path, case.events))
                finally:
                    _remove_database(path)
                print(
                    f"run {run + 1}/{args.runs} {case.label}: {_fmt_rate(case.rates[-1])} events/s",
                    file=sys.stderr,
                )
        total = time.perf_counter() - started

    computed = ratios(cases)
    report = format_report(
        facts=facts,
        pragmas=pragmas,
        cases=cases,
        computed=computed,
        events=args.events,
        runs=args.runs,
    )
    report += f"\n\nmeasured in {total:.1f} s"
    if args.json:
        print(report, file=sys.stderr)
        document = {
            "facts": facts,
            "pragmas": pragmas,
            "events": args.events,
            "runs": args.runs,
            "seconds_total": total,
            "results": [
                {
                    "key": case.key,
                    "label": case.label,
                    "events": case.events,
                    "seconds": case.seconds,
                    "events_per_second": case.rates,
                    "median_events_per_second": case.median_rate,
                }
                for case in cases
            ],
            "ratios": computed,
        }
        print(json.dumps(document, indent=2))
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
