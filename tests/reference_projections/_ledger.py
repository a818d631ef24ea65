"""The assembly ledger: per call key one row of the seed's columns, and its transitions.

The ledger is what an operator reads to learn what became of a call: how much argument data it
collected, which terminal event closed it, how parsing and validation went, what the dispatch
decision was and what the executor reported. Rows follow the decisions of the call's actor (its
word is final, never second-guessed); while a call is still collecting, its row also counts the
argument fragments of the response stream. Fragments are counted and measured, never kept: no
row and no transition holds an argument value, only counts, sizes, digests and reasons.

When a turn is retired, the ledger forgets every call of the turn that has no row or a row that
ended (dispatched, cancelled or failed); a live row is kept as it is.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal

import attrs
from attrs import frozen

from inert.events import (
    OUTCOME_TYPES,
    TRANSITION_TYPES,
    ArgumentsAppended,
    CallAwaitingConfirmation,
    CallCancelled,
    CallCollecting,
    CallConfirmed,
    CallDispatched,
    CallEnded,
    CallFailed,
    CallKey,
    CallReady,
    CallStopRequested,
    CallTerminalCandidate,
    CallValidated,
    DiscardReason,
    EditRefused,
    EventRejected,
    EventsDiscarded,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    FailReason,
    RecordedEvent,
    Redacted,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    TurnRef,
    TurnRetired,
    TurnStarted,
)
from inert.projections._digest import JSON, Snapshot, key_json

State = Literal[
    "collecting", "terminal_candidate", "validated", "dispatched", "cancelled", "failed"
]
Dispatch = Literal["inert", "await_confirmation", "await_response", "ready", "dispatched", "reject"]
Outcome = Literal["completed", "failed", "stopped", "unknown", "stop_requested"]

TERMINAL_STATES: frozenset[str] = frozenset({"dispatched", "cancelled", "failed"})

_VALIDATION_FAILURES = frozenset(
    {
        FailReason.SCHEMA_INVALID,
        FailReason.BUSINESS_INVALID,
        FailReason.PERMISSION_DENIED,
        FailReason.VALIDATION_TIMEOUT,
        FailReason.VALIDATOR_ERROR,
        FailReason.UNKNOWN_TOOL,
    }
)

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


@frozen(kw_only=True)
class LedgerRow:
    """The latest state of one call, in the seed's columns; never an argument value."""

    tenant: str
    conversation: str
    turn: str
    response: str
    item: str
    call: str
    tool: str
    state: State
    fragments: int
    bytes: int
    terminal_event: str | None = None
    terminal_reason: str | None = None
    parse: str | None = None
    validation: str | None = None
    dispatch: Dispatch = "inert"
    outcome: Outcome | None = None

    @classmethod
    def opened(cls, key: CallKey, *, tool: str, fragments: int, size: int) -> LedgerRow:
        """The row of a call that has just appeared in the ledger."""
        return cls(
            tenant=key.tenant,
            conversation=key.conversation,
            turn=key.turn,
            response=key.response,
            item=key.item,
            call=key.call,
            tool=tool,
            state="collecting",
            fragments=fragments,
            bytes=size,
        )

    @property
    def key(self) -> CallKey:
        """The call key the row belongs to."""
        return CallKey(
            tenant=self.tenant,
            conversation=self.conversation,
            turn=self.turn,
            response=self.response,
            item=self.item,
            call=self.call,
        )

    def to_json(self) -> Snapshot:
        """The row as a JSON object, in column order."""
        return attrs.asdict(self)


@frozen(kw_only=True)
class Transition:
    """One recorded step in a call's history: what was decided or reported, and why."""

    position: int
    event_type: str
    state: State | None
    detail: str

    def to_json(self) -> Snapshot:
        """The transition as a JSON object."""
        return attrs.asdict(self)


def terminal_label(terminal: TerminalRef) -> str:
    """How the ledger names a provider terminal event: by sequence where there is one."""
    if terminal.sequence is not None:
        return f"sequence {terminal.sequence}"
    return f"digest {terminal.digest}"


