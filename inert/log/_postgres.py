"""The PostgreSQL log: one database shared by processes on any number of machines.

Appends work as on SQLite. Appenders queue their encoded batch and wait; one writer task per
process takes everything queued (up to ``max_batch_events``) and a worker thread writes it in
one transaction, each append of the group planned on its own by the shared planner, so that a
conflicting append fails alone. An append is acknowledged only after its transaction has
committed (with the server's default ``synchronous_commit=on``: flushed to its WAL).

Gap-free order across processes: every appending transaction starts by locking the one row of
the ``head`` table (``SELECT ... FOR UPDATE``), which holds the last position, plans its rows
after that position, and sets the row to its new head before it commits. Appending
transactions of all processes therefore run one at a time, in the order they take the lock,
and a transaction gets the lock only once the previous holder's commit is visible. Positions
are thus assigned in commit order: a reader never sees position N+1 without N, and no
transaction can commit a position below one committed already, however late it commits. The
price is that appends of all processes are serialised on one row; group commit keeps it
cheap (one lock and one commit per group of appends of a process). A writer that stalls while
it holds the lock is ended by the server (``idle_in_transaction_session_timeout``), and the
lock with it, after ``STALLED_TRANSACTION_TIMEOUT``.

Subscribers are woken by ``NOTIFY``, sent in the appending transaction and so delivered only
at its commit. Each log ``LISTEN``\\s on a connection of its own whose socket the Trio loop
waits on directly; subscriptions also poll every ``poll_interval``, which covers a lost
listening connection until it is open again.

Tables live in a schema of their own (``schema``, ``inert`` by default), created on first
open unless the log is opened with ``create=False``: then a schema without them is refused,
naming the schemas of that database that hold an inert log (those with an ``inert_meta``
table). Its ``inert_meta`` table names the application and the schema version: a schema holding
other tables is refused; an older schema version is upgraded by the registered migrations in
one transaction, or refused with a message naming both versions; a newer one is refused.
Concurrent first opens are serialised by an advisory lock.
"""

from __future__ import annotations

import hashlib
import math
import re
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs
import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..events._codec import Codec
from ..events._errors import ConfigurationError, InertError, LogDamaged, LogError, LogNotFound
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
from ._sealing import key_name, new_key, seal, sealed_types, unseal
from ._snapshots import (
    StoredSnapshot,
    StreamRedactions,
    judged_versions,
    kept_payloads,
    payload_streams,
    redaction_takes,
    snapshot_from_rows,
)

APPLICATION = "inert-log"
SCHEMA_VERSION = 5
Connection = psycopg.Connection[tuple[Any, ...]]
Migration = Callable[[Connection, str], None]
"""A step from schema version N to N + 1, given a connection in a transaction and the schema."""
_T = TypeVar("_T")

DEFAULT_SCHEMA = "inert"
MAX_NAMED = 10
"""The most schemas (or tables) a refusal names: a database may hold many."""
DEFAULT_MAX_BATCH_EVENTS = 4096
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_CONNECT_TIMEOUT = 10
_VACUUM_LOCK_WAIT_MS = 100
"""How long the rewrite of the table of keys waits for its lock before it gives up and tries
again later: appends that seal queue behind it meanwhile."""
STALLED_TRANSACTION_TIMEOUT = 10.0
"""Seconds a transaction of this log may wait on its process before the server ends it: a
writer that stalls (or loses its network) while it holds the head's lock holds up every
process's appends, so the server ends its session and the lock goes with it."""
# Lower case, so that the name means the same quoted or not, and short enough that the
# notification channel named after it fits PostgreSQL's 63-byte identifiers.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,52}")


def _snapshot_sql(schema: str) -> str:
    # Payloads are indexed by stream, which redaction deletes them by.
    return f"""
CREATE TABLE {schema}.snapshots (
    name text PRIMARY KEY,
    position bigint NOT NULL,
    stamp text NOT NULL,
    state bytea NOT NULL,
    digest text NOT NULL
);
CREATE TABLE {schema}.snapshot_payloads (
    name text NOT NULL,
    ordinal integer NOT NULL,
    part text NOT NULL,
    stream text NOT NULL,
    first_version integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (name, ordinal)
);
CREATE INDEX ON {schema}.snapshot_payloads (stream);
"""


def _schema_sql(schema: str) -> str:
    return f"""
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE {schema}.inert_meta (
    application text NOT NULL,
    schema_version integer NOT NULL,
    identity text NOT NULL,
    secret bytea NOT NULL
);
CREATE TABLE {schema}.head (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    position bigint NOT NULL
);
CREATE TABLE {schema}.streams (
    stream_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE,
    version bigint NOT NULL
);
CREATE TABLE {schema}.events (
    position bigint PRIMARY KEY,
    event_id text NOT NULL UNIQUE,
    stream_id bigint NOT NULL REFERENCES {schema}.streams (stream_id),
    version bigint NOT NULL CHECK (version >= 1),
    recorded_at bigint NOT NULL,
    event_type text NOT NULL,
    schema_version integer NOT NULL,
    payload bytea,
    payload_length integer NOT NULL,
    payload_digest bytea,
    traceparent text,
    tracestate text,
    checksum bigint NOT NULL,
    key_id bigint,
    UNIQUE (stream_id, version)
);
INSERT INTO {schema}.head (position) VALUES (0);
{_snapshot_sql(schema)}
{_keys_sql(schema)}
ALTER TABLE {schema}.snapshot_payloads ADD COLUMN key_id bigint;"""


def _keys_sql(schema: str) -> str:
    # A row sealed under a key names it; the index finds what a key still seals when a
    # redaction asks whether it may go.
    return f"""
CREATE TABLE {schema}.payload_keys (
    key_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text NOT NULL UNIQUE,
    key bytea NOT NULL
);
CREATE INDEX ON {schema}.events (key_id) WHERE key_id IS NOT NULL;
"""


