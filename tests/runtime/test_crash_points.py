"""Crash at every write point: each canonical scenario is stopped at every append it makes (before
the batch is stored, and after it is stored but before the acknowledgement) and at every point
between its dispatch and its outcome; a restart from the same log must then find no duplicate
dispatch, no revived cancellation, no lost acknowledged event and every unknown outcome surfaced.
"""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing
from conftest import RUN_COUNTS
from fault_scenarios import (
    OPERATOR,
    SCENARIOS,
    STOP_POINTS,
    TOOLS,
    Run,
    Scenario,
    Stopped,
    check_log,
    drain,
    key_of,
)
from locations import TESTS

from inert import CallKey, InertError, open_runtime, trio_clock
from inert.events import ExecutionCompleted
from inert.log import MemoryLog, MemoryStore, SQLiteLog
from inert.testing import Fault, FaultyLog

DAY = 24 * 3600
CRASHES = (Fault.CRASH_BEFORE_STORE, Fault.CRASH_AFTER_STORE)


def _only_inert_errors(group: BaseExceptionGroup[BaseException]) -> bool:
    return all(
        isinstance(error, InertError | Stopped)
        or (isinstance(error, BaseExceptionGroup) and _only_inert_errors(error))
        for error in group.exceptions
    )


async def first_run(
    store: MemoryStore,
    scenario: Scenario,
    run: Run,
    script: dict[int, Fault] | None = None,
) -> FaultyLog:
    """Run a scenario in a process that may crash; the log it appended through."""
    log = FaultyLog(MemoryLog(store, clock=trio_clock()), script=script)
    run.log = log
    # Under the autojumping clock a hang jumps straight to this deadline.
    with trio.fail_after(DAY):
        try:
            async with open_runtime(log=log, tools=TOOLS, operators=[OPERATOR]) as runtime:
                await scenario(runtime, run)
                await runtime.settle()
        except (InertError, Stopped):
            pass
        except BaseExceptionGroup as group:
            # Several tasks appending at the crash each report it; all must be inert's errors.
            if not _only_inert_errors(group):
                raise
    return log


async def restart_and_check(store: MemoryStore, run: Run, acknowledged: set[str]) -> list[str]:
    """Restart twice on the same log (the first process runs what is ready, the second only
    recovers) and check what the log and the second runtime hold."""
    run.stop_at = None
    with trio.fail_after(DAY):
        for drains in (True, False):
            log = MemoryLog(store, clock=trio_clock())
            run.log = FaultyLog(log)
            async with open_runtime(log=run.log, tools=TOOLS, operators=[OPERATOR]) as runtime:
                if drains:
                    await drain(runtime, run)
                    continue
                await runtime.settle()
                return check_log(await log.read(), runtime, run.journal, acknowledged)
    raise AssertionError("unreachable")


