"""A real process killed with SIGKILL in the middle of appending loses nothing it acknowledged."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio
from crash_appender import payload_of
from locations import TESTS

from inert import ArgumentsAppended
from inert.log import SQLiteLog

# `make soak` raises the number of kills; each kill lands after a different number of acks.
KILLS = int(os.environ.get("INERT_CRASH_KILLS", "6"))
ACKS_BEFORE_KILL = [(40, 150, 400, 75, 900, 10)[kill % 6] + kill for kill in range(KILLS)]


def _run_until_killed(path: Path, run: str, acks_wanted: int) -> list[str]:
    """Start a child appender, read its acknowledgements, and SIGKILL it mid-append."""
    child = subprocess.Popen(
        [sys.executable, str(TESTS / "crash_appender.py"), str(path), run],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    acknowledged: list[str] = []
    try:
        for line in child.stdout:
            acknowledged.append(line.strip())
            if len(acknowledged) >= acks_wanted:
                break
        child.send_signal(signal.SIGKILL)
        acknowledged.extend(line.strip() for line in child.stdout)
    finally:
        child.kill()
        _, errors = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, errors
    assert len(acknowledged) >= acks_wanted, errors
    return acknowledged


async def _check(path: Path, acknowledged: set[str]) -> int:
    async with SQLiteLog.open(path) as log:
        events = await log.read()
        assert [e.position for e in events] == list(range(1, len(events) + 1))
        stored = {e.event_id for e in events}
        assert acknowledged <= stored, sorted(acknowledged - stored)[:5]
        versions: dict[str, int] = {}
        for recorded in events:
            versions[recorded.stream] = versions.get(recorded.stream, 0) + 1
            assert recorded.version == versions[recorded.stream]
            assert isinstance(recorded.event, ArgumentsAppended)
            assert recorded.event.data == payload_of(recorded.event_id)
        batches: dict[str, int] = {}
        for event_id in stored:
            run, task, number, _ = event_id.split("-")
            batch = f"{run}-{task}-{number}"
            batches[batch] = batches.get(batch, 0) + 1
        # Batches are atomic: each has all of its 1 + number % 3 events or none.
        for batch, count in batches.items():
            assert count == 1 + int(batch.split("-")[2]) % 3, batch
        return len(events)


def test_sigkill_while_appending_loses_no_acknowledged_event(tmp_path: Path) -> None:
    """Each acknowledged event survives repeated SIGKILLs, batches stay whole, nothing is torn."""
    path = tmp_path / "crash.db"
    acknowledged: set[str] = set()
    stored = 0
    for kill in range(KILLS):
        acknowledged.update(_run_until_killed(path, f"run{kill}", ACKS_BEFORE_KILL[kill]))
        stored_now = trio.run(_check, path, acknowledged)
        assert stored_now >= stored
        stored = stored_now
    assert stored >= len(acknowledged) >= sum(ACKS_BEFORE_KILL)
