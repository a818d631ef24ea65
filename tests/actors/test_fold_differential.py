"""The call fold against its reference: every golden log and simulator seeds, live and on replay.

``reference_fold.CallFold`` is the fold as it was before the slot fold, kept as the oracle.
Both fold the same recorded events; after every event they must give the actors the same work
(decisions to write, validations to run, deadlines to watch) or raise the same divergence, and
at the end hold the same calls and answer the runtime's questions alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import reference_fold
from conftest import RUN_COUNTS
from fold_views import decoded, folded_view, work_of
from golden_logs import GOLDEN_DIGEST_KEY, golden_paths, load
from simulated_logs import simulated

from inert import InertError, RecordedEvent
from inert.actors import CallFold, CallLimits
from inert.testing import SIMULATION_LIMITS

PATHS = golden_paths()
SEEDS = range(4)


def _step(apply: Callable[[RecordedEvent], list[Any]], recorded: RecordedEvent) -> object:
    try:
        return work_of(apply(recorded))
    except InertError as error:
        return (type(error).__name__, str(error))


def compare(
    records: Sequence[RecordedEvent], *, live: bool, limits: Any = None, digest_key: bytes = b""
) -> None:
    """Fold ``records`` through both folds; they must agree at every event and at the end."""
    options: dict[str, Any] = {"live": live, "digest_key": digest_key}
    if limits is not None:
        options["limits"] = limits
    reference = reference_fold.CallFold(**options)
    fold = CallFold(**options)
    turns = set()
    for recorded in records:
        key = getattr(recorded.kept, "key", None)
        if key is not None:
            turns.add(key.turn_ref)
        expected = _step(reference.apply, recorded)
        found = _step(fold.apply, recorded)
        assert found == expected, f"position {recorded.position}: {recorded.event_type}"
        if isinstance(expected, tuple):
            # Both stopped: a divergence ends a fold.
            return
        if key is not None:
            # Retention and resumption ask these of the call's response after each event.
            response = key.response_ref
            assert fold.response_settled(response) == reference.response_settled(response)
            assert [state.key for state in fold.live_calls_of(response)] == [
                state.key for state in reference.live_calls_of(response)
            ]
    if live:
        assert work_of(fold.go_live()) == work_of(reference.go_live())
    assert folded_view(fold, turns) == folded_view(reference, turns)


@pytest.mark.parametrize("live", [False, True], ids=["replay", "live"])
@pytest.mark.parametrize("path", PATHS, ids=[path.stem for path in PATHS])
def test_every_golden_log_folds_as_the_reference_folds_it(path: Path, live: bool) -> None:
    """A golden log gives the same work, divergences and calls through both folds."""
    golden = load(path)
    records = decoded(golden.rows)
    compare(records, live=live, limits=golden.limits, digest_key=GOLDEN_DIGEST_KEY)
    _assert_no_divergence(records, GOLDEN_DIGEST_KEY, golden.limits)
    RUN_COUNTS["golden logs folded by both folds"] = (
        RUN_COUNTS.get("golden logs folded by both folds", 0) + 1
    )


@pytest.mark.parametrize("live", [False, True], ids=["replay", "live"])
@pytest.mark.parametrize("seed", SEEDS)
def test_simulator_logs_fold_as_the_reference_folds_them(seed: int, live: bool) -> None:
    """The log a simulator seed wrote gives the same work and calls through both folds."""
    records, digest_key = simulated(seed)
    compare(records, live=live, limits=SIMULATION_LIMITS, digest_key=digest_key)
    _assert_no_divergence(records, digest_key, SIMULATION_LIMITS)


@pytest.mark.parametrize("live", [False, True], ids=["replay", "live"])
@pytest.mark.parametrize("seed", SEEDS)
def test_simulator_logs_with_retired_turns_fold_as_the_reference_folds_them(
    seed: int, live: bool
) -> None:
    """With a horizon of a second, turns are retired while the seed runs (some retirements void,
    inputs arriving for calls already forgotten): both folds forget the same calls."""
    records, digest_key = simulated(seed, horizon=timedelta(seconds=1))
    compare(records, live=live, limits=SIMULATION_LIMITS, digest_key=digest_key)
    _assert_no_divergence(records, digest_key, SIMULATION_LIMITS)


def _assert_no_divergence(
    records: Sequence[RecordedEvent], digest_key: bytes, limits: CallLimits
) -> None:
    """The log replays to its end: a comparison that stopped at a divergence would have
    compared little."""
    fold = CallFold(limits, digest_key=digest_key)
    for recorded in records:
        fold.apply(recorded)
