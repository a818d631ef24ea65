"""Clock faults: a process whose clock is ahead or behind, runs fast or slow, or jumps.

Two ways in, for the two kinds of test:

- ``SkewedClock`` is a clock to open a log (or a runtime's log) with, inside a test's own
  process: it reads another clock (Trio's by default, so that a ``MockClock`` drives it) and
  answers off by an offset and at a rate, both changed at any moment (``jump``, ``set_rate``).
- ``ClockSkew`` puts a real child process off true with ``libfaketime`` (Debian's ``faketime``
  package): ``command`` wraps the child's command line, ``environment`` gives the variables to
  start it under instead. ``FaketimeControl`` moves the clock of a child already running, through
  the file libfaketime reads its setting from. ``faketime_unavailable`` says why it cannot be
  used here, if it cannot.

libfaketime moves a process's monotonic clock with its wall clock (a Python program sleeps
wrong otherwise), which no real machine does: a jump of a real process's clock while it runs
also moves the timers it sleeps on. A runtime reads the wall clock once, as it opens, and
advances it by its monotonic clock from then on (``trio_clock``), so the jump a real machine's
clock makes while the runtime runs never reaches it; a process started after a jump (its clock
off by it from its start: ``ClockSkew(offset=...)``) is the case that does.
"""

from __future__ import annotations

import glob
import shutil
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import trio

LIBFAKETIME_PATTERNS = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)
"""Where Debian's and a source build's ``faketime`` put the library (the multi-threaded one: a
runtime reads the clock from worker threads too)."""


class SkewedClock:
    """A clock off true by ``offset`` seconds (negative: behind), running at ``rate`` times the
    speed of the clock it reads (``base``: Trio's, as a runtime's log reads it, by default)."""

    def __init__(
        self,
        *,
        offset: float = 0.0,
        rate: float = 1.0,
        base: Callable[[], datetime] | None = None,
    ) -> None:
        if not rate > 0:
            raise ValueError(f"a clock's rate must be positive, not {rate}")
        self._base = base or _trio_base()
        self._anchor = self._base()
        self._shown = self._anchor + timedelta(seconds=offset)
        self._rate = rate

    def __call__(self) -> datetime:
        return self._shown + (self._base() - self._anchor) * self._rate

    def jump(self, seconds: float) -> None:
        """Set the clock forward (or back, for a negative number of seconds) at once."""
        self._reanchor()
        self._shown += timedelta(seconds=seconds)

    def set_rate(self, rate: float) -> None:
        """Run at ``rate`` times the speed of the base clock from now on."""
        if not rate > 0:
            raise ValueError(f"a clock's rate must be positive, not {rate}")
        self._reanchor()
        self._rate = rate

    def _reanchor(self) -> None:
        now = self._base()
        self._shown = self._shown + (now - self._anchor) * self._rate
        self._anchor = now


def _trio_base() -> Callable[[], datetime]:
    # The clock object, read from any thread: a log reads the time in worker threads too.
    clock = trio.lowlevel.current_clock()
    wall = datetime.now(UTC)
    origin = clock.current_time()
    return lambda: wall + timedelta(seconds=clock.current_time() - origin)


@attrs.frozen(kw_only=True)
class ClockSkew:
    """The clock of a real process, put off true by libfaketime: ``offset`` seconds ahead
    (negative: behind) from its start, running at ``rate`` times real speed."""

    offset: float = 0.0
    rate: float = 1.0

    def __attrs_post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"a clock's rate must be positive, not {self.rate}")

    @property
    def spec(self) -> str:
        """The setting in libfaketime's advanced format: ``+600 x2.0``."""
        return f"{self.offset:+g} x{self.rate:g}"

    def command(self, command: Sequence[str]) -> list[str]:
        """``command`` run under this clock."""
        return ["faketime", "-m", "-f", self.spec, *command]

    def environment(self) -> dict[str, str]:
        """The variables to add to a child's environment to run it under this clock."""
        return {"LD_PRELOAD": libfaketime(), "FAKETIME": self.spec}


@attrs.define
class FaketimeControl:
    """The clock of children started with ``environment()``, set through ``path`` while they
    run: ``set`` takes effect in each within a second (libfaketime reads the file again)."""

    path: Path

    def environment(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": libfaketime(),
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_CACHE_DURATION": "1",
        }

    def set(self, skew: ClockSkew) -> None:
        self.path.write_text(skew.spec + "\n")


def libfaketime() -> str:
    """The path of libfaketime's multi-threaded library (``LookupError`` if not installed)."""
    for pattern in LIBFAKETIME_PATTERNS:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise LookupError("libfaketime is not installed (Debian: apt-get install faketime)")


def faketime_unavailable() -> str | None:
    """Why a child process cannot be run under a skewed clock here, or ``None`` if it can."""
    if shutil.which("faketime") is None:
        return "the faketime command is not installed (Debian: apt-get install faketime)"
    try:
        libfaketime()
    except LookupError as missing:
        return str(missing)
    return None
