"""The runtime's requests to calls' actors (claims, confirmations, denials), each waiting for the
decisions that answer it.

A request is appended to the call's request stream under an event id of its own; once the log
hands it back, its position is the ``cause`` of every decision the actor makes of it. A request is
answered when its call has no decision of that cause still to write.
"""

from __future__ import annotations

import trio

from ..actors import CallFold
from ..events import DECISION_TYPES, Event, RecordedEvent


class Request:
    """A request addressed to a call's actor, and the decisions that answered it."""

    def __init__(self) -> None:
        self.position = 0
        self.answer: list[Event] = []
        self.done = trio.Event()


def _cause(event: Event) -> int | None:
    return event.cause if isinstance(event, DECISION_TYPES) else None


class Requests:
    """The requests waiting for their answers, by event id until they are in the log and by
    position from then on."""

    def __init__(self) -> None:
        self._appended: dict[str, Request] = {}
        self._recorded: dict[int, Request] = {}

    def open(self, event_id: str) -> Request:
        """A request about to be appended under ``event_id``."""
        request = self._appended[event_id] = Request()
        return request

    def close(self, event_id: str, request: Request) -> None:
        """Stop waiting for a request, answered or not."""
        self._appended.pop(event_id, None)
        if not request.done.is_set():
            self._recorded.pop(request.position, None)

    def heard(self, recorded: RecordedEvent, fold: CallFold) -> None:
        """Take a record the fold has folded: a request of ours now in the log, or a decision
        answering one."""
        request = self._appended.pop(recorded.event_id, None)
        if request is not None:
            request.position = recorded.position
            self._recorded[recorded.position] = request
        if not isinstance(recorded.event, DECISION_TYPES):
            return
        event = recorded.event
        answered = self._recorded.get(event.cause)
        if answered is None:
            return
        answered.answer.append(event)
        record = fold.records.get(event.key)
        if record is None or all(_cause(expected) != event.cause for expected in record.expected):
            del self._recorded[event.cause]
            answered.done.set()
