"""The PostgreSQL log: append throughput from 1, 2 and 4 processes, ready calls, calls fed and
executed by 1, 2 and 4 runtime processes, replay; beside SQLite in the same run.

Run with ``python -m benchmarks.postgres_log [--url URL] [--events N] [--calls N]
[--replay-events N] [--runs R] [--json]``. The server is ``--url`` (default: env
``INERT_BENCH_POSTGRESQL``, else ``postgresql://postgres@127.0.0.1:5432/test``); every run
writes to a fresh schema, dropped afterwards. SQLite runs write fresh files (WAL,
``synchronous=FULL``) in a temporary directory. Cases are repeated ``--runs`` times with the
runs interleaved; medians are reported.

1. ``append``: ``--events`` events per case, split evenly between 1, 2 or 4 writer processes on
   one database; in each process 64 Trio tasks append one ``ArgumentsAppended`` (32 bytes of
   argument data) per ``append`` to a stream of their own, in a closed loop, with group commit.
   The processes open their log, say they are ready, and start on one word from the parent;
   timed by the parent from that word until the last process has had its last append
   acknowledged. Beside: the SQLite log, one process, the same 64 tasks.
2. ``ready``: one runtime process; ``--calls`` calls (ten per turn, each in its own provider
   response) are each fed as one batch (opened, four fragments, the call's end, the response's
   end) by 256 tasks, timed from the first turn started until ``settle()`` returns with every
   call ready for dispatch. PostgreSQL beside SQLite.
3. ``runtimes``: ``--calls`` calls split evenly between 1, 2 or 4 runtime processes on one
   database (``open_runtime(process=...)``, this module run with ``--runtime-child``); each
   starts its own turns, feeds each of its calls as one batch as in ``ready`` (256 tasks), and
   claims and completes every call it sees ready, its own or another process's (the first
   claim wins; the others are refused). Timed by the parent from its word until every process
   has an outcome for each of its own calls; the events the log gained meanwhile give the
   events/s. Beside: one runtime process on SQLite.
4. ``replay``: a log of ``--replay-events`` events (appended in batches of 4,096 before the
   clock starts), read back page by page (``log.read(position, limit=4096)``), every event
   decoded. PostgreSQL beside SQLite.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import psycopg
import trio

from benchmarks.call_actors import (
    TOOL,
    call_key,
    check_phases,
    each,
    limits_for,
    start_turns,
)
from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    Event,
    Phase,
    ReadyCall,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    open_log,
    open_runtime,
)
from inert.log import NewEvent

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_EVENTS = 20_000
DEFAULT_CALLS = 1_000
DEFAULT_REPLAY_EVENTS = 100_000
DEFAULT_RUNS = 3
APPENDERS = 64
PROCESSES = (1, 2, 4)
FEEDERS = 256
LEASE_TIME = 60.0
"""Long enough that a runtime process busy on a shared CPU is never taken for dead."""
PAGE = 4096
ARGUMENT_DATA = b'{"query": "weather in Lisbon", "'
PARTS = (b'{"query": "', b"weather in ", b"Lisbon", b'"}')


# --- logs ------------------------------------------------------------------------------------


def postgres_url(server: str, schema: str) -> str:
    parts = urlsplit(server)
    query = "&".join(filter(None, [parts.query, urlencode({"schema": schema})]))
    return parts._replace(query=query).geturl()


class Target:
    """Where one run writes: a fresh PostgreSQL schema or a fresh SQLite file."""

    def __init__(self, kind: str, server: str, directory: Path) -> None:
        self.kind = kind
        self.server = server
        self.name = f"bench_{uuid.uuid4().hex[:12]}"
        self.path = directory / f"{self.name}.db"

    @property
    def url(self) -> str:
        if self.kind == "postgresql":
            return postgres_url(self.server, self.name)
        return f"sqlite:///{self.path}?synchronous=FULL"

    def remove(self) -> None:
        if self.kind == "postgresql":
            with psycopg.connect(self.server, autocommit=True) as connection:
                connection.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)


def _event(key: CallKey, sequence: int) -> ArgumentsAppended:
    return ArgumentsAppended(
        key=key, data=ARGUMENT_DATA, first_sequence=sequence, last_sequence=sequence
    )


def _appender_key(process: int, task: int) -> CallKey:
    return CallKey(
        tenant="bench",
        conversation=f"conversation-{process}-{task}",
        turn="turn-1",
        response=f"response-{process}-{task}",
        item="item",
        call="call_0",
    )


async def _append(url: str, process: int, events: int, ready: Callable[[], None]) -> float:
    """Append ``events`` events from 64 tasks; the seconds from ``ready`` returning to the end."""
    async with open_log(url) as log:
        remaining = events

        async def appender(task: int) -> None:
            nonlocal remaining
            key = _appender_key(process, task)
            stream = key.response_ref.stream
            sequence = 0
            while remaining > 0:
                remaining -= 1
                await log.append([NewEvent(stream=stream, event=_event(key, sequence))])
                sequence += 1

        await trio.to_thread.run_sync(ready)
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for task in range(APPENDERS):
                nursery.start_soon(appender, task)
        return time.perf_counter() - start


def _child(url: str, process: int, events: int) -> None:
    """A writer process: ready, wait for the word, append, report its own seconds."""

    def ready() -> None:
        print("ready", flush=True)
        sys.stdin.readline()

    seconds = trio.run(_append, url, process, events, ready)
    print(f"done {seconds}", flush=True)


def append_processes(target: Target, processes: int, events: int) -> float:
    """Seconds from the parent's word until every writer process has finished."""
    # The schema is made before the writers start, so that they do not time its creation.
    trio.run(_touch, target.url)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.postgres_log",
                "--child",
                target.url,
                str(number),
                str(events // processes),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for number in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a writer process failed to open the log")
        start = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            assert child.stdout is not None
            if not child.stdout.readline().startswith("done"):
                raise RuntimeError("a writer process failed while appending")
        elapsed = time.perf_counter() - start
    finally:
        for child in children:
            child.kill()
            child.wait()
    written = trio.run(_head, target.url)
    if written != events // processes * processes:
        raise RuntimeError(f"append: {written} events stored, {events} expected")
    return elapsed


async def _touch(url: str) -> None:
    async with open_log(url):
        pass


async def _head(url: str) -> int:
    async with open_log(url) as log:
        return await log.head()


def append_in_process(target: Target, events: int) -> float:
    seconds = trio.run(_append, target.url, 0, events, lambda: None)
    written = trio.run(_head, target.url)
    if written != events:
        raise RuntimeError(f"append: {written} events stored, {events} expected")
    return seconds


# --- ready calls -----------------------------------------------------------------------------


def _lifecycle(key: CallKey) -> list[Event]:
    events: list[Event] = [CallOpened(key=key, tool=TOOL.name, sequence=0)]
    for number, part in enumerate(PARTS, start=1):
        events.append(
            ArgumentsAppended(key=key, data=part, first_sequence=number, last_sequence=number)
        )
    end = len(PARTS) + 1
    events.append(CallEnded(key=key, terminal=TerminalRef(sequence=end)))
    events.append(
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=end + 1),
        )
    )
    return events


