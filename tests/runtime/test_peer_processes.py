"""Runtime processes share one PostgreSQL log: three, one killed with SIGKILL mid-run; two, of
which only the owner of a turn redacts its calls' payloads, and a survivor those a killed owner
left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import trio
from locations import TESTS
from postgres_support import fresh_schema, log_url

from inert import ArgumentsAppended, RecordedEvent, ToolDeclaration, open_log, open_runtime
from inert.events import (
    CallCancelled,
    CallDispatched,
    CallEnded,
    CallValidated,
    ExecutionCompleted,
    ExecutionOutcomeUnknown,
    Redacted,
    TurnLeased,
    TurnStarted,
)

CHILD = TESTS / "peer_process.py"
TURNS = 8
NAMES = ("p0", "p1", "p2")
VICTIM = "p1"
LEASE_TIME = 3.0
"""The children's lease time: with one second, a child starved of CPU that long on a loaded
machine missed its heartbeats, was buried alive, and the outcomes its executor reported then
were refused."""


class Child:
    """A child runtime process and the lines it printed, read as they come."""

    def __init__(
        self, url: str, name: str, turns: int = TURNS, executor: str = "all", processes: int = 0
    ) -> None:
        self.name = name
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(CHILD),
                url,
                name,
                str(turns),
                executor,
                str(LEASE_TIME),
                str(processes),
            ],
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

    def wait_for(self, predicate: object, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(predicate(line) for line in list(self.lines)):  # type: ignore[operator]
            if self.process.poll() is not None or time.monotonic() > deadline:
                stderr = self.process.stderr.read() if self.process.stderr else ""
                raise AssertionError(f"{self.name} stopped or stalled: {self.lines} {stderr}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Close its standard input (it stops), and wait for it to have stopped well."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0, self.process.stderr.read()  # type: ignore[union-attr]
        self._reader.join(timeout=10)

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        self._reader.join(timeout=10)

    def close(self) -> None:
        """Kill it if it still runs, and close its pipes."""
        if self.process.poll() is None:
            self.kill()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def started_turns(child: Child) -> list[str]:
    return [line.split()[1] for line in child.lines if line.startswith("turn ")]


def fed(child: Child) -> dict[str, int]:
    return {
        line.split()[1]: int(line.split()[2]) for line in child.lines if line.startswith("fed ")
    }


async def read_log(url: str) -> list[RecordedEvent]:
    async with open_log(url) as log:
        return await log.read()


async def disable_email(url: str) -> None:
    async with open_runtime(
        log=url,
        create=True,
        tools=[ToolDeclaration(name="get_weather"), ToolDeclaration(name="send_email")],
        process="console",
        operators=["operator:olga"],
    ) as console:
        await console.disable_tool("send_email", operator="operator:olga", reason="incident")


def every_call_ended(records: list[RecordedEvent]) -> bool:
    """Whether every opened call is dispatched with an outcome, cancelled or failed."""
    opened = {
        recorded.event.key  # type: ignore[union-attr]
        for recorded in records
        if recorded.event_type == "ingress.call_opened"
    }
    done = {
        recorded.event.key  # type: ignore[union-attr]
        for recorded in records
        if recorded.event_type
        in ("decision.cancelled", "decision.failed", "outcome.completed", "outcome.unknown")
    }
    return bool(opened) and opened <= done


def survived_the_kill(
    records: list[RecordedEvent], children: dict[str, Child], victim: str
) -> None:
    """What a killed process leaves behind, checked: nothing dispatched twice (by the log and
    by what the executors printed), no acknowledged turn or promise of any process lost, and
    every turn of the victim leased to a survivor."""
    events = [recorded.event for recorded in records]
    dispatched = Counter(event.key for event in events if isinstance(event, CallDispatched))
    assert dispatched, "nothing was dispatched"
    assert max(dispatched.values()) == 1, "a call was dispatched twice"
    printed = Counter(
        line for child in children.values() for line in child.lines if line.startswith("disp")
    )
    assert max(printed.values()) == 1

    started = {event.turn.turn for event in events if isinstance(event, TurnStarted)}
    for child in children.values():
        assert set(started_turns(child)) <= started, f"{child.name}: an acknowledged turn is lost"
        for turn, count in fed(child).items():
            fed_events = [
                recorded
                for recorded in records
                if recorded.stream.startswith(f"response/acme/{turn}-")
                and recorded.event_type.startswith("ingress.")
                and recorded.event_type != ArgumentsAppended.TAG
            ]
            assert len(fed_events) >= count, f"{child.name}: acknowledged events of {turn} lost"

    victim_turns = set(started_turns(children[victim]))
    assert victim_turns
    assert "fed-all" not in children[victim].lines, "the victim was not killed in the middle"
    taken = {
        event.turn.turn
        for event in events
        if isinstance(event, TurnLeased) and event.previous == victim
    }
    assert taken == victim_turns


@pytest.mark.slow
def test_three_processes_survive_the_sigkill_of_one() -> None:
    """No duplicate dispatch, no lost acknowledged event, the dead process's calls all end,
    and a control issued anywhere reaches the calls of every process."""
    with fresh_schema() as schema:
        url = log_url(schema, poll_interval=0.05)
        trio.run(read_log, url)  # creates the schema before three processes race to
        children = {name: Child(url, name) for name in NAMES}
        victim = children[VICTIM]
        try:
            victim.wait_for(lambda line: line.startswith(f"fed {VICTIM}-t{TURNS // 2}"))
            victim.kill()
            for name in NAMES:
                if name != VICTIM:
                    children[name].wait_for(lambda line: line == "fed-all")
            trio.run(disable_email, url)
            deadline = time.monotonic() + 60
            while not every_call_ended(trio.run(read_log, url)):
                assert time.monotonic() < deadline, "the survivors did not end every call"
                time.sleep(0.2)
            for name in NAMES:
                if name != VICTIM:
                    children[name].stop()
            records = trio.run(read_log, url)
        finally:
            for child in children.values():
                child.close()

    events = [recorded.event for recorded in records]
    survived_the_kill(records, children, VICTIM)
    dispatched = Counter(event.key for event in events if isinstance(event, CallDispatched))
    owners = {}
    for event in events:
        if isinstance(event, TurnLeased):
            owners[event.turn.turn] = event.owner
    victim_turns = set(started_turns(victim))
    assert all(owners[turn] != VICTIM for turn in victim_turns), "a turn of the dead stayed its"

    ended = {event.key for event in events if isinstance(event, CallCancelled | CallDispatched)}
    failed_or_ended = ended | {
        recorded.event.key  # type: ignore[union-attr]
        for recorded in records
        if recorded.event_type == "decision.failed"
    }
    opened = {
        recorded.event.key  # type: ignore[union-attr]
        for recorded in records
        if recorded.event_type == "ingress.call_opened"
    }
    assert opened <= failed_or_ended, "a call was left neither dispatched nor ended"
    for key in opened:
        if key.call == "send_email":
            assert key not in dispatched
    reasons = {
        (event.key.turn.split("-")[0], event.reason.value)
        for event in events
        if isinstance(event, CallCancelled) and event.key.call == "send_email"
    }
    for name in NAMES:
        if name != VICTIM:
            assert (name, "tool_disabled") in reasons, f"the control did not reach {name}"
    outcomes = {
        event.key
        for event in events
        if isinstance(event, ExecutionCompleted | ExecutionOutcomeUnknown)
    }
    assert set(dispatched) <= outcomes, "a dispatch without an outcome"


PAYLOAD_TYPES = (ArgumentsAppended.TAG, CallEnded.TAG, CallValidated.TAG)


def payloads_of(records: list[RecordedEvent], tool: str) -> list[RecordedEvent]:
    """The events of the calls of a tool whose payloads retention redacts."""
    return [r for r in records if r.event_type in PAYLOAD_TYPES and tool in r.stream]


def completed_and_redacted(records: list[RecordedEvent], tools: tuple[str, ...]) -> bool:
    """Whether every weather call has its outcome, and every payload of these tools' calls is
    redacted."""
    completed = sum(isinstance(r.event, ExecutionCompleted) for r in records)
    payloads = [r for tool in tools for r in payloads_of(records, tool)]
    return completed == TURNS and all(isinstance(r.event, Redacted) for r in payloads)


def redactions(child: Child) -> int:
    """How many times the child's log redacted, as it said when it stopped."""
    [said] = [line for line in child.lines if line.startswith("redactions ")]
    return int(said.split()[1])


