"""The embedded default log: one SQLite file in WAL mode, with group commit.

Appenders never touch the database. They queue their encoded batch and wait; one writer task
takes everything queued (up to ``max_batch_events``), and a worker thread writes it in one
transaction, so that concurrent appends share one commit and one fsync. Each append of the
group is planned on its own: one that conflicts fails alone and the others still commit. An
append is acknowledged only after the transaction that holds it has committed.

``synchronous=FULL`` (the default) makes a commit durable against power loss. ``NORMAL`` is
faster in WAL mode but may lose the last commits if the machine (not only the process) stops;
it never corrupts the file.

The file carries an application id and a schema version. A file of another program is refused;
a file written by an older schema is upgraded by the registered migrations, in one transaction,
or refused with a message naming both versions; a file of a newer schema is refused.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import math
import os
import sqlite3
import stat
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

import trio

from ..events._codec import Codec
from ..events._errors import ConfigurationError, InertError, LogDamaged, LogError
from ..events._identity import CallKey
from ._erasure import DEFAULT_ERASE_TIMEOUT, Eraser
from ._group import AppendRequest, CommittedGroup, GroupCommitLog
from ._log import Clock, FrozenRedaction, new_identity, new_secret
from ._records import (
    PAYLOAD_DIGEST_KEY,
    StoredRecord,
    call_of,
    plan_appends,
    reached,
    redacted,
    with_checksum,
)
from ._snapshots import (
    StoredSnapshot,
    StreamRedactions,
    judged_versions,
    kept_payloads,
    payload_streams,
    redaction_takes,
    snapshot_from_rows,
)

APPLICATION_ID = 0x696E7274  # "inrt"
SCHEMA_VERSION = 4
Synchronous = Literal["FULL", "NORMAL"]
Migration = Callable[[sqlite3.Connection], None]
_T = TypeVar("_T")

DEFAULT_MAX_BATCH_EVENTS = 4096
DEFAULT_POLL_INTERVAL = 1.0
_SQL_PARAMETER_CHUNK = 500

_SELECT = (
    "SELECT e.position, e.event_id, s.name, e.version, e.recorded_at, e.event_type,"
    " e.schema_version, e.payload, e.payload_length, e.payload_digest, e.traceparent,"
    " e.tracestate, e.checksum FROM events AS e JOIN streams AS s ON s.stream_id = e.stream_id"
)
# A page read by position names streams by number, and the reader keeps their names: a join
# per row costs about as much as everything else SQLite does for the row.
_SELECT_BY_POSITION = (
    "SELECT position, event_id, stream_id, version, recorded_at, event_type, schema_version,"
    " payload, payload_length, payload_digest, traceparent, tracestate, checksum FROM events"
    " WHERE position >= ? ORDER BY position LIMIT ?"
)

# Payloads are indexed by stream, which redaction deletes them by.
_SNAPSHOT_SCHEMA = """
CREATE TABLE snapshots (
    name TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    stamp TEXT NOT NULL,
    state BLOB NOT NULL,
    digest TEXT NOT NULL
);
CREATE TABLE snapshot_payloads (
    name TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    part TEXT NOT NULL,
    stream TEXT NOT NULL,
    first_version INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (name, ordinal)
);
CREATE INDEX snapshot_payloads_stream ON snapshot_payloads (stream);
"""

# Streams are numbered: an index of (integer, version) is far cheaper to keep up on every insert
# than one of (stream name, version).
_SCHEMA = f"""
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
    checksum INTEGER NOT NULL,
    UNIQUE (stream_id, version)
);
{_SNAPSHOT_SCHEMA}
CREATE TABLE log_identity (identity TEXT NOT NULL, secret BLOB NOT NULL);
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""

# One statement, so that it sees one snapshot whole even while a write replaces it.
_READ_SNAPSHOT = (
    "SELECT 0, position, stamp, digest, 0, state FROM snapshots WHERE name = ?"
    " UNION ALL SELECT 1, ordinal, part, stream, first_version, data FROM snapshot_payloads"
    " WHERE name = ? ORDER BY 1, 2"
)