async def _ready_calls(url: str, calls: int) -> float:
    keys = [call_key(index) for index in range(calls)]
    async with open_runtime(
        log=url, create=True, tools=[TOOL], limits=limits_for(calls)
    ) as runtime:
        start = time.perf_counter()
        await start_turns(runtime, keys)

        async def feed(key: CallKey) -> None:
            await runtime.feed(_lifecycle(key))

        await each(keys, feed, FEEDERS)
        await runtime.settle()
        elapsed = time.perf_counter() - start
        check_phases(runtime, keys, Phase.VALIDATED, "ready")
        if len(runtime.projections.queue.ready()) != calls:
            raise RuntimeError("ready: not every call is ready for dispatch")
    return elapsed


def ready_calls(target: Target, calls: int) -> float:
    return trio.run(_ready_calls, target.url, calls)


# --- runtime processes ----------------------------------------------------------------------


async def _runtime_work(
    url: str, process: int, calls: int, total: int, ready: Callable[[], None]
) -> float:
    """Feed this process's calls and execute ready calls (anyone's) until every call of this
    process has its outcome; the seconds from ``ready`` returning to then. Serves claims of
    its turns until its standard input closes."""
    keys = [call_key(index) for index in range(process * calls, (process + 1) * calls)]
    async with (
        open_runtime(
            log=url,
            create=True,
            tools=[TOOL],
            limits=limits_for(total),
            process=f"bench-{process}",
            lease_time=LEASE_TIME,
        ) as runtime,
        trio.open_nursery() as nursery,
    ):

        async def execute(call: ReadyCall) -> None:
            try:
                dispatch = await runtime.claim(call, executor=f"bench-{process}")
            except ClaimRefused:
                return
            await runtime.complete(dispatch)

        async def executor() -> None:
            async for call in runtime.ready_calls():
                nursery.start_soon(execute, call)

        nursery.start_soon(executor)
        await trio.to_thread.run_sync(ready)
        start = time.perf_counter()
        await start_turns(runtime, keys)

        async def feed(key: CallKey) -> None:
            await runtime.feed(_lifecycle(key))

        await each(keys, feed, FEEDERS)
        # Calls finish about in the order they were fed: waiting on the first unfinished one
        # looks at each call about once, where checking them all at every change would not.
        waiting = iter(keys)
        first = next(waiting, None)
        async for _ in runtime.changes():
            while first is not None and (row := runtime.ledger.row(first)) and row.outcome:
                first = next(waiting, None)
            if first is None:
                break
        elapsed = time.perf_counter() - start
        outcomes = {row.outcome for key in keys if (row := runtime.ledger.row(key))}
        if outcomes != {"completed"}:
            raise RuntimeError(f"runtimes: outcomes {outcomes}, every call completed expected")
        print(f"done {elapsed}", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        nursery.cancel_scope.cancel()
    return elapsed


def _runtime_child(url: str, process: int, calls: int, total: int) -> None:
    def ready() -> None:
        print("ready", flush=True)
        sys.stdin.readline()

    trio.run(_runtime_work, url, process, calls, total, ready)


@dataclass
class RuntimeRun:
    """What one run of runtime processes on one log did: its seconds and the log's events."""

    seconds: float
    events: int


def runtime_processes(target: Target, processes: int, calls: int) -> RuntimeRun:
    """Seconds from the parent's word until every runtime process has every call of its own
    completed, and the events the log gained meanwhile."""
    trio.run(_touch, target.url)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.postgres_log",
                "--runtime-child",
                target.url,
                str(number),
                str(calls // processes),
                str(calls),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for number in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a runtime process failed to open the log")
        before = trio.run(_head, target.url)
        start = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            assert child.stdout is not None
            if not child.stdout.readline().startswith("done"):
                raise RuntimeError("a runtime process failed while feeding or executing")
        elapsed = time.perf_counter() - start
        after = trio.run(_head, target.url)
    finally:
        for child in children:
            assert child.stdin is not None
            child.stdin.close()
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return RuntimeRun(elapsed, after - before)


# --- replay ----------------------------------------------------------------------------------


async def _fill(url: str, events: int) -> None:
    async with open_log(url) as log:
        for offset in range(0, events, PAGE):
            batch = []
            for number in range(offset, min(offset + PAGE, events)):
                key = _appender_key(0, number % APPENDERS)
                batch.append(NewEvent(stream=key.response_ref.stream, event=_event(key, number)))
            await log.append(batch)


async def _replay(url: str, events: int) -> float:
    async with open_log(url) as log:
        start = time.perf_counter()
        position = read = 1
        while True:
            page = await log.read(position, limit=PAGE)
            if not page:
                break
            read += len(page)
            position = page[-1].position + 1
        elapsed = time.perf_counter() - start
    if read - 1 != events:
        raise RuntimeError(f"replay: {read - 1} events read, {events} expected")
    return elapsed


def replay(target: Target, events: int) -> float:
    trio.run(_fill, target.url, events)
    return trio.run(_replay, target.url, events)


# --- the cases -------------------------------------------------------------------------------


@dataclass
class Case:
    key: str
    label: str
    kind: str
    count: int
    unit: str
    run: Callable[[Target], float | RuntimeRun]
    seconds: list[float] = field(default_factory=list)
    logged: list[int] = field(default_factory=list)
    """Per run, the events the log gained (runtime processes only)."""

    def record(self, result: float | RuntimeRun) -> None:
        if isinstance(result, RuntimeRun):
            self.seconds.append(result.seconds)
            self.logged.append(result.events)
        else:
            self.seconds.append(result)

    @property
    def rates(self) -> list[float]:
        return [self.count / seconds for seconds in self.seconds]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def event_rates(self) -> list[float]:
        if not self.logged:
            return []
        return [events / seconds for events, seconds in zip(self.logged, self.seconds, strict=True)]


def build_cases(events: int, calls: int, replay_events: int) -> list[Case]:
    cases = [
        Case(
            "sqlite_append_1",
            "SQLite, 1 process x 64 appenders",
            "sqlite",
            events,
            "events/s",
            functools.partial(append_in_process, events=events),
        )
    ]
    for processes in PROCESSES:
        count = events // processes * processes
        cases.append(
            Case(
                f"postgresql_append_{processes}",
                f"PostgreSQL, {processes} process{'es' if processes > 1 else ''} x 64 appenders",
                "postgresql",
                count,
                "events/s",
                functools.partial(append_processes, processes=processes, events=count),
            )
        )
    for kind, name in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        cases.append(
            Case(
                f"{kind}_ready",
                f"{name}, 1 runtime, calls made ready",
                kind,
                calls,
                "calls/s",
                functools.partial(ready_calls, calls=calls),
            )
        )
    cases.append(
        Case(
            "sqlite_runtimes_1",
            "SQLite, 1 runtime process, calls fed and executed",
            "sqlite",
            calls,
            "calls/s",
            functools.partial(runtime_processes, processes=1, calls=calls),
        )
    )
    for processes in PROCESSES:
        count = calls // processes * processes
        cases.append(
            Case(
                f"postgresql_runtimes_{processes}",
                f"PostgreSQL, {processes} runtime process{'es' if processes > 1 else ''},"
                " calls fed and executed",
                "postgresql",
                count,
                "calls/s",
                functools.partial(runtime_processes, processes=processes, calls=count),
            )
        )
    for kind, name in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        cases.append(
            Case(
                f"{kind}_replay",
                f"{name}, replay (read + decode, pages of 4,096)",
                kind,
                replay_events,
                "events/s",
                functools.partial(replay, events=replay_events),
            )
        )
    return cases


def ratios(cases: Sequence[Case]) -> dict[str, float]:
    rate = {case.key: case.median_rate for case in cases}
    return {
        "postgresql_2_vs_1_processes": rate["postgresql_append_2"] / rate["postgresql_append_1"],
        "postgresql_4_vs_1_processes": rate["postgresql_append_4"] / rate["postgresql_append_1"],
        "postgresql_1_vs_sqlite_append": rate["postgresql_append_1"] / rate["sqlite_append_1"],
        "postgresql_4_vs_sqlite_append": rate["postgresql_append_4"] / rate["sqlite_append_1"],
        "postgresql_vs_sqlite_ready": rate["postgresql_ready"] / rate["sqlite_ready"],
        "runtimes_2_vs_1": rate["postgresql_runtimes_2"] / rate["postgresql_runtimes_1"],
        "runtimes_4_vs_1": rate["postgresql_runtimes_4"] / rate["postgresql_runtimes_1"],
        "runtimes_1_vs_sqlite": rate["postgresql_runtimes_1"] / rate["sqlite_runtimes_1"],
        "runtimes_4_vs_sqlite": rate["postgresql_runtimes_4"] / rate["sqlite_runtimes_1"],
        "postgresql_vs_sqlite_replay": rate["postgresql_replay"] / rate["sqlite_replay"],
    }


RATIO_NAMES = {
    "postgresql_2_vs_1_processes": "PostgreSQL append, 2 processes / 1",
    "postgresql_4_vs_1_processes": "PostgreSQL append, 4 processes / 1",
    "postgresql_1_vs_sqlite_append": "PostgreSQL append, 1 process / SQLite",
    "postgresql_4_vs_sqlite_append": "PostgreSQL append, 4 processes / SQLite",
    "postgresql_vs_sqlite_ready": "PostgreSQL ready calls / SQLite",
    "runtimes_2_vs_1": "PostgreSQL calls fed and executed, 2 runtime processes / 1",
    "runtimes_4_vs_1": "PostgreSQL calls fed and executed, 4 runtime processes / 1",
    "runtimes_1_vs_sqlite": "PostgreSQL calls fed and executed, 1 runtime process / SQLite",
    "runtimes_4_vs_sqlite": "PostgreSQL calls fed and executed, 4 runtime processes / SQLite",
    "postgresql_vs_sqlite_replay": "PostgreSQL replay / SQLite",
}


def server_facts(server: str) -> dict[str, str]:
    with psycopg.connect(server, autocommit=True) as connection:
        facts = {}
        for setting in ("server_version", "synchronous_commit", "fsync", "shared_buffers"):
            row = connection.execute(f"SHOW {setting}").fetchone()
            facts[setting] = str(row[0]) if row else "?"
    return facts


def format_report(
    cases: Sequence[Case], computed: dict[str, float], facts: dict[str, Any], runs: int
) -> str:
    server = facts["server"]
    lines = [
        "PostgreSQL log beside SQLite",
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {platform.platform()};"
        f" PostgreSQL {server['server_version']}"
        f" (synchronous_commit={server['synchronous_commit']},"
        f" fsync={server['fsync']}, shared_buffers={server['shared_buffers']}) on the same machine",
        f"median of {runs} run(s)",
        "",
    ]
    width = max(len(case.label) for case in cases)
    lines.append(f"{'case':<{width}}  {'count':>7}  {'rate':>9}  unit      runs")
    lines.append("-" * (width + 40))
    for case in cases:
        per_run = " / ".join(f"{rate:,.0f}" for rate in case.rates)
        lines.append(
            f"{case.label:<{width}}  {case.count:>7,}  {case.median_rate:>9,.0f}"
            f"  {case.unit:<8}  {per_run}"
        )
    lines.append("")
    lines.append("Runtime processes, events the log gained per second (medians; runs):")
    for case in cases:
        if case.logged:
            per_run = " / ".join(f"{rate:,.0f}" for rate in case.event_rates)
            median = statistics.median(case.event_rates)
            lines.append(f"  {case.label:<{width}}  {median:>9,.0f} events/s  {per_run}")
    lines.append("")
    lines.append("Ratios (medians):")
    name_width = max(len(name) for name in RATIO_NAMES.values())
    for key, value in computed.items():
        lines.append(f"  {RATIO_NAMES[key]:<{name_width}}  {value:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--child"]:
        url, process, events = arguments[1:4]
        _child(url, int(process), int(events))
        return 0
    if arguments[:1] == ["--runtime-child"]:
        url, process, calls, all_calls = arguments[1:5]
        _runtime_child(url, int(process), int(calls), int(all_calls))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.postgres_log", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--url", default=os.environ.get("INERT_BENCH_POSTGRESQL", DEFAULT_URL), help="the server"
    )
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS, help="events per append case")
    parser.add_argument(
        "--calls", type=int, default=DEFAULT_CALLS, help="calls per ready and runtimes case"
    )
    parser.add_argument(
        "--replay-events", type=int, default=DEFAULT_REPLAY_EVENTS, help="events per replay case"
    )
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per case")
    parser.add_argument("--json", action="store_true", help="print JSON (the table to stderr)")
    args = parser.parse_args(arguments)
    if min(args.events, args.calls, args.replay_events, args.runs) < 1 or args.events < 4:
        parser.error("every count must be positive, and --events at least 4")

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "server": server_facts(args.url),
    }
    cases = build_cases(args.events, args.calls, args.replay_events)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="inert-bench-") as name:
        for run in range(args.runs):
            for case in cases:
                target = Target(case.kind, args.url, Path(name))
                try:
                    case.record(case.run(target))
                finally:
                    target.remove()
                print(
                    f"run {run + 1}/{args.runs} {case.label}: {case.rates[-1]:,.0f} {case.unit}",
                    file=sys.stderr,
                )
    total = time.perf_counter() - started
    computed = ratios(cases)
    report = format_report(cases, computed, facts, args.runs) + f"\n\nmeasured in {total:.1f} s"
    if args.json:
        print(report, file=sys.stderr)
        document = {
            "facts": facts,
            "runs": args.runs,
            "seconds_total": total,
            "results": [
                {
                    "key": case.key,
                    "label": case.label,
                    "count": case.count,
                    "unit": case.unit,
                    "seconds": case.seconds,
                    "rates": case.rates,
                    "median_rate": case.median_rate,
                    "events_logged": case.logged,
                    "event_rates": case.event_rates,
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
