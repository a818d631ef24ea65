"""The log a command works on: folding it, the processes running on it, a runtime on it."""

from __future__ import annotations

import itertools
import os
import secrets
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import trio

from ..events import (
    InertError,
    ProcessHeartbeat,
    ProcessLeft,
    RecordedEvent,
    RefusedError,
    TurnRef,
)
from ..log import Log, open_log
from ..log._partitions import partition_of
from ..runtime import (
    PartitionedRuntime,
    Runtime,
    open_partitioned_runtime,
    open_runtime,
    trio_clock,
)
from ..runtime._collector import thresholds_of
from ..runtime._peers import DEFAULT_LEASE_TIME
from ._tracing import exported_spans

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress as RichProgress

READ_PAGE = 1024
"""Events read from the log at a time."""

LOG_VARIABLE = "INERT_LOG"
"""Names the log of every command that takes ``--log`` and is given none."""

EXECUTOR = "inert-execute"
"""The executor name claims of this command are recorded under."""

WAIT_SECONDS = 120.0
"""The longest a command waits for the log to settle (its runtime bounds its own requests)."""

RUNNING_WINDOW = timedelta(minutes=1)
"""How far back, in the log's time, a command looks for heartbeats of running processes."""

KEY_FIELDS = ("tenant", "conversation", "turn", "response", "item", "call")

COMMAND_PROCESS = "inert-command"
"""How the process a command opens on a partitioned log is named (with a random suffix)."""

ALONE = (
    "this command opens a runtime that must be alone on the log; stop it first, or act through"
    " it (its agent server, or the console); inert control gives controls beside it"
)


class NoProgress(InertError):
    """A command waited ``WAIT_SECONDS`` for a step that did not end."""


# --- the log a command works on ----------------------------------------------------------------


def in_colour() -> bool:
    """Whether what is printed may have colours: standard output is a terminal, and
    ``NO_COLOR`` (no-color.org) is not set."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _stderr_console() -> Console | None:
    """Standard error as Rich draws on it, where it is a terminal (Rich is imported only then:
    a command whose output goes to a file or a pipe does not pay for it)."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console  # noqa: PLC0415

    return Console(file=sys.stderr)


