"""The fold of every call from the log: the work it gives the actors live, replay checked against
the decisions recorded, what going live still has to do, held inputs, and which calls turn,
operator and stream events reach.

Records are built by hand: ``Log`` numbers events as the log would (positions, per-stream
versions, recorded times from a fixed instant) and ``Actors`` plays the call actors, writing each
decision the fold asks for right after the input, and each validation answer when told to.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import TypedDict

import attrs
import pytest
import reference_fold
from fold_views import folded_view, work_of
from hypothesis import given, settings
from hypothesis import strategies as st

from inert.actors._call import CallLimits, ValidationRequested, ValidationResult
from inert.actors._fold import (
    AppendDecisions,
    CallFold,
    ReplayDivergence,
    RunValidation,
    ScheduleDeadline,
    Work,
)
from inert.events import (
    RULES_VERSION,
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
    CallReady,
    CallStopRequested,
    CallTerminalCandidate,
    CallValidated,
    CancelReason,
    ClaimRequested,
    ConfirmationDenied,
    ConfirmationGiven,
    DeadlineReached,
    EditRefused,
    Event,
    EventRejected,
    ExecutionCompleted,
    FailReason,
    IntentScope,
    LogDamaged,
    OfferedTool,
    Phase,
    RecordedEvent,
    Redacted,
    RejectReason,
    ResponseEnded,
    ResponseEndReason,
    ResponseQuarantined,
    ResponseRef,
    StreamLost,
    StreamResumed,
    TenantStopped,
    TerminalRef,
    ToolDisabled,
    TurnCancelled,
    TurnRef,
    TurnRetired,
    TurnStarted,
    TurnSuperseded,
    control_stream,
    without_sensitive,
)

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
PRINCIPAL = "user:alice"
LOOKUP = OfferedTool(name="lookup", digest="sha256:tool-lookup")
MAIL = OfferedTool(name="send_mail", digest="sha256:tool-mail")
VALIDATED_AT_RESPONSE_END = 6
"""The last rules under which a call is validated when its response ends."""
LIMITS = CallLimits(idle_timeout=timedelta(seconds=60), confirmation_lifetime=timedelta(minutes=5))
KEY = CallKey(
    tenant="acme", conversation="conv-1", turn="turn-1", response="resp-1", item="0", call="call_0"
)
ARGUMENTS = b'{"units": "metric", "city": "Paris"}'
CANONICAL = b'{"city":"Paris","units":"metric"}'
DIGEST = "sha256:" + hashlib.sha256(CANONICAL).hexdigest()
PIECES = (ARGUMENTS[:12], ARGUMENTS[12:])


class Received(TypedDict):
    """The counts an ending decision records, as its keyword arguments."""

    fragments: int
    size: int


COLLECTED: Received = {"fragments": len(PIECES), "size": sum(len(piece) for piece in PIECES)}
"""The counts a call ending after ``collect`` records."""


def key_of(
    call: str = "call_0",
    *,
    tenant: str = "acme",
    conversation: str = "conv-1",
    turn: str = "turn-1",
    response: str = "resp-1",
) -> CallKey:
    return CallKey(
        tenant=tenant,
        conversation=conversation,
        turn=turn,
        response=response,
        item=call,
        call=call,
    )


def stream_of(event: Event) -> str:
    """The stream a writer would append the event to."""
    match event:
        case (
            CallCollecting()
            | CallTerminalCandidate()
            | CallValidated()
            | CallAwaitingConfirmation()
            | CallConfirmed()
            | CallReady()
            | CallDispatched()
            | CallCancelled()
            | CallFailed()
            | CallStopRequested()
            | EditRefused()
            | EventRejected()
        ):
            return event.key.stream
        case (
            ClaimRequested()
            | ConfirmationGiven()
            | ConfirmationDenied()
            | DeadlineReached()
            | ExecutionCompleted()
        ):
            return event.key.request_stream
        case CallOpened() | ArgumentsAppended() | CallEnded():
            return event.key.response_ref.stream
        case ResponseEnded() | StreamLost() | StreamResumed():
            return event.response.stream
        case TurnStarted() | TurnCancelled() | TurnSuperseded() | TurnRetired():
            return event.turn.stream
        case ResponseQuarantined() | ToolDisabled():
            return control_stream(event.tenant)
        case TenantStopped():
            return control_stream(event.tenant)
    raise AssertionError(f"no stream for {type(event).__name__}")


class Log:
    """Numbers events as the log would: positions from 1, versions per stream, and a recorded
    time of ``T0`` plus the position in seconds unless one is given."""

    def __init__(self) -> None:
        self.records: list[RecordedEvent] = []
        self._versions: Counter[str] = Counter()

    def add(self, event: Event, *, at: datetime | None = None) -> RecordedEvent:
        stream = stream_of(event)
        self._versions[stream] += 1
        position = len(self.records) + 1
        record = RecordedEvent(
            position=position,
            event_id=f"event-{position}",
            stream=stream,
            version=self._versions[stream],
            recorded_at=at if at is not None else T0 + timedelta(seconds=position),
            event_type=event.TAG,
            schema_version=event.SCHEMA_VERSION,
            trace=None,
            event=event,
        )
        self.records.append(record)
        return record

    @property
    def position(self) -> int:
        return len(self.records)


def answer_of(request: ValidationRequested, result: ValidationResult) -> list[Event]:
    """The decisions an actor writes for a validation answer, built from the design."""
    if result.failure is not None:
        return [
            CallFailed(
                key=request.key, cause=request.cause, reason=result.failure, detail=result.detail
            )
        ]
    answer: list[Event] = [
        CallValidated(
            key=request.key,
            cause=request.cause,
            tool=request.tool.name,
            tool_digest=request.tool.digest,
            arguments=request.arguments.canonical,
            arguments_digest=request.arguments.digest,
            needs_confirmation=result.needs_confirmation,
        )
    ]
    if result.needs_confirmation:
        answer.append(
            CallAwaitingConfirmation(
                key=request.key,
                cause=request.cause,
                arguments_digest=request.arguments.digest,
                expires_at=request.at + LIMITS.confirmation_lifetime,
            )
        )
    return answer


class Actors:
    """A live fold over a ``Log`` and the actors that write what it asks for, at once."""

    def __init__(self, log: Log | None = None) -> None:
        self.log = log or Log()
        self.fold = CallFold(LIMITS, live=True)
        self.validations: dict[CallKey, RunValidation] = {}

    def feed(self, event: Event, *, at: datetime | None = None) -> list[Work]:
        """Append an input; the work the fold gave for it (done before returning)."""
        work = self.fold.apply(self.log.add(event, at=at))
        self.do(work)
        return work

    def do(self, work: list[Work]) -> None:
        for item in work:
            if isinstance(item, AppendDecisions):
                for decision in item.decisions:
                    assert self.fold.apply(self.log.add(decision)) == []
            elif isinstance(item, RunValidation):
                self.validations[item.key] = item

    def validate(self, key: CallKey, result: ValidationResult | None = None) -> list[Work]:
        """Write the answer to the call's pending validation; the work that follows from it."""
        request = self.validations.pop(key).request
        work: list[Work] = []
        for decision in answer_of(request, result or ValidationResult()):
            work += self.fold.apply(self.log.add(decision))
        self.do(work)
        return work

    # --- a call's inputs ---

    def turn(
        self, key: CallKey = KEY, principal: str = PRINCIPAL, *, rules: int = RULES_VERSION
    ) -> list[Work]:
        return self.feed(
            TurnStarted(turn=key.turn_ref, principal=principal, tools=(LOOKUP, MAIL), rules=rules)
        )

    def collect(self, key: CallKey = KEY, tool: str = LOOKUP.name) -> None:
        """Open the call and send its fragments."""
        self.feed(CallOpened(key=key, tool=tool, sequence=0))
        for sequence, piece in enumerate(PIECES, 1):
            self.feed(
                ArgumentsAppended(
                    key=key, data=piece, first_sequence=sequence, last_sequence=sequence
                )
            )

    def end(self, key: CallKey = KEY) -> list[Work]:
        return self.feed(CallEnded(key=key, terminal=TerminalRef(sequence=len(PIECES) + 1)))

    def end_response(
        self,
        key: CallKey = KEY,
        reason: ResponseEndReason = ResponseEndReason.COMPLETED,
        *,
        at: datetime | None = None,
    ) -> list[Work]:
        return self.feed(
            ResponseEnded(
                response=key.response_ref, reason=reason, terminal=TerminalRef(sequence=9)
            ),
            at=at,
        )

    def claim(self, key: CallKey = KEY, claim_id: str = "claim-1") -> list[Work]:
        return self.feed(ClaimRequested(key=key, claim_id=claim_id, executor="worker-1"))


