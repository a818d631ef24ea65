"""Shared by every test module: the run counts printed at the end of a run."""

from __future__ import annotations

import pytest

RUN_COUNTS: dict[str, int] = {}
"""How many runs of each kind this test run made (fault runs, crash points, kills, ...)."""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if RUN_COUNTS:
        terminalreporter.section("run counts")
        for name, count in sorted(RUN_COUNTS.items()):
            terminalreporter.write_line(f"{name}: {count:,}")
