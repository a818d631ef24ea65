"""The garbage collector settings a running runtime applies, and gives back when it stops."""

from __future__ import annotations

import gc

import pytest

from inert import CollectorSettings, open_runtime


async def test_a_running_runtime_freezes_and_raises_the_thresholds() -> None:
    """While a runtime runs the collector has its thresholds and the objects alive at start-up
    are frozen; once it stops, the previous thresholds are back and nothing stays frozen."""
    before = gc.get_threshold()
    settings = CollectorSettings(thresholds=(40_000, 30, 60))
    async with open_runtime(log="memory://", collector=settings):
        assert gc.get_threshold() == (40_000, 30, 60)
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_the_last_of_two_runtimes_to_stop_puts_the_collector_back() -> None:
    """Two runtimes in one process share the settings: the first to stop leaves them applied."""
    before = gc.get_threshold()
    async with open_runtime(log="memory://"):
        async with open_runtime(log="memory://"):
            pass
        assert gc.get_threshold() == CollectorSettings().thresholds
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


async def test_a_host_that_manages_the_collector_turns_it_off() -> None:
    """``collector=None`` leaves the thresholds and the frozen objects as the host set them."""
    before = gc.get_threshold()
    async with open_runtime(log="memory://", collector=None):
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() == 0


def test_thresholds_below_one_are_refused() -> None:
    """A threshold of 0 would turn a generation's collection off: refused, naming the value."""
    with pytest.raises(ValueError, match="thresholds"):
        CollectorSettings(thresholds=(0, 10, 10))


async def test_objects_the_host_froze_stay_frozen() -> None:
    """A host that froze objects itself before the runtime started finds them frozen after."""
    gc.freeze()
    try:
        async with open_runtime(log="memory://"):
            pass
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
