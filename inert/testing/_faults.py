"""A log that fails on purpose: seeded storage faults around any other log.

``FaultyLog`` wraps an inner log (the one that really stores) and, at each append, draws from
its own seeded random generator whether to inject one of these faults, each with its own
probability (``FaultRates``, optionally only for appends of some event types), or injects the fault
a ``script`` names for that append (appends are numbered from 1, in the order they reach the
wrapper):

- ``write_error``: the append raises, nothing of the batch is stored.
- ``disk_full``: the append raises, nothing is stored, and so do the next
  ``FaultRates.disk_full_appends`` appends (the disk stays full a while); reads still work.
- ``fsync_error``: the batch was written, then flushing it to stable storage failed. Whether
  the write survives is unknown, as after a real failed fsync: a seeded coin decides whether
  the inner log keeps the batch, and the append raises an outcome-unknown error. A failed
  fsync leaves the page cache in a state nobody can trust, so the wrapper then refuses every
  further operation (it is *halted*); the inner log, reopened, holds what survived.
- ``ack_lost``: the inner log stores the batch, then the acknowledgement is lost: the append
  raises an outcome-unknown error. The wrapper goes on working (appending the same events
  again tells that they landed).
- ``crash_before_store`` / ``crash_after_store``: the process stops at this append, before or
  after the inner log stored the batch: the append raises and the wrapper is halted. Use them
  in ``script`` to crash at a chosen append; ``halt()`` stops it anywhere else.
- ``delay``: the append waits up to ``FaultRates.max_delay`` seconds (Trio time) before it
  reaches the inner log, and so does a subscription's delivery.
- ``duplicate_delivery``: a subscription yields an event, then the same event again.

Every injected error is an ``InjectedFault`` (a ``LogError``) naming the fault, the append's
number, its streams and event types, and whether the batch is stored, unknown or not stored.
``acknowledged`` holds the event ids of every append that returned: the events that must
survive anything. A torn or corrupt tail is storage damage between runs rather than a fault of
one append: ``tear_memory_tail`` and ``tear_sqlite_tail`` damage a closed log's last event.

Appends must go through the wrapper (it wakes its own subscriptions); it never closes the inner
log, which outlives it so that a test can reopen the same storage after a fault.
"""

from __future__ import annotations

import enum
import os
import random
import sqlite3
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path

import attrs
import trio

from ..events import CallKey, LogError, RecordedEvent
from ..log import Log, MemoryStore, StoredSnapshot, Subscription
from ..log._log import FrozenRedaction
from ..log._records import PendingRecord, StoredRecord


class Fault(enum.Enum):
    """A fault ``FaultyLog`` injects."""

    WRITE_ERROR = "write_error"
    DISK_FULL = "disk_full"
    FSYNC_ERROR = "fsync_error"
    ACK_LOST = "ack_lost"
    CRASH_BEFORE_STORE = "crash_before_store"
    CRASH_AFTER_STORE = "crash_after_store"
    DELAY = "delay"
    DUPLICATE_DELIVERY = "duplicate_delivery"


class Stored(enum.Enum):
    """What an append that raised left in the inner log."""

    NOTHING = "nothing stored"
    BATCH = "the batch is stored"
    UNKNOWN = "outcome unknown"


@attrs.frozen(kw_only=True)
class FaultRates:
    """The probability of each fault at each append (or delivery, for duplicates and delays)."""

    write_error: float = 0.0
    disk_full: float = 0.0
    fsync_error: float = 0.0
    ack_lost: float = 0.0
    delay: float = 0.0
    duplicate_delivery: float = 0.0
    max_delay: float = 0.05
    disk_full_appends: int = 3
    event_types: tuple[str, ...] = ()
    """Prefixes of event types (``"ingress."``, ``"request.claim"``, ...) whose appends draw
    faults (every event of the batch must match one); empty: every append."""

    @classmethod
    def uniform(cls, probability: float, *, duplicates: bool = True) -> FaultRates:
        """Every fault at the same probability (duplicate delivery only if ``duplicates``)."""
        return cls(
            write_error=probability,
            disk_full=probability,
            fsync_error=probability,
            ack_lost=probability,
            delay=probability,
            duplicate_delivery=probability if duplicates else 0.0,
        )


NO_FAULTS = FaultRates()

# Drawn in this order at each append, so that one seed gives the same faults every run.
_APPEND_FAULTS = (
    Fault.WRITE_ERROR,
    Fault.DISK_FULL,
    Fault.FSYNC_ERROR,
    Fault.ACK_LOST,
)


