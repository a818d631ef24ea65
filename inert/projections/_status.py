"""The user-visible status: per call a cue a person may be shown, per response its text so far.

Cues are words for a person, never something a program should act on: an executor finds work in
the dispatch queue and claims it through the call's actor. The status is written to be honest
above all: it says an action may have run only once a dispatch was recorded, it says nothing was
done for a call that ended without one, and an outcome reported for a call without a matching
dispatch changes nothing.

What a person may be told about a turn matters while the turn goes on, not forever: when a turn is
retired (``TurnRetired``), the status forgets the cue of every call of the turn that is no longer
open (running, done, cancelled, failed and the rest), and the text counts of the turn's responses,
but for a response that carries a call still open. An open call, which a new call of the turn may
be, is kept as it is, and so is its response's text.
"""

from __future__ import annotations

import enum
from functools import partial

from ..events import (
    ByTurn,
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
    Event,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    RecordedEvent,
    ResponseEnded,
    ResponseRef,
    TextReceived,
    TurnRetired,
)
from ._digest import JSON, Snapshot, key_json, response_json
from ._response_ends import ResponseEnds, routes_of_ends
from ._routing import Handler, Routed


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

# Enum members as module constants: reading one off its class is a slow attribute lookup.
_PREPARING = StatusCue.PREPARING
_NEEDS_CONFIRMATION = StatusCue.NEEDS_CONFIRMATION
_READY = StatusCue.READY
_RUNNING = StatusCue.RUNNING
_STOP_REQUESTED = StatusCue.STOP_REQUESTED
_RUN_STOPPED = StatusCue.RUN_STOPPED
_DONE = StatusCue.DONE
_CANCELLED = StatusCue.CANCELLED
_STOPPED = StatusCue.STOPPED
_DUPLICATE = StatusCue.DUPLICATE
_FAILED = StatusCue.FAILED
_ACTION_FAILED = StatusCue.ACTION_FAILED
_UNKNOWN = StatusCue.UNKNOWN

# Cues before the call's end; every other cue comes after it, and no later decision may change
# it (a dispatched call must never read "nothing was done").
_OPEN = frozenset({_PREPARING, _NEEDS_CONFIRMATION, _READY})
# Cues of a run whose outcome is not known yet: the executor's report replaces them.
_RUNNING_CUES = frozenset({_RUNNING, _STOP_REQUESTED})


Decision = (
    CallCollecting
    | CallTerminalCandidate
    | CallValidated
    | CallAwaitingConfirmation
    | CallConfirmed
    | CallDispatched
    | CallCancelled
    | CallFailed
)


