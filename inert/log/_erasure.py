"""Redacted bytes out of an SQLite log's files, not only out of its rows.

A redaction rewrites rows; SQLite keeps what it rewrote in two places the rows no longer show.
Free space in the database file keeps the old cells unless ``secure_delete`` is on (every
connection of the log sets it: SQLite then zeroes what a delete or an update frees). The
write-ahead log keeps the frames of every page written since its last reset, the original
fragments among them, until the log wraps after a checkpoint; so after redactions commit, the
eraser checkpoints the write-ahead log into the database file and truncates it to nothing.

A checkpoint that truncates cannot finish while another connection reads an older state of the
file (a console, ``inert ledger --follow``, another process): the eraser tries again, backing off,
for ``timeout`` seconds, then reports once (a warning of the ``inert.log`` logger and the log's
``storage_problems``) and keeps trying every second until it succeeds. Redactions that come while
it works are erased by its next checkpoint.
"""

from __future__ import annotations

import logging
import sqlite3
import time

import trio

LOGGER = logging.getLogger("inert.log")

DEFAULT_ERASE_TIMEOUT = 10.0
"""Seconds a truncating checkpoint is tried again while readers hold the write-ahead log,
before it is reported."""

_FIRST_WAIT = 0.01
_LONGEST_WAIT = 1.0


class WalEraser:
    """Checkpoints and truncates one SQLite file's write-ahead log after redactions."""

    def __init__(self, path: str, *, timeout: float = DEFAULT_ERASE_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        self._due = False
        self._running = False
        self._wake = trio.Event()
        self._done = trio.Event()
        self._connection: sqlite3.Connection | None = None
        self.problem: str | None = None
        """What keeps redacted bytes in the write-ahead log now, if anything does."""

    def redacted(self) -> None:
        """Redactions committed: their old bytes are to be erased."""
        self._due = True
        self._wake.set()

    async def erased(self) -> bool:
        """Until the redactions committed so far were erased, or the eraser reported that it
        could not erase them within its timeout; whether they were."""
        while self._due or self._running:
            if self.problem is not None:
                return False
            await self._done.wait()
        return self.problem is None

    async def run(self) -> None:
        """Erase after each redaction, until cancelled."""
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if not self._due:
                    continue
                self._due = False
                self._running = True
                try:
                    await self._erase()
                finally:
                    self._running = False
                    self._done.set()
                    self._done = trio.Event()
        finally:
            self.close()

    def checkpoint(self) -> bool:
        """Checkpoint and truncate the write-ahead log once; whether it could (blocking)."""
        connection = self._connection
        if connection is None:
            # A busy handler of its own, short: waiting is the eraser's business, not SQLite's.
            connection = self._connection = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=0.05
            )
        try:
            (busy, _, _) = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.OperationalError:
            return False
        return not busy

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def _erase(self) -> None:
        started = time.monotonic()
        wait = _FIRST_WAIT
        reported = False
        while not await trio.to_thread.run_sync(self.checkpoint):
            waited = time.monotonic() - started
            if waited >= self.timeout and not reported:
                reported = True
                self.problem = (
                    f"redacted bytes stay in {self.path}-wal: another connection has read it"
                    f" for {waited:.1f} s; they are erased at the first checkpoint it allows"
                )
                LOGGER.warning("%s", self.problem)
                self._done.set()
                self._done = trio.Event()
            await trio.sleep(wait)
            wait = min(wait * 2, _LONGEST_WAIT)
        if reported:
            LOGGER.warning("redacted bytes erased from %s-wal", self.path)
        self.problem = None
