"""The user-visible status: per call a cue a person may be shown, per response its text so far.

Cues are words for a person, never something a program should act on: an executor finds work in
the dispatch queue and claims it through the call's actor. The status is written to be honest
above all: it says an action may have run only once a dispatch was recorded, it says nothing was
done for a call that ended without one, and an outcome reported for a call without a matching
dispatch changes nothing.

When a turn is retired, the status forgets the cue (and claim) of every call of the turn whose cue
is no longer open, and the text counts of the turn's responses but those carrying an open call.
"""

from __future__ import annotations

import enum

from inert.events import (
    OUTCOME_TYPES,
    TRANSITION_TYPES,
    CallAwaitingConfirmation,
    CallCancelled,
    CallCollecting,
    CallConfirmed,
    CallDispatched,
    CallEnded,
    CallFailed,
    CallKey,
    CallStopRequested,
    CallTerminalCandidate,
    CallValidated,
    CancelReason,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    RecordedEvent,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    TextReceived,
    TurnRef,
    TurnRetired,
    TurnStarted,
)
from inert.projections._digest import JSON, Snapshot, key_json, response_json


class StatusCue(enum.StrEnum):
    """What a person may be told about one call."""

    PREPARING = "preparing request"
    NEEDS_CONFIRMATION = "needs your confirmation"
    READY = "about to run"
    RUNNING = "running"
    STOP_REQUESTED = "stop requested while running"
    DONE = "done"
    CANCELLED = "cancelled: nothing was done"
    DUPLICATE = "not run again: an identical call ran already"
    STOPPED = "stopped by an operator: nothing was done; retry later or hand off"
    FAILED = "failed: nothing was done; retry or hand off"
    ACTION_FAILED = "the action reported an error"
    RUN_STOPPED = "stopped while running: it may have done part of its work; check before retrying"
    UNKNOWN = "interrupted: it may or may not have run; check before retrying"


_BY_OPERATORS = frozenset(
    {CancelReason.RESPONSE_QUARANTINED, CancelReason.TOOL_DISABLED, CancelReason.TENANT_STOPPED}
)
"""Cancellations an operator's control caused: the person is told so, and what to do."""

# Cues after the call's end: no later decision may change them (a dispatched call must never
# read "nothing was done").
_ENDED = frozenset(
    {
        StatusCue.RUNNING,
        StatusCue.STOP_REQUESTED,
        StatusCue.DONE,
        StatusCue.ACTION_FAILED,
        StatusCue.RUN_STOPPED,
        StatusCue.UNKNOWN,
        StatusCue.CANCELLED,
        StatusCue.DUPLICATE,
        StatusCue.STOPPED,
        StatusCue.FAILED,
    }
)


