"""The PostgreSQL log: append throughput from 1, 2 and 4 processes, ready calls, calls fed and
executed by 1, 2 and 4 runtime processes, replay; beside SQLite in the same run.

Run with ``python -m benchmarks.postgres_log [--url URL] [--case CASE] [--processes N ...]
[--events N] [--calls N] [--replay-events N] [--runs R] [--json]``. The server is ``--url``
(default: env ``INERT_BENCH_POSTGRESQL``, else ``postgresql://postgres@127.0.0.1:5432/test``);
every run writes to a fresh schema, dropped afterwards. SQLite runs write fresh files (WAL,
``synchronous=FULL``) in a temporary directory. Cases are repeated ``--runs`` times with the
runs interleaved; medians are reported. ``--case`` measures one case alone (``runtimes``: its
PostgreSQL runs, at each of ``--processes``, 1 2 4 8 by default, and one process on SQLite
beside); with ``--json`` it prints one JSON object per line and process count (and one for
SQLite, ``"kind": "sqlite"``).

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
3. ``runtimes``: ``--calls`` calls split evenly between 1, 2, 4 or 8 runtime processes on one
   database (this module run with ``--runtime-child``). On a log of ``--partitions`` partitions
   (16 by default; more than 1), each process is an ``open_partitioned_runtime(process=...)``
   with the library's defaults otherwise (retention and snapshots included); once every process
   is alive and folds the partitions assigned to it, each starts turns of conversations of its
   own partitions (as a load balancer sending each conversation to its partition's process
   would), feeds each of its calls as one batch as in ``ready`` (256 tasks), and claims and
   completes the calls of the partitions it folds. With ``--partitions 1``, each process is an
   ``open_runtime(process=...)`` folding the whole log, and claims and completes every call it
   sees ready, its own or another process's (the first claim wins; the others are refused).
   Timed by the parent from its word until every process has folded every call's outcome (of its
   own calls, on a partitioned log) and ``settle()`` has returned (its redactions and snapshot
   written), and no backend of the log's database is active on the server. Per call: the events
   the log gained; the CPU time of the runtime processes (each its own, from its word to its
   end) and of the server's processes (read from ``/proc``: the postmaster's children alive, and
   those that exited through the postmaster's children's times; a server on this machine only,
   and all of its databases: give the case a database of its own); the transactions and sessions
   the server counted in the database (``pg_stat_database``, read ``STATS_FLUSH_WAIT`` after the
   processes are ready, as the server reports an idle backend's counts up to 10 s late, and
   once every session of the runtimes has ended); and per process, the log rows it read
   (``Log.rows_read``, of every partition). Beside: one runtime process on SQLite (no server
   figures).
4. ``replay``: a log of ``--replay-events`` events (appended in batches of 4,096 before the
   clock starts), read back page by page (``log.read(position, limit=4096)``), every event
   decoded. PostgreSQL beside SQLite.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import resource
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
    CALLS_PER_TURN,
    PRINCIPAL,
    TENANT,
    TOOL,
    call_key,
    check_phases,
    complete_every_ready_call,
    each,
    every_outcome,
    limits_for,
    start_turns,
)
from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    Phase,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    TurnRef,
    open_log,
    open_partitioned_runtime,
    open_runtime,
)
from inert.log import NewEvent
from inert.runtime._assignment import owned_by

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_EVENTS = 20_000
DEFAULT_CALLS = 1_000
DEFAULT_REPLAY_EVENTS = 100_000
DEFAULT_RUNS = 3
DEFAULT_PARTITIONS = 16
STATS_FLUSH_WAIT = 11.0
"""Seconds between the runtime processes' start-up and the first reading of the server's
counts: PostgreSQL reports an idle backend's counts up to 10 s late."""
"""Two partitions a process at the most processes measured (8): a process folds one runtime per
partition it takes, and each costs it commits of its own (see RESULTS.md)."""
APPENDERS = 64
PROCESSES = (1, 2, 4)
RUNTIME_PROCESSES = (1, 2, 4, 8)
FEEDERS = 256
LEASE_TIME = 60.0
"""Long enough that a runtime process busy on a shared CPU is never taken for dead."""
IDLE_TIMEOUT = 120.0
"""Seconds the parent waits for the server's backends of the log's database to go idle."""
PAGE = 4096
ARGUMENT_DATA = b'{"query": "weather in Lisbon", "'
PARTS = (b'{"query": "', b"weather in ", b"Lisbon", b'"}')


