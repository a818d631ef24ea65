"""The dispatch queue: the calls an executor may claim now, and those waiting for a person.

A call enters the queue when its actor records it validated and, where its tool asks for it,
confirmed; it leaves when it is dispatched, cancelled or failed. The queue is a view for
executors to find work, never a permission: a claim still goes through the call's actor, which
checks everything again in log order. Calls waiting for confirmation are kept apart, in the order
they started waiting, so that a person can be asked about them.

The queue remembers which calls ended, so that nothing recorded after a call's end puts it back;
kept forever, that memory would grow with every call the runtime ever saw. A retired turn
(``TurnRetired``) lets the queue forget its ended calls: the runtime retires a turn only once it
has had no live call for the horizon, and from then on judges its calls as never started, so no
late decision of an ended call is left for the memory to stop. A ready or waiting call of the
turn is live and stays.
"""

from __future__ import annotations

from ..events import (
    ByTurn,
    CallAwaitingConfirmation,
    CallCancelled,
    CallConfirmed,
    CallDispatched,
    CallFailed,
    CallKey,
    CallValidated,
    Event,
    RecordedEvent,
    TurnRetired,
)
from ._digest import JSON, Snapshot, key_json
from ._routing import Handler, Routed


class DispatchQueue(Routed):
    """Ready call keys in the order they became ready, and the keys awaiting confirmation."""

    __slots__ = ("_awaiting", "_ended", "_ended_turns", "_ready")

    def __init__(self) -> None:
        super().__init__()
        # Dicts as ordered sets: insertion order is the order of the log.
        self._ready: dict[CallKey, None] = {}
        self._awaiting: dict[CallKey, None] = {}
        self._ended: set[CallKey] = set()
        self._ended_turns: ByTurn[CallKey] = ByTurn()

    def ready(self) -> list[CallKey]:
        """The calls that may be claimed, in the order they became ready."""
        return list(self._ready)

    def awaiting(self) -> list[CallKey]:
        """The validated calls waiting for their principal's confirmation, oldest first."""
        return list(self._awaiting)

    def __contains__(self, key: object) -> bool:
        """Whether the call is ready to be claimed (a call awaiting confirmation is not)."""
        return key in self._ready

    def __len__(self) -> int:
        """The number of calls ready to be claimed."""
        return len(self._ready)

    def snapshot(self) -> Snapshot:
        """Position, ready keys and awaiting keys as JSON, in queue order."""
        ready: list[JSON] = [key_json(key) for key in self._ready]
        awaiting: list[JSON] = [key_json(key) for key in self._awaiting]
        return {"position": self._position, "ready": ready, "awaiting": awaiting}

    # --- folding ---------------------------------------------------------------------------

    def _handlers(self, kind: type[Event], redacted: bool) -> tuple[Handler, ...]:
        if issubclass(kind, CallDispatched | CallCancelled | CallFailed):
            return (self._ended_call,)
        if issubclass(kind, CallConfirmed):
            return (self._confirmed,)
        if issubclass(kind, CallAwaitingConfirmation):
            return (self._awaiting_confirmation,)
        if issubclass(kind, CallValidated):
            return (self._validated,)
        if issubclass(kind, TurnRetired):
            return (self._retired,)
        return ()

    def _ended_call(
        self, recorded: RecordedEvent, event: CallDispatched | CallCancelled | CallFailed
    ) -> None:
        key = event.key
        self._ready.pop(key, None)
        self._awaiting.pop(key, None)
        ended = self._ended
        if key not in ended:
            ended.add(key)
            self._ended_turns.add(key)

    def _retired(self, recorded: RecordedEvent, event: TurnRetired) -> None:
        ended = self._ended
        for key in self._ended_turns.take(event.turn):
            ended.remove(key)

    # Terminal is absorbing: nothing recorded after a call's end puts it back.

    def _confirmed(self, recorded: RecordedEvent, event: CallConfirmed) -> None:
        key = event.key
        # Only a call seen waiting becomes ready by a confirmation: a confirmation alone never
        # puts a call in front of an executor.
        if key not in self._ended and key in self._awaiting:
            del self._awaiting[key]
            self._ready[key] = None

    def _awaiting_confirmation(
        self, recorded: RecordedEvent, event: CallAwaitingConfirmation
    ) -> None:
        if event.key not in self._ended:
            self._wait(event.key)

    def _validated(self, recorded: RecordedEvent, event: CallValidated) -> None:
        key = event.key
        if key in self._ended:
            return
        if event.needs_confirmation:
            self._wait(key)
        elif key not in self._awaiting:
            self._ready[key] = None

    def _wait(self, key: CallKey) -> None:
        # Waiting for a person outranks any earlier readiness: the safer reading wins.
        self._ready.pop(key, None)
        self._awaiting.setdefault(key, None)
