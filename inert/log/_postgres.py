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
at its commit, of appends to partition 0 (the whole of a log of one partition) alone: each
listening session costs the server a transaction a notification, and the partitions of calls
are each folded by one process. Each log ``LISTEN``\\s on a connection of its own whose socket
the Trio loop waits on directly; every ``poll_interval`` the log also reads the head of every
partition in one query and wakes the subscriptions of those that moved, which covers a lost
listening connection until it is open again (one query a process, not one a subscription).

Tables live in a schema of their own (``schema``, ``inert`` by default), created on first
open unless the log is opened with ``create=False``: then a schema without them is refused,
naming the schemas of that database that hold an inert log (those with an ``inert_meta``
table). Its ``inert_meta`` table names the application and the schema version: a schema holding
other tables is refused; an older schema version is upgraded by the registered migrations in
one transaction, or refused with a message naming both versions; a newer one is refused.
Concurrent first opens are serialised by an advisory lock.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import zlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from itertools import zip_longest
from typing import Any, TypeVar
from urllib.parse import urlsplit

import attrs
import psycopg
import trio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..events._codec import Codec
from ..events._errors import ConfigurationError, InertError, LogDamaged, LogError, LogNotFound
from ..events._identity import CallKey
from ..events._times import micros_to_datetime
from ._erasure import DEFAULT_ERASE_TIMEOUT, Eraser
from ._group import AppendRequest, CommittedGroup, GroupCommitLog
from ._log import Clock, FrozenRedaction, Log, new_identity, new_secret, utc_now
from ._partition_log import PartitionLog
from ._partitions import PARTITION_HASH, check_partitions
from ._postgres_sql import EVENT_COLUMN_TYPES, MIGRATIONS, Connection, Statements, schema_sql
from ._records import (
    PAYLOAD_DIGEST_KEY,
    StoredRecord,
    call_of,
    plan_appends,
    reached,
    redacted,
)
from ._sealing import key_name, new_key, seal, sealed_types, unseal
from ._server_clock import SERVER_TIME, ServerClock
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
SCHEMA_VERSION = 7
_T = TypeVar("_T")

DEFAULT_SCHEMA = "inert"
MAX_NAMED = 10
"""The most schemas (or tables) a refusal names: a database may hold many."""
DEFAULT_MAX_BATCH_EVENTS = 4096
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_REDACTION_LINGER = 0.1
"""How long, in seconds, a redaction waits for others to share its transaction."""
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


def _reason(error: psycopg.Error) -> str:
    """The driver's message on one line (libpq's span several)."""
    return " ".join(str(error).split())


def _columns(pairs: set[tuple[int, str]]) -> tuple[list[int], list[str]]:
    """Pairs of a partition and a name as the two arrays a statement unnests."""
    ordered = sorted(pairs)
    return [number for number, _ in ordered], [name for _, name in ordered]


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
    """The servers and database a connection string (URL or key=value) names, as a URL that may
    be shown: no password, no options. Several hosts (``host=a,b``, ``postgresql://a:1,b:2/db``)
    are shown as libpq lists them."""
    parts = urlsplit(conninfo)
    found: list[object]
    if parts.scheme in ("postgresql", "postgres") and "," not in parts.netloc:
        found = [parts.username, parts.hostname, parts.port, parts.path[1:]]
    else:
        try:
            settings = conninfo_to_dict(conninfo)
        except psycopg.Error:
            return "postgresql://(a connection string libpq cannot read)"
        found = [settings.get(name) for name in ("user", "host", "port", "dbname")]
    user, host, port, dbname = (str(value) if value else "" for value in found)
    return f"postgresql://{user + '@' if user else ''}{_servers(host, port)}/{dbname}"


def _servers(hosts: str, ports: str) -> str:
    """Each host with its port, as a URL writes them; one port given for several hosts is each
    one's, as libpq reads it."""
    names = hosts.split(",")
    numbers = ports.split(",")
    if len(numbers) == 1:
        numbers *= len(names)
    shown = []
    # Lists of different lengths are libpq's to refuse; a message must still name them.
    for name, number in zip_longest(names, numbers, fillvalue=""):
        bracketed = f"[{name}]" if ":" in name else name
        shown.append(bracketed + (f":{number}" if number else ""))
    return ",".join(shown)


def _to_look_up(
    group: list[AppendRequest], sealed: frozenset[str]
) -> tuple[set[tuple[int, str]], set[tuple[int, str]], set[str]]:
    """What a group's lookups ask for: its events' ids and its streams, each with its
    partition, and the names of the keys its payloads may be sealed under."""
    event_ids: set[tuple[int, str]] = set()
    streams: set[tuple[int, str]] = set()
    key_names: set[str] = set()
    for request in group:
        number = request.partition
        event_ids.update((number, record.event_id) for record in request.records)
        streams.update((number, record.stream) for record in request.records)
        streams.update((number, stream) for stream in request.expected)
        key_names.update(
            key_name(record.event_type, record.call)
            for record in request.records
            if record.call is not None and record.event_type in sealed
        )
    return event_ids, streams, key_names


