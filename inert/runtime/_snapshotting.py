"""When a runtime takes, writes and loads its snapshots (what one holds, and whether a snapshot
may be loaded, is ``inert.runtime._snapshot``'s business).

A snapshot is taken at whole multiples of ``every`` positions, so that runtimes on one log take
theirs at the same positions however they started; it is captured synchronously (the state
changes at the next event) and written by a task of its own, a newer one replacing one not yet
written. After a replay of at least ``every`` events a snapshot is written at once, before
anything else runs, so that the next restart starts from it.

A snapshot that cannot be used is reported once (a warning of the ``inert.snapshot`` logger,
and ``refusal``) and replaced: by the snapshot the replay writes, or, where the replay is too
short to write one, by none. A runtime never stops because of a snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from ..events import LogDamaged
from ..log import Log, StoredSnapshot
from ._snapshot import (
    SNAPSHOT_KEY,
    Binding,
    RuntimeState,
    SnapshotUnusable,
    binding_of,
    capture,
    restore,
)
from ._state_shapes import StateNotWritable

LOGGER = logging.getLogger("inert.snapshot")


class Snapshots:
    """The snapshots of one runtime: ``state`` gives what to capture at a position."""

    def __init__(
        self,
        log: Log,
        *,
        every: int | None,
        stamp: str,
        name: str,
        state: Callable[[int], tuple[RuntimeState, Binding]],
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
        self.refusal: str | None = None
        """Why the snapshot found at the start was not used, if one was found and refused."""

    async def load(self) -> RuntimeState | None:
        """The state of the newest snapshot this runtime may start from, if there is one: none
        when snapshots are off or none was written; none, reported, when the one written cannot
        be used (of other code or configuration, damaged, unreadable, of another log or
        position). The log is the truth: replayed from the start, it makes the next one."""
        if not self.every:
            return None
        snapshot: StoredSnapshot | None = None
        try:
            snapshot = await self._log.read_snapshot(self._name)
            if snapshot is None:
                return None
            state = restore(snapshot, stamp=self._stamp, binding=await self._binding(snapshot))
        except (SnapshotUnusable, LogDamaged) as refusal:
            # A payload that does not open, say: the log itself is checked by the replay.
            self.refusal = str(refusal)
            LOGGER.warning(
                "snapshot %r%s not used: %s; replaying the log from the start",
                self._name,
                "" if snapshot is None else f" of position {snapshot.position}",
                refusal,
            )
            return None
        self._due = self._next_after(state.position)
        return state

    async def _binding(self, snapshot: StoredSnapshot) -> Binding:
        """What the log holds where the snapshot says it was taken."""
        position = binding_of(snapshot).position
        head = await self._log.head()
        if position > head:
            raise SnapshotUnusable(f"its position {position} is past the log's head ({head})")
        found = await self._log.read(position, limit=1)
        event_id = found[0].event_id if found and found[0].position == position else ""
        return Binding(
            log=self._log.identity,
            position=position,
            event_id=event_id,
            key=self._log.key(SNAPSHOT_KEY),
        )

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
        replayed = position - (restored_from or 0)
        if not self.every or (replayed < self.every and self.refusal is None):
            return
        # A snapshot refused is replaced at once, so that it is refused (and reported) once.
        snapshot = self._capture(position) if position > 0 else None
        if snapshot is not None:
            await self._log.write_snapshot(snapshot)
            written()
        elif self.refusal is not None:
            await self._log.delete_snapshot(self._name)

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

    def _capture(self, position: int) -> StoredSnapshot | None:
        self._due = self._next_after(position)
        state, binding = self._state(position)
        try:
            snapshot = capture(state, name=self._name, stamp=self._stamp, binding=binding)
        except StateNotWritable as error:
            # A snapshot is a cache: without it the next start replays more, nothing else.
            LOGGER.error("no snapshot of position %d taken: %s", position, error)  # noqa: TRY400
            return None
        finally:
            self.captured()
        return snapshot

    def _next_after(self, position: int) -> int:
        assert self.every
        return (position // self.every + 1) * self.every
