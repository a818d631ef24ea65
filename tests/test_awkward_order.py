"""The awkward-order fixtures through a runtime on the SQLite log, and again with a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
from awkward import (
    SCENARIOS,
    Scenario,
    assert_outcome,
    run_scenario,
    sqlite_runtimes,
)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
async def test_scenario(scenario: Scenario, tmp_path: Path) -> None:
    """Each awkward order ends as expected on SQLite, with no executor input before validation."""
    outcome = await run_scenario(scenario, sqlite_runtimes(tmp_path))
    assert_outcome(scenario, outcome)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
async def test_scenario_with_a_restart(scenario: Scenario, tmp_path: Path) -> None:
    """Each awkward order ends the same when the runtime restarts in the middle of it."""
    outcome = await run_scenario(scenario, sqlite_runtimes(tmp_path), restart=True)
    assert_outcome(scenario, outcome)