class Progress:
    """How far a long command is, drawn by Rich on standard error: a bar with the count, the
    share done and the time spent and left where the total is known, a spinner and the count
    where it is not; shown only where standard error is a terminal, and gone when done.

    ``console``, where given, is drawn on instead (where it is a terminal).
    """

    REFRESHES = 4
    """Times a second the bar is drawn again."""

    def __init__(
        self, what: str, total: int | None = None, *, console: Console | None = None
    ) -> None:
        if console is None:
            console = _stderr_console()
        self._bar: RichProgress | None = None
        if console is None or not console.is_terminal:
            return
        import rich.progress  # noqa: PLC0415

        columns: tuple[rich.progress.ProgressColumn, ...]
        described = rich.progress.TextColumn("{task.description}", markup=False)
        if total:
            columns = (
                described,
                rich.progress.BarColumn(),
                rich.progress.MofNCompleteColumn(separator=" of "),
                rich.progress.TaskProgressColumn(),
                rich.progress.TimeElapsedColumn(),
                rich.progress.TimeRemainingColumn(),
            )
        else:
            columns = (
                rich.progress.SpinnerColumn(),
                described,
                rich.progress.TextColumn("{task.completed:,.0f}"),
                rich.progress.TimeElapsedColumn(),
            )
        # Left to itself, Rich would stand in for sys.stdout while the bar shows and write what
        # the command prints there to standard error, with the bar.
        self._bar = rich.progress.Progress(
            *columns,
            console=console,
            refresh_per_second=self.REFRESHES,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._bar.add_task(what, total=total or None)
        self._bar.start()

    @property
    def shown(self) -> bool:
        """Whether the progress is drawn (until ``finish``)."""
        return self._bar is not None

    def advance(self, done: int) -> None:
        """``done`` of the total are done (a count, not a step)."""
        if self._bar is not None:
            self._bar.update(self._task, completed=done)

    def finish(self) -> None:
        """The command is done with it: the bar is taken off the terminal."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


async def fold_log(
    url: str,
    *folds: Callable[[RecordedEvent], object],
    what: str = "reading the log",
    opened: Callable[[Log], object] | None = None,
) -> int:
    """Apply every event of the log, in position order, read a page at a time; how many. A log
    long enough to take a while shows how far the reading is (``Progress``). ``opened`` is
    given the log before its first event is read (a fold that needs its keys)."""
    # A read must not leave a new, empty log behind where a path was mistyped.
    async with open_log(url, create=False) as log:
        if opened is not None:
            opened(log)
        return await fold_opened(log, *folds, what=what)


async def fold_opened(
    log: Log, *folds: Callable[[RecordedEvent], object], what: str = "reading the log"
) -> int:
    """``fold_log`` of a log opened already (or of one partition of it)."""
    count = position = 0
    progress = Progress(what, await log.head())
    # What a fold of a long log keeps grows with it: a runtime's thresholds spare the
    # collector walking all of it every few hundred events.
    with thresholds_of():
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
    default lease time when the window holds one; not once it said it left.
    """
    now = log.now()
    since = now - RUNNING_WINDOW
    beats: dict[str, list[datetime]] = {}
    # The position of each process's last beat and of its last word that it left.
    beat_at: dict[str, int] = {}
    left: dict[str, int] = {}
    end = await log.head()
    while end >= 1:
        start = max(1, end - READ_PAGE + 1)
        page = await log.read(start, limit=end - start + 1)
        for recorded in page:
            event = recorded.event
            if isinstance(event, ProcessHeartbeat) and recorded.recorded_at >= since:
                beats.setdefault(event.process, []).append(recorded.recorded_at)
                beat_at[event.process] = max(beat_at.get(event.process, 0), recorded.position)
            elif isinstance(event, ProcessLeft):
                left[event.process] = max(left.get(event.process, 0), recorded.position)
        if not page or page[0].recorded_at < since:
            break
        end = start - 1
    running: dict[str, float] = {}
    for process, times in beats.items():
        if left.get(process, 0) > beat_at[process]:
            continue
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
async def runtimes_on(
    url: str, *, create: bool = False, **options: Any
) -> AsyncIterator[dict[int, Runtime]]:
    """The runtimes of this command on the log (which must exist, unless ``create``), by the
    partition each folds: one on a log of one partition (numbered 0); on a partitioned log, one
    for each partition of calls, of a process of the command's own that takes them all.

    Either decides for every turn, as a runtime without a process name does: beside a running
    runtime it would write decisions that runtime makes too (and stop it), so the command is
    refused while the log says one runs.
    """
    async with open_log(url, clock=trio_clock(), create=create) as log:
        await refuse_beside_a_runtime(log)
        # Spans as the OTEL_* variables say, in the caller's trace where it gave one.
        with exported_spans() as provider:
            if log.partitions == 1:
                async with open_runtime(log=log, tracer_provider=provider, **options) as runtime:
                    yield {0: runtime}
                return
            async with open_partitioned_runtime(
                log=log,
                process=f"{COMMAND_PROCESS}-{secrets.token_hex(4)}",
                tracer_provider=provider,
                **options,
            ) as partitioned:
                await _owning_every_partition(partitioned, log.partitions)
                cores = {
                    number: partitioned.core(number) for number in partitioned.partitions_owned()
                }
                await _holding_every_turn(partitioned, cores)
                yield cores


@asynccontextmanager
async def runtime_on(
    url: str, *, turn: TurnRef | None = None, create: bool = False, **options: Any
) -> AsyncIterator[Runtime]:
    """``runtimes_on``'s runtime of the partition of ``turn``'s conversation (a log of one
    partition has one; a command of no one turn is refused on a partitioned log)."""
    async with runtimes_on(url, create=create, **options) as runtimes:
        if list(runtimes) == [0]:
            yield runtimes[0]
            return
        if turn is None:
            raise RefusedError(
                f"this command works on a log of one partition, and the log has {len(runtimes)}"
                " partitions of calls: give its events to the agent servers' runtime processes"
                " (open_partitioned_runtime)"
            )
        yield runtimes[partition_of(turn.tenant, turn.conversation, len(runtimes))]


async def refuse_beside_a_runtime(log: Log, *, on: str = "this log", then: str = ALONE) -> None:
    """Refuse a log a runtime runs on, naming it where it has a name, ``on`` naming the log and
    ``then`` saying what to do. The heartbeats of the last minute name the processes that run;
    the log's presence also finds a runtime without a name."""
    running = await _running_processes(log)
    if running:
        name, age = min(running.items(), key=lambda item: item[1])
        others = f" (and {len(running) - 1} more)" if len(running) > 1 else ""
        raise RefusedError(
            f"runtime process {name!r}{others} is running on {on} (heartbeat {age:.1f} s"
            f" ago): {then}"
        )
    if await log.runtime_running():
        raise RefusedError(f"a runtime is running on {on}: {then}")


async def _holding_every_turn(runtime: PartitionedRuntime, cores: dict[int, Runtime]) -> None:
    """Wait, for at most ``WAIT_SECONDS``, until the command's process leases every turn with
    calls: a process that left, or fell silent, has its turns leased by the one that folds
    their partition, which then alone decides for them."""

    def held_elsewhere() -> list[str]:
        return sorted(
            f"{turn.stream} ({owner})"
            for core in cores.values()
            for turn in {row.key.turn_ref for row in core.projections.ledger.rows()}
            if (owner := core.turn_owner(turn)) not in (None, runtime.process)
        )

    with trio.move_on_after(WAIT_SECONDS):
        while held_elsewhere():
            with trio.move_on_after(0.1):
                await runtime.changed()
        return
    raise NoProgress(
        f"gave up waiting for this command's process to lease the turns of the processes gone"
        f" after {WAIT_SECONDS:g} s: {', '.join(held_elsewhere()[:3])} still leased elsewhere"
    )


async def _owning_every_partition(runtime: PartitionedRuntime, partitions: int) -> None:
    """Wait, for at most ``WAIT_SECONDS``, until the command's process folds every partition of
    calls (alone on the log, it is assigned them all at its first beat)."""
    every = list(range(1, partitions + 1))
    with trio.move_on_after(WAIT_SECONDS):
        while runtime.partitions_owned() != every:
            with trio.move_on_after(0.1):
                await runtime.changed()
        return
    raise NoProgress(
        f"gave up waiting for this command's process to take the log's {partitions} partitions"
        f" after {WAIT_SECONDS:g} s (it folds {runtime.partitions_owned()}): is another process"
        " beating on it?"
    )


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
