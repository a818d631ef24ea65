"""The awkward-order fixtures through a runtime on the SQLite log, and again with a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from awkward import (
    SCENARIOS,
    TOOLS,
    GatedCheck,
    OpenRuntime,
    Scenario,
    assert_outcome,
    run_scenario,
)

from inert import Runtime, open_runtime


def _sqlite(tmp_path: Path) -> OpenRuntime:
    url = f"sqlite:///{tmp_path / 'awkward.db'}"

    def opener(check: GatedCheck) -> AbstractAsyncContextManager[Runtime]:
        @asynccontextmanager
        async def opened() -> AsyncIterator[Runtime]:
            async with open_runtime(
                log=url, tools=TOOLS, check=check, validation_timeout=30.0
            ) as runtime:
                yield runtime

        return opened()

    return opener


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
async def test_scenario(scenario: Scenario, tmp_path: Path) -> None:
    """Each awkward order ends as expected on SQLite, with no executor input before validation."""
    outcome = await run_scenario(scenario, _sqlite(tmp_path))
    assert_outcome(scenario, outcome)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
async def test_scenario_with_a_restart(scenario: Scenario, tmp_path: Path) -> None:
    """Each awkward order ends the same when the runtime restarts in the middle of it."""
    outcome = await run_scenario(scenario, _sqlite(tmp_path), restart=True)
    assert_outcome(scenario, outcome)
