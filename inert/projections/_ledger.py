"""The assembly ledger: per call key one row of the seed's columns, and its transitions.

The ledger is what an operator reads to learn what became of a call: how much argument data it
collected, which terminal event closed it, how parsing and validation went, what the dispatch
decision was and what the executor reported. Rows follow the decisions of the call's actor (its
word is final, never second-guessed); while a call is still collecting, its row also counts the
argument fragments of the response stream. Fragments are counted and measured, never kept: no
row and no transition holds an argument value, only counts, sizes, digests and reasons.

A long-running ledger must not grow with every call it ever saw, including keys that only ever
drew rejections (anyone who can feed a stream can make those up). So when a turn is retired
(``TurnRetired``: no live call for the horizon), the ledger forgets every call of the turn whose
row is not live, that is every call with no row or a row that ended (dispatched, cancelled or
failed); a live row, which a new call of the turn may have opened since, is kept as it is. Apart
from that, a finished call's row ages out ``horizon`` after it finished, and so does a call that
only ever drew rejections (its turn may never be retired: it may never have been started),
``horizon`` after its last one, unless it opens meanwhile.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from datetime import datetime, timedelta
from functools import partial
from operator import attrgetter

from ..events import (
    NOTE_TYPES,
    OUTCOME_TYPES,
    TERMINAL_PHASES,
    ArgumentsAppended,
    ByTurn,
    CallCollecting,
    CallEnded,
    CallKey,
    CallReady,
    CallStopRequested,
    EditRefused,
    Event,
    EventRejected,
    EventsDiscarded,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionInputDenied,
    ExecutionInputGiven,
    ExecutionInputRequested,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    ExecutionTaskCreated,
    Phase,
    RecordedEvent,
    ResponseEnded,
    TurnRetired,
)
from ._calls import (
    RULES,
    Call,
    Decision,
    Rule,
    Step,
    discarded_detail,
    edit_refused_detail,
    rejected_detail,
)
from ._digest import JSON, Snapshot, key_json
from ._response_ends import ResponseEnds, routes_of_ends
from ._routing import Handler, Routed
from ._rows import LedgerRow, Outcome, Transition

DEFAULT_LEDGER_HORIZON = timedelta(days=30)
"""How long the row and history of a finished call are kept, by the times the log recorded."""


class Ledger(Routed):
    """Per call key the latest row and the list of its transitions, folded in log order.

    A call's row and history age out ``horizon`` after the call finished (cancelled, failed, or
    its outcome reported), measured by the times the log recorded: so a replay drops exactly
    what the live ledger dropped, and a long-running ledger stays bounded. ``None`` keeps
    every row until its turn is retired.
    """

    __slots__ = (
        "_calls",
        "_due",
        "_finished",
        "_horizon",
        "_response_ends",
        "_turns",
    )

    def __init__(self, *, horizon: timedelta | None = DEFAULT_LEDGER_HORIZON) -> None:
        super().__init__()
        self._horizon = horizon
        # Rows are read in the order the calls got them, and histories in the order of their
        # first transitions: each call keeps the position, not a second index of calls.
        self._calls: dict[CallKey, Call] = {}
        # The same calls by turn, for a retirement to find its own.
        self._turns: ByTurn[CallKey] = ByTurn()
        # Finished calls in the order they finished, with the log's time they age out at, and
        # that time of the first of them: a record before it ages nothing out. Ordered by a
        # list of its own, so that the first is found at once however many left before it.
        self._finished: OrderedDict[CallKey, datetime] = OrderedDict()
        self._due: datetime | None = None
        # Under rules 7 a call validated at its own end is ready only once its response ended
        # well after it: until then its row's dispatch reads ``await_response``.
        self._response_ends = ResponseEnds()

    def rows(self) -> list[LedgerRow]:
        """The latest row of every call, in the order the calls got their rows."""
        with_rows = [call for call in self._calls.values() if call.state is not None]
        return [call.read() for call in sorted(with_rows, key=_opened_at)]

    def row(self, key: CallKey) -> LedgerRow | None:
        """The latest row of one call, or ``None`` if it has none."""
        call = self._calls.get(key)
        if call is None or call.state is None:
            return None
        return call.read()

    def history(self, key: CallKey) -> list[Transition]:
        """The transitions of one call in log order (empty if nothing was recorded for it)."""
        call = self._calls.get(key)
        return [] if call is None else _transitions(call.steps())

    def histories(self) -> dict[CallKey, list[Transition]]:
        """The transitions of every call, in the order of the calls' first transitions."""
        with_history = [call for call in self._calls.values() if call.history is not None]
        return {
            call.key: _transitions(call.steps()) for call in sorted(with_history, key=_first_step)
        }

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event; a record at or before ``position`` was folded already."""
        # Skipping what was applied makes resuming a read at the checkpoint harmless.
        position = recorded.position
        if position <= self._position:
            return
        self._position = position
        due = self._due
        if due is not None and due < recorded.recorded_at:
            self._age_out(recorded.recorded_at)
        event = recorded.event
        for handler in self._routes[type(event)]:
            handler(recorded, event)

    def snapshot(self) -> Snapshot:
        """Position, rows and histories as JSON, in the order the calls first appeared."""
        rows: list[JSON] = [row.to_json() for row in self.rows()]
        histories: list[JSON] = [
            {"key": key_json(key), "transitions": [step.to_json() for step in transitions]}
            for key, transitions in self.histories().items()
        ]
        return {"position": self._position, "rows": rows, "histories": histories}

    # --- folding ---------------------------------------------------------------------------

    def _handlers(self, kind: type[Event], redacted: bool) -> tuple[Handler, ...]:
        if issubclass(kind, ArgumentsAppended):
            # A redacted fragment's size is gone; the decision that ended its call has it.
            return () if redacted else (self._fragment,)
        for rule in RULES:
            if issubclass(kind, rule.kind):
                return (partial(self._decision, rule),)
        if issubclass(kind, EventRejected):
            return (self._rejected,)
        if issubclass(kind, CallStopRequested):
            return (self._stop_requested,)
        if issubclass(kind, CallReady):
            return (self._ready,)
        if issubclass(kind, EditRefused):
            return (self._edit_refused,)
        if issubclass(kind, EventsDiscarded):
            return (self._discarded,)
        if issubclass(kind, OUTCOME_TYPES):
            return (self._outcome,)
        if issubclass(kind, NOTE_TYPES):
            return (self._note,)
        if issubclass(kind, TurnRetired):
            return (self._retired,)
        ends = routes_of_ends(kind, self._response_ends, self._call_ended, self._response_ended)
        if ends is not None:
            return ends
        return ()

    def _call_ended(self, recorded: RecordedEvent, event: CallEnded) -> None:
        call = self._calls.get(event.key)
        if call is None or call.state not in TERMINAL_PHASES:
            self._response_ends.call_ended(event)

    def _response_ended(self, recorded: RecordedEvent, event: ResponseEnded) -> None:
        ends = self._response_ends
        for key in ends.response_ended(event):
            call = self._calls.get(key)
            if call is None or call.state is None or call.dispatch != "await_response":
                continue
            if ends.ended_well(key):
                call.dispatch = "ready"
                call.public = None

    def _call(self, key: CallKey) -> Call:
        call = self._calls[key] = Call(key)
        self._turns.add(key)
        return call

    def _fragment(self, recorded: RecordedEvent, event: ArgumentsAppended) -> None:
        call = self._calls.get(event.key) or self._call(event.key)
        state = call.state
        # A fragment for a call past collecting is the actor's to reject or fail on; it is
        # never part of the call's data. One before the call's row may still be (the actor's
        # answer to the opening can land after the first fragments).
        if state is not None and state is not Phase.COLLECTING:
            return
        if call.taken is None:
            call.receive()
        size = len(event.data)
        if event.offset is not None:
            size = call.cover(event.offset, size)
        call.add(recorded.position, event.fragments, size)
        call.public = None

    def _decision(self, rule: Rule, recorded: RecordedEvent, event: Decision) -> None:
        call = self._calls.get(event.key) or self._call(event.key)
        if call.state in TERMINAL_PHASES:
            # Terminal is absorbing: the entry shows the anomaly, the row keeps the truth.
            detail = f"{rule.detail(event)}; ignored: the call is {call.state}"
            _record(call, recorded, call.state, detail)
            return
        if call.state is None:
            # The opening's answer can land after fragments that follow the opening: they all
            # count, as do those of a collecting row up to this decision.
            tool = event.tool if isinstance(event, CallCollecting) else ""
            call.open_row(tool, recorded.position)
            self._finished.pop(call.key, None)
        rule.change(call, event)
        state = call.state
        ends = self._response_ends
        if call.dispatch == "ready" and ends.judges(call.key) and not ends.ended_well(call.key):
            call.dispatch = "await_response"
        elif state in TERMINAL_PHASES:
            ends.forget(call.key)
        if state is not Phase.COLLECTING and call.taken is not None:
            call.stop_receiving()
        if state in (Phase.CANCELLED, Phase.FAILED):
            self._finish(call, recorded.recorded_at)
        call.public = None
        _record(call, recorded, state, rule.detail(event))

    def _finish(self, call: Call, at: datetime) -> None:
        if self._horizon is None:
            return
        finished = self._finished
        finished.pop(call.key, None)
        finished[call.key] = at + self._horizon
        self._due = next(iter(finished.values()))

    def _age_out(self, now: datetime) -> None:
        finished = self._finished
        while finished:
            key, due = next(iter(finished.items()))
            if due >= now:
                self._due = due
                return
            del finished[key]
            self._turns.remove(key)
            self._forget(key)
        self._due = None

    def _retired(self, recorded: RecordedEvent, event: TurnRetired) -> None:
        self._response_ends.retired(event.turn)
        turns, calls, finished = self._turns, self._calls, self._finished
        for key in turns.take(event.turn):
            state = calls[key].state
            if state is not None and state not in TERMINAL_PHASES:
                turns.add(key)
                continue
            finished.pop(key, None)
            self._forget(key)
        # The first to age out may have been forgotten.
        self._due = next(iter(finished.values()), None)

    def _forget(self, key: CallKey) -> None:
        del self._calls[key]

    def _rejected(self, recorded: RecordedEvent, event: EventRejected) -> None:
        call = self._calls.get(event.key) or self._call(event.key)
        if event.rejected_type == ArgumentsAppended.TAG and call.taken is not None:
            call.drop(event.cause)
            call.public = None
        if call.state is None:
            # A call never opened (whatever was addressed to it was rejected, as for a made-up
            # turn) ages out like a finished one, unless it opens meanwhile.
            self._finish(call, recorded.recorded_at)
        _record(call, recorded, call.state, rejected_detail(event))

    def _discarded(self, recorded: RecordedEvent, event: EventsDiscarded) -> None:
        call = self._calls.get(event.key) or self._call(event.key)
        if call.state is None:
            self._finish(call, recorded.recorded_at)
        _record(call, recorded, call.state, discarded_detail(event))

    def _edit_refused(self, recorded: RecordedEvent, event: EditRefused) -> None:
        call = self._calls.get(event.key) or self._call(event.key)
        _record(call, recorded, call.state, edit_refused_detail(event))

    def _ready(self, recorded: RecordedEvent, event: CallReady) -> None:
        call = self._calls.get(event.key) or self._call(event.key)
        _record(call, recorded, call.state, f"ready until {event.expires_at.isoformat()}")

    def _stop_requested(self, recorded: RecordedEvent, event: CallStopRequested) -> None:
        call = self._calls.get(event.key) or self._call(event.key)
        detail = f"stop requested while running: {event.reason.value}, claim {event.claim_id}"
        if call.state is not Phase.DISPATCHED or call.claim != event.claim_id:
            _record(call, recorded, call.state, f"{detail}; ignored: no dispatch of this claim")
            return
        if call.outcome is not None:
            # Decided while the call ran; its outcome was recorded first.
            _record(call, recorded, call.state, f"{detail}; outcome {call.outcome} already")
            return
        call.outcome = "stop_requested"
        call.public = None
        _record(call, recorded, call.state, detail)

    def _note(
        self,
        recorded: RecordedEvent,
        event: ExecutionTaskCreated
        | ExecutionInputRequested
        | ExecutionInputGiven
        | ExecutionInputDenied,
    ) -> None:
        """A note of a run on its way: shown in the call's history, the row unchanged."""
        call = self._calls.get(event.key) or self._call(event.key)
        detail = f"claim {event.claim_id}: "
        match event:
            case ExecutionTaskCreated(task_id=task_id):
                detail += f"runs as task {task_id}"
            case ExecutionInputRequested():
                detail += (
                    f"asks its principal for input, request {event.request_digest}"
                    f" ({event.size} bytes), until {event.expires_at.isoformat()}"
                )
            case ExecutionInputGiven():
                detail += (
                    f"input {event.input_digest} ({event.size} bytes) given by"
                    f" {event.principal} for request {event.request_digest}"
                )
            case ExecutionInputDenied():
                detail += f"input denied by {event.principal} for request {event.request_digest}"
        _record(call, recorded, call.state, detail)

    def _outcome(
        self,
        recorded: RecordedEvent,
        event: ExecutionCompleted | ExecutionFailed | ExecutionStopped | ExecutionOutcomeUnknown,
    ) -> None:
        call = self._calls.get(event.key) or self._call(event.key)
        outcome: Outcome
        match event:
            case ExecutionCompleted():
                outcome, detail = "completed", f"claim {event.claim_id}"
            case ExecutionFailed(error=error):
                outcome, detail = (
                    "failed",
                    f"claim {event.claim_id}" + (f": {error}" if error else ""),
                )
            case ExecutionStopped():
                outcome, detail = "stopped", f"claim {event.claim_id}: stopped by its executor"
            case ExecutionOutcomeUnknown(task_id=task_id):
                outcome, detail = "unknown", f"claim {event.claim_id}: no outcome was recorded"
                if task_id is not None:
                    detail += f"; its run was task {task_id}"
        if call.state is not Phase.DISPATCHED or call.claim != event.claim_id:
            # An outcome never makes a call look as if it ran: only its dispatch does.
            _record(call, recorded, call.state, f"{detail}; ignored: no dispatch of this claim")
            return
        if call.outcome is not None and call.outcome != "stop_requested":
            # One outcome per dispatch: the first recorded stands, an unknown one included. A
            # later one, which the runtime refuses, reaches the log only from a process buried
            # while it still ran: shown, and ignored.
            had = "its outcome is unknown" if call.outcome == "unknown" else f"it {call.outcome}"
            _record(call, recorded, call.state, f"{detail}; ignored: {had} already")
            return
        call.outcome = outcome
        call.public = None
        self._finish(call, recorded.recorded_at)
        _record(call, recorded, call.state, detail)


def _record(call: Call, recorded: RecordedEvent, state: Phase | None, detail: str) -> None:
    call.record((recorded.position, recorded.event_type, state, detail))


_opened_at = attrgetter("opened_at")
_first_step = attrgetter("first_step")


def _transitions(steps: Iterable[Step]) -> list[Transition]:
    return [
        Transition(position=position, event_type=event_type, state=state, detail=detail)
        for position, event_type, state, detail in steps
    ]
