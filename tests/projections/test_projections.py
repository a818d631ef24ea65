"""The projections: ledger rows and histories, the dispatch queue, status cues, the state digest.

Records are built directly (no log): a ``Script`` numbers them as the log would and writes each
decision with the position of the input it answers, the way a call's actor does.
"""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta

import attrs
import pytest

from inert.events import (
    ArgumentsAppended,
    CallAwaitingConfirmation,
    CallCancelled,
    CallCollecting,
    CallConfirmed,
    CallDispatched,
    CallEnded,
    CallFailed,
    CallKey,
    CallOpened,
    CallTerminalCandidate,
    CallValidated,
    CancelReason,
    ClaimRequested,
    ConfirmationGiven,
    Event,
    EventRejected,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    FailReason,
    OfferedTool,
    RecordedEvent,
    Redacted,
    RejectReason,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    TextReceived,
    TurnCancelled,
    TurnRef,
    TurnRetired,
    TurnStarted,
)
from inert.projections import (
    DEFAULT_LEDGER_HORIZON,
    DispatchQueue,
    Ledger,
    LedgerRow,
    Projection,
    Projections,
    Status,
    StatusCue,
    Transition,
    state_digest,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
KEY = CallKey(
    tenant="acme", conversation="conv-1", turn="turn-1", response="resp-1", item="0", call="call_0"
)
TOOL = OfferedTool(name="send_mail", digest="sha256:tool")
VALIDATED_AT_RESPONSE_END = 6
"""The last rules under which a call is validated when its response ends."""
PRINCIPAL = "alice"
# Argument bytes that must never surface in a projection: distinctive enough to find anywhere.
MARKER = "QX-ARGUMENT-VALUE-7f3a"
ARGUMENTS = f'{{"to": "{MARKER}"}}'.encode()
TERMINAL = TerminalRef(sequence=7)


def other_key(call: str, response: str = "resp-1") -> CallKey:
    """A key of the same turn as ``KEY``, differing in call id (and maybe response)."""
    return attrs.evolve(KEY, call=call, response=response)


def stream_of(event: Event) -> str:
    """The stream a writer would append the event to."""
    match event:
        case CallCollecting() | CallTerminalCandidate() | CallValidated():
            return event.key.stream
        case CallAwaitingConfirmation() | CallConfirmed() | CallDispatched():
            return event.key.stream
        case CallCancelled() | CallFailed() | EventRejected():
            return event.key.stream
        case ClaimRequested() | ConfirmationGiven():
            return event.key.request_stream
        case (
            ExecutionCompleted()
            | ExecutionFailed()
            | ExecutionStopped()
            | ExecutionOutcomeUnknown()
        ):
            return event.key.request_stream
        case CallOpened() | ArgumentsAppended() | CallEnded():
            return event.key.response_ref.stream
        case ResponseEnded() | TextReceived():
            return event.response.stream
        case TurnStarted() | TurnCancelled() | TurnRetired():
            return event.turn.stream
    raise AssertionError(f"no stream for {type(event).__name__}")


def record(position: int, event: Event, *, stream: str = "test", version: int = 1) -> RecordedEvent:
    """The envelope the log would hand back for ``event`` at ``position``."""
    return RecordedEvent(
        position=position,
        event_id=f"event-{position}",
        stream=stream,
        version=version,
        recorded_at=T0 + timedelta(seconds=position),
        event_type=event.TAG,
        schema_version=1,
        trace=None,
        event=event,
    )


def redacted(recorded: RecordedEvent) -> RecordedEvent:
    """The record as retention leaves it: the payload replaced by a length and a digest."""
    return attrs.evolve(recorded, event=Redacted(length=42, digest="ab" * 32))


class Script:
    """Numbers events as a log would and writes decisions citing the input they answer."""

    def __init__(self) -> None:
        self.records: list[RecordedEvent] = []
        self._versions: Counter[str] = Counter()

    def add(self, event: Event) -> int:
        """Append one event; its position."""
        stream = stream_of(event)
        self._versions[stream] += 1
        position = len(self.records) + 1
        self.records.append(record(position, event, stream=stream, version=self._versions[stream]))
        return position

    def turn(self, key: CallKey = KEY, *, rules: int = VALIDATED_AT_RESPONSE_END) -> int:
        """The agent server starts the key's turn (by default under the rules whose flow
        ``validate`` writes: validation when the response ends)."""
        return self.add(
            TurnStarted(turn=key.turn_ref, principal=PRINCIPAL, tools=(TOOL,), rules=rules)
        )

    def validate_at_end(self, key: CallKey, ended: int, *, needs_confirmation: bool = False) -> int:
        """The call validates for the input at ``ended`` (under rules 7, its own end event)."""
        position = self.add(
            CallValidated(
                key=key,
                cause=ended,
                tool=TOOL.name,
                tool_digest=TOOL.digest,
                arguments=ARGUMENTS,
                arguments_digest="sha256:args",
                needs_confirmation=needs_confirmation,
            )
        )
        if needs_confirmation:
            position = self.add(
                CallAwaitingConfirmation(
                    key=key,
                    cause=ended,
                    arguments_digest="sha256:args",
                    expires_at=T0 + timedelta(minutes=10),
                )
            )
        return position

    def end_response(
        self, key: CallKey = KEY, reason: ResponseEndReason = ResponseEndReason.COMPLETED
    ) -> int:
        return self.add(
            ResponseEnded(
                response=key.response_ref, reason=reason, terminal=TerminalRef(sequence=99)
            )
        )

    def open(self, key: CallKey = KEY, tool: str = TOOL.name) -> int:
        """The provider opens the call and its actor takes charge of it."""
        opened = self.add(CallOpened(key=key, tool=tool))
        return self.add(CallCollecting(key=key, cause=opened, tool=tool))

    def fragment(
        self,
        key: CallKey = KEY,
        data: bytes = ARGUMENTS,
        fragments: int = 1,
        offset: int | None = None,
    ) -> int:
        """Argument bytes arrive for the call (at ``offset``, where given)."""
        return self.add(ArgumentsAppended(key=key, data=data, fragments=fragments, offset=offset))

    def end(
        self,
        key: CallKey = KEY,
        *,
        terminal: TerminalRef = TERMINAL,
        fragments: int = 1,
        size: int = len(ARGUMENTS),
    ) -> int:
        """The call's end event arrives and its arguments parse."""
        ended = self.add(CallEnded(key=key, terminal=terminal, final_arguments=ARGUMENTS))
        return self.add(
            CallTerminalCandidate(
                key=key,
                cause=ended,
                terminal=terminal,
                fragments=fragments,
                size=size,
                arguments_digest="sha256:args",
            )
        )

    def validate(self, key: CallKey = KEY, *, needs_confirmation: bool = False) -> int:
        """The response completes and the call validates (waiting for confirmation if asked)."""
        ended = self.add(
            ResponseEnded(
                response=key.response_ref,
                reason=ResponseEndReason.COMPLETED,
                terminal=TerminalRef(sequence=99),
            )
        )
        return self.validate_at_end(key, ended, needs_confirmation=needs_confirmation)

    def confirm(self, key: CallKey = KEY) -> int:
        """The principal confirms the call and its actor accepts the confirmation."""
        given = self.add(
            ConfirmationGiven(
                key=key,
                principal=PRINCIPAL,
                tool_digest=TOOL.digest,
                arguments_digest="sha256:args",
                nonce="nonce-1",
                expires_at=T0 + timedelta(minutes=5),
            )
        )
        return self.add(
            CallConfirmed(
                key=key, cause=given, principal=PRINCIPAL, confirmation_event_id=f"event-{given}"
            )
        )

    def dispatch(self, key: CallKey = KEY, claim_id: str = "claim-1") -> int:
        """An executor claims the call and its actor dispatches it."""
        claim = self.add(ClaimRequested(key=key, claim_id=claim_id, executor="worker-1"))
        return self.add(
            CallDispatched(key=key, cause=claim, claim_id=claim_id, executor="worker-1")
        )

    def cancel(self, key: CallKey = KEY, *, received: tuple[int, int] | None = None) -> int:
        """The person cancels the turn and the call's actor cancels the call (which had
        ``received`` fragments and bytes, if it was still collecting)."""
        cancelled = self.add(TurnCancelled(turn=key.turn_ref, principal=PRINCIPAL))
        fragments, size = received or (None, None)
        return self.add(
            CallCancelled(
                key=key,
                cause=cancelled,
                reason=CancelReason.TURN_CANCELLED,
                fragments=fragments,
                size=size,
            )
        )

    def fail(
        self,
        reason: FailReason,
        detail: str = "",
        *,
        key: CallKey = KEY,
        cause: int,
        received: tuple[int, int] | None = None,
    ) -> int:
        """The call's actor fails the call in answer to the input at ``cause`` (as ``cancel``)."""
        fragments, size = received or (None, None)
        return self.add(
            CallFailed(
                key=key, cause=cause, reason=reason, detail=detail, fragments=fragments, size=size
            )
        )

    def retire(self, turn: TurnRef = KEY.turn_ref) -> int:
        """The runtime retires the turn (it had no live call for the horizon)."""
        return self.add(TurnRetired(turn=turn))

    def reject(self, cause: int, reason: RejectReason, *, key: CallKey = KEY) -> int:
        """The call's actor refuses the input at ``cause``."""
        rejected = self.records[cause - 1]
        return self.add(
            EventRejected(
                key=key,
                cause=cause,
                rejected_event_id=rejected.event_id,
                rejected_type=rejected.event_type,
                reason=reason,
                detail="refused",
            )
        )


def fold(records: Iterable[RecordedEvent]) -> Projections:
    """A fresh bundle of projections fed ``records`` in order."""
    projections = Projections()
    for recorded in records:
        projections.apply(recorded)
    return projections


def row_of(projections: Projections, key: CallKey = KEY) -> LedgerRow:
    """The ledger row of ``key``, which must exist."""
    row = projections.ledger.row(key)
    assert row is not None
    return row


def life(stage: str, *, needs_confirmation: bool = True) -> Script:
    """A script that takes one call through its life up to ``stage``."""
    stages = ["collecting", "terminal_candidate", "validated", "confirmed", "dispatched"]
    script = Script()
    script.turn()
    script.open()
    script.fragment()
    steps: list[Callable[[], int]] = [
        script.end,
        lambda: script.validate(needs_confirmation=needs_confirmation),
        lambda: script.confirm() if needs_confirmation else 0,
        script.dispatch,
    ]
    for step in steps[: stages.index(stage)]:
        step()
    return script


# --- ledger ----------------------------------------------------------------------------------


def test_ledger_row_through_a_whole_life() -> None:
    """Every column of a row follows the call from collecting to a completed dispatch."""
    script = Script()
    script.turn()
    script.open()
    projections = fold(script.records)
    row = row_of(projections)
    assert list(row.to_json()) == [
        "tenant",
        "conversation",
        "turn",
        "response",
        "item",
        "call",
        "tool",
        "state",
        "fragments",
        "bytes",
        "terminal_event",
        "terminal_reason",
        "parse",
        "validation",
        "dispatch",
        "outcome",
    ]
    assert row.to_json() == {
        "tenant": "acme",
        "conversation": "conv-1",
        "turn": "turn-1",
        "response": "resp-1",
        "item": "0",
        "call": "call_0",
        "tool": "send_mail",
        "state": "collecting",
        "fragments": 0,
        "bytes": 0,
        "terminal_event": None,
        "terminal_reason": None,
        "parse": None,
        "validation": None,
        "dispatch": "inert",
        "outcome": None,
    }
    assert row.key == KEY

    def catch_up() -> LedgerRow:
        for recorded in script.records[projections.position :]:
            projections.apply(recorded)
        return row_of(projections)

    script.fragment(data=b'{"to": "', fragments=2)
    script.fragment(data=b'x"}')
    row = catch_up()
    assert (row.state, row.fragments, row.bytes) == ("collecting", 3, 11)
    assert (row.parse, row.dispatch) == (None, "inert")

    script.end(fragments=3, size=11)
    row = catch_up()
    assert (row.state, row.fragments, row.bytes) == ("terminal_candidate", 3, 11)
    assert (row.terminal_event, row.parse, row.validation, row.dispatch) == (
        "sequence 7",
        "ok",
        None,
        "inert",
    )

    script.validate(needs_confirmation=True)
    row = catch_up()
    assert (row.state, row.validation, row.dispatch) == (
        "validated",
        "ok, needs confirmation",
        "await_confirmation",
    )

    script.confirm()
    row = catch_up()
    assert (row.state, row.validation, row.dispatch) == (
        "validated",
        "ok, needs confirmation",
        "ready",
    )

    script.dispatch()
    row = catch_up()
    assert (row.state, row.dispatch, row.outcome) == ("dispatched", "dispatched", None)

    script.add(ExecutionCompleted(key=KEY, claim_id="claim-1"))
    row = catch_up()
    assert row.to_json() == {
        "tenant": "acme",
        "conversation": "conv-1",
        "turn": "turn-1",
        "response": "resp-1",
        "item": "0",
        "call": "call_0",
        "tool": "send_mail",
        "state": "dispatched",
        "fragments": 3,
        "bytes": 11,
        "terminal_event": "sequence 7",
        "terminal_reason": None,
        "parse": "ok",
        "validation": "ok, needs confirmation",
        "dispatch": "dispatched",
        "outcome": "completed",
    }
    assert projections.ledger.rows() == [row]


def test_ledger_history_lists_each_transition_in_log_order() -> None:
    """The history holds one entry per decision and outcome, with the state after it."""
    script = life("dispatched")
    completed = script.add(ExecutionCompleted(key=KEY, claim_id="claim-1"))
    history = fold(script.records).ledger.history(KEY)
    assert [(step.event_type, step.state) for step in history] == [
        ("decision.collecting", "collecting"),
        ("decision.terminal_candidate", "terminal_candidate"),
        ("decision.validated", "validated"),
        ("decision.awaiting_confirmation", "validated"),
        ("decision.confirmed", "validated"),
        ("decision.dispatched", "dispatched"),
        ("outcome.completed", "dispatched"),
    ]
    positions = [step.position for step in history]
    assert positions == sorted(positions)
    assert positions[-1] == completed
    assert history[0].detail == "tool send_mail"
    assert history[5].detail == "claim claim-1 by worker-1"


def test_a_collecting_call_is_one_record_of_the_ledger() -> None:
    """The ledger holds a collecting call as one record (its row's columns, its counts and its
    one transition, without a list for it), and the rows and histories of calls read in the
    order the calls got them, not the order in which the calls first appeared."""
    script = Script()
    script.turn()
    late = other_key("call_late")
    script.fragment(key=late, data=b"ab")
    script.open()
    script.fragment(data=b"abc")
    script.open(late)
    ledger = fold(script.records).ledger
    call = ledger._calls[KEY]
    assert isinstance(call.history, tuple)
    assert not any(isinstance(value, list | dict) for value in gc.get_referents(call))
    assert [row.key for row in ledger.rows()] == [KEY, late]
    assert list(ledger.histories()) == [KEY, late]
    assert list(ledger._calls) == [late, KEY]
    assert [(row.fragments, row.bytes) for row in ledger.rows()] == [(1, 3), (1, 2)]


def test_terminal_event_named_by_digest_without_a_sequence() -> None:
    """A terminal event without a provider sequence is named by its digest."""
    script = Script()
    script.turn()
    script.open()
    script.end(terminal=TerminalRef(digest="sha256:raw-end"), fragments=0)
    assert row_of(fold(script.records)).terminal_event == "digest sha256:raw-end"


def test_fragments_before_the_collecting_decision_are_counted() -> None:
    """Fragments that land between the opening and the actor's answer to it count for the call."""
    script = Script()
    script.turn()
    opened = script.add(CallOpened(key=KEY, tool=TOOL.name))
    script.fragment(data=b"abcd", fragments=2)
    script.add(CallCollecting(key=KEY, cause=opened, tool=TOOL.name))
    script.fragment(data=b"ef")
    row = row_of(fold(script.records))
    assert (row.state, row.fragments, row.bytes) == ("collecting", 3, 6)


def test_rejected_duplicate_fragment_is_not_counted() -> None:
    """A fragment the actor rejects as a duplicate delivery is taken back out of the counts."""
    script = Script()
    script.turn()
    script.open()
    script.fragment(data=b"abc")
    duplicate = script.fragment(data=b"abc")
    assert row_of(fold(script.records)).bytes == 6
    script.reject(duplicate, RejectReason.DUPLICATE)
    row = row_of(fold(script.records))
    assert (row.fragments, row.bytes) == (1, 3)


def test_bytes_at_offsets_are_counted_once_however_they_are_chunked() -> None:
    """Fragments with offsets count the bytes they add to the ranges seen: a re-delivery chunked
    otherwise adds none (and its rejection takes its fragments back out), a range straddling
    the end adds its suffix, a range past a gap counts as it arrives."""
    script = Script()
    script.turn()
    script.open()
    script.fragment(data=b"abcd", offset=0)
    script.fragment(data=b"efgh", offset=4)
    again = script.fragment(data=b"cdef", offset=2)
    assert (row_of(fold(script.records)).fragments, row_of(fold(script.records)).bytes) == (3, 8)
    script.reject(again, RejectReason.DUPLICATE)
    script.fragment(data=b"ghij", offset=6)
    script.fragment(data=b"xy", offset=20)
    row = row_of(fold(script.records))
    assert (row.fragments, row.bytes) == (4, 12)


def test_cancelled_call_row() -> None:
    """A cancelled call shows its reason, a rejected dispatch and the data it had collected."""
    script = Script()
    script.turn()
    script.open()
    script.fragment(data=b"abcde")
    script.cancel(received=(1, 5))
    script.fragment(data=b"late")
    projections = fold(script.records)
    row = row_of(projections)
    assert (row.state, row.terminal_reason, row.dispatch) == (
        "cancelled",
        "turn_cancelled",
        "reject",
    )
    assert (row.fragments, row.bytes, row.parse, row.validation) == (1, 5, None, None)
    assert projections.ledger.history(KEY)[-1].detail == "turn_cancelled"


def test_a_call_ended_while_collecting_counts_what_its_decision_recorded() -> None:
    """The row of a call failed while collecting counts what the decision says it received,
    not a fragment logged after the failing one before the decision."""
    script = Script()
    script.turn()
    script.open()
    script.fragment(data=b"0123456789")
    big = script.fragment(data=b"x" * 100)
    script.fragment(data=b"after")
    script.fail(FailReason.TOO_LARGE, "110 bytes, the limit is 100", cause=big, received=(2, 110))
    row = row_of(fold(script.records))
    assert (row.state, row.terminal_reason, row.fragments, row.bytes) == (
        "failed",
        "too_large",
        2,
        110,
    )
    # Too large while collecting is a limit, not a parse result.
    assert row.parse is None


@pytest.mark.parametrize(
    ("reason", "detail", "parse"),
    [
        (FailReason.MALFORMED_ARGUMENTS, "syntax at $: expected a value", "syntax"),
        (FailReason.MALFORMED_ARGUMENTS, "duplicate_key at $.a: seen before", "duplicate_key"),
        (FailReason.MALFORMED_ARGUMENTS, "not_an_object at $", "not_an_object"),
        (FailReason.TOO_LARGE, "too_large at $: 300000 bytes", "too_large"),
    ],
)
def test_parse_failure_row(reason: FailReason, detail: str, parse: str) -> None:
    """A call whose arguments fail to parse at its end event shows the parse problem code."""
    script = Script()
    script.turn()
    script.open()
    script.fragment()
    ended = script.add(CallEnded(key=KEY, terminal=TerminalRef(sequence=3)))
    script.fail(reason, detail, cause=ended)
    row = row_of(fold(script.records))
    assert (row.state, row.terminal_reason, row.parse, row.validation, row.dispatch) == (
        "failed",
        reason.value,
        parse,
        None,
        "reject",
    )
    assert row.terminal_event is None


@pytest.mark.parametrize(
    "reason",
    [
        FailReason.SCHEMA_INVALID,
        FailReason.BUSINESS_INVALID,
        FailReason.PERMISSION_DENIED,
        FailReason.VALIDATION_TIMEOUT,
        FailReason.VALIDATOR_ERROR,
    ],
)
def test_validation_failure_row(reason: FailReason) -> None:
    """A parsed call that fails validation shows the failure in the validation column."""
    script = life("terminal_candidate")
    response_ended = script.add(
        ResponseEnded(
            response=KEY.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=99),
        )
    )
    script.fail(reason, "at $.to: kind of problem", cause=response_ended)
    row = row_of(fold(script.records))
    assert (row.state, row.parse, row.validation, row.terminal_reason, row.dispatch) == (
        "failed",
        "ok",
        reason.value,
        reason.value,
        "reject",
    )
    assert row.terminal_event == "sequence 7"