class Status:
    """Per call key its cue, per response the number of text characters received."""

    __slots__ = (
        "_claims",
        "_cues",
        "_ends_seen",
        "_own_ends",
        "_position",
        "_rules_7",
        "_text",
        "_waiting",
    )

    def __init__(self) -> None:
        self._position = 0
        # Under rules 7 a call is validated at its own end: it is about to run only once the
        # first end of its response after that was successful.
        self._rules_7: set[TurnRef] = set()
        self._own_ends: set[CallKey] = set()
        self._ends_seen: dict[CallKey, bool] = {}
        self._waiting: set[CallKey] = set()
        self._cues: dict[CallKey, StatusCue] = {}
        # The claim a call was dispatched to: only its outcome may be shown.
        self._claims: dict[CallKey, str] = {}
        self._text: dict[ResponseRef, int] = {}

    @property
    def position(self) -> int:
        """The position of the last record applied (0 before any)."""
        return self._position

    def of(self, key: CallKey) -> StatusCue | None:
        """The cue of one call, or ``None`` if nothing may be shown about it."""
        return self._cues.get(key)

    def calls(self) -> dict[CallKey, StatusCue]:
        """The cue of every call, in the order the calls first appeared."""
        return dict(self._cues)

    def text_characters(self, response: ResponseRef) -> int:
        """The number of text characters the response has carried so far."""
        return self._text.get(response, 0)

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event; a record at or before ``position`` was folded already."""
        if recorded.position <= self._position:
            return
        self._position = recorded.position
        event = recorded.kept
        if event is None:
            return
        if isinstance(event, TextReceived):
            self._text[event.response] = self._text.get(event.response, 0) + event.characters
        elif isinstance(event, TurnStarted):
            if event.rules >= 7:
                self._rules_7.add(event.turn)
        elif isinstance(event, CallEnded):
            key = event.key
            if (
                key.turn_ref in self._rules_7
                and self._cues.get(key) not in _ENDED
                and key not in self._ends_seen
            ):
                self._own_ends.add(key)
        elif isinstance(event, ResponseEnded):
            completed = event.reason is ResponseEndReason.COMPLETED
            for key in [key for key in self._own_ends if key.response_ref == event.response]:
                self._own_ends.discard(key)
                self._ends_seen[key] = completed
                if completed and key in self._waiting:
                    self._waiting.discard(key)
                    if self._cues.get(key) is StatusCue.PREPARING:
                        self._cues[key] = StatusCue.READY
        elif isinstance(event, TRANSITION_TYPES):
            key = event.key
            current = self._cues.get(key)
            if current in _ENDED:
                return
            cue = _decided(event, current)
            if cue is StatusCue.READY and (
                key.turn_ref in self._rules_7 and self._ends_seen.get(key) is not True
            ):
                cue = StatusCue.PREPARING
                self._waiting.add(key)
            if cue is StatusCue.NEEDS_CONFIRMATION or cue in _ENDED:
                self._waiting.discard(key)
            if cue in _ENDED:
                self._own_ends.discard(key)
                self._ends_seen.pop(key, None)
            if cue is not None:
                self._cues[event.key] = cue
            if isinstance(event, CallDispatched):
                self._claims[event.key] = event.claim_id
        elif isinstance(event, CallStopRequested):
            if (
                self._claims.get(event.key) == event.claim_id
                and self._cues[event.key] is StatusCue.RUNNING
            ):
                self._cues[event.key] = StatusCue.STOP_REQUESTED
        elif isinstance(event, OUTCOME_TYPES):
            if self._claims.get(event.key) != event.claim_id:
                return
            cue = _reported(event, self._cues[event.key])
            if cue is not None:
                self._cues[event.key] = cue
        elif isinstance(event, TurnRetired):
            self._retired(event.turn)
            self._rules_7.discard(event.turn)
            self._own_ends = {key for key in self._own_ends if key.turn_ref != event.turn}
            self._waiting = {key for key in self._waiting if key.turn_ref != event.turn}
            self._ends_seen = {
                key: ended for key, ended in self._ends_seen.items() if key.turn_ref != event.turn
            }

    def _retired(self, turn: TurnRef) -> None:
        ended = {key for key, cue in self._cues.items() if key.turn_ref == turn and cue in _ENDED}
        self._cues = {key: cue for key, cue in self._cues.items() if key not in ended}
        self._claims = {key: claim for key, claim in self._claims.items() if key not in ended}
        # Of the retired turn, only open calls are left.
        carrying = {key.response_ref for key in self._cues}
        self._text = {
            response: characters
            for response, characters in self._text.items()
            if response.turn_ref != turn or response in carrying
        }

    def snapshot(self) -> Snapshot:
        """Position, cues and text counts as JSON, in the order they first appeared."""
        calls: list[JSON] = [
            {"key": key_json(key), "cue": cue.value} for key, cue in self._cues.items()
        ]
        text: list[JSON] = [
            {"response": response_json(response), "characters": characters}
            for response, characters in self._text.items()
        ]
        return {"position": self._position, "calls": calls, "text": text}


def _decided(
    event: CallCollecting
    | CallTerminalCandidate
    | CallValidated
    | CallAwaitingConfirmation
    | CallConfirmed
    | CallDispatched
    | CallCancelled
    | CallFailed,
    current: StatusCue | None,
) -> StatusCue | None:
    """The cue after a decision of the call's actor (``None``: unchanged)."""
    match event:
        case CallCollecting() | CallTerminalCandidate():
            return StatusCue.PREPARING
        case CallValidated(needs_confirmation=True) | CallAwaitingConfirmation():
            return StatusCue.NEEDS_CONFIRMATION
        case CallValidated():
            # A confirmation already asked for is never dropped by a later word.
            return None if current is StatusCue.NEEDS_CONFIRMATION else StatusCue.READY
        case CallConfirmed():
            return StatusCue.READY if current is StatusCue.NEEDS_CONFIRMATION else None
        case CallDispatched():
            return StatusCue.RUNNING
        case CallCancelled(reason=reason) if reason in _BY_OPERATORS:
            return StatusCue.STOPPED
        case CallCancelled(reason=CancelReason.DUPLICATE_OF):
            return StatusCue.DUPLICATE
        case CallCancelled():
            return StatusCue.CANCELLED
        case CallFailed():
            return StatusCue.FAILED


_NOT_REPORTED = (StatusCue.RUNNING, StatusCue.STOP_REQUESTED)


def _reported(
    event: ExecutionCompleted | ExecutionFailed | ExecutionStopped | ExecutionOutcomeUnknown,
    current: StatusCue,
) -> StatusCue | None:
    """The cue after the executor's report on a dispatched call (``None``: unchanged)."""
    # One outcome per dispatch: the first recorded stands, an unknown one included.
    match event:
        case ExecutionCompleted() if current in _NOT_REPORTED:
            return StatusCue.DONE
        case ExecutionFailed() if current in _NOT_REPORTED:
            return StatusCue.ACTION_FAILED
        case ExecutionStopped() if current in _NOT_REPORTED:
            return StatusCue.RUN_STOPPED
        case ExecutionOutcomeUnknown() if current in (
            StatusCue.RUNNING,
            StatusCue.STOP_REQUESTED,
        ):
            return StatusCue.UNKNOWN
    return None