def appended(work: list[Work]) -> list[Event]:
    """Every decision the work asks to write, in order."""
    return [
        decision
        for item in work
        if isinstance(item, AppendDecisions)
        for decision in item.decisions
    ]


def replay(records: list[RecordedEvent]) -> CallFold:
    """A replay fold over ``records``: it must give no work for any of them."""
    fold = CallFold(LIMITS, live=False)
    for record in records:
        assert fold.apply(record) == [], record
    return fold


# --- live work -------------------------------------------------------------------------------


def test_live_fold_gives_the_work_of_each_input_in_order() -> None:
    """Live, each input gives its work in order and each written decision comes back accepted."""
    log = Log()
    fold = CallFold(LIMITS, live=True)
    started = TurnStarted(
        turn=KEY.turn_ref, principal=PRINCIPAL, tools=(LOOKUP,), rules=VALIDATED_AT_RESPONSE_END
    )
    assert fold.apply(log.add(started)) == []
    opened = log.add(CallOpened(key=KEY, tool=LOOKUP.name, sequence=0))
    collecting = CallCollecting(key=KEY, cause=opened.position, tool=LOOKUP.name)
    assert fold.apply(opened) == [
        AppendDecisions(key=KEY, decisions=(collecting,), position=opened.position),
        ScheduleDeadline(key=KEY, at=opened.recorded_at + LIMITS.idle_timeout),
    ]
    assert fold.apply(log.add(collecting)) == []
    for sequence, piece in enumerate(PIECES, 1):
        fragment = ArgumentsAppended(
            key=KEY, data=piece, first_sequence=sequence, last_sequence=sequence
        )
        # A later deadline is found by the timer already set: nothing to schedule.
        assert fold.apply(log.add(fragment)) == []
    end = log.add(CallEnded(key=KEY, terminal=TerminalRef(sequence=3)))
    [write] = fold.apply(end)
    assert isinstance(write, AppendDecisions)
    [candidate] = write.decisions
    assert candidate == CallTerminalCandidate(
        key=KEY,
        cause=end.position,
        terminal=TerminalRef(sequence=3),
        fragments=2,
        size=len(ARGUMENTS),
        arguments_digest=DIGEST,
    )
    assert fold.apply(log.add(candidate)) == []
    response_end = log.add(
        ResponseEnded(
            response=KEY.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=4),
        )
    )
    [validation] = fold.apply(response_end)
    assert isinstance(validation, RunValidation)
    assert validation.key == KEY
    assert validation.request.cause == response_end.position
    assert validation.request.arguments.canonical == CANONICAL
    assert validation.request.tool == LOOKUP
    assert validation.context.turn is not None
    assert validation.context.turn.principal == PRINCIPAL
    for decision in answer_of(validation.request, ValidationResult()):
        assert fold.apply(log.add(decision)) == []
    state = fold.state(KEY)
    assert state is not None
    assert state.ready
    claim = log.add(ClaimRequested(key=KEY, claim_id="claim-1", executor="worker-1"))
    dispatched = CallDispatched(
        key=KEY, cause=claim.position, claim_id="claim-1", executor="worker-1"
    )
    assert fold.apply(claim) == [
        AppendDecisions(key=KEY, decisions=(dispatched,), position=claim.position)
    ]
    assert fold.apply(log.add(dispatched)) == []
    state = fold.state(KEY)
    assert state is not None
    assert state.phase is Phase.DISPATCHED
    assert fold.live_keys() == []
    assert [record.version for record in log.records if record.stream == KEY.stream] == [1, 2, 3, 4]


def test_live_fold_schedules_the_confirmation_expiry() -> None:
    """A validation that needs confirmation schedules the call's confirmation deadline."""
    actors = Actors()
    actors.turn(rules=VALIDATED_AT_RESPONSE_END)
    actors.collect()
    actors.end()
    response_end_at = T0 + timedelta(minutes=1)
    actors.end_response(at=response_end_at)
    work = actors.validate(KEY, ValidationResult(needs_confirmation=True))
    assert work == [ScheduleDeadline(key=KEY, at=response_end_at + LIMITS.confirmation_lifetime)]


def confirmation_of(key: CallKey) -> ConfirmationGiven:
    """The principal's confirmation of the call's lookup with the arguments of ``PIECES``."""
    return ConfirmationGiven(
        key=key,
        principal=PRINCIPAL,
        tool_digest=LOOKUP.digest,
        arguments_digest=DIGEST,
        nonce="n-1",
        expires_at=T0 + timedelta(hours=1),
    )


def whole_life(actors: Actors) -> dict[str, CallKey]:
    """Several calls of one turn in different states, written as the actors would."""
    done, waiting, confirmed = (key_of(f"call_{n}") for n in range(3))
    collecting = key_of("call_3", response="resp-2")
    actors.turn()
    for key in (done, waiting, confirmed):
        actors.collect(key)
        actors.end(key)
    actors.collect(collecting)
    actors.feed(ArgumentsAppended(key=collecting, data=b"{}", first_sequence=1, last_sequence=1))
    actors.end_response(done)
    actors.validate(done)
    actors.validate(waiting, ValidationResult(needs_confirmation=True))
    actors.validate(confirmed, ValidationResult(needs_confirmation=True))
    actors.feed(confirmation_of(confirmed))
    actors.claim(done)
    actors.claim(done, "claim-2")
    actors.claim(waiting)
    return {"done": done, "waiting": waiting, "confirmed": confirmed, "collecting": collecting}


