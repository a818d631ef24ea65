"""The log contract, shared by every backend.

The log is the only source of truth of inert. It holds events in one total order (``position``,
from 1, without gaps) and, within each stream, a ``version`` (from 1) that writers use for
optimistic concurrency. Every row carries a checksum of its columns, made when it is planned;
every read checks the checksums and that positions (and a stream's versions) follow each other
without a gap, and raises ``LogDamaged`` naming the position otherwise.

- ``append(events, expected_versions)`` is atomic: every event of the batch is written, or none.
  It is idempotent by event id: an event whose id is stored already is not written again and
  its original position is returned; the same id with other content is a
  ``DuplicateEventError``. Each stream named in ``expected_versions`` must be at that version
  (``NO_STREAM`` for an empty stream) or the batch is refused with a ``ConflictError``. A batch
  that only repeats stored events succeeds without a version check: it is the retry of an
  append that was acknowledged, or whose acknowledgement was lost.
- An append returns only when its batch is durable to the degree the backend promises. An
  append whose caller is cancelled while it waits may still land; appending the same events
  again tells.
- ``read``, ``read_stream`` and ``subscribe`` return events in position order; ``subscribe``
  yields what is stored and then waits for new appends, never skipping or reordering one.
- ``redact(stream, up_to_version, event_types=None)`` replaces payloads by their length and
  digest and keeps the envelopes; an event type that names its sensitive fields keeps the rest of
  its event (``Redacted.remains``). ``event_types`` limits it to events of those tags.
- A log keeps one snapshot per name beside its events (``inert.log._snapshots``).
  ``write_snapshot`` replaces the one of the same name atomically: a reader sees the old one or
  the new one whole. Redaction is final: a snapshot write drops, silently, each payload whose
  versions of its stream (``first_version`` on) hold a redacted event, and ``redact(stream,
  up_to_version, ...)`` deletes every payload of that stream from that version or before,
  whatever its event types, in the transaction of its events.
  ``read_snapshot`` returns the snapshot with the payloads it still holds, in the order written.

A log remembers the events this process appended last (``RECENT_APPENDS`` of them) and hands
the same objects to its subscriptions instead of decoding their payloads again: they are what
decoding would give, since the codec's round trip is exact for every event type it is used for
(those without datetimes, whose time zone a round trip normalises to UTC). A backend that commits
through this process also keeps the rows of its last commits (``COMMITTED_ROWS`` of them): a
subscription takes the rows that follow its position from there rather than reading them back
from storage. Having taken some, it asks storage for more only once it knows of an append past
them (another writer's, of which a notification told) or once an append or the poll interval
wakes it: what another process appends is seen as late as its notification or polling allows,
as before. A redaction forgets the rows kept, so that a subscription reads what redaction left
from storage.
"""

from __future__ import annotations

import abc
import hashlib
import hmac
import os
import uuid
from bisect import bisect_right
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import attrs
import trio

from ..events._base import Event, registered_event_types
from ..events._codec import DEFAULT_CODEC, Codec
from ..events._errors import InertError, LogError
from ..events._identity import CallKey
from ..events._recorded import RecordedEvent
from ..events._times import datetime_to_micros
from ._partitions import CONTROL_PARTITION, call_partitions, check_partitions, partition_of
from ._records import (
    NO_STREAM,
    PAYLOAD_DIGEST_KEY,
    NewEvent,
    PendingRecord,
    StoredRecord,
    call_of,
    check_expected_versions,
    check_page,
    check_stream_page,
    decode_records,
    encode_batch,
    plan_appends,
    reached,
    redacted,
    restored_record,
)
from ._snapshots import (
    StoredSnapshot,
    StreamRedactions,
    judged_versions,
    kept_payloads,
    payload_streams,
    redaction_takes,
)

Clock = Callable[[], datetime]
Redaction = tuple[str, int, Collection[str] | None, Collection[CallKey] | None]
"""One redaction of ``Log.redact_many``: the stream, up to which version, of which event types
(``None``: every type) and, where it is limited to some calls' events, those calls (as
``Log.redact`` takes them)."""
FrozenRedaction = tuple[str, int, frozenset[str] | None, frozenset[CallKey] | None]
"""A redaction as the backends take it."""


