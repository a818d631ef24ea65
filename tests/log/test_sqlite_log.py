"""What the SQLite backend promises beyond the shared contract: its file, its modes, its URL."""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import pytest
import trio

from inert import (
    ArgumentsAppended,
    CallKey,
    CodecError,
    ConfigurationError,
    LogDamaged,
    LogError,
    LogNotFound,
    open_log,
    open_runtime,
)
from inert.events import DEFAULT_CODEC
from inert.log import MemoryLog, NewEvent, SnapshotPayload, SQLiteLog, StoredSnapshot, _sqlite
from inert.log._group import AppendRequest, CommittedGroup
from inert.log._records import StoredRecord, with_checksum

KEY = CallKey(tenant="t", conversation="c", turn="1", response="r", item="i", call="x")


def new(event_id: str, stream: str = "s") -> NewEvent:
    return NewEvent(stream=stream, event_id=event_id, event=ArgumentsAppended(key=KEY, data=b"{}"))


def pragma(path: Path, name: str) -> object:
    with sqlite3.connect(path) as connection:
        return connection.execute(f"PRAGMA {name}").fetchone()[0]


async def test_a_new_file_is_an_inert_log_in_wal_mode(tmp_path: Path) -> None:
    """Opening a missing file creates it with inert's application id, schema version and WAL."""
    path = tmp_path / "new.db"
    async with SQLiteLog.open(path) as log:
        await log.append([new("e1")])
    assert pragma(path, "application_id") == _sqlite.APPLICATION_ID
    assert pragma(path, "user_version") == _sqlite.SCHEMA_VERSION
    assert pragma(path, "journal_mode") == "wal"


@pytest.mark.parametrize(("mode", "level"), [("FULL", 2), ("NORMAL", 1)])
async def test_synchronous_mode_is_applied_to_the_connection(
    tmp_path: Path, mode: str, level: int
) -> None:
    """The synchronous setting chosen is the one SQLite runs with."""
    async with SQLiteLog.open(tmp_path / "s.db", synchronous=mode) as log:  # type: ignore[arg-type]
        assert log._writer is not None
        assert log._writer.execute("PRAGMA synchronous").fetchone()[0] == level


async def test_a_file_of_another_program_is_refused(tmp_path: Path) -> None:
    """An SQLite file that is not an inert log is refused, and left as it was."""
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(LogError, match="another program"):
        async with SQLiteLog.open(path):
            pass
    with sqlite3.connect(path) as connection:
        tables = connection.execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("notes",)]


async def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    """Garbage in place of a log is a LogError, not an sqlite3 exception."""
    path = tmp_path / "garbage.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(LogError, match="cannot open"):
        async with SQLiteLog.open(path):
            pass


async def test_a_file_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    """A log written by a newer inert is refused with both schema versions named."""
    path = tmp_path / "newer.db"
    async with SQLiteLog.open(path):
        pass
    with sqlite3.connect(path) as connection:
        connection.execute(f"PRAGMA user_version = {_sqlite.SCHEMA_VERSION + 1}")
    with pytest.raises(LogError, match=rf"version {_sqlite.SCHEMA_VERSION + 1}.*newer"):
        async with SQLiteLog.open(path):
            pass


async def test_an_older_schema_is_upgraded_by_its_migrations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of an older schema is migrated step by step and keeps its events."""
    path = tmp_path / "older.db"
    async with SQLiteLog.open(path) as log:
        await log.append([new("e1")])
    current = _sqlite.SCHEMA_VERSION
    applied: list[int] = []

    def add_column(connection: sqlite3.Connection) -> None:
        applied.append(current)
        connection.execute("ALTER TABLE events ADD COLUMN note TEXT")

    monkeypatch.setattr(_sqlite, "SCHEMA_VERSION", current + 1)
    monkeypatch.setitem(_sqlite.MIGRATIONS, current, add_column)
    async with SQLiteLog.open(path) as log:
        assert [e.event_id for e in await log.read()] == ["e1"]
    assert applied == [current]
    assert pragma(path, "user_version") == current + 1


async def test_an_older_schema_without_a_migration_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of an older schema that no migration upgrades is refused, untouched."""
    path = tmp_path / "older.db"
    async with SQLiteLog.open(path):
        pass
    current = _sqlite.SCHEMA_VERSION
    monkeypatch.setattr(_sqlite, "SCHEMA_VERSION", current + 1)
    with pytest.raises(LogError, match=f"no upgrade from version {current} to {current + 1}"):
        async with SQLiteLog.open(path):
            pass
    assert pragma(path, "user_version") == current


