"""What the PostgreSQL backend promises beyond the shared contract: writers in several
processes, commit order, notifications, its schema and its URL."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio
from locations import TESTS
from postgres_appender import SHARED_STREAM, TASKS
from postgres_support import connect, fresh_schema, log_url, new_schema, server_url

from inert import (
    ArgumentsAppended,
    CallKey,
    CallOpened,
    ConfigurationError,
    LogDamaged,
    LogError,
    LogNotFound,
    RecordedEvent,
    open_log,
    open_runtime,
)
from inert.log import (
    NewEvent,
    PostgresLog,
    SnapshotPayload,
    StoredSnapshot,
    _postgres,
    _postgres_sql,
)
from inert.log._group import AppendRequest, CommittedGroup
from inert.log._sealing import key_name

KEY = CallKey(tenant="t", conversation="c", turn="1", response="r", item="i", call="x")


def new(event_id: str, stream: str = "s") -> NewEvent:
    return NewEvent(stream=stream, event_id=event_id, event=ArgumentsAppended(key=KEY, data=b"{}"))


def unsealed(event_id: str, stream: str = "s") -> NewEvent:
    """An event whose payload no log seals (it holds no argument bytes): one an older schema
    could hold as a newer one does."""
    return NewEvent(stream=stream, event_id=event_id, event=CallOpened(key=KEY, tool="t"))


def shape(events: list[RecordedEvent]) -> list[tuple[int, str]]:
    return [(e.position, e.event_id) for e in events]


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def query(sql: str, *parameters: object) -> list[tuple[Any, ...]]:
    with connect() as connection:
        cursor = connection.execute(sql, parameters)
        return cursor.fetchall() if cursor.description is not None else []


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for a condition of the server, which sends no event when it becomes true."""
    for _ in range(200):
        if condition():
            return
        await trio.sleep(0.05)
    pytest.fail(f"still not true after 10 s: {what}")


# --- several writers ---------------------------------------------------------------------

BATCHES = 60