class InjectedFault(LogError):
    """An append failed because ``FaultyLog`` injected a fault (or the log was halted by one)."""

    def __init__(
        self, fault: Fault, append: int, records: list[PendingRecord], stored: Stored, why: str
    ) -> None:
        streams = sorted({record.stream for record in records})
        types = sorted({record.event_type for record in records})
        super().__init__(
            f"injected {fault.value} at append {append} ({len(records)} events of"
            f" {', '.join(types)} to {', '.join(streams)}): {why}; {stored.value}"
        )
        self.fault = fault
        self.append = append
        self.streams = streams
        self.stored = stored


@attrs.frozen
class Injection:
    """One fault injected: at which append (0 for a delivery), what the inner log kept, and
    the types of the events the append held."""

    fault: Fault
    append: int
    stored: Stored | None
    event_types: frozenset[str] = frozenset()


class FaultyLog(Log):
    """A log that injects seeded faults into the appends and deliveries of an inner log."""

    def __init__(
        self,
        inner: Log,
        *,
        seed: int = 0,
        rates: FaultRates = NO_FAULTS,
        script: Mapping[int, Fault] | None = None,
    ) -> None:
        super().__init__(codec=inner.codec, clock=inner.now)
        self.inner = inner
        self.seed = seed
        self.rates = rates
        self.script = dict(script or {})
        self.random = random.Random(seed)
        self.appends = 0
        self.injected: list[Injection] = []
        self.acknowledged: set[str] = set()
        self._halted: InjectedFault | None = None
        self._full_for = 0

    @property
    def identity(self) -> str:
        return self.inner.identity

    def key(self, purpose: str) -> bytes:
        return self.inner.key(purpose)

    async def erased(self) -> bool:
        return await self.inner.erased()

    @property
    def halted(self) -> bool:
        """The wrapper stopped (a crash or a failed fsync): every operation now raises."""
        return self._halted is not None

    def halt(self, why: str = "the process stopped") -> None:
        """Stop here as a crashed process would: nothing more is read or written through it."""
        if self._halted is None:
            self._halted = InjectedFault(
                Fault.CRASH_BEFORE_STORE, self.appends, [], Stored.NOTHING, why
            )
        self._mark_closed()

    def _check_open(self) -> None:
        if self._halted is not None:
            raise LogError(f"the log is halted: {self._halted}")
        super()._check_open()

    def _draw(self, records: list[PendingRecord]) -> Fault | None:
        scripted = self.script.get(self.appends)
        if scripted is not None:
            return scripted
        prefixes = self.rates.event_types
        if prefixes and not all(record.event_type.startswith(prefixes) for record in records):
            return None
        if self._full_for:
            self._full_for -= 1
            return Fault.DISK_FULL
        rates = self.rates
        chances = (rates.write_error, rates.disk_full, rates.fsync_error, rates.ack_lost)
        for fault, chance in zip(_APPEND_FAULTS, chances, strict=True):
            if chance and self.random.random() < chance:
                if fault is Fault.DISK_FULL:
                    self._full_for = rates.disk_full_appends
                return fault
        return None

    def _inject(self, fault: Fault, records: list[PendingRecord], stored: Stored, why: str) -> None:
        types = frozenset(record.event_type for record in records)
        self.injected.append(Injection(fault, self.appends, stored, types))
        error = InjectedFault(fault, self.appends, records, stored, why)
        if fault in (Fault.FSYNC_ERROR, Fault.CRASH_BEFORE_STORE, Fault.CRASH_AFTER_STORE):
            self._halted = error
            self._mark_closed()
        raise error

    async def _delay(self) -> None:
        rates = self.rates
        if rates.delay and self.random.random() < rates.delay:
            self.injected.append(Injection(Fault.DELAY, self.appends, None))
            await trio.sleep(self.random.uniform(0, rates.max_delay))

    async def _store(self, records: list[PendingRecord], expected: dict[str, int]) -> list[int]:
        positions = await self.inner._append_records(records, expected)
        self._notify_appended()
        return positions

    async def _append_records(
        self, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]:
        self.appends += 1
        fault = self._draw(records)
        await self._delay()
        # A halt during the delay (another task's fault) stops this append too.
        self._check_open()
        match fault:
            case Fault.WRITE_ERROR:
                self._inject(fault, records, Stored.NOTHING, "the write failed")
            case Fault.DISK_FULL:
                self._inject(fault, records, Stored.NOTHING, "no space left on the device")
            case Fault.CRASH_BEFORE_STORE:
                self._inject(fault, records, Stored.NOTHING, "the process stopped")
            case Fault.FSYNC_ERROR:
                if self.random.random() < 0.5:
                    await self._store(records, expected)
                self._inject(fault, records, Stored.UNKNOWN, "flushing the write failed")
            case Fault.ACK_LOST:
                await self._store(records, expected)
                self._inject(fault, records, Stored.UNKNOWN, "the acknowledgement was lost")
            case Fault.CRASH_AFTER_STORE:
                await self._store(records, expected)
                self._inject(fault, records, Stored.BATCH, "the process stopped")
        positions = await self._store(records, expected)
        self.acknowledged.update(record.event_id for record in records)
        return positions

    def subscribe(self, from_position: int = 0) -> Subscription:
        self._check_open()
        return _FaultySubscription(self, max(from_position, 1))

    async def _read_rows(self, from_position: int, limit: int | None) -> list[StoredRecord]:
        self._check_open()
        return await self.inner._read_rows(from_position, limit)

    async def _read_stream_rows(self, stream: str, from_version: int) -> list[StoredRecord]:
        return await self.inner._read_stream_rows(stream, from_version)

    async def _redact(
        self,
        stream: str,
        up_to_version: int,
        event_types: frozenset[str] | None,
        keys: frozenset[CallKey] | None,
    ) -> int:
        return await self.inner._redact(stream, up_to_version, event_types, keys)

    async def _redact_many(self, redactions: list[FrozenRedaction]) -> int:
        return await self.inner._redact_many(redactions)

    async def _head(self) -> int:
        return await self.inner._head()

    async def _stream_version(self, stream: str) -> int:
        return await self.inner._stream_version(stream)

    async def _stream_version_as_of(self, stream: str, position: int) -> int:
        return await self.inner._stream_version_as_of(stream, position)

    async def _storage_problems(self) -> list[str]:
        return await self.inner._storage_problems()

    def _presence(self) -> AbstractAsyncContextManager[None]:
        return self.inner._presence()

    async def _runtime_running(self) -> bool:
        return await self.inner._runtime_running()

    async def _time(self) -> datetime:
        return await self.inner.time()

    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None:
        await self.inner._write_snapshot(snapshot)

    async def _delete_snapshot(self, name: str) -> None:
        await self.inner._delete_snapshot(name)

    async def _read_snapshot(self, name: str) -> StoredSnapshot | None:
        return await self.inner._read_snapshot(name)

    async def _wait_for_appends(self, since: trio.Event) -> None:
        await since.wait()

    async def aclose(self) -> None:
        """Close the wrapper (the inner log stays open: its owner closes it)."""
        self._mark_closed()
        await trio.lowlevel.checkpoint()