# The tables of schema version 1, as inert wrote them before snapshots were stored.
SCHEMA_1 = """
CREATE TABLE streams (
    stream_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE
);
CREATE TABLE events (
    position INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    stream_id INTEGER NOT NULL REFERENCES streams (stream_id),
    version INTEGER NOT NULL CHECK (version >= 1),
    recorded_at INTEGER NOT NULL,
    event_type TEXT NOT NULL,
    schema_version INTEGER NOT NULL,
    payload BLOB,
    payload_length INTEGER NOT NULL,
    payload_digest BLOB,
    traceparent TEXT,
    tracestate TEXT,
    UNIQUE (stream_id, version)
);
"""


def snapshot_tables(path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as connection:
        return connection.execute(
            "SELECT name, sql FROM sqlite_master WHERE tbl_name LIKE 'snapshot%' ORDER BY name"
        ).fetchall()


async def test_a_schema_1_file_is_upgraded_to_store_snapshots(tmp_path: Path) -> None:
    """A log written by schema version 1 opens, keeps its events, gains the snapshot tables of a
    new file and stores a snapshot."""
    path = tmp_path / "schema-1.db"
    event = ArgumentsAppended(key=KEY, data=b"{}")
    tag, version, payload = DEFAULT_CODEC.encode(event)
    with sqlite3.connect(path) as connection:
        connection.executescript(SCHEMA_1)
        connection.execute("INSERT INTO streams VALUES (1, 's')")
        connection.execute(
            "INSERT INTO events VALUES (1, 'e1', 1, 1, 0, ?, ?, ?, ?, NULL, NULL, NULL)",
            (tag, version, payload, len(payload)),
        )
        connection.execute(f"PRAGMA application_id = {_sqlite.APPLICATION_ID}")
        connection.execute("PRAGMA user_version = 1")
    written = StoredSnapshot(
        name="",
        position=1,
        stamp="stamp",
        state=b"state",
        payloads=(SnapshotPayload(part="p", stream="s", first_version=1, data=b"{}"),),
    )
    async with SQLiteLog.open(path) as log:
        [recorded] = await log.read()
        assert (recorded.event_id, recorded.stream, recorded.event) == ("e1", "s", event)
        await log.write_snapshot(written)
    assert pragma(path, "user_version") == _sqlite.SCHEMA_VERSION == 4
    async with SQLiteLog.open(path) as log:
        assert await log.read_snapshot("") == written
        assert await log.append([new("e2")]) == [2]
    async with SQLiteLog.open(tmp_path / "new.db"):
        pass
    assert snapshot_tables(path) == snapshot_tables(tmp_path / "new.db") != []


async def test_a_damaged_stored_payload_fails_its_checksum(tmp_path: Path) -> None:
    """Bytes damaged on disk are refused by the row's checksum, naming the position."""
    path = tmp_path / "corrupt.db"
    async with SQLiteLog.open(path) as log:
        await log.append([new("e1")])
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE events SET payload = x'c1c1c1'")
    async with SQLiteLog.open(path) as log:
        with pytest.raises(LogDamaged, match="damaged at position 1: the checksum"):
            await log.read()


async def test_a_payload_written_wrong_with_its_checksum_reads_as_a_codec_error(
    tmp_path: Path,
) -> None:
    """A payload that the codec cannot read, checksummed as it is, is a CodecError naming the
    event type: the checksum proves a row unchanged, not well made."""
    path = tmp_path / "corrupt.db"
    async with SQLiteLog.open(path) as log:
        await log.append([new("e1")])
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE events SET payload = x'c1c1c1'")
        [values] = connection.execute(f"{_sqlite._SELECT}").fetchall()
        connection.execute("UPDATE events SET checksum = ?", (with_checksum(values).checksum,))
    async with SQLiteLog.open(path) as log:
        with pytest.raises(CodecError, match=r"ingress\.arguments_appended"):
            await log.read()


async def test_appends_of_another_writer_reach_a_subscriber(tmp_path: Path) -> None:
    """A subscriber sees events another writer put in the same file, within the poll interval,
    before and after those its own log committed."""
    path = tmp_path / "shared.db"
    async with (
        SQLiteLog.open(path, poll_interval=0.05) as reader,
        SQLiteLog.open(path) as writer,
    ):
        subscription = reader.subscribe()
        await writer.append([new("e1")])
        with trio.fail_after(10):
            assert (await subscription.__anext__()).event_id == "e1"
        await reader.append([new("e2")])
        assert (await subscription.__anext__()).event_id == "e2"
        # The writer's cached stream versions are stale now; its head check must notice.
        assert await writer.append([new("e3")], {"s": 2}) == [3]
        with trio.fail_after(10):
            assert (await subscription.__anext__()).event_id == "e3"


async def test_a_subscriber_takes_what_its_log_committed_without_reading_it_back(
    tmp_path: Path,
) -> None:
    """Events this process appended reach its subscriber from the rows it committed, as a
    read would give them, with no read of storage."""
    async with SQLiteLog.open(tmp_path / "own.db") as log:
        await log.append([new("e0")])
        subscription = log.subscribe()
        assert (await subscription.__anext__()).event_id == "e0"
        reads = 0
        original = log._read_rows

        async def counting(from_position: int, limit: int | None) -> list[StoredRecord]:
            nonlocal reads
            reads += 1
            return await original(from_position, limit)

        log._read_rows = counting  # type: ignore[method-assign]
        await log.append([new("e1"), new("e2", "other")])
        taken = [await subscription.__anext__() for _ in range(2)]
        assert reads == 0
        assert taken == await log.read(2)


async def test_concurrent_appends_share_group_commits(tmp_path: Path) -> None:
    """Appends waiting together are written in fewer transactions than appends."""
    commits = 0
    async with SQLiteLog.open(tmp_path / "g.db") as log:
        original = log._commit_group

        def counting(group: list[AppendRequest]) -> CommittedGroup:
            nonlocal commits
            commits += 1
            return original(group)

        log._commit_group = counting  # type: ignore[method-assign]
        async with trio.open_nursery() as nursery:
            for number in range(200):
                nursery.start_soon(log.append, [new(f"e{number}", f"s{number}")])
    assert 1 <= commits < 50


async def test_an_error_in_the_callers_block_is_raised_unwrapped(tmp_path: Path) -> None:
    """An exception of the code inside ``SQLiteLog.open`` comes out as itself."""
    with pytest.raises(KeyError):
        async with SQLiteLog.open(tmp_path / "e.db"):
            raise KeyError("mine")


@pytest.mark.parametrize(
    "options",
    [{"synchronous": "OFF"}, {"max_batch_events": 0}, {"poll_interval": 0}],
)
def test_bad_options_are_configuration_errors(tmp_path: Path, options: dict[str, object]) -> None:
    """Settings outside their documented range are refused before any file is touched."""
    with pytest.raises(ConfigurationError):
        SQLiteLog(tmp_path / "x.db", **options)  # type: ignore[arg-type]
    assert not (tmp_path / "x.db").exists()


async def test_open_log_by_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite:/// URLs open SQLite logs with their options; memory://NAME reopens one store."""
    monkeypatch.chdir(tmp_path)
    async with open_log("sqlite:///relative.db?synchronous=normal&group_commit=off") as log:
        assert isinstance(log, SQLiteLog)
        assert (log.synchronous, log.group_commit) == ("NORMAL", False)
        await log.append([new("e1")])
    assert (tmp_path / "relative.db").exists()
    absolute = tmp_path / "absolute.db"
    async with open_log(f"sqlite:///{absolute}?max_batch_events=8&poll_interval=0.5") as log:
        assert isinstance(log, SQLiteLog)
        assert (log.path, log.max_batch_events, log.poll_interval) == (str(absolute), 8, 0.5)
    async with open_log("memory://shared") as log:
        await log.append([new("e1")])
    async with open_log("memory://shared") as log:
        assert isinstance(log, MemoryLog)
        assert await log.head() == 1
    async with open_log("memory://") as log:
        assert await log.head() == 0


@pytest.mark.parametrize("kind", ["missing", "empty"])
async def test_without_create_a_file_without_a_log_is_refused_as_it_is(
    tmp_path: Path, kind: str
) -> None:
    """open_log(create=False) and open_runtime refuse a missing or empty file and leave it so;
    open_runtime(create=True) makes the log."""
    path = tmp_path / "log.db"
    if kind == "empty":
        path.write_bytes(b"")
    named = "does not exist" if kind == "missing" else "is empty"
    with pytest.raises(LogNotFound, match=f"no SQLite log at '{path}': the file {named}"):
        async with open_log(f"sqlite:///{path}", create=False):
            pass
    with pytest.raises(LogNotFound, match=r"open_runtime\(create=True\) makes a new log there"):
        async with open_runtime(log=f"sqlite:///{path}"):
            pass
    assert path.exists() == (kind == "empty")
    assert kind == "missing" or path.stat().st_size == 0
    async with open_runtime(log=f"sqlite:///{path}", create=True):
        pass
    async with open_runtime(log=f"sqlite:///{path}") as runtime:
        assert isinstance(runtime.log, SQLiteLog)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://localhost/db", r"unknown log URL .*postgres:// too"),
        ("sqlite://host/file.db", "has a host"),
        ("sqlite:///", "names no file"),
        ("sqlite:///x.db?synchronous=OFF", "FULL or NORMAL"),
        ("sqlite:///x.db?fsync=always", "unknown SQLite log options"),
        ("sqlite:///x.db?group_commit=maybe", "on or off"),
        ("sqlite:///x.db?max_batch_events=many", "must be an integer"),
        ("sqlite:///x.db?max_batch_events=-5", "at least 1"),
        ("sqlite:///x.db?poll_interval=nan", "must be a finite number"),
        ("sqlite:///x.db?poll_interval=inf", "must be a finite number"),
        ("sqlite:///x.db?poll_interval=-Infinity", "must be a finite number"),
        ("sqlite:///x.db?poll_interval=1e400", "must be a finite number"),
        ("sqlite:///x.db?poll_interval=-1", "positive, finite"),
        ("sqlite:///a%00b.db", "no NUL character"),
        ("memory://?x=1", "no options"),
    ],
)
async def test_bad_urls_are_configuration_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, url: str, message: str
) -> None:
    """A URL that names no known log, or a bad option, is a clear ConfigurationError."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError, match=message):
        async with open_log(url):
            pass


async def test_an_append_cut_off_by_cancellation_of_the_log_is_told_so(tmp_path: Path) -> None:
    """Appenders outside a cancelled log block get an error, never a hang, and a retry tells."""
    path = tmp_path / "cut.db"
    outcomes: list[str] = []

    async def appender(log: SQLiteLog, number: int) -> None:
        try:
            await log.append([new(f"e{number}", f"s{number}")])
            outcomes.append("ok")
        except LogError:
            outcomes.append("error")

    async with trio.open_nursery() as outside:
        with trio.CancelScope() as scope:
            async with SQLiteLog.open(path) as log:
                for number in range(50):
                    outside.start_soon(appender, log, number)
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()
                await trio.sleep_forever()
    assert len(outcomes) == 50
    async with SQLiteLog.open(path) as log:
        landed = {e.event_id for e in await log.read()}
        positions = await log.append([new(f"e{number}", f"s{number}") for number in range(50)])
    assert len(set(positions)) == 50
    assert outcomes.count("ok") <= len(landed)


@pytest.mark.parametrize("interval", [math.nan, math.inf, -math.inf, 0.0, -1.0])
def test_a_poll_interval_that_is_not_a_positive_finite_number_is_refused(
    tmp_path: Path, interval: float
) -> None:
    """NaN, an infinite or a non-positive poll interval is a ConfigurationError naming it."""
    with pytest.raises(ConfigurationError, match="poll_interval must be a positive, finite"):
        SQLiteLog(tmp_path / "log.db", poll_interval=interval)


async def test_a_page_over_more_streams_than_the_name_cache_holds_names_each_row_right(
    tmp_path: Path,
) -> None:
    """A read page naming more streams than the reader keeps names of still names every row's."""
    async with SQLiteLog.open(tmp_path / "n.db", stream_cache_size=2) as log:
        await log.append([new("e0", stream="s0"), new("e1", stream="s1")])
        assert [recorded.stream for recorded in await log.read(1)] == ["s0", "s1"]
        await log.append([new(f"f{index}", stream=f"s{index}") for index in range(2, 9)])
        assert [recorded.stream for recorded in await log.read(1)] == [
            f"s{index}" for index in range(9)
        ]
        assert [recorded.stream for recorded in await log.read(4, limit=2)] == ["s3", "s4"]


