"""The clock faults a test puts a log or a child process under: ``SkewedClock``, ``ClockSkew``
and ``FaketimeControl``."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing
from clock_support import require_faketime

from inert.testing import ClockSkew, FaketimeControl, SkewedClock

READ_CLOCK = "import time; print(time.time())"


async def test_a_skewed_clock_is_off_runs_at_its_rate_and_jumps(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ahead by its offset from the start, at its rate of Trio's clock, and moved at once by
    a jump; a new rate counts from when it is set."""
    wall = datetime.now(UTC)
    clock = SkewedClock(offset=600, rate=2.0)
    assert timedelta(seconds=599) < clock() - wall < timedelta(seconds=601)
    before = clock()
    await trio.sleep(10)
    assert clock() - before == timedelta(seconds=20)
    clock.jump(-1200)
    assert clock() - before == timedelta(seconds=20 - 1200)
    clock.set_rate(0.5)
    await trio.sleep(10)
    assert clock() - before == timedelta(seconds=25 - 1200)


def test_a_clock_cannot_stand_still_or_run_back() -> None:
    """A rate that is not positive is refused, for a clock of a test and of a child alike."""
    with pytest.raises(ValueError, match="positive"):
        SkewedClock(rate=0, base=lambda: datetime.now(UTC))
    with pytest.raises(ValueError, match="positive"):
        ClockSkew(rate=-1)


def test_a_clock_skew_is_libfaketimes_setting() -> None:
    """The setting in libfaketime's format, the command it wraps and the environment it adds;
    a control file takes a new setting."""
    skew = ClockSkew(offset=-600, rate=0.5)
    assert skew.spec == "-600 x0.5"
    assert skew.command(["python", "-V"]) == ["faketime", "-m", "-f", "-600 x0.5", "python", "-V"]


def test_a_child_runs_on_the_skewed_clock(tmp_path: Path) -> None:
    """A child started through ``command`` or under ``environment``, or whose control file
    says so, reads a clock ten minutes off."""
    require_faketime()
    now = datetime.now(UTC).timestamp()
    ahead = ClockSkew(offset=600)
    wrapped = subprocess.run(
        ahead.command([sys.executable, "-c", READ_CLOCK]),
        capture_output=True,
        text=True,
        check=True,
    )
    assert 590 < float(wrapped.stdout) - now < 630
    behind = subprocess.run(
        [sys.executable, "-c", READ_CLOCK],
        env={**os.environ, **ClockSkew(offset=-600).environment()},
        capture_output=True,
        text=True,
        check=True,
    )
    assert -630 < float(behind.stdout) - now < -570
    control = FaketimeControl(tmp_path / "faketime")
    control.set(ClockSkew(offset=-600))
    assert control.path.read_text() == "-600 x1\n"
    controlled = subprocess.run(
        [sys.executable, "-c", READ_CLOCK],
        env={**os.environ, **control.environment()},
        capture_output=True,
        text=True,
        check=True,
    )
    assert -630 < float(controlled.stdout) - now < -570
