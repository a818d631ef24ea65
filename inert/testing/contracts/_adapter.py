"""The adapter contract: every awkward order of the provider-neutral suite, worded in one
adapter's wire format by its renderer, ends as the suite expects.

Subclass ``AdapterContract`` in a test module and give it ``renderer``, a fixture that
returns a ``Renderer`` turning each step of a scenario into the wire format of the adapter
under test and feeding it through the adapter::

    class TestMyAdapter(AdapterContract):
        @pytest.fixture
        def renderer(self):
            return MyRenderer()

Where the protocol cannot word a step as the suite does, ``OVERRIDES`` says what it expects
instead, per scenario and call (say why beside it). ``runtimes`` opens the runtimes a scenario
runs on (by default, a SQLite log in a temporary directory).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from ._awkward import (
    SCENARIOS,
    Expected,
    OpenRuntime,
    Renderer,
    Scenario,
    assert_outcome,
    run_scenario,
    sqlite_runtimes,
)


class AdapterContract:
    """The awkward-order suite through one adapter; ``renderer`` is the subclass's to give."""

    pytestmark = pytest.mark.trio

    OVERRIDES: ClassVar[Mapping[str, Mapping[str, Expected]]] = {}
    """What this protocol expects instead of the suite, by scenario name and call label."""

    @pytest.fixture
    def renderer(self) -> Renderer:
        """Words each step in the wire format of the adapter under test."""
        raise NotImplementedError("an AdapterContract subclass gives the renderer fixture")

    @pytest.fixture
    def runtimes(self, tmp_path: Path) -> OpenRuntime:
        """Opens the runtimes a scenario runs on."""
        return sqlite_runtimes(tmp_path)

    @pytest.mark.parametrize("restart", [False, True], ids=["live", "restart"])
    @pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
    async def test_awkward_order(
        self, scenario: Scenario, restart: bool, renderer: Renderer, runtimes: OpenRuntime
    ) -> None:
        """Each awkward order ends as the suite expects (and as ``OVERRIDES`` says where the
        protocol words it otherwise), with and without a restart in the middle: no executor
        input before validation, no old key acting on a newer turn, the same digest on replay."""
        outcome = await run_scenario(scenario, runtimes, renderer=renderer, restart=restart)
        assert_outcome(scenario, outcome, overrides=self.OVERRIDES.get(scenario.name))
