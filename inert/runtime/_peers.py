"""Several runtime processes on one log: who is alive, who owns which turn, who claimed what.

Each process of a shared log has a name (``open_runtime(process=...)``) and appends a
``ProcessHeartbeat`` every quarter of the lease time. A turn is leased to the process that
started it (``TurnLeased`` beside ``TurnStarted``); only the owner's actors decide for the turn's
calls, with the lease stream's version among their expected versions, and every other process
folds the same decisions from the log. A process whose last heartbeat is older than the lease
time, by the log's clock, is dead, and so is one that said it left (``ProcessLeft``, as it
closes): each survivor tries to lease its turns at the lease stream's
version (one wins), and the winner cancels what the dead process was still streaming
(``connection_lost``) and carries on with the rest. The calls the dead process's executors had
claimed, and had not reported on, get an unknown outcome. Silence is judged by the log's clock:
on PostgreSQL the server's (asked again before a turn is taken), so that the processes' own
clocks may disagree by any amount; the lease time must exceed a process's longest pause, and
what its clock gains or loses between two of its heartbeats.

Pure bookkeeping: the runtime does the writing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ..events import (
    OUTCOME_TYPES,
    CallDispatched,
    ClaimRequested,
    Event,
    EventRejected,
    ProcessHeartbeat,
    ProcessLeft,
    RecordedEvent,
    TurnLeased,
    TurnRef,
)

DEFAULT_LEASE_TIME = 10.0
"""Seconds without a heartbeat after which a process is taken for dead."""


class Peers:
    """What the log says about the processes sharing it."""

    def __init__(self, process: str, lease_time: timedelta) -> None:
        self.process = process
        self.lease_time = lease_time
        self._seen: dict[str, datetime] = {}
        self._claimers: dict[str, str] = {}
        # Claims not answered yet, by the position of their request: a refused claim leaves
        # nothing behind (executors racing for a call would otherwise add one entry each).
        self._asked: dict[int, str] = {}
        self._buried: set[str] = set()
        # Processes whose last word was that they left: dead without waiting for the lease.
        self._left: set[str] = set()
        self.gained: list[TurnRef] = []

    def heard(self, recorded: RecordedEvent, live: bool) -> None:
        event: Event | None = recorded.kept
        match event:
            case ProcessHeartbeat(process=process):
                self._seen[process] = recorded.recorded_at
                self._left.discard(process)
                self._buried.discard(process)
            case ProcessLeft(process=process) if process != self.process:
                self._left.add(process)
            case TurnLeased(turn=turn, owner=owner, previous=previous):
                self._seen.setdefault(owner, recorded.recorded_at)
                if live and owner == self.process and previous is not None:
                    self.gained.append(turn)
            case ClaimRequested(claim_id=claim_id, process=process) if process is not None:
                self._claimers[claim_id] = process
                self._asked[recorded.position] = claim_id
            case CallDispatched(cause=cause):
                self._asked.pop(cause, None)
            case EventRejected(cause=cause, rejected_type=ClaimRequested.TAG):
                refused = self._asked.pop(cause, None)
                if refused is not None:
                    self._claimers.pop(refused, None)
            case _ if isinstance(event, OUTCOME_TYPES):
                self._claimers.pop(event.claim_id, None)

    def forget_actions(self) -> None:
        """Forget what this process did with what it heard (the processes it reported dead,
        the turns it gained), as a process that only replayed the log knows nothing of it."""
        self._buried.clear()
        self.gained.clear()

    def claimer(self, claim_id: str) -> str | None:
        """The process whose executor made the claim, if it named one."""
        return self._claimers.get(claim_id)

    def spare(self, process: str) -> None:
        """A process taken for dead is alive after all (the log holds a recent heartbeat of
        it): it is judged again from its heartbeats."""
        self._buried.discard(process)

    def newly_dead(self, now: datetime) -> list[str]:
        """Processes silent for longer than the lease time, or that left, not reported dead
        before."""
        dead = [
            process
            for process, seen in self._seen.items()
            if process != self.process
            and process not in self._buried
            and (process in self._left or now - seen > self.lease_time)
        ]
        self._buried.update(dead)
        return dead
