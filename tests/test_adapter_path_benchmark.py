"""The adapter-path benchmark at a small size: both cases run, check what they read and report."""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.adapter_path import CASES, measure, report


def test_the_adapter_path_benchmark_measures_every_provider_both_ways(tmp_path: Path) -> None:
    """Each provider's adapter alone and end to end on SQLite is timed beside its floor, each
    call checked validated with its fragments counted, and every ratio is reported."""
    arguments = argparse.Namespace(
        calls=3,
        deltas=10,
        runs=1,
        end_to_end_runs=1,
        provider=["openai-responses", "openai-chat", "anthropic"],
        case=list(CASES),
        json=False,
        dir=None,
    )
    document = measure(arguments, tmp_path)
    results = document["results"]
    assert sorted(results) == ["anthropic", "openai-chat", "openai-responses"]
    for cases in results.values():
        assert cases["alone"]["deltas"] == cases["end_to_end"]["deltas"] >= 3 * 5
        assert cases["alone"]["ratio"] > 0
        assert cases["end_to_end"]["ratio"] > 0
    assert "openai-chat | adapter alone" in report(document)