class _FaultySubscription(Subscription):
    """A subscription that may deliver late, or deliver an event twice."""

    def __init__(self, log: FaultyLog, next_position: int) -> None:
        super().__init__(log, next_position)
        self._faulty = log
        self._again: RecordedEvent | None = None

    async def __anext__(self) -> RecordedEvent:
        log = self._faulty
        if self._again is not None:
            again, self._again = self._again, None
            return again
        if log.halted:
            # A halted log is closed: like a crashed process, it delivers nothing more.
            raise StopAsyncIteration
        await log._delay()
        recorded = await super().__anext__()
        rates = log.rates
        if rates.duplicate_delivery and log.random.random() < rates.duplicate_delivery:
            log.injected.append(Injection(Fault.DUPLICATE_DELIVERY, 0, None))
            self._again = recorded
        return recorded


# --- damage to a stopped log's storage ----------------------------------------------------------


def tear_memory_tail(store: MemoryStore, keep: int = 3) -> StoredRecord:
    """Cut the last event's payload in a memory log's store to ``keep`` bytes, as a torn write
    would; the damaged row."""
    last = store.rows[-1]
    assert last.payload is not None
    torn = last._replace(payload=last.payload[:keep])
    store.rows[-1] = store.by_id[last.event_id] = torn
    return torn


class Tear(enum.Enum):
    """How ``tear_sqlite_tail`` damages an SQLite log's file."""

    PAYLOAD = "payload"
    """The last event's payload cut short (a torn row)."""
    LAST_PAGE = "last_page"
    """The last page of the database file overwritten with garbage."""
    TRUNCATED = "truncated"
    """The database file cut in the middle of its last page."""


def tear_sqlite_tail(path: str | os.PathLike[str], tear: Tear, *, seed: int = 0) -> None:
    """Damage the tail of a closed SQLite log's file, as a torn write or a bad sector would."""
    path = Path(path)
    if tear is Tear.PAYLOAD:
        connection = sqlite3.connect(path)
        try:
            with connection:
                connection.execute(
                    "UPDATE events SET payload = substr(payload, 1, length(payload) / 2)"
                    " WHERE position = (SELECT max(position) FROM events)"
                )
        finally:
            connection.close()
        return
    connection = sqlite3.connect(path)
    try:
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
    finally:
        connection.close()
    size = path.stat().st_size
    with path.open("r+b") as file:
        if tear is Tear.TRUNCATED:
            file.truncate(size - page_size // 2)
        else:
            file.seek(size - page_size)
            file.write(random.Random(seed).randbytes(page_size))
