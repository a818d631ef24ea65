"""The ledger as a PostgreSQL table whose rows count each event of the log exactly once.

``materialize_ledger`` follows a log (any backend), folds every event into a
``Ledger``, and after each batch of events writes the rows that changed,
deletes the rows that aged out, and moves its offset (the position of the last event the table
reflects), all in one transaction. On start it reads its offset, folds the log up to it without
writing (the fold is pure and deterministic: it gives the ledger the committed rows were made
from), and writes from the next event on. A process that dies between batches, or a batch whose
commit fails, leaves rows and offset at the last commit, and the next start carries on from
there: no event is ever applied twice or skipped.

The tables live in the schema the URL names (``?schema=NAME``, ``inert`` by default, the same
default as the log's), created if missing: the ledger rows in ``table`` and the offsets, one row
per table, in ``inert_offsets``. A row holds the call key's parts, the ledger row's columns
(never an argument value: the ledger has none), ``position`` (the last event of the call) and
``events`` (how many events of the log concern the call, added to in each batch, so an event
applied twice would show).

One materializer writes a table at a time: it holds a session advisory lock named after the
table, and another one started on the same table waits (polling every ``poll_interval``) until
the holder's session ends, then carries on from the offset the holder committed. Each batch
also locks the offset row and checks that it is where this materializer left it, so a writer
that lost its lock unawares can never apply a batch over another's.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import attrs
import psycopg
import trio

from ..events import CallKey, ConfigurationError, LogError, RecordedEvent
from ..log import Log
from ..log._postgres import public_url
from ..projections import DEFAULT_LEDGER_HORIZON, Ledger, LedgerRow
from ._open import sole_inert_error

DEFAULT_TABLE = "ledger_rows"
DEFAULT_SCHEMA = "inert"
DEFAULT_MAX_BATCH_EVENTS = 1024
DEFAULT_POLL_INTERVAL = 1.0
OFFSETS_TABLE = "inert_offsets"

_KEY_COLUMNS = ("tenant", "conversation", "turn", "response", "item", "call")
_ROW_COLUMNS = tuple(field.name for field in attrs.fields(LedgerRow))
COLUMNS = (*_ROW_COLUMNS, "position", "events")
"""The columns of a ledger table, in order."""
# The log's options in a URL are the log's business: the same URL may name both.
_LOG_OPTIONS = frozenset({"schema", "group_commit", "max_batch_events", "poll_interval"})
_NAME = re.compile(r"[a-z_][a-z0-9_]{0,52}")

Connection = psycopg.Connection[tuple[Any, ...]]


def _reason(error: psycopg.Error) -> str:
    return " ".join(str(error).split())


def _quoted(name: str) -> str:
    return f'"{name}"'


def _finished(row: LedgerRow) -> bool:
    return row.state in ("cancelled", "failed") or (row.outcome is not None and not row.running)


@attrs.define
class _Batch:
    """What the events since the last commit did to the rows, per call key."""

    events: dict[CallKey, int] = attrs.field(factory=dict)
    positions: dict[CallKey, int] = attrs.field(factory=dict)
    # Keys whose row aged out during the batch: their old table row goes before any new one.
    removed: set[CallKey] = attrs.field(factory=set)
    position: int = 0


class LedgerMaterializer:
    """The ledger of a log kept in a PostgreSQL table. Open it with ``materialize_ledger``.

    ``ledger`` is the fold the table is written from; ``position`` is the offset committed with
    the rows (0 before the first commit).
    """

    def __init__(
        self,
        log: Log,
        conninfo: str,
        *,
        table: str = DEFAULT_TABLE,
        horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
        max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        parts = urlsplit(conninfo)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        schema = dict(pairs).get("schema", DEFAULT_SCHEMA)
        for what, name in (("schema", schema), ("table", table)):
            if not _NAME.fullmatch(name):
                raise ConfigurationError(
                    f"ledger {what} {name!r} must be 1 to 53 lower-case letters, digits or"
                    " underscores, not starting with a digit"
                )
        if table == OFFSETS_TABLE:
            raise ConfigurationError(f"ledger table {table!r} is the name of the offsets table")
        if max_batch_events < 1:
            raise ConfigurationError(f"max_batch_events must be at least 1, not {max_batch_events}")
        # Written so that NaN fails too; an infinite interval would never poll.
        if not 0 < poll_interval < math.inf:
            raise ConfigurationError(
                f"poll_interval must be a positive, finite number of seconds, not {poll_interval}"
            )
        self.log = log
        self.url = public_url(conninfo)
        self._conninfo = parts._replace(
            query=urlencode([(k, v) for k, v in pairs if k not in _LOG_OPTIONS], quote_via=quote)
        ).geturl()
        self.schema = schema
        self.table = table
        self.max_batch_events = max_batch_events
        self.poll_interval = poll_interval
        self.ledger = Ledger(horizon=horizon)
        self._horizon = horizon
        self._position = 0
        self._committed = trio.Event()
        self._stopped = False
        self._connection: Connection | None = None
        # Finished calls by the log's time they finished, to find the rows the ledger ages out
        # without scanning every row: the latest time per key, and a heap of (time, key) that
        # may hold older times of the same key.
        self._finished_at: dict[CallKey, datetime] = {}
        self._finishing: list[tuple[datetime, tuple[str, ...], CallKey]] = []
        # Keys found due but still kept by the ledger (it ages calls out in the order they
        # finished, which clocks of several processes can make differ from the times' order).
        self._lingering: set[CallKey] = set()
        self._latest: datetime | None = None
        # Events of calls the ledger has no row for yet.
        self._rowless: dict[CallKey, int] = {}
        self._sql = self._statements()
        lock_name = f"inert ledger {schema}.{table}"
        self._lock_key = int.from_bytes(hashlib.sha256(lock_name.encode()).digest()[:8], "big") - (
            1 << 63
        )

    @property
    def name(self) -> str:
        """The table as the errors name it."""
        return f"ledger table {self.schema}.{self.table} of {self.url}"

    @property
    def position(self) -> int:
        """The position of the last event the table reflects (its committed offset)."""
        return self._position

    async def wait_for(self, position: int) -> None:
        """Wait until the table reflects every event up to ``position``."""
        while self._position < position:
            if self._stopped:
                raise LogError(
                    f"{self.name} stopped at position {self._position}, before {position}"
                )
            await self._committed.wait()

    # --- running -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Create the tables, wait for the table's lock, then follow the log until it closes."""
        try:
            await trio.to_thread.run_sync(self._connect)
            task_status.started()
            await self._lock()
            offset = await trio.to_thread.run_sync(self._read_offset)
            head = await self.log.head()
            if offset > head:
                raise ConfigurationError(
                    f"{self.name} reflects the log up to position {offset}, but the log ends at"
                    f" {head}: it is another log's table"
                )
            self._committed_up_to(offset)
            send, receive = trio.open_memory_channel[RecordedEvent](self.max_batch_events)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._pump, send)
                await self._fold(receive)
        finally:
            self._stopped = True
            self._committed.set()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._disconnect)

    def _committed_up_to(self, position: int) -> None:
        self._position = position
        self._committed.set()
        self._committed = trio.Event()

    async def _lock(self) -> None:
        # A session lock cannot be waited for from a worker thread that Trio could cancel,
        # so the lock is tried, and tried again after each poll interval.
        locked = await trio.to_thread.run_sync(self._try_lock)
        while not locked:
            await trio.sleep(self.poll_interval)
            locked = await trio.to_thread.run_sync(self._try_lock)

    async def _pump(self, send: trio.MemorySendChannel[RecordedEvent]) -> None:
        async with send:
            async for recorded in self.log.subscribe(1):
                try:
                    await send.send(recorded)
                except trio.BrokenResourceError:
                    # The fold stopped, on an error of its own that is the one raised: a
                    # second one from here would hide it in a group.
                    return

    async def _fold(self, receive: trio.MemoryReceiveChannel[RecordedEvent]) -> None:
        # Up to the offset the fold only rebuilds what the committed rows were made from.
        batch = _Batch()
        async with receive:
            while True:
                try:
                    recorded = await receive.receive()
                except trio.EndOfChannel:
                    break
                self._apply(recorded, batch)
                while batch.position - self._position < self.max_batch_events:
                    try:
                        recorded = receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    self._apply(recorded, batch)
                if batch.position <= self._position:
                    batch = _Batch(position=batch.position)
                    continue
                await trio.to_thread.run_sync(self._commit, batch)
                self._committed_up_to(batch.position)
                batch = _Batch(position=batch.position)

    def _apply(self, recorded: RecordedEvent, batch: _Batch) -> None:
        ledger = self.ledger
        position = recorded.position
        batch.position = position
        if position <= self._position:
            # The committed rows have this event already: it is folded, never written.
            batch = _Batch()
        kept = recorded.kept
        key = getattr(kept, "key", None)
        if not isinstance(key, CallKey):
            key = None
        before = None if key is None else ledger.row(key)
        ledger.apply(recorded)
        now = recorded.recorded_at
        if self._latest is None or now > self._latest:
            self._latest = now
        if key is not None:
            after = ledger.row(key)
            if after is None:
                if before is not None:
                    self._removed(key, batch)
                # Counted into the row once it has one (the opening's answer can come later).
                self._rowless[key] = self._rowless.get(key, 0) + 1
            else:
                events = 1 + self._rowless.pop(key, 0)
                batch.events[key] = batch.events.get(key, 0) + events
                batch.positions[key] = position
                if after != before and _finished(after):
                    self._finished_at[key] = now
                    heapq.heappush(self._finishing, (now, _sort_key(key), key))
        self._age_out(batch)

    def _age_out(self, batch: _Batch) -> None:
        if self._horizon is None or self._latest is None:
            return
        cutoff = self._latest - self._horizon
        finishing = self._finishing
        while finishing and finishing[0][0] < cutoff:
            at, _, key = heapq.heappop(finishing)
            if self._finished_at.get(key) != at:
                continue
            if self.ledger.row(key) is None:
                del self._finished_at[key]
                self._removed(key, batch)
            else:
                self._lingering.add(key)
        for key in [key for key in self._lingering if self.ledger.row(key) is None]:
            self._lingering.discard(key)
            self._finished_at.pop(key, None)
            self._removed(key, batch)

    @staticmethod
    def _removed(key: CallKey, batch: _Batch) -> None:
        batch.removed.add(key)
        batch.events.pop(key, None)
        batch.positions.pop(key, None)

    # --- the database (worker thread) ----------------------------------------------------

    def _statements(self) -> tuple[str, str, str, str]:
        schema, table = self.schema, _quoted(self.table)
        columns = ", ".join(_quoted(column) for column in COLUMNS)
        placeholders = ", ".join("%s" for _ in COLUMNS)
        keys = ", ".join(_quoted(column) for column in _KEY_COLUMNS)
        updates = ", ".join(
            f"{_quoted(column)} = EXCLUDED.{_quoted(column)}"
            for column in COLUMNS
            if column not in _KEY_COLUMNS and column != "events"
        )
        upsert = (
            f"INSERT INTO {schema}.{table} AS t ({columns}) VALUES ({placeholders})"
            f" ON CONFLICT ({keys}) DO UPDATE SET {updates},"
            ' "events" = t."events" + EXCLUDED."events"'
        )
        matches = " AND ".join(f"{_quoted(column)} = %s" for column in _KEY_COLUMNS)
        delete = f"DELETE FROM {schema}.{table} WHERE {matches}"
        lock_offset = f"SELECT position FROM {schema}.{OFFSETS_TABLE} WHERE name = %s FOR UPDATE"
        set_offset = f"UPDATE {schema}.{OFFSETS_TABLE} SET position = %s WHERE name = %s"
        return upsert, delete, lock_offset, set_offset

    def _create_sql(self) -> str:
        schema, table = self.schema, _quoted(self.table)
        text = ", ".join(_quoted(column) + " text NOT NULL" for column in _KEY_COLUMNS)
        return f"""
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.{OFFSETS_TABLE} (
    name text PRIMARY KEY,
    position bigint NOT NULL CHECK (position >= 0)
);
CREATE TABLE IF NOT EXISTS {schema}.{table} (
    {text},
    "tool" text NOT NULL,
    "state" text NOT NULL,
    "fragments" bigint NOT NULL,
    "bytes" bigint NOT NULL,
    "terminal_event" text,
    "terminal_reason" text,
    "parse" text,
    "validation" text,
    "dispatch" text NOT NULL,
    "outcome" text,
    "position" bigint NOT NULL,
    "events" bigint NOT NULL,
    PRIMARY KEY ({", ".join(_quoted(column) for column in _KEY_COLUMNS)})
);
INSERT INTO {schema}.{OFFSETS_TABLE} (name, position) VALUES (%s, 0)
    ON CONFLICT (name) DO NOTHING;
"""

    def _connect(self) -> None:
        try:
            connection = psycopg.connect(self._conninfo, connect_timeout=10)
        except psycopg.ProgrammingError as error:
            raise ConfigurationError(
                f"bad PostgreSQL connection string {self.url}: {_reason(error)}"
            ) from None
        except psycopg.Error as error:
            raise LogError(f"cannot connect to {self.name}: {_reason(error)}") from None
        self._connection = connection
        try:
            with connection.transaction():
                # Concurrent first starts would race to create the same tables.
                connection.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock_key ^ 1,))
                with connection.cursor() as cursor:
                    for statement in filter(str.strip, self._create_sql().split(";")):
                        parameters = (self.table,) if "%s" in statement else None
                        cursor.execute(statement, parameters)
        except psycopg.Error as error:
            raise LogError(f"cannot create {self.name}: {_reason(error)}") from None

    def _disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _live_connection(self) -> Connection:
        if self._connection is None:
            raise LogError(f"{self.name} is not connected")
        return self._connection

    def _try_lock(self) -> bool:
        connection = self._live_connection()
        try:
            with connection.transaction():
                row = connection.execute(
                    "SELECT pg_try_advisory_lock(%s)", (self._lock_key,)
                ).fetchone()
        except psycopg.Error as error:
            raise LogError(f"cannot lock {self.name}: {_reason(error)}") from None
        return bool(row and row[0])

    def _read_offset(self) -> int:
        connection = self._live_connection()
        _, _, lock_offset, _ = self._sql
        try:
            with connection.transaction():
                row = connection.execute(lock_offset, (self.table,)).fetchone()
        except psycopg.Error as error:
            raise LogError(f"cannot read the offset of {self.name}: {_reason(error)}") from None
        if row is None:
            raise LogError(f"{self.name} has no offset row")
        return int(row[0])

    def _commit(self, batch: _Batch) -> None:
        connection = self._live_connection()
        upsert, delete, lock_offset, set_offset = self._sql
        upserts: list[Sequence[object]] = []
        for key, events in batch.events.items():
            row = self.ledger.row(key)
            if row is None:
                batch.removed.add(key)
                continue
            values = row.to_json()
            upserts.append(
                [*(values[column] for column in _ROW_COLUMNS), batch.positions[key], events]
            )
        deletes = [[getattr(key, column) for column in _KEY_COLUMNS] for key in batch.removed]
        try:
            with connection.transaction():
                found = connection.execute(lock_offset, (self.table,)).fetchone()
                offset = None if found is None else int(found[0])
                if offset != self._position:
                    raise LogError(
                        f"the offset of {self.name} is {offset}, not {self._position} where this"
                        " materializer left it: another writer moved it; nothing was written"
                    )
                with connection.cursor() as cursor:
                    if deletes:
                        cursor.executemany(delete, deletes)
                    if upserts:
                        cursor.executemany(upsert, upserts)
                    cursor.execute(set_offset, (batch.position, self.table))
        except psycopg.Error as error:
            raise LogError(
                f"{self.name}: the batch of positions {self._position + 1} to {batch.position}"
                f" was not committed: {_reason(error)}"
            ) from None