def _copied_rows(
    written: dict[int, list[StoredRecord]],
    stream_ids: dict[tuple[int, str], int],
    sealing: dict[tuple[int, int], str],
    keys: dict[str, tuple[int, bytes]],
) -> list[tuple[Any, ...]]:
    """The rows of a group as ``insert_events`` copies them, the payloads to seal sealed
    (made before the copy begins: the server waits for nothing but the bytes)."""
    copied: list[tuple[Any, ...]] = []
    for number, rows in written.items():
        for row in rows:
            stream_id = stream_ids[number, row.stream]
            name = sealing.get((number, row.position))
            if name is None:
                copied.append((number, *row[:2], stream_id, *row[3:], None))
                continue
            key_id, key = keys[name]
            sealed = seal(key, row.payload or b"", row.event_id.encode())
            copied.append((number, *row[:2], stream_id, *row[3:7], sealed, *row[8:], key_id))
    return copied


def _redaction_groups(redactions: list[FrozenRedaction]) -> list[list[FrozenRedaction]]:
    """The redactions in order, in runs of one set of event types and no stream twice: each
    run is made with one statement of each kind."""
    groups: list[list[FrozenRedaction]] = []
    streams: set[str] = set()
    for redaction in redactions:
        if not groups or groups[-1][0][2] != redaction[2] or redaction[0] in streams:
            groups.append([])
            streams = set()
        groups[-1].append(redaction)
        streams.add(redaction[0])
    return groups


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