def _start_appender(url: str, run: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            str(TESTS / "postgres_appender.py"),
            url,
            run,
            str(BATCHES),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def _expect_line(child: subprocess.Popen[str], expected: str) -> None:
    assert child.stdout is not None
    line = await trio.to_thread.run_sync(child.stdout.readline)
    if line.strip() != expected:
        child.kill()
        _, errors = child.communicate(timeout=30)
        pytest.fail(f"appender said {line!r} instead of {expected!r}: {errors}")


@pytest.mark.slow
async def test_writers_in_two_processes_interleave_without_gaps(schema: str) -> None:
    """Two processes appending at once give one order without gaps that a subscriber in a
    third sees whole, in order, each event once, with every stream's versions consecutive."""
    runs = ("a", "b")
    total = len(runs) * TASKS * BATCHES * 2
    received: list[RecordedEvent] = []
    async with PostgresLog.open(server_url(), schema=schema, poll_interval=0.5) as log:
        children = [_start_appender(log_url(schema), run) for run in runs]
        try:
            for child in children:
                await _expect_line(child, "ready")

            async def subscriber() -> None:
                async for recorded in log.subscribe():
                    received.append(recorded)
                    if len(received) == total:
                        return

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(subscriber)
                    for child in children:
                        assert child.stdin is not None
                        child.stdin.write("go\n")
                        child.stdin.flush()
                for child in children:
                    await _expect_line(child, "done")
        finally:
            for child in children:
                child.kill()
                child.communicate(timeout=30)
        stored = await log.read()
    assert [e.position for e in received] == list(range(1, total + 1))
    assert shape(received) == shape(stored)
    expected_ids = {
        f"{run}-{task}-{number}-{part}"
        for run in runs
        for task in range(TASKS)
        for number in range(BATCHES)
        for part in range(2)
    }
    assert {e.event_id for e in received} == expected_ids
    versions: dict[str, list[int]] = {}
    for recorded in received:
        versions.setdefault(recorded.stream, []).append(recorded.version)
    assert versions[SHARED_STREAM] == list(range(1, total // 2 + 1))
    for run in runs:
        for task in range(TASKS):
            assert versions[f"{run}-{task}"] == list(range(1, BATCHES + 1))
    writers = [e.event_id[0] for e in received]
    switches = sum(1 for before, after in itertools.pairwise(writers) if before != after)
    assert switches > 2, "the two processes did not append at the same time"


class HeldLog(PostgresLog):
    """Keeps the transaction of each group open after writing it, until ``release`` is set."""

    def __init__(self, conninfo: str, **options: Any) -> None:
        super().__init__(conninfo, **options)
        self.written = threading.Event()
        self.release = threading.Event()

    def _write_group(self, connection: Any, group: Any) -> Any:
        outcomes = super()._write_group(connection, group)
        self.written.set()
        self.release.wait(30)
        return outcomes


class RacedLog(PostgresLog):
    """Has another writer make the keys of its first group's rows while the group is written,
    before the group's commit makes them."""

    def __init__(self, conninfo: str, **options: Any) -> None:
        super().__init__(conninfo, **options)
        self.attempts = 0

    def _write_group(self, connection: Any, group: Any) -> Any:
        written = super()._write_group(connection, group)
        self.attempts += 1
        if self.attempts == 1:
            names = {
                key_name(record.event_type, record.call)
                for request in group
                for record in request.records
                if record.call is not None
            }
            for name in sorted(names):
                query(
                    f"INSERT INTO {self.schema}.payload_keys (name, key) VALUES (%s, %s)",
                    name,
                    bytes(32),
                )
        return written


async def test_a_group_whose_keys_another_writer_made_meanwhile_seals_with_those(
    schema: str,
) -> None:
    """A key made by another writer while a group is written breaks the group's commit; the
    group is written again, sealed under that key, once, and reads back."""
    key = CallKey(tenant="t", conversation="c", turn="u", response="r", item="i", call="a")
    fragment = ArgumentsAppended(key=key, data=b'{"pin": "4821"}', offset=0)
    async with RacedLog.open(server_url(), schema=schema) as log:
        assert isinstance(log, RacedLog)
        appended = await log.append(
            [NewEvent(stream=key.response_ref.stream, event=fragment, event_id="f1")]
        )
        assert appended == [1]
        assert log.attempts == 2
        assert [(e.event_id, e.event) for e in await log.read()] == [("f1", fragment)]
    [(key_id, made)] = query(f"SELECT key_id, key FROM {schema}.payload_keys")
    assert bytes(made) == bytes(32)
    assert query(f"SELECT key_id FROM {schema}.events") == [(key_id,)]


async def test_an_append_that_commits_late_is_never_skipped(schema: str) -> None:
    """While one writer's transaction is open, another writer's append waits behind it: no
    reader sees the later position first, and both land in commit order."""
    url = server_url()
    seen: list[str] = []
    positions: dict[str, list[int]] = {}
    async with (
        HeldLog.open(url, schema=schema) as held,
        PostgresLog.open(url, schema=schema, poll_interval=0.1) as other,
    ):
        assert isinstance(held, HeldLog)

        async def append(log: PostgresLog, event_id: str) -> None:
            positions[event_id] = await log.append([new(event_id)])

        async def subscriber() -> None:
            async for recorded in other.subscribe():
                seen.append(recorded.event_id)
                if len(seen) == 2:
                    return

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(subscriber)
                nursery.start_soon(append, held, "late")
                await trio.to_thread.run_sync(held.written.wait)
                nursery.start_soon(append, other, "early")
                # Real time on purpose: the server, not Trio, decides when the other commits.
                await trio.sleep(0.5)
                assert positions == {}
                assert seen == []
                assert await other.head() == 0
                held.release.set()
        assert positions == {"late": [1], "early": [2]}
        assert seen == ["late", "early"]


async def test_a_writer_stalled_in_its_transaction_is_ended_by_the_server(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer that stops while it holds the head's lock holds up the others only until the
    server ends its session: the other one lands first, and the stalled append, tried again on
    a new connection, lands once after it."""
    monkeypatch.setattr(_postgres, "STALLED_TRANSACTION_TIMEOUT", 0.3)
    url = server_url()
    outcomes: dict[str, object] = {}
    async with (
        HeldLog.open(url, schema=schema) as held,
        PostgresLog.open(url, schema=schema) as other,
    ):
        assert isinstance(held, HeldLog)

        other_landed = trio.Event()

        async def append(log: PostgresLog, event_id: str) -> None:
            try:
                outcomes[event_id] = await log.append([new(event_id)])
            except LogError as error:
                outcomes[event_id] = error
            if log is other:
                other_landed.set()

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(append, held, "stalled")
                await trio.to_thread.run_sync(held.written.wait)
                nursery.start_soon(append, other, "other")
                # Lands while the stalled writer still waits to be released.
                await other_landed.wait()
                held.release.set()
        assert outcomes == {"other": [1], "stalled": [2]}
        assert shape(await other.read()) == [(1, "other"), (2, "stalled")]


# --- notifications -----------------------------------------------------------------------


@pytest.mark.parametrize("heard_first", [False, True])
async def test_a_subscriber_that_took_its_own_appends_is_woken_for_another_writers_next(
    schema: str, heard_first: bool
) -> None:
    """After the events its own log committed, a subscriber gets what another writer appended
    next long before its poll interval, whether the notification came before or after it took
    its own."""
    url = server_url()
    async with (
        PostgresLog.open(url, schema=schema, poll_interval=600) as reader,
        PostgresLog.open(url, schema=schema) as writer,
    ):
        subscription = reader.subscribe()
        await reader.append([new("e1")])
        with trio.fail_after(10):
            if heard_first:
                told = reader._appended
                await writer.append([new("e2")])
                await told.wait()
                assert reader._known_head == 2
                assert (await subscription.__anext__()).event_id == "e1"
            else:
                assert (await subscription.__anext__()).event_id == "e1"
                await writer.append([new("e2")])
            assert (await subscription.__anext__()).event_id == "e2"


async def test_appends_of_another_writer_wake_a_subscriber_by_notification(
    schema: str,
) -> None:
    """Another writer's append reaches a subscriber long before its poll interval."""
    url = server_url()
    async with (
        PostgresLog.open(url, schema=schema, poll_interval=600) as watching,
        PostgresLog.open(url, schema=schema) as writing,
    ):
        subscription = watching.subscribe()
        async with trio.open_nursery() as nursery:

            async def append_later() -> None:
                await trio.testing.wait_all_tasks_blocked()
                await writing.append([new("e1")])

            nursery.start_soon(append_later)
            with trio.fail_after(10):
                assert (await subscription.__anext__()).event_id == "e1"


def _listeners(schema: str) -> list[int]:
    return [
        pid
        for (pid,) in query(
            "SELECT pid FROM pg_stat_activity WHERE query = %s", f"LISTEN inert_log_{schema}"
        )
    ]


async def test_a_lost_listening_connection_is_covered_by_polling_and_reopened(
    schema: str,
) -> None:
    """When the server drops the listening connection, subscribers still see appends, and the
    log listens again."""
    url = server_url()
    async with (
        PostgresLog.open(url, schema=schema, poll_interval=0.1) as watching,
        PostgresLog.open(url, schema=schema) as writing,
    ):
        await eventually(lambda: len(_listeners(schema)) == 2, "both logs listen")
        before = set(_listeners(schema))
        query("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", list(before))
        await writing.append([new("e1")])
        subscription = watching.subscribe()
        with trio.fail_after(10):
            assert (await subscription.__anext__()).event_id == "e1"
        await eventually(
            lambda: len(set(_listeners(schema)) - before) == 2, "both logs listen again"
        )


async def test_a_lost_writer_connection_is_reopened_and_the_append_lands_once(
    schema: str,
) -> None:
    """An append on a connection the server dropped opens a new connection and lands once."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([new("e1")])
        query("SELECT pg_terminate_backend(%s)", log._writer_pid)
        assert await log.append([new("e2")]) == [2]
        assert await log.append([new("e2")]) == [2]
        assert shape(await log.read()) == [(1, "e1"), (2, "e2")]


async def test_an_append_whose_acknowledgement_was_lost_is_found_on_the_retry(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that landed but whose connection went before the answer came is tried again on a
    new connection, which finds its events stored: they keep their positions, written once."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        original = log._commit_group_once
        attempts = 0

        def landed_then_lost(group: list[AppendRequest]) -> CommittedGroup:
            nonlocal attempts
            attempts += 1
            outcomes = original(group)
            if attempts == 1:
                assert log._writer is not None
                log._writer.close()
                raise _postgres._ConnectionLost("server closed the connection unexpectedly")
            return outcomes

        monkeypatch.setattr(log, "_commit_group_once", landed_then_lost)
        assert await log.append([new("e1"), new("e2")]) == [1, 2]
        assert attempts == 2
        assert shape(await log.read()) == [(1, "e1"), (2, "e2")]


# --- group commit and closing -------------------------------------------------------------


async def test_concurrent_appends_share_group_commits(schema: str) -> None:
    """Appends waiting together are written in fewer transactions than appends."""
    commits = 0
    async with PostgresLog.open(server_url(), schema=schema) as log:
        original = log._commit_group

        def counting(group: list[AppendRequest]) -> CommittedGroup:
            nonlocal commits
            commits += 1
            return original(group)

        log._commit_group = counting  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            for number in range(200):
                nursery.start_soon(log.append, [new(f"e{number}", f"s{number}")])
        assert await log.head() == 200
    assert 1 <= commits < 50


async def test_an_append_cut_off_by_cancellation_of_the_log_is_told_so(schema: str) -> None:
    """Appenders outside a cancelled log block get an error, never a hang, and a retry tells."""
    outcomes: list[str] = []

    async def appender(log: PostgresLog, number: int) -> None:
        try:
            await log.append([new(f"e{number}", f"s{number}")])
            outcomes.append("ok")
        except LogError:
            outcomes.append("error")

    async with trio.open_nursery() as outside:
        with trio.CancelScope() as scope:
            async with PostgresLog.open(server_url(), schema=schema) as log:
                for number in range(50):
                    outside.start_soon(appender, log, number)
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
                await trio.sleep_forever()
    assert len(outcomes) == 50
    async with PostgresLog.open(server_url(), schema=schema) as log:
        landed = {e.event_id for e in await log.read()}
        positions = await log.append([new(f"e{number}", f"s{number}") for number in range(50)])
    assert sorted(positions) == list(range(1, 51))
    assert outcomes.count("ok") <= len(landed)


async def test_an_error_in_the_callers_block_is_raised_unwrapped(schema: str) -> None:
    """An exception of the code inside ``PostgresLog.open`` comes out as itself."""
    with pytest.raises(KeyError):
        async with PostgresLog.open(server_url(), schema=schema):
            raise KeyError("mine")


# --- schema ------------------------------------------------------------------------------


async def test_a_new_schema_is_made_an_inert_log(schema: str) -> None:
    """Opening an empty schema creates the tables and records the application and version."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([new("e1")])
    assert query(f"SELECT application, schema_version FROM {schema}.inert_meta") == [
        (_postgres.APPLICATION, _postgres.SCHEMA_VERSION)
    ]
    assert query(f"SELECT partition, position FROM {schema}.heads") == [(0, 1)]


async def test_concurrent_first_opens_create_the_schema_once(schema: str) -> None:
    """Several logs opening a new schema at once all open it, and share one log."""
    url = server_url()

    async def open_and_append(number: int) -> None:
        async with PostgresLog.open(url, schema=schema) as log:
            await log.append([new(f"e{number}", f"s{number}")])

    async with trio.open_nursery() as nursery:
        for number in range(4):
            nursery.start_soon(open_and_append, number)
    assert query(f"SELECT count(*) FROM {schema}.events") == [(4,)]


async def test_a_schema_of_another_program_is_refused(schema: str) -> None:
    """A schema holding tables that are not an inert log is refused and left as it was."""
    query(f"CREATE SCHEMA {schema}")
    query(f"CREATE TABLE {schema}.notes (text text)")
    with pytest.raises(LogError, match=rf"schema '{schema}' .*another program \(notes\)"):
        async with PostgresLog.open(server_url(), schema=schema):
            pass
    assert query("SELECT tablename FROM pg_tables WHERE schemaname = %s", schema) == [("notes",)]


async def test_without_create_a_missing_schema_is_refused_and_not_made(schema: str) -> None:
    """A schema that does not exist is LogNotFound naming it and its database, left unmade."""
    with connect() as connection:
        database = connection.info.dbname
    expected = rf"no inert log in schema '{schema}' of database '{database}': there is no such"
    with pytest.raises(LogNotFound, match=expected):
        async with open_log(log_url(schema), create=False):
            pass
    assert query("SELECT 1 FROM pg_namespace WHERE nspname = %s", schema) == []


async def test_without_create_an_empty_schema_is_refused_and_left_empty(schema: str) -> None:
    """A schema without tables is LogNotFound, and still holds no table afterwards."""
    query(f"CREATE SCHEMA {schema}")
    with pytest.raises(LogNotFound, match=rf"schema '{schema}' .*: the schema holds no tables"):
        async with open_log(log_url(schema), create=False):
            pass
    assert query("SELECT tablename FROM pg_tables WHERE schemaname = %s", schema) == []


async def test_without_create_an_existing_log_opens(schema: str) -> None:
    """A schema holding a log opens without create, with its events."""
    async with open_log(log_url(schema)) as log:
        await log.append([new("e1")])
    async with open_log(log_url(schema), create=False) as log:
        assert shape(await log.read()) == [(1, "e1")]


async def test_a_refusal_names_the_inert_logs_of_the_database(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema without a log, or of another program, names the schemas that hold one."""
    monkeypatch.setattr(_postgres, "MAX_NAMED", 100_000)
    missing = new_schema()
    async with open_log(log_url(schema)):
        pass
    with pytest.raises(LogNotFound, match=r"inert logs there: .*\(name one with \?schema=NAME\)"):
        async with open_log(log_url(missing), create=False):
            pass
    with fresh_schema() as other:
        query(f"CREATE SCHEMA {other}")
        query(f"CREATE TABLE {other}.notes (text text)")
        with pytest.raises(LogError, match="another program") as caught:
            async with open_log(log_url(other)):
                pass
    assert schema in str(caught.value)


async def test_a_refusal_names_a_few_logs_and_counts_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A database with more logs than a line holds: the first are named, the rest counted."""
    monkeypatch.setattr(_postgres, "MAX_NAMED", 1)
    with fresh_schema() as first, fresh_schema() as second:
        for schema in (first, second):
            async with open_log(log_url(schema)):
                pass
        with pytest.raises(LogNotFound, match=r"inert logs there: \w+ and [1-9]\d* more"):
            async with open_log(log_url(new_schema()), create=False):
                pass


async def test_open_runtime_refuses_a_missing_log_unless_asked_to_create(schema: str) -> None:
    """open_runtime on a URL refuses a schema without a log, and says how to create one."""
    with pytest.raises(LogNotFound, match=r"open_runtime\(create=True\) makes a new log"):
        async with open_runtime(log=log_url(schema)):
            pass
    assert query("SELECT 1 FROM pg_namespace WHERE nspname = %s", schema) == []
    async with open_runtime(log=log_url(schema), create=True):
        pass
    async with open_runtime(log=log_url(schema)) as runtime:
        assert isinstance(runtime.log, PostgresLog)


async def test_a_schema_of_a_newer_version_is_refused(schema: str) -> None:
    """A log written by a newer inert is refused with both schema versions named."""
    async with PostgresLog.open(server_url(), schema=schema):
        pass
    newer = _postgres.SCHEMA_VERSION + 1
    query(f"UPDATE {schema}.inert_meta SET schema_version = %s", newer)
    with pytest.raises(LogError, match=rf"version {newer}, written by a newer inert"):
        async with PostgresLog.open(server_url(), schema=schema):
            pass


async def test_an_older_schema_is_upgraded_by_its_migrations(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log of an older schema version is migrated step by step and keeps its events."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([new("e1")])
    current = _postgres.SCHEMA_VERSION
    applied: list[int] = []

    def add_column(connection: _postgres_sql.Connection, name: str) -> None:
        applied.append(current)
        connection.execute(f"ALTER TABLE {name}.events ADD COLUMN note text")

    monkeypatch.setattr(_postgres, "SCHEMA_VERSION", current + 1)
    monkeypatch.setitem(_postgres_sql.MIGRATIONS, current, add_column)
    async with PostgresLog.open(server_url(), schema=schema) as log:
        assert [e.event_id for e in await log.read()] == ["e1"]
    assert applied == [current]
    assert query(f"SELECT schema_version FROM {schema}.inert_meta") == [(current + 1,)]


async def test_a_schema_1_log_is_upgraded_to_store_snapshots(schema: str) -> None:
    """A log of schema version 1 (no snapshot tables) opens, keeps its events and stores a
    snapshot."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([unsealed("e1")])
    _as_schema_4(schema)
    query(f"DROP TABLE {schema}.snapshot_payloads, {schema}.snapshots")
    query(f"ALTER TABLE {schema}.events DROP COLUMN checksum")
    query(f"ALTER TABLE {schema}.inert_meta DROP COLUMN identity, DROP COLUMN secret")
    query(f"UPDATE {schema}.inert_meta SET schema_version = 1")
    written = StoredSnapshot(
        name="",
        position=1,
        stamp="stamp",
        state=b"state",
        payloads=(SnapshotPayload(part="p", stream="s", first_version=1, data=b"{}"),),
    )
    async with PostgresLog.open(server_url(), schema=schema) as log:
        assert [e.event_id for e in await log.read()] == ["e1"]
        await log.write_snapshot(written)
    assert query(f"SELECT schema_version FROM {schema}.inert_meta") == [(_postgres.SCHEMA_VERSION,)]
    async with PostgresLog.open(server_url(), schema=schema) as log:
        assert await log.read_snapshot("") == written


async def test_a_schema_2_log_is_upgraded_to_checksummed_rows(schema: str) -> None:
    """A log of schema version 2 (rows without checksums) opens with a checksum made for every
    row it holds, reads back whole, and its rows damaged later are refused by position."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([unsealed(f"e{number}") for number in range(1, 6)])
    _as_schema_4(schema)
    query(f"ALTER TABLE {schema}.events DROP COLUMN checksum")
    query(f"ALTER TABLE {schema}.inert_meta DROP COLUMN identity, DROP COLUMN secret")
    query(f"UPDATE {schema}.inert_meta SET schema_version = 2")
    async with PostgresLog.open(server_url(), schema=schema) as log:
        assert [e.event_id for e in await log.read()] == [f"e{n}" for n in range(1, 6)]
    assert query(f"SELECT schema_version FROM {schema}.inert_meta") == [(_postgres.SCHEMA_VERSION,)]
    query(f"UPDATE {schema}.events SET recorded_at = recorded_at + 1 WHERE position = 4")
    async with PostgresLog.open(server_url(), schema=schema) as log:
        assert len(await log.read(limit=3)) == 3
        with pytest.raises(LogDamaged, match="damaged at position 4"):
            await log.read()


async def test_a_schema_3_log_is_given_an_identity_and_a_secret(schema: str) -> None:
    """A log of schema version 3 opens with an identity and a secret made for it, which it
    keeps from then on."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([unsealed("e1")])
    _as_schema_4(schema)
    query(f"ALTER TABLE {schema}.inert_meta DROP COLUMN identity, DROP COLUMN secret")
    query(f"UPDATE {schema}.inert_meta SET schema_version = 3")
    async with PostgresLog.open(server_url(), schema=schema) as log:
        identity, key = log.identity, log.key("snapshot")
        assert [e.event_id for e in await log.read()] == ["e1"]
    assert identity.startswith("log-")
    async with PostgresLog.open(server_url(), schema=schema) as log:
        assert (log.identity, log.key("snapshot")) == (identity, key)


def _as_schema_6(schema: str) -> None:
    """The schema's tables as log schema 6 made them: a row's stream checked as it is written."""
    [(name,)] = query(
        "SELECT conname FROM pg_constraint WHERE contype = 'f'"
        " AND conrelid = (quote_ident(%s) || '.events')::regclass",
        schema,
    )
    query(f"ALTER TABLE {schema}.events ALTER CONSTRAINT {name} NOT DEFERRABLE")
    query(f"UPDATE {schema}.inert_meta SET schema_version = 6")


def _stream_reference_deferred(schema: str) -> bool:
    [(deferred,)] = query(
        "SELECT condeferrable AND condeferred FROM pg_constraint WHERE contype = 'f'"
        " AND conrelid = (quote_ident(%s) || '.events')::regclass",
        schema,
    )
    return bool(deferred)


async def test_a_schema_6_log_checks_a_row_s_stream_at_the_commit(schema: str) -> None:
    """A log of schema version 6 opens with the reference from a row to its stream checked at
    the commit, and appends the first events of new streams after its own."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([new("e1")])
    _as_schema_6(schema)
    assert not _stream_reference_deferred(schema)
    async with PostgresLog.open(server_url(), schema=schema) as log:
        assert await log.append([new("e2", "s2"), new("e3", "s3")]) == [2, 3]
        assert [(e.event_id, e.stream) for e in await log.read()] == [
            ("e1", "s"),
            ("e2", "s2"),
            ("e3", "s3"),
        ]
    assert _stream_reference_deferred(schema)
    assert query(f"SELECT schema_version FROM {schema}.inert_meta") == [(_postgres.SCHEMA_VERSION,)]


def _as_schema_5(schema: str) -> None:
    """The schema's tables as log schema 5 made them: one partition, whose number no row holds."""
    _as_schema_6(schema)
    query(f"""
ALTER TABLE {schema}.inert_meta DROP COLUMN partitions, DROP COLUMN partition_hash;
CREATE TABLE {schema}.head (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row), position bigint NOT NULL
);
INSERT INTO {schema}.head (position) SELECT position FROM {schema}.heads WHERE partition = 0;
DROP TABLE {schema}.heads;
ALTER TABLE {schema}.streams DROP COLUMN partition, ADD UNIQUE (name);
ALTER TABLE {schema}.events DROP COLUMN partition, ADD PRIMARY KEY (position),
    ADD UNIQUE (event_id);
ALTER TABLE {schema}.snapshots DROP COLUMN partition, ADD PRIMARY KEY (name);
ALTER TABLE {schema}.snapshot_payloads DROP COLUMN partition, ADD PRIMARY KEY (name, ordinal);
CREATE INDEX ON {schema}.snapshot_payloads (stream);
UPDATE {schema}.inert_meta SET schema_version = 5;
""")


async def test_a_schema_5_log_opens_as_one_partition(schema: str) -> None:
    """A log of schema version 5 (before partitions) opens as a log of one partition, reads
    back whole, keeps its snapshot, and appends after its last position."""
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([new("e1"), new("e2", "s2")])
        await log.write_snapshot(
            StoredSnapshot(name="n", position=2, stamp="stamp", state=b"state", payloads=())
        )
    _as_schema_5(schema)
    async with PostgresLog.open(server_url(), schema=schema) as log:
        assert log.partitions == 1
        assert [e.event_id for e in await log.read()] == ["e1", "e2"]
        assert await log.append([new("e3")]) == [3]
        snapshot = await log.read_snapshot("n")
        assert snapshot is not None
        assert snapshot.position == 2
        assert await log.storage_problems() == []
    assert query(f"SELECT schema_version, partitions FROM {schema}.inert_meta") == [
        (_postgres.SCHEMA_VERSION, 1)
    ]


def _as_schema_4(schema: str) -> None:
    """The schema's tables as log schema 4 made them: payloads unsealed, no table of keys."""
    _as_schema_5(schema)
    query(f"DROP TABLE {schema}.payload_keys")
    query(f"ALTER TABLE {schema}.events DROP COLUMN key_id")
    query(f"ALTER TABLE {schema}.snapshot_payloads DROP COLUMN key_id")
    query(f"UPDATE {schema}.inert_meta SET schema_version = 4")


async def test_a_schema_4_log_seals_the_rows_it_writes_from_then_on(schema: str) -> None:
    """A log of schema version 4 opens: its rows stay as written and read back; a fragment
    written after is sealed, and reads back."""
    key = CallKey(tenant="t", conversation="c", turn="u", response="r", item="i", call="a")
    fragment = ArgumentsAppended(key=key, data=b'{"pin": "4821"}', offset=0)
    stream = key.response_ref.stream
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([unsealed("e1")])
    _as_schema_4(schema)
    async with PostgresLog.open(server_url(), schema=schema) as log:
        await log.append([NewEvent(stream=stream, event=fragment, event_id="f1")])
        assert [e.event_id for e in await log.read()] == ["e1", "f1"]
        assert (await log.read())[1].event == fragment
    assert query(f"SELECT schema_version FROM {schema}.inert_meta") == [(_postgres.SCHEMA_VERSION,)]
    [(sealed, key_id)] = query(f"SELECT payload, key_id FROM {schema}.events WHERE event_id = 'f1'")
    assert key_id is not None
    assert b"4821" not in bytes(sealed)


async def test_an_older_schema_without_a_migration_is_refused(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log of an older schema version that no migration upgrades is refused, untouched."""
    async with PostgresLog.open(server_url(), schema=schema):
        pass
    current = _postgres.SCHEMA_VERSION
    monkeypatch.setattr(_postgres, "SCHEMA_VERSION", current + 1)
    with pytest.raises(LogError, match=f"no upgrade from version {current} to {current + 1}"):
        async with PostgresLog.open(server_url(), schema=schema):
            pass
    assert query(f"SELECT schema_version FROM {schema}.inert_meta") == [(current,)]


# --- URL and errors ----------------------------------------------------------------------


async def test_open_log_by_url_passes_its_options(schema: str) -> None:
    """A postgresql:// URL opens a PostgreSQL log with the log's options from its query."""
    url = log_url(schema, group_commit="off", max_batch_events=8, poll_interval=0.5)
    async with open_log(f"{url}&application_name=inert-test") as log:
        assert isinstance(log, PostgresLog)
        settings = (log.schema, log.group_commit, log.max_batch_events, log.poll_interval)
        assert settings == (schema, False, 8, 0.5)
        await log.append([new("e1")])
        # The listening connection is opened by a task of its own: it may not be open yet.
        await eventually(
            lambda: (
                query("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'inert-test'")
                == [(3,)]
            ),
            "the writer, the reader and the listener connected under the URL's name",
        )


async def test_a_postgres_url_opens_the_same_log(schema: str) -> None:
    """postgres://, which libpq takes as postgresql://, opens the same log."""
    async with open_log(log_url(schema)) as log:
        await log.append([new("e1")])
    url = log_url(schema).replace("postgresql://", "postgres://", 1)
    assert url.startswith("postgres://")
    async with open_log(url, create=False) as log:
        assert isinstance(log, PostgresLog)
        assert shape(await log.read()) == [(1, "e1")]


async def test_an_unreachable_server_is_a_log_error_without_the_password() -> None:
    """A server that cannot be reached is a LogError that names the URL but not its password."""
    with pytest.raises(LogError, match="cannot connect to PostgreSQL log") as caught:
        async with open_log("postgresql://alice:s3cret@127.0.0.1:1/db?connect_timeout=2"):
            pass
    assert "postgresql://alice@127.0.0.1:1/db" in str(caught.value)
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://u:pw@localhost/db?schema=Bad-Name", "lower-case letters"),
        ("postgresql://u:pw@localhost/db?max_batch_events=0", "at least 1"),
        ("postgresql://u:pw@localhost/db?poll_interval=soon", "must be a finite number"),
        ("postgresql://u:pw@localhost/db?poll_interval=nan", "must be a finite number"),
        ("postgresql://u:pw@localhost/db?poll_interval=inf", "must be a finite number"),
        ("postgresql://u:pw@localhost/db?poll_interval=-2", "positive, finite"),
        ("postgresql://u:pw@localhost/db?max_batch_events=-3", "at least 1"),
        ("postgresql://u:pw@localhost/db?schema=a%00b", "lower-case letters"),
        ("postgresql://u:pw@localhost/db?group_commit=maybe", "on or off"),
        ("postgresql://u:pw@localhost/db?no_such_option=1", "bad PostgreSQL connection string"),
    ],
)
async def test_bad_urls_are_configuration_errors(url: str, message: str) -> None:
    """A bad option is a ConfigurationError raised before any connection, without the password."""
    with pytest.raises(ConfigurationError, match=message) as caught:
        async with open_log(url):
            pass
    assert ":pw@" not in str(caught.value)


@pytest.mark.parametrize(
    ("conninfo", "shown"),
    [
        (
            "postgresql://alice:s3cret@db.example:5433/inert?sslmode=require",
            "alice@db.example:5433",
        ),
        (
            "host=db.example port=5433 dbname=inert user=alice password=s3cret",
            "alice@db.example:5433",
        ),
        ("postgresql://[::1]/inert", "[::1]"),
        (
            "postgresql://alice:s3cret@db1:5433,[::1]:5434/inert?target_session_attrs=read-write",
            "alice@db1:5433,[::1]:5434",
        ),
        ("host=db1,db2 port=5433 dbname=inert user=alice", "alice@db1:5433,db2:5433"),
    ],
)
def test_a_connection_string_is_shown_without_password_or_options(
    conninfo: str, shown: str
) -> None:
    """Messages name the server and database as a URL without the password or the options."""
    assert _postgres.public_url(conninfo) == f"postgresql://{shown}/inert"


def test_inert_imports_without_psycopg() -> None:
    """psycopg is optional: without it inert imports, and only PostgresLog is missing."""
    script = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import inert, inert.log\n"
        "try:\n    inert.log.PostgresLog\nexcept ImportError:\n    print('no psycopg')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "no psycopg\n"


async def test_without_psycopg_a_postgresql_url_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Opening a postgresql:// URL without psycopg is a ConfigurationError naming the extra."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "inert.log._postgres")
    with pytest.raises(ConfigurationError, match=r"install inert\[postgresql\]"):
        async with open_log("postgresql://postgres@127.0.0.1/test"):
            pass