def test_unknown_tool_fails_validation_at_the_opening() -> None:
    """A tool the turn did not offer fails the call at once, in the validation column."""
    script = Script()
    script.turn()
    opening = script.open(tool="rm_rf")
    script.fail(FailReason.UNKNOWN_TOOL, "the turn did not offer it", cause=opening - 1)
    row = row_of(fold(script.records))
    assert (row.tool, row.state, row.parse, row.validation) == (
        "rm_rf",
        "failed",
        None,
        "unknown_tool",
    )


def test_failed_before_open_row_has_an_empty_tool() -> None:
    """Fragments before the opening fail a call that never collected: no tool, no data."""
    script = Script()
    script.turn()
    early = script.fragment(data=b"abc")
    script.fail(FailReason.PROTOCOL_VIOLATION, "arrived before the call was opened", cause=early)
    opened = script.add(CallOpened(key=KEY, tool=TOOL.name))
    script.reject(opened, RejectReason.CALL_TERMINAL)
    projections = fold(script.records)
    row = row_of(projections)
    assert (row.tool, row.state, row.terminal_reason, row.dispatch) == (
        "",
        "failed",
        "protocol_violation",
        "reject",
    )
    # What came before the opening was never the call's data.
    assert (row.fragments, row.bytes) == (0, 0)
    assert [step.state for step in projections.ledger.history(KEY)] == ["failed", "failed"]
    assert projections.status.of(KEY) is StatusCue.FAILED