def _add_keys(connection: Connection, schema: str) -> None:
    # Rows written before are left as they are: sealing starts with the rows written after.
    connection.execute(f"ALTER TABLE {schema}.events ADD COLUMN key_id bigint")
    connection.execute(f"ALTER TABLE {schema}.snapshot_payloads ADD COLUMN key_id bigint")
    connection.execute(_keys_sql(schema))


def _add_snapshots(connection: Connection, schema: str) -> None:
    connection.execute(_snapshot_sql(schema))


def _add_checksums(connection: Connection, schema: str) -> None:
    # The rows are taken as they are: nothing older can tell whether one was damaged before.
    connection.execute(f"ALTER TABLE {schema}.events ADD COLUMN checksum bigint NOT NULL DEFAULT 0")
    # The rows as schema 2 held them: nothing sealed yet, no table of keys.
    select = (
        "SELECT e.position, e.event_id, s.name, e.version, e.recorded_at, e.event_type,"
        " e.schema_version, e.payload, e.payload_length, e.payload_digest, e.traceparent,"
        f" e.tracestate FROM {schema}.events AS e"
        f" JOIN {schema}.streams AS s ON s.stream_id = e.stream_id"
        " WHERE e.position >= %s ORDER BY e.position LIMIT %s"
    )
    position = 1
    while rows := connection.execute(select, (position, 4096)).fetchall():
        with connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {schema}.events SET checksum = %s WHERE position = %s",
                [(with_checksum(row).checksum, row[0]) for row in rows],
            )
        position = rows[-1][0] + 1


def _add_identity(connection: Connection, schema: str) -> None:
    connection.execute(
        f"ALTER TABLE {schema}.inert_meta ADD COLUMN identity text, ADD COLUMN secret bytea"
    )
    connection.execute(
        f"UPDATE {schema}.inert_meta SET identity = %s, secret = %s",
        (new_identity(), new_secret()),
    )
    connection.execute(
        f"ALTER TABLE {schema}.inert_meta ALTER COLUMN identity SET NOT NULL,"
        " ALTER COLUMN secret SET NOT NULL"
    )


MIGRATIONS: dict[int, Migration] = {
    1: _add_snapshots,
    2: _add_checksums,
    3: _add_identity,
    4: _add_keys,
}