def test_replay_of_a_complete_log_gives_the_same_states_and_no_work() -> None:
    """Replay of a complete log gives the live states, no work, and nothing to write after but
    the deadlines: a collecting call's idleness, a confirmation awaited, a ready call's
    lifetime."""
    actors = Actors()
    keys = whole_life(actors)
    fold = replay(actors.log.records)
    assert set(fold.records) == set(actors.fold.records)
    for key in actors.fold.records:
        replayed, live = fold.state(key), actors.fold.state(key)
        assert replayed is not None
        assert live is not None
        assert replayed.snapshot() == live.snapshot()
    phases = {name: fold.records[key].state for name, key in keys.items()}
    assert phases["done"].phase is Phase.DISPATCHED
    assert phases["waiting"].awaiting_confirmation
    assert phases["confirmed"].ready
    assert phases["collecting"].phase is Phase.COLLECTING
    work = fold.go_live()
    assert [item for item in work if not isinstance(item, ScheduleDeadline)] == []
    assert work == [
        ScheduleDeadline(key=key, at=deadline)
        for key, record in fold.records.items()
        if (deadline := record.state.deadline(LIMITS)) is not None
    ]
    assert {item.key for item in work} == {keys["waiting"], keys["collecting"], keys["confirmed"]}


def test_a_collecting_call_keeps_no_record_of_its_later_fields() -> None:
    """A call's slot makes the record of the fields a collecting call leaves at their defaults
    (its end, arguments, validation, confirmation, dispatch) only once one is set, reads their
    defaults until then, and reads back what was set after."""
    actors = Actors()
    keys = whole_life(actors)
    records = actors.fold.records
    collecting = records[keys["collecting"]]
    assert collecting.phase is Phase.COLLECTING
    assert collecting.later is None
    assert (collecting.terminal, collecting.claim_id, collecting.confirmed) == (None, "", False)
    collecting.claim_id = ""
    assert collecting.later is None
    done = records[keys["done"]]
    assert done.later is not None
    assert done.claim_id == done.snapshot().claim_id != ""
    assert done.terminal is not None


# --- going live after a cut ------------------------------------------------------------------


def test_go_live_writes_the_decisions_that_were_never_written() -> None:
    """After a cut, going live asks to write exactly the decisions that were never written."""
    log = Log()
    log.add(
        TurnStarted(
            turn=KEY.turn_ref, principal=PRINCIPAL, tools=(LOOKUP,), rules=VALIDATED_AT_RESPONSE_END
        )
    )
    opened = log.add(CallOpened(key=KEY, tool=LOOKUP.name, sequence=0))
    log.add(CallCollecting(key=KEY, cause=opened.position, tool=LOOKUP.name))
    log.add(ArgumentsAppended(key=KEY, data=ARGUMENTS, first_sequence=1, last_sequence=1))
    end = log.add(CallEnded(key=KEY, terminal=TerminalRef(sequence=2)))
    cancel = log.add(TurnCancelled(turn=KEY.turn_ref, principal=PRINCIPAL))
    fold = replay(log.records)
    work = fold.go_live()
    assert work == [
        AppendDecisions(
            key=KEY,
            decisions=(
                CallTerminalCandidate(
                    key=KEY,
                    cause=end.position,
                    terminal=TerminalRef(sequence=2),
                    fragments=1,
                    size=len(ARGUMENTS),
                    arguments_digest=DIGEST,
                ),
                CallCancelled(key=KEY, cause=cancel.position, reason=CancelReason.TURN_CANCELLED),
            ),
            position=cancel.position,
        )
    ]
    assert fold.live is True


def test_go_live_asks_again_for_a_validation_never_answered() -> None:
    """A validation requested in the log but never answered is asked again on going live."""
    actors = Actors()
    actors.turn(rules=VALIDATED_AT_RESPONSE_END)
    actors.collect()
    actors.end()
    actors.end_response()
    asked = actors.log.position
    fold = replay(actors.log.records)
    work = fold.go_live()
    assert [type(item) for item in work] == [RunValidation]
    [validation] = work
    assert isinstance(validation, RunValidation)
    assert validation.key == KEY
    assert validation.request.cause == asked
    assert validation.request == actors.validations[KEY].request
    assert validation.context == actors.validations[KEY].context


def test_inputs_held_during_a_validation_are_decided_after_its_answer_in_order() -> None:
    """Inputs held during a validation are decided after its recorded answer, in order."""
    actors = Actors()
    actors.turn(rules=VALIDATED_AT_RESPONSE_END)
    actors.collect()
    actors.end()
    actors.end_response()
    asked = actors.log.position
    assert actors.feed(TurnCancelled(turn=KEY.turn_ref, principal=PRINCIPAL)) == []
    cancelled_at = actors.log.position
    assert actors.claim() == []
    claimed_at = actors.log.position
    state = actors.fold.state(KEY)
    assert state is not None
    assert state.phase is Phase.TERMINAL_CANDIDATE
    work = actors.validate(KEY)
    assert appended(work) == [
        CallCancelled(key=KEY, cause=cancelled_at, reason=CancelReason.TURN_CANCELLED),
        EventRejected(
            key=KEY,
            cause=claimed_at,
            rejected_event_id=f"event-{claimed_at}",
            rejected_type=ClaimRequested.TAG,
            reason=RejectReason.CALL_TERMINAL,
            detail="the call is cancelled",
        ),
    ]
    decisions = [
        record.event
        for record in actors.log.records
        if record.stream == KEY.stream and isinstance(record.event, Event)
    ]
    assert [decision.TAG for decision in decisions[-3:]] == [
        CallValidated.TAG,
        CallCancelled.TAG,
        EventRejected.TAG,
    ]
    validated = decisions[-3]
    assert isinstance(validated, CallValidated)
    assert validated.cause == asked
    fold = replay(actors.log.records)
    replayed, live = fold.state(KEY), actors.fold.state(KEY)
    assert replayed is not None
    assert live is not None
    assert replayed.snapshot() == live.snapshot()
    assert fold.go_live() == []


def test_a_validation_failure_in_the_log_is_taken_as_the_answer() -> None:
    """A recorded validation failure answers the pending validation on replay."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.end()
    actors.end_response()
    actors.validate(KEY, ValidationResult(failure=FailReason.SCHEMA_INVALID, detail="$.city"))
    fold = replay(actors.log.records)
    state = fold.state(KEY)
    assert state is not None
    assert state.phase is Phase.FAILED
    assert state.reason == FailReason.SCHEMA_INVALID.value
    assert fold.go_live() == []


# --- divergence ------------------------------------------------------------------------------


def log_of_a_cancelled_call() -> tuple[Log, int]:
    """A call cancelled by its turn, every decision written; the position of the cancel."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.feed(TurnCancelled(turn=KEY.turn_ref, principal=PRINCIPAL))
    last = actors.log.records[-1]
    assert isinstance(last.event, CallCancelled)
    return actors.log, last.position


def test_a_tampered_decision_stops_the_replay_naming_its_position() -> None:
    """A recorded decision with another reason is a ReplayDivergence naming its position."""
    log, position = log_of_a_cancelled_call()
    record = log.records[position - 1]
    assert isinstance(record.event, CallCancelled)
    tampered = attrs.evolve(
        record, event=attrs.evolve(record.event, reason=CancelReason.IDLE_TIMEOUT)
    )
    records = [*log.records[: position - 1], tampered]
    fold = CallFold(LIMITS)
    for earlier in records[:-1]:
        fold.apply(earlier)
    with pytest.raises(ReplayDivergence) as raised:
        fold.apply(tampered)
    assert raised.value.position == position
    assert raised.value.key == KEY
    assert f"position {position}" in str(raised.value)
    assert "idle_timeout" in str(raised.value)


