"""The logs simulator seeds write, each run once per test process and shared by the tests that
read them: the differential tests of the fold and of the projections read the same seeds."""

from __future__ import annotations

from datetime import timedelta
from functools import cache, partial

import trio

from inert import RecordedEvent
from inert.actors._call import DIGEST_KEY
from inert.log import MemoryLog
from inert.projections import DEFAULT_LEDGER_HORIZON
from inert.testing import DEMO_TOOLS, RETENTIONS, SIMULATION_LIMITS
from inert.testing._simulator import _read, _run_once, demo_check
from inert.testing._workload import make_plan


def simulated(
    seed: int, retention: str = "default", horizon: timedelta | None = DEFAULT_LEDGER_HORIZON
) -> tuple[list[RecordedEvent], bytes]:
    """The log a seed of 200 call keys wrote, and the key of its arguments digests. Kept for
    every test that asks for it again (none changes it): the run is deterministic, a second
    would write the same."""
    # Every argument given, by position: the cache tells calls apart by how they were made.
    return _simulated(seed, retention, horizon)


@cache
def _simulated(
    seed: int, retention: str, horizon: timedelta | None
) -> tuple[list[RecordedEvent], bytes]:
    plan = make_plan(seed, 200, DEMO_TOOLS, SIMULATION_LIMITS)
    run = _run_once(
        seed,
        plan=plan,
        tools=DEMO_TOOLS,
        check=demo_check,
        limits=SIMULATION_LIMITS,
        retention=RETENTIONS[retention],
        horizon=horizon,
    )
    records: list[RecordedEvent] = trio.run(partial(_read, run.store.rows))
    return records, MemoryLog(run.store).key(DIGEST_KEY)