def test_rejection_only_key_has_a_history_and_no_row() -> None:
    """A late event of a superseded turn is only rejected: no row, one history entry."""
    script = Script()
    late = script.fragment(data=b"abc")
    script.reject(late, RejectReason.STALE_TURN)
    projections = fold(script.records)
    assert projections.ledger.row(KEY) is None
    assert projections.ledger.rows() == []
    assert projections.ledger.history(KEY) == [
        Transition(
            position=2,
            event_type="decision.rejected",
            state=None,
            detail="ingress.arguments_appended event-1 stale_turn: refused",
        )
    ]
    assert list(projections.ledger.histories()) == [KEY]
    assert projections.status.of(KEY) is None
    assert KEY not in projections.queue


def test_rejection_of_a_known_call_keeps_its_row() -> None:
    """A rejected claim is recorded in the history with the call's unchanged state."""
    script = life("terminal_candidate")
    claim = script.add(ClaimRequested(key=KEY, claim_id="claim-0", executor="eager"))
    script.reject(claim, RejectReason.NOT_READY)
    projections = fold(script.records)
    assert row_of(projections).state == "terminal_candidate"
    last = projections.ledger.history(KEY)[-1]
    assert (last.event_type, last.state) == ("decision.rejected", "terminal_candidate")
    assert last.detail.startswith("request.claim")