def test_a_decision_the_decider_never_made_stops_the_replay() -> None:
    """A decision in the log where the decider decides nothing is a ReplayDivergence."""
    log, position = log_of_a_cancelled_call()
    extra = log.add(
        EventRejected(
            key=KEY,
            cause=position,
            rejected_event_id="event-1",
            rejected_type=ClaimRequested.TAG,
            reason=RejectReason.NOT_READY,
        )
    )
    fold = CallFold(LIMITS)
    for record in log.records[:-1]:
        fold.apply(record)
    with pytest.raises(ReplayDivergence) as raised:
        fold.apply(extra)
    assert raised.value.position == extra.position


def test_an_answer_to_another_validation_stops_the_replay() -> None:
    """A validation answer whose cause is not the input that asked is a ReplayDivergence."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.end()
    actors.end_response()
    request = actors.validations[KEY].request
    [validated] = answer_of(attrs.evolve(request, cause=request.cause - 1), ValidationResult())
    with pytest.raises(ReplayDivergence) as raised:
        actors.fold.apply(actors.log.add(validated))
    assert raised.value.position == actors.log.position


# --- what turn, operator and stream events reach ----------------------------------------------


def test_a_new_turn_supersedes_the_calls_of_the_previous_one() -> None:
    """A new turn supersedes the live calls of the previous one; its late openings are stale."""
    actors = Actors()
    old, other = key_of("call_0"), key_of("call_0", conversation="conv-2", response="resp-2")
    actors.turn(old)
    actors.turn(other)
    actors.collect(old)
    actors.collect(other)
    new = key_of("call_0", turn="turn-2")
    work = actors.turn(new)
    position = actors.log.records[-2].position
    assert appended(work) == [
        CallCancelled(key=old, cause=position, reason=CancelReason.SUPERSEDED, **COLLECTED)
    ]
    late = key_of("call_1")
    rejected = appended(actors.feed(CallOpened(key=late, tool=LOOKUP.name, sequence=0)))
    assert len(rejected) == 1
    assert isinstance(rejected[0], EventRejected)
    assert rejected[0].reason is RejectReason.STALE_TURN
    late_state = actors.fold.state(late)
    assert late_state is not None
    assert late_state.phase is Phase.ABSENT
    other_state = actors.fold.state(other)
    assert other_state is not None
    assert other_state.phase is Phase.COLLECTING
    assert actors.fold.live_keys() == [other]


def test_a_turn_superseded_event_cancels_the_calls_of_that_turn() -> None:
    """An explicit TurnSuperseded cancels the live calls of that turn only."""
    actors = Actors()
    first, second = key_of("call_0"), key_of("call_0", conversation="conv-2", response="resp-2")
    actors.turn(first)
    actors.turn(second)
    actors.collect(first)
    actors.collect(second)
    work = actors.feed(TurnSuperseded(turn=first.turn_ref, by=key_of(turn="turn-9").turn_ref))
    assert appended(work) == [
        CallCancelled(
            key=first,
            cause=actors.log.records[-2].position,
            reason=CancelReason.SUPERSEDED,
            **COLLECTED,
        )
    ]
    assert actors.fold.live_keys() == [second]


A1 = key_of("a1")
A2 = key_of("a2", response="resp-2")
G1 = key_of("g1", tenant="globex")
TOOLS = {A1: LOOKUP.name, A2: MAIL.name, G1: LOOKUP.name}
CONTROLS: list[tuple[str, Event, set[CallKey], CancelReason]] = [
    (
        "quarantine-everywhere",
        ResponseQuarantined(response="resp-1", tenant=None, operator="op", reason="r"),
        {A1, G1},
        CancelReason.RESPONSE_QUARANTINED,
    ),
    (
        "quarantine-one-tenant",
        ResponseQuarantined(response="resp-1", tenant="acme", operator="op", reason="r"),
        {A1},
        CancelReason.RESPONSE_QUARANTINED,
    ),
    (
        "disable-tool-everywhere",
        ToolDisabled(tool=LOOKUP.name, tenant=None, operator="op", reason="r"),
        {A1, G1},
        CancelReason.TOOL_DISABLED,
    ),
    (
        "disable-tool-for-one-tenant",
        ToolDisabled(tool=LOOKUP.name, tenant="globex", operator="op", reason="r"),
        {G1},
        CancelReason.TOOL_DISABLED,
    ),
    (
        "stop-tenant",
        TenantStopped(tenant="acme", operator="op", reason="r"),
        {A1, A2},
        CancelReason.TENANT_STOPPED,
    ),
]


@pytest.mark.parametrize(
    ("control", "reached", "reason"),
    [control[1:] for control in CONTROLS],
    ids=[control[0] for control in CONTROLS],
)
def test_operator_controls_reach_exactly_the_calls_they_concern(
    control: Event, reached: set[CallKey], reason: CancelReason
) -> None:
    """Quarantines, tool disables and tenant stops cancel exactly the calls they concern."""
    actors = Actors()
    actors.turn(A1)
    actors.turn(G1)
    for key, tool in TOOLS.items():
        actors.collect(key, tool)
    work = actors.feed(control)
    position = actors.log.records[-1 - len(reached)].position
    cancels = appended(work)
    assert {decision.key for decision in cancels if isinstance(decision, CallCancelled)} == reached
    assert cancels == [
        CallCancelled(key=key, cause=position, reason=reason, **COLLECTED)
        for key in TOOLS
        if key in reached
    ]
    assert set(actors.fold.live_keys()) == set(TOOLS) - reached
    for key in reached:
        late = attrs.evolve(key, item="late", call="late")
        decisions = appended(actors.feed(CallOpened(key=late, tool=TOOLS[key], sequence=0)))
        assert [decision.TAG for decision in decisions] == [CallCollecting.TAG, CallCancelled.TAG]
        assert isinstance(decisions[1], CallCancelled)
        assert decisions[1].reason is reason


def test_a_turn_cancelled_by_another_principal_changes_nothing() -> None:
    """A turn cancelled by another principal changes nothing; by its principal it cancels."""
    actors = Actors()
    actors.turn()
    actors.collect()
    assert actors.feed(TurnCancelled(turn=KEY.turn_ref, principal="user:mallory")) == []
    state = actors.fold.state(KEY)
    assert state is not None
    assert state.phase is Phase.COLLECTING
    work = actors.feed(TurnCancelled(turn=KEY.turn_ref, principal=PRINCIPAL))
    assert appended(work) == [
        CallCancelled(
            key=KEY,
            cause=actors.log.records[-2].position,
            reason=CancelReason.TURN_CANCELLED,
            **COLLECTED,
        )
    ]


@pytest.mark.parametrize("rules", [2, 3])
def test_live_limits_are_counted_in_log_order(rules: int) -> None:
    """Live calls are counted in log order: past the limit an opening fails, then room returns;
    under rules 3 the response that passed the limit opens no call any more, others do."""
    actors = Actors()
    actors.fold = CallFold(attrs.evolve(LIMITS, max_live_per_turn=2), live=True)
    actors.feed(
        TurnStarted(turn=KEY.turn_ref, principal=PRINCIPAL, tools=(LOOKUP, MAIL), rules=rules)
    )
    first, second, third, fourth = (key_of(f"call_{n}") for n in range(4))
    elsewhere = key_of("call_4", response="resp-2")
    actors.feed(CallOpened(key=first, tool=LOOKUP.name, sequence=0))
    actors.feed(CallOpened(key=second, tool=LOOKUP.name, sequence=0))
    failed = appended(actors.feed(CallOpened(key=third, tool=LOOKUP.name, sequence=0)))
    assert isinstance(failed[-1], CallFailed)
    assert failed[-1].reason is FailReason.LIMIT_EXCEEDED
    assert actors.fold.over_limit(third.response_ref) == (third if rules >= 3 else None)
    actors.feed(ConfirmationDenied(key=first, principal=PRINCIPAL))
    opened = appended(actors.feed(CallOpened(key=fourth, tool=LOOKUP.name, sequence=0)))
    if rules >= 3:
        assert isinstance(opened[-1], CallFailed)
        assert opened[-1].reason is FailReason.RESPONSE_OVER_LIMIT
        opened = appended(actors.feed(CallOpened(key=elsewhere, tool=LOOKUP.name, sequence=0)))
    assert [type(decision) for decision in opened] == [CallCollecting]


# --- interrupted responses -------------------------------------------------------------------


def test_interrupted_responses_are_those_with_collecting_calls_and_no_resume() -> None:
    """Responses with collecting calls are interrupted unless their stream was lost resumable."""
    actors = Actors()
    actors.turn()
    collecting, finished = key_of("call_0"), key_of("call_1", response="resp-2")
    actors.collect(collecting)
    actors.collect(finished)
    actors.end(finished)
    actors.end_response(finished)
    actors.validate(finished)
    assert actors.fold.interrupted_responses() == [collecting.response_ref]
    actors.feed(StreamLost(response=collecting.response_ref, resumable=True))
    assert actors.fold.interrupted_responses() == []
    actors.feed(StreamResumed(response=collecting.response_ref, after_sequence=2))
    assert actors.fold.interrupted_responses() == [collecting.response_ref]
    work = actors.feed(StreamLost(response=collecting.response_ref, resumable=False))
    cancelled = appended(work)
    assert len(cancelled) == 1
    assert isinstance(cancelled[0], CallCancelled)
    assert cancelled[0].reason is CancelReason.CONNECTION_LOST
    assert actors.fold.interrupted_responses() == []


def test_a_candidate_waiting_for_its_response_is_interrupted() -> None:
    """A call that ended but whose response never did still needs its stream: interrupted."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.end()
    assert actors.fold.interrupted_responses() == [KEY.response_ref]


