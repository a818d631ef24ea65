"""The restart benchmark at a small size: it builds its log, restarts both ways and checks them."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.restart import main, measure


def test_the_restart_benchmark_measures_both_restarts(tmp_path: Path) -> None:
    """A replay and a restart from the snapshot reach the same digest with every call ready."""
    result = measure(events=3_000, live=40, runs=1, every=1_000, directory=tmp_path)
    assert 2_000 < result["events"] <= 3_000
    assert len(result["replay_seconds"]) == len(result["from_snapshot_seconds"]) == 1
    assert result["ratio"] > 0


def test_the_restart_benchmark_refuses_a_snapshot_interval_past_the_log() -> None:
    """Its first restart must write a snapshot: an interval longer than the log is refused."""
    with pytest.raises(SystemExit) as stop:
        main(["--events", "100", "--snapshot-every", "1000"])
    assert stop.value.code == 2