MAX_APPENDS = 64


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_a_crash_at_every_append_breaks_no_promise(
    name: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Stopped before or after the store of each of its appends, a scenario restarts without a
    duplicate dispatch, a revived cancellation, a lost acknowledged event or a hidden outcome."""
    scenario, outcome = SCENARIOS[name]
    # How an actor groups its decisions into appends depends on the schedule, so the count of
    # appends varies a little between runs: crash at append 1, 2, ... until a run ends first.
    failures: list[str] = []
    points = 0
    for number in range(1, MAX_APPENDS + 1):
        reached = False
        for crash in CRASHES:
            store = MemoryStore()
            run = Run(outcome=outcome)
            log = await first_run(store, scenario, run, {number: crash})
            if not log.injected:
                continue
            assert [injection.fault for injection in log.injected] == [crash]
            reached = True
            points += 1
            problems = await restart_and_check(store, run, log.acknowledged)
            failures.extend(f"append {number} {crash.value}: {problem}" for problem in problems)
        if not reached:
            break
    assert not reached
    assert number > 5
    RUN_COUNTS["crash points"] = RUN_COUNTS.get("crash points", 0) + points
    assert not failures, failures


@pytest.mark.parametrize("name", list(SCENARIOS))
@pytest.mark.parametrize("point", STOP_POINTS)
async def test_a_crash_between_dispatch_and_outcome_is_surfaced(
    name: str, point: str, autojump_clock: trio.testing.MockClock
) -> None:
    """Stopped after the claim returned, after the executor ran or after the outcome was
    recorded, the call never runs again and an outcome not recorded is surfaced as unknown."""
    scenario, outcome = SCENARIOS[name]
    store = MemoryStore()
    run = Run(outcome=outcome, stop_at=point)
    log = await first_run(store, scenario, run)
    problems = await restart_and_check(store, run, log.acknowledged)
    RUN_COUNTS["crash points"] = RUN_COUNTS.get("crash points", 0) + 1
    assert not problems, problems
    assert len(run.journal) <= 1


# --- real SIGKILLs of a process running the runtime on SQLite --------------------------------

# `make soak` raises the number of kills; each lands after a different number of printed steps.
KILLS = int(os.environ.get("INERT_RUNTIME_KILLS", "4"))
CHILD = TESTS / "crash_runtime.py"
SILENCE = 30.0


def _run_child_until_killed(path: Path, run: str, lines_wanted: int) -> list[str]:
    """Start a child running turns, read its steps, and SIGKILL it after ``lines_wanted``.

    A child silent for ``SILENCE`` seconds is a hang (a call claimed and never answered, say):
    it is killed and the test fails naming the last step it printed.
    """
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(path), run],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None
    received = b""
    hung = False
    try:
        while received.count(b"\n") < lines_wanted:
            ready, _, _ = select.select([child.stdout], [], [], SILENCE)
            chunk = os.read(child.stdout.fileno(), 65536) if ready else b""
            if not chunk:
                hung = bool(not ready)
                break
            received += chunk
        child.send_signal(signal.SIGKILL)
        received += child.stdout.read()
    finally:
        child.kill()
        _, errors = child.communicate(timeout=60)
    lines = received.decode().splitlines()
    assert not hung, f"{run} printed nothing for {SILENCE} s after {lines[-1:]}"
    assert child.returncode == -signal.SIGKILL, errors.decode()
    assert len(lines) >= lines_wanted, errors.decode()
    return lines


def _keys(lines: list[str], step: str) -> list[CallKey]:
    keys = []
    for line in lines:
        what, turn, call, conversation = line.split()
        if what == step:
            keys.append(key_of(call, turn=turn, conversation=conversation))
    return keys


async def _check_after_kills(path: Path, lines: list[str]) -> list[str]:
    async with (
        SQLiteLog.open(path, synchronous="FULL", clock=trio_clock()) as log,
        open_runtime(log=log, tools=TOOLS, operators=[OPERATOR]) as runtime,
    ):
        await runtime.settle()
        events = await log.read()
        problems = check_log(events, runtime, _keys(lines, "claimed"), set())
        completed = {
            recorded.event.key
            for recorded in events
            if isinstance(recorded.event, ExecutionCompleted)
        }
        problems.extend(
            f"{key.stream} reported done, no completion in the log"
            for key in _keys(lines, "done")
            if key not in completed
        )
        return problems


@pytest.mark.slow
def test_sigkill_of_a_running_runtime_breaks_no_promise(tmp_path: Path) -> None:
    """A runtime process on SQLite (FULL) killed at random moments, restarted on the same file
    each time, never dispatches a call twice, loses no recorded outcome and surfaces every
    dispatch it left without one."""
    path = tmp_path / "runtime.db"
    chance = random.Random(8)
    lines: list[str] = []
    for kill in range(KILLS):
        lines.extend(_run_child_until_killed(path, f"run{kill}", chance.randint(1, 40)))
    problems = trio.run(_check_after_kills, path, lines)
    RUN_COUNTS["runtime kills"] = RUN_COUNTS.get("runtime kills", 0) + KILLS
    assert not problems, problems
    assert len(_keys(lines, "claimed")) >= KILLS


async def test_the_checker_reports_each_broken_promise(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A second run of the executor and a lost acknowledged event are each reported by the
    checker, so that a clean result means something."""
    scenario, _ = SCENARIOS["plain, executor never reports"]
    store = MemoryStore()
    run = Run(outcome="never")
    await first_run(store, scenario, run)
    async with open_runtime(log=MemoryLog(store, clock=trio_clock()), tools=TOOLS) as runtime:
        await runtime.settle()
        events = await runtime.log.read()
        [key] = run.journal
        assert check_log(events, runtime, run.journal, set()) == []
        problems = check_log(events, runtime, [key, key], {"acknowledged-but-missing"})
    assert any("ran 2 times" in problem for problem in problems)
    assert any("acknowledged events lost" in problem for problem in problems)