def _sort_key(key: CallKey) -> tuple[str, ...]:
    return (key.tenant, key.conversation, key.turn, key.response, key.item, key.call)


@asynccontextmanager
async def materialize_ledger(
    log: Log,
    url: str,
    *,
    table: str = DEFAULT_TABLE,
    horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
    max_batch_events: int = DEFAULT_MAX_BATCH_EVENTS,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
) -> AsyncIterator[LedgerMaterializer]:
    """Keep the ledger of ``log`` in the table ``table`` of the PostgreSQL database ``url``
    names (``?schema=NAME`` picks the schema) while the block runs.

    Rows and offset are committed together after each batch of at most ``max_batch_events``
    events; ``horizon`` must be the one of the ledgers the table stands for (rows of calls
    finished longer ago are deleted). The block's value tells the committed offset and waits
    for one (``LedgerMaterializer.wait_for``). A failure to write stops it with a
    ``LogError``, raised from the block; rows and offset stay at the last commit, and opening it
    again carries on from there.
    """
    materializer = LedgerMaterializer(
        log,
        url,
        table=table,
        horizon=horizon,
        max_batch_events=max_batch_events,
        poll_interval=poll_interval,
    )
    body_error: BaseException | None = None
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(materializer.run)
            try:
                yield materializer
            except BaseException as error:
                body_error = error
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise sole_inert_error(group) from None
    if body_error is not None:
        raise body_error
