"""Which calls of a turn judged by rules 7 on saw their response end, and how.

From rules 7 a call is validated at its own end event and may run only once the first end of
its response after that end was successful (rule 5 of the decider). The fold notes that end on
each call; a projection that shows whether a call may run notes it the same way, from the same
events: a call's end event, then its response's next end.

Pure: no trio, no storage.
"""

from __future__ import annotations

from ..events import (
    ByTurn,
    CallEnded,
    CallKey,
    Event,
    RecordedEvent,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    TurnRef,
    TurnStarted,
)
from ._routing import Handler


class ResponseEnds:
    """Per call of a rules 7 turn whose end event came: whether its response ended since, and
    whether successfully. A call is forgotten when it ends (``forget``), a turn when it is
    retired."""

    __slots__ = ("_ended", "_keys", "_turns", "_waiting")

    def __init__(self) -> None:
        self._turns: dict[TurnRef, None] = {}
        self._waiting: dict[ResponseRef, dict[CallKey, None]] = {}
        self._ended: dict[CallKey, bool] = {}
        # Every call noted, by turn: what a retirement forgets (a call that never ends).
        self._keys: ByTurn[CallKey] = ByTurn()

    def judges(self, key: CallKey) -> bool:
        """Whether the call's turn is judged by rules 7 on (a call validated at its end)."""
        return key.turn_ref in self._turns

    def ended_well(self, key: CallKey) -> bool | None:
        """How the first end of the call's response after its own end went: ``True``
        successfully, ``False`` otherwise, ``None`` while none came."""
        return self._ended.get(key)

    def started(self, recorded: RecordedEvent, event: TurnStarted) -> None:
        """A turn started (a handler of ``TurnStarted`` as it is)."""
        if event.rules >= 7:
            self._turns.setdefault(event.turn, None)

    def retired(self, turn: TurnRef) -> None:
        self._turns.pop(turn, None)
        for key in self._keys.take(turn):
            self._drop(key)

    def call_ended(self, event: CallEnded) -> None:
        """The call's own end event (the first counts; the caller skips calls that ended)."""
        key = event.key
        if key.turn_ref not in self._turns or key in self._ended:
            return
        waiting = self._waiting.setdefault(key.response_ref, {})
        if key not in waiting:
            waiting[key] = None
            self._keys.add(key)

    def response_ended(self, event: ResponseEnded) -> dict[CallKey, None]:
        """The calls for which this end is the one that counts, in the order they ended."""
        waiting = self._waiting.pop(event.response, None)
        if waiting is None:
            return {}
        completed = event.reason is ResponseEndReason.COMPLETED
        for key in waiting:
            self._ended[key] = completed
        return waiting

    def forget(self, key: CallKey) -> None:
        """The call ended: nothing of it is needed any more."""
        if self._drop(key):
            self._keys.remove(key)

    def _drop(self, key: CallKey) -> bool:
        """Forget the call; whether it was noted."""
        if self._ended.pop(key, None) is not None:
            return True
        waiting = self._waiting.get(key.response_ref)
        if waiting is None or key not in waiting:
            return False
        del waiting[key]
        if not waiting:
            del self._waiting[key.response_ref]
        return True


def routes_of_ends(
    kind: type[Event], ends: ResponseEnds, call_ended: Handler, response_ended: Handler
) -> tuple[Handler, ...] | None:
    """A projection's handlers for the events that say whether a call's response ended after
    it (``None`` for any other kind): the turn's rules, the call's end, the response's end."""
    if issubclass(kind, TurnStarted):
        return (ends.started,)
    if issubclass(kind, CallEnded):
        return (call_ended,)
    if issubclass(kind, ResponseEnded):
        return (response_ended,)
    return None