def _execute_script(connection: sqlite3.Connection, script: str) -> None:
    # Statement by statement: executescript would commit the transaction it runs in.
    for statement in script.split(";"):
        if statement.strip():
            connection.execute(statement)


def _add_snapshots(connection: sqlite3.Connection) -> None:
    _execute_script(connection, _SNAPSHOT_SCHEMA)


def _add_checksums(connection: sqlite3.Connection) -> None:
    # The rows are taken as they are: nothing older can tell whether one was damaged before.
    connection.execute("ALTER TABLE events ADD COLUMN checksum INTEGER NOT NULL DEFAULT 0")
    position = 0
    while rows := connection.execute(
        f"{_SELECT} WHERE e.position > ? ORDER BY e.position LIMIT 4096", (position,)
    ).fetchall():
        connection.executemany(
            "UPDATE events SET checksum = ? WHERE position = ?",
            [(with_checksum(row).checksum, row[0]) for row in rows],
        )
        position = rows[-1][0]


# Steps from schema version N to N + 1.
def _add_identity(connection: sqlite3.Connection) -> None:
    connection.execute("CREATE TABLE log_identity (identity TEXT NOT NULL, secret BLOB NOT NULL)")
    _new_identity(connection)


def _new_identity(connection: sqlite3.Connection) -> None:
    connection.execute("INSERT INTO log_identity VALUES (?, ?)", (new_identity(), new_secret()))


MIGRATIONS: dict[int, Migration] = {1: _add_snapshots, 2: _add_checksums, 3: _add_identity}

DEFAULT_STREAM_CACHE_SIZE = 65536
# Names the reader keeps: a page read in order names a few hundred streams, mostly the ones the
# pages just before named; a copy of every stream's name would cost each live call its names.
_READ_STREAM_NAMES = 4096


def _abandon(connection: sqlite3.Connection) -> None:
    """Keep a connection open until the process ends: its last reference is never dropped, so
    that not even the interpreter's exit closes it (see ``SQLiteLog._disconnect``)."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(connection))


def _row(values: Sequence[object]) -> StoredRecord:
    return StoredRecord(*values)  # type: ignore[arg-type]


# Rows go in by multi-row INSERTs of a few fixed sizes: one statement step per chunk instead of
# one per row, so the worker thread takes the interpreter lock a few times per group rather than
# once per event, and the few distinct statements stay in sqlite3's statement cache.
_INSERT_CHUNKS = (256, 64, 16, 4, 1)
_INSERT_SQL = {
    size: "INSERT INTO events VALUES " + ",".join(["(?,?,?,?,?,?,?,?,?,?,?,?,?)"] * size)
    for size in _INSERT_CHUNKS
}


def _insert_events(connection: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    start = 0
    for size in _INSERT_CHUNKS:
        while len(rows) - start >= size:
            parameters = [value for row in rows[start : start + size] for value in row]
            connection.execute(_INSERT_SQL[size], parameters)
            start += size


def _chunks(items: Sequence[_T]) -> Iterable[Sequence[_T]]:
    for start in range(0, len(items), _SQL_PARAMETER_CHUNK):
        yield items[start : start + _SQL_PARAMETER_CHUNK]


class _StreamCache:
    """Stream numbers and versions as of ``head``, so that a group commit need not look them up.

    Valid only while this process is the file's only writer: a head that moved without us
    means another process appended, and the cache is dropped. Bounded by dropping it whole.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.head = -1
        self.entries: dict[str, tuple[int, int]] = {}

    def check(self, head: int) -> None:
        if head != self.head:
            self.entries.clear()
            self.head = head

    def update(self, head: int, entries: dict[str, tuple[int, int]]) -> None:
        if len(self.entries) + len(entries) > self.capacity:
            self.entries.clear()
        self.entries.update(entries)
        self.head = head

    def invalidate(self) -> None:
        self.entries.clear()
        self.head = -1