def test_decisions_after_the_end_are_absorbed() -> None:
    """Terminal is absorbing: a decision logged after a call's end changes no projection."""
    script = life("dispatched")
    script.add(CallCancelled(key=KEY, cause=2, reason=CancelReason.TENANT_STOPPED))
    script.add(CallConfirmed(key=KEY, cause=2, principal=PRINCIPAL, confirmation_event_id="x"))
    projections = fold(script.records)
    row = row_of(projections)
    assert (row.state, row.terminal_reason, row.dispatch) == ("dispatched", None, "dispatched")
    assert projections.ledger.history(KEY)[-1].detail.endswith("ignored: the call is dispatched")
    assert projections.status.of(KEY) is StatusCue.RUNNING
    assert KEY not in projections.queue


def test_outcome_of_another_claim_changes_nothing() -> None:
    """Only the outcome of the dispatched claim counts; others are recorded and ignored."""
    script = life("dispatched")
    script.add(ExecutionCompleted(key=KEY, claim_id="claim-forged"))
    projections = fold(script.records)
    assert row_of(projections).outcome is None
    assert projections.ledger.history(KEY)[-1].detail.endswith("ignored: no dispatch of this claim")
    assert projections.status.of(KEY) is StatusCue.RUNNING


@pytest.mark.parametrize(
    ("first", "shown", "cue"),
    [
        (ExecutionOutcomeUnknown(key=KEY, claim_id="claim-1"), "unknown", StatusCue.UNKNOWN),
        (
            ExecutionFailed(key=KEY, claim_id="claim-1", error="timeout"),
            "failed",
            StatusCue.ACTION_FAILED,
        ),
    ],
    ids=["unknown first", "failed first"],
)
def test_the_first_outcome_of_a_dispatch_stands(first: Event, shown: str, cue: StatusCue) -> None:
    """One outcome per dispatch: the first recorded stands, an unknown one included; every
    later one (unknown or known) is shown ignored in the history and changes nothing."""
    script = life("dispatched")
    script.add(first)
    script.add(ExecutionOutcomeUnknown(key=KEY, claim_id="claim-1"))
    script.add(ExecutionCompleted(key=KEY, claim_id="claim-1"))
    script.add(ExecutionStopped(key=KEY, claim_id="claim-1"))
    projections = fold(script.records)
    assert row_of(projections).outcome == shown
    assert projections.status.of(KEY) is cue
    ignored = [step.detail for step in projections.ledger.history(KEY)][-3:]
    assert all("; ignored: " in detail for detail in ignored)