def test_a_response_that_completed_is_not_interrupted_while_its_call_is_validated() -> None:
    """A response that completed is not interrupted while its call awaits validation."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.end()
    actors.end_response()
    fold = replay(actors.log.records)
    assert [type(item) for item in fold.go_live()] == [RunValidation]
    # The stream has nothing more to give: reporting it would have the runtime record a loss
    # that never happened.
    assert fold.interrupted_responses() == []


def test_responses_are_listed_by_reference() -> None:
    """The interrupted responses name tenant, conversation, turn and response."""
    actors = Actors()
    actors.turn()
    actors.collect()
    [response] = actors.fold.interrupted_responses()
    assert response == ResponseRef(
        tenant="acme", conversation="conv-1", turn="turn-1", response="resp-1"
    )
    assert response.turn_ref == TurnRef(tenant="acme", conversation="conv-1", turn="turn-1")


# --- forgetting ------------------------------------------------------------------------------


def _finished(actors: Actors, key: CallKey = KEY, *, outcome: bool = True) -> None:
    """Open, end, validate and dispatch the call; record its outcome, unless told not to."""
    actors.collect(key)
    actors.end(key)
    actors.end_response(key)
    actors.validate(key)
    actors.claim(key)
    assert actors.fold.state(key).phase is Phase.DISPATCHED  # type: ignore[union-attr]
    if outcome:
        actors.feed(ExecutionCompleted(key=key, claim_id="claim-1"))


def test_a_retired_turn_and_its_calls_are_forgotten_and_judged_unknown_after() -> None:
    """After ``TurnRetired`` of an idle turn, neither it nor its calls are held, and a claim of
    one of its calls is rejected as for a turn never started."""
    actors = Actors()
    actors.turn()
    _finished(actors)
    other = key_of("call_1")
    actors.feed(ClaimRequested(key=other, claim_id="claim-x", executor="worker-1"))
    assert actors.fold.state(other) is not None
    actors.feed(TurnRetired(turn=KEY.turn_ref))
    assert actors.fold.state(KEY) is None
    assert actors.fold.state(other) is None
    assert actors.fold.scope.turn(KEY.turn_ref) is None
    assert actors.fold.idle_turns(T0 + timedelta(days=1)) == []
    work = actors.claim(KEY, claim_id="claim-2")
    [rejected] = appended(work)
    assert isinstance(rejected, EventRejected)
    assert rejected.reason is RejectReason.UNKNOWN_TURN
    # Read back, the rejection leaves nothing behind: the turn is unknown.
    assert actors.fold.records == {}
    assert replay(actors.log.records).records == {}


def test_a_retirement_of_a_turn_with_a_live_call_is_void() -> None:
    """A turn with a live call is not retired: the call goes on as before."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.feed(TurnRetired(turn=KEY.turn_ref))
    assert actors.fold.scope.turn(KEY.turn_ref) is not None
    actors.end()
    actors.end_response()
    actors.validate(KEY)
    assert actors.fold.state(KEY).phase is Phase.VALIDATED  # type: ignore[union-attr]


def test_a_retirement_of_an_unknown_turn_changes_nothing() -> None:
    """Retiring a turn never started, or one retired already, is harmless."""
    actors = Actors()
    actors.turn()
    _finished(actors)
    actors.feed(TurnRetired(turn=key_of(turn="turn-9").turn_ref))
    assert actors.fold.state(KEY) is not None
    actors.feed(TurnRetired(turn=KEY.turn_ref))
    actors.feed(TurnRetired(turn=KEY.turn_ref))
    assert actors.fold.records == {}


def test_calls_of_made_up_turns_are_forgotten_once_their_rejections_are_read_back() -> None:
    """Inputs addressed to calls of turns never started leave no call behind, and a call made
    again after being forgotten does not claim to know its stream's version."""
    actors = Actors()
    for index in range(50):
        key = key_of(f"call_{index}", turn=f"made-up-{index}")
        work = actors.feed(CallOpened(key=key, tool=LOOKUP.name, sequence=0))
        [rejected] = appended(work)
        assert isinstance(rejected, EventRejected)
        assert rejected.reason is RejectReason.UNKNOWN_TURN
    assert actors.fold.records == {}
    stray = key_of("call_0", turn="made-up-0")
    actors.fold.apply(actors.log.add(CallOpened(key=stray, tool=LOOKUP.name, sequence=0)))
    assert actors.fold.state(stray).version is None  # type: ignore[union-attr]


def test_a_call_rejected_before_its_turn_started_asks_its_version_once_it_opens() -> None:
    """A call whose stream holds a rejection written before its turn started, and forgotten
    since, opens once the turn starts without trusting a version of 0."""
    actors = Actors()
    actors.feed(CallOpened(key=KEY, tool=LOOKUP.name, sequence=0))
    assert actors.fold.records == {}
    actors.turn()
    actors.fold.apply(actors.log.add(CallOpened(key=KEY, tool=LOOKUP.name, sequence=1)))
    slot = actors.fold.state(KEY)
    assert slot is not None
    assert slot.phase is Phase.COLLECTING
    assert slot.version is None