# --- logs ------------------------------------------------------------------------------------


def postgres_url(server: str, schema: str, partitions: int = 1) -> str:
    parts = urlsplit(server)
    options: dict[str, object] = {"schema": schema}
    if partitions > 1:
        options["partitions"] = partitions
    query = "&".join(filter(None, [parts.query, urlencode(options)]))
    return parts._replace(query=query).geturl()


class Target:
    """Where one run writes: a fresh PostgreSQL schema or a fresh SQLite file."""

    def __init__(self, kind: str, server: str, directory: Path, partitions: int = 1) -> None:
        self.kind = kind
        self.server = server
        self.partitions = partitions
        self.name = f"bench_{uuid.uuid4().hex[:12]}"
        self.path = directory / f"{self.name}.db"

    @property
    def url(self) -> str:
        if self.kind == "postgresql":
            return postgres_url(self.server, self.name, self.partitions)
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
    """The events of the log, in all its partitions."""
    async with open_log(url) as log:
        return sum([await log.partition(n).head() for n in {0, *log.call_partitions()}])


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
) -> RuntimeChildRun:
    """Feed this process's calls and execute ready calls (anyone's) until every call of every
    process has its outcome here, then until ``settle()`` returns (its redactions and snapshot
    written): what this took from ``ready`` returning, in seconds and CPU seconds, and the log
    rows it read meanwhile. Serves claims of its turns until its standard input closes."""
    keys = [call_key(index) for index in range(process * calls, (process + 1) * calls)]
    every_key = [call_key(index) for index in range(total)]
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
        nursery.start_soon(complete_every_ready_call, runtime, f"bench-{process}")
        await trio.to_thread.run_sync(ready)
        cpu = _cpu_seconds()
        rows = runtime.log.rows_read
        start = time.perf_counter()
        await start_turns(runtime, keys)

        async def feed(key: CallKey) -> None:
            await runtime.feed(_lifecycle(key))

        await each(keys, feed, FEEDERS)
        await every_outcome(runtime, every_key)
        await runtime.settle()
        result = RuntimeChildRun(
            time.perf_counter() - start, _cpu_seconds() - cpu, runtime.log.rows_read - rows
        )
        outcomes = {row.outcome for key in keys if (row := runtime.ledger.row(key))}
        if outcomes != {"completed"}:
            raise RuntimeError(f"runtimes: outcomes {outcomes}, every call completed expected")
        print(f"done {result.seconds} {result.cpu_seconds} {result.rows_read}", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        nursery.cancel_scope.cancel()
    return result


async def _partitioned_work(
    url: str, process: int, calls: int, total: int, *, processes: int, ready: Callable[[], None]
) -> RuntimeChildRun:
    """``_runtime_work`` on a partitioned log: once every process is alive and this one folds
    the partitions assigned to it, feed ``calls`` calls of conversations of those partitions
    (a load balancer that sends each conversation to its partition's process) and execute the
    calls this process folds, until each of its calls has its outcome and ``settle()`` returns.
    """
    async with (
        open_partitioned_runtime(
            log=url,
            create=True,
            process=f"bench-{process}",
            tools=[TOOL],
            limits=limits_for(total),
            lease_time=LEASE_TIME,
        ) as runtime,
        trio.open_nursery() as nursery,
    ):

        def settled() -> bool:
            alive = runtime.alive()
            assignment = runtime.assignment()
            return (
                len(alive) == processes
                and set(assignment.values()) == set(alive)
                and runtime.partitions_owned() == owned_by(assignment, runtime.process)
            )

        with trio.fail_after(IDLE_TIMEOUT):
            while not settled():
                with trio.move_on_after(0.05):
                    await runtime.changed()
        mine = set(runtime.partitions_owned())
        conversations = (
            index
            for index in range(process * 1_000_000, (process + 1) * 1_000_000)
            if runtime.partition_of(TENANT, f"conversation-{index}") in mine
        )
        keys = [
            call_key(conversation * CALLS_PER_TURN + call)
            for conversation in itertools.islice(conversations, -(-calls // CALLS_PER_TURN))
            for call in range(CALLS_PER_TURN)
        ][:calls]

        nursery.start_soon(complete_every_ready_call, runtime, f"bench-{process}")
        await trio.to_thread.run_sync(ready)
        cpu = _cpu_seconds()
        rows = runtime.rows_read
        start = time.perf_counter()

        async def begin(turn: TurnRef) -> None:
            await runtime.start_turn(
                tenant=turn.tenant,
                conversation=turn.conversation,
                turn=turn.turn,
                principal=PRINCIPAL,
            )

        await each(list(dict.fromkeys(key.turn_ref for key in keys)), begin, FEEDERS)

        async def feed(key: CallKey) -> None:
            await runtime.feed(_lifecycle(key))

        await each(keys, feed, FEEDERS)
        waiting = iter(keys)
        first = next(waiting, None)
        while first is not None:
            while first is not None and (row := runtime.row(first)) and row.outcome:
                first = next(waiting, None)
            if first is not None:
                await runtime.changed()
        await runtime.settle()
        result = RuntimeChildRun(
            time.perf_counter() - start, _cpu_seconds() - cpu, runtime.rows_read - rows
        )
        outcomes = {row.outcome for key in keys if (row := runtime.row(key))}
        if outcomes != {"completed"}:
            raise RuntimeError(f"runtimes: outcomes {outcomes}, every call completed expected")
        print(f"done {result.seconds} {result.cpu_seconds} {result.rows_read}", flush=True)
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        nursery.cancel_scope.cancel()
    return result


def _cpu_seconds() -> float:
    """The CPU time (user and system) of this process so far, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _runtime_child(url: str, process: int, calls: int, total: int, processes: int) -> None:
    def ready() -> None:
        print("ready", flush=True)
        sys.stdin.readline()

    if "partitions=" in url:
        trio.run(
            functools.partial(
                _partitioned_work, url, process, calls, total, processes=processes, ready=ready
            )
        )
    else:
        trio.run(_runtime_work, url, process, calls, total, ready)


@dataclass
class RuntimeChildRun:
    """What one runtime process reports: its seconds, its CPU seconds and the rows it read."""

    seconds: float
    cpu_seconds: float
    rows_read: int


@dataclass
class RuntimeRun:
    """What one run of runtime processes on one log did."""

    seconds: float
    events: int
    """The events the log gained."""
    log_rows: int
    """The rows the log holds at the end."""
    cpu_seconds: float
    """CPU seconds of the runtime processes and (PostgreSQL) of the server's processes."""
    server_cpu_seconds: float
    """Of ``cpu_seconds``, those of the server's processes (0 for SQLite)."""
    rows_read: list[int]
    """Per runtime process, the log rows it read."""
    transactions: int
    """Transactions the server counted in the log's database (PostgreSQL; 0 for SQLite)."""
    sessions: int
    """Sessions the server counted in the log's database (PostgreSQL; 0 for SQLite)."""


class ServerProbe:
    """Reads what a PostgreSQL server did for one database: its processes' CPU time (through
    ``/proc``, so only for a server on this machine), its transactions and sessions, and
    whether a backend of it is busy. It asks on a connection to another database (the
    server's ``postgres`` database), so that its own questions count in none of the figures."""

    def __init__(self, url: str) -> None:
        self.database = urlsplit(url).path.lstrip("/")
        maintenance = urlsplit(url)._replace(path="/postgres", query="").geturl()
        self.connection = psycopg.connect(maintenance, autocommit=True)
        row = self.connection.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        self.postmaster = _stat(row[0])[0]
        self.ticks = os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        self.connection.close()

    def cpu_seconds(self) -> float:
        """User and system time of the server's processes so far: the postmaster, each of its
        children alive now, and those that exited (the postmaster's children's times)."""
        ticks = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                fields = _stat(int(entry.name))
            except (OSError, IndexError):
                continue
            if fields[0] == self.postmaster:
                ticks += fields[10] + fields[11]
        postmaster = _stat(self.postmaster)
        return (ticks + sum(postmaster[10:14])) / self.ticks

    def counts(self) -> tuple[int, int]:
        """Transactions (committed and rolled back) and sessions of the database so far."""
        row = self.connection.execute(
            "SELECT xact_commit + xact_rollback, sessions FROM pg_stat_database WHERE datname = %s",
            (self.database,),
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def backends(self, *, active: bool) -> int:
        """The backends of the database (the active ones only, if ``active``)."""
        row = self.connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type ="
            " 'client backend' AND (NOT %s OR state = 'active')",
            (self.database, active),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def wait_until(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + IDLE_TIMEOUT
        while not done():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server's backends of {self.database} {what}")
            time.sleep(0.005)


def _stat(pid: int) -> list[int]:
    """The numeric fields of ``/proc/<pid>/stat`` after the command's name and state: [ppid,
    pgrp, ..., utime (10), stime (11), cutime (12), cstime (13), ...]."""
    with open(f"/proc/{pid}/stat") as file:
        text = file.read()
    return [int(field) for field in text[text.rindex(")") + 2 :].split()[1:20]]


def runtime_processes(target: Target, processes: int, calls: int) -> RuntimeRun:
    """Seconds from the parent's word until every runtime process has folded every call's
    outcome and settled, and (PostgreSQL) the server's backends of the database are idle; and
    what the processes and the server did meanwhile."""
    trio.run(_touch, target.url)
    probe = ServerProbe(target.server) if target.kind == "postgresql" else None
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
                str(processes),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for number in range(processes)
    ]
    reports: list[RuntimeChildRun] = []
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a runtime process failed to open the log")
        before = trio.run(_head, target.url)
        if probe is not None:
            probe.wait_until(lambda: probe.backends(active=True) == 0, "stayed busy")
            # A backend reports its counts to pg_stat_database at most once a second while
            # busy and, idle, up to 10 s later (PGSTAT_IDLE_INTERVAL): without this wait the
            # processes' start-up would be counted as the case's.
            time.sleep(STATS_FLUSH_WAIT)
            counts = probe.counts()
            server_cpu = probe.cpu_seconds()
        start = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            assert child.stdout is not None
            line = child.stdout.readline().split()
            if line[:1] != ["done"]:
                raise RuntimeError("a runtime process failed while feeding or executing")
            reports.append(RuntimeChildRun(float(line[1]), float(line[2]), int(line[3])))
        if probe is not None:
            probe.wait_until(lambda: probe.backends(active=True) == 0, "stayed busy")
        elapsed = time.perf_counter() - start
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
    transactions = sessions = 0
    cpu = sum(report.cpu_seconds for report in reports)
    server = 0.0
    if probe is not None:
        try:
            # Counted once every session of the runtimes has ended, which reports its figures.
            probe.wait_until(lambda: probe.backends(active=False) == 0, "stayed open")
            after = probe.counts()
            transactions, sessions = after[0] - counts[0], after[1] - counts[1]
            server = probe.cpu_seconds() - server_cpu
            cpu += server
        finally:
            probe.close()
    # Read after the counts: this reader's own session is not among them.
    after_head = trio.run(_head, target.url)
    return RuntimeRun(
        seconds=elapsed,
        events=after_head - before,
        log_rows=after_head,
        cpu_seconds=cpu,
        server_cpu_seconds=server,
        rows_read=[report.rows_read for report in reports],
        transactions=transactions,
        sessions=sessions,
    )


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
    group: str
    """The ``--case`` it belongs to."""
    count: int
    unit: str
    run: Callable[[Target], float | RuntimeRun]
    processes: int = 1
    partitions: int = 1
    """The partitions of calls of the log the case writes."""
    seconds: list[float] = field(default_factory=list)
    runtime_runs: list[RuntimeRun] = field(default_factory=list)
    """Per run, what the runtime processes did (runtime processes only)."""

    def record(self, result: float | RuntimeRun) -> None:
        if isinstance(result, RuntimeRun):
            self.seconds.append(result.seconds)
            self.runtime_runs.append(result)
        else:
            self.seconds.append(result)

    @property
    def rates(self) -> list[float]:
        return [self.count / seconds for seconds in self.seconds]

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def logged(self) -> list[int]:
        return [run.events for run in self.runtime_runs]

    @property
    def event_rates(self) -> list[float]:
        return [run.events / run.seconds for run in self.runtime_runs]

    def per_call(self) -> dict[str, Any]:
        """The medians of a runtimes case, per call where that is what they measure."""
        runs = self.runtime_runs

        def median(of: Callable[[RuntimeRun], float]) -> float:
            return statistics.median(of(run) for run in runs)

        return {
            "case": "runtimes",
            "kind": self.kind,
            "processes": self.processes,
            "partitions": self.partitions,
            "calls": self.count,
            "runs": len(runs),
            "calls_per_s": self.median_rate,
            "events_per_call": median(lambda run: run.events / self.count),
            "cpu_s_per_call": median(lambda run: run.cpu_seconds / self.count),
            "server_cpu_s_per_call": median(lambda run: run.server_cpu_seconds / self.count),
            "rows_read_per_process": median(lambda run: statistics.mean(run.rows_read)),
            "log_rows": median(lambda run: run.log_rows),
            "transactions_per_call": median(lambda run: run.transactions / self.count),
            "sessions_per_call": median(lambda run: run.sessions / self.count),
            "calls_per_s_runs": self.rates,
            "cpu_s_per_call_runs": [run.cpu_seconds / self.count for run in runs],
        }


CASES = ("append", "ready", "runtimes", "replay")


def build_cases(
    events: int,
    calls: int,
    replay_events: int,
    processes: Sequence[int] = RUNTIME_PROCESSES,
    partitions: int = DEFAULT_PARTITIONS,
) -> list[Case]:
    cases = [
        Case(
            "sqlite_append_1",
            "SQLite, 1 process x 64 appenders",
            "sqlite",
            "append",
            events,
            "events/s",
            functools.partial(append_in_process, events=events),
        )
    ]
    for number in PROCESSES:
        count = events // number * number
        cases.append(
            Case(
                f"postgresql_append_{number}",
                f"PostgreSQL, {number} process{'es' if number > 1 else ''} x 64 appenders",
                "postgresql",
                "append",
                count,
                "events/s",
                functools.partial(append_processes, processes=number, events=count),
                number,
            )
        )
    for kind, name in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        cases.append(
            Case(
                f"{kind}_ready",
                f"{name}, 1 runtime, calls made ready",
                kind,
                "ready",
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
            "runtimes",
            calls,
            "calls/s",
            functools.partial(runtime_processes, processes=1, calls=calls),
        )
    )
    for number in processes:
        count = calls // number * number
        cases.append(
            Case(
                f"postgresql_runtimes_{number}",
                f"PostgreSQL, {number} runtime process{'es' if number > 1 else ''},"
                f" {partitions} partition{'s' if partitions > 1 else ''}, calls fed and executed",
                "postgresql",
                "runtimes",
                count,
                "calls/s",
                functools.partial(runtime_processes, processes=number, calls=count),
                number,
                partitions,
            )
        )
    for kind, name in (("sqlite", "SQLite"), ("postgresql", "PostgreSQL")):
        cases.append(
            Case(
                f"{kind}_replay",
                f"{name}, replay (read + decode, pages of 4,096)",
                kind,
                "replay",
                replay_events,
                "events/s",
                functools.partial(replay, events=replay_events),
            )
        )
    return cases


RATIOS = {
    "postgresql_2_vs_1_processes": (
        "PostgreSQL append, 2 processes / 1",
        "postgresql_append_2",
        "postgresql_append_1",
    ),
    "postgresql_4_vs_1_processes": (
        "PostgreSQL append, 4 processes / 1",
        "postgresql_append_4",
        "postgresql_append_1",
    ),
    "postgresql_1_vs_sqlite_append": (
        "PostgreSQL append, 1 process / SQLite",
        "postgresql_append_1",
        "sqlite_append_1",
    ),
    "postgresql_4_vs_sqlite_append": (
        "PostgreSQL append, 4 processes / SQLite",
        "postgresql_append_4",
        "sqlite_append_1",
    ),
    "postgresql_vs_sqlite_ready": (
        "PostgreSQL ready calls / SQLite",
        "postgresql_ready",
        "sqlite_ready",
    ),
    "runtimes_2_vs_1": (
        "PostgreSQL calls fed and executed, 2 runtime processes / 1",
        "postgresql_runtimes_2",
        "postgresql_runtimes_1",
    ),
    "runtimes_4_vs_1": (
        "PostgreSQL calls fed and executed, 4 runtime processes / 1",
        "postgresql_runtimes_4",
        "postgresql_runtimes_1",
    ),
    "runtimes_1_vs_sqlite": (
        "PostgreSQL calls fed and executed, 1 runtime process / SQLite",
        "postgresql_runtimes_1",
        "sqlite_runtimes_1",
    ),
    "runtimes_4_vs_sqlite": (
        "PostgreSQL calls fed and executed, 4 runtime processes / SQLite",
        "postgresql_runtimes_4",
        "sqlite_runtimes_1",
    ),
    "postgresql_vs_sqlite_replay": (
        "PostgreSQL replay / SQLite",
        "postgresql_replay",
        "sqlite_replay",
    ),
}
"""Each ratio: its name, and the cases whose median rates it divides."""


def ratios(cases: Sequence[Case]) -> dict[str, float]:
    """The ratios of the cases measured."""
    rate = {case.key: case.median_rate for case in cases}
    return {
        key: rate[over] / rate[under]
        for key, (_, over, under) in RATIOS.items()
        if over in rate and under in rate
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
    measured = [case for case in cases if case.runtime_runs]
    if measured:
        lines.append("")
        lines.append(
            "Runtime processes, per call (medians): events, CPU ms (runtimes and server),"
            " transactions, sessions; log rows read per process"
        )
        for case in measured:
            figures = case.per_call()
            lines.append(
                f"  {case.label:<{width}}  {figures['events_per_call']:5.1f} events"
                f"  {figures['cpu_s_per_call'] * 1000:6.2f} ms"
                f"  {figures['transactions_per_call']:5.2f} xact"
                f"  {figures['sessions_per_call']:5.2f} sessions"
                f"  {figures['rows_read_per_process']:9,.0f} rows read"
            )
    if computed:
        lines.append("")
        lines.append("Ratios (medians):")
        name_width = max(len(name) for name, _, _ in RATIOS.values())
        for key, value in computed.items():
            lines.append(f"  {RATIOS[key][0]:<{name_width}}  {value:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--child"]:
        url, process, events = arguments[1:4]
        _child(url, int(process), int(events))
        return 0
    if arguments[:1] == ["--runtime-child"]:
        url, process, calls, all_calls, processes = arguments[1:6]
        _runtime_child(url, int(process), int(calls), int(all_calls), int(processes))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.postgres_log", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--url", default=os.environ.get("INERT_BENCH_POSTGRESQL", DEFAULT_URL), help="the server"
    )
    parser.add_argument(
        "--case",
        choices=CASES,
        help="measure this case only (runtimes: on PostgreSQL, and one process on SQLite)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        nargs="+",
        default=list(RUNTIME_PROCESSES),
        help="the runtime process counts of the runtimes case (default: 1 2 4 8)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        help="the partitions of calls of the PostgreSQL log of the runtimes case (1: a log"
        " every process folds whole, open_runtime; more: open_partitioned_runtime)",
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
    if (
        min(args.events, args.calls, args.replay_events, args.runs, *args.processes) < 1
        or args.events < 4
    ):
        parser.error("every count must be positive, and --events at least 4")

    facts: dict[str, Any] = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "server": server_facts(args.url),
    }
    cases = build_cases(
        args.events, args.calls, args.replay_events, args.processes, args.partitions
    )
    if args.case is not None:
        cases = [case for case in cases if case.group == args.case]
    if args.case == "runtimes":
        # One process on SQLite beside, the floor of the PostgreSQL figures (same run).
        cases = [
            case for case in cases if case.kind == "postgresql" or case.key == "sqlite_runtimes_1"
        ]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="inert-bench-") as name:
        for run in range(args.runs):
            for case in cases:
                target = Target(case.kind, args.url, Path(name), case.partitions)
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
    if not args.json:
        print(report)
        return 0
    print(report, file=sys.stderr)
    if args.case == "runtimes":
        # One line per process count, for tools that compare runs.
        for case in cases:
            print(json.dumps(case.per_call()))
        return 0
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
                **({"per_call": case.per_call()} if case.runtime_runs else {}),
            }
            for case in cases
        ],
        "ratios": computed,
    }
    print(json.dumps(document, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