def test_rows_come_in_order_of_first_appearance() -> None:
    """Rows are listed in the order their calls first appeared in the log."""
    first, second, third = other_key("call_a"), other_key("call_b"), other_key("call_c")
    script = Script()
    script.turn()
    script.open(second)
    script.open(first)
    script.open(third)
    script.cancel(second)
    assert [row.key for row in fold(script.records).ledger.rows()] == [second, first, third]


# --- dispatch queue --------------------------------------------------------------------------


def test_dispatch_queue_holds_ready_calls_in_the_order_they_became_ready() -> None:
    """Calls join when validated (and confirmed where needed) and leave when they end."""
    first, second, third, fourth = (other_key(f"call_{n}") for n in range(4))
    script = Script()
    script.turn()
    for key in (first, second, third, fourth):
        script.open(key)
        script.fragment(key)
        script.end(key)
    script.validate(second, needs_confirmation=True)
    script.validate(first)
    script.validate(third)
    queue = fold(script.records).queue
    assert (queue.ready(), queue.awaiting(), len(queue)) == ([first, third], [second], 2)
    assert first in queue
    assert second not in queue
    assert fourth not in queue

    script.confirm(second)
    script.dispatch(first)
    queue = fold(script.records).queue
    assert (queue.ready(), queue.awaiting()) == ([third, second], [])

    script.cancel(third)
    script.fail(FailReason.RESPONSE_FAILED, key=second, cause=1)
    queue = fold(script.records).queue
    assert (queue.ready(), queue.awaiting(), len(queue)) == ([], [], 0)


def test_the_queue_gives_the_calls_admitted_since_a_number_without_the_others() -> None:
    """Each admission to the ready calls is numbered in order; ``ready_after`` gives only
    those admitted after a number that are still ready, and a call admitted again (ready,
    then waiting for a person, then confirmed) is admitted under a new number."""
    first, second, third = (other_key(f"call_{n}") for n in range(3))
    script = Script()
    script.turn()
    for key in (first, second, third):
        script.open(key)
        script.fragment(key)
        script.end(key)
    script.validate(first)
    script.validate(second)
    queue = fold(script.records).queue
    assert (queue.admitted, queue.ready_after(0), queue.ready_after(1)) == (
        2,
        [first, second],
        [second],
    )
    script.dispatch(first)
    script.validate(third)
    queue = fold(script.records).queue
    assert (queue.admitted, queue.ready_after(1), queue.ready_after(3)) == (3, [second, third], [])
    script.add(
        CallAwaitingConfirmation(
            key=second,
            cause=1,
            arguments_digest="sha256:args",
            expires_at=T0 + timedelta(minutes=5),
        )
    )
    script.confirm(second)
    queue = fold(script.records).queue
    assert (queue.admitted, queue.ready(), queue.ready_after(3)) == (4, [third, second], [second])


def test_rules_7_the_queue_admits_a_call_once_its_response_ended_well() -> None:
    """Under rules 7 a call validated at its own end joins the queue at its response's first
    end, if that end was successful and came after the call's end; confirmations wait for it
    too, and a call ended after its response's end never joins."""
    first, second, late, other = (other_key(f"call_{n}") for n in range(4))
    script = Script()
    script.turn(rules=7)
    ends = {}
    for key in (first, second):
        script.open(key)
        script.fragment(key)
        ends[key] = script.end(key) - 1
    script.validate_at_end(second, ends[second], needs_confirmation=True)
    script.validate_at_end(first, ends[first])
    queue = fold(script.records).queue
    assert (queue.ready(), queue.awaiting()) == ([], [second])
    script.confirm(second)
    queue = fold(script.records).queue
    assert (queue.ready(), queue.awaiting()) == ([], [])
    script.end_response(first)
    queue = fold(script.records).queue
    assert queue.ready() == [first, second]
    script.end_response(first, ResponseEndReason.ERROR)
    script.open(late)
    script.fragment(late)
    script.validate_at_end(late, script.end(late) - 1)
    assert fold(script.records).queue.ready() == [first, second]
    failing = Script()
    failing.turn(rules=7)
    failing.open(other)
    failing.fragment(other)
    failing.validate_at_end(other, failing.end(other) - 1)
    failing.end_response(other, ResponseEndReason.ERROR)
    assert fold(failing.records).queue.ready() == []


def test_a_confirmation_alone_never_makes_a_call_ready() -> None:
    """A confirmed decision for a call never seen waiting does not put it in the queue."""
    script = life("terminal_candidate")
    script.add(CallConfirmed(key=KEY, cause=2, principal=PRINCIPAL, confirmation_event_id="x"))
    projections = fold(script.records)
    assert KEY not in projections.queue
    assert projections.queue.awaiting() == []
    assert row_of(projections).dispatch == "inert"
    assert projections.status.of(KEY) is StatusCue.PREPARING


# --- status ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "needs_confirmation", "cue"),
    [
        ("collecting", False, StatusCue.PREPARING),
        ("terminal_candidate", False, StatusCue.PREPARING),
        ("validated", True, StatusCue.NEEDS_CONFIRMATION),
        ("validated", False, StatusCue.READY),
        ("confirmed", True, StatusCue.READY),
        ("dispatched", True, StatusCue.RUNNING),
        ("dispatched", False, StatusCue.RUNNING),
    ],
)
def test_status_cue_along_the_life(stage: str, needs_confirmation: bool, cue: StatusCue) -> None:
    """Each stage of a call's life shows its cue."""
    script = life(stage, needs_confirmation=needs_confirmation)
    assert fold(script.records).status.of(KEY) is cue


@pytest.mark.parametrize(
    ("outcome", "cue"),
    [
        (ExecutionCompleted(key=KEY, claim_id="claim-1"), StatusCue.DONE),
        (ExecutionFailed(key=KEY, claim_id="claim-1", error="smtp 550"), StatusCue.ACTION_FAILED),
        (ExecutionOutcomeUnknown(key=KEY, claim_id="claim-1"), StatusCue.UNKNOWN),
    ],
)
def test_status_cue_of_an_outcome(outcome: Event, cue: StatusCue) -> None:
    """The executor's report on a dispatched call shows as its cue."""
    script = life("dispatched")
    script.add(outcome)
    assert fold(script.records).status.of(KEY) is cue