def test_idle_turns_are_listed_longest_idle_first_until_a_call_goes_live() -> None:
    """A turn is idle from its start and from the end of its last live call, never while a
    call of it is live."""
    actors = Actors()
    first, second = key_of(turn="turn-1"), key_of(turn="turn-2", conversation="conv-2")
    actors.turn(first)
    actors.turn(second)
    later = T0 + timedelta(days=1)
    assert actors.fold.idle_turns(later) == [first.turn_ref, second.turn_ref]
    actors.collect(first)
    assert actors.fold.idle_turns(later) == [second.turn_ref]
    actors.end(first)
    actors.end_response(first)
    actors.validate(first)
    actors.claim(first)
    actors.feed(ExecutionCompleted(key=first, claim_id="claim-1"))
    assert actors.fold.idle_turns(later) == [second.turn_ref, first.turn_ref]
    since = actors.fold.idle_since(first.turn_ref)
    assert since is not None
    assert actors.fold.idle_turns(since - timedelta(microseconds=1)) == [second.turn_ref]
    assert actors.fold.next_idle_after(since - timedelta(microseconds=1)) == since


def test_a_dispatched_call_keeps_its_turn_from_idling_until_its_outcome() -> None:
    """While an executor runs a call (dispatched, no outcome yet), its turn is not idle and a
    retirement is void; an outcome of a claim never dispatched is damage, and the outcome of the
    very claim dispatched makes the turn idle."""
    actors = Actors()
    actors.turn()
    _finished(actors, outcome=False)
    later = T0 + timedelta(days=1)
    assert actors.fold.idle_turns(later) == []
    actors.feed(TurnRetired(turn=KEY.turn_ref))
    assert actors.fold.state(KEY) is not None
    with pytest.raises(LogDamaged, match=r"claim 'another-claim' .* never dispatched"):
        actors.fold.apply(actors.log.add(ExecutionCompleted(key=KEY, claim_id="another-claim")))
    assert actors.fold.idle_turns(later) == []
    actors.fold.apply(actors.log.add(ExecutionCompleted(key=KEY, claim_id="claim-1")))
    assert actors.fold.idle_turns(later) == [KEY.turn_ref]
    actors.feed(TurnRetired(turn=KEY.turn_ref))
    assert actors.fold.records == {}


# --- one action per intent (rule 12) -----------------------------------------------------------

ONCE = attrs.evolve(LOOKUP, one_action_per_intent=IntentScope.TURN)
ONCE_IN_CONVERSATION = attrs.evolve(LOOKUP, one_action_per_intent=IntentScope.CONVERSATION)


def ready_twice(actors: Actors, tool: OfferedTool, *keys: CallKey) -> None:
    """Start each key's turn (once) offering ``tool``, and make each call ready with the same
    arguments."""
    started: set[TurnRef] = set()
    for key in keys:
        if key.turn_ref not in started:
            started.add(key.turn_ref)
            actors.feed(TurnStarted(turn=key.turn_ref, principal=PRINCIPAL, tools=(tool,)))
        actors.collect(key)
        actors.end(key)
        actors.end_response(key)
        actors.validate(key)


def claim_unwritten(actors: Actors, key: CallKey, claim_id: str = "claim-1") -> list[Work]:
    """A claim whose work is given back rather than done: its decisions are not written yet."""
    return actors.fold.apply(
        actors.log.add(ClaimRequested(key=key, claim_id=claim_id, executor="worker-1"))
    )


def write(actors: Actors, work: list[Work]) -> list[Work]:
    """Write the decisions the work asks for; the work reading them back gave."""
    following: list[Work] = []
    for decision in appended(work):
        following += actors.fold.apply(actors.log.add(decision))
    return following


def _redacted(record: RecordedEvent) -> RecordedEvent:
    """The record as retention leaves an event with sensitive fields: what it keeps of them."""
    event = record.event
    assert isinstance(event, Event)
    return attrs.evolve(
        record,
        event=Redacted(length=1, digest="00" * 32, remains=without_sensitive(event)),
    )


@pytest.mark.parametrize("fold_class", [CallFold, reference_fold.CallFold])
def test_a_call_degraded_by_retention_decides_again_only_once_its_decisions_are_read(
    fold_class: type[CallFold],
) -> None:
    """A confirmed call whose confirmation retention took is claimed; its turn is cancelled
    before the dispatch is written, and a new turn starts before the stop request is written
    (the actor knew of it: nothing more to stop). Replayed, the call takes the dispatch as
    recorded and must not decide the new turn on a state that lacks the stop request still to
    come: it decides again once every input it skipped has its decisions read."""
    actors = Actors()
    actors.turn()
    actors.collect(KEY)
    actors.end(KEY)
    actors.end_response(KEY)
    actors.validate(KEY, ValidationResult(needs_confirmation=True))
    actors.feed(confirmation_of(KEY))
    dispatch = claim_unwritten(actors, KEY)
    stop = actors.fold.apply(actors.log.add(TurnCancelled(turn=KEY.turn_ref, principal=PRINCIPAL)))
    assert write(actors, dispatch) == []
    next_turn = attrs.evolve(KEY.turn_ref, turn="turn-2")
    actors.feed(TurnStarted(turn=next_turn, principal=PRINCIPAL, tools=(LOOKUP,)))
    assert [type(decision) for decision in appended(stop)] == [CallStopRequested]
    assert write(actors, stop) == []
    actors.feed(ExecutionCompleted(key=KEY, claim_id="claim-1"))
    actors.claim(KEY, "claim-2")
    records = [
        _redacted(record) if isinstance(record.event, ConfirmationGiven | CallValidated) else record
        for record in actors.log.records
    ]
    fold = fold_class(LIMITS, live=False)
    for record in records:
        assert fold.apply(record) == [], record
    state = fold.state(KEY)
    assert state is not None
    assert state.phase is Phase.DISPATCHED
    assert fold.go_live() == []
    # Stopped before the second claim, the replay ends with the call still taking its decisions
    # as recorded; live, it decides again: the next claim is refused.
    claimed = next(
        r.position for r in records if isinstance(r.event, ClaimRequested) and r.position > 15
    )
    fold = fold_class(LIMITS, live=False)
    for record in records[: claimed - 1]:
        assert fold.apply(record) == [], record
    assert fold.go_live() == []
    (kind, key, decisions), *more = work_of(fold.apply(records[claimed - 1]))
    assert (kind, key, more) == ("AppendDecisions", KEY, [])
    assert [type(decision) for decision in decisions] == [EventRejected]  # type: ignore[attr-defined]


def test_a_claim_waits_for_the_earlier_claim_of_its_conversation_then_is_a_duplicate() -> None:
    """A claim that comes while the dispatch of an identical call is decided and not yet written
    is held back; once that dispatch is read back, the claim cancels its call ``duplicate_of``
    the earlier one, and a replay of the log decides the same."""
    actors = Actors()
    first, second = KEY, key_of("call_1", response="resp-2")
    ready_twice(actors, ONCE, first, second)
    dispatching = claim_unwritten(actors, first)
    assert [type(decision) for decision in appended(dispatching)] == [CallDispatched]
    assert claim_unwritten(actors, second, "claim-2") == []
    released = write(actors, dispatching)
    cancelled, refused = appended(released)
    assert isinstance(cancelled, CallCancelled)
    assert cancelled.reason is CancelReason.DUPLICATE_OF
    assert cancelled.duplicate_of == first
    assert isinstance(refused, EventRejected)
    assert refused.reason is RejectReason.NOT_READY
    assert write(actors, released) == []
    assert actors.fold.state(second).reason == "duplicate_of"  # type: ignore[union-attr]
    replayed = replay(actors.log.records)
    assert replayed.state(second).reason == "duplicate_of"  # type: ignore[union-attr]
    assert len(replayed.intents) == len(actors.fold.intents) == 1


