"""The awkward-order fixtures through a runtime on the SQLite and PostgreSQL logs, and again with
a restart."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from awkward import (
    SCENARIOS,
    OpenRuntime,
    Scenario,
    assert_outcome,
    postgres_runtimes,
    run_scenario,
    sqlite_runtimes,
)
from postgres_support import fresh_schema


@pytest.fixture(params=["sqlite", "postgresql"])
def runtimes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenRuntime]:
    if request.param == "sqlite":
        yield sqlite_runtimes(tmp_path)
    else:
        with fresh_schema() as schema:
            yield postgres_runtimes(schema)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
async def test_scenario(scenario: Scenario, runtimes: OpenRuntime) -> None:
    """Each awkward order ends as expected, with no executor input before validation."""
    outcome = await run_scenario(scenario, runtimes)
    assert_outcome(scenario, outcome)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
async def test_scenario_with_a_restart(scenario: Scenario, runtimes: OpenRuntime) -> None:
    """Each awkward order ends the same when the runtime restarts in the middle of it."""
    outcome = await run_scenario(scenario, runtimes, restart=True)
    assert_outcome(scenario, outcome)
