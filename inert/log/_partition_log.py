"""The log of one partition, kept by a host log whose storage holds the others too."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from typing import Protocol

import trio

from ..events._codec import Codec
from ..events._identity import CallKey
from ._log import Clock, FrozenRedaction, Log
from ._records import PendingRecord, StoredRecord
from ._snapshots import StoredSnapshot


class PartitionHost(Protocol):
    """A log whose storage holds its other partitions too: what a :class:`PartitionLog` asks
    of it, each time for one partition."""

    @property
    def name(self) -> str: ...

    async def _append_in(
        self, partition: int, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]: ...

    async def _read_rows_in(
        self, partition: int, from_position: int, limit: int | None
    ) -> list[StoredRecord]: ...

    async def _read_stream_rows_in(
        self, partition: int, stream: str, from_version: int
    ) -> list[StoredRecord]: ...

    async def _redact_many_in(self, partition: int, redactions: list[FrozenRedaction]) -> int: ...

    async def _write_snapshot_of(self, partition: int, snapshot: StoredSnapshot) -> None: ...

    async def _delete_snapshot_of(self, partition: int, name: str) -> None: ...

    async def _read_snapshot_of(self, partition: int, name: str) -> StoredSnapshot | None: ...

    async def _head_of(self, partition: int) -> int: ...

    async def _stream_version_in(self, partition: int, stream: str) -> int: ...

    async def _storage_problems_of(self, partition: int) -> list[str]: ...

    def _presence(self) -> AbstractAsyncContextManager[None]: ...

    async def _runtime_running(self) -> bool: ...

    async def erased(self) -> bool: ...

    async def time(self) -> datetime: ...


class PartitionLog(Log):
    """One partition of a log whose storage holds several: a log of its own (positions,
    streams, head and snapshots), written and read through its host's connections. As a log,
    it has one partition: itself."""

    def __init__(
        self,
        host: PartitionHost,
        number: int,
        *,
        identity: str,
        secret: bytes,
        codec: Codec,
        clock: Clock,
    ) -> None:
        super().__init__(codec=codec, clock=clock)
        self._host = host
        self.number = number
        self._identity = identity
        self._secret = secret

    @property
    def name(self) -> str:
        return f"partition {self.number} of {self._host.name}"

    def _heard_of(self, head: int) -> None:
        """Another process committed up to ``head`` in this partition."""
        self._known_head = max(self._known_head, head)
        self._notify_appended()

    def _committed_here(self, rows: Sequence[StoredRecord]) -> None:
        """This process committed these rows to this partition."""
        self._keep_committed(rows)
        self._notify_appended()

    async def _wait_for_appends(self, since: trio.Event) -> None:
        # The host wakes it: for this process's commits, another's notification, and its own
        # poll of every partition's head, which bounds how late a lost notification is seen.
        await since.wait()

    async def _append_records(
        self, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]:
        return await self._host._append_in(self.number, records, expected)

    async def _read_rows(self, from_position: int, limit: int | None) -> list[StoredRecord]:
        return await self._host._read_rows_in(self.number, from_position, limit)

    async def _read_stream_rows(self, stream: str, from_version: int) -> list[StoredRecord]:
        return await self._host._read_stream_rows_in(self.number, stream, from_version)

    async def _redact(
        self,
        stream: str,
        up_to_version: int,
        event_types: frozenset[str] | None,
        keys: frozenset[CallKey] | None,
    ) -> int:
        return await self._redact_many([(stream, up_to_version, event_types, keys)])

    async def _redact_many(self, redactions: list[FrozenRedaction]) -> int:
        return await self._host._redact_many_in(self.number, redactions)

    async def erased(self) -> bool:
        return await self._host.erased()

    async def _time(self) -> datetime:
        return await self._host.time()

    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None:
        await self._host._write_snapshot_of(self.number, snapshot)

    async def _delete_snapshot(self, name: str) -> None:
        await self._host._delete_snapshot_of(self.number, name)

    async def _read_snapshot(self, name: str) -> StoredSnapshot | None:
        return await self._host._read_snapshot_of(self.number, name)

    async def _head(self) -> int:
        return await self._host._head_of(self.number)

    async def _stream_version(self, stream: str) -> int:
        return await self._host._stream_version_in(self.number, stream)

    async def _storage_problems(self) -> list[str]:
        return await self._host._storage_problems_of(self.number)

    @asynccontextmanager
    async def _presence(self) -> AsyncIterator[None]:
        async with self._host._presence():
            yield

    async def _runtime_running(self) -> bool:
        return await self._host._runtime_running()

    async def aclose(self) -> None:
        """A partition closes with its host."""
        self._mark_closed()
        await trio.lowlevel.checkpoint()
