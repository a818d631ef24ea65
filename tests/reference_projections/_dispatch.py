"""The dispatch queue: the calls an executor may claim now, and those waiting for a person.

A call enters the queue when its actor records it validated and, where its tool asks for it,
confirmed; it leaves when it is dispatched, cancelled or failed. The queue is a view for
executors to find work, never a permission: a claim still goes through the call's actor, which
checks everything again in log order. Calls waiting for confirmation are kept apart, in the order
they started waiting, so that a person can be asked about them.

When a turn is retired, the queue forgets which of the turn's calls ended; its ready and waiting
calls are live and stay.
"""

from __future__ import annotations

from inert.events import (
    CallAwaitingConfirmation,
    CallCancelled,
    CallConfirmed,
    CallDispatched,
    CallFailed,
    CallKey,
    CallValidated,
    RecordedEvent,
    TurnRetired,
)
from inert.projections._digest import JSON, Snapshot, key_json

_ADMITTING = (CallValidated, CallAwaitingConfirmation, CallConfirmed)


class DispatchQueue:
    """Ready call keys in the order they became ready, and the keys awaiting confirmation."""

    __slots__ = ("_awaiting", "_ended", "_position", "_ready")

    def __init__(self) -> None:
        self._position = 0
        # Dicts as ordered sets: insertion order is the order of the log.
        self._ready: dict[CallKey, None] = {}
        self._awaiting: dict[CallKey, None] = {}
        self._ended: set[CallKey] = set()

    @property
    def position(self) -> int:
        """The position of the last record applied (0 before any)."""
        return self._position

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

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event; a record at or before ``position`` was folded already."""
        if recorded.position <= self._position:
            return
        self._position = recorded.position
        event = recorded.kept
        if event is None:
            return
        if isinstance(event, TurnRetired):
            self._ended = {key for key in self._ended if key.turn_ref != event.turn}
            return
        if isinstance(event, CallDispatched | CallCancelled | CallFailed):
            self._ready.pop(event.key, None)
            self._awaiting.pop(event.key, None)
            self._ended.add(event.key)
            return
        # Terminal is absorbing: nothing recorded after a call's end puts it back.
        if not isinstance(event, _ADMITTING) or event.key in self._ended:
            return
        key = event.key
        if isinstance(event, CallConfirmed):
            # Only a call seen waiting becomes ready by a confirmation: a confirmation alone
            # never puts a call in front of an executor.
            if key in self._awaiting:
                del self._awaiting[key]
                self._ready[key] = None
        elif isinstance(event, CallAwaitingConfirmation) or event.needs_confirmation:
            # Waiting for a person outranks any earlier readiness: the safer reading wins.
            self._ready.pop(key, None)
            self._awaiting.setdefault(key, None)
        elif key not in self._awaiting:
            self._ready[key] = None

    def snapshot(self) -> Snapshot:
        """Position, ready keys and awaiting keys as JSON, in queue order."""
        ready: list[JSON] = [key_json(key) for key in self._ready]
        awaiting: list[JSON] = [key_json(key) for key in self._awaiting]
        return {"position": self._position, "ready": ready, "awaiting": awaiting}
