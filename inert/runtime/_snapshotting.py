"""When a runtime takes, writes and loads its snapshots (what one holds, and whether a snapshot
may be loaded, is :mod:`inert.runtime._snapshot`'s business).

A snapshot is taken at whole multiples of ``every`` positions, so that runtimes on one log take
theirs at the same positions however they started; it is captured synchronously (the state
changes at the next event) and written by a task of its own, a newer one replacing one not yet
written. After a replay of at least ``every`` events a snapshot is written at once, before
anything else runs, so that the next restart starts from it.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from ..log import Log, StoredSnapshot
from ._snapshot import RuntimeState, SnapshotUnusable, capture, restore


class Snapshots:
    """The snapshots of one runtime: ``state`` gives what to capture at a position."""

    def __init__(
        self,
        log: Log,
        *,
        every: int | None,
        stamp: str,
        name: str,
        state: Callable[[int], RuntimeState],
    ) -> None:
        self.every = every
        self._log = log
        self._stamp = stamp
        self._name = name
        self._state = state
        self._due = every or 0
        self._taken: StoredSnapshot | None = None
        self._wake = trio.Event()
        self._writing = False
        self._written = trio.Event()
        self.captured: Callable[[], None] = lambda: None
        """Called after each capture, the runtime still held: the collector's business."""

    async def load(self) -> RuntimeState | None:
        """The state of the newest snapshot this runtime may start from, if there is one: none
        when snapshots are off, none was written, or the one written is of other code or
        configuration, or damaged (the log is the truth: replayed from the start, it makes the
        next one)."""
        if not self.every:
            return None
        snapshot = await self._log.read_snapshot(self._name)
        if snapshot is None:
            return None
        try:
            state = restore(snapshot, stamp=self._stamp)
        except SnapshotUnusable:
            return None
        self._due = self._next_after(state.position)
        return state

    def heard(self, position: int) -> None:
        """The fold has reached ``position``: take a snapshot if one is due."""
        if self.every and position >= self._due:
            self._taken = self._capture(position)
            self._wake.set()

    async def after_replay(
        self, position: int, restored_from: int | None, written: Callable[[], None]
    ) -> None:
        """Write a snapshot at once where the start replayed at least ``every`` events; then
        ``written``, the snapshot freed."""
        if self.every and position - (restored_from or 0) >= self.every:
            await self._log.write_snapshot(self._capture(position))
            written()

    async def write_taken(self, written: Callable[[], None]) -> None:
        """Write each snapshot taken (one taken while another is written replaces it), each
        followed by ``written``, the snapshot freed."""
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            snapshot, self._taken = self._taken, None
            if snapshot is None:
                continue
            self._writing = True
            try:
                await self._log.write_snapshot(snapshot)
                del snapshot
                written()
            finally:
                self._writing = False
                self._written.set()
                self._written = trio.Event()

    async def written(self) -> None:
        """Until no snapshot taken waits to be written or is being written."""
        while self._taken is not None or self._writing:
            await self._written.wait()

    def _capture(self, position: int) -> StoredSnapshot:
        self._due = self._next_after(position)
        snapshot = capture(self._state(position), name=self._name, stamp=self._stamp)
        self.captured()
        return snapshot

    def _next_after(self, position: int) -> int:
        assert self.every
        return (position // self.every + 1) * self.every
