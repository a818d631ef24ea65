"""Redacted bytes out of a log's files, not only out of its rows.

A redaction rewrites rows; the database keeps what it rewrote in places the rows no longer show,
which a backend clears with one step after redactions (its ``attempt``):

- SQLite keeps the frames of every page written since the write-ahead log's last reset, the
  original fragments among them, until the log wraps after a checkpoint (free space in the
  database file is zeroed as it is freed: every connection sets ``secure_delete``). The step
  checkpoints the write-ahead log into the database file and truncates it to nothing.
- PostgreSQL keeps old row versions until vacuumed, and their bytes until overwritten; the
  payloads retention redacts are sealed under keys that their redaction destroys (see
  ``_sealing``), so what is left to clear is the destroyed keys' bytes in the table of keys. The
  step rewrites that table (``VACUUM FULL``), leaving no page that held one.

A step that cannot finish now (a reader of an older state of the SQLite file; a lock on the
table of keys held by an append) is tried again, backing off, for ``timeout`` seconds, then
reported once (a warning of the ``inert.log`` logger, and the log's ``storage_problems``) and
tried every second until it succeeds. Redactions that come while it works are cleared by its
next step. The step holds what appends write (the table of keys, the write-ahead log) while it
works, so after a step it rests nine times as long as its tries took before the next: under a
steady stream of redactions it holds them a tenth of the time at most, and the redactions of
the rest are cleared together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import trio

LOGGER = logging.getLogger("inert.log")

DEFAULT_ERASE_TIMEOUT = 10.0
"""Seconds the step after a redaction is tried again while something holds it off, before it is
reported."""

_FIRST_WAIT = 0.01
_LONGEST_WAIT = 1.0
_REST_PER_STEP = 9.0


class Eraser:
    """Runs a backend's erasing step after redactions, coalesced, retried, reported."""

    def __init__(
        self,
        attempt: Callable[[], Awaitable[bool]],
        *,
        holds: str,
        timeout: float = DEFAULT_ERASE_TIMEOUT,
        close: Callable[[], None] = lambda: None,
    ) -> None:
        """``attempt`` erases once and says whether it could; ``holds`` names where the bytes
        stay until it can, for the report."""
        self.attempt = attempt
        self.holds = holds
        self.timeout = timeout
        self.close = close
        self._due = False
        self._running = False
        self._wake = trio.Event()
        self._done = trio.Event()
        self.problem: str | None = None
        """What keeps redacted bytes in the storage now, if anything does."""

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
        rested = trio.current_time()
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                if not self._due:
                    continue
                # Redactions made while it rests are cleared by the same step.
                await trio.sleep_until(rested)
                self._due = False
                self._running = True
                worked = 0.0
                try:
                    worked = await self._erase()
                finally:
                    self._running = False
                    self._signal()
                rested = trio.current_time() + _REST_PER_STEP * worked
        finally:
            self.close()

    def _signal(self) -> None:
        self._done.set()
        self._done = trio.Event()

    async def _erase(self) -> float:
        """Erase, trying again while held off; the seconds its tries took (the waits between
        them held nothing, and do not count)."""
        started = time.monotonic()
        wait = _FIRST_WAIT
        reported = False
        worked = 0.0
        while True:
            trying = trio.current_time()
            erased = await self.attempt()
            worked += trio.current_time() - trying
            if erased:
                break
            waited = time.monotonic() - started
            if waited >= self.timeout and not reported:
                reported = True
                self.problem = (
                    f"redacted bytes stay in {self.holds}: held off for {waited:.1f} s; they"
                    " are erased at the first try that can finish"
                )
                LOGGER.warning("%s", self.problem)
                self._signal()
            await trio.sleep(wait)
            wait = min(wait * 2, _LONGEST_WAIT)
        if reported:
            LOGGER.warning("redacted bytes erased from %s", self.holds)
        self.problem = None
        return worked
