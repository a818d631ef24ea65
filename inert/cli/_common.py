"""The log a command works on: folding it, the processes running on it, a runtime on it."""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

import trio

from ..events import (
    InertError,
    ProcessHeartbeat,
    RecordedEvent,
    RefusedError,
)
from ..log import Log, open_log
from ..runtime import Runtime, open_runtime, trio_clock
from ..runtime._peers import DEFAULT_LEASE_TIME
from ._tracing import exported_spans

READ_PAGE = 1024
"""Events read from the log at a time."""

EXECUTOR = "inert-execute"
"""The executor name claims of this command are recorded under."""

WAIT_SECONDS = 120.0
"""The longest a command waits for the log to settle (its runtime bounds its own requests)."""

RUNNING_WINDOW = timedelta(minutes=1)
"""How far back, in the log's time, a command looks for heartbeats of running processes."""

KEY_FIELDS = ("tenant", "conversation", "turn", "response", "item", "call")


class NoProgress(InertError):
    """A command waited ``WAIT_SECONDS`` for a step that did not end."""


# --- the log a command works on ----------------------------------------------------------------


def _on_a_terminal() -> bool:
    return sys.stderr.isatty()


def in_colour() -> bool:
    """Whether what is printed may have colours: standard output is a terminal, and
    ``NO_COLOR`` (no-color.org) is not set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


class Progress:
    """How far a long command is, as one line on standard error rewritten in place, at most a
    few times a second; shown only where standard error is a terminal, and gone when done."""

    INTERVAL = 0.25
    """Seconds between two updates of the line."""

    def __init__(self, what: str, total: int | None = None) -> None:
        self.what = what
        self.total = total
        self.shown = _on_a_terminal()
        self._next = 0.0
        self._width = 0

    def advance(self, done: int) -> None:
        now = time.monotonic()
        if not self.shown or now < self._next:
            return
        self._next = now + self.INTERVAL
        if self.total:
            line = f"{self.what}: {done:,} of {self.total:,} ({done / self.total:.0%})"
        else:
            line = f"{self.what}: {done:,}"
        self._width = max(self._width, len(line))
        print(f"\r{line.ljust(self._width)}", end="", file=sys.stderr, flush=True)

    def finish(self) -> None:
        if self.shown and self._width:
            print(f"\r{' ' * self._width}\r", end="", file=sys.stderr, flush=True)


async def fold_log(
    url: str, *folds: Callable[[RecordedEvent], object], what: str = "reading the log"
) -> int:
    """Apply every event of the log, in position order, read a page at a time; how many. A log
    long enough to take a while shows how far the reading is (``Progress``)."""
    count = position = 0
    # A read must not leave a new, empty log behind where a path was mistyped.
    async with open_log(url, create=False) as log:
        progress = Progress(what, await log.head())
        try:
            while page := await log.read(position + 1, limit=READ_PAGE):
                for recorded in page:
                    for fold in folds:
                        fold(recorded)
                count += len(page)
                position = page[-1].position
                progress.advance(count)
        finally:
            progress.finish()
    return count


async def _running_processes(log: Log) -> dict[str, float]:
    """The named runtime processes running on the log, each with the seconds since its last
    heartbeat, from the heartbeats of the last ``RUNNING_WINDOW`` (read from the end).

    A process beats every quarter of its lease time and its peers take it for dead after a
    lease time without one: it is running while its last beat is younger than four times the
    shortest time between two of its beats (a late beat only lengthens one), or than the
    default lease time when the window holds one.
    """
    now = log.now()
    since = now - RUNNING_WINDOW
    beats: dict[str, list[datetime]] = {}
    end = await log.head()
    while end >= 1:
        start = max(1, end - READ_PAGE + 1)
        page = await log.read(start, limit=end - start + 1)
        for recorded in page:
            if isinstance(recorded.event, ProcessHeartbeat) and recorded.recorded_at >= since:
                beats.setdefault(recorded.event.process, []).append(recorded.recorded_at)
        if not page or page[0].recorded_at < since:
            break
        end = start - 1
    running: dict[str, float] = {}
    for process, times in beats.items():
        times.sort()
        lease = (
            4 * min(later - earlier for earlier, later in itertools.pairwise(times))
            if len(times) > 1
            else timedelta(seconds=DEFAULT_LEASE_TIME)
        )
        if now - times[-1] < lease:
            running[process] = (now - times[-1]).total_seconds()
    return running


@asynccontextmanager
async def runtime_on(url: str, *, create: bool = False, **options: Any) -> AsyncIterator[Runtime]:
    """A runtime of this command on the log (which must exist, unless ``create``).

    It decides for every turn, as a runtime without a process name does: beside a running
    process it would write decisions that process makes too (and stop it), so the command is
    refused while the log's heartbeats say one runs.
    """
    async with open_log(url, clock=trio_clock(), create=create) as log:
        running = await _running_processes(log)
        if running:
            name, age = min(running.items(), key=lambda item: item[1])
            others = f" (and {len(running) - 1} more)" if len(running) > 1 else ""
            raise RefusedError(
                f"runtime process {name!r}{others} is running on this log (heartbeat {age:.1f} s"
                " ago): this command opens a runtime that must be alone on the log; stop it"
                " first, or act through it"
            )
        # Spans as the OTEL_* variables say, in the caller's trace where it gave one.
        with exported_spans() as provider:
            async with open_runtime(log=log, tracer_provider=provider, **options) as runtime:
                yield runtime


async def settle_within(runtime: Runtime) -> None:
    """``runtime.settle()``, for at most ``WAIT_SECONDS`` (the runtime bounds its requests and
    its catching up, not the wait for everything to be quiet)."""
    with trio.move_on_after(WAIT_SECONDS):
        await runtime.settle()
        return
    raise NoProgress(
        f"gave up waiting for the log to settle after {WAIT_SECONDS:g} s: is another process"
        " (a runtime without a process name) writing to it?"
    )