class Status(Routed):
    """Per call key its cue, per response the number of text characters received."""

    __slots__ = (
        "_call_turns",
        "_calls",
        "_claims",
        "_response_ends",
        "_text",
        "_text_turns",
        "_waiting",
    )

    def __init__(self) -> None:
        super().__init__()
        self._calls: dict[CallKey, StatusCue] = {}
        # The claim each call was dispatched to, apart: most calls never have one, and only
        # the outcome of this claim may be shown.
        self._claims: dict[CallKey, str] = {}
        # Under rules 7, calls validated (and confirmed where needed) before their response
        # ended: still "preparing request" until it ends well.
        self._response_ends = ResponseEnds()
        self._waiting: dict[CallKey, None] = {}
        self._text: dict[ResponseRef, int] = {}
        # The same calls and responses by turn, for a retirement to find its own.
        self._call_turns: ByTurn[CallKey] = ByTurn()
        self._text_turns: ByTurn[ResponseRef] = ByTurn()

    def of(self, key: CallKey) -> StatusCue | None:
        """The cue of one call, or ``None`` if nothing may be shown about it."""
        return self._calls.get(key)

    def calls(self) -> dict[CallKey, StatusCue]:
        """The cue of every call, in the order the calls first appeared."""
        return dict(self._calls)

    def text_characters(self, response: ResponseRef) -> int:
        """The number of text characters the response has carried so far."""
        return self._text.get(response, 0)

    def snapshot(self) -> Snapshot:
        """Position, cues and text counts as JSON, in the order they first appeared."""
        calls: list[JSON] = [
            {"key": key_json(key), "cue": cue.value} for key, cue in self._calls.items()
        ]
        text: list[JSON] = [
            {"response": response_json(response), "characters": characters}
            for response, characters in self._text.items()
        ]
        return {"position": self._position, "calls": calls, "text": text}

    # --- folding ---------------------------------------------------------------------------

    def _handlers(self, kind: type[Event], redacted: bool) -> tuple[Handler, ...]:
        if issubclass(kind, TextReceived):
            return (self._text_received,)
        ends = routes_of_ends(kind, self._response_ends, self._call_ended, self._response_ended)
        if ends is not None:
            return ends
        if issubclass(kind, CallCollecting | CallTerminalCandidate):
            return (partial(self._decided, _PREPARING),)
        if issubclass(kind, CallValidated):
            return (self._validated,)
        if issubclass(kind, CallAwaitingConfirmation):
            return (partial(self._decided, _NEEDS_CONFIRMATION),)
        if issubclass(kind, CallConfirmed):
            return (self._confirmed,)
        if issubclass(kind, CallDispatched):
            return (self._dispatched,)
        if issubclass(kind, CallCancelled):
            return (self._cancelled,)
        if issubclass(kind, CallFailed):
            return (partial(self._decided, _FAILED),)
        if issubclass(kind, CallStopRequested):
            return (self._stop_requested,)
        if issubclass(kind, ExecutionCompleted):
            return (partial(self._reported, _DONE),)
        if issubclass(kind, ExecutionFailed):
            return (partial(self._reported, _ACTION_FAILED),)
        if issubclass(kind, ExecutionStopped):
            return (partial(self._reported, _RUN_STOPPED),)
        if issubclass(kind, ExecutionOutcomeUnknown):
            return (self._outcome_unknown,)
        if issubclass(kind, TurnRetired):
            return (self._retired,)
        return ()

    def _text_received(self, recorded: RecordedEvent, event: TextReceived) -> None:
        response, text = event.response, self._text
        characters = text.get(response)
        if characters is None:
            text[response] = event.characters
            self._text_turns.add(response)
        else:
            text[response] = characters + event.characters

    def _call_ended(self, recorded: RecordedEvent, event: CallEnded) -> None:
        cue = self._calls.get(event.key)
        if cue is None or cue in _OPEN:
            self._response_ends.call_ended(event)

    def _response_ended(self, recorded: RecordedEvent, event: ResponseEnded) -> None:
        ends = self._response_ends
        for key in ends.response_ended(event):
            if key in self._waiting and ends.ended_well(key):
                del self._waiting[key]
                if self._calls.get(key) is _PREPARING:
                    self._calls[key] = _READY

    def _about_to_run(self, key: CallKey) -> None:
        """A call a claim may run once its response ended well (at once before rules 7)."""
        ends = self._response_ends
        if ends.judges(key) and not ends.ended_well(key):
            self._calls[key] = _PREPARING
            self._waiting[key] = None
        else:
            self._calls[key] = _READY

    def _retired(self, recorded: RecordedEvent, event: TurnRetired) -> None:
        self._response_ends.retired(event.turn)
        turn, calls, claims, call_turns = event.turn, self._calls, self._claims, self._call_turns
        # The turn's responses that carry an open call, by their id.
        speaking: set[str] = set()
        for key in call_turns.take(turn):
            if calls[key] in _OPEN:
                call_turns.add(key)
                speaking.add(key.response)
            else:
                del calls[key]
                claims.pop(key, None)
        text, text_turns = self._text, self._text_turns
        for response in text_turns.take(turn):
            if response.response in speaking:
                text_turns.add(response)
            else:
                del text[response]

    def _open(self, key: CallKey, cue: StatusCue) -> None:
        self._calls[key] = cue
        self._call_turns.add(key)

    # After a decision of the call's actor.

    def _decided(self, cue: StatusCue, recorded: RecordedEvent, event: Decision) -> None:
        was = self._calls.get(event.key)
        if was is None:
            self._open(event.key, cue)
        elif was in _OPEN:
            self._calls[event.key] = cue
        if cue not in _OPEN or cue is _NEEDS_CONFIRMATION:
            self._waiting.pop(event.key, None)
        if cue not in _OPEN:
            self._response_ends.forget(event.key)

    def _validated(self, recorded: RecordedEvent, event: CallValidated) -> None:
        if event.needs_confirmation:
            self._decided(_NEEDS_CONFIRMATION, recorded, event)
            return
        key = event.key
        was = self._calls.get(key)
        if was is None:
            self._open(key, _READY)
            self._about_to_run(key)
        elif was is _PREPARING or was is _READY:
            # Not once a confirmation was asked for: no later word drops it.
            self._about_to_run(key)

    def _confirmed(self, recorded: RecordedEvent, event: CallConfirmed) -> None:
        if self._calls.get(event.key) is _NEEDS_CONFIRMATION:
            self._about_to_run(event.key)

    def _dispatched(self, recorded: RecordedEvent, event: CallDispatched) -> None:
        key = event.key
        self._waiting.pop(key, None)
        self._response_ends.forget(key)
        was = self._calls.get(key)
        if was is None:
            self._open(key, _RUNNING)
        elif was in _OPEN:
            self._calls[key] = _RUNNING
        else:
            return
        self._claims[key] = event.claim_id

    def _cancelled(self, recorded: RecordedEvent, event: CallCancelled) -> None:
        reason = event.reason
        if reason is CancelReason.DUPLICATE_OF:
            cue = _DUPLICATE
        else:
            cue = _STOPPED if reason in _BY_OPERATORS else _CANCELLED
        self._decided(cue, recorded, event)

    # After the executor's report on a dispatched call: one outcome per dispatch, the first
    # recorded stands, an unknown one included.

    def _dispatched_to(
        self,
        event: CallStopRequested
        | ExecutionCompleted
        | ExecutionFailed
        | ExecutionStopped
        | ExecutionOutcomeUnknown,
    ) -> StatusCue | None:
        """The call's cue if it was dispatched to the event's claim."""
        if self._claims.get(event.key) != event.claim_id:
            return None
        return self._calls.get(event.key)

    def _stop_requested(self, recorded: RecordedEvent, event: CallStopRequested) -> None:
        if self._dispatched_to(event) is _RUNNING:
            self._calls[event.key] = _STOP_REQUESTED

    def _reported(
        self,
        cue: StatusCue,
        recorded: RecordedEvent,
        event: ExecutionCompleted | ExecutionFailed | ExecutionStopped,
    ) -> None:
        if self._dispatched_to(event) in _RUNNING_CUES:
            self._calls[event.key] = cue

    def _outcome_unknown(self, recorded: RecordedEvent, event: ExecutionOutcomeUnknown) -> None:
        was = self._dispatched_to(event)
        if was is _RUNNING or was is _STOP_REQUESTED:
            self._calls[event.key] = _UNKNOWN