def wait_until_redacted(url: str, tools: tuple[str, ...]) -> list[RecordedEvent]:
    deadline = time.monotonic() + 60
    while not completed_and_redacted(records := trio.run(read_log, url), tools):
        assert time.monotonic() < deadline, "payloads of finished calls were left in the log"
        time.sleep(0.1)
    return records


@pytest.mark.slow
def test_only_the_owner_of_a_turn_redacts_the_payloads_of_its_calls() -> None:
    """One process starts every turn, another executes every call: each finished call's
    payloads are redacted, by the owner of its turn alone; a collecting call keeps its own."""
    with fresh_schema() as schema:
        url = log_url(schema, poll_interval=0.05)
        trio.run(read_log, url)
        owner = Child(url, "owner", executor="none")
        worker = Child(url, "worker", turns=0)
        try:
            owner.wait_for(lambda line: line == "fed-all")
            records = wait_until_redacted(url, ("get_weather",))
            # The worker first: stopped second, it could outlive the owner by a lease time and
            # take its turns over, as a survivor does.
            worker.stop()
            owner.stop()
        finally:
            owner.close()
            worker.close()

    assert redactions(worker) == 0
    assert redactions(owner) > 0
    collecting = payloads_of(records, "send_email")
    assert len(collecting) == TURNS
    assert not any(isinstance(r.event, Redacted) for r in collecting)


@pytest.mark.slow
def test_a_survivor_redacts_what_the_owner_it_took_over_from_left(tmp_path: Path) -> None:
    """The owner of every turn is killed with SIGKILL before any call of its turns has an
    outcome: the process that takes its turns over redacts what was due then and after, every
    payload of every call."""
    release = tmp_path / "complete"
    with fresh_schema() as schema:
        url = log_url(schema, poll_interval=0.05)
        trio.run(read_log, url)
        owner = Child(url, "owner", executor="none")
        worker = Child(url, "worker", turns=0, executor=f"until:{release}")
        try:
            owner.wait_for(lambda line: line == "fed-all")
            deadline = time.monotonic() + 60
            while sum(line.startswith("dispatched") for line in list(worker.lines)) < TURNS:
                assert time.monotonic() < deadline, f"the calls were not dispatched: {worker.lines}"
                time.sleep(0.02)
            owner.kill()
            release.touch()
            wait_until_redacted(url, ("get_weather", "send_email"))
            worker.stop()
        finally:
            owner.close()
            worker.close()

    assert redactions(worker) > 0
