"""Group commit, shared by the backends that write through a database connection.

Appenders queue their encoded batches; one writer task takes the queue in groups (every batch
waiting, up to ``max_batch_events`` events, or one batch at a time without group commit),
commits each group in one transaction in a worker thread, and wakes the appenders of the group,
each by an event of its own (one wake for all would cost every waiting appender a turn per
group). Each batch of a group is planned, and fails, on its own. An append returns only once its
group has committed; one whose group was being committed when the writer stopped may or may not
have landed, and says so.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Generic, NamedTuple, TypeVar

import attrs
import trio

from ..events._codec import Codec
from ..events._errors import ConfigurationError, InertError, LogError
from ..events._identity import CallKey
from ._log import Clock, FrozenRedaction, Log
from ._records import PendingRecord, StoredRecord
from ._snapshots import StoredSnapshot

ConnectionT = TypeVar("ConnectionT")
_T = TypeVar("_T")


@attrs.define
class AppendRequest:
    """One append waiting for the writer, and what became of it."""

    records: list[PendingRecord]
    expected: dict[str, int]
    partition: int = 0
    positions: list[int] | None = None
    error: InertError | None = None
    settled: trio.Event = attrs.field(factory=trio.Event)
    """Set once ``positions`` or ``error`` is."""

    def settle(self, outcome: list[int] | InertError) -> None:
        """What became of the append, told to its appender."""
        if isinstance(outcome, InertError):
            self.error = outcome
        else:
            self.positions = outcome
        self.settled.set()


class CommittedGroup(NamedTuple):
    """What one group's transaction did: each request's positions or the error that refused
    that request alone, and the rows it wrote to partition 0, in position order (and to each
    other partition, where the backend has others)."""

    outcomes: list[list[int] | InertError]
    rows: list[StoredRecord]
    elsewhere: dict[int, list[StoredRecord]]


class GroupCommitLog(Log, Generic[ConnectionT]):
    """A log whose appends are committed in groups by one writer task."""

    def __init__(
        self,
        *,
        group_commit: bool,
        max_batch_events: int,
        codec: Codec | None,
        clock: Clock | None,
    ) -> None:
        super().__init__(codec=codec, clock=clock)
        if max_batch_events < 1:
            raise ConfigurationError(f"max_batch_events must be at least 1, not {max_batch_events}")
        self.group_commit = group_commit
        self.max_batch_events = max_batch_events
        self._queue: list[AppendRequest] = []
        self._work = trio.Event()
        # One event per committed group wakes every waiting appender, cheaper than one per append.
        self._accepting = False
        self._writer_done = trio.Event()
        self._background_lock = trio.Lock()

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The log as error messages name it (its kind and where it is)."""

    @abc.abstractmethod
    def _commit_group(self, group: list[AppendRequest]) -> CommittedGroup:
        """Write a group in one transaction (in a worker thread)."""

    @abc.abstractmethod
    def _in_own_transaction(self, what: str, work: Callable[[ConnectionT], _T]) -> _T:
        """Run ``work`` in a transaction of its own (in a worker thread), beside the writer's,
        on the log's background connection (see ``_background``)."""

    @abc.abstractmethod
    def _redact_all_in(self, connection: ConnectionT, redactions: list[FrozenRedaction]) -> int:
        """Redact in ``connection``'s transaction; how many events were redacted."""

    @abc.abstractmethod
    def _write_snapshot_in(self, connection: ConnectionT, snapshot: StoredSnapshot) -> None:
        """Write a snapshot in ``connection``'s transaction."""

    @abc.abstractmethod
    def _delete_snapshot_in(self, connection: ConnectionT, name: str) -> None:
        """Delete the snapshot of a name, and its payloads, in ``connection``'s transaction."""

    async def _background(self, what: str, work: Callable[[ConnectionT], _T]) -> _T:
        """``work`` in a transaction of its own, one at a time: the backend keeps one
        connection for redactions and snapshots, which a second at once would wait for."""
        async with self._background_lock:
            return await trio.to_thread.run_sync(self._in_own_transaction, what, work)

    async def _redact(
        self,
        stream: str,
        up_to_version: int,
        event_types: frozenset[str] | None,
        keys: frozenset[CallKey] | None,
    ) -> int:
        return await self._redact_many([(stream, up_to_version, event_types, keys)])

    async def _redact_many(self, redactions: list[FrozenRedaction]) -> int:
        self._check_accepting("nothing was redacted")
        return await self._background(
            "redaction", lambda connection: self._redact_all_in(connection, redactions)
        )

    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None:
        self._check_accepting("the snapshot was not written")
        await self._background(
            "snapshot write", lambda connection: self._write_snapshot_in(connection, snapshot)
        )

    async def _delete_snapshot(self, name: str) -> None:
        self._check_accepting("the snapshot was not deleted")
        await self._background(
            "snapshot deletion", lambda connection: self._delete_snapshot_in(connection, name)
        )

    @asynccontextmanager
    async def _running(self, *tasks: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
        """Accept appends, with the writer and these tasks running, for the block's duration."""
        # An error of the caller's block is raised as it is after the writer has finished, not
        # wrapped in the exception group of the writer's nursery.
        body_error: BaseException | None = None
        async with trio.open_nursery() as nursery:
            self._accepting = True
            nursery.start_soon(self._write_loop)
            for task in tasks:
                nursery.start_soon(task)
            try:
                yield
            except BaseException as error:
                body_error = error
            finally:
                with trio.CancelScope(shield=True):
                    await self.aclose()
                nursery.cancel_scope.cancel()
        if body_error is not None:
            raise body_error

    async def aclose(self) -> None:
        """Stop accepting appends and finish the ones queued; the ``open`` block disconnects."""
        self._accepting = False
        self._work.set()
        await self._writer_done.wait()
        self._mark_closed()

    def _check_accepting(self, what: str) -> None:
        if not self._accepting:
            raise LogError(f"{self.name} is closed or closing; {what}")

    def _committed_elsewhere(self, rows: dict[int, list[StoredRecord]]) -> None:
        """This process committed these rows to partitions other than 0."""

    async def _append_records(
        self, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]:
        return await self._append_in(0, records, expected)

    async def _append_in(
        self, partition: int, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]:
        """Queue an append to a partition for the writer, and wait until it is committed."""
        self._check_accepting("the append was not written")
        request = AppendRequest(records, expected, partition)
        self._queue.append(request)
        self._work.set()
        await request.settled.wait()
        if request.error is not None:
            raise request.error
        assert request.positions is not None
        return request.positions

    def _take_group(self) -> list[AppendRequest]:
        taken = events = 0
        for request in self._queue:
            if taken and (
                not self.group_commit or events + len(request.records) > self.max_batch_events
            ):
                break
            taken += 1
            events += len(request.records)
        group = self._queue[:taken]
        del self._queue[:taken]
        return group

    async def _write_loop(self) -> None:
        group: list[AppendRequest] = []
        try:
            while True:
                if not self._queue:
                    if not self._accepting:
                        return
                    await self._work.wait()
                    self._work = trio.Event()
                    continue
                group = self._take_group()
                try:
                    outcomes, rows, elsewhere = await trio.to_thread.run_sync(
                        self._commit_group, group
                    )
                except InertError as error:
                    outcomes, rows, elsewhere = [error] * len(group), [], {}
                self._keep_committed(rows)
                self._committed_elsewhere(elsewhere)
                committed = False
                for request, outcome in zip(group, outcomes, strict=True):
                    request.settle(outcome)
                    committed = committed or not isinstance(outcome, InertError)
                if committed:
                    self._notify_appended()
        finally:
            for request in group:
                if not request.settled.is_set():
                    request.settle(
                        LogError(
                            "the write loop stopped while committing this append; it may or"
                            " may not have landed: append the same events again to find out"
                        )
                    )
            for request in self._queue:
                request.settle(LogError(f"{self.name} closed before the append was written"))
            self._queue.clear()
            self._writer_done.set()