async def test_a_row_naming_a_stream_the_log_lacks_is_damage_at_its_position(
    tmp_path: Path,
) -> None:
    """A row whose stream number has no stream is reported as damage at that row's position."""
    path = tmp_path / "d.db"
    async with SQLiteLog.open(path) as log:
        await log.append([new("e1"), new("e2", stream="t")])
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE events SET stream_id = 99 WHERE position = 2")
    async with SQLiteLog.open(path) as log:
        with pytest.raises(LogDamaged, match=r"position 2.*stream number 99"):
            await log.read(1)


async def test_a_schema_3_log_is_given_an_identity_and_a_secret(tmp_path: Path) -> None:
    """A log of schema version 3 opens with an identity and a secret made for it, which it
    keeps from then on; a log whose identity was removed by hand is refused."""
    path = tmp_path / "log.db"
    async with SQLiteLog.open(path) as log:
        await log.append([new("e1")])
    with sqlite3.connect(path) as connection:
        connection.execute("DROP TABLE log_identity")
        connection.execute("PRAGMA user_version = 3")
    async with SQLiteLog.open(path) as log:
        identity, key = log.identity, log.key("snapshot")
        assert [e.event_id for e in await log.read()] == ["e1"]
    assert identity.startswith("log-")
    assert pragma(path, "user_version") == _sqlite.SCHEMA_VERSION
    async with SQLiteLog.open(path) as log:
        assert (log.identity, log.key("snapshot")) == (identity, key)
    with sqlite3.connect(path) as connection:
        connection.execute("DELETE FROM log_identity")
    with pytest.raises(LogError, match="0 identities of its log"):
        async with SQLiteLog.open(path):
            pass