class _KeyRaced(Exception):
    """A key a group made was made meanwhile by another writer (a snapshot's): the group's
    transaction is rolled back, to be written again with that key."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_KEY_RACES = 3
"""How many times a group is written while other writers make the keys it seals with."""


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


@attrs.define
class _WaitingRedaction:
    """Redactions of one partition waiting for a transaction, and what became of them."""

    partition: int
    redactions: list[FrozenRedaction]
    done: int | None = None
    error: InertError | None = None


class _GroupPlan:
    """The plan of one group's appends, partition by partition: each request's outcome, the
    rows to write to each partition, the streams they touch and the payloads to seal."""

    def __init__(self, requests: int) -> None:
        self.outcomes: list[list[int] | InertError] = [[] for _ in range(requests)]
        self.written: dict[int, list[StoredRecord]] = {}
        self.stream_ids: dict[tuple[int, str], int] = {}
        self.touched: dict[tuple[int, str], int] = {}
        self.sealing: dict[tuple[int, int], str] = {}

    def add(
        self,
        number: int,
        indexes: list[int],
        requests: list[AppendRequest],
        *,
        stored: list[StoredRecord],
        known: list[tuple[Any, ...]],
        head: int,
        digest_key: bytes,
        recorded_at: int,
        sealed: frozenset[str],
    ) -> None:
        """Plan the requests of partition ``number`` (at ``indexes`` of the group)."""
        versions: dict[str, int] = {}
        for name, stream_id, version in known:
            self.stream_ids[number, name] = stream_id
            versions[name] = version
        plan = plan_appends(
            [(request.records, request.expected) for request in requests],
            digest_key=digest_key,
            existing={row.event_id: row for row in stored},
            stream_versions=versions,
            head=head,
            recorded_at=recorded_at,
        )
        for index, outcome in zip(indexes, plan.outcomes, strict=True):
            self.outcomes[index] = outcome
        if not plan.rows:
            return
        self.written[number] = plan.rows
        self.touched.update(((number, row.stream), row.version) for row in plan.rows)
        calls = {
            record.event_id: record.call
            for request in requests
            for record in request.records
            if record.call is not None
        }
        self.sealing.update(
            ((number, row.position), key_name(row.event_type, calls[row.event_id]))
            for row in plan.rows
            if row.event_type in sealed and row.event_id in calls and row.payload
        )


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
        redaction_linger: float = DEFAULT_REDACTION_LINGER,
        codec: Codec | None = None,
        clock: Clock | None = None,
        create: bool = True,
        partitions: int | None = None,
    ) -> None:
        # The log's clock is the server's (``_server_clock``); ``clock`` only carries this
        # process's reading of it from one measurement to the next.
        self._server_clock = ServerClock(clock or utc_now)
        super().__init__(
            group_commit=group_commit,
            max_batch_events=max_batch_events,
            codec=codec,
            clock=self._server_clock,
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
        if not 0 <= redaction_linger < math.inf:
            raise ConfigurationError(
                f"redaction_linger must be a finite number of seconds >= 0, not {redaction_linger}"
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
        self.redaction_linger = redaction_linger
        self._create = create
        self._asked_partitions = None if partitions is None else check_partitions(partitions)
        self._partition_logs: dict[int, PartitionLog] = {}
        self._redactions_waiting: list[_WaitingRedaction] = []
        self._sql = Statements.of(schema)
        self._sealed = sealed_types()
        self._channel = f"inert_log_{schema}"
        self._writer: Connection | None = None
        self._writer_pid = 0
        self._reader: Connection | None = None
        self._reader_lock = trio.Lock()
        self._background_connection: Connection | None = None
        # The last row this process committed to each partition (in the worker thread): a new
        # connection checks that the server still holds it.
        self._last_written: dict[int, tuple[int, str]] = {}
        self._diverged: str | None = None
        # The file of the table of keys as a transaction that destroyed keys saw it (in the
        # worker thread), and as the last one of them committed saw it (in Trio's).
        self._keys_destroyed_in: int | None = None
        self._keys_file_destroyed: int | None = None
        self._eraser = Eraser(
            self._rewrite_keys,
            holds=f"the pages of {schema}.payload_keys (appends hold the table)",
            timeout=erase_timeout,
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
        redaction_linger: float = DEFAULT_REDACTION_LINGER,
        codec: Codec | None = None,
        clock: Clock | None = None,
        create: bool = True,
        partitions: int | None = None,
    ) -> AsyncIterator[PostgresLog]:
        """Open the log in ``schema`` of the database ``conninfo`` names (a ``postgresql://``
        URL or libpq key=value string), creating its tables if need be, or with ``create=False``
        refusing a schema without them (``LogNotFound``); closed when the block ends.

        A log created here has ``partitions`` partitions of calls (1 if not given); an existing
        log keeps the number it was created with, and one that names another is refused."""
        log = cls(
            conninfo,
            schema=schema,
            group_commit=group_commit,
            max_batch_events=max_batch_events,
            poll_interval=poll_interval,
            erase_timeout=erase_timeout,
            redaction_linger=redaction_linger,
            codec=codec,
            clock=clock,
            create=create,
            partitions=partitions,
        )
        await trio.to_thread.run_sync(log._connect)
        try:
            async with log._running(log._listen_loop, log._poll_loop, log._eraser.run):
                yield log
        finally:
            log._mark_closed()
            for partition in log._partition_logs.values():
                partition._mark_closed()
            # Reads of subscriptions outside this block may still be running on the reader.
            with trio.CancelScope(shield=True):
                async with log._reader_lock, log._background_lock:
                    await trio.to_thread.run_sync(log._disconnect)

    # --- connections (worker thread) ---

    def _open_connection(self, *, autocommit: bool) -> Connection:
        if self._diverged is not None:
            raise LogError(self._diverged)
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
            diverged = self._lost_writes(connection)
        except psycopg.Error as error:
            lost = connection.broken
            connection.close()
            if lost:
                # Ended while being set up (the server restarting, an administrator ending
                # connections): lost like one that was in use, and worth the same new try.
                raise _ConnectionLost(_reason(error)) from None
            raise LogError(f"cannot set up a connection to {self.url}: {_reason(error)}") from None
        if diverged is not None:
            connection.close()
            self._diverged = diverged
            raise LogError(diverged)
        return connection

    def _lost_writes(self, connection: Connection) -> str | None:
        """What the server lost of this process's appends, if it lost any: a new connection
        after a failover to a standby that had not received them (asynchronous replication).
        The process's memory of the log then disagrees with the log: it must be opened again."""
        for number, (position, event_id) in sorted(self._last_written.items()):
            row = connection.execute(
                f"SELECT event_id FROM {self.schema}.events WHERE partition = %s AND position = %s",
                (number, position),
            ).fetchone()
            if not connection.autocommit:
                connection.rollback()
            if row is None or row[0] != event_id:
                found = "nothing" if row is None else f"event {row[0]}"
                return (
                    f"PostgreSQL log {self.url} lost events this process appended: position"
                    f" {position} of partition {number} holds {found}, not the event {event_id}"
                    " it committed there (a failover to a standby that had not received it, under"
                    " asynchronous replication); open the log again"
                )
        return None

    async def _rewrite_keys(self) -> bool:
        """Rewrite the table of keys, leaving no page that held a destroyed one, unless a
        rewrite has begun since the last transaction that destroyed keys here (another
        process's: every process of the log shares the table); whether it is done. On the
        background connection: the rewrite waits for redactions and snapshots, which hold
        the table too."""
        async with self._background_lock:
            return await trio.to_thread.run_sync(self._rewrite_keys_once)

    def _rewrite_keys_once(self) -> bool:
        connection = None
        try:
            connection = self._background_connected()
            connection.autocommit = True
            try:
                # A file that is not the one the last transaction destroying keys saw was
                # written by a rewrite that began after it committed: the rewrite needs its
                # lock, which that transaction held while it read the file's number.
                if self._keys_file(connection) != self._keys_file_destroyed:
                    return True
                connection.execute(f"SET lock_timeout = {_VACUUM_LOCK_WAIT_MS}")
                try:
                    connection.execute(f"VACUUM (FULL) {self.schema}.payload_keys")
                finally:
                    connection.execute("RESET lock_timeout")
            finally:
                if not connection.closed:
                    connection.autocommit = False
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled):
            return False
        except (psycopg.Error, InertError, _ConnectionLost):
            if connection is not None and connection.broken:
                connection.close()
            return False
        return True

    def _keys_file(self, connection: Connection) -> int:
        """The number of the file that holds the table of keys now."""
        row = connection.execute(
            "SELECT pg_relation_filenode(%s::regclass)", (f"{self.schema}.payload_keys",)
        ).fetchone()
        assert row is not None
        return int(row[0])

    def _connect(self) -> None:
        try:
            self._writer = self._open_connection(autocommit=False)
            self._writer_pid = self._writer.info.backend_pid
            self._prepare_schema(self._writer)
            self._reader = self._open_connection(autocommit=True)
            self._server_clock.observed(self._reader.execute(SERVER_TIME).fetchone()[0])  # type: ignore[index]
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
                partitions = self._asked_partitions or 1
                connection.execute(schema_sql(schema, partitions))
                self._identity, self._secret = new_identity(), new_secret()
                self._partitions = partitions
                connection.execute(
                    f"INSERT INTO {schema}.inert_meta VALUES (%s, %s, %s, %s, %s, %s)",
                    (
                        APPLICATION,
                        SCHEMA_VERSION,
                        self._identity,
                        self._secret,
                        partitions,
                        PARTITION_HASH,
                    ),
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
            identity, secret, partitions, rule = connection.execute(
                f"SELECT identity, secret, partitions, partition_hash FROM {schema}.inert_meta"
            ).fetchone()  # type: ignore[misc]
            self._identity, self._secret = identity, bytes(secret)
            if rule != PARTITION_HASH:
                raise LogError(
                    f"schema {schema} of {self.url} places conversations in partitions by rule"
                    f" {rule!r}; this inert knows {PARTITION_HASH!r} only"
                )
            if self._asked_partitions not in (None, partitions):
                raise ConfigurationError(
                    f"schema {schema} of {self.url} holds a log of {partitions} partition"
                    f"{'s' if partitions != 1 else ''}, not {self._asked_partitions}: a log's"
                    " partitions are chosen when it is created (inert repartition makes a copy"
                    " with another number)"
                )
            self._partitions = partitions

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
        for _ in range(_KEY_RACES - 1):
            try:
                return self._commit_group_raced(group)
            except _KeyRaced:
                continue
        try:
            return self._commit_group_raced(group)
        except _KeyRaced as raced:
            raise LogError(
                f"PostgreSQL append to {self.url} failed: the keys it seals with were made by"
                f" another writer each of the {_KEY_RACES} times it tried ({raced.reason})"
            ) from None

    def _commit_group_raced(self, group: list[AppendRequest]) -> CommittedGroup:
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
                for number, rows in ((0, committed.rows), *committed.elsewhere.items()):
                    if rows:
                        self._last_written[number] = (rows[-1].position, rows[-1].event_id)
            except BaseException:
                if not connection.broken:
                    connection.rollback()
                raise
        except psycopg.Error as error:
            if connection.broken:
                connection.close()
                raise _ConnectionLost(_reason(error)) from None
            if (
                isinstance(error, psycopg.errors.UniqueViolation)
                and error.diag.table_name == "payload_keys"
            ):
                raise _KeyRaced(_reason(error)) from None
            raise LogError(f"PostgreSQL append to {self.url} failed: {_reason(error)}") from None
        return committed

    def _write_group(
        self, connection: Connection, group: list[AppendRequest]
    ) -> tuple[CommittedGroup, list[tuple[str, tuple[object, ...]]]]:
        """Write a group's rows in a transaction left open, holding the lock of the head of
        each partition it appends to: the outcomes, and the statements to send with the commit
        (the streams and keys the rows are the first of, the streams' versions and the heads).

        Three round trips whatever the group's size and partitions: the lookups, the rows, and
        the rest with the commit."""
        sql = self._sql
        by_partition: dict[int, list[int]] = {}
        for index, request in enumerate(group):
            by_partition.setdefault(request.partition, []).append(index)
        numbers = sorted(by_partition)
        event_ids, streams, key_names = _to_look_up(group, self._sealed)
        # The lookups run after the locks are granted, so they see every earlier append. The
        # keys there are are locked for sharing, so that no redaction destroys one before the
        # rows it seals commit; a number is taken for each stream and key that may be new.
        with connection.pipeline():
            locked = connection.execute(sql.lock_heads, (numbers,))
            # Once the heads are locked: the stamps of a partition follow its positions.
            server_time = connection.execute(SERVER_TIME)
            stored = connection.execute(sql.stored, _columns(event_ids))
            known = connection.execute(sql.streams, _columns(streams))
            there = connection.execute(sql.keys, (sorted(key_names),)) if key_names else None
            numbered = connection.execute(sql.new_ids, (max(len(streams), len(key_names)),))
        stored_in: dict[int, list[StoredRecord]] = {}
        for values in stored.fetchall():
            stored_in.setdefault(values[-1], []).append(_row(values))
        known_in: dict[int, list[tuple[str, int, int]]] = {}
        for number, name, stream_id, version in known.fetchall():
            known_in.setdefault(number, []).append((name, stream_id, version))
        keys: dict[str, tuple[int, bytes]] = (
            {} if there is None else {name: (key_id, bytes(key)) for name, key_id, key in there}
        )
        ids = numbered.fetchall()
        new_stream_ids = [stream_id for stream_id, _ in ids]
        new_key_ids = [key_id for _, key_id in ids]
        plan = _GroupPlan(len(group))
        heads, recorded_at = self._heads_and_stamp(locked.fetchall(), server_time.fetchall())
        for number in numbers:
            plan.add(
                number,
                by_partition[number],
                [group[index] for index in by_partition[number]],
                stored=stored_in.get(number, []),
                known=known_in.get(number, []),
                head=heads[number],
                digest_key=self.key(PAYLOAD_DIGEST_KEY),
                recorded_at=recorded_at,
                sealed=self._sealed,
            )
        outcomes, written = plan.outcomes, plan.written
        stream_ids, touched, sealing = plan.stream_ids, plan.touched, plan.sealing
        if not written:
            return CommittedGroup(outcomes, [], {}), []
        finish: list[tuple[str, tuple[object, ...]]] = []
        new = [stream for stream in touched if stream not in stream_ids]
        if new:
            stream_ids.update(zip(new, new_stream_ids, strict=False))
            finish.append(
                (
                    sql.insert_streams,
                    (
                        [stream_ids[stream] for stream in new],
                        [number for number, _ in new],
                        [name for _, name in new],
                        [touched[stream] for stream in new],
                    ),
                )
            )
        made = sorted(set(sealing.values()) - keys.keys())
        if made:
            keys.update(
                (name, (key_id, new_key())) for name, key_id in zip(made, new_key_ids, strict=False)
            )
            finish.append(
                (
                    sql.make_keys,
                    ([keys[name][0] for name in made], made, [keys[name][1] for name in made]),
                )
            )
        rows = _copied_rows(written, stream_ids, sealing, keys)
        with connection.cursor() as cursor, cursor.copy(sql.insert_events) as copy:
            copy.set_types(EVENT_COLUMN_TYPES)
            for row in rows:
                copy.write_row(row)
        old = [stream for stream in touched if stream not in new]
        if old:
            finish.append(
                (sql.set_versions, ([stream_ids[s] for s in old], [touched[s] for s in old]))
            )
        ends = sorted((number, rows[-1].position) for number, rows in written.items())
        finish.append((sql.set_heads, ([n for n, _ in ends], [head for _, head in ends])))
        if 0 in written:
            # Partition 0 alone is announced: every process listens, and reading a notification
            # costs each listening server process a transaction. A partition of calls is
            # folded by its process, which has its own commits at once; another that folds it
            # meanwhile (while it is handed on) reads it at its poll.
            finish.append((sql.notify, (self._channel, f"0 {written[0][-1].position}")))
        return (
            CommittedGroup(
                outcomes,
                written.pop(0, []),
                written,
            ),
            finish,
        )

    def _heads_and_stamp(
        self, locked: list[tuple[Any, ...]], server_time: list[tuple[Any, ...]]
    ) -> tuple[dict[int, int], int]:
        """The heads of the partitions locked, and the stamp of the group's rows: the server's
        time, never before the stamp of a head's row (a server whose clock was set back, or a
        standby promoted whose clock is behind the old primary's, never takes it back)."""
        heads: dict[int, int] = {}
        last = 0
        for number, position, stamped in locked:
            heads[number] = position
            last = max(last, stamped or 0)
        [(server,)] = server_time
        self._server_clock.observed(server)
        return heads, max(server, last)

    def _keys(self, connection: Connection, names: set[str]) -> dict[str, tuple[int, bytes]]:
        """The keys of these names, each made where there is none (in ``connection``'s
        transaction, locked for sharing: a redaction cannot destroy one before it commits)."""
        sql = self._sql
        asked = sorted(names)
        # One round trip: the keys there are, locked, and a new one for each name without
        # (one made for a name that has a key is dropped by the conflict, and never stored).
        with connection.pipeline():
            there = connection.execute(sql.keys, (asked,))
            made = connection.execute(sql.insert_keys, (asked, [new_key() for _ in asked]))
        found = {name: (key_id, bytes(key)) for name, key_id, key in there.fetchall()}
        found.update((name, (key_id, bytes(key))) for name, key_id, key in made.fetchall())
        # Made meanwhile by another writer (a snapshot's): taken as it is.
        raced = sorted(names - found.keys())
        if raced:
            found.update(
                (name, (key_id, bytes(key)))
                for name, key_id, key in connection.execute(sql.keys, (raced,))
            )
        return found

    async def _time(self) -> datetime:
        [(micros,)] = await self._query(SERVER_TIME, ())
        self._server_clock.observed(micros)
        return micros_to_datetime(micros)

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
        return await self._read_rows_in(0, from_position, limit)

    async def _read_rows_in(
        self, partition: int, from_position: int, limit: int | None
    ) -> list[StoredRecord]:
        rows = await self._query(self._sql.read, (partition, from_position, limit))
        return [_row(values) for values in rows]

    async def _read_stream_rows(self, stream: str, from_version: int) -> list[StoredRecord]:
        return await self._read_stream_rows_in(0, stream, from_version)

    async def _read_stream_rows_in(
        self, partition: int, stream: str, from_version: int
    ) -> list[StoredRecord]:
        rows = await self._query(self._sql.read_stream, (partition, stream, from_version))
        return [_row(values) for values in rows]

    # --- partitions ---

    def _partition_log(self, number: int) -> Log:
        log = self._partition_logs.get(number)
        if log is None:
            log = self._partition_logs[number] = PartitionLog(
                self,
                number,
                identity=self._identity,
                secret=self._secret,
                codec=self.codec,
                clock=self._clock,
            )
            if self._closed:
                log._mark_closed()
        return log

    def _committed_elsewhere(self, rows: dict[int, list[StoredRecord]]) -> None:
        for number, committed in rows.items():
            log = self._partition_logs.get(number)
            if log is not None:
                log._committed_here(committed)

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
        # A runtime redacts and writes snapshots from its start: its background connection is
        # opened with it rather than in the middle of its work.
        async with self._background_lock:
            await trio.to_thread.run_sync(self._background_connected)
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
        return await self._head_of(0)

    async def _head_of(self, partition: int) -> int:
        rows = await self._query(self._sql.head, (partition,))
        return int(rows[0][0])

    async def _stream_version(self, stream: str) -> int:
        return await self._stream_version_in(0, stream)

    async def _stream_version_in(self, partition: int, stream: str) -> int:
        rows = await self._query(self._sql.stream_version, (partition, stream))
        return int(rows[0][0]) if rows else 0

    async def erased(self) -> bool:
        return await self._eraser.erased()

    async def _redact_many(self, redactions: list[FrozenRedaction]) -> int:
        return await self._redact_many_in(0, redactions)

    async def _redact_many_in(self, partition: int, redactions: list[FrozenRedaction]) -> int:
        """Redact in a partition, in one transaction with the redactions of the other
        partitions waiting meanwhile: the runtimes of a process's partitions each make their
        own, and a transaction each would cost the server one commit per partition."""
        self._check_accepting("nothing was redacted")
        waiting = _WaitingRedaction(partition, redactions)
        self._redactions_waiting.append(waiting)
        try:
            async with self._background_lock:
                if waiting.done is None and waiting.error is None:
                    # What falls due meanwhile (in this partition or another) joins the batch:
                    # a transaction, and one statement of each kind, for all of it.
                    await trio.sleep(self.redaction_linger)
                    batch, self._redactions_waiting = self._redactions_waiting, []
                    try:
                        done = await trio.to_thread.run_sync(
                            self._in_own_transaction,
                            "redaction",
                            functools.partial(self._redact_batch, batch=batch),
                        )
                    except InertError as error:
                        for each in batch:
                            each.error = error
                    else:
                        for each, count in zip(batch, done, strict=True):
                            each.done = count
        finally:
            self._erase_destroyed_keys()
        if waiting.error is not None:
            raise waiting.error
        assert waiting.done is not None
        return waiting.done

    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None:
        await self._write_snapshot_of(0, snapshot)

    async def _write_snapshot_of(self, partition: int, snapshot: StoredSnapshot) -> None:
        self._check_accepting("the snapshot was not written")
        try:
            await self._background(
                "snapshot write",
                lambda connection: self._write_snapshot_in(connection, snapshot, partition),
            )
        finally:
            self._erase_destroyed_keys()

    async def _delete_snapshot(self, name: str) -> None:
        await self._delete_snapshot_of(0, name)

    async def _delete_snapshot_of(self, partition: int, name: str) -> None:
        self._check_accepting("the snapshot was not deleted")
        try:
            await self._background(
                "snapshot deletion",
                lambda connection: self._delete_snapshot_in(connection, name, partition),
            )
        finally:
            self._erase_destroyed_keys()

    def _erase_destroyed_keys(self) -> None:
        if self._keys_destroyed_in is not None:
            self._keys_file_destroyed, self._keys_destroyed_in = self._keys_destroyed_in, None
            self._eraser.redacted()

    async def _storage_problems(self) -> list[str]:
        return await self._storage_problems_of(0)

    async def _storage_problems_of(self, partition: int) -> list[str]:
        schema = self.schema
        [(rows, last, head)] = await self._query(
            f"SELECT count(*), coalesce(max(position), 0),"
            f" (SELECT position FROM {schema}.heads WHERE partition = %s)"
            f" FROM {schema}.events WHERE partition = %s",
            (partition, partition),
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
                " ON e.stream_id = s.stream_id WHERE s.partition = %s GROUP BY s.stream_id"
                " HAVING count(e.position) != s.version"
                " OR coalesce(max(e.version), 0) != s.version",
                (partition,),
            )
        )
        return problems

    def _redact_batch(self, connection: Connection, *, batch: list[_WaitingRedaction]) -> list[int]:
        # Every partition's lock first, in one order, so that two batches never wait on each
        # other's.
        self._lock_snapshots(connection, [each.partition for each in batch])
        return [self._redact_all_in(connection, each.redactions, each.partition) for each in batch]

    def _lock_snapshots(self, connection: Connection, partitions: list[int]) -> None:
        """Take the locks that redactions and snapshot writes of these partitions share, for
        the rest of the transaction."""
        keys = sorted(
            {
                int.from_bytes(
                    hashlib.sha256(f"inert snapshots {self.schema} {number}".encode()).digest()[:8],
                    "big",
                )
                - (1 << 63)
                for number in partitions
            }
        )
        connection.execute(self._sql.lock_snapshots, (keys,))

    def _redact_all_in(
        self, connection: Connection, redactions: list[FrozenRedaction], partition: int = 0
    ) -> int:
        self._lock_snapshots(connection, [partition])
        sealed_by: set[int] = set()
        done = sum(
            self._redact_group_in(connection, group, partition=partition, sealed_by=sealed_by)
            for group in _redaction_groups(redactions)
        )
        # Once for the whole transaction: keys locked in one order, as the appends lock them.
        self._destroy_keys(connection, sealed_by)
        return done

    def _redact_group_in(
        self,
        connection: Connection,
        group: list[FrozenRedaction],
        *,
        partition: int,
        sealed_by: set[int],
    ) -> int:
        """Redact the rows of a group of redactions of one set of event types, each of a
        stream of its own, with a statement of each kind; add the keys that sealed what went
        to ``sealed_by``."""
        sql = self._sql
        event_types = group[0][2]
        names = [stream for stream, _, _, _ in group]
        up_to = [version for _, version, _, _ in group]
        selected = (
            connection.execute(sql.to_redact_in, (names, up_to, partition))
            if event_types is None
            else connection.execute(
                sql.to_redact_of_types_in, (names, up_to, partition, sorted(event_types))
            )
        )
        keys_of = {stream: keys for stream, _, _, keys in group}
        done = []
        digest_key = self.key(PAYLOAD_DIGEST_KEY)
        for values in selected:
            row = _row(values)
            if reached(row, self.codec, event_types, keys_of[row.stream]):
                done.append(redacted(row, self.codec, digest_key))
                if values[13] is not None:
                    sealed_by.add(values[13])
        if done:
            connection.execute(
                sql.redact_rows,
                (
                    [row.schema_version for row in done],
                    [row.payload for row in done],
                    [row.digest for row in done],
                    [row.checksum for row in done],
                    [row.position for row in done],
                    partition,
                ),
            )
        whole = [(stream, version) for stream, version, _, keys in group if keys is None]
        if whole:
            deleted = connection.execute(
                sql.redact_snapshots_in,
                ([stream for stream, _ in whole], [version for _, version in whole], partition),
            )
            sealed_by.update(key_id for (key_id,) in deleted if key_id is not None)
        for stream, version, _, keys in group:
            if keys is not None:
                self._redact_snapshots_of_calls(
                    connection, partition, (stream, version, keys), sealed_by
                )
        return len(done)

    def _redact_snapshots_of_calls(
        self,
        connection: Connection,
        partition: int,
        redaction: tuple[str, int, frozenset[CallKey]],
        sealed_by: set[int],
    ) -> None:
        """Delete the snapshot payloads of a stream that hold an event of these calls up to a
        version, adding the keys that sealed them to ``sealed_by``."""
        sql = self._sql
        stream, up_to_version, keys = redaction
        firsts = [
            version
            for (version,) in connection.execute(
                sql.snapshot_first_versions, (partition, stream, up_to_version)
            )
        ]
        calls = self._calls_at(connection, partition, stream, firsts)
        doomed = [
            version
            for version in firsts
            if redaction_takes(version, up_to_version, keys, calls.get(version))
        ]
        deleted = connection.execute(sql.delete_snapshot_payloads_from, (partition, stream, doomed))
        sealed_by.update(key_id for (key_id,) in deleted if key_id is not None)

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
            # Told to the eraser once the transaction is done, from the Trio thread; read
            # while this transaction holds the table, which a rewrite cannot then hold.
            self._keys_destroyed_in = self._keys_file(connection)

    def _calls_at(
        self, connection: Connection, partition: int, stream: str, versions: Sequence[int]
    ) -> dict[int, CallKey | None]:
        """The call of the stream's event at each of these versions, as far as its row tells."""
        return {
            row.version: call_of(row, self.codec)
            for row in map(
                _row, connection.execute(self._sql.rows_at, (partition, stream, list(versions)))
            )
        }

    def _delete_snapshot_in(self, connection: Connection, name: str, partition: int = 0) -> None:
        sql = self._sql
        self._lock_snapshots(connection, [partition])
        deleted = connection.execute(sql.delete_snapshot_payloads, (partition, name)).fetchall()
        connection.execute(sql.delete_snapshot, (partition, name))
        self._destroy_keys(connection, {key_id for (key_id,) in deleted if key_id is not None})

    def _write_snapshot_in(
        self, connection: Connection, snapshot: StoredSnapshot, partition: int = 0
    ) -> None:
        sql = self._sql
        name = snapshot.name
        self._lock_snapshots(connection, [partition])
        found: dict[str, list[tuple[int, CallKey | None]]] = {}
        for row in map(
            _row,
            connection.execute(sql.redacted_rows, (partition, list(payload_streams(snapshot)))),
        ):
            found.setdefault(row.stream, []).append((row.version, call_of(row, self.codec)))
        highest = {stream: max(version for version, _ in seen) for stream, seen in found.items()}
        redacted = {
            stream: StreamRedactions(
                found[stream], self._calls_at(connection, partition, stream, versions)
            )
            for stream, versions in judged_versions(snapshot, highest).items()
        }
        deleted = connection.execute(sql.delete_snapshot_payloads, (partition, name)).fetchall()
        connection.execute(
            sql.write_snapshot,
            (partition, name, snapshot.position, snapshot.stamp, snapshot.state, snapshot.digest),
        )
        # Each payload sealed under the key of its part: the call's key of those bytes, which
        # their redaction destroys. Payloads are read twice rather than held all at once.
        keys = self._keys(connection, {p.part for _, p in kept_payloads(snapshot, redacted)})
        with connection.cursor() as cursor:
            cursor.executemany(
                sql.write_snapshot_payload,
                (
                    (
                        partition,
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

    def _background_connected(self) -> Connection:
        """The background connection (under the background lock), opened if it is not."""
        connection = self._background_connection
        if connection is None or connection.closed:
            connection = self._background_connection = self._open_connection(autocommit=False)
        return connection

    def _in_own_transaction(self, what: str, work: Callable[[Connection], _T]) -> _T:
        return self._with_reconnection(
            lambda: self._in_own_transaction_once(what, work),
            f"PostgreSQL {what} in {self.url} failed",
        )

    def _in_own_transaction_once(self, what: str, work: Callable[[Connection], _T]) -> _T:
        # The writer connection belongs to the write loop, which may be committing right now:
        # redactions and snapshots have a connection of their own, kept (a new one per
        # redaction would cost the server a session each, several per call).
        connection = self._background_connected()
        try:
            with connection.transaction():
                return work(connection)
        except psycopg.Error as error:
            if connection.broken:
                connection.close()
                raise _ConnectionLost(_reason(error)) from None
            raise LogError(f"PostgreSQL {what} in {self.url} failed: {_reason(error)}") from None

    async def _adopt_identity(self, identity: str, secret: bytes) -> None:
        schema = self.schema

        def adopt(connection: Connection) -> None:
            if connection.execute(f"SELECT 1 FROM {schema}.events LIMIT 1").fetchone():
                raise LogError(
                    f"schema {schema} of {self.url} holds events: it cannot take another log's"
                    " identity"
                )
            connection.execute(
                f"UPDATE {schema}.inert_meta SET identity = %s, secret = %s", (identity, secret)
            )

        self._check_accepting("its identity was not changed")
        await self._background("identity change", adopt)
        for log in [self, *self._partition_logs.values()]:
            log._identity, log._secret = identity, secret

    async def _read_snapshot(self, name: str) -> StoredSnapshot | None:
        return await self._read_snapshot_of(0, name)

    async def _read_snapshot_of(self, partition: int, name: str) -> StoredSnapshot | None:
        rows = await self._query(self._sql.read_snapshot, (partition, name, partition, name))
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
                for partition in self._partition_logs.values():
                    partition._notify_appended()
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
                    others = self._heard_of(notification.extra) or others
            if others:
                self._notify_appended()

    def _heard_of(self, payload: bytes) -> bool:
        """Note the head another writer's notification names (the partition and the position
        its commit reached there), so that subscriptions look in storage past this log's own
        rows; whether it names partition 0, whose subscriptions are then woken (those of
        another partition are woken here: a commit elsewhere wakes none of this log's)."""
        try:
            partition, head = map(int, payload.split())
        except ValueError:
            return False
        return self._heard_of_head(partition, head, wake=False)

    def _heard_of_head(self, partition: int, head: int, *, wake: bool) -> bool:
        """Note a partition's head, read or heard of, waking its subscriptions if it is past
        what this log knew (those of partition 0 only if ``wake``); whether it was, there."""
        if partition == 0:
            if head <= self._known_head:
                return False
            self._known_head = head
            if wake:
                self._notify_appended()
            return True
        log = self._partition_logs.get(partition)
        if log is not None and head > log._known_head:
            log._heard_of(head)
        return False

    async def _wait_for_appends(self, since: trio.Event) -> None:
        # Woken by this process's commits, by another's notification, or by the poll.
        await since.wait()

    async def _poll_loop(self) -> None:
        """Every poll interval, one read of every partition's head for the whole log: a
        notification lost with the listening connection is made up for within the interval,
        at the cost of one query a process, however many partitions and subscriptions it
        has."""
        while True:
            await trio.sleep(self.poll_interval)
            try:
                heads = await self._query(self._sql.heads, ())
            except InertError:
                continue
            for partition, head in heads:
                self._heard_of_head(int(partition), int(head), wake=True)