def test_status_cues_of_calls_that_ended_without_running() -> None:
    """Cancelled and failed calls say that nothing was done."""
    cancelled, failed = other_key("call_c"), other_key("call_f")
    script = Script()
    script.turn()
    script.open(cancelled)
    script.open(failed)
    script.cancel(cancelled)
    script.fail(FailReason.SCHEMA_INVALID, key=failed, cause=1)
    status = fold(script.records).status
    assert status.calls() == {cancelled: StatusCue.CANCELLED, failed: StatusCue.FAILED}
    assert StatusCue.CANCELLED.value == "cancelled: nothing was done"
    assert StatusCue.FAILED.value == "failed: nothing was done; retry or hand off"


@pytest.mark.parametrize(
    "outcome",
    [
        ExecutionCompleted(key=KEY, claim_id="claim-1"),
        ExecutionFailed(key=KEY, claim_id="claim-1"),
        ExecutionOutcomeUnknown(key=KEY, claim_id="claim-1"),
    ],
)
@pytest.mark.parametrize("stage", ["collecting", "validated", "confirmed"])
def test_status_never_says_a_call_ran_without_a_dispatch(stage: str, outcome: Event) -> None:
    """An outcome for a call that was never dispatched changes neither status nor ledger."""
    script = life(stage)
    before = fold(script.records)
    script.add(outcome)
    after = fold(script.records)
    assert after.status.of(KEY) is before.status.of(KEY)
    assert row_of(after).outcome is None
    assert after.status.of(KEY) not in {
        StatusCue.RUNNING,
        StatusCue.DONE,
        StatusCue.ACTION_FAILED,
        StatusCue.UNKNOWN,
    }


def test_status_counts_text_characters_per_response() -> None:
    """Text received is counted per response and kept apart from every call."""
    elsewhere = other_key("call_0", response="resp-2").response_ref
    script = Script()
    script.add(TextReceived(response=KEY.response_ref, characters=12))
    script.add(TextReceived(response=elsewhere, characters=5))
    script.add(TextReceived(response=KEY.response_ref, characters=30))
    status = fold(script.records).status
    assert status.text_characters(KEY.response_ref) == 42
    assert status.text_characters(elsewhere) == 5
    assert status.text_characters(other_key("x", response="resp-3").response_ref) == 0
    assert status.calls() == {}


# --- values, redaction, positions ------------------------------------------------------------


def test_no_projection_holds_argument_values() -> None:
    """No snapshot, row or transition contains the argument bytes of any event."""
    script = life("dispatched")
    script.add(ExecutionCompleted(key=KEY, claim_id="claim-1"))
    script.open(other_key("call_9"))
    script.fragment(other_key("call_9"))
    in_events = [recorded for recorded in script.records if MARKER in repr(recorded.event)]
    assert len(in_events) >= 4
    projections = fold(script.records)
    for projection in (projections.ledger, projections.queue, projections.status):
        assert MARKER not in json.dumps(projection.snapshot())
    assert MARKER not in repr(projections.ledger.rows())
    assert MARKER not in repr(projections.ledger.histories())
    assert MARKER not in repr(projections.status.calls())


def test_redacted_events_are_skipped() -> None:
    """Records whose payload retention dropped are passed over without error."""
    script = Script()
    script.turn()
    script.open()
    script.fragment(data=b"abc")
    kept = script.records[:3]
    gone = [redacted(recorded) for recorded in script.records[3:]]
    script.add(TextReceived(response=KEY.response_ref, characters=3))
    projections = fold([*kept, *gone, redacted(script.records[-1])])
    assert projections.position == 5
    row = row_of(projections)
    assert (row.state, row.fragments, row.bytes) == ("collecting", 0, 0)
    assert projections.status.text_characters(KEY.response_ref) == 0
    assert fold(redacted(recorded) for recorded in script.records).ledger.rows() == []


def test_records_already_applied_are_skipped() -> None:
    """Applying a record at or before the position changes nothing (resuming is harmless)."""
    script = life("validated", needs_confirmation=False)
    projections = fold(script.records)
    digest = projections.digest()
    for recorded in script.records:
        projections.apply(recorded)
    assert projections.digest() == digest
    assert projections.position == len(script.records)


def test_every_projection_starts_empty_at_position_zero() -> None:
    """Fresh projections are at position 0 with empty state."""
    ledger, queue, status = Ledger(), DispatchQueue(), Status()
    fresh: list[Projection] = [ledger, queue, status]
    assert [projection.position for projection in fresh] == [0, 0, 0]
    assert ledger.rows() == []
    assert ledger.histories() == {}
    assert ledger.history(KEY) == []
    assert (queue.ready(), queue.awaiting(), len(queue)) == ([], [], 0)
    assert status.calls() == {}
    assert Projections().position == 0


# --- digest ----------------------------------------------------------------------------------


def busy_script() -> Script:
    """Several calls in several states, with text and a rejection-only key."""
    script = life("dispatched")
    script.add(ExecutionCompleted(key=KEY, claim_id="claim-1"))
    second = other_key("call_1")
    script.open(second)
    script.fragment(second, fragments=3)
    script.end(second, fragments=3)
    script.validate(second, needs_confirmation=True)
    script.add(TextReceived(response=KEY.response_ref, characters=17))
    late = script.fragment(other_key("call_late", response="resp-old"))
    script.reject(late, RejectReason.STALE_TURN, key=other_key("call_late", response="resp-old"))
    third = other_key("call_3")
    script.open(third)
    script.cancel(third)
    return script


def test_digest_is_the_same_for_the_same_events() -> None:
    """Folding the same records twice gives the same digest, byte for byte."""
    records = busy_script().records
    first, second = fold(records), fold(records)
    assert first.digest() == second.digest()
    assert first.digest().startswith("sha256:")
    assert len(first.digest()) == len("sha256:") + 64
    assert first.digest() == state_digest(first.ledger, first.queue, first.status, first.audit)


def test_digest_differs_for_a_different_event() -> None:
    """Changing one event's content changes the digest."""
    records = busy_script().records
    index = next(
        n for n, recorded in enumerate(records) if isinstance(recorded.event, CallCancelled)
    )
    cancelled = records[index].event
    assert isinstance(cancelled, CallCancelled)
    changed = attrs.evolve(
        records[index], event=attrs.evolve(cancelled, reason=CancelReason.IDLE_TIMEOUT)
    )
    altered = [*records[:index], changed, *records[index + 1 :]]
    one, other = fold(records), fold(altered)
    assert one.digest() != other.digest()
    # Only the ledger shows the reason; the digest still tells the two states apart.
    assert one.ledger.snapshot() != other.ledger.snapshot()
    assert one.queue.snapshot() == other.queue.snapshot()
    assert one.status.snapshot() == other.status.snapshot()