def test_a_refused_earlier_claim_lets_the_waiting_one_dispatch() -> None:
    """When the earlier claim of the intent does not dispatch its call (its response was
    quarantined), the claim waiting behind it dispatches its own."""
    actors = Actors()
    first, second = KEY, key_of("call_1", response="resp-2")
    ready_twice(actors, ONCE, first, second)
    actors.feed(
        ResponseQuarantined(
            response=first.response, tenant=first.tenant, operator="ops", reason="odd"
        )
    )
    refusing = claim_unwritten(actors, first)
    assert [type(decision) for decision in appended(refusing)] == [EventRejected]
    assert claim_unwritten(actors, second, "claim-2") == []
    released = write(actors, refusing)
    assert [type(decision) for decision in appended(released)] == [CallDispatched]
    write(actors, released)
    replay(actors.log.records)


def test_an_intent_is_once_per_turn_or_once_per_conversation_as_its_tool_asks() -> None:
    """Turn scope runs the same call again in a later turn; conversation scope does not, until
    the turn of the earlier call is retired with it."""
    for tool, again in ((ONCE, True), (ONCE_IN_CONVERSATION, False)):
        actors = Actors()
        first = KEY
        later = key_of("call_1", turn="turn-2", response="resp-2")
        ready_twice(actors, tool, first)
        _dispatch(actors, first)
        ready_twice(actors, tool, later)
        decisions = appended(actors.claim(later, "claim-2"))
        assert isinstance(decisions[0], CallDispatched) is again, tool
        replay(actors.log.records)


def test_a_retired_turn_takes_its_dispatches_with_it() -> None:
    """Once the earlier call's turn is retired, the conversation no longer knows its intent:
    the same call in a later turn runs."""
    actors = Actors()
    first, later = _ran_and_asked_again(actors)
    actors.feed(TurnRetired(turn=first.turn_ref))
    assert len(actors.fold.intents) == 0
    assert [type(decision) for decision in appended(actors.claim(later))] == [CallDispatched]


def test_a_claim_waiting_for_a_retired_turns_call_is_decided_at_the_retirement() -> None:
    """A claim queued behind one whose call's turn is retired before its decision is read back
    does not wait for ever: the retirement takes the earlier claim out of the queue."""
    actors = Actors()
    first, later = _ran_and_asked_again(actors)
    late_claim = claim_unwritten(actors, first, "claim-9")
    assert [type(decision) for decision in appended(late_claim)] == [EventRejected]
    assert claim_unwritten(actors, later, "claim-2") == []
    released = actors.fold.apply(actors.log.add(TurnRetired(turn=first.turn_ref)))
    assert [type(decision) for decision in appended(released)] == [CallDispatched]


def _ran_and_asked_again(actors: Actors) -> tuple[CallKey, CallKey]:
    """A call of a once-per-conversation tool run to its outcome, and the same call ready in a
    later turn of the conversation."""
    first = KEY
    ready_twice(actors, ONCE_IN_CONVERSATION, first)
    _dispatch(actors, first)
    actors.feed(ExecutionCompleted(key=first, claim_id="claim-1"))
    later = key_of("call_1", turn="turn-2", response="resp-2")
    ready_twice(actors, ONCE_IN_CONVERSATION, later)
    return first, later


def _dispatch(actors: Actors, key: CallKey) -> None:
    decisions = appended(actors.claim(key))
    assert [type(decision) for decision in decisions] == [CallDispatched]


@settings(max_examples=60, deadline=None)
@given(
    scope=st.sampled_from(IntentScope),
    variants=st.lists(st.booleans(), min_size=2, max_size=4),
    schedule=st.lists(st.integers(min_value=0, max_value=7), min_size=4, max_size=24),
)
def test_claims_however_interleaved_with_late_writes_run_each_intent_once(
    scope: IntentScope, variants: list[bool], schedule: list[int]
) -> None:
    """Whatever the order of claims of a turn's calls and of the writing of their decisions
    (each actor writes its own in order, late), an intent runs once, every claim is answered,
    and a replay of the log, and the reference fold live and on replay, decide the same."""
    tool = attrs.evolve(LOOKUP, one_action_per_intent=scope)
    actors = Actors()
    keys = [key_of(f"call_{index}", response=f"resp-{index}") for index in range(len(variants))]
    actors.feed(TurnStarted(turn=KEY.turn_ref, principal=PRINCIPAL, tools=(tool,)))
    for key, other in zip(keys, variants, strict=True):
        data = b'{"city": "Oslo"}' if other else ARGUMENTS
        actors.feed(CallOpened(key=key, tool=tool.name, sequence=0))
        actors.feed(ArgumentsAppended(key=key, data=data, first_sequence=1, last_sequence=1))
        actors.feed(CallEnded(key=key, terminal=TerminalRef(sequence=2)))
        actors.end_response(key)
        actors.validate(key)
    unwritten: dict[CallKey, list[Event]] = {key: [] for key in keys}

    def take(work: list[Work]) -> None:
        for item in work:
            if isinstance(item, AppendDecisions):
                unwritten[item.key].extend(item.decisions)

    def write_one(key: CallKey) -> None:
        if unwritten[key]:
            take(actors.fold.apply(actors.log.add(unwritten[key].pop(0))))

    claims = 0
    for step in schedule:
        key = keys[step % len(keys)]
        if step < 4:
            claims += 1
            take(claim_unwritten(actors, key, f"claim-{claims}"))
        else:
            write_one(key)
    while any(unwritten.values()):
        for key in keys:
            write_one(key)
    dispatched = [key for key in keys if actors.fold.state(key).phase is Phase.DISPATCHED]  # type: ignore[union-attr]
    intents = Counter(
        actors.fold.state(key).arguments_digest  # type: ignore[union-attr]
        for key in dispatched
    )
    assert all(count == 1 for count in intents.values()), intents
    requests = {
        record.position for record in actors.log.records if isinstance(record.event, ClaimRequested)
    }
    causes = {
        getattr(record.event, "cause", 0)
        for record in actors.log.records
        if isinstance(record.event, CallDispatched | CallCancelled | EventRejected)
    }
    assert requests <= causes
    replayed = replay(actors.log.records)
    for key in keys:
        assert replayed.state(key).phase is actors.fold.state(key).phase  # type: ignore[union-attr]
    for live in (False, True):
        reference = reference_fold.CallFold(LIMITS, live=live)
        fold = CallFold(LIMITS, live=live)
        for record in actors.log.records:
            assert work_of(fold.apply(record)) == work_of(reference.apply(record))
        assert folded_view(fold, {key.turn_ref for key in keys}) == folded_view(
            reference, {key.turn_ref for key in keys}
        )


# --- rules 7: validated at its own end, dispatched after its response's successful end -------


