"""Shared by every test module: the order of the slow tests, and the run counts printed at the
end of a run (summed over the test workers when the run is spread over several)."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["mcp_fixtures"]

RUN_COUNTS: dict[str, int] = {}
"""How many runs of each kind this test run made (fault runs, crash points, kills, ...)."""

_SLOW_DEFAULT_SECONDS = 10.0
"""What a test marked ``slow`` without a duration is taken to need."""


def _expected_seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("slow")
    if marker is None:
        return 0.0
    if marker.args:
        # A duration given by position was read as none at all: the test was queued with the
        # default duration instead of its own.
        raise pytest.UsageError(f"{item.nodeid}: write @pytest.mark.slow(seconds=...)")
    return float(marker.kwargs.get("seconds", _SLOW_DEFAULT_SECONDS))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The slowest first: a worker that starts the longest test last keeps the run waiting for
    # it while the others are idle. The sort is stable, so the rest keep their order.
    items.sort(key=_expected_seconds, reverse=True)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # On a test worker, the counts travel to the controller with the worker's output.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["inert_run_counts"] = json.dumps(RUN_COUNTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    output = getattr(node, "workeroutput", {})
    for name, count in json.loads(output.get("inert_run_counts", "{}")).items():
        RUN_COUNTS[name] = RUN_COUNTS.get(name, 0) + count


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if RUN_COUNTS:
        terminalreporter.section("run counts")
        for name, count in sorted(RUN_COUNTS.items()):
            terminalreporter.write_line(f"{name}: {count:,}")
