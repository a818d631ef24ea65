"""Runtime processes on a partitioned PostgreSQL log: four, one killed with SIGKILL mid-run;
its partitions and turns are taken over, and a control given beside them reaches every
partition."""

from __future__ import annotations

import time
from collections import Counter

import pytest
import trio
from postgres_support import fresh_schema, log_url
from test_peer_processes import Child, every_call_ended, started_turns, survived_the_kill

from inert import RecordedEvent, open_log
from inert.events import ToolDisabled
from inert.runtime._controls import give_control

NAMES = ("p0", "p1", "p2", "p3")
VICTIM = "p1"
TURNS = 8
PARTITIONS = 8


async def read_log(url: str) -> list[RecordedEvent]:
    """Every partition's events, partition 0 first."""
    async with open_log(url, partitions=PARTITIONS) as log:
        return [
            recorded
            for number in (0, *log.call_partitions())
            for recorded in await log.partition(number).read()
        ]


async def disable_email(url: str) -> None:
    """An operator's control given beside the running processes, as ``inert control`` does."""
    async with open_log(url) as log:
        event = ToolDisabled(tool="send_email", tenant=None, operator="olga", reason="incident")
        await give_control(log, event, lambda operator: operator == "olga")


def unended(records: list[RecordedEvent]) -> dict[str, list[str]]:
    """The calls not ended yet, each with the types of the events of its stream."""
    done = {
        recorded.event.key  # type: ignore[union-attr]
        for recorded in records
        if recorded.event_type
        in ("decision.cancelled", "decision.failed", "outcome.completed", "outcome.unknown")
    }
    return {
        recorded.event.key.stream: [  # type: ignore[union-attr]
            other.event_type
            for other in records
            if getattr(other.event, "key", None) == recorded.event.key  # type: ignore[union-attr]
        ]
        for recorded in records
        if recorded.event_type == "ingress.call_opened" and recorded.event.key not in done  # type: ignore[union-attr]
    }


@pytest.mark.slow
def test_four_processes_on_a_partitioned_log_survive_the_sigkill_of_one() -> None:
    """The survivors take the dead process's partitions and turns: nothing is dispatched
    twice, no acknowledged event is lost, every call of the dead process ends, and a control
    given beside them ends the calls of every partition."""
    with fresh_schema() as schema:
        url = log_url(schema, poll_interval=0.05)
        trio.run(read_log, url)  # creates the log before four processes race to
        children = {name: Child(url, name, processes=len(NAMES)) for name in NAMES}
        victim = children[VICTIM]
        try:
            victim.wait_for(lambda line: line.startswith(f"fed {VICTIM}-t{TURNS // 2}-"))
            victim.kill()
            for name in NAMES:
                if name != VICTIM:
                    children[name].wait_for(lambda line: line == "fed-all")
            trio.run(disable_email, url)
            deadline = time.monotonic() + 60
            while not every_call_ended(records := trio.run(read_log, url)) or (
                sum(recorded.event_id.startswith("control:") for recorded in records) < PARTITIONS
            ):
                assert time.monotonic() < deadline, f"calls not ended: {unended(records)}"
                time.sleep(0.2)
            for name in NAMES:
                if name != VICTIM:
                    children[name].stop()
            records = trio.run(read_log, url)
        finally:
            for child in children.values():
                child.close()

    survived_the_kill(records, children, VICTIM)
    # The control reached every partition (copied once into each), and ended every call of a
    # survivor's turn still arriving there; a survivor whose beat came late under load may
    # have lost a turn to another before (its stream then ends connection_lost).
    copies = Counter(
        recorded.event_id for recorded in records if recorded.event_id.startswith("control:")
    )
    assert len(copies) == 1
    assert next(iter(copies.values())) == PARTITIONS
    reasons = {
        recorded.event.key.turn: recorded.event.reason.value  # type: ignore[union-attr]
        for recorded in records
        if recorded.event_type == "decision.cancelled" and recorded.event.key.call == "send_email"  # type: ignore[union-attr]
    }
    survivors = [turn for name in NAMES if name != VICTIM for turn in started_turns(children[name])]
    assert {reasons.get(turn) for turn in survivors} <= {"tool_disabled", "connection_lost"}
    assert "tool_disabled" in {reasons.get(turn) for turn in survivors}