class SQLiteLog(GroupCommitLog[sqlite3.Connection]):
    """The SQLite backend. Open it with ``open`` (an async context manager)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        group_commit: bool = True,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        stream_cache_size: int = DEFAULT_STREAM_CACHE_SIZE,
        erase_timeout: float = DEFAULT_ERASE_TIMEOUT,
        codec: Codec | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(
            group_commit=group_commit,
            max_batch_events=max_batch_events,
            codec=codec,
            clock=clock,
        )
        if synchronous not in ("FULL", "NORMAL"):
            raise ConfigurationError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        # Written so that NaN fails too; an infinite interval would never poll.
        if not 0 < poll_interval < math.inf:
            raise ConfigurationError(
                f"poll_interval must be a positive, finite number of seconds, not {poll_interval}"
            )
        if stream_cache_size < 0:
            raise ConfigurationError(f"stream_cache_size must be >= 0, not {stream_cache_size}")
        if not 0 <= erase_timeout < math.inf:
            raise ConfigurationError(
                f"erase_timeout must be a finite number of seconds >= 0, not {erase_timeout}"
            )
        self.path = os.fspath(path)
        if "\0" in self.path:
            raise ConfigurationError(f"an SQLite log path holds no NUL character: {self.path!r}")
        self.synchronous = synchronous
        self.poll_interval = poll_interval
        self._streams = _StreamCache(stream_cache_size)
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        # The log's files that could be written when it was opened.
        self._writable: tuple[str, ...] = ()
        self._reader_lock = trio.Lock()
        self._background_connection: sqlite3.Connection | None = None
        # Stream names by number, for the reader thread alone. A stream's number never names
        # another stream: streams are never deleted, and a number taken by a rolled-back insert
        # is in no committed row.
        self._stream_names: dict[int, str] = {}
        self._stream_names_capacity = min(max(stream_cache_size, 1), _READ_STREAM_NAMES)
        self._checkpointer: sqlite3.Connection | None = None
        self._eraser = Eraser(
            functools.partial(trio.to_thread.run_sync, self._checkpoint),
            holds=f"{self.path}-wal (another connection reads it)",
            timeout=erase_timeout,
            close=self._close_checkpointer,
        )

    @property
    def name(self) -> str:
        return f"SQLite log {self.path!r}"

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "FULL",
        group_commit: bool = True,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        stream_cache_size: int = DEFAULT_STREAM_CACHE_SIZE,
        erase_timeout: float = DEFAULT_ERASE_TIMEOUT,
        codec: Codec | None = None,
        clock: Clock | None = None,
    ) -> AsyncIterator[SQLiteLog]:
        """Open (creating if needed) the log in ``path``; closed when the block ends."""
        log = cls(
            path,
            synchronous=synchronous,
            group_commit=group_commit,
            max_batch_events=max_batch_events,
            poll_interval=poll_interval,
            stream_cache_size=stream_cache_size,
            erase_timeout=erase_timeout,
            codec=codec,
            clock=clock,
        )
        await trio.to_thread.run_sync(log._connect)
        try:
            async with log._running(log._eraser.run):
                yield log
        finally:
            log._mark_closed()
            with trio.CancelScope(shield=True):
                async with log._background_lock:
                    await trio.to_thread.run_sync(log._disconnect)

    # --- connections (worker thread) ---

    def _open_connection(self) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {self.synchronous}")
        # What a delete or an update frees is zeroed, not left in the file's free space.
        connection.execute("PRAGMA secure_delete = ON")
        return connection

    def _check_length(self) -> None:
        """Refuse a file shorter than its header says (a copy or a disk that lost its tail):
        SQLite reads the pages missing as empty, and the log would end early without a word.

        Only without a write-ahead log: while one holds frames, a checkpoint a crash cut short
        may have left any of its writes to the file, which the frames (read first) make whole.
        """
        try:
            # Not opened unless a regular file: opening a FIFO waits for a writer.
            if not stat.S_ISREG(os.stat(self.path).st_mode):
                return
            if os.path.exists(f"{self.path}-wal") and os.stat(f"{self.path}-wal").st_size:
                return
            with open(self.path, "rb") as file:
                header = file.read(100)
                size = os.fstat(file.fileno()).st_size
        except OSError:
            return  # A file that cannot be read is SQLite's to report.
        if len(header) < 100 or not header.startswith(b"SQLite format 3\0"):
            return
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        pages = int.from_bytes(header[28:32], "big")
        # The page count is only valid if written with the change counter it was written with.
        if header[24:28] == header[92:96] and size < pages * page_size:
            raise LogError(
                f"SQLite log {self.path!r} is cut short: {size} bytes, where its header counts"
                f" {pages} pages of {page_size} bytes; nothing was read from it"
            )

    def _connect(self) -> None:
        try:
            self._check_length()
            self._writer = self._open_connection()
            self._prepare_schema(self._writer)
            self._reader = self._open_connection()
            # After an unclean stop the write-ahead log may hold redacted bytes: erased before
            # anything else, where no other process reads it now.
            self._checkpoint()
        except sqlite3.Error as error:
            self._disconnect()
            raise LogError(f"cannot open SQLite log {self.path!r}: {error}") from error
        except InertError:
            self._disconnect()
            raise
        files = (self.path, f"{self.path}-wal", f"{self.path}-shm")
        self._writable = tuple(file for file in files if os.access(file, os.W_OK))

    def _no_longer_writable(self) -> str | None:
        """A file of the log that could be written when it was opened and cannot be now (made
        read-only or immutable, its file system remounted read-only, or gone)."""
        return next((file for file in self._writable if not os.access(file, os.W_OK)), None)

    def _check_writable(self, what: str) -> None:
        # SQLite writes the -shm file through a memory mapping, even to read, and such a write
        # to a file that became read-only kills the process with SIGBUS: it must not be reached.
        file = self._no_longer_writable()
        if file is not None:
            raise LogError(
                f"SQLite log {self.path!r} can no longer be written ({file!r} became read-only"
                f" or went away); {what}"
            )

    def _disconnect(self) -> None:
        # Closing the last connection to a file checkpoints it, through the -shm mapping too: a
        # log that can no longer be written keeps its connections open until the process ends.
        keep = self._no_longer_writable() is not None
        if not keep:
            self._close_checkpointer()
        for connection in (self._background_connection, self._reader, self._writer):
            if connection is not None:
                if keep:
                    _abandon(connection)
                else:
                    connection.close()
        self._background_connection = self._reader = self._writer = None

    def _checkpoint(self) -> bool:
        """Checkpoint the write-ahead log into the file and truncate it, once; whether it
        could (not while another connection reads an older state of the file, nor once the
        file can no longer be written: see ``_check_writable``)."""
        if self._no_longer_writable() is not None:
            return False
        connection = self._checkpointer
        if connection is None:
            # A busy handler of its own, short: waiting is the eraser's business, not SQLite's.
            connection = self._checkpointer = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0.05
            )
        try:
            (busy, _, _) = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.OperationalError:
            return False
        return not busy

    def _close_checkpointer(self) -> None:
        if self._checkpointer is not None:
            if self._no_longer_writable() is not None:
                _abandon(self._checkpointer)
            else:
                self._checkpointer.close()
            self._checkpointer = None

    def _prepare_schema(self, connection: sqlite3.Connection) -> None:
        connection.execute("BEGIN IMMEDIATE")
        try:
            application_id = connection.execute("PRAGMA application_id").fetchone()[0]
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            tables = connection.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if application_id == 0 and version == 0 and tables == 0:
                _execute_script(connection, _SCHEMA)
                _new_identity(connection)
            elif application_id != APPLICATION_ID:
                raise LogError(
                    f"{self.path!r} is an SQLite file of another program (application id"
                    f" {application_id:#x}), not an inert log"
                )
            elif version > SCHEMA_VERSION:
                raise LogError(
                    f"{self.path!r} has log schema version {version}, written by a newer inert;"
                    f" this inert reads schema versions up to {SCHEMA_VERSION}: open it with a"
                    " newer inert"
                )
            elif version < SCHEMA_VERSION:
                self._migrate(connection, version)
            identities = connection.execute("SELECT identity, secret FROM log_identity").fetchall()
            if len(identities) != 1:
                raise LogError(
                    f"{self.path!r} holds {len(identities)} identities of its log, not one:"
                    " it was changed by hand"
                )
            ((self._identity, self._secret),) = identities
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    def _migrate(self, connection: sqlite3.Connection, version: int) -> None:
        for step in range(version, SCHEMA_VERSION):
            migration = MIGRATIONS.get(step)
            if migration is None:
                raise LogError(
                    f"{self.path!r} has log schema version {version} and this inert has no"
                    f" upgrade from version {step} to {step + 1}; open it with an inert that"
                    f" reads schema {version}"
                )
            migration(connection)
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    # --- appends ---

    def _commit_group(self, group: list[AppendRequest]) -> CommittedGroup:
        connection = self._writer
        if connection is None:
            raise LogError("SQLite log is closed")
        self._check_writable("the append was not written")
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                committed = self._write_group(connection, group)
                connection.execute("COMMIT")
            except BaseException:
                self._streams.invalidate()
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise LogError(f"SQLite append to {self.path!r} failed: {error}") from error
        return committed

    def _lookup_streams(
        self, connection: sqlite3.Connection, names: list[str]
    ) -> dict[str, tuple[int, int]]:
        found: dict[str, tuple[int, int]] = {}
        # Keyed by the callers' own name objects rather than the copies SQLite returns: the
        # cache then holds no second copy of every stream name the runtime holds already.
        asked = {name: name for name in names}
        for chunk in _chunks(names):
            marks = ",".join("?" * len(chunk))
            for name, stream_id, version in connection.execute(
                "SELECT s.name, s.stream_id, coalesce(max(e.version), 0) FROM streams AS s"
                f" LEFT JOIN events AS e ON e.stream_id = s.stream_id WHERE s.name IN ({marks})"
                " GROUP BY s.stream_id",
                chunk,
            ):
                found[asked.get(name, name)] = (stream_id, version)
        return found

    def _write_group(
        self, connection: sqlite3.Connection, group: list[AppendRequest]
    ) -> CommittedGroup:
        last = connection.execute(
            "SELECT position, recorded_at FROM events ORDER BY position DESC LIMIT 1"
        ).fetchone()
        head = 0 if last is None else last[0]
        self._streams.check(head)
        existing = self._stored_events(
            connection, list({record.event_id for request in group for record in request.records})
        )
        names = {record.stream for request in group for record in request.records}
        names.update(stream for request in group for stream in request.expected)
        cached = self._streams.entries
        streams = {name: cached[name] for name in names if name in cached}
        missing = [name for name in names if name not in streams]
        if missing:
            streams.update(self._lookup_streams(connection, missing))
        versions = {name: version for name, (_, version) in streams.items()}
        plan = plan_appends(
            [(request.records, request.expected) for request in group],
            digest_key=self.key(PAYLOAD_DIGEST_KEY),
            existing=existing,
            stream_versions=versions,
            head=head,
            recorded_at=self._stamp_after(None if last is None else last[1]),
        )
        new_streams = [(name,) for name in {row.stream for row in plan.rows} - streams.keys()]
        if new_streams:
            connection.executemany("INSERT INTO streams (name) VALUES (?)", new_streams)
            streams.update(self._lookup_streams(connection, [name for (name,) in new_streams]))
        if plan.rows:
            _insert_events(
                connection, [(*row[:2], streams[row.stream][0], *row[3:]) for row in plan.rows]
            )
        self._streams.update(
            plan.head,
            {name: (stream_id, versions[name]) for name, (stream_id, _) in streams.items()},
        )
        return CommittedGroup(plan.outcomes, plan.rows, {})

    def _stored_events(
        self, connection: sqlite3.Connection, event_ids: list[str]
    ) -> dict[str, StoredRecord]:
        # Re-appends are rare: ask for ids only, and fetch whole rows just for those found.
        found: list[str] = []
        for chunk in _chunks(event_ids):
            marks = ",".join("?" * len(chunk))
            found.extend(
                event_id
                for (event_id,) in connection.execute(
                    f"SELECT event_id FROM events WHERE event_id IN ({marks})", chunk
                )
            )
        existing: dict[str, StoredRecord] = {}
        for chunk in _chunks(found):
            marks = ",".join("?" * len(chunk))
            for values in connection.execute(f"{_SELECT} WHERE e.event_id IN ({marks})", chunk):
                existing[values[1]] = _row(values)
        return existing

    # --- reads (worker thread, one reader connection) ---

    async def _query(self, sql: str, parameters: Sequence[object]) -> list[tuple[object, ...]]:
        async with self._reader_lock:
            return await trio.to_thread.run_sync(self._fetch, sql, parameters)

    def _fetch(self, sql: str, parameters: Sequence[object]) -> list[tuple[object, ...]]:
        if self._reader is None:
            raise LogError("SQLite log is closed")
        self._check_writable("nothing more is read from it")
        try:
            return self._reader.execute(sql, parameters).fetchall()
        except sqlite3.Error as error:
            raise LogError(f"SQLite read of {self.path!r} failed: {error}") from error

    async def _read_rows(self, from_position: int, limit: int | None) -> list[StoredRecord]:
        async with self._reader_lock:
            return await trio.to_thread.run_sync(
                self._fetch_by_position, from_position, -1 if limit is None else limit
            )

    def _fetch_by_position(self, from_position: int, limit: int) -> list[StoredRecord]:
        rows: list[tuple[Any, ...]] = self._fetch(_SELECT_BY_POSITION, (from_position, limit))
        names = self._stream_names
        numbers = {row[2] for row in rows}
        missing = numbers - names.keys()
        if missing:
            if len(names) + len(missing) > self._stream_names_capacity:
                names.clear()
                missing = numbers
            for chunk in _chunks(list(missing)):
                marks = ",".join("?" * len(chunk))
                found: list[tuple[Any, ...]] = self._fetch(
                    f"SELECT stream_id, name FROM streams WHERE stream_id IN ({marks})", chunk
                )
                names.update(found)
        make = StoredRecord._make
        try:
            return [make((row[0], row[1], names[row[2]], *row[3:])) for row in rows]
        except KeyError as error:
            raise LogDamaged(
                next(row[0] for row in rows if row[2] not in names),
                f"the row names stream number {error.args[0]}, which the log does not hold",
            ) from None

    async def _read_stream_rows(self, stream: str, from_version: int) -> list[StoredRecord]:
        rows = await self._query(
            f"{_SELECT} WHERE s.name = ? AND e.version >= ? ORDER BY e.version",
            (stream, from_version),
        )
        return [_row(values) for values in rows]

    async def _head(self) -> int:
        rows = await self._query("SELECT coalesce(max(position), 0) FROM events", ())
        return rows[0][0]  # type: ignore[return-value]

    async def _stream_version(self, stream: str) -> int:
        rows = await self._query(
            "SELECT coalesce(max(e.version), 0) FROM events AS e"
            " JOIN streams AS s ON s.stream_id = e.stream_id WHERE s.name = ?",
            (stream,),
        )
        return rows[0][0]  # type: ignore[return-value]

    # --- runtimes on the log ---
    # Each runtime holds a shared lock of a file beside the log (flock, which SQLite's own
    # locks of the log file never meet); a runtime is running while one is held, and the
    # operating system lets go of it when its process dies. The file stays empty.

    @property
    def presence_path(self) -> str:
        """The file whose locks say that runtimes run on this log."""
        return f"{self.path}-runtimes"

    @asynccontextmanager
    async def _presence(self) -> AsyncIterator[None]:
        descriptor = await trio.to_thread.run_sync(self._hold_presence)
        try:
            yield
        finally:
            os.close(descriptor)

    def _hold_presence(self) -> int:
        try:
            descriptor = os.open(self.presence_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise LogError(
                f"cannot mark a runtime running on {self.name}: {self.presence_path!r}:"
                f" {error.strerror}"
            ) from None
        # Waits only while a check holds the file for an instant.
        fcntl.flock(descriptor, fcntl.LOCK_SH)
        return descriptor

    async def _runtime_running(self) -> bool:
        return await trio.to_thread.run_sync(self._presence_held)

    def _presence_held(self) -> bool:
        try:
            descriptor = os.open(self.presence_path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        except OSError as error:
            raise LogError(
                f"cannot tell whether a runtime runs on {self.name}: {self.presence_path!r}:"
                f" {error.strerror}"
            ) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(descriptor)
        return False

    async def _storage_problems(self) -> list[str]:
        erasure = [] if self._eraser.problem is None else [self._eraser.problem]
        try:
            problems = erasure + [
                f"PRAGMA integrity_check: {message}"
                for (message,) in await self._query("PRAGMA integrity_check", ())
                if message != "ok"
            ]
        except LogError as error:
            # A page damaged badly enough stops the check itself.
            problems = [*erasure, f"PRAGMA integrity_check could not finish: {error}"]
        [(rows, head)] = await self._query(
            "SELECT count(*), coalesce(max(position), 0) FROM events", ()
        )
        if rows != head:
            problems.append(f"{rows} rows hold positions up to {head}: some are missing")
        problems.extend(
            f"stream {name!r} has {count} rows and versions up to {version}: some are missing"
            for name, count, version in await self._query(
                "SELECT s.name, count(*), max(e.version) FROM events AS e"
                " JOIN streams AS s ON s.stream_id = e.stream_id"
                " GROUP BY e.stream_id HAVING count(*) != max(e.version)",
                (),
            )
        )
        return problems

    async def _redact_many(self, redactions: list[FrozenRedaction]) -> int:
        done = await super()._redact_many(redactions)
        self._eraser.redacted()
        return done

    async def erased(self) -> bool:
        return await self._eraser.erased()

    def _redact_all_in(
        self, connection: sqlite3.Connection, redactions: list[FrozenRedaction]
    ) -> int:
        return sum(self._redact_in(connection, *redaction) for redaction in redactions)

    def _redact_in(
        self,
        connection: sqlite3.Connection,
        stream: str,
        up_to_version: int,
        event_types: frozenset[str] | None,
        keys: frozenset[CallKey] | None,
    ) -> int:
        # Only the rows of the types asked for leave the database: a redaction limited to some
        # calls is made for each batch of calls that end, over a stream of others' rows.
        types = sorted(event_types) if event_types is not None else []
        of_types = f" AND e.event_type IN ({','.join('?' * len(types))})" if types else ""
        rows = [
            row
            for row in map(
                _row,
                connection.execute(
                    f"{_SELECT} WHERE s.name = ? AND e.version <= ? AND e.payload_digest IS NULL"
                    + of_types,
                    (stream, up_to_version, *types),
                ),
            )
            if reached(row, self.codec, event_types, keys)
        ]
        done = [redacted(row, self.codec, self.key(PAYLOAD_DIGEST_KEY)) for row in rows]
        connection.executemany(
            "UPDATE events SET schema_version = ?, payload = ?, payload_digest = ?, checksum = ?"
            " WHERE position = ?",
            [
                (row.schema_version, row.payload, row.digest, row.checksum, row.position)
                for row in done
            ],
        )
        if keys is None:
            connection.execute(
                "DELETE FROM snapshot_payloads WHERE stream = ? AND first_version <= ?",
                (stream, up_to_version),
            )
            return len(done)
        firsts = [
            version
            for (version,) in connection.execute(
                "SELECT DISTINCT first_version FROM snapshot_payloads"
                " WHERE stream = ? AND first_version <= ?",
                (stream, up_to_version),
            )
        ]
        calls = self._calls_at(connection, stream, firsts)
        connection.executemany(
            "DELETE FROM snapshot_payloads WHERE stream = ? AND first_version = ?",
            [
                (stream, version)
                for version in firsts
                if redaction_takes(version, up_to_version, keys, calls.get(version))
            ],
        )
        return len(done)

    def _delete_snapshot_in(self, connection: sqlite3.Connection, name: str) -> None:
        connection.execute("DELETE FROM snapshot_payloads WHERE name = ?", (name,))
        connection.execute("DELETE FROM snapshots WHERE name = ?", (name,))

    def _calls_at(
        self, connection: sqlite3.Connection, stream: str, versions: Sequence[int]
    ) -> dict[int, CallKey | None]:
        """The call of the stream's event at each of these versions, as far as its row tells."""
        calls: dict[int, CallKey | None] = {}
        for chunk in _chunks(versions):
            marks = ",".join("?" * len(chunk))
            for values in connection.execute(
                f"{_SELECT} WHERE s.name = ? AND e.version IN ({marks})", (stream, *chunk)
            ):
                row = _row(values)
                calls[row.version] = call_of(row, self.codec)
        return calls

    def _write_snapshot_in(self, connection: sqlite3.Connection, snapshot: StoredSnapshot) -> None:
        found: dict[str, list[tuple[int, CallKey | None]]] = {}
        for chunk in _chunks(sorted(payload_streams(snapshot))):
            marks = ",".join("?" * len(chunk))
            for values in connection.execute(
                f"{_SELECT} WHERE s.name IN ({marks}) AND e.payload_digest IS NOT NULL", chunk
            ):
                row = _row(values)
                found.setdefault(row.stream, []).append((row.version, call_of(row, self.codec)))
        highest = {stream: max(version for version, _ in seen) for stream, seen in found.items()}
        redacted = {
            stream: StreamRedactions(found[stream], self._calls_at(connection, stream, versions))
            for stream, versions in judged_versions(snapshot, highest).items()
        }
        name = snapshot.name
        connection.execute("DELETE FROM snapshot_payloads WHERE name = ?", (name,))
        connection.execute(
            "INSERT OR REPLACE INTO snapshots VALUES (?, ?, ?, ?, ?)",
            (name, snapshot.position, snapshot.stamp, snapshot.state, snapshot.digest),
        )
        connection.executemany(
            "INSERT INTO snapshot_payloads VALUES (?, ?, ?, ?, ?, ?)",
            (
                (name, ordinal, p.part, p.stream, p.first_version, p.data)
                for ordinal, p in kept_payloads(snapshot, redacted)
            ),
        )

    def _in_own_transaction(self, what: str, work: Callable[[sqlite3.Connection], _T]) -> _T:
        # The writer connection belongs to the write loop, which may be committing right now:
        # redactions and snapshots have a connection of their own, kept.
        self._check_writable(f"the {what} was not made")
        try:
            connection = self._background_connection
            if connection is None:
                connection = self._background_connection = self._open_connection()
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = work(connection)
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.Error as error:
            raise LogError(f"SQLite {what} in {self.path!r} failed: {error}") from error
        return result

    async def _adopt_identity(self, identity: str, secret: bytes) -> None:
        def adopt(connection: sqlite3.Connection) -> None:
            if connection.execute("SELECT 1 FROM events LIMIT 1").fetchone() is not None:
                raise LogError(
                    f"SQLite log {self.path!r} holds events: it cannot take another log's identity"
                )
            connection.execute(
                "UPDATE log_identity SET identity = ?, secret = ?", (identity, secret)
            )

        self._check_accepting("its identity was not changed")
        await self._background("identity change", adopt)
        self._identity, self._secret = identity, secret

    async def _read_snapshot(self, name: str) -> StoredSnapshot | None:
        return snapshot_from_rows(name, await self._query(_READ_SNAPSHOT, (name, name)))

    async def _wait_for_appends(self, since: trio.Event) -> None:
        # Another process may append to the same file; polling bounds how late it is seen.
        with trio.move_on_after(self.poll_interval):
            await since.wait()