def _without_datetimes(cls: type[Event]) -> bool:
    return all("datetime" not in str(field.type) for field in attrs.fields(cls))


_EXACT_ROUND_TRIP = frozenset(
    cls for cls in registered_event_types().values() if _without_datetimes(cls)
)
"""Event types that decode to an equal object of the same field values, identically typed."""

SUBSCRIBE_PAGE = 1024

RECENT_APPENDS = 16_384
"""Events appended by this process that subscriptions take without decoding them again."""

COMMITTED_ROWS = 4 * SUBSCRIBE_PAGE
"""Rows committed by this process that subscriptions take without reading them back."""


def utc_now() -> datetime:
    return datetime.now(UTC)


def new_identity() -> str:
    """A new log's identity: unique to it, copied only with the log itself."""
    return f"log-{uuid.uuid4().hex}"


def new_secret() -> bytes:
    """A new log's secret, which its keys derive from (see ``Log.key``)."""
    return os.urandom(32)


_V = TypeVar("_V")


class ByPosition(dict[int, _V]):
    """The values of the last ``bound`` positions kept, the oldest forgotten first.

    Positions are forgotten in the order they were kept through a queue beside the dict: taking
    a dict's first key instead would scan the slots its earlier deletions left at its front,
    up to thousands per position once the dict is large.
    """

    __slots__ = ("_bound", "_order")

    def __init__(self, bound: int) -> None:
        super().__init__()
        self._bound = bound
        self._order: deque[int] = deque()

    def keep(self, position: int, value: _V) -> None:
        if position not in self:
            self._order.append(position)
        self[position] = value
        if len(self._order) > self._bound:
            del self[self._order.popleft()]

    def forget(self) -> None:
        """Forget every position kept."""
        self.clear()
        self._order.clear()


