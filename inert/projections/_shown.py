"""A call as a person on call reads it, on the command line and in the console alike: its
stage (its state and its dispatch together), the log's times in one format, and which calls a
filter keeps (by identity, stage, state, tool and time).

Pure: it reads ledger rows and times, and holds nothing.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from attrs import frozen

from ..events import CallKey, ConfigurationError, Phase
from ._rows import LedgerRow


class Stage(enum.StrEnum):
    """Where a call is, as a person on call reads it: its state and its dispatch together."""

    ASSEMBLING = "assembling"
    WAITING = "waiting"
    READY = "ready"
    RUNNING = "running"
    STOPPING = "stop requested"
    COMPLETED = "completed"
    STOPPED = "stopped"
    OUTCOME_FAILED = "outcome failed"
    OUTCOME_UNKNOWN = "outcome unknown"
    CANCELLED = "cancelled"
    FAILED = "failed"


STAGE_MARKS = {
    Stage.ASSEMBLING: "…",
    Stage.WAITING: "?",
    Stage.READY: "○",
    Stage.RUNNING: "▶",
    Stage.STOPPING: "◼",
    Stage.COMPLETED: "✓",
    Stage.STOPPED: "■",
    Stage.OUTCOME_FAILED: "✗",
    Stage.OUTCOME_UNKNOWN: "‽",
    Stage.CANCELLED: "⊘",
    Stage.FAILED: "✗",
}
"""A mark per stage, shown before its name: the stages tell apart without colour."""

_OUTCOME_STAGES = {
    "stop_requested": Stage.STOPPING,
    "completed": Stage.COMPLETED,
    "failed": Stage.OUTCOME_FAILED,
    "stopped": Stage.STOPPED,
    "unknown": Stage.OUTCOME_UNKNOWN,
}

STATES = tuple(phase.value for phase in Phase if phase is not Phase.ABSENT)
"""The states a ledger row can be in, as a filter names them."""


def stage_of(row: LedgerRow) -> Stage:
    """The stage of a call's row."""
    match row.state:
        case Phase.COLLECTING | Phase.TERMINAL_CANDIDATE:
            return Stage.ASSEMBLING
        case Phase.VALIDATED:
            if row.dispatch == "await_response":
                # Validated at its own end (rules 7): its response is still streaming.
                return Stage.ASSEMBLING
            return Stage.WAITING if row.dispatch == "await_confirmation" else Stage.READY
        case Phase.DISPATCHED:
            return Stage.RUNNING if row.outcome is None else _OUTCOME_STAGES[row.outcome]
        case Phase.CANCELLED:
            return Stage.CANCELLED
    return Stage.FAILED


class FilterError(ConfigurationError):
    """A filter names a stage, state or time that is none: the message lists the valid ones."""


def stage_named(word: str) -> Stage:
    """The stage a filter names by the word the pages show (``stop requested``; a hyphen or an
    underscore in place of the space is read alike)."""
    try:
        return Stage(word.strip().replace("-", " ").replace("_", " "))
    except ValueError:
        valid = ", ".join(stage.value for stage in Stage)
        raise FilterError(f"no stage is called {word!r}; the stages are: {valid}") from None


def state_named(word: str) -> Phase:
    """The state a filter names (a ledger row's ``state``)."""
    if word not in STATES:
        raise FilterError(
            f"no state is called {word!r}; the states are: {', '.join(STATES)}"
            " (the words the pages show, such as waiting or running, are stages)"
        )
    return Phase(word)


def shown_time(moment: datetime) -> str:
    """A time of the log as every page and table shows it: ISO 8601 in UTC, to the second
    (``2026-12-07T12:34:56Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def time_named(text: str) -> datetime:
    """The time a filter names: ISO 8601, in UTC where it names no offset (a date alone is its
    midnight)."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise FilterError(
            f"{text!r} is no time: give ISO 8601, for instance 2026-12-07T12:34:56Z"
            " (UTC where no offset is given)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@frozen(kw_only=True)
class RowFilter:
    """Which calls a ledger shows, each condition where given: the tenant, the turn, any one
    identity of the call (conversation, turn, response, item or call: ``id``), its stage, its
    state, its tool, and a time range it was seen in (first seen at or before ``until``, last
    changed at or after ``since``)."""

    tenant: str | None = None
    turn: str | None = None
    id: str | None = None
    stage: Stage | None = None
    state: Phase | None = None
    tool: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    @property
    def timed(self) -> bool:
        """Whether it asks when a call was seen."""
        return self.since is not None or self.until is not None

    def keeps(
        self,
        key: CallKey,
        row: LedgerRow | None,
        *,
        first: datetime | None = None,
        changed: datetime | None = None,
    ) -> bool:
        """Whether it keeps a call: its key, its row (``None`` where it has none) and when it
        was first seen and last changed (needed where it asks for a time range)."""
        if self.tenant is not None and key.tenant != self.tenant:
            return False
        if self.turn is not None and key.turn != self.turn:
            return False
        if self.id is not None and self.id not in (
            key.conversation,
            key.turn,
            key.response,
            key.item,
            key.call,
        ):
            return False
        if self.since is not None and (changed is None or changed < self.since):
            return False
        if self.until is not None and (first is None or first > self.until):
            return False
        if self.stage is None and self.state is None and self.tool is None:
            return True
        if row is None:
            return False
        return (
            (self.stage is None or stage_of(row) is self.stage)
            and (self.state is None or row.state == self.state)
            and (self.tool is None or row.tool == self.tool)
        )


EVERY_ROW = RowFilter()