class _Received:
    """Fragment counts and sizes of one call not yet at its terminal candidate, by position.

    Kept per position because the actor's answer to a fragment comes later in the log: a
    fragment it rejects (a duplicate delivery, a stale turn) is taken back out. A fragment with
    an offset counts the bytes it adds to the ranges seen, so that a delivery chunked otherwise
    is not counted twice.
    """

    __slots__ = ("by_position", "covered", "fragments", "size")

    def __init__(self) -> None:
        self.by_position: dict[int, tuple[int, int]] = {}
        self.covered: list[tuple[int, int]] = []
        self.fragments = 0
        self.size = 0

    def cover(self, offset: int, length: int) -> int:
        """Take the range in; how many of its bytes no range seen held."""
        start, stop = offset, offset + length
        covered = self.covered
        if not covered or start >= covered[-1][1]:
            # In order, the usual case: the range extends the last one or follows it.
            if covered and start == covered[-1][1]:
                covered[-1] = (covered[-1][0], stop)
            elif length:
                covered.append((start, stop))
            return length
        seen = sum(max(0, min(stop, high) - max(start, low)) for low, high in covered)
        merged: list[tuple[int, int]] = []
        for low, high in sorted([*covered, (start, stop)]):
            if merged and low <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], high))
            else:
                merged.append((low, high))
        self.covered = merged
        return length - seen

    def add(self, position: int, fragments: int, size: int) -> None:
        self.by_position[position] = (fragments, size)
        self.fragments += fragments
        self.size += size

    def drop(self, position: int) -> None:
        fragments, size = self.by_position.pop(position, (0, 0))
        self.fragments -= fragments
        self.size -= size


DEFAULT_LEDGER_HORIZON = timedelta(days=30)
"""How long the row and history of a finished call are kept, by the times the log recorded."""