def test_digest_of_a_fold_in_two_halves_equals_one_at_once() -> None:
    """A projection fed half the log, then the rest, reaches the same digest as one fed it all."""
    records = busy_script().records
    at_once = fold(records)
    for middle in (1, len(records) // 2, len(records) - 1):
        halves = fold(records[:middle])
        for recorded in records[middle:]:
            halves.apply(recorded)
        assert halves.digest() == at_once.digest()
        assert state_digest(halves.ledger) == state_digest(at_once.ledger)


def test_digest_names_each_projection_by_class() -> None:
    """The digest hashes the snapshots keyed by class name; one class cannot appear twice."""
    ledger = Ledger()
    assert state_digest(ledger) != state_digest(DispatchQueue())
    with pytest.raises(ValueError, match="two projections named Ledger"):
        state_digest(ledger, Ledger())


def test_fragments_that_land_before_the_opening_decision_are_counted() -> None:
    """The actor's answer to an opening may land after the call's first fragments: the row
    counts them from the start."""
    script = Script()
    script.turn()
    opened = script.add(CallOpened(key=KEY, tool=TOOL.name))
    script.fragment(data=b'{"to": ')
    script.fragment(data=b'"x"}')
    script.add(CallCollecting(key=KEY, cause=opened, tool=TOOL.name))
    row = fold(script.records).ledger.row(KEY)
    assert row is not None
    assert (row.state, row.fragments, row.bytes) == ("collecting", 2, 11)


def test_a_finished_call_ages_out_of_the_ledger_after_the_horizon() -> None:
    """A cancelled call's row and history stay for the horizon, by the log's times, then go;
    a call still alive stays whatever its age; a replay drops exactly the same."""
    ledger = Ledger(horizon=timedelta(days=30))
    alive = attrs.evolve(KEY, call="call_alive")
    events = [
        record(1, CallCollecting(key=KEY, cause=1, tool="get_weather")),
        record(2, CallCollecting(key=alive, cause=2, tool="get_weather")),
        record(3, CallCancelled(key=KEY, cause=3, reason=CancelReason.TURN_CANCELLED)),
    ]
    later = attrs.evolve(
        record(4, CallCollecting(key=attrs.evolve(KEY, call="call_new"), cause=4, tool="t")),
        recorded_at=T0 + timedelta(days=29),
    )
    much_later = attrs.evolve(
        record(5, CallCollecting(key=attrs.evolve(KEY, call="call_newer"), cause=5, tool="t")),
        recorded_at=T0 + timedelta(days=31),
    )
    for recorded in [*events, later]:
        ledger.apply(recorded)
    assert ledger.row(KEY) is not None
    ledger.apply(much_later)
    assert ledger.row(KEY) is None
    assert ledger.history(KEY) == []
    assert ledger.row(alive) is not None
    replayed = Ledger(horizon=timedelta(days=30))
    for recorded in [*events, later, much_later]:
        replayed.apply(recorded)
    assert replayed.snapshot() == ledger.snapshot()
    keeping = Ledger(horizon=None)
    for recorded in [*events, later, much_later]:
        keeping.apply(recorded)
    assert keeping.row(KEY) is not None


# --- retired turns ---------------------------------------------------------------------------

OTHER_TURN = attrs.evolve(KEY, turn="turn-2")


def held(projections: Projections) -> dict[str, int]:
    """The size of every structure in which a projection holds something per call, response or
    turn: what a retirement must free."""
    ledger, queue, status = projections.ledger, projections.queue, projections.status
    return {
        "ledger calls": len(ledger._calls),
        "ledger finished": len(ledger._finished),
        "ledger turns": len(ledger._turns),
        "queue ready": len(queue._ready),
        "queue awaiting": len(queue._awaiting),
        "queue ended": len(queue._ended),
        "queue ended turns": len(queue._ended_turns),
        "status calls": len(status._calls),
        "status claims": len(status._claims),
        "status call turns": len(status._call_turns),
        "status text": len(status._text),
        "status text turns": len(status._text_turns),
    }


def parts(projections: Projections) -> list[Projection]:
    """The four projections of the bundle."""
    return [projections.ledger, projections.queue, projections.status, projections.audit]


def finish_turn(script: Script, turn: str = KEY.turn) -> list[CallKey]:
    """Append a turn none of whose calls is live: one completed, one dispatched with no outcome
    yet, one cancelled, one failed, and a key that only ever drew rejections; with text on two
    responses. Its keys, in the order they first appear."""
    completed, running, cancelled, failed = (
        attrs.evolve(KEY, turn=turn, call=call)
        for call in ("call_0", "call_running", "call_cancelled", "call_failed")
    )
    junk = attrs.evolve(KEY, turn=turn, response="resp-junk", call="call_junk")
    script.turn(completed)
    for key in (completed, running, cancelled, failed):
        script.open(key)
        script.fragment(key)
    for key in (completed, running):
        script.end(key)
        script.validate(key)
        script.dispatch(key)
    script.add(ExecutionCompleted(key=completed, claim_id="claim-1"))
    script.cancel(cancelled, received=(1, len(ARGUMENTS)))
    too_much = script.fragment(failed)
    script.fail(FailReason.TOO_LARGE, key=failed, cause=too_much, received=(1, len(ARGUMENTS)))
    for _ in range(2):
        late = script.fragment(junk)
        script.reject(late, RejectReason.STALE_TURN, key=junk)
    script.add(TextReceived(response=completed.response_ref, characters=12))
    script.add(TextReceived(response=junk.response_ref, characters=3))
    return [completed, running, cancelled, failed, junk]


def test_a_retired_turn_is_forgotten_by_every_projection() -> None:
    """Retiring a turn with no live call leaves nothing of it or of its calls (finished,
    running without an outcome, or only rejected) in rows, histories, queue, status or text."""
    script = Script()
    keys = finish_turn(script)
    before = fold(script.records)
    assert len(before.ledger.histories()) == len(keys)
    assert len(before.status.calls()) == len(keys) - 1
    assert held(before) == {
        "ledger calls": 5,
        "ledger finished": 4,
        "ledger turns": 1,
        "queue ready": 0,
        "queue awaiting": 0,
        "queue ended": 4,
        "queue ended turns": 1,
        "status calls": 4,
        "status claims": 2,
        "status call turns": 1,
        "status text": 2,
        "status text turns": 1,
    }
    script.retire()
    projections = fold(script.records)
    assert projections.ledger.rows() == []
    assert projections.ledger.histories() == {}
    for key in keys:
        assert projections.ledger.row(key) is None
        assert projections.ledger.history(key) == []
        assert projections.status.of(key) is None
        assert projections.status.text_characters(key.response_ref) == 0
    assert (projections.queue.ready(), projections.queue.awaiting()) == ([], [])
    assert projections.status.calls() == {}
    assert held(projections) == dict.fromkeys(held(projections), 0)
    fresh = Projections()
    for part, empty in zip(parts(projections), parts(fresh), strict=True):
        assert {**part.snapshot(), "position": 0} == empty.snapshot()


def test_a_turn_of_rejections_only_is_forgotten() -> None:
    """Junk keys that only ever drew rejections, the one thing an attacker can feed without
    end, are gone from the ledger once their turn is retired."""
    junk = [attrs.evolve(KEY, call=f"call_junk_{n}") for n in range(5)]
    script = Script()
    for key in junk:
        late = script.fragment(key, data=b"x")
        script.reject(late, RejectReason.UNKNOWN_TURN, key=key)
    ledger = fold(script.records).ledger
    assert (ledger.rows(), list(ledger.histories())) == ([], junk)
    script.retire()
    ledger = fold(script.records).ledger
    assert ledger.histories() == {}
    assert (len(ledger._calls), len(ledger._turns)) == (0, 0)


@pytest.mark.parametrize(
    ("stage", "needs_confirmation"),
    [
        ("collecting", False),
        ("terminal_candidate", False),
        ("validated", False),
        ("validated", True),
        ("confirmed", True),
    ],
)
def test_a_live_call_survives_the_retirement_of_its_turn(
    stage: str, needs_confirmation: bool
) -> None:
    """A retirement that races with a call still live keeps that call as it was (row, history,
    queue place, cue, its response's text) and forgets the rest of the turn; once the call ends,
    the next retirement forgets it too."""
    script = life(stage, needs_confirmation=needs_confirmation)
    finished, quiet = other_key("call_done"), other_key("call_0", response="resp-2")
    opened = script.add(CallOpened(key=finished, tool="no_such_tool"))
    script.fail(FailReason.UNKNOWN_TOOL, key=finished, cause=opened)
    script.add(TextReceived(response=KEY.response_ref, characters=7))
    script.add(TextReceived(response=quiet.response_ref, characters=9))
    before = fold(script.records)
    script.retire()
    after = fold(script.records)
    assert after.ledger.row(KEY) == before.ledger.row(KEY)
    assert after.ledger.rows() == [before.ledger.row(KEY)]
    assert after.ledger.histories() == {KEY: before.ledger.history(KEY)}
    assert (after.queue.ready(), after.queue.awaiting()) == (
        before.queue.ready(),
        before.queue.awaiting(),
    )
    assert after.status.calls() == {KEY: before.status.of(KEY)}
    assert after.status.text_characters(KEY.response_ref) == 7
    assert after.status.text_characters(quiet.response_ref) == 0
    script.cancel(KEY)
    script.retire()
    assert held(fold(script.records)) == dict.fromkeys(held(after), 0)


@pytest.mark.parametrize(
    "turn",
    [
        OTHER_TURN.turn_ref,
        TurnRef(tenant=KEY.tenant, conversation="conv-2", turn=KEY.turn),
        TurnRef(tenant="other-tenant", conversation=KEY.conversation, turn=KEY.turn),
    ],
    ids=["never started", "same turn id in another conversation", "another tenant"],
)
def test_retiring_a_turn_never_seen_changes_nothing(turn: TurnRef) -> None:
    """A retirement of a turn the projections know nothing of, however alike its names, leaves
    every projection as it was but for its position."""
    script = busy_script()
    before = fold(script.records)
    script.retire(turn)
    script.retire(turn)
    after = fold(script.records)
    assert after.position == before.position + 2
    for part, earlier in zip(parts(after), parts(before), strict=True):
        assert {**part.snapshot(), "position": 0} == {**earlier.snapshot(), "position": 0}
    assert held(after) == held(before)


def test_a_retired_turn_leaves_other_turns_and_the_horizon_alone() -> None:
    """Retiring one turn keeps every call of another; the other's finished rows still age out
    of the ledger after the horizon, and only a retirement frees the rest of it."""
    script = Script()
    finish_turn(script)
    others = finish_turn(script, OTHER_TURN.turn)
    running, junk = others[1], others[-1]
    script.retire()
    projections = Projections(ledger_horizon=timedelta(days=30))
    for recorded in script.records:
        projections.apply(recorded)
    assert list(projections.ledger.histories()) == others
    assert list(projections.status.calls()) == others[:-1]
    much_later = attrs.evolve(
        record(len(script.records) + 1, TurnRetired(turn=KEY.turn_ref)),
        recorded_at=T0 + timedelta(days=31),
    )
    projections.apply(much_later)
    # A dispatched call awaiting its outcome never finishes, so never ages out; a key that
    # only drew rejections ages out as a finished call does.
    assert [row.key for row in projections.ledger.rows()] == [running]
    assert list(projections.ledger.histories()) == [running]
    assert junk not in projections.ledger.histories()
    assert list(projections.status.calls()) == others[:-1]
    projections.apply(record(much_later.position + 1, TurnRetired(turn=OTHER_TURN.turn_ref)))
    assert held(projections) == dict.fromkeys(held(projections), 0)


@pytest.mark.parametrize("horizon", [None, DEFAULT_LEDGER_HORIZON], ids=["no horizon", "30 days"])
def test_retiring_every_turn_keeps_the_projections_from_growing(
    horizon: timedelta | None,
) -> None:
    """Turn after turn, each retired once its calls are over, leave nothing behind: before each
    retirement the projections hold only the last turn, and after the last one nothing."""
    projections = Projections(ledger_horizon=horizon)
    script = Script()
    for n in range(200):
        keys = finish_turn(script, f"turn-{n}")
        for recorded in script.records[projections.position :]:
            projections.apply(recorded)
        assert list(projections.ledger.histories()) == keys
        assert held(projections)["ledger turns"] == 1
        script.retire(keys[0].turn_ref)
    projections.apply(script.records[-1])
    assert held(projections) == dict.fromkeys(held(projections), 0)
    assert projections.ledger._due is None