def test_rules_7_a_call_is_validated_at_its_end_and_ready_at_its_responses_end() -> None:
    """The end event asks for the validation; the answer makes the call validated but not
    ready, with an idle deadline; the response's successful end gives no work and makes it
    ready, without a deadline, and a claim then dispatches it."""
    actors = Actors()
    actors.turn(rules=7)
    actors.collect()
    end_position = actors.log.position + 1
    work = actors.end()
    assert [type(item) for item in work] == [AppendDecisions, RunValidation]
    assert actors.validations[KEY].request.cause == end_position
    actors.validate(KEY)
    slot = actors.fold.state(KEY)
    assert slot is not None
    assert slot.phase is Phase.VALIDATED
    assert not actors.fold.ready(KEY)
    assert actors.fold.awaits_response(slot)
    assert actors.fold.deadline(slot) is not None
    assert actors.fold.interrupted_responses() == [KEY.response_ref]
    assert actors.end_response() == []
    assert actors.fold.ready(KEY)
    assert actors.fold.deadline(slot) is None
    assert actors.fold.interrupted_responses() == []
    assert [type(event) for event in appended(actors.claim())] == [CallDispatched]


def test_rules_7_a_response_end_held_behind_a_validation_is_decided_after_it() -> None:
    """A response that ends while its call is being validated is judged once the answer is
    read back: a successful end makes it ready, a failed end fails it, as live so on replay."""
    for reason, ready in ((ResponseEndReason.COMPLETED, True), (ResponseEndReason.ERROR, False)):
        actors = Actors()
        actors.turn(rules=7)
        actors.collect()
        actors.end()
        assert actors.end_response(reason=reason) == []
        work = actors.validate(KEY)
        assert actors.fold.ready(KEY) is ready
        written = [type(event) for event in appended(work)]
        assert written == ([] if ready else [CallFailed])
        replayed = replay(actors.log.records)
        assert replayed.ready(KEY) is ready


def test_rules_7_only_an_end_of_the_response_after_the_calls_own_counts() -> None:
    """An end of the response before the call's own end event does not make it ready (nor fail
    it once it is validated); the next end after it does, on replay as live."""
    actors = Actors()
    actors.turn(rules=7)
    actors.end_response(key=attrs.evolve(KEY, call="call_other", item="item-other"))
    actors.collect()
    actors.end()
    actors.validate(KEY)
    slot = actors.fold.state(KEY)
    assert slot is not None
    assert slot.phase is Phase.VALIDATED
    assert not actors.fold.ready(KEY)
    assert actors.fold.deadline(slot) is not None
    refused = appended(actors.claim())
    assert [type(event) for event in refused] == [EventRejected]
    assert actors.end_response() == []
    assert actors.fold.ready(KEY)
    assert replay(actors.log.records).ready(KEY)
    assert [type(event) for event in appended(actors.claim(KEY, "claim-2"))] == [CallDispatched]


# --- rules 8: a ready call's lifetime ----------------------------------------------------------


def test_rules_8_a_call_ready_at_its_responses_end_records_its_lifetime_and_a_deadline() -> None:
    """The response's successful end makes a validated call ready: ``CallReady`` records the
    end of its lifetime (the end's time plus ``ready_lifetime``), and its deadline is that
    time; a replay makes the same decision and finds the same deadline."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.end()
    actors.validate(KEY)
    ended_at = T0 + timedelta(minutes=5)
    work = actors.end_response(at=ended_at)
    expires = ended_at + LIMITS.ready_lifetime
    assert appended(work) == [CallReady(key=KEY, cause=actors.log.position - 1, expires_at=expires)]
    assert ScheduleDeadline(key=KEY, at=expires) in work
    slot = actors.fold.state(KEY)
    assert slot is not None
    assert actors.fold.ready(KEY)
    assert actors.fold.deadline(slot) == expires
    replayed = replay(actors.log.records)
    state = replayed.state(KEY)
    assert state is not None
    assert state.snapshot() == slot.snapshot()
    assert replayed.deadline(state) == expires


def test_rules_8_an_unclaimed_ready_call_is_cancelled_when_its_lifetime_ends() -> None:
    """A deadline before the end of the lifetime changes nothing; one at it cancels the call
    ``ready_expired``, and a claim after that is refused as for any ended call."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.end()
    actors.validate(KEY)
    actors.end_response(at=T0 + timedelta(minutes=5))
    slot = actors.fold.state(KEY)
    assert slot is not None
    expires = actors.fold.deadline(slot)
    assert expires is not None
    early = appended(actors.feed(DeadlineReached(key=KEY), at=expires - timedelta(seconds=1)))
    assert [type(event) for event in early] == [EventRejected]
    expired = appended(actors.feed(DeadlineReached(key=KEY), at=expires))
    assert [(type(event), getattr(event, "reason", None)) for event in expired] == [
        (CallCancelled, CancelReason.READY_EXPIRED)
    ]
    refused = appended(actors.claim())
    assert [(type(event), getattr(event, "reason", None)) for event in refused] == [
        (EventRejected, RejectReason.CALL_TERMINAL)
    ]
    assert replay(actors.log.records).state(KEY) is not None


def test_rules_8_a_claim_after_the_lifetime_cancels_the_call_even_before_its_deadline() -> None:
    """A claim at or after the end of the lifetime, before any deadline was judged, cancels
    the call ``ready_expired`` and is rejected: an expired call never dispatches."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.end()
    actors.validate(KEY)
    actors.end_response(at=T0 + timedelta(minutes=5))
    slot = actors.fold.state(KEY)
    assert slot is not None
    expires = actors.fold.deadline(slot)
    assert expires is not None
    work = actors.feed(ClaimRequested(key=KEY, claim_id="late", executor="w"), at=expires)
    decisions = appended(work)
    assert [type(event) for event in decisions] == [CallCancelled, EventRejected]
    cancelled = decisions[0]
    assert isinstance(cancelled, CallCancelled)
    assert cancelled.reason is CancelReason.READY_EXPIRED


def test_rules_8_a_confirmed_call_is_ready_no_longer_than_its_confirmation() -> None:
    """A call that needs a confirmation is ready once confirmed, for the ready lifetime but no
    longer than the confirmation lets it be claimed; a deadline then cancels it
    ``confirmation_expired``."""
    actors = Actors()
    actors.turn()
    actors.collect()
    actors.end()
    actors.validate(KEY, ValidationResult(needs_confirmation=True))
    actors.end_response()
    given_at = T0 + timedelta(minutes=2)
    confirmation = attrs.evolve(confirmation_of(KEY), expires_at=given_at + timedelta(minutes=3))
    work = actors.feed(confirmation, at=given_at)
    [confirmed, ready] = appended(work)
    assert isinstance(confirmed, CallConfirmed)
    assert ready == CallReady(
        key=KEY, cause=actors.log.position - 2, expires_at=confirmation.expires_at
    )
    expired = appended(actors.feed(DeadlineReached(key=KEY), at=confirmation.expires_at))
    assert [getattr(event, "reason", None) for event in expired] == [
        CancelReason.CONFIRMATION_EXPIRED
    ]


def test_rules_7_a_ready_call_has_no_lifetime() -> None:
    """In a turn of rules 7 nothing bounds how long a ready call waits: no ``CallReady``, no
    deadline, and a claim a day later dispatches it."""
    actors = Actors()
    actors.turn(rules=7)
    actors.collect()
    actors.end()
    actors.validate(KEY)
    assert appended(actors.end_response()) == []
    slot = actors.fold.state(KEY)
    assert slot is not None
    assert actors.fold.deadline(slot) is None
    late = ClaimRequested(key=KEY, claim_id="claim-1", executor="w")
    work = actors.feed(late, at=T0 + timedelta(days=1))
    assert [type(event) for event in appended(work)] == [CallDispatched]