class Ledger:
    """Per call key the latest row and the list of its transitions, folded in log order.

    A call's row and history age out ``horizon`` after the call finished (cancelled, failed, or
    its outcome reported), measured by the times the log recorded: so a replay drops exactly
    what the live ledger dropped, and a long-running ledger stays bounded. ``None`` keeps
    every row.
    """

    __slots__ = (
        "_claims",
        "_ends_seen",
        "_finished",
        "_histories",
        "_horizon",
        "_own_ends",
        "_position",
        "_received",
        "_rows",
        "_rules_7",
    )

    def __init__(self, *, horizon: timedelta | None = DEFAULT_LEDGER_HORIZON) -> None:
        self._horizon = horizon
        # Under rules 7 a row is ready only once the first end of its response after the
        # call's own end was successful.
        self._rules_7: set[TurnRef] = set()
        self._own_ends: set[CallKey] = set()
        self._ends_seen: dict[CallKey, bool] = {}
        # Finished calls in the order they finished, with the log's time of it.
        self._finished: dict[CallKey, datetime] = {}
        self._position = 0
        self._rows: dict[CallKey, LedgerRow] = {}
        self._histories: dict[CallKey, list[Transition]] = {}
        self._received: dict[CallKey, _Received] = {}
        # An outcome counts only for the claim that dispatched the call: at most one exists.
        self._claims: dict[CallKey, str] = {}

    @property
    def position(self) -> int:
        """The position of the last record applied (0 before any)."""
        return self._position

    def rows(self) -> list[LedgerRow]:
        """The latest row of every call, in the order the calls first appeared."""
        return [self._current(key, row) for key, row in self._rows.items()]

    def row(self, key: CallKey) -> LedgerRow | None:
        """The latest row of one call, or ``None`` if it has none."""
        row = self._rows.get(key)
        return None if row is None else self._current(key, row)

    def history(self, key: CallKey) -> list[Transition]:
        """The transitions of one call in log order (empty if nothing was recorded for it)."""
        return list(self._histories.get(key, ()))

    def histories(self) -> dict[CallKey, list[Transition]]:
        """The transitions of every call, in the order the calls first appeared."""
        return {key: list(transitions) for key, transitions in self._histories.items()}

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event; a record at or before ``position`` was folded already."""
        # Skipping what was applied makes resuming a read at the checkpoint harmless.
        if recorded.position <= self._position:
            return
        self._position = recorded.position
        self._age_out(recorded.recorded_at)
        event = recorded.kept
        if event is None:
            return
        if isinstance(event, ArgumentsAppended):
            # A redacted fragment's size is gone; the decision that ended its call has it.
            if not isinstance(recorded.event, Redacted):
                self._fragment(event, recorded.position)
        elif isinstance(event, TRANSITION_TYPES):
            self._decision(event, recorded)
        elif isinstance(event, EventRejected):
            self._rejected(event, recorded)
        elif isinstance(event, EventsDiscarded):
            self._discarded(event, recorded)
        elif isinstance(event, CallStopRequested):
            self._stop_requested(event, recorded)
        elif isinstance(event, CallReady):
            row = self._rows.get(event.key)
            detail = f"ready until {event.expires_at.isoformat()}"
            self._record(event.key, recorded, None if row is None else row.state, detail)
        elif isinstance(event, EditRefused):
            row = self._rows.get(event.key)
            why = f"{event.reason.value}: {event.detail}" if event.detail else event.reason.value
            detail = (
                f"edit of {event.size} bytes with confirmation {event.confirmation_event_id}"
                f" refused ({why})"
            )
            self._record(event.key, recorded, None if row is None else row.state, detail)
        elif isinstance(event, OUTCOME_TYPES):
            self._outcome(event, recorded)
        elif isinstance(event, TurnRetired):
            self._retired(event.turn)
            self._rules_7.discard(event.turn)
            self._own_ends = {key for key in self._own_ends if key.turn_ref != event.turn}
            self._ends_seen = {
                key: ended for key, ended in self._ends_seen.items() if key.turn_ref != event.turn
            }
        elif isinstance(event, TurnStarted):
            if event.rules >= 7:
                self._rules_7.add(event.turn)
        elif isinstance(event, CallEnded):
            key = event.key
            row = self._rows.get(key)
            if (
                key.turn_ref in self._rules_7
                and (row is None or row.state not in TERMINAL_STATES)
                and key not in self._ends_seen
            ):
                self._own_ends.add(key)
        elif isinstance(event, ResponseEnded):
            completed = event.reason is ResponseEndReason.COMPLETED
            for key in [key for key in self._own_ends if key.response_ref == event.response]:
                self._own_ends.discard(key)
                self._ends_seen[key] = completed
                row = self._rows.get(key)
                if completed and row is not None and row.dispatch == "await_response":
                    self._rows[key] = attrs.evolve(row, dispatch="ready")

    def snapshot(self) -> Snapshot:
        """Position, rows and histories as JSON, in the order the calls first appeared."""
        rows: list[JSON] = [row.to_json() for row in self.rows()]
        histories: list[JSON] = [
            {"key": key_json(key), "transitions": [step.to_json() for step in transitions]}
            for key, transitions in self._histories.items()
        ]
        return {"position": self._position, "rows": rows, "histories": histories}

    # --- folding ---------------------------------------------------------------------------

    def _record(
        self, key: CallKey, recorded: RecordedEvent, state: State | None, detail: str
    ) -> None:
        transition = Transition(
            position=recorded.position, event_type=recorded.event_type, state=state, detail=detail
        )
        self._histories.setdefault(key, []).append(transition)

    def _fragment(self, event: ArgumentsAppended, position: int) -> None:
        key = event.key
        row = self._rows.get(key)
        # A fragment for a call past collecting is the actor's to reject or fail on; it is
        # never part of the call's data. One before the call's row may still be (the actor's
        # answer to the opening can land after the first fragments).
        if row is not None and row.state != "collecting":
            return
        received = self._received.setdefault(key, _Received())
        size = len(event.data)
        if event.offset is not None:
            size = received.cover(event.offset, size)
        received.add(position, event.fragments, size)

    def _current(self, key: CallKey, row: LedgerRow) -> LedgerRow:
        # A collecting row's counts are read from what was received when the row is read, not
        # copied into it on every fragment.
        received = self._received.get(key)
        if received is None or row.state != "collecting":
            return row
        return attrs.evolve(row, fragments=received.fragments, bytes=received.size)

    def _decision(self, event: Decision, recorded: RecordedEvent) -> None:
        key = event.key
        detail = _describe(event)
        row = self._rows.get(key)
        if row is not None:
            row = self._current(key, row)
        if row is not None and row.state in TERMINAL_STATES:
            # Terminal is absorbing: the entry shows the anomaly, the row keeps the truth.
            self._record(key, recorded, row.state, f"{detail}; ignored: the call is {row.state}")
            return
        if row is None:
            tool = event.tool if isinstance(event, CallCollecting) else ""
            # The opening's answer can land after fragments that follow the opening: they all
            # count.
            fragments, size = self._counted(key)
            row = LedgerRow.opened(key, tool=tool, fragments=fragments, size=size)
            self._finished.pop(key, None)
        row = self._evolve(row, event)
        if (
            row.dispatch == "ready"
            and key.turn_ref in self._rules_7
            and self._ends_seen.get(key) is not True
        ):
            row = attrs.evolve(row, dispatch="await_response")
        if row.state in TERMINAL_STATES:
            self._own_ends.discard(key)
            self._ends_seen.pop(key, None)
        if row.state != "collecting":
            self._received.pop(key, None)
        if row.state in ("cancelled", "failed"):
            self._finish(key, recorded.recorded_at)
        self._rows[key] = row
        self._record(key, recorded, row.state, detail)

    def _finish(self, key: CallKey, at: datetime) -> None:
        self._finished.pop(key, None)
        self._finished[key] = at

    def _age_out(self, now: datetime) -> None:
        if self._horizon is None:
            return
        cutoff = now - self._horizon
        finished = self._finished
        while finished:
            key, at = next(iter(finished.items()))
            if at >= cutoff:
                return
            del finished[key]
            for table in (self._rows, self._histories, self._received, self._claims):
                table.pop(key, None)

    def _retired(self, turn: TurnRef) -> None:
        tables = (self._rows, self._histories, self._received, self._claims, self._finished)
        held: set[CallKey] = set().union(*tables)
        for key in held:
            row = self._rows.get(key)
            if key.turn_ref != turn or (row is not None and row.state not in TERMINAL_STATES):
                continue
            for table in tables:
                table.pop(key, None)

    def _counted(self, key: CallKey) -> tuple[int, int]:
        received = self._received.get(key)
        return (0, 0) if received is None else (received.fragments, received.size)

    def _evolve(self, row: LedgerRow, event: Decision) -> LedgerRow:
        match event:
            case CallCollecting(tool=tool):
                return attrs.evolve(row, tool=tool, state="collecting", dispatch="inert")
            case CallTerminalCandidate():
                return attrs.evolve(
                    row,
                    state="terminal_candidate",
                    fragments=event.fragments,
                    bytes=event.size,
                    terminal_event=terminal_label(event.terminal),
                    parse="ok",
                    dispatch="inert",
                )
            case CallValidated(needs_confirmation=needs_confirmation):
                return attrs.evolve(
                    row,
                    state="validated",
                    validation="ok, needs confirmation" if needs_confirmation else "ok",
                    dispatch="await_confirmation" if needs_confirmation else "ready",
                )
            case CallAwaitingConfirmation():
                return attrs.evolve(row, state="validated", dispatch="await_confirmation")
            case CallConfirmed():
                # As in the dispatch queue: only a call seen waiting is made ready by it.
                ready = row.dispatch == "await_confirmation"
                return attrs.evolve(row, dispatch="ready") if ready else row
            case CallDispatched(claim_id=claim_id):
                self._claims[row.key] = claim_id
                return attrs.evolve(row, state="dispatched", dispatch="dispatched")
            case CallCancelled(reason=reason):
                return self._ended(row, "cancelled", reason.value, event)
            case CallFailed(reason=reason, detail=detail):
                row = self._ended(row, "failed", reason.value, event)
                parse = _parse_problem(reason, detail)
                if parse is not None:
                    row = attrs.evolve(row, parse=parse)
                if reason in _VALIDATION_FAILURES:
                    row = attrs.evolve(row, validation=reason.value)
                return row

    def _ended(
        self, row: LedgerRow, state: State, reason: str, event: CallCancelled | CallFailed
    ) -> LedgerRow:
        if row.state == "collecting":
            # The decision's own counts, not the fragments seen here: retention may have
            # redacted those.
            row = attrs.evolve(row, fragments=event.fragments or 0, bytes=event.size or 0)
        return attrs.evolve(row, state=state, terminal_reason=reason, dispatch="reject")

    def _rejected(self, event: EventRejected, recorded: RecordedEvent) -> None:
        key = event.key
        row = self._rows.get(key)
        received = self._received.get(key)
        if event.rejected_type == ArgumentsAppended.TAG and received is not None:
            received.drop(event.cause)
        if row is None:
            self._finish(key, recorded.recorded_at)
        self._record(key, recorded, None if row is None else row.state, _describe(event))

    def _discarded(self, event: EventsDiscarded, recorded: RecordedEvent) -> None:
        key = event.key
        row = self._rows.get(key)
        if row is None:
            self._finish(key, recorded.recorded_at)
        self._record(key, recorded, None if row is None else row.state, _discarded(event))

    def _stop_requested(self, event: CallStopRequested, recorded: RecordedEvent) -> None:
        key = event.key
        row = self._rows.get(key)
        detail = f"stop requested while running: {event.reason.value}, claim {event.claim_id}"
        if row is None or row.state != "dispatched" or self._claims.get(key) != event.claim_id:
            state = None if row is None else row.state
            self._record(key, recorded, state, f"{detail}; ignored: no dispatch of this claim")
        elif row.outcome is not None:
            self._record(key, recorded, row.state, f"{detail}; outcome {row.outcome} already")
        else:
            self._rows[key] = attrs.evolve(row, outcome="stop_requested")
            self._record(key, recorded, row.state, detail)

    def _outcome(
        self,
        event: ExecutionCompleted | ExecutionFailed | ExecutionStopped | ExecutionOutcomeUnknown,
        recorded: RecordedEvent,
    ) -> None:
        key = event.key
        row = self._rows.get(key)
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
        if row is None or row.state != "dispatched" or self._claims.get(key) != event.claim_id:
            # An outcome never makes a call look as if it ran: only its dispatch does.
            state = None if row is None else row.state
            self._record(key, recorded, state, f"{detail}; ignored: no dispatch of this claim")
            return
        if row.outcome is not None and row.outcome != "stop_requested":
            # One outcome per dispatch: the first recorded stands, an unknown one included.
            had = "its outcome is unknown" if row.outcome == "unknown" else f"it {row.outcome}"
            self._record(key, recorded, row.state, f"{detail}; ignored: {had} already")
            return
        self._rows[key] = attrs.evolve(row, outcome=outcome)
        self._finish(key, recorded.recorded_at)
        self._record(key, recorded, row.state, detail)


def _parse_problem(reason: FailReason, detail: str) -> str | None:
    """The parse problem code of a failure, if the failure is a parse failure."""
    # The decider's parse failures start their detail with the problem code; a byte limit
    # passed while fragments were still arriving is not a parse and names no code.
    if reason is FailReason.MALFORMED_ARGUMENTS:
        return detail.split(maxsplit=1)[0].rstrip(":") if detail.strip() else reason.value
    if reason is FailReason.TOO_LARGE and detail.startswith(FailReason.TOO_LARGE.value):
        return FailReason.TOO_LARGE.value
    return None


def _discarded(event: EventsDiscarded) -> str:
    counts = f"{event.events} events ({event.fragments} fragments, {event.size} bytes)"
    if event.reason is DiscardReason.CALL_ENDED:
        return f"{counts} discarded: the call had ended"
    return (
        f"{counts} of {event.calls} calls opened after this one passed the limit on live calls"
        " discarded: the response opens no call any more"
    )


def _describe(event: Decision | EventRejected) -> str:
    """The detail of a transition: identities, counts, digests and reasons, never values."""
    match event:
        case CallCollecting(tool=tool):
            return f"tool {tool}"
        case CallTerminalCandidate():
            return (
                f"{terminal_label(event.terminal)}, {event.fragments} fragments,"
                f" {event.size} bytes, arguments {event.arguments_digest}"
            )
        case CallValidated():
            confirmation = ", needs confirmation" if event.needs_confirmation else ""
            edited = (
                f", edited by {event.edited_by} at confirmation from {event.edited_from}"
                f" ({event.edited_size} bytes)"
                if event.edited_by
                else ""
            )
            return (
                f"tool {event.tool} {event.tool_digest},"
                f" arguments {event.arguments_digest}{confirmation}{edited}"
            )
        case CallAwaitingConfirmation(expires_at=expires_at):
            return f"until {expires_at.isoformat()}"
        case CallConfirmed():
            return f"by {event.principal}, confirmation {event.confirmation_event_id}"
        case CallDispatched():
            return f"claim {event.claim_id} by {event.executor}"
        case CallCancelled(reason=reason, duplicate_of=CallKey() as earlier):
            return f"{reason.value} {earlier.stream}"
        case CallCancelled(reason=reason):
            return reason.value
        case CallFailed(reason=reason, detail=detail):
            return f"{reason.value}: {detail}" if detail else reason.value
        case EventRejected():
            text = f"{event.rejected_type} {event.rejected_event_id} {event.reason.value}"
            return f"{text}: {event.detail}" if event.detail else text