@attrs.frozen
class _Statements:
    """The SQL of one schema, written once when the log is made."""

    select: str
    lock_head: str
    stored: str
    streams: str
    insert_streams: str
    set_versions: str
    insert_events: str
    set_head: str
    read: str
    read_stream: str
    head: str
    stream_version: str
    to_redact: str
    to_redact_of_types: str
    redact: str
    lock_snapshots: str
    redact_snapshots: str
    snapshot_first_versions: str
    delete_snapshot_payloads_from: str
    rows_at: str
    redacted_rows: str
    delete_snapshot_payloads: str
    delete_snapshot: str
    write_snapshot: str
    write_snapshot_payload: str
    read_snapshot: str
    keys: str
    insert_keys: str
    lock_keys: str
    delete_keys: str
    snapshot_keys: str

    @classmethod
    def of(cls, schema: str) -> _Statements:
        # A row's columns, then the key its payload is sealed under (see ``_open``).
        select = (
            "SELECT e.position, e.event_id, s.name, e.version, e.recorded_at, e.event_type,"
            " e.schema_version, e.payload, e.payload_length, e.payload_digest, e.traceparent,"
            f" e.tracestate, e.checksum, e.key_id, k.key FROM {schema}.events AS e"
            f" JOIN {schema}.streams AS s ON s.stream_id = e.stream_id"
            f" LEFT JOIN {schema}.payload_keys AS k ON k.key_id = e.key_id"
        )
        return cls(
            select=select,
            lock_head=f"SELECT position FROM {schema}.head FOR UPDATE",
            stored=f"{select} WHERE e.event_id = ANY(%s)",
            streams=(f"SELECT name, stream_id, version FROM {schema}.streams WHERE name = ANY(%s)"),
            insert_streams=(
                f"INSERT INTO {schema}.streams (name, version)"
                " SELECT * FROM unnest(%s::text[], %s::bigint[]) RETURNING name, stream_id"
            ),
            set_versions=(
                f"UPDATE {schema}.streams AS s SET version = v.version"
                " FROM unnest(%s::bigint[], %s::bigint[]) AS v(stream_id, version)"
                " WHERE s.stream_id = v.stream_id"
            ),
            # COPY in binary: the cheapest way in for many rows, and no escaping of payloads.
            insert_events=f"COPY {schema}.events FROM STDIN (FORMAT BINARY)",
            # The notification goes out with the commit that moves the head, never before.
            set_head=(
                f"UPDATE {schema}.head SET position = %s RETURNING pg_notify(%s, position::text)"
            ),
            read=f"{select} WHERE e.position >= %s ORDER BY e.position LIMIT %s",
            read_stream=f"{select} WHERE s.name = %s AND e.version >= %s ORDER BY e.version",
            head=f"SELECT position FROM {schema}.head",
            stream_version=f"SELECT version FROM {schema}.streams WHERE name = %s",
            to_redact=(
                f"{select} WHERE s.name = %s AND e.version <= %s AND e.payload_digest IS NULL"
                " ORDER BY e.position FOR UPDATE OF e"
            ),
            # Only the rows of the types asked for leave the server: a redaction limited to some
            # calls is made for each batch of calls that end, over a stream of others' rows.
            to_redact_of_types=(
                f"{select} WHERE s.name = %s AND e.version <= %s AND e.payload_digest IS NULL"
                " AND e.event_type = ANY(%s) ORDER BY e.position FOR UPDATE OF e"
            ),
            redact=(
                f"UPDATE {schema}.events SET schema_version = %s, payload = %s,"
                " payload_digest = %s, checksum = %s, key_id = NULL WHERE position = %s"
            ),
            # Taken by redactions and snapshot writes, and by nothing else: one that waits for
            # the other then sees what it committed (a payload to delete, or a redacted stream).
            lock_snapshots=f"LOCK TABLE {schema}.snapshot_payloads IN SHARE ROW EXCLUSIVE MODE",
            redact_snapshots=(
                f"DELETE FROM {schema}.snapshot_payloads WHERE stream = %s AND first_version <= %s"
                " RETURNING key_id"
            ),
            snapshot_first_versions=(
                f"SELECT DISTINCT first_version FROM {schema}.snapshot_payloads"
                " WHERE stream = %s AND first_version <= %s"
            ),
            delete_snapshot_payloads_from=(
                f"DELETE FROM {schema}.snapshot_payloads"
                " WHERE stream = %s AND first_version = ANY(%s) RETURNING key_id"
            ),
            rows_at=f"{select} WHERE s.name = %s AND e.version = ANY(%s)",
            redacted_rows=f"{select} WHERE s.name = ANY(%s) AND e.payload_digest IS NOT NULL",
            delete_snapshot_payloads=(
                f"DELETE FROM {schema}.snapshot_payloads WHERE name = %s RETURNING key_id"
            ),
            delete_snapshot=f"DELETE FROM {schema}.snapshots WHERE name = %s",
            write_snapshot=(
                f"INSERT INTO {schema}.snapshots VALUES (%s, %s, %s, %s, %s)"
                " ON CONFLICT (name) DO UPDATE SET position = excluded.position,"
                " stamp = excluded.stamp, state = excluded.state, digest = excluded.digest"
            ),
            write_snapshot_payload=(
                f"INSERT INTO {schema}.snapshot_payloads VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ),
            # One statement, so that it sees one snapshot whole even while a write replaces it;
            # a payload whose key is gone is redacted, and left out.
            read_snapshot=(
                f"SELECT 0, position, stamp, digest, 0, state, NULL::bigint, NULL::bytea"
                f" FROM {schema}.snapshots WHERE name = %s UNION ALL"
                " SELECT 1, p.ordinal, p.part, p.stream, p.first_version, p.data, p.key_id,"
                f" k.key FROM {schema}.snapshot_payloads AS p"
                f" LEFT JOIN {schema}.payload_keys AS k ON k.key_id = p.key_id"
                " WHERE p.name = %s ORDER BY 1, 2"
            ),
            # Shared: a redaction that would destroy one waits for the appends sealing with it.
            keys=(
                f"SELECT name, key_id, key FROM {schema}.payload_keys WHERE name = ANY(%s)"
                " FOR SHARE"
            ),
            insert_keys=(
                f"INSERT INTO {schema}.payload_keys (name, key)"
                " SELECT * FROM unnest(%s::text[], %s::bytea[])"
                " ON CONFLICT (name) DO NOTHING RETURNING name, key_id, key"
            ),
            lock_keys=(
                f"SELECT key_id FROM {schema}.payload_keys WHERE key_id = ANY(%s) FOR UPDATE"
            ),
            # A key goes with the last payload it seals, in a row or a snapshot.
            delete_keys=(
                f"DELETE FROM {schema}.payload_keys AS k WHERE k.key_id = ANY(%s)"
                f" AND NOT EXISTS (SELECT 1 FROM {schema}.events AS e"
                " WHERE e.key_id = k.key_id AND e.payload_digest IS NULL)"
                f" AND NOT EXISTS (SELECT 1 FROM {schema}.snapshot_payloads AS p"
                " WHERE p.key_id = k.key_id) RETURNING k.key_id"
            ),
            snapshot_keys=(
                f"SELECT DISTINCT key_id FROM {schema}.snapshot_payloads"
                " WHERE name = %s AND key_id IS NOT NULL"
            ),
        )


_EVENT_COLUMN_TYPES = [
    "int8",
    "text",
    "int8",
    "int8",
    "int8",
    "text",
    "int4",
    "bytea",
    "int4",
    "bytea",
    "text",
    "text",
    "int8",
    "int8",
]


def _reason(error: psycopg.Error) -> str:
    """The driver's message on one line (libpq's span several)."""
    return " ".join(str(error).split())


def _row(values: Sequence[Any]) -> StoredRecord:
    """The row of a ``select``: its payload opened where it is sealed."""
    if values[13] is None:
        return StoredRecord(*values[:13])
    row = StoredRecord(*values[:13])
    key, sealed = values[14], row.payload
    if key is None or sealed is None:
        raise LogDamaged(row.position, "the key its payload is sealed under was destroyed")
    return row._replace(
        payload=unseal(bytes(key), bytes(sealed), row.event_id.encode(), row.position)
    )


def _opened_payload(row: Sequence[Any], position: int) -> Sequence[Any] | None:
    """A row of ``read_snapshot`` as ``snapshot_from_rows`` reads it: a payload opened where it
    is sealed; one whose key was destroyed (its bytes redacted since) left out as ``None``."""
    *columns, key_id, key = row
    if key_id is None:
        return columns
    if key is None:
        return None
    columns[5] = unseal(
        bytes(key), bytes(columns[5]), columns[2].encode(), position, "a payload of its snapshot"
    )
    return columns


def public_url(conninfo: str) -> str:
    """The server and database a connection string (URL or key=value) names, as a URL that may
    be shown: no password, no options."""
    parts = urlsplit(conninfo)
    found: list[object]
    if parts.scheme in ("postgresql", "postgres"):
        found = [parts.username, parts.hostname, parts.port, parts.path[1:]]
    else:
        try:
            settings = conninfo_to_dict(conninfo)
        except psycopg.Error:
            return "postgresql://(a connection string libpq cannot read)"
        found = [settings.get(name) for name in ("user", "host", "port", "dbname")]
    user, host, port, dbname = (str(value) if value else "" for value in found)
    if ":" in host:
        host = f"[{host}]"
    return f"postgresql://{user + '@' if user else ''}{host}{':' + port if port else ''}/{dbname}"


class _ConnectionLost(Exception):
    """A connection the server ended or lost: worth one new connection and one more try."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


PRESENCE_LOCK_CLASS = 0x696E6572
"""The first key of the advisory locks that say runtimes run on a log (the second is its
schema's)."""

PRESENCE_CHECK_INTERVAL = 5.0
"""Seconds between two checks that a runtime's presence session is still there."""


class _PresenceHolder:
    """The session holding a runtime's presence lock (worker threads only)."""

    def __init__(self, connect: Callable[[], Connection]) -> None:
        self._connect = connect
        self._connection: Connection | None = None
        self._keys: tuple[int, int] | None = None

    def lock(self, keys: tuple[int, int]) -> None:
        self._connection = self._connect()
        self._connection.execute("SELECT pg_advisory_lock_shared(%s, %s)", keys)
        self._keys = keys

    def keep(self, keys: tuple[int, int]) -> None:
        """Lock again on a new session where the one holding the lock was lost; a server out
        of reach is tried again at the next check."""
        try:
            if self._connection is not None and not self._connection.closed:
                self._connection.execute("SELECT 1")
                return
        except psycopg.Error:
            pass
        self.close()
        try:
            self.lock(keys)
        except (psycopg.Error, InertError, _ConnectionLost):
            self.close()

    def close(self) -> None:
        connection, keys = self._connection, self._keys
        self._connection = self._keys = None
        if connection is None:
            return
        try:
            # Closing alone ends the session a moment later, while the server winds it down:
            # a check right after would still find the runtime present.
            if keys is not None and not connection.closed:
                connection.execute("SELECT pg_advisory_unlock_shared(%s, %s)", keys)
        except psycopg.Error:
            pass
        finally:
            connection.close()


class PostgresLog(GroupCommitLog[Connection]):
    """The PostgreSQL backend. Open it with ``open`` (an async context manager)."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        group_commit: bool = True,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        erase_timeout: float = DEFAULT_ERASE_TIMEOUT,
        codec: Codec | None = None,
        clock: Clock | None = None,
        create: bool = True,
    ) -> None:
        super().__init__(
            group_commit=group_commit,
            max_batch_events=max_batch_events,
            codec=codec,
            clock=clock,
        )
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ConfigurationError(
                f"PostgreSQL log schema {schema!r} must be 1 to 53 lower-case letters, digits"
                " or underscores, not starting with a digit"
            )
        # Written so that NaN fails too; an infinite interval would never poll.
        if not 0 < poll_interval < math.inf:
            raise ConfigurationError(
                f"poll_interval must be a positive, finite number of seconds, not {poll_interval}"
            )
        if not 0 <= erase_timeout < math.inf:
            raise ConfigurationError(
                f"erase_timeout must be a finite number of seconds >= 0, not {erase_timeout}"
            )
        self.url = public_url(conninfo)
        try:
            settings = conninfo_to_dict(conninfo)
        except psycopg.Error as error:
            raise ConfigurationError(
                f"bad PostgreSQL connection string {self.url}: {_reason(error)}"
            ) from None
        # libpq would wait for an unreachable server as long as the operating system lets it.
        self._conninfo = (
            conninfo
            if "connect_timeout" in settings
            else make_conninfo(conninfo, connect_timeout=DEFAULT_CONNECT_TIMEOUT)
        )
        self.schema = schema
        self.poll_interval = poll_interval
        self._create = create
        self._sql = _Statements.of(schema)
        self._sealed = sealed_types()
        self._channel = f"inert_log_{schema}"
        self._writer: Connection | None = None
        self._writer_pid = 0
        self._reader: Connection | None = None
        self._reader_lock = trio.Lock()
        self._background_connection: Connection | None = None
        self._vacuumer: Connection | None = None
        self._keys_destroyed = False
        self._eraser = Eraser(
            self._vacuum_keys,
            holds=f"the pages of {schema}.payload_keys (appends hold the table)",
            timeout=erase_timeout,
            close=self._close_vacuumer,
        )

    @property
    def name(self) -> str:
        return f"PostgreSQL log {self.url}"

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        conninfo: str,
        *,
        schema: str = DEFAULT_SCHEMA,
        group_commit: bool = True,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        erase_timeout: float = DEFAULT_ERASE_TIMEOUT,
        codec: Codec | None = None,
        clock: Clock | None = None,
        create: bool = True,
    ) -> AsyncIterator[PostgresLog]:
        """Open the log in ``schema`` of the database ``conninfo`` names (a ``postgresql://``
        URL or libpq key=value string), creating its tables if need be, or with ``create=False``
        refusing a schema without them (``LogNotFound``); closed when the block ends."""
        log = cls(
            conninfo,
            schema=schema,
            group_commit=group_commit,
            max_batch_events=max_batch_events,
            poll_interval=poll_interval,
            erase_timeout=erase_timeout,
            codec=codec,
            clock=clock,
            create=create,
        )
        await trio.to_thread.run_sync(log._connect)
        try:
            async with log._running(log._listen_loop, log._eraser.run):
                yield log
        finally:
            log._mark_closed()
            # Reads of subscriptions outside this block may still be running on the reader.
            with trio.CancelScope(shield=True):
                async with log._reader_lock, log._background_lock:
                    await trio.to_thread.run_sync(log._disconnect)

    # --- connections (worker thread) ---

    def _open_connection(self, *, autocommit: bool) -> Connection:
        try:
            connection = psycopg.connect(self._conninfo, autocommit=autocommit)
        except psycopg.ProgrammingError as error:
            raise ConfigurationError(
                f"bad PostgreSQL connection string {self.url}: {_reason(error)}"
            ) from None
        except psycopg.Error as error:
            raise LogError(
                f"cannot connect to PostgreSQL log {self.url}: {_reason(error)}"
            ) from None
        try:
            # A generic plan made while a table was small (a sequential scan) would be kept as
            # it grows: each execution is planned for the table as it is now.
            connection.execute("SET plan_cache_mode = force_custom_plan")
            if not autocommit:
                milliseconds = max(1, round(STALLED_TRANSACTION_TIMEOUT * 1000))
                connection.execute(f"SET idle_in_transaction_session_timeout = {milliseconds}")
                connection.commit()
        except psycopg.Error as error:
            lost = connection.broken
            connection.close()
            if lost:
                # Ended while being set up (the server restarting, an administrator ending
                # connections): lost like one that was in use, and worth the same new try.
                raise _ConnectionLost(_reason(error)) from None
            raise LogError(f"cannot set up a connection to {self.url}: {_reason(error)}") from None
        return connection

    def _vacuum_keys(self) -> bool:
        """Rewrite the table of keys, leaving no page that held a destroyed one, once; whether
        it could (it waits a moment at most for the appends holding the table)."""
        connection = self._vacuumer
        try:
            if connection is None or connection.closed:
                connection = self._vacuumer = self._open_connection(autocommit=True)
                connection.execute(f"SET lock_timeout = {_VACUUM_LOCK_WAIT_MS}")
            connection.execute(f"VACUUM (FULL) {self.schema}.payload_keys")
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            return False
        except (psycopg.Error, InertError, _ConnectionLost):
            self._close_vacuumer()
            return False
        return True

    def _close_vacuumer(self) -> None:
        if self._vacuumer is not None:
            self._vacuumer.close()
            self._vacuumer = None

    def _connect(self) -> None:
        try:
            self._writer = self._open_connection(autocommit=False)
            self._writer_pid = self._writer.info.backend_pid
            self._prepare_schema(self._writer)
            self._reader = self._open_connection(autocommit=True)
        except psycopg.Error as error:
            self._disconnect()
            raise LogError(
                f"cannot open PostgreSQL log {self.url} (schema {self.schema}): {_reason(error)}"
            ) from None
        except _ConnectionLost as lost:
            self._disconnect()
            raise LogError(
                f"cannot open PostgreSQL log {self.url} (schema {self.schema}): {lost.reason}"
            ) from None
        except InertError:
            self._disconnect()
            raise

    def _disconnect(self) -> None:
        for connection in (self._background_connection, self._reader, self._writer):
            if connection is not None:
                connection.close()
        self._background_connection = self._reader = self._writer = None

    def _writer_connection(self) -> Connection:
        writer = self._writer
        if writer is None or writer.closed:
            writer = self._writer = self._open_connection(autocommit=False)
            self._writer_pid = writer.info.backend_pid
        return writer

    def _prepare_schema(self, connection: Connection) -> None:
        schema = self.schema
        lock = int.from_bytes(hashlib.sha256(f"inert log {schema}".encode()).digest()[:8], "big")
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (lock - (1 << 63),))
            tables = {
                name
                for (name,) in connection.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
                )
            }
            if not tables and not self._create:
                exists = connection.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
                ).fetchone()
                why = "the schema holds no tables" if exists else "there is no such schema"
                raise LogNotFound(self._no_log_here(connection, why))
            if not tables:
                connection.execute(_schema_sql(schema))
                self._identity, self._secret = new_identity(), new_secret()
                connection.execute(
                    f"INSERT INTO {schema}.inert_meta VALUES (%s, %s, %s, %s)",
                    (APPLICATION, SCHEMA_VERSION, self._identity, self._secret),
                )
                return
            meta = (
                connection.execute(
                    f"SELECT application, schema_version FROM {schema}.inert_meta"
                ).fetchall()
                if "inert_meta" in tables
                else []
            )
            if len(meta) != 1 or meta[0][0] != APPLICATION:
                raise LogError(
                    self._no_log_here(
                        connection,
                        "it holds tables of another program"
                        f" ({', '.join(sorted(tables)[:MAX_NAMED])})",
                    )
                )
            version = meta[0][1]
            if version > SCHEMA_VERSION:
                raise LogError(
                    f"schema {schema} of {self.url} has log schema version {version}, written by"
                    f" a newer inert; this inert reads schema versions up to {SCHEMA_VERSION}:"
                    " open it with a newer inert"
                )
            if version < SCHEMA_VERSION:
                self._migrate(connection, version)
            identity, secret = connection.execute(
                f"SELECT identity, secret FROM {schema}.inert_meta"
            ).fetchone()  # type: ignore[misc]
            self._identity, self._secret = identity, bytes(secret)

    def _no_log_here(self, connection: Connection, why: str) -> str:
        """Why ``schema`` holds no log, and the schemas of the database that hold one."""
        found = [
            name
            for (name,) in connection.execute(
                "SELECT n.nspname FROM pg_class AS c"
                " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE c.relname = 'inert_meta' AND c.relkind IN ('r', 'p') ORDER BY 1"
            )
        ]
        where = f"no inert log in schema {self.schema!r} of database {connection.info.dbname!r}"
        if not found:
            return f"{where}: {why}; that database holds no inert log: check the URL"
        more = f" and {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else ""
        return (
            f"{where}: {why}; inert logs there: {', '.join(found[:MAX_NAMED])}{more}"
            " (name one with ?schema=NAME)"
        )

    def _migrate(self, connection: Connection, version: int) -> None:
        for step in range(version, SCHEMA_VERSION):
            migration = MIGRATIONS.get(step)
            if migration is None:
                raise LogError(
                    f"schema {self.schema} of {self.url} has log schema version {version} and"
                    f" this inert has no upgrade from version {step} to {step + 1}; open it with"
                    f" an inert that reads schema {version}"
                )
            migration(connection, self.schema)
        connection.execute(
            f"UPDATE {self.schema}.inert_meta SET schema_version = %s", (SCHEMA_VERSION,)
        )

    # --- appends ---

    def _commit_group(self, group: list[AppendRequest]) -> CommittedGroup:
        # Retrying finds those appends of the group that had landed before the connection went.
        return self._with_reconnection(
            lambda: self._commit_group_once(group),
            f"PostgreSQL append to {self.url} failed",
            "; an append may have landed: append the same events again to find out",
        )

    def _with_reconnection(self, attempt: Callable[[], _T], failed: str, after: str = "") -> _T:
        """``attempt``, and once more on a new connection if the server ended or lost the first
        (a restart, an administrator, a pooler); ``attempt`` must be safe to repeat."""
        try:
            return attempt()
        except _ConnectionLost:
            pass
        try:
            return attempt()
        except _ConnectionLost as lost:
            raise LogError(
                f"{failed} (the connection was lost twice{after}): {lost.reason}"
            ) from None

    def _commit_group_once(self, group: list[AppendRequest]) -> CommittedGroup:
        connection = self._writer_connection()
        try:
            try:
                committed, finish = self._write_group(connection, group)
                with connection.pipeline():
                    for statement, parameters in finish:
                        connection.execute(statement, parameters)
                    connection.commit()
            except BaseException:
                if not connection.broken:
                    connection.rollback()
                raise
        except psycopg.Error as error:
            if connection.broken:
                connection.close()
                raise _ConnectionLost(_reason(error)) from None
            raise LogError(f"PostgreSQL append to {self.url} failed: {_reason(error)}") from None
        return committed

    def _write_group(
        self, connection: Connection, group: list[AppendRequest]
    ) -> tuple[CommittedGroup, list[tuple[str, tuple[object, ...]]]]:
        """Write a group in a transaction left open, holding the head's lock: the outcomes,
        and the statements to send with the commit (the streams' versions and the head).

        A few round trips whatever the group's size: the lookups, the new streams (if any), the
        events, and the rest with the commit."""
        sql = self._sql
        event_ids = list({record.event_id for request in group for record in request.records})
        names = {record.stream for request in group for record in request.records}
        names.update(stream for request in group for stream in request.expected)
        # The lookups run after the lock is granted, so they see every earlier append.
        with connection.pipeline():
            head_row = connection.execute(sql.lock_head)
            stored = connection.execute(sql.stored, (event_ids,))
            known = connection.execute(sql.streams, (list(names),))
        (head,) = head_row.fetchone() or (0,)
        stream_ids: dict[str, int] = {}
        versions: dict[str, int] = {}
        for name, stream_id, version in known.fetchall():
            stream_ids[name] = stream_id
            versions[name] = version
        plan = plan_appends(
            [(request.records, request.expected) for request in group],
            digest_key=self.key(PAYLOAD_DIGEST_KEY),
            existing={values[1]: _row(values) for values in stored.fetchall()},
            stream_versions=versions,
            head=head,
            recorded_at=self._now_micros(),
        )
        if not plan.rows:
            return CommittedGroup(plan.outcomes, []), []
        touched = {row.stream: row.version for row in plan.rows}
        new = [name for name in touched if name not in stream_ids]
        if new:
            stream_ids.update(
                connection.execute(
                    sql.insert_streams, (new, [touched[name] for name in new])
                ).fetchall()
            )
        calls = {
            record.event_id: record.call
            for request in group
            for record in request.records
            if record.call is not None
        }
        sealing = {
            row.position: key_name(row.event_type, calls[row.event_id])
            for row in plan.rows
            if row.event_type in self._sealed and row.event_id in calls and row.payload
        }
        keys = self._keys(connection, set(sealing.values())) if sealing else {}
        with connection.cursor() as cursor, cursor.copy(sql.insert_events) as copy:
            copy.set_types(_EVENT_COLUMN_TYPES)
            for row in plan.rows:
                name = sealing.get(row.position)
                if name is None:
                    copy.write_row((*row[:2], stream_ids[row.stream], *row[3:], None))
                    continue
                key_id, key = keys[name]
                sealed = seal(key, row.payload or b"", row.event_id.encode())
                copy.write_row(
                    (*row[:2], stream_ids[row.stream], *row[3:7], sealed, *row[8:], key_id)
                )
        finish: list[tuple[str, tuple[object, ...]]] = []
        old = [name for name in touched if name not in new]
        if old:
            finish.append(
                (sql.set_versions, ([stream_ids[n] for n in old], [touched[n] for n in old]))
            )
        finish.append((sql.set_head, (plan.head, self._channel)))
        return CommittedGroup(plan.outcomes, plan.rows), finish

    def _keys(self, connection: Connection, names: set[str]) -> dict[str, tuple[int, bytes]]:
        """The keys of these names, each made where there is none (in ``connection``'s
        transaction, locked for sharing: a redaction cannot destroy one before it commits)."""
        sql = self._sql
        found = {
            name: (key_id, bytes(key))
            for name, key_id, key in connection.execute(sql.keys, (sorted(names),))
        }
        missing = sorted(names - found.keys())
        if missing:
            made = [new_key() for _ in missing]
            found.update(
                (name, (key_id, bytes(key)))
                for name, key_id, key in connection.execute(sql.insert_keys, (missing, made))
            )
            # Made meanwhile by another writer (a snapshot's): taken as it is.
            raced = sorted(names - found.keys())
            if raced:
                found.update(
                    (name, (key_id, bytes(key)))
                    for name, key_id, key in connection.execute(sql.keys, (raced,))
                )
        return found

    # --- reads (worker thread, one reader connection) ---

    async def _query(self, sql: str, parameters: Sequence[object]) -> list[tuple[Any, ...]]:
        async with self._reader_lock:
            return await trio.to_thread.run_sync(self._fetch, sql, parameters)

    def _fetch(self, sql: str, parameters: Sequence[object]) -> list[tuple[Any, ...]]:
        return self._with_reconnection(
            lambda: self._fetch_once(sql, parameters), f"PostgreSQL read of {self.url} failed"
        )

    def _fetch_once(self, sql: str, parameters: Sequence[object]) -> list[tuple[Any, ...]]:
        if self._reader is None:
            raise LogError(f"PostgreSQL log {self.url} is closed")
        if self._reader.closed:
            self._reader = self._open_connection(autocommit=True)
        try:
            return self._reader.execute(sql, parameters).fetchall()
        except psycopg.Error as error:
            if self._reader.broken:
                self._reader.close()
                raise _ConnectionLost(_reason(error)) from None
            raise LogError(f"PostgreSQL read of {self.url} failed: {_reason(error)}") from None

    async def _read_rows(self, from_position: int, limit: int | None) -> list[StoredRecord]:
        rows = await self._query(self._sql.read, (from_position, limit))
        return [_row(values) for values in rows]

    async def _read_stream_rows(self, stream: str, from_version: int) -> list[StoredRecord]:
        rows = await self._query(self._sql.read_stream, (stream, from_version))
        return [_row(values) for values in rows]

    # --- runtimes on the log ---
    # Each runtime holds a shared advisory lock, keyed by the log's schema, on a session of its
    # own; the server lets go of it when the session ends, so a process that dies, or loses the
    # server, stops being present without a clock. A lost session is opened and locked again.

    @property
    def _presence_keys(self) -> tuple[int, int]:
        return PRESENCE_LOCK_CLASS, zlib.crc32(self.schema.encode()) & 0x7FFFFFFF

    @asynccontextmanager
    async def _presence(self) -> AsyncIterator[None]:
        holder = await trio.to_thread.run_sync(self._hold_presence)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._keep_presence, holder)
                try:
                    yield
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            await trio.to_thread.run_sync(holder.close)

    def _hold_presence(self) -> _PresenceHolder:
        holder = _PresenceHolder(lambda: self._open_connection(autocommit=True))
        holder.lock(self._presence_keys)
        return holder

    async def _keep_presence(self, holder: _PresenceHolder) -> None:
        while True:
            await trio.sleep(PRESENCE_CHECK_INTERVAL)
            await trio.to_thread.run_sync(holder.keep, self._presence_keys)

    async def _runtime_running(self) -> bool:
        first, second = self._presence_keys
        rows = await self._query(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
            " AND classid = %s::bigint::oid AND objid = %s::bigint::oid AND objsubid = 2)",
            (first, second),
        )
        return bool(rows[0][0])

    async def _head(self) -> int:
        rows = await self._query(self._sql.head, ())
        return int(rows[0][0])

    async def _stream_version(self, stream: str) -> int:
        rows = await self._query(self._sql.stream_version, (stream,))
        return int(rows[0][0]) if rows else 0

    async def erased(self) -> bool:
        return await self._eraser.erased()

    async def _redact_many(self, redactions: list[FrozenRedaction]) -> int:
        try:
            return await super()._redact_many(redactions)
        finally:
            self._erase_destroyed_keys()

    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None:
        try:
            await super()._write_snapshot(snapshot)
        finally:
            self._erase_destroyed_keys()

    async def _delete_snapshot(self, name: str) -> None:
        try:
            await super()._delete_snapshot(name)
        finally:
            self._erase_destroyed_keys()

    def _erase_destroyed_keys(self) -> None:
        if self._keys_destroyed:
            self._keys_destroyed = False
            self._eraser.redacted()

    async def _storage_problems(self) -> list[str]:
        schema = self.schema
        [(rows, last, head)] = await self._query(
            f"SELECT count(*), coalesce(max(position), 0), (SELECT position FROM {schema}.head)"
            f" FROM {schema}.events",
            (),
        )
        problems = []
        if rows != last:
            problems.append(f"{rows} rows hold positions up to {last}: some are missing")
        if head != last:
            problems.append(f"the head table says position {head}, the last row is at {last}")
        problems.extend(
            f"stream {name!r} has {count} rows and versions up to {version}, and records"
            f" version {recorded}"
            for name, count, version, recorded in await self._query(
                f"SELECT s.name, count(e.position), coalesce(max(e.version), 0), s.version"
                f" FROM {schema}.streams AS s LEFT JOIN {schema}.events AS e"
                " ON e.stream_id = s.stream_id GROUP BY s.stream_id"
                " HAVING count(e.position) != s.version"
                " OR coalesce(max(e.version), 0) != s.version",
                (),
            )
        )
        return problems

    def _redact_all_in(self, connection: Connection, redactions: list[FrozenRedaction]) -> int:
        connection.execute(self._sql.lock_snapshots)
        sealed_by: set[int] = set()
        done = sum(
            self._redact_in(connection, *redaction, sealed_by=sealed_by) for redaction in redactions
        )
        # Once for the whole transaction: keys locked in one order, as the appends lock them.
        self._destroy_keys(connection, sealed_by)
        return done

    def _redact_in(
        self,
        connection: Connection,
        stream: str,
        up_to_version: int,
        event_types: frozenset[str] | None,
        keys: frozenset[CallKey] | None,
        *,
        sealed_by: set[int],
    ) -> int:
        """Redact one stream's rows, adding the keys that sealed what went to ``sealed_by``."""
        sql = self._sql
        selected = (
            connection.execute(sql.to_redact, (stream, up_to_version))
            if event_types is None
            else connection.execute(
                sql.to_redact_of_types, (stream, up_to_version, sorted(event_types))
            )
        )
        done = []
        for values in selected:
            row = _row(values)
            if reached(row, self.codec, event_types, keys):
                done.append(redacted(row, self.codec, self.key(PAYLOAD_DIGEST_KEY)))
                if values[13] is not None:
                    sealed_by.add(values[13])
        with connection.cursor() as cursor:
            cursor.executemany(
                sql.redact,
                [
                    (row.schema_version, row.payload, row.digest, row.checksum, row.position)
                    for row in done
                ],
            )
        if keys is None:
            deleted = connection.execute(sql.redact_snapshots, (stream, up_to_version))
        else:
            firsts = [
                version
                for (version,) in connection.execute(
                    sql.snapshot_first_versions, (stream, up_to_version)
                )
            ]
            calls = self._calls_at(connection, stream, firsts)
            doomed = [
                version
                for version in firsts
                if redaction_takes(version, up_to_version, keys, calls.get(version))
            ]
            deleted = connection.execute(sql.delete_snapshot_payloads_from, (stream, doomed))
        sealed_by.update(key_id for (key_id,) in deleted if key_id is not None)
        return len(done)

    def _destroy_keys(self, connection: Connection, key_ids: set[int]) -> None:
        """Destroy those of these keys that seal nothing unredacted any more: every copy of
        what they sealed, in any page, log or replica, is then ciphertext nothing opens."""
        if not key_ids:
            return
        sql = self._sql
        ordered = sorted(key_ids)
        # Taken first, so that an append sealing with one of them commits before the check.
        connection.execute(sql.lock_keys, (ordered,))
        if connection.execute(sql.delete_keys, (ordered,)).fetchall():
            # Told to the eraser once the transaction is done, from the Trio thread.
            self._keys_destroyed = True

    def _calls_at(
        self, connection: Connection, stream: str, versions: Sequence[int]
    ) -> dict[int, CallKey | None]:
        """The call of the stream's event at each of these versions, as far as its row tells."""
        return {
            row.version: call_of(row, self.codec)
            for row in map(_row, connection.execute(self._sql.rows_at, (stream, list(versions))))
        }

    def _delete_snapshot_in(self, connection: Connection, name: str) -> None:
        sql = self._sql
        connection.execute(sql.lock_snapshots)
        deleted = connection.execute(sql.delete_snapshot_payloads, (name,)).fetchall()
        connection.execute(sql.delete_snapshot, (name,))
        self._destroy_keys(connection, {key_id for (key_id,) in deleted if key_id is not None})

    def _write_snapshot_in(self, connection: Connection, snapshot: StoredSnapshot) -> None:
        sql = self._sql
        name = snapshot.name
        connection.execute(sql.lock_snapshots)
        found: dict[str, list[tuple[int, CallKey | None]]] = {}
        for row in map(
            _row, connection.execute(sql.redacted_rows, (list(payload_streams(snapshot)),))
        ):
            found.setdefault(row.stream, []).append((row.version, call_of(row, self.codec)))
        highest = {stream: max(version for version, _ in seen) for stream, seen in found.items()}
        redacted = {
            stream: StreamRedactions(found[stream], self._calls_at(connection, stream, versions))
            for stream, versions in judged_versions(snapshot, highest).items()
        }
        deleted = connection.execute(sql.delete_snapshot_payloads, (name,)).fetchall()
        connection.execute(
            sql.write_snapshot,
            (name, snapshot.position, snapshot.stamp, snapshot.state, snapshot.digest),
        )
        # Each payload sealed under the key of its part: the call's key of those bytes, which
        # their redaction destroys. Payloads are read twice rather than held all at once.
        keys = self._keys(connection, {p.part for _, p in kept_payloads(snapshot, redacted)})
        with connection.cursor() as cursor:
            cursor.executemany(
                sql.write_snapshot_payload,
                (
                    (
                        name,
                        ordinal,
                        p.part,
                        p.stream,
                        p.first_version,
                        seal(keys[p.part][1], p.data, p.part.encode()),
                        keys[p.part][0],
                    )
                    for ordinal, p in kept_payloads(snapshot, redacted)
                ),
            )
        self._destroy_keys(connection, {key_id for (key_id,) in deleted if key_id is not None})

    def _in_own_transaction(self, what: str, work: Callable[[Connection], _T]) -> _T:
        return self._with_reconnection(
            lambda: self._in_own_transaction_once(what, work),
            f"PostgreSQL {what} in {self.url} failed",
        )

    def _in_own_transaction_once(self, what: str, work: Callable[[Connection], _T]) -> _T:
        # The writer connection belongs to the write loop, which may be committing right now:
        # redactions and snapshots have a connection of their own, kept (a new one per
        # redaction would cost the server a session each, several per call).
        connection = self._background_connection
        if connection is None or connection.closed:
            connection = self._background_connection = self._open_connection(autocommit=False)
        try:
            with connection.transaction():
                return work(connection)
        except psycopg.Error as error:
            if connection.broken:
                connection.close()
                raise _ConnectionLost(_reason(error)) from None
            raise LogError(f"PostgreSQL {what} in {self.url} failed: {_reason(error)}") from None

    async def _read_snapshot(self, name: str) -> StoredSnapshot | None:
        rows = await self._query(self._sql.read_snapshot, (name, name))
        position = rows[0][1] if rows else 0
        opened = [
            columns for row in rows if (columns := _opened_payload(row, position)) is not None
        ]
        return snapshot_from_rows(name, opened)

    # --- notifications ---

    async def _listen_loop(self) -> None:
        while True:
            try:
                listener = await trio.to_thread.run_sync(self._open_listener)
            except InertError:
                await trio.sleep(self.poll_interval)
                continue
            try:
                # Appends made while nobody listened are found by the reads this wakes.
                self._notify_appended()
                await self._relay_notifications(listener)
            except psycopg.Error:
                # Lost: subscriptions poll until a new listening connection is open.
                pass
            finally:
                listener.close()
            await trio.sleep(self.poll_interval)

    def _open_listener(self) -> Connection:
        try:
            listener = self._open_connection(autocommit=True)
        except _ConnectionLost as lost:
            raise LogError(f"cannot listen to PostgreSQL log {self.url}: {lost.reason}") from None
        try:
            listener.execute(f"LISTEN {self._channel}")
        except psycopg.Error as error:
            listener.close()
            raise LogError(
                f"cannot listen to PostgreSQL log {self.url}: {_reason(error)}"
            ) from None
        return listener

    async def _relay_notifications(self, listener: Connection) -> None:
        pgconn = listener.pgconn
        while True:
            await trio.lowlevel.wait_readable(pgconn.socket)
            pgconn.consume_input()
            others = False
            while (notification := pgconn.notifies()) is not None:
                # This process's own appends wake its subscriptions as they commit.
                if notification.be_pid != self._writer_pid:
                    others = True
                    self._heard_of(notification.extra)
            if others:
                self._notify_appended()

    def _heard_of(self, payload: bytes) -> None:
        """Note the head another writer's notification names (the position its commit
        reached), so that subscriptions look in storage past this log's own rows."""
        try:
            head = int(payload)
        except ValueError:
            return
        self._known_head = max(self._known_head, head)

    async def _wait_for_appends(self, since: trio.Event) -> None:
        # Notifications may be lost with the listening connection; polling bounds the delay.
        with trio.move_on_after(self.poll_interval):
            await since.wait()
