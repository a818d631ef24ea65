"""The deterministic simulator: seeds through the real runtime, planted bugs, and the CLI."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
from conftest import RUN_COUNTS

from inert._cli import main
from inert.actors import _decider
from inert.testing import (
    PLANTS,
    RETENTIONS,
    SimulationResult,
    UnknownPlant,
    planted,
    simulate,
    simulate_many,
)

SEEDS = int(os.environ.get("INERT_SIMULATION_SEEDS", "100"))
"""Seeds per test run, each run twice; ``INERT_SIMULATION_SEEDS`` asks for more."""
KEYS = 200
WORKERS = 2
PLANT_BUDGET = 10
"""Seeds a planted bug may take to be caught."""

# Fragment retention is off in these runs: with it on, a runtime cannot reopen a log whose
# fragments it redacted while a failed call still had rejections to write
# (`inert simulate --seed 1 --keys 50` shows the ReplayDivergence). Validated arguments are
# still redacted as the runtime does by default.
RETENTION = "arguments"

EXPECTED = {
    "skip_dedup": {"I9", "I4"},
    "dispatch_before_validation": {"I1"},
    "accept_stale_confirmation": {"I6"},
    "redispatch_unknown_outcome": {"I2", "I7"},
    "accept_nan": {"I4"},
}


def _report(results: list[SimulationResult]) -> str:
    return "\n".join(
        f"{violation.line()}\n  replay: {result.command}"
        for result in results
        for violation in result.violations[:3]
    )


@pytest.mark.slow
def test_every_seed_keeps_every_invariant_and_runs_the_same_twice() -> None:
    """Seeds of 200 concurrent call keys each break no invariant and write the same log twice."""
    results = simulate_many(range(SEEDS), keys=KEYS, retention=RETENTION, workers=WORKERS)
    assert [result for result in results if result.violations] == [], _report(results)
    states: Counter[str] = Counter()
    for result in results:
        states.update(result.states)
    # The seeds reach every ending, and half of them restart the runtime on the way.
    assert {"dispatched", "cancelled", "failed"} <= set(states)
    assert sum(result.restarts for result in results) >= SEEDS // 4
    assert len({result.log_hash for result in results}) == SEEDS
    RUN_COUNTS["simulator seeds (each run twice)"] = SEEDS
    RUN_COUNTS["simulator call keys"] = SEEDS * KEYS
    RUN_COUNTS["simulator steps checked"] = sum(result.steps for result in results)
    RUN_COUNTS["simulator calls dispatched"] = states["dispatched"]


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_each_planted_bug_is_caught_within_the_seed_budget(name: str) -> None:
    """Each planted bug breaks the invariant it is about within the seed budget."""
    for seed in range(PLANT_BUDGET):
        result = simulate(seed, keys=KEYS, plant=name, twice=False, retention=RETENTIONS[RETENTION])
        if result.violations:
            break
    else:
        pytest.fail(f"{name} was not caught within {PLANT_BUDGET} seeds")
    found = {violation.invariant for violation in result.violations}
    assert found & EXPECTED[name], [violation.line() for violation in result.violations]
    assert result.command.startswith(f"inert simulate --seed {seed} --keys {KEYS} --plant {name}")
    RUN_COUNTS["planted bugs caught"] = RUN_COUNTS.get("planted bugs caught", 0) + 1


def test_a_seed_runs_the_same_in_another_process() -> None:
    """A seed writes the same log in this process and in a fresh one, and so does the next."""
    here = [
        simulate(seed, keys=40, retention=RETENTIONS[RETENTION], twice=False) for seed in (3, 4)
    ]
    there = simulate_many([3, 4], keys=40, retention=RETENTION, workers=2)
    assert [result.log_hash for result in here] == [result.log_hash for result in there]
    assert here[0].log_hash != here[1].log_hash
    assert here[0].command == "inert simulate --seed 3 --keys 40 --retention arguments"


def test_planting_puts_the_decider_back() -> None:
    """A planted bug lives only for its block; an unknown name is refused by name."""
    table = dict(_decider.TABLE)
    fit = _decider._Buffer.fit
    parse = getattr(_decider, "parse_arguments")  # noqa: B009 - not re-exported by name
    for name in PLANTS:
        with planted(name):
            pass
    assert table == _decider.TABLE
    assert _decider._Buffer.fit is fit
    assert getattr(_decider, "parse_arguments") is parse  # noqa: B009
    with pytest.raises(UnknownPlant, match="no_such_bug"), planted("no_such_bug"):
        pass


def test_cli_lists_the_plants(capsys: pytest.CaptureFixture[str]) -> None:
    """inert simulate --list-plants names every planted bug and what it breaks."""
    assert main(["simulate", "--list-plants"]) == 0
    out = capsys.readouterr().out
    for name in PLANTS:
        assert f"{name}: " in out


def test_cli_runs_seeds_and_prints_what_it_checked(capsys: pytest.CaptureFixture[str]) -> None:
    """inert simulate prints the seeds, keys and steps checked, and exits 0 without violation."""
    status = main(
        ["simulate", "--seeds", "2", "--seed", "7", "--keys", "20", "--retention", RETENTION]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    assert "2 seeds run twice, 20 call keys each:" in out
    assert "steps checked, 0 violations" in out


def test_cli_exits_non_zero_with_the_command_that_replays_a_violation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A violation is printed with its invariant and the one-line command that replays it."""
    arguments = ["--seed", "0", "--keys", "200", "--plant", "skip_dedup"]
    status = main(["simulate", *arguments, "--retention", RETENTION])
    captured = capsys.readouterr()
    assert status == 1
    assert "seed 0: I9 " in captured.out
    command = f"inert simulate {' '.join(arguments)} --retention {RETENTION}"
    assert f"replay it with: {command}" in captured.out
    assert command in captured.err


def test_cli_json_gives_one_object_per_seed(capsys: pytest.CaptureFixture[str]) -> None:
    """inert simulate --json prints one JSON object per seed with its counts and violations."""
    status = main(["simulate", "--seeds", "2", "--keys", "10", "--json", "--retention", RETENTION])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0
    seeds = [json.loads(line) for line in lines]
    assert [seed["seed"] for seed in seeds] == [0, 1]
    assert all(seed["violations"] == [] and seed["steps"] > 0 for seed in seeds)