class Log(abc.ABC):
    """An ordered, append-only event log. Use a backend's ``open`` or
    [`open_log`][inert.open_log]."""

    def __init__(self, *, codec: Codec | None, clock: Clock | None) -> None:
        self.codec = codec or DEFAULT_CODEC
        self._clock = clock or utc_now
        # How far this writer's clock was found behind the log's (``_stamp_after``).
        self._behind = timedelta(0)
        self._closed = False
        self._appended = trio.Event()
        self._recent: ByPosition[Event] = ByPosition(RECENT_APPENDS)
        self._committed: ByPosition[StoredRecord] = ByPosition(COMMITTED_ROWS)
        # The furthest position this log knows storage holds: its own commits, and the
        # appends of others it is told of.
        self._known_head = 0
        self._identity = ""
        self._secret = b""
        self._derived_keys: dict[str, tuple[bytes, bytes]] = {}
        """The keys made so far, by purpose, each with the secret it was made from."""
        self._partitions = 1
        self.rows_read = 0
        """The rows this log has read from storage since it was opened (by ``read``,
        ``read_stream`` and subscriptions; not the rows of its own commits that subscriptions
        take without reading them back): what following a shared log costs each process."""
        self.redactions_made = 0
        """How many times this log has redacted since it was opened (each ``redact`` and each
        ``redact_many`` once, in one transaction where the backend has them)."""

    @property
    def identity(self) -> str:
        """The log's identity, made when it was created (read when it is opened; empty before):
        what binds a snapshot to the log it was taken of."""
        return self._identity

    def key(self, purpose: str) -> bytes:
        """A key of this log for one purpose, derived from a secret made with the log and kept
        beside its identity: what inert keys a digest with that only those who can read the
        log's storage itself (not its events) could make again."""
        if not self._secret:
            raise LogError("the log is not open: it has no key yet")
        # Every append and redaction asks for the payload digest's key: made once per secret
        # (an HMAC made anew each time was a few percent of a simulated seed).
        secret, key = self._derived_keys.get(purpose, (b"", b""))
        if secret is not self._secret:
            key = hmac.new(self._secret, purpose.encode(), hashlib.sha256).digest()
            self._derived_keys[purpose] = (self._secret, key)
        return key

    # --- partitions (see ._partitions) ---

    @property
    def partitions(self) -> int:
        """How many partitions of calls the log has: 1 (partition 0 holds everything) unless it
        was created with more (read when it is opened)."""
        return self._partitions

    def partition_of(self, tenant: str, conversation: str) -> int:
        """The number of the partition a conversation's turns and calls live in."""
        return partition_of(tenant, conversation, self._partitions)

    def call_partitions(self) -> range:
        """The numbers of the partitions that hold calls: 0 alone, or 1 to ``partitions``."""
        return call_partitions(self._partitions)

    def partition(self, number: int) -> Log:
        """The log of one partition: this log itself for partition 0 (the control partition, or
        the only one), a log of its own under the same contract for each other."""
        if number == CONTROL_PARTITION:
            return self
        if self._partitions == 1 or number not in call_partitions(self._partitions):
            raise LogError(
                f"this log has no partition {number}: its partitions are 0 to"
                f" {self._partitions if self._partitions > 1 else 0}"
            )
        return self._partition_log(number)

    def _partition_log(self, number: int) -> Log:
        """The log of partition ``number`` (1 to ``partitions``) of a partitioned log."""
        raise LogError(f"{type(self).__name__} holds one partition")

    # --- the contract ---

    async def append(
        self, events: Sequence[NewEvent], expected_versions: Mapping[str, int] | None = None
    ) -> list[int]:
        """Append a batch atomically; the positions of its events, in order."""
        self._check_open()
        records = encode_batch(self.codec, events)
        expected = check_expected_versions(expected_versions)
        if not records:
            return []
        positions = await self._append_records(records, expected)
        keep = self._recent.keep
        for position, new in zip(positions, events, strict=True):
            if type(new.event) in _EXACT_ROUND_TRIP:
                keep(position, new.event)
        return positions

    async def _restore(self, rows: Sequence[StoredRecord]) -> list[int]:
        """Append rows read from another log of this log's identity and secret (the digests of
        its redacted payloads are keyed by them) as they were written there: event ids, times,
        payloads or what redaction left of them, digests and trace contexts. Each takes the next
        position here and the next version of its stream; a row whose event id is here already
        returns its position, as ``append`` does. What ``inert repartition`` copies with."""
        self._check_open()
        records = [restored_record(row, self.codec) for row in rows]
        if not records:
            return []
        return await self._append_records(records, {})

    async def _adopt_identity(self, identity: str, secret: bytes) -> None:
        """Take another log's identity and secret, while this log holds no event: a copy of
        that log is written here. ``LogError`` if it holds one."""
        raise LogError(f"{type(self).__name__} cannot take another log's identity")

    async def read(
        self, from_position: int = 0, *, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Events at ``from_position`` and after, in position order, at most ``limit`` of them."""
        self._check_open()
        if limit is not None and limit < 1:
            raise LogError(f"read limit must be at least 1, not {limit}")
        first = max(from_position, 1)
        rows = await self._read_rows(first, limit)
        self.rows_read += len(rows)
        check_page(rows, first)
        return decode_records(self.codec, rows)

    async def read_stream(self, stream: str, from_version: int = 0) -> list[RecordedEvent]:
        """The events of one stream from ``from_version`` on, in version order."""
        self._check_open()
        first = max(from_version, 1)
        rows = await self._read_stream_rows(stream, first)
        self.rows_read += len(rows)
        check_stream_page(rows, stream, first)
        return decode_records(self.codec, rows)

    def subscribe(self, from_position: int = 0) -> Subscription:
        """An async iterator over every event from ``from_position`` on, then new ones as they land.

        Iteration ends when the log is closed.
        """
        self._check_open()
        return Subscription(self, max(from_position, 1))

    async def redact(
        self,
        stream: str,
        up_to_version: int,
        *,
        event_types: Collection[str] | None = None,
        keys: Collection[CallKey] | None = None,
    ) -> int:
        """Redact the payloads of a stream up to a version (of those event types only, if given,
        and of the events addressed to those calls only, if given), keeping length, digest and
        the non-sensitive fields of the event types that name theirs.

        Returns how many payloads this call redacted (already redacted ones don't count).
        """
        self._check_open()
        # Forgotten before and after: a row kept across the redaction's commit would give a
        # subscription the payload that storage no longer holds.
        self._committed.forget()
        try:
            done = await self._redact(
                stream,
                up_to_version,
                None if event_types is None else frozenset(event_types),
                None if keys is None else frozenset(keys),
            )
        finally:
            self._committed.forget()
        self.redactions_made += 1
        return done

    async def redact_many(self, redactions: Iterable[Redaction]) -> int:
        """Make several redactions (each as ``redact`` makes it), in one transaction where the
        backend has transactions: all of them or none. Returns how many payloads they redacted."""
        self._check_open()
        due = [
            (
                stream,
                up_to_version,
                None if event_types is None else frozenset(event_types),
                None if keys is None else frozenset(keys),
            )
            for stream, up_to_version, event_types, keys in redactions
        ]
        if not due:
            await trio.lowlevel.checkpoint()
            return 0
        self._committed.forget()
        try:
            done = await self._redact_many(due)
        finally:
            self._committed.forget()
        self.redactions_made += 1
        return done

    async def write_snapshot(self, snapshot: StoredSnapshot) -> None:
        """Store a snapshot in place of the one of its name, without the payloads stored under a
        stream that holds a redacted event."""
        self._check_open()
        await self._write_snapshot(snapshot)

    async def erased(self) -> bool:
        """Until the bytes the redactions made so far took out of the rows are gone from the
        backend's storage as far as it erases them (see docs/log.md); whether they are. A log
        that keeps nothing beside its rows has nothing to wait for."""
        await trio.lowlevel.checkpoint()
        return True

    async def delete_snapshot(self, name: str) -> None:
        """Delete the snapshot of a name and its payloads, if there is one."""
        self._check_open()
        await self._delete_snapshot(name)

    async def read_snapshot(self, name: str) -> StoredSnapshot | None:
        """The snapshot stored under ``name``, with the payloads it still holds, or None."""
        self._check_open()
        return await self._read_snapshot(name)

    async def head(self) -> int:
        """The position of the last event, 0 for an empty log."""
        self._check_open()
        return await self._head()

    async def stream_version(self, stream: str, *, as_of: int | None = None) -> int:
        """The version of the last event of a stream, ``NO_STREAM`` (0) for an empty one; with
        ``as_of``, of its last event at that position or before: what a reader that has read
        the log up to there knows, so that an append expecting it is refused if anything was
        written to the stream since."""
        self._check_open()
        if as_of is None:
            return await self._stream_version(stream)
        return await self._stream_version_as_of(stream, as_of)

    @asynccontextmanager
    async def runtime_presence(self) -> AsyncIterator[None]:
        """While the block runs, a runtime runs on this log: ``runtime_running`` says so in
        every process. Storage holds it (a lock of the file or of the server's session), never
        a clock: a process that dies stops being present at once."""
        self._check_open()
        async with self._presence():
            yield

    async def runtime_running(self) -> bool:
        """Whether a runtime (of any process, this one included) runs on this log now: what
        tells an operator whether a control takes effect at once or when a runtime opens it."""
        self._check_open()
        return await self._runtime_running()

    async def storage_problems(self) -> list[str]:
        """What the backend's own checks find wrong with its storage (for SQLite, ``PRAGMA
        integrity_check``, which also reads the index pages a plain read never touches), and
        whether the rows it holds fill every position up to its head; empty when all is well."""
        self._check_open()
        return await self._storage_problems()

    @property
    def closed(self) -> bool:
        return self._closed

    def now(self) -> datetime:
        """The time this log records an append at, if it happened now."""
        return self._clock() + self._behind

    async def time(self) -> datetime:
        """The log's time now, asked of its storage where that keeps the clock (a server's),
        else ``now``: what a judgment that takes something from another process (its lease)
        is made by, so that a jump of this process's clock never decides it."""
        self._check_open()
        return await self._time()

    async def _time(self) -> datetime:
        return self.now()

    # --- for backends ---

    def _check_open(self) -> None:
        if self._closed:
            raise LogError(f"{type(self).__name__} is closed")

    def _now_micros(self) -> int:
        return datetime_to_micros(self.now())

    def _stamp_after(self, last: int | None) -> int:
        """The time to stamp an append with, in a log whose clock is its writers' own: never
        before the log's last stamp, so that the log's time never goes back, whichever of its
        writers' clocks is behind or was set back. A writer that finds its clock behind the
        log's keeps the difference from then on (``now`` too), so that its own stamps and its
        judgments of time go on from the log's time instead of standing still."""
        now = self._now_micros()
        if last is None or last <= now:
            return now
        self._behind += timedelta(microseconds=last - now)
        return last

    def _keep_committed(self, rows: Sequence[StoredRecord]) -> None:
        """Keep rows this process has just committed, in position order, for subscriptions."""
        keep = self._committed.keep
        for row in rows:
            keep(row.position, row)
        if rows:
            self._known_head = max(self._known_head, rows[-1].position)

    def _committed_from(self, position: int, limit: int) -> list[StoredRecord]:
        """The rows kept from ``position`` on, as long as they follow each other, at most
        ``limit``; empty where the row at ``position`` is not kept."""
        committed = self._committed
        rows: list[StoredRecord] = []
        row = committed.get(position)
        while row is not None and len(rows) < limit:
            rows.append(row)
            position += 1
            row = committed.get(position)
        return rows

    def _notify_appended(self) -> None:
        self._appended.set()
        self._appended = trio.Event()

    def _mark_closed(self) -> None:
        self._closed = True
        self._appended.set()

    async def _wait_for_appends(self, since: trio.Event) -> None:
        """Wait until an append lands after ``since`` was current (or until the poll interval)."""
        await since.wait()

    @abc.abstractmethod
    async def _append_records(
        self, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]: ...

    @abc.abstractmethod
    async def _read_rows(self, from_position: int, limit: int | None) -> list[StoredRecord]: ...

    @abc.abstractmethod
    async def _read_stream_rows(self, stream: str, from_version: int) -> list[StoredRecord]: ...

    @abc.abstractmethod
    async def _redact(
        self,
        stream: str,
        up_to_version: int,
        event_types: frozenset[str] | None,
        keys: frozenset[CallKey] | None,
    ) -> int: ...

    async def _redact_many(self, redactions: list[FrozenRedaction]) -> int:
        """The redactions one after the other; a backend with transactions makes them in one."""
        done = 0
        for redaction in redactions:
            done += await self._redact(*redaction)
        return done

    @abc.abstractmethod
    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None: ...

    @abc.abstractmethod
    async def _delete_snapshot(self, name: str) -> None: ...

    @abc.abstractmethod
    async def _read_snapshot(self, name: str) -> StoredSnapshot | None: ...

    @abc.abstractmethod
    async def _head(self) -> int: ...

    @abc.abstractmethod
    async def _storage_problems(self) -> list[str]: ...

    @abc.abstractmethod
    def _presence(self) -> AbstractAsyncContextManager[None]: ...

    @abc.abstractmethod
    async def _runtime_running(self) -> bool: ...

    @abc.abstractmethod
    async def _stream_version(self, stream: str) -> int: ...

    async def _stream_version_as_of(self, stream: str, position: int) -> int:
        # Asked only where a reader lost count of a stream (a call it forgot), whose streams
        # are short: reading the stream's rows does.
        rows = await self._read_stream_rows(stream, 1)
        self.rows_read += len(rows)
        return max((row.version for row in rows if row.position <= position), default=NO_STREAM)

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close the log; appends already accepted are finished first."""


class Subscription:
    """Tails a log from a position: what is stored first, then each new event as it lands."""

    def __init__(self, log: Log, next_position: int) -> None:
        self._log = log
        self._next = next_position
        self._buffer: deque[RecordedEvent] = deque()
        # Whether the last rows taken were kept by the log rather than read from storage.
        self._taken_from_memory = False

    @property
    def next_position(self) -> int:
        """The position of the next event this subscription will yield."""
        return self._next - len(self._buffer)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> RecordedEvent:
        while not self._buffer:
            if self._log.closed:
                raise StopAsyncIteration
            log = self._log
            # Taken before the read, so that an append landing between the read and the wait
            # is not missed.
            appended = log._appended
            rows = log._committed_from(self._next, SUBSCRIBE_PAGE)
            from_memory, self._taken_from_memory = self._taken_from_memory, bool(rows)
            if not rows and from_memory and log._known_head < self._next:
                # Past the rows this process committed, storage holds nothing this log has
                # heard of: the next append, a notification or the poll interval sends the
                # subscription to storage, as after a read that found nothing.
                await log._wait_for_appends(appended)
                continue
            if not rows:
                rows = await log._read_rows(self._next, SUBSCRIBE_PAGE)
                log.rows_read += len(rows)
                if not rows:
                    await log._wait_for_appends(appended)
                    continue
                check_page(rows, self._next)
            self._buffer.extend(decode_records(log.codec, rows, log._recent))
            self._next += len(rows)
        return self._buffer.popleft()


class MemoryStore:
    """The rows and snapshots of a memory log; outlives the logs opened on it, so a test can
    reopen it. A simulation that must write the same log twice gives both the same identity and
    secret (they key the log's digests)."""

    def __init__(
        self, *, identity: str | None = None, secret: bytes | None = None, partitions: int = 1
    ) -> None:
        self.rows: list[StoredRecord] = []
        self.by_id: dict[str, StoredRecord] = {}
        self.streams: dict[str, list[int]] = {}
        self.snapshots: dict[str, StoredSnapshot] = {}
        self.runtimes = 0
        self.identity = identity if identity is not None else new_identity()
        self.secret = secret if secret is not None else new_secret()
        self.partitions = check_partitions(partitions)
        self.partition_stores = {
            number: MemoryStore(identity=self.identity, secret=self.secret)
            for number in call_partitions(self.partitions)
            if number != CONTROL_PARTITION
        }
        """The stores of partitions 1 to ``partitions`` (this store is partition 0's)."""

    def append(self, rows: list[StoredRecord]) -> None:
        for row in rows:
            self.rows.append(row)
            self.by_id[row.event_id] = row
            self.streams.setdefault(row.stream, []).append(row.position)


class MemoryLog(Log):
    """An in-process log for tests and simulations: no durability, same contract."""

    def __init__(
        self,
        store: MemoryStore | None = None,
        *,
        codec: Codec | None = None,
        clock: Clock | None = None,
    ) -> None:
        super().__init__(codec=codec, clock=clock)
        self.store = store if store is not None else MemoryStore()
        self._identity = self.store.identity
        self._secret = self.store.secret
        self._partitions = self.store.partitions
        self._partition_logs: dict[int, MemoryLog] = {}
        self._runtimes_in = self.store

    def _partition_log(self, number: int) -> Log:
        log = self._partition_logs.get(number)
        if log is None:
            log = self._partition_logs[number] = MemoryLog(
                self.store.partition_stores[number], codec=self.codec, clock=self._clock
            )
            # Its runtimes are the log's: one presence for the whole log.
            log._runtimes_in = self.store
            if self._closed:
                log._mark_closed()
        return log

    async def _adopt_identity(self, identity: str, secret: bytes) -> None:
        await trio.lowlevel.checkpoint()
        stores = [self.store, *self.store.partition_stores.values()]
        if any(store.rows for store in stores):
            raise LogError("the memory log holds events: it cannot take another log's identity")
        for store in stores:
            store.identity, store.secret = identity, secret
        for log in [self, *self._partition_logs.values()]:
            log._identity, log._secret = identity, secret

    async def _append_records(
        self, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]:
        await trio.lowlevel.checkpoint()
        store = self.store
        streams = {record.stream for record in records} | expected.keys()
        plan = plan_appends(
            [(records, expected)],
            digest_key=self.key(PAYLOAD_DIGEST_KEY),
            existing={
                r.event_id: store.by_id[r.event_id] for r in records if r.event_id in store.by_id
            },
            stream_versions={s: len(store.streams[s]) for s in streams if s in store.streams},
            head=len(store.rows),
            recorded_at=self._stamp_after(store.rows[-1].recorded_at if store.rows else None),
        )
        [outcome] = plan.outcomes
        if isinstance(outcome, InertError):
            raise outcome
        store.append(plan.rows)
        if plan.rows:
            self._notify_appended()
        return outcome

    async def _read_rows(self, from_position: int, limit: int | None) -> list[StoredRecord]:
        await trio.lowlevel.checkpoint()
        end = None if limit is None else from_position - 1 + limit
        return self.store.rows[from_position - 1 : end]

    async def _read_stream_rows(self, stream: str, from_version: int) -> list[StoredRecord]:
        await trio.lowlevel.checkpoint()
        positions = self.store.streams.get(stream, [])[from_version - 1 :]
        return [self.store.rows[position - 1] for position in positions]

    async def _redact(
        self,
        stream: str,
        up_to_version: int,
        event_types: frozenset[str] | None,
        keys: frozenset[CallKey] | None,
    ) -> int:
        await trio.lowlevel.checkpoint()
        store = self.store
        count = 0
        for position in store.streams.get(stream, [])[: max(up_to_version, 0)]:
            row = store.rows[position - 1]
            if row.digest is None and reached(row, self.codec, event_types, keys):
                done = redacted(row, self.codec, self.key(PAYLOAD_DIGEST_KEY))
                store.rows[position - 1] = store.by_id[row.event_id] = done
                count += 1
        for name, snapshot in list(store.snapshots.items()):
            kept = tuple(
                payload
                for payload in snapshot.payloads
                if payload.stream != stream
                or not redaction_takes(
                    payload.first_version,
                    up_to_version,
                    keys,
                    None if keys is None else self._call_at(stream, payload.first_version),
                )
            )
            if len(kept) < len(snapshot.payloads):
                store.snapshots[name] = attrs.evolve(snapshot, payloads=kept)
        return count

    def _call_at(self, stream: str, version: int) -> CallKey | None:
        """The call of a stream's event at a version, as far as its row tells."""
        positions = self.store.streams.get(stream, ())
        if not 0 < version <= len(positions):
            return None
        return call_of(self.store.rows[positions[version - 1] - 1], self.codec)

    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None:
        await trio.lowlevel.checkpoint()
        store = self.store
        judged: dict[str, StreamRedactions] = {}
        for stream in payload_streams(snapshot):
            positions = store.streams.get(stream, ())
            rows = [store.rows[position - 1] for position in positions]
            found = [
                (row.version, call_of(row, self.codec)) for row in rows if row.digest is not None
            ]
            if found:
                judged[stream] = StreamRedactions(found, {})
        for stream, versions in judged_versions(
            snapshot, {stream: redactions.highest for stream, redactions in judged.items()}
        ).items():
            calls = {version: self._call_at(stream, version) for version in versions}
            judged[stream] = StreamRedactions(judged[stream].redacted, calls)
        kept = tuple(payload for _, payload in kept_payloads(snapshot, judged))
        store.snapshots[snapshot.name] = attrs.evolve(snapshot, payloads=kept)

    async def _delete_snapshot(self, name: str) -> None:
        await trio.lowlevel.checkpoint()
        self.store.snapshots.pop(name, None)

    async def _read_snapshot(self, name: str) -> StoredSnapshot | None:
        await trio.lowlevel.checkpoint()
        return self.store.snapshots.get(name)

    async def _head(self) -> int:
        await trio.lowlevel.checkpoint()
        return len(self.store.rows)

    async def _stream_version(self, stream: str) -> int:
        await trio.lowlevel.checkpoint()
        return len(self.store.streams.get(stream, ()))

    async def _stream_version_as_of(self, stream: str, position: int) -> int:
        await trio.lowlevel.checkpoint()
        return bisect_right(self.store.streams.get(stream, ()), position)

    async def _storage_problems(self) -> list[str]:
        await trio.lowlevel.checkpoint()
        return [
            f"the row at index {index} holds position {row.position}"
            for index, row in enumerate(self.store.rows, 1)
            if row.position != index
        ]

    @asynccontextmanager
    async def _presence(self) -> AsyncIterator[None]:
        await trio.lowlevel.checkpoint()
        self._runtimes_in.runtimes += 1
        try:
            yield
        finally:
            self._runtimes_in.runtimes -= 1

    async def _runtime_running(self) -> bool:
        await trio.lowlevel.checkpoint()
        return self._runtimes_in.runtimes > 0

    async def aclose(self) -> None:
        self._mark_closed()
        for partition in self._partition_logs.values():
            partition._mark_closed()
        await trio.lowlevel.checkpoint()
