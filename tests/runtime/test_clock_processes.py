"""Real runtime processes whose clocks are off, on a partitioned PostgreSQL log: one ten
minutes ahead and running fast, one ten minutes behind and running slow (libfaketime, Debian's
``faketime``, around each).

Each process confirms calls for one second and claims half of them at once, half three
seconds later; then the process ahead is killed. What must hold, read from the log afterwards:
the log's clock is the server's (every stamp within the run by this test's clock, never going
back in a partition); every confirmation lasts, by the log's clock, the second it was given
for; every late claim is refused and nothing runs after its confirmation expired; no call runs
twice; each turn's lease is held by one process at a time, and none is taken from a live
process; and the process behind takes the dead one's partitions and turns within a few lease
times (its clock twenty minutes behind the dead one's never makes it wait for them).

Skipped where ``faketime`` is missing; under ``CI=true`` that fails instead.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from clock_support import require_faketime
from postgres_support import fresh_schema, log_url

from inert import CallKey, RecordedEvent, open_log
from inert.events import (
    CallCancelled,
    CallDispatched,
    ClaimRequested,
    ConfirmationGiven,
    TurnLeased,
)
from inert.testing import ClockSkew

CHILD = Path(__file__).resolve().parent.parent / "clock_process.py"
PARTITIONS = 8
TURNS = 4
LEASE_TIME = 1.0
CONFIRMED_FOR = timedelta(seconds=1)
MEASURE = timedelta(seconds=1)
"""What a stamp or a process's reading of the log's clock may be off by here."""
TAKEOVER = 20.0
"""Seconds the survivor may take to fold every partition after the kill: a few lease times."""
SKEWS = {
    "ahead": ClockSkew(offset=600, rate=1.5),
    "behind": ClockSkew(offset=-600, rate=0.75),
}


@pytest.fixture(autouse=True)
def faketime() -> None:
    require_faketime()


class SkewedChild:
    """A child runtime process under a skewed clock, and the lines it printed."""

    def __init__(self, url: str, name: str, skew: ClockSkew) -> None:
        self.name = name
        command = [sys.executable, str(CHILD), url, name, str(len(SKEWS)), str(TURNS)]
        self.process = subprocess.Popen(
            skew.command(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.strip())

    def wait_for(self, line: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while line not in self.lines:
            if self.process.poll() is not None or time.monotonic() > deadline:
                if self.process.poll() is None:
                    os.kill(self.process.pid, signal.SIGKILL)
                stderr = self.process.stderr.read() if self.process.stderr else ""
                raise AssertionError(f"{self.name} stopped or stalled: {self.lines} {stderr}")
            time.sleep(0.02)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


async def read_log(url: str) -> dict[int, list[RecordedEvent]]:
    """Every partition's events, by partition."""
    async with open_log(url, partitions=PARTITIONS) as log:
        return {
            number: await log.partition(number).read() for number in (0, *log.call_partitions())
        }


@pytest.mark.slow(seconds=40)
def test_processes_whose_clocks_are_off_keep_confirmations_and_leases() -> None:
    """A process ten minutes ahead and one ten minutes behind: confirmations, leases and the
    takeover of the killed one are judged by the server's clock."""
    with fresh_schema() as schema:
        url = log_url(schema, poll_interval=0.05)
        trio.run(read_log, url)  # creates the log before the processes race to
        began = datetime.now(UTC)
        children = {name: SkewedChild(url, name, skew) for name, skew in SKEWS.items()}
        try:
            for child in children.values():
                child.wait_for("done")
            killed_at = datetime.now(UTC)
            children["ahead"].kill()
            children["behind"].wait_for(f"owns {PARTITIONS}", timeout=TAKEOVER)
            ended = datetime.now(UTC)
            by_partition = trio.run(read_log, url)
        finally:
            for child in children.values():
                child.kill()
    lines = {name: child.lines for name, child in children.items()}
    assert_stamped_by_the_server(by_partition, began, ended)
    records = [recorded for rows in by_partition.values() for recorded in rows]
    assert_confirmations_kept(records, lines)
    assert_leases_held_once(records, killed_at)


def assert_stamped_by_the_server(
    by_partition: dict[int, list[RecordedEvent]], began: datetime, ended: datetime
) -> None:
    """Every stamp is the server's time during the run, whichever process wrote it, and a
    partition's stamps never go back."""
    for rows in by_partition.values():
        stamps = [recorded.recorded_at for recorded in rows]
        assert stamps == sorted(stamps)
        assert all(began - MEASURE <= stamp <= ended + MEASURE for stamp in stamps), (
            min(stamps),
            max(stamps),
            began,
            ended,
        )


def assert_confirmations_kept(records: list[RecordedEvent], lines: dict[str, list[str]]) -> None:
    """Each confirmation lasts its second by the log's clock; the calls claimed at once ran,
    once each; those claimed late did not, and none ran after its confirmation expired."""
    confirmations = {
        recorded.event.key: recorded
        for recorded in records
        if isinstance(recorded.event, ConfirmationGiven)
    }
    assert len(confirmations) == TURNS * len(SKEWS)
    for recorded in confirmations.values():
        assert isinstance(recorded.event, ConfirmationGiven)
        lifetime = recorded.event.expires_at - recorded.recorded_at
        assert abs(lifetime - CONFIRMED_FOR) < MEASURE, lifetime
    dispatched = [r.event for r in records if isinstance(r.event, CallDispatched)]
    assert len(dispatched) == len({event.key for event in dispatched}) == TURNS * len(SKEWS) // 2
    first_claim: dict[CallKey, datetime] = {}
    for recorded in records:
        if isinstance(recorded.event, ClaimRequested):
            first_claim.setdefault(recorded.event.key, recorded.recorded_at)
    for event in dispatched:
        given = confirmations[event.key].event
        assert isinstance(given, ConfirmationGiven)
        assert first_claim[event.key] < given.expires_at
    cancelled = [r.event for r in records if isinstance(r.event, CallCancelled)]
    assert len(cancelled) == TURNS * len(SKEWS) // 2
    assert {event.reason.value for event in cancelled} == {"confirmation_expired"}
    for name, printed in lines.items():
        outcomes = Counter(line.split()[0] for line in printed)
        assert (outcomes["dispatched"], outcomes["refused"]) == (TURNS // 2, TURNS // 2), name


def assert_leases_held_once(records: list[RecordedEvent], killed_at: datetime) -> None:
    """Each turn's leases form one chain, each taken from the holder before it; only the
    killed process's turns change hands, and only after it was killed."""
    chains: dict[str, list[RecordedEvent]] = {}
    for recorded in records:
        if isinstance(recorded.event, TurnLeased):
            chains.setdefault(recorded.event.turn.turn, []).append(recorded)
    assert len(chains) == TURNS * len(SKEWS)
    for chain in chains.values():
        leases = [recorded.event for recorded in chain]
        assert isinstance(leases[0], TurnLeased)
        assert leases[0].previous is None
        for before, after in itertools.pairwise(leases):
            assert isinstance(before, TurnLeased)
            assert isinstance(after, TurnLeased)
            assert after.previous == before.owner
        for recorded in chain[1:]:
            assert isinstance(recorded.event, TurnLeased)
            assert recorded.event.previous == "ahead"
            assert recorded.recorded_at >= killed_at - MEASURE
