"""The dispatch queue: the calls an executor may claim now, and those waiting for a person.

A call enters the queue when its actor records it validated and, where its tool asks for it,
confirmed, and (in a turn judged by rules 7 on, where a call is validated at its own end) once
the first end of its response, after the call's own end, was successful; it leaves when it is
dispatched, cancelled or failed. The queue is a view for executors to find work, never a
permission: a claim still goes through the call's actor, which checks everything again in log
order. Calls waiting for confirmation are kept apart, in the order
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
    CallEnded,
    CallFailed,
    CallKey,
    CallValidated,
    Event,
    RecordedEvent,
    ResponseEnded,
    ResponseRef,
    TurnRetired,
)
from ._digest import JSON, Snapshot, key_json
from ._response_ends import ResponseEnds, routes_of_ends
from ._routing import Handler, Routed


class DispatchQueue(Routed):
    """Ready call keys in the order they became ready, and the keys awaiting confirmation."""

    __slots__ = (
        "_admitted",
        "_awaiting",
        "_ended",
        "_ended_turns",
        "_pending",
        "_ready",
        "_response_ends",
    )

    def __init__(self) -> None:
        super().__init__()
        # Insertion order is the order of the log. Each ready call has the number of its
        # admission, increasing in that order, so that an executor asks only for the calls
        # admitted since it last looked (``ready_after``), never for the whole queue again.
        self._ready: dict[CallKey, int] = {}
        self._admitted = 0
        self._awaiting: dict[CallKey, None] = {}
        self._ended: set[CallKey] = set()
        self._ended_turns: ByTurn[CallKey] = ByTurn()
        self._response_ends = ResponseEnds()
        # Validated (and confirmed where needed) under rules 7, waiting for their response's
        # end, by response.
        self._pending: dict[ResponseRef, dict[CallKey, None]] = {}

    def ready(self) -> list[CallKey]:
        """The calls that may be claimed, in the order they became ready."""
        return list(self._ready)

    @property
    def admitted(self) -> int:
        """The number of the latest admission to the ready calls (0 before the first)."""
        return self._admitted

    def ready_after(self, admitted: int) -> list[CallKey]:
        """The ready calls admitted after the admission numbered ``admitted``, in order: at a
        cost of the calls returned, however many wait in the queue."""
        fresh: list[CallKey] = []
        for key, number in reversed(self._ready.items()):
            if number <= admitted:
                break
            fresh.append(key)
        fresh.reverse()
        return fresh

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
        ends = routes_of_ends(kind, self._response_ends, self._call_ended, self._response_ended)
        if ends is not None:
            return ends
        return ()

    def _ended_call(
        self, recorded: RecordedEvent, event: CallDispatched | CallCancelled | CallFailed
    ) -> None:
        key = event.key
        self._ready.pop(key, None)
        self._awaiting.pop(key, None)
        self._unpend(key)
        self._response_ends.forget(key)
        ended = self._ended
        if key not in ended:
            ended.add(key)
            self._ended_turns.add(key)

    def _retired(self, recorded: RecordedEvent, event: TurnRetired) -> None:
        ended = self._ended
        for key in self._ended_turns.take(event.turn):
            ended.remove(key)
        self._response_ends.retired(event.turn)

    def _call_ended(self, recorded: RecordedEvent, event: CallEnded) -> None:
        if event.key not in self._ended:
            self._response_ends.call_ended(event)

    def _response_ended(self, recorded: RecordedEvent, event: ResponseEnded) -> None:
        ended = self._response_ends.response_ended(event)
        pending = self._pending.get(event.response)
        if not ended or pending is None:
            return
        # Every call waiting here ended before this end: ready now if it went well; if not,
        # its failure follows and until then it stays out of the queue.
        for key in [key for key in pending if key in ended]:
            if self._response_ends.ended_well(key):
                self._unpend(key)
                self._make_ready(key)

    def _admit(self, key: CallKey) -> None:
        ends = self._response_ends
        if not ends.judges(key) or ends.ended_well(key):
            self._make_ready(key)
        elif ends.ended_well(key) is None:
            self._pending.setdefault(key.response_ref, {})[key] = None

    def _make_ready(self, key: CallKey) -> None:
        if key not in self._ready:
            self._admitted += 1
            self._ready[key] = self._admitted

    def _unpend(self, key: CallKey) -> None:
        response = key.response_ref
        pending = self._pending.get(response)
        if pending is not None and key in pending:
            del pending[key]
            if not pending:
                del self._pending[response]

    # Terminal is absorbing: nothing recorded after a call's end puts it back.

    def _confirmed(self, recorded: RecordedEvent, event: CallConfirmed) -> None:
        key = event.key
        # Only a call seen waiting becomes ready by a confirmation: a confirmation alone never
        # puts a call in front of an executor.
        if key not in self._ended and key in self._awaiting:
            del self._awaiting[key]
            self._admit(key)

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
            self._admit(key)

    def _wait(self, key: CallKey) -> None:
        # Waiting for a person outranks any earlier readiness: the safer reading wins.
        self._ready.pop(key, None)
        self._unpend(key)
        self._awaiting.setdefault(key, None)
