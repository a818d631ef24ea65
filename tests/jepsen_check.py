"""The checks of a fault run (tests/jepsen.py), over the whole log and the processes' journals.

The log's calls go through the simulator's invariant checker (``check_partitioned_log``: every
partition of calls against I1-I7 and I9-I14), with what each executor received (its journal's
dispatches) as its observations and the processes killed as departed. Besides:

- ``lost``: every append a process's log acknowledged is in the log, at the positions it was
  acknowledged at;
- ``fencing``: every decision a process wrote for a call was written while that process held
  the call's turn's lease, by the log (the last ``TurnLeased`` of the turn before it);
- ``lease``: a process cut off for longer than the lease time lost the turns it held: in each
  partition where it held turns and others wrote once ``TAKEOVER`` lease times had passed,
  another process leased one of them from it before the link healed (a partition nobody could
  write to is counted as stalled instead);
- ``rejoin``: once every fault healed, every process ends up alive in every process's view, each
  folding its share of the partitions;
- ``crash``: a runtime stops only with an error of inert's own, and every process exits
  cleanly when told to.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from attrs import frozen
from jepsen_process import LEASE_TIME, TOOLS

from inert import CallKey, TurnRef
from inert.actors import DEFAULT_LIMITS
from inert.events import DECISION_TYPES, RecordedEvent, TurnLeased, call_of
from inert.testing import Observation, Violation, check_partitioned_log

KEY_FIELDS = ("tenant", "conversation", "turn", "response", "item", "call")
TURN_FIELDS = ("tenant", "conversation", "turn")
TAKEOVER = 2.5
"""Lease times after a process's last word by which the others have taken its turns over: the
lease time, and a quarter of it (their heartbeat's period) to notice, with room to spare."""
DECISIONS = frozenset(decision.TAG for decision in DECISION_TYPES)


@frozen(kw_only=True)
class Cut:
    """A process's link cut both ways, between two moments (seconds since the epoch)."""

    process: str
    began: float
    healed: float


def read_journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        # A process killed in the middle of a line leaves it unfinished.
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return entries


def _observations(
    journals: Mapping[str, list[dict[str, Any]]], records: Mapping[int, Sequence[RecordedEvent]]
) -> dict[int, dict[int, list[Observation]]]:
    """What the executors received, each seen against the whole of its partition: a dispatch
    received must be durable there, name the validated tool and arguments, the turn's own
    principal and tenant."""
    observations: dict[int, dict[int, list[Observation]]] = {}
    for entries in journals.values():
        for entry in entries:
            if entry["kind"] != "dispatch":
                continue
            partition = entry["partition"]
            head = len(records.get(partition, ()))
            observation = Observation(
                head=head,
                key=CallKey(**dict(zip(KEY_FIELDS, entry["key"], strict=True))),
                turn=TurnRef(**dict(zip(TURN_FIELDS, entry["turn"], strict=True))),
                tenant=entry["tenant"],
                principal=entry["principal"],
                tool=entry["tool"],
                arguments_digest=entry["arguments_digest"],
                claim_id=entry["claim_id"],
            )
            observations.setdefault(partition, {}).setdefault(head, []).append(observation)
    return observations


def lost_appends(
    journals: Mapping[str, list[dict[str, Any]]], records: Mapping[int, Sequence[RecordedEvent]]
) -> list[Violation]:
    violations = []
    for process, entries in sorted(journals.items()):
        for entry in entries:
            if entry["kind"] != "append":
                continue
            rows = records.get(entry["partition"], ())
            for position, event_id, tag in zip(
                entry["positions"], entry["event_ids"], entry["types"], strict=True
            ):
                if position > len(rows) or rows[position - 1].event_id != event_id:
                    violations.append(
                        Violation(
                            invariant="lost",
                            key="",
                            detail=f"the {tag} process {process} was acknowledged is not there",
                            position=position,
                            partition=entry["partition"],
                        )
                    )
    return violations


class _Leases:
    """Who held each turn's lease at each position of a partition, by the log."""

    def __init__(self, records: Iterable[RecordedEvent]) -> None:
        self._positions: dict[TurnRef, list[int]] = {}
        self._owners: dict[TurnRef, list[str]] = {}
        for recorded in records:
            event = recorded.event
            if isinstance(event, TurnLeased):
                self._positions.setdefault(event.turn, []).append(recorded.position)
                self._owners.setdefault(event.turn, []).append(event.owner)

    def holder(self, turn: TurnRef, position: int) -> str | None:
        """The holder of the turn's lease just before ``position``."""
        positions = self._positions.get(turn, [])
        index = bisect_left(positions, position)
        return self._owners[turn][index - 1] if index else None


def unfenced_writes(
    journals: Mapping[str, list[dict[str, Any]]], records: Mapping[int, Sequence[RecordedEvent]]
) -> list[Violation]:
    leases = {number: _Leases(rows) for number, rows in records.items() if number}
    violations = []
    for process, entries in sorted(journals.items()):
        for entry in entries:
            if entry["kind"] != "append" or not entry["partition"]:
                continue
            partition = entry["partition"]
            rows = records.get(partition, ())
            for position, event_id, tag in zip(
                entry["positions"], entry["event_ids"], entry["types"], strict=True
            ):
                if tag not in DECISIONS or position > len(rows):
                    continue
                recorded = rows[position - 1]
                key = call_of(recorded.event)
                if recorded.event_id != event_id or key is None:
                    continue
                holder = leases[partition].holder(key.turn_ref, position)
                if holder is not None and holder != process:
                    violations.append(
                        Violation(
                            invariant="fencing",
                            key=key.stream,
                            detail=f"process {process} wrote {tag} while {holder} held the"
                            " turn's lease",
                            position=position,
                            partition=partition,
                        )
                    )
    return violations


def _at(recorded: RecordedEvent) -> float:
    at = recorded.recorded_at
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


@frozen(kw_only=True)
class LeaseCheck:
    """What the ``lease`` check found: its violations, the partitions where a process cut off
    lost its turns by lease, and those where it kept them because nobody could write there
    (the cut process's open transaction held the partition's head, see docs/log.md)."""

    violations: list[Violation]
    lost: int
    stalled: int


def leases_lost(cuts: Sequence[Cut], records: Mapping[int, Sequence[RecordedEvent]]) -> LeaseCheck:
    """In each partition of calls where a process held turns when its link was cut, and where
    others wrote after ``TAKEOVER`` lease times of the cut: another process leased one of its
    turns from it before the link healed."""
    violations = []
    lost = stalled = 0
    for cut in cuts:
        due = cut.began + TAKEOVER * LEASE_TIME
        if cut.healed <= due:
            continue
        for number, rows in records.items():
            if not number:
                continue
            owners: dict[TurnRef, str] = {}
            taken = written = False
            for recorded in rows:
                at = _at(recorded)
                event = recorded.event
                written = written or due <= at <= cut.healed
                if not isinstance(event, TurnLeased):
                    continue
                if at <= cut.began:
                    owners[event.turn] = event.owner
                elif at <= cut.healed and event.previous == cut.process:
                    taken = True
            if cut.process not in owners.values():
                continue
            lost += taken
            stalled += not taken and not written
            if written and not taken:
                began = datetime.fromtimestamp(cut.began, UTC).time()
                violations.append(
                    Violation(
                        invariant="lease",
                        key="",
                        detail=f"process {cut.process}, cut off from {began} for"
                        f" {cut.healed - cut.began:.1f}s, kept every turn it held in the"
                        " partition while others wrote there",
                        partition=number,
                    )
                )
    return LeaseCheck(violations=violations, lost=lost, stalled=stalled)


def _rejoined(
    journals: Mapping[str, list[dict[str, Any]]], final: Sequence[str]
) -> list[Violation]:
    violations = []
    for process in final:
        settled = [entry for entry in journals.get(process, []) if entry["kind"] == "settled"]
        if not settled or not settled[-1]["ok"]:
            seen = settled[-1] if settled else "nothing"
            violations.append(
                Violation(
                    invariant="rejoin",
                    key="",
                    detail=f"process {process} did not settle with every process alive: {seen}",
                )
            )
    return violations


def stopped_otherwise(journals: Mapping[str, list[dict[str, Any]]]) -> list[Violation]:
    """A runtime stops with an error of inert's own (a ``LogError`` for a server out of
    reach), never with another."""
    return [
        Violation(
            invariant="crash", key="", detail=f"{process}'s runtime stopped: {entry['error']}"
        )
        for process, entries in sorted(journals.items())
        for entry in entries
        if entry["kind"] == "stopped" and not entry.get("inert", True)
    ]


def check_run(
    records: Mapping[int, Sequence[RecordedEvent]],
    journals: Mapping[str, list[dict[str, Any]]],
    *,
    departed: Iterable[str],
    final: Sequence[str],
    cuts: Sequence[Cut],
) -> tuple[list[Violation], int, LeaseCheck]:
    """Every violation of the run, the events checked, and what the ``lease`` check found."""
    checked = check_partitioned_log(
        records,
        TOOLS,
        DEFAULT_LIMITS,
        observations=_observations(journals, records),
        departed=departed,
    )
    leases = leases_lost(cuts, records)
    violations = [
        *checked.violations,
        *lost_appends(journals, records),
        *unfenced_writes(journals, records),
        *leases.violations,
        *stopped_otherwise(journals),
        *_rejoined(journals, final),
    ]
    return violations, checked.steps, leases
