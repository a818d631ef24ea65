"""The call state machine: every (phase, input) pair of its closed table, then each rule of the
module docstring with the concrete decisions it makes.

Calls are driven with ``step`` from a fresh ``CallState``, each input numbered by position and
time as the log would number it.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypedDict, TypeVar, cast

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inert.actors._arguments import ArgumentLimits, ParsedArguments, parse_arguments
from inert.actors._call import (
    CallContext,
    CallLimits,
    CallState,
    Decision,
    IllegalTransition,
    Input,
    ResponseEnd,
    TurnStatus,
    TurnView,
    ValidationOutcome,
    ValidationRequested,
    ValidationResult,
    evolve,
    recorded,
)
from inert.actors._decider import INPUT_TYPES, TABLE, decide, step
from inert.actors._handlers import _unwanted
from inert.events import (
    TERMINAL_PHASES,
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
    FailReason,
    IntentScope,
    OfferedTool,
    Phase,
    RejectReason,
    ResponseEnded,
    ResponseEndReason,
    ResponseQuarantined,
    ServerToolCalled,
    StreamLost,
    StreamResumed,
    TenantStopped,
    TerminalRef,
    ToolDisabled,
    TurnCancelled,
    TurnRef,
    TurnStarted,
    TurnSuperseded,
)

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
KEY = CallKey(
    tenant="acme", conversation="conv-1", turn="turn-1", response="resp-1", item="0", call="call_0"
)
TOOL = OfferedTool(name="lookup", digest="sha256:tool-lookup")
PRINCIPAL = "user:alice"
OTHER_TURN = TurnRef(tenant="acme", conversation="conv-1", turn="turn-2")

# A value that must never leave the argument bytes: searched for in every detail.
MARKER = "ZQX-ARGUMENT-VALUE"
WHOLE = f'{{"units": ["metric"], "city": "Paris {MARKER}", "days": 3}}'.encode()
CANONICAL = f'{{"city":"Paris {MARKER}","days":3,"units":["metric"]}}'.encode()
DIGEST = "sha256:" + hashlib.sha256(CANONICAL).hexdigest()
PIECES = (WHOLE[:14], WHOLE[14:33], WHOLE[33:])
END_SEQUENCE = len(PIECES) + 1

DecisionEvent = (
    CallCollecting
    | CallTerminalCandidate
    | CallValidated
    | CallAwaitingConfirmation
    | CallConfirmed
    | CallReady
    | CallDispatched
    | CallCancelled
    | CallFailed
    | EventRejected
)
ADDRESSED: tuple[type[Event], ...] = (
    CallOpened,
    ServerToolCalled,
    ArgumentsAppended,
    CallEnded,
    ConfirmationGiven,
    ConfirmationDenied,
    ClaimRequested,
    DeadlineReached,
)


VALIDATED_AT_RESPONSE_END = 6
"""The last rules under which a call is validated when its response ends: the rules most of
this module drives (rules 7, validation at the call's own end, has its own section)."""


def context(
    status: TurnStatus = TurnStatus.ACTIVE,
    *,
    blocked: CancelReason | None = None,
    limits: CallLimits | None = None,
    live_in_turn: int = 0,
    live_in_tenant: int = 0,
    rules: int = VALIDATED_AT_RESPONSE_END,
    response_end: ResponseEnd | None = None,
) -> CallContext:
    """The world of the call's turn as of an input."""
    return CallContext(
        turn=TurnView(principal=PRINCIPAL, tools={TOOL.name: TOOL}, status=status, rules=rules),
        blocked=blocked,
        limits=limits or CallLimits(),
        live_in_turn=live_in_turn,
        live_in_tenant=live_in_tenant,
        response_end=response_end,
    )


ACTIVE = context()


# --- events addressed to or concerning KEY ---------------------------------------------------


def opened(sequence: int | None = 0, tool: str = TOOL.name) -> CallOpened:
    return CallOpened(key=KEY, tool=tool, sequence=sequence)


def fragment(
    data: bytes, first: int | None, last: int | None = None, fragments: int = 1
) -> ArgumentsAppended:
    if first is not None and last is None:
        last = first
    return ArgumentsAppended(
        key=KEY, data=data, first_sequence=first, last_sequence=last, fragments=fragments
    )


def ended(sequence: int | None = END_SEQUENCE, final: bytes | None = None) -> CallEnded:
    terminal = (
        TerminalRef(sequence=sequence) if sequence is not None else TerminalRef(digest="raw:1")
    )
    return CallEnded(key=KEY, terminal=terminal, final_arguments=final)


def response_ended(reason: ResponseEndReason = ResponseEndReason.COMPLETED) -> ResponseEnded:
    return ResponseEnded(
        response=KEY.response_ref, reason=reason, terminal=TerminalRef(sequence=99)
    )


def confirmation(
    *,
    principal: str = PRINCIPAL,
    tool_digest: str = TOOL.digest,
    arguments_digest: str = DIGEST,
    expires_at: datetime = T0 + timedelta(days=1),
    arguments: bytes | None = None,
) -> ConfirmationGiven:
    return ConfirmationGiven(
        key=KEY,
        principal=principal,
        tool_digest=tool_digest,
        arguments_digest=arguments_digest,
        nonce="nonce-1",
        expires_at=expires_at,
        arguments=arguments,
    )


def denial(principal: str = PRINCIPAL) -> ConfirmationDenied:
    return ConfirmationDenied(key=KEY, principal=principal, reason="no")


def claim(claim_id: str = "claim-1") -> ClaimRequested:
    return ClaimRequested(key=KEY, claim_id=claim_id, executor="worker-1")


def deadline() -> DeadlineReached:
    return DeadlineReached(key=KEY)


def turn_cancelled() -> TurnCancelled:
    return TurnCancelled(turn=KEY.turn_ref, principal=PRINCIPAL, reason="stop")


# --- driving a call --------------------------------------------------------------------------


class Call:
    """One call driven through ``step``: each input gets the next position and, unless given,
    a time of ``T0`` plus its position in seconds."""

    def __init__(self, ctx: CallContext = ACTIVE) -> None:
        self.context = ctx
        self.state = CallState(key=KEY)
        self.position = 0
        self.last: Input | None = None

    def input(self, event: Event, *, at: datetime | None = None) -> Input:
        self.position += 1
        self.last = Input(
            event=event,
            position=self.position,
            event_id=f"event-{self.position}",
            at=at if at is not None else T0 + timedelta(seconds=self.position),
        )
        return self.last

    def send(
        self, event: Event, *, at: datetime | None = None, ctx: CallContext | None = None
    ) -> tuple[Decision, ...]:
        self.state, decisions = step(self.state, self.input(event, at=at), ctx or self.context)
        return decisions

    def phase(self) -> Phase:
        """The call's phase now (a call, so that type narrowing never outlives a step)."""
        return self.state.phase

    def answer(
        self, result: ValidationResult | None = None, *, ctx: CallContext | None = None
    ) -> tuple[Decision, ...]:
        outcome = ValidationOutcome(result=ValidationResult() if result is None else result)
        self.state, decisions = step(self.state, outcome, ctx or self.context)
        return decisions


def collecting(call: Call) -> None:
    call.send(opened(0))
    for sequence, piece in enumerate(PIECES, 1):
        call.send(fragment(piece, sequence))
    assert call.state.phase is Phase.COLLECTING


def candidate(call: Call) -> None:
    collecting(call)
    call.send(ended())
    assert call.state.phase is Phase.TERMINAL_CANDIDATE


def validating(call: Call) -> int:
    """To a terminal candidate whose validation was requested; the request's position."""
    candidate(call)
    call.send(response_ended())
    assert call.state.validating is not None
    return call.position


def validated(call: Call, *, needs_confirmation: bool = False) -> None:
    validating(call)
    call.answer(ValidationResult(needs_confirmation=needs_confirmation))
    assert call.state.phase is Phase.VALIDATED


def awaiting(call: Call) -> None:
    validated(call, needs_confirmation=True)
    assert call.state.awaiting_confirmation


def dispatched(call: Call) -> None:
    validated(call)
    call.send(claim())
    assert call.state.phase is Phase.DISPATCHED


def cancelled(call: Call) -> None:
    collecting(call)
    call.send(turn_cancelled(), ctx=context(TurnStatus.CANCELLED))
    assert call.state.phase is Phase.CANCELLED


def failed(call: Call) -> None:
    call.send(opened(0))
    call.send(fragment(b'{"a":', 1))
    call.send(ended(2))
    assert call.state.phase is Phase.FAILED


def reach(phase: Phase, *, pending_validation: bool = False) -> Call:
    """A call in ``phase`` reached through legal inputs (for ``terminal_candidate``, with its
    validation requested when ``pending_validation``; for ``validated``, the validation of its
    principal's edit at confirmation)."""
    call = Call()
    if phase is Phase.TERMINAL_CANDIDATE and pending_validation:
        validating(call)
        return call
    if phase is Phase.VALIDATED and pending_validation:
        awaiting(call)
        call.send(confirmation(arguments=b'{"city": "Lisbon"}'))
        assert call.state.validating is not None
        return call
    paths: dict[Phase, Callable[[Call], None]] = {
        Phase.ABSENT: lambda _: None,
        Phase.COLLECTING: collecting,
        Phase.TERMINAL_CANDIDATE: candidate,
        Phase.VALIDATED: validated,
        Phase.DISPATCHED: dispatched,
        Phase.CANCELLED: cancelled,
        Phase.FAILED: failed,
    }
    paths[phase](call)
    assert call.state.phase is phase
    return call


E = TypeVar("E", bound=Event)


# --- looking at decisions --------------------------------------------------------------------


def kinds(decisions: tuple[Decision, ...]) -> list[str]:
    """The type tags of the recorded decisions, in order."""
    return [decision.TAG for decision in recorded(decisions)]


def tags(*types: type[Event]) -> list[str]:
    return [event_type.TAG for event_type in types]


def rejection(decisions: tuple[Decision, ...]) -> EventRejected:
    """The one decision, which must be a rejection."""
    assert kinds(decisions) == tags(EventRejected), decisions
    found = recorded(decisions)[0]
    assert isinstance(found, EventRejected)
    return found


def failure(decisions: tuple[Decision, ...]) -> CallFailed:
    """The last recorded decision, which must be a failure."""
    found = recorded(decisions)[-1]
    assert isinstance(found, CallFailed), decisions
    return found


def cancellation(decisions: tuple[Decision, ...]) -> CallCancelled:
    """The first recorded decision, which must be a cancellation."""
    written = recorded(decisions)
    assert written, decisions
    assert isinstance(written[0], CallCancelled), decisions
    return written[0]


def one(decisions: tuple[Decision, ...], kind: type[E]) -> E:
    """The one recorded decision of this kind."""
    found = [decision for decision in recorded(decisions) if isinstance(decision, kind)]
    assert len(found) == 1, decisions
    return found[0]


def byte_values(value: object) -> list[bytes]:
    """Every non-empty bytes value reachable through attrs fields, tuples, lists and dicts."""
    if isinstance(value, bytes):
        return [value] if value else []
    if attrs.has(type(value)):
        return [
            found
            for attribute in attrs.fields(cast("type[attrs.AttrsInstance]", type(value)))
            for found in byte_values(getattr(value, attribute.name))
        ]
    if isinstance(value, tuple | list):
        return [found for item in value for found in byte_values(item)]
    if isinstance(value, dict):
        return [found for item in value.values() for found in byte_values(item)]
    return []


# --- the table -------------------------------------------------------------------------------


def sample(input_type: type) -> Event | ValidationOutcome:
    """A representative input of each type, addressed to or concerning ``KEY``."""
    if input_type is ValidationOutcome:
        return ValidationOutcome(result=ValidationResult())
    events: dict[type, Event] = {
        CallOpened: opened(0),
        ServerToolCalled: ServerToolCalled(key=KEY, tool="web_search"),
        ArgumentsAppended: fragment(b"{}", 9),
        CallEnded: ended(),
        ResponseEnded: response_ended(),
        StreamLost: StreamLost(response=KEY.response_ref, resumable=False),
        StreamResumed: StreamResumed(response=KEY.response_ref, after_sequence=2),
        TurnStarted: TurnStarted(turn=OTHER_TURN, principal=PRINCIPAL, tools=(TOOL,)),
        TurnCancelled: turn_cancelled(),
        TurnSuperseded: TurnSuperseded(turn=KEY.turn_ref, by=OTHER_TURN),
        ResponseQuarantined: ResponseQuarantined(
            response=KEY.response, tenant=None, operator="op", reason="r"
        ),
        ToolDisabled: ToolDisabled(tool=TOOL.name, tenant=None, operator="op", reason="r"),
        TenantStopped: TenantStopped(tenant=KEY.tenant, operator="op", reason="r"),
        ConfirmationGiven: confirmation(),
        ConfirmationDenied: denial(),
        ClaimRequested: claim(),
        DeadlineReached: deadline(),
    }
    return events[input_type]


PAIRS = list(itertools.product(Phase, INPUT_TYPES))


@pytest.mark.parametrize(
    ("phase", "input_type"),
    PAIRS,
    ids=[f"{phase.value}-{input_type.__name__}" for phase, input_type in PAIRS],
)
def test_every_pair_of_phase_and_input(phase: Phase, input_type: type) -> None:
    """A table pair decides with key and cause (terminal: rejects only); others are illegal."""
    call = reach(phase, pending_validation=input_type is ValidationOutcome)
    before = call.state
    made = sample(input_type)
    received = made if isinstance(made, ValidationOutcome) else call.input(made)
    if (phase, input_type) not in TABLE:
        with pytest.raises(IllegalTransition) as raised:
            decide(before, received, call.context)
        name = getattr(input_type, "TAG", input_type.__name__)
        assert phase.value in str(raised.value)
        assert name in str(raised.value)
        assert raised.value.phase is phase
        return
    decisions = decide(before, received, call.context)
    assert isinstance(decisions, tuple)
    if isinstance(received, Input):
        cause = received.position
    else:
        assert before.validating is not None
        cause = before.validating.cause
    for decision in recorded(decisions):
        assert isinstance(decision, DecisionEvent)
        assert decision.key == KEY
        assert decision.cause == cause
    after = before
    for made_decision in decisions:
        after = evolve(after, made_decision)
    if phase in TERMINAL_PHASES:
        assert after.phase is phase
        if input_type in ADDRESSED:
            assert rejection(decisions).reason is RejectReason.CALL_TERMINAL
        else:
            assert decisions == ()


def test_the_table_is_closed_as_documented() -> None:
    """The only pairs missing from the table are validation outcomes nobody can have asked for."""
    every = set(itertools.product(Phase, INPUT_TYPES))
    assert set(TABLE) <= every
    missing = every - set(TABLE)
    assert missing == {
        (phase, ValidationOutcome)
        for phase in Phase
        if phase not in (Phase.TERMINAL_CANDIDATE, Phase.VALIDATED)
    }


@pytest.mark.parametrize(
    "input_type",
    [input_type for input_type in INPUT_TYPES if input_type is not ValidationOutcome],
    ids=lambda input_type: input_type.__name__,
)
def test_no_input_is_decided_while_a_validation_is_pending(input_type: type) -> None:
    """While a validation is pending every input is illegal; the fold holds them."""
    call = reach(Phase.TERMINAL_CANDIDATE, pending_validation=True)
    made = sample(input_type)
    assert not isinstance(made, ValidationOutcome)
    with pytest.raises(IllegalTransition):
        decide(call.state, call.input(made), call.context)


def test_a_validation_outcome_nobody_asked_for_is_illegal() -> None:
    """A terminal candidate whose validation was not requested refuses an outcome."""
    call = reach(Phase.TERMINAL_CANDIDATE)
    with pytest.raises(IllegalTransition):
        decide(call.state, ValidationOutcome(result=ValidationResult()), call.context)


# --- rule 1: determinism ----------------------------------------------------------------------


def drive_everything(call: Call) -> list[tuple[Decision, ...]]:
    made: list[tuple[Decision, ...]] = [call.send(opened(0))]
    made += [call.send(fragment(piece, sequence)) for sequence, piece in enumerate(PIECES, 1)]
    made.append(call.send(ended()))
    made.append(call.send(response_ended()))
    made.append(call.answer(ValidationResult(needs_confirmation=True)))
    made.append(call.send(confirmation()))
    made.append(call.send(claim()))
    return made


def test_rule_1_the_same_inputs_give_the_same_decisions_and_states() -> None:
    """The same inputs give the same decisions and states, and deciding changes no state."""
    first, second = Call(), Call()
    assert drive_everything(first) == drive_everything(second)
    assert first.state == second.state
    assert first.state.phase is Phase.DISPATCHED
    call = reach(Phase.COLLECTING)
    before = call.state
    received = call.input(fragment(b"x", 9))
    assert decide(before, received, ACTIVE) == decide(before, received, ACTIVE)
    assert call.state == before


# --- rule 2: opening --------------------------------------------------------------------------


def test_rule_2_a_call_of_an_unknown_turn_is_rejected_and_stays_absent() -> None:
    """Without a known turn every event of the call is rejected as unknown_turn."""
    call = Call(CallContext(turn=None))
    for event in (opened(0), fragment(PIECES[0], 1), ended()):
        assert rejection(call.send(event)).reason is RejectReason.UNKNOWN_TURN
        assert call.state.phase is Phase.ABSENT


@pytest.mark.parametrize("status", [TurnStatus.CANCELLED, TurnStatus.SUPERSEDED])
def test_rule_2_a_call_of_a_stale_turn_is_rejected_and_stays_absent(status: TurnStatus) -> None:
    """In a cancelled or superseded turn opening, fragments and end are rejected as stale_turn."""
    call = Call(context(status))
    for event in (opened(0), fragment(PIECES[0], 1), ended()):
        rejected = rejection(call.send(event))
        assert rejected.reason is RejectReason.STALE_TURN
        assert rejected.rejected_type == event.TAG
        assert call.last is not None
        assert rejected.rejected_event_id == call.last.event_id
        assert call.state.phase is Phase.ABSENT


@pytest.mark.parametrize("status", [TurnStatus.CANCELLED, TurnStatus.SUPERSEDED])
def test_rule_2_every_event_addressed_to_a_call_of_a_stale_turn_is_stale(
    status: TurnStatus,
) -> None:
    """Requests for a call of a cancelled or superseded turn are rejected stale_turn."""
    call = Call(context(status))
    reasons = {
        event.TAG: rejection(call.send(event)).reason
        for event in (confirmation(), denial(), claim(), deadline())
    }
    assert reasons == dict.fromkeys(reasons, RejectReason.STALE_TURN)
    assert call.state.phase is Phase.ABSENT


def test_rule_2_requests_for_a_call_never_opened_are_rejected_as_unknown() -> None:
    """Requests for a call never opened, in an active turn, are rejected unknown_call."""
    call = Call()
    for event in (confirmation(), denial(), claim(), deadline()):
        assert rejection(call.send(event)).reason is RejectReason.UNKNOWN_CALL
        assert call.state.phase is Phase.ABSENT


def test_rule_2_an_open_in_an_active_turn_starts_collecting() -> None:
    """Opening records collecting with the tool name and remembers when and at what sequence."""
    call = Call()
    decisions = call.send(opened(5), at=T0)
    assert recorded(decisions) == [CallCollecting(key=KEY, cause=1, tool=TOOL.name)]
    assert call.state.phase is Phase.COLLECTING
    assert call.state.opened_sequence == 5
    assert call.state.last_activity == T0


def test_rule_2_a_tool_the_turn_did_not_offer_fails_at_open() -> None:
    """An unknown tool is recorded as collecting and failed at once (unknown_tool)."""
    call = Call()
    decisions = call.send(opened(0, tool="rm_rf"))
    assert kinds(decisions) == tags(CallCollecting, CallFailed)
    assert failure(decisions).reason is FailReason.UNKNOWN_TOOL
    assert call.state.phase is Phase.FAILED


@pytest.mark.parametrize(
    "control",
    [
        CancelReason.RESPONSE_QUARANTINED,
        CancelReason.TOOL_DISABLED,
        CancelReason.TENANT_STOPPED,
    ],
)
def test_rule_2_a_call_opened_under_a_control_is_cancelled(control: CancelReason) -> None:
    """An operator control in force at the opening cancels the call with the control's reason."""
    call = Call(context(blocked=control))
    decisions = call.send(opened(0))
    assert kinds(decisions) == tags(CallCollecting, CallCancelled)
    assert one(decisions, CallCancelled).reason is control
    assert call.state.phase is Phase.CANCELLED


@pytest.mark.parametrize("event", [fragment(PIECES[0], 1), ended()], ids=["fragment", "end event"])
def test_rule_2_data_before_the_opening_fails_the_call(event: Event) -> None:
    """A fragment or end event before the opening fails the call; a late opening is refused."""
    call = Call()
    assert failure(call.send(event)).reason is FailReason.PROTOCOL_VIOLATION
    assert call.state.phase is Phase.FAILED
    assert rejection(call.send(opened(0))).reason is RejectReason.CALL_TERMINAL


def test_rule_2_an_open_call_opened_again_is_a_duplicate_or_a_conflict() -> None:
    """The same opening again is a duplicate; one naming another tool fails identity_conflict."""
    call = reach(Phase.COLLECTING)
    assert rejection(call.send(opened(0))).reason is RejectReason.DUPLICATE
    assert call.state.phase is Phase.COLLECTING
    assert failure(call.send(opened(0, tool="other"))).reason is FailReason.IDENTITY_CONFLICT


@pytest.mark.parametrize("scope", ["turn", "tenant"])
def test_rule_2_live_call_limits_fail_the_opening(scope: str) -> None:
    """At the live-call limit per turn or tenant an opening fails limit_exceeded."""
    limits = CallLimits(max_live_per_turn=2, max_live_per_tenant=3)
    full = (
        context(limits=limits, live_in_turn=2)
        if scope == "turn"
        else context(limits=limits, live_in_tenant=3)
    )
    call = Call(full)
    decisions = call.send(opened(0))
    assert kinds(decisions) == tags(CallCollecting, CallFailed)
    assert failure(decisions).reason is FailReason.LIMIT_EXCEEDED
    room = Call(context(limits=limits, live_in_turn=1, live_in_tenant=2))
    assert kinds(room.send(opened(0))) == tags(CallCollecting)
    assert room.state.phase is Phase.COLLECTING


# --- rule 3: fragments -------------------------------------------------------------------------


def test_rule_3_an_accepted_fragment_records_nothing_and_is_kept_private() -> None:
    """A new fragment is buffered: no recorded decision, size and count grow, activity moves."""
    call = Call()
    call.send(opened(0), at=T0)
    decisions = call.send(fragment(PIECES[0], 1), at=T0 + timedelta(seconds=3))
    assert recorded(decisions) == []
    assert call.state.size == len(PIECES[0])
    assert call.state.fragments == 1
    assert call.state.last_activity == T0 + timedelta(seconds=3)


def test_rule_3_a_duplicate_fragment_is_rejected_and_not_added() -> None:
    """A fragment whose sequences were all seen is rejected duplicate and not buffered."""
    call = Call()
    call.send(opened(0))
    call.send(fragment(PIECES[0], 1))
    call.send(fragment(PIECES[1], 2))
    size, count = call.state.size, call.state.fragments
    assert rejection(call.send(fragment(PIECES[0], 1))).reason is RejectReason.DUPLICATE
    coalesced = fragment(PIECES[0] + PIECES[1], 1, 2, fragments=2)
    assert rejection(call.send(coalesced)).reason is RejectReason.DUPLICATE
    assert (call.state.size, call.state.fragments) == (size, count)
    assert call.state.phase is Phase.COLLECTING
    call.send(fragment(PIECES[2], 3))
    call.send(ended())
    call.send(response_ended())
    assert one(call.answer(), CallValidated).arguments == CANONICAL


def test_rule_3_an_overlapping_fragment_fails_the_call() -> None:
    """A fragment that covers sequences seen and unseen fails protocol_violation."""
    call = Call()
    call.send(opened(0))
    call.send(fragment(b"ab", 1, 2, fragments=2))
    decisions = call.send(fragment(b"bc", 2, 3, fragments=2))
    assert failure(decisions).reason is FailReason.PROTOCOL_VIOLATION
    assert call.state.phase is Phase.FAILED


@pytest.mark.parametrize("numbered_first", [True, False], ids=["numbered-first", "bare-first"])
def test_rule_3_numbered_and_unnumbered_fragments_do_not_mix(numbered_first: bool) -> None:
    """A call whose fragments are partly numbered and partly not fails protocol_violation."""
    call = Call()
    call.send(opened(None))
    call.send(fragment(PIECES[0], 1 if numbered_first else None))
    decisions = call.send(fragment(PIECES[1], None if numbered_first else 2))
    assert failure(decisions).reason is FailReason.PROTOCOL_VIOLATION


def test_rule_3_past_the_byte_limit_the_call_fails_too_large() -> None:
    """Fragments up to the byte limit are kept; one byte more fails too_large."""
    limits = CallLimits(arguments=ArgumentLimits(max_bytes=16))
    call = Call(context(limits=limits))
    call.send(opened(0))
    assert recorded(call.send(fragment(b"x" * 10, 1))) == []
    assert recorded(call.send(fragment(b"x" * 6, 2))) == []
    assert call.state.size == 16
    decisions = call.send(fragment(b"x", 3))
    assert failure(decisions).reason is FailReason.TOO_LARGE
    assert MARKER not in failure(decisions).detail
    provided = Call(context(limits=limits))
    provided.send(opened(None))
    big = f'{{"v":"{MARKER}"}}'.encode()
    assert failure(provided.send(ended(None, final=big))).reason is FailReason.TOO_LARGE


def test_a_call_ending_while_collecting_records_what_it_received() -> None:
    """The ending decision counts the fragments taken and the one that ended the call."""
    limits = CallLimits(arguments=ArgumentLimits(max_bytes=16))
    call = Call(context(limits=limits))
    call.send(opened(0))
    call.send(fragment(b"x" * 10, 1))
    ended_by_fragment = failure(call.send(fragment(b"x" * 7, 2)))
    assert (ended_by_fragment.fragments, ended_by_fragment.size) == (2, 17)
    cancelled = reach(Phase.COLLECTING)
    counts = (cancelled.state.fragments, cancelled.state.size)
    decision = recorded(cancelled.send(denial()))[0]
    assert isinstance(decision, CallCancelled)
    assert (decision.fragments, decision.size) == counts
    past_collecting = recorded(reach(Phase.VALIDATED).send(denial()))[0]
    assert isinstance(past_collecting, CallCancelled)
    assert (past_collecting.fragments, past_collecting.size) == (None, None)


def test_rule_3_past_the_fragment_limit_the_call_fails_too_many_fragments() -> None:
    """Fragments are counted as the adapter joined them; past the limit the call fails."""
    limits = CallLimits(max_fragments=3)
    call = Call(context(limits=limits))
    call.send(opened(0))
    assert recorded(call.send(fragment(b"ab", 1, 2, fragments=2))) == []
    assert recorded(call.send(fragment(b"c", 3))) == []
    assert failure(call.send(fragment(b"d", 4))).reason is FailReason.TOO_MANY_FRAGMENTS
    coalesced = Call(context(limits=limits))
    coalesced.send(opened(0))
    decisions = coalesced.send(fragment(b"abcd", 1, 4, fragments=4))
    assert failure(decisions).reason is FailReason.TOO_MANY_FRAGMENTS


def test_rule_3_reordered_fragments_are_assembled_in_sequence_order() -> None:
    """Fragments arriving as 2, 3, 1 are assembled as 1, 2, 3: the whole object is validated."""
    call = Call()
    call.send(opened(0))
    for sequence in (2, 3, 1):
        call.send(fragment(PIECES[sequence - 1], sequence))
    end = one(call.send(ended()), CallTerminalCandidate)
    assert (end.size, end.fragments, end.arguments_digest) == (len(WHOLE), 3, DIGEST)
    call.send(response_ended())
    found = one(call.answer(), CallValidated)
    assert found.arguments == CANONICAL
    assert found.arguments_digest == DIGEST


@pytest.mark.parametrize(
    ("opening", "numbers"),
    [
        (0, ((0, 0), (1, 1), (2, 2))),
        (5, ((3, 3), (6, 6), (7, 7))),
        (5, ((4, 6), (7, 7), (8, 8))),
    ],
    ids=["the-opening's-own", "before-the-opening", "coalesced-over-the-opening"],
)
def test_rule_3_a_fragment_numbered_at_or_before_the_opening_fails_the_call(
    opening: int, numbers: tuple[tuple[int, int], ...]
) -> None:
    """A fragment numbered at or before the opening fails the call protocol_violation."""
    call = Call()
    call.send(opened(opening))
    made: list[Decision] = []
    for (first, last), piece in zip(numbers, PIECES, strict=True):
        made += call.send(fragment(piece, first, last, fragments=last - first + 1))
    made += call.send(ended(numbers[-1][1] + 1))
    assert call.state.phase is Phase.FAILED, made
    [found] = [decision for decision in made if isinstance(decision, CallFailed)]
    assert found.reason is FailReason.PROTOCOL_VIOLATION
    assert not any(isinstance(decision, CallTerminalCandidate) for decision in made)


# --- rule 4: the end event ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sequences", "end", "named"),
    [
        ((1, 3), 4, 2),
        ((2, 3), 4, 1),
        ((1, 2), 4, 3),
        ((), 4, 1),
        ((1, 2, 3, 4), 4, 4),
    ],
    ids=["middle", "first", "last", "all", "after-the-end"],
)
def test_rule_4_a_sequence_gap_at_the_end_fails_the_call(
    sequences: tuple[int, ...], end: int, named: int
) -> None:
    """A sequence missing at the end event fails sequence_gap with a detail naming it."""
    call = Call()
    call.send(opened(0))
    for sequence in sequences:
        call.send(fragment(b"x", sequence))
    found = failure(call.send(ended(end)))
    assert found.reason is FailReason.SEQUENCE_GAP
    assert re.search(rf"\b{named}\b", found.detail), found.detail


def test_rule_4_final_arguments_that_differ_from_the_fragments_fail_the_call() -> None:
    """Final arguments unlike the assembled bytes fail final_arguments_mismatch."""
    call = reach(Phase.COLLECTING)
    found = failure(call.send(ended(final=b'{"city":"Rome"}')))
    assert found.reason is FailReason.FINAL_ARGUMENTS_MISMATCH
    assert MARKER not in found.detail
    same = reach(Phase.COLLECTING)
    one(same.send(ended(final=WHOLE)), CallTerminalCandidate)


@pytest.mark.parametrize("numbered", [True, False])
def test_rule_4_final_arguments_without_fragments_stand_for_them(numbered: bool) -> None:
    """With no fragment, the provider's final arguments are the arguments."""
    call = Call()
    call.send(opened(0 if numbered else None))
    end = one(call.send(ended(1 if numbered else None, final=WHOLE)), CallTerminalCandidate)
    assert (end.size, end.fragments, end.arguments_digest) == (len(WHOLE), 0, DIGEST)
    call.send(response_ended())
    assert one(call.answer(), CallValidated).arguments == CANONICAL


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (f'{{"v":"{MARKER}"'.encode(), "syntax"),
        (f'{{"v":"{MARKER}","x":NaN}}'.encode(), "non_finite_number"),
        (f'{{"v":"{MARKER}","v":"{MARKER}"}}'.encode(), "duplicate_key"),
        (f'["{MARKER}"]'.encode(), "not_an_object"),
    ],
    ids=["syntax", "nan", "duplicate-key", "not-an-object"],
)
def test_rule_4_malformed_arguments_fail_with_the_problem_never_the_value(
    data: bytes, problem: str
) -> None:
    """Refused bytes fail malformed_arguments; the detail names the problem, never a value."""
    call = Call()
    call.send(opened(0))
    call.send(fragment(data, 1))
    found = failure(call.send(ended(2)))
    assert found.reason is FailReason.MALFORMED_ARGUMENTS
    assert problem in found.detail
    assert MARKER not in found.detail
    assert call.state.phase is Phase.FAILED


def test_rule_4_the_end_event_permits_parsing_and_nothing_more() -> None:
    """The end event parses and makes a candidate; no validation, claim or confirmation yet."""
    call = reach(Phase.COLLECTING)
    decisions = call.send(ended())
    assert kinds(decisions) == tags(CallTerminalCandidate)
    assert not any(isinstance(decision, ValidationRequested) for decision in decisions)
    assert call.state.validating is None
    assert call.state.arguments is not None
    assert call.state.arguments.canonical == CANONICAL
    assert rejection(call.send(claim())).reason is RejectReason.NOT_READY
    assert rejection(call.send(confirmation())).reason is RejectReason.NOT_READY
    with pytest.raises(IllegalTransition):
        call.answer()
    assert call.state.phase is Phase.TERMINAL_CANDIDATE


@pytest.mark.parametrize("phase", [Phase.TERMINAL_CANDIDATE, Phase.VALIDATED])
def test_rule_4_a_replayed_end_event_is_a_duplicate(phase: Phase) -> None:
    """The same end event again is a duplicate; a different one fails protocol_violation."""
    call = reach(phase)
    decisions = call.send(ended())
    assert rejection(decisions).reason is RejectReason.DUPLICATE
    assert not any(isinstance(decision, ValidationRequested) for decision in decisions)
    assert call.state.phase is phase
    assert failure(call.send(ended(7))).reason is FailReason.PROTOCOL_VIOLATION


@pytest.mark.parametrize("phase", [Phase.TERMINAL_CANDIDATE, Phase.VALIDATED])
def test_rule_4_a_fragment_after_the_end_event(phase: Phase) -> None:
    """After the end event a replayed fragment is a duplicate and a new one fails the call."""
    call = reach(phase)
    assert rejection(call.send(fragment(PIECES[1], 2))).reason is RejectReason.DUPLICATE
    assert call.state.phase is phase
    assert failure(call.send(fragment(b"x", 9))).reason is FailReason.PROTOCOL_VIOLATION


# --- rule 5: the response's end ----------------------------------------------------------------


def test_rule_5_a_completed_response_asks_for_validation_once() -> None:
    """A completed response asks once for validation of the parsed arguments, recording nothing."""
    call = reach(Phase.TERMINAL_CANDIDATE)
    decisions = call.send(response_ended(), at=T0 + timedelta(minutes=1))
    assert recorded(decisions) == []
    [request] = decisions
    assert isinstance(request, ValidationRequested)
    assert request.key == KEY
    assert request.tool == TOOL
    assert request.principal == PRINCIPAL
    assert request.arguments.canonical == CANONICAL
    assert request.cause == call.position
    assert request.at == T0 + timedelta(minutes=1)
    assert call.state.validating == request


@pytest.mark.parametrize(
    "reason",
    [reason for reason in ResponseEndReason if reason is not ResponseEndReason.COMPLETED],
)
def test_rule_5_a_response_that_did_not_complete_fails_its_candidate(
    reason: ResponseEndReason,
) -> None:
    """A response that ends any other way fails a terminal candidate response_failed (or
    protocol_violation where the adapter saw the provider break its protocol)."""
    call = reach(Phase.TERMINAL_CANDIDATE)
    found = failure(call.send(response_ended(reason)))
    expected = (
        FailReason.PROTOCOL_VIOLATION
        if reason is ResponseEndReason.PROTOCOL_VIOLATION
        else FailReason.RESPONSE_FAILED
    )
    assert found.reason is expected
    assert reason.value in found.detail
    assert call.state.validating is None


@pytest.mark.parametrize(
    ("reason", "failed_as"),
    [
        (ResponseEndReason.COMPLETED, FailReason.PROTOCOL_VIOLATION),
        (ResponseEndReason.LENGTH, FailReason.RESPONSE_FAILED),
        (ResponseEndReason.ERROR, FailReason.RESPONSE_FAILED),
    ],
)
def test_rule_5_a_response_that_ends_before_the_call_fails_it(
    reason: ResponseEndReason, failed_as: FailReason
) -> None:
    """A response that ends before the call's own end event fails the collecting call."""
    call = reach(Phase.COLLECTING)
    assert failure(call.send(response_ended(reason))).reason is failed_as
    assert call.state.phase is Phase.FAILED


def test_rule_5_a_failed_validation_is_recorded_with_its_cause() -> None:
    """A validation failure is recorded with its reason and detail, caused by the response end."""
    call = Call()
    asked = validating(call)
    result = ValidationResult(failure=FailReason.SCHEMA_INVALID, detail="$.days: maximum")
    assert recorded(call.answer(result)) == [
        CallFailed(key=KEY, cause=asked, reason=FailReason.SCHEMA_INVALID, detail="$.days: maximum")
    ]
    assert call.state.phase is Phase.FAILED
    assert call.state.arguments is None


def test_rule_5_an_accepted_validation_records_the_canonical_arguments() -> None:
    """An accepted validation records the canonical bytes and digests; the call is ready."""
    call = Call()
    asked = validating(call)
    assert recorded(call.answer()) == [
        CallValidated(
            key=KEY,
            cause=asked,
            tool=TOOL.name,
            tool_digest=TOOL.digest,
            arguments=CANONICAL,
            arguments_digest=DIGEST,
            needs_confirmation=False,
        )
    ]
    assert call.state.ready
    assert call.state.deadline() is None


def test_rule_5_a_validation_needing_confirmation_waits_until_its_lifetime_ends() -> None:
    """needs_confirmation waits until the response end's time plus the confirmation lifetime."""
    limits = CallLimits(confirmation_lifetime=timedelta(minutes=3))
    call = Call(context(limits=limits))
    candidate(call)
    ended_at = T0 + timedelta(minutes=2)
    call.send(response_ended(), at=ended_at)
    asked = call.position
    decisions = call.answer(ValidationResult(needs_confirmation=True))
    assert kinds(decisions) == tags(CallValidated, CallAwaitingConfirmation)
    assert one(decisions, CallValidated).needs_confirmation
    assert one(decisions, CallAwaitingConfirmation) == CallAwaitingConfirmation(
        key=KEY, cause=asked, arguments_digest=DIGEST, expires_at=ended_at + timedelta(minutes=3)
    )
    assert call.state.awaiting_confirmation
    assert not call.state.ready
    assert call.state.deadline(limits) == ended_at + timedelta(minutes=3)


# --- rule 6: wanted until dispatched -----------------------------------------------------------


UNWANTED: dict[str, tuple[Event, CallContext, CancelReason]] = {
    "turn-cancelled": (
        turn_cancelled(),
        context(TurnStatus.CANCELLED),
        CancelReason.TURN_CANCELLED,
    ),
    "turn-superseded": (
        TurnSuperseded(turn=KEY.turn_ref, by=OTHER_TURN),
        context(TurnStatus.SUPERSEDED),
        CancelReason.SUPERSEDED,
    ),
    "response-quarantined": (
        ResponseQuarantined(response=KEY.response, tenant=None, operator="op", reason="r"),
        context(blocked=CancelReason.RESPONSE_QUARANTINED),
        CancelReason.RESPONSE_QUARANTINED,
    ),
    "tool-disabled": (
        ToolDisabled(tool=TOOL.name, tenant=KEY.tenant, operator="op", reason="r"),
        context(blocked=CancelReason.TOOL_DISABLED),
        CancelReason.TOOL_DISABLED,
    ),
    "tenant-stopped": (
        TenantStopped(tenant=KEY.tenant, operator="op", reason="r"),
        context(blocked=CancelReason.TENANT_STOPPED),
        CancelReason.TENANT_STOPPED,
    ),
}
OPEN_STATES: dict[str, Callable[[Call], None]] = {
    "collecting": collecting,
    "terminal-candidate": candidate,
    "awaiting-confirmation": awaiting,
    "ready": validated,
}


class Received(TypedDict, total=False):
    """The counts an ending decision records, as its keyword arguments."""

    fragments: int
    size: int


def received_counts(call: Call) -> Received:
    """The counts an ending decision records: those of a call still collecting, else none."""
    if call.state.phase is not Phase.COLLECTING:
        return {}
    return {"fragments": call.state.fragments, "size": call.state.size}


@pytest.mark.parametrize("where", list(OPEN_STATES))
@pytest.mark.parametrize("why", list(UNWANTED))
def test_rule_6_an_unwanted_call_is_cancelled_in_every_open_state(where: str, why: str) -> None:
    """Turn, quarantine, tool and tenant stops cancel the call in every state before dispatch."""
    event, unwanted, reason = UNWANTED[why]
    call = Call()
    OPEN_STATES[where](call)
    counts = received_counts(call)
    decisions = call.send(event, ctx=unwanted)
    assert recorded(decisions) == [
        CallCancelled(key=KEY, cause=call.position, reason=reason, **counts)
    ]
    assert call.state.phase is Phase.CANCELLED
    assert call.state.arguments is None
    assert call.send(event, ctx=unwanted) == ()
    assert rejection(call.send(claim(), ctx=unwanted)).reason is RejectReason.CALL_TERMINAL


@pytest.mark.parametrize("why", list(UNWANTED))
def test_rule_6_a_scope_event_that_leaves_the_call_wanted_changes_nothing(why: str) -> None:
    """A turn or operator event seen in a context that still wants the call does nothing."""
    event, _, _ = UNWANTED[why]
    call = reach(Phase.COLLECTING)
    before = call.state
    assert call.send(event) == ()
    assert call.state == before


@pytest.mark.parametrize(
    ("where", "event"),
    [
        ("collecting", fragment(b"x", 4)),
        ("collecting", ended()),
        ("collecting", deadline()),
        ("terminal-candidate", response_ended()),
        ("terminal-candidate", StreamResumed(response=KEY.response_ref)),
    ],
    ids=["fragment", "end", "deadline", "response-end", "stream-resumed"],
)
def test_rule_6_the_first_input_that_sees_an_unwanted_context_cancels(
    where: str, event: Event
) -> None:
    """Whatever input first sees the turn cancelled cancels the call instead of acting."""
    call = Call()
    OPEN_STATES[where](call)
    decisions = call.send(event, ctx=context(TurnStatus.CANCELLED))
    assert kinds(decisions) == tags(CallCancelled)
    assert cancellation(decisions).reason is CancelReason.TURN_CANCELLED
    assert not any(isinstance(decision, ValidationRequested) for decision in decisions)


@pytest.mark.parametrize("why", list(UNWANTED))
def test_rule_6_a_claim_that_finds_the_call_unwanted_is_cancelled_and_refused(why: str) -> None:
    """A claim of a call no longer wanted records its cancellation and a rejection."""
    _, unwanted, reason = UNWANTED[why]
    call = reach(Phase.VALIDATED)
    decisions = call.send(claim(), ctx=unwanted)
    assert kinds(decisions) == tags(CallCancelled, EventRejected)
    assert cancellation(decisions).reason is reason
    assert one(decisions, EventRejected).reason is RejectReason.NOT_READY
    assert call.state.phase is Phase.CANCELLED


@pytest.mark.parametrize("where", ["collecting", "terminal-candidate"])
def test_rule_6_a_stream_lost_for_good_cancels_connection_lost(where: str) -> None:
    """A stream lost for good cancels connection_lost; a resumable loss changes nothing."""
    call = Call()
    OPEN_STATES[where](call)
    before = call.state
    assert call.send(StreamLost(response=KEY.response_ref, resumable=True)) == ()
    assert call.state == before
    counts = received_counts(call)
    decisions = call.send(StreamLost(response=KEY.response_ref, resumable=False))
    assert recorded(decisions) == [
        CallCancelled(key=KEY, cause=call.position, reason=CancelReason.CONNECTION_LOST, **counts)
    ]


def test_rule_6_a_stream_lost_after_validation_changes_nothing() -> None:
    """Once validated the response has ended: a lost stream no longer concerns the call."""
    call = reach(Phase.VALIDATED)
    before = call.state
    assert call.send(StreamLost(response=KEY.response_ref, resumable=False)) == ()
    assert call.state == before


# --- rule 7: confirmation ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        (confirmation(principal="user:mallory"), RejectReason.WRONG_PRINCIPAL),
        (confirmation(arguments_digest="sha256:other"), RejectReason.MISMATCHED_CONFIRMATION),
        (confirmation(tool_digest="sha256:other-tool"), RejectReason.MISMATCHED_CONFIRMATION),
        (confirmation(expires_at=T0 + timedelta(seconds=30)), RejectReason.EXPIRED_CONFIRMATION),
    ],
    ids=["wrong-principal", "other-arguments", "other-tool", "expired"],
)
def test_rule_7_a_confirmation_that_does_not_match_is_rejected(
    given: ConfirmationGiven, reason: RejectReason
) -> None:
    """A confirmation for another principal, digest or already expired is rejected."""
    call = Call()
    awaiting(call)
    before = call.state
    rejected = rejection(call.send(given, at=T0 + timedelta(seconds=30)))
    assert rejected.reason is reason
    assert rejected.rejected_type == ConfirmationGiven.TAG
    assert call.state == before
    assert call.state.awaiting_confirmation


def test_rule_7_a_matching_confirmation_is_used_once() -> None:
    """The right confirmation confirms the call once; a second one is a duplicate."""
    call = Call()
    awaiting(call)
    decisions = call.send(confirmation())
    assert call.last is not None
    assert recorded(decisions) == [
        CallConfirmed(
            key=KEY,
            cause=call.position,
            principal=PRINCIPAL,
            confirmation_event_id=call.last.event_id,
            expires_at=confirmation().expires_at,
        )
    ]
    assert call.state.ready
    assert rejection(call.send(confirmation())).reason is RejectReason.DUPLICATE
    assert call.state.ready


def test_rule_7_a_confirmation_after_the_calls_expiry_cancels_it() -> None:
    """A confirmation after the call's expiry cancels it and is rejected as expired."""
    call = Call()
    candidate(call)
    call.send(response_ended(), at=T0 + timedelta(minutes=1))
    call.answer(ValidationResult(needs_confirmation=True))
    expiry = T0 + timedelta(minutes=11)
    assert call.state.confirmation_expires == expiry
    decisions = call.send(confirmation(), at=expiry)
    assert kinds(decisions) == tags(CallCancelled, EventRejected)
    assert cancellation(decisions).reason is CancelReason.CONFIRMATION_EXPIRED
    assert one(decisions, EventRejected).reason is RejectReason.EXPIRED_CONFIRMATION
    assert call.state.phase is Phase.CANCELLED


def test_rule_7_a_confirmation_for_a_tool_that_needs_none_is_rejected() -> None:
    """A ready call that needed no confirmation refuses one as mismatched."""
    call = reach(Phase.VALIDATED)
    assert rejection(call.send(confirmation())).reason is RejectReason.MISMATCHED_CONFIRMATION
    assert call.state.ready
    assert not call.state.confirmed


@pytest.mark.parametrize("where", list(OPEN_STATES))
def test_rule_7_a_denial_cancels_the_call_in_any_open_state(where: str) -> None:
    """The principal's denial cancels the call; anyone else's is rejected wrong_principal."""
    call = Call()
    OPEN_STATES[where](call)
    before = call.state
    assert rejection(call.send(denial("user:mallory"))).reason is RejectReason.WRONG_PRINCIPAL
    assert call.state == before
    counts = received_counts(call)
    decisions = call.send(denial())
    assert recorded(decisions) == [
        CallCancelled(
            key=KEY, cause=call.position, reason=CancelReason.CONFIRMATION_DENIED, **counts
        )
    ]


def test_rule_7_a_denial_after_confirmation_still_cancels() -> None:
    """Until dispatched, a denial wins even over a confirmation given before it."""
    call = Call()
    awaiting(call)
    call.send(confirmation())
    assert cancellation(call.send(denial())).reason is CancelReason.CONFIRMATION_DENIED
    assert rejection(call.send(claim())).reason is RejectReason.CALL_TERMINAL


EDIT = b'{"city": "Lisbon", "days": 2}'


def test_rule_7_an_edit_is_validated_once_then_replaces_the_arguments_and_confirms() -> None:
    """A confirmation carrying an edit asks for one validation of the edit; its acceptance
    records the edited arguments (who, what they replaced, the edit's size) and the
    confirmation for them at once, and a claim dispatches the edit."""
    call = Call()
    awaiting(call)
    asked = call.send(confirmation(arguments=EDIT))
    assert recorded(asked) == []
    (request,) = asked
    assert isinstance(request, ValidationRequested)
    assert request.edit is not None
    assert request.arguments.value == {"city": "Lisbon", "days": 2}
    answered = call.answer(ValidationResult())
    validated = one(answered, CallValidated)
    assert validated.edited_by == PRINCIPAL
    assert validated.edited_from == DIGEST
    assert validated.edited_size == len(EDIT)
    assert validated.arguments_digest == request.arguments.digest
    assert one(answered, CallConfirmed).confirmation_event_id == request.edit.confirmation_event_id
    assert call.state.ready
    assert call.state.arguments_digest == request.arguments.digest
    assert kinds(call.send(claim())) == tags(CallDispatched)


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (b'{"city": "Lisbon"', FailReason.MALFORMED_ARGUMENTS),
        (b'{"city": NaN}', FailReason.MALFORMED_ARGUMENTS),
        (b"[]", FailReason.MALFORMED_ARGUMENTS),
    ],
)
def test_rule_7_an_edit_that_does_not_parse_is_refused_at_once(
    edit: bytes, reason: FailReason
) -> None:
    """An edit the strict parser refuses is refused without a validation; the call still waits
    for a confirmation of the arguments it has."""
    call = Call()
    awaiting(call)
    before = call.state
    refused = one(call.send(confirmation(arguments=edit)), EditRefused)
    assert refused.reason is reason
    assert refused.size == len(edit)
    assert call.state == before
    assert call.state.awaiting_confirmation


def test_rule_7_an_edit_the_validation_refuses_changes_nothing() -> None:
    """A refused validation of the edit records why and leaves the call waiting as it was."""
    call = Call()
    awaiting(call)
    before = call.state
    call.send(confirmation(arguments=EDIT))
    result = ValidationResult(failure=FailReason.SCHEMA_INVALID, detail="/days maximum")
    refused = one(call.answer(result), EditRefused)
    assert (refused.reason, refused.detail) == (FailReason.SCHEMA_INVALID, "/days maximum")
    assert call.state == before
    assert kinds(call.send(confirmation())) == tags(CallConfirmed)


def test_rule_7_an_edit_is_judged_like_any_confirmation_first() -> None:
    """Another principal's edit, or an edit naming arguments the person was not shown, is
    rejected before it is parsed; an edit equal to the arguments confirms them as they are."""
    call = Call()
    awaiting(call)
    wrong = rejection(call.send(confirmation(principal="user:mallory", arguments=EDIT)))
    assert wrong.reason is RejectReason.WRONG_PRINCIPAL
    other = rejection(call.send(confirmation(arguments_digest="sha256:other", arguments=EDIT)))
    assert other.reason is RejectReason.MISMATCHED_CONFIRMATION
    assert kinds(call.send(confirmation(arguments=CANONICAL))) == tags(CallConfirmed)


# --- rule 8: claims ---------------------------------------------------------------------------


@pytest.mark.parametrize("phase", [Phase.COLLECTING, Phase.TERMINAL_CANDIDATE])
def test_rule_8_a_claim_before_the_call_is_ready_is_rejected(phase: Phase) -> None:
    """A claim of a collecting or terminal-candidate call is rejected not_ready."""
    call = reach(phase)
    before = call.state
    assert rejection(call.send(claim())).reason is RejectReason.NOT_READY
    assert call.state == before


def test_rule_8_a_claim_of_a_call_awaiting_confirmation_is_rejected() -> None:
    """A claim of a call awaiting confirmation is rejected; after confirmation one dispatches."""
    call = Call()
    awaiting(call)
    assert rejection(call.send(claim("early"))).reason is RejectReason.NOT_READY
    assert call.state.awaiting_confirmation
    call.send(confirmation())
    assert one(call.send(claim("late")), CallDispatched).claim_id == "late"


def parsed(data: bytes) -> ParsedArguments:
    arguments = parse_arguments(data, ArgumentLimits())
    assert isinstance(arguments, ParsedArguments)
    return arguments


def test_rule_8_a_claim_recomputes_the_digest_the_confirmation_named() -> None:
    """At the claim, the digest of the arguments that would run is computed again: arguments
    that are not the confirmed ones are never dispatched."""
    call = Call()
    awaiting(call)
    call.send(confirmation())
    assert call.state.arguments is not None
    call.state = attrs.evolve(call.state, arguments=parsed(b'{"city": "Elsewhere"}'))
    rejected = rejection(call.send(claim()))
    assert rejected.reason is RejectReason.MISMATCHED_CONFIRMATION
    assert call.state.phase is Phase.VALIDATED


def test_rule_8_a_claim_after_the_confirmation_lifetime_cancels_the_call() -> None:
    """A claim of an unconfirmed call past its confirmation expiry cancels it and is refused."""
    call = Call()
    awaiting(call)
    assert call.state.confirmation_expires is not None
    decisions = call.send(claim(), at=call.state.confirmation_expires)
    assert kinds(decisions) == tags(CallCancelled, EventRejected)
    assert cancellation(decisions).reason is CancelReason.CONFIRMATION_EXPIRED


def test_rule_8_a_claim_at_the_expiry_of_the_confirmation_given_cancels_the_call() -> None:
    """A call confirmed and not claimed before its confirmation expires is cancelled
    ``confirmation_expired`` by the claim, which is refused; one moment earlier it runs."""
    expiry = T0 + timedelta(minutes=1)
    late, in_time = Call(), Call()
    for call in (late, in_time):
        awaiting(call)
        call.send(confirmation(expires_at=expiry))
        assert call.state.ready
    decisions = late.send(claim(), at=expiry)
    assert kinds(decisions) == tags(CallCancelled, EventRejected)
    assert cancellation(decisions).reason is CancelReason.CONFIRMATION_EXPIRED
    assert one(decisions, EventRejected).reason is RejectReason.NOT_READY
    assert late.state.phase is Phase.CANCELLED
    dispatched = in_time.send(claim(), at=expiry - timedelta(microseconds=1))
    assert kinds(dispatched) == tags(CallDispatched)


@settings(max_examples=200, deadline=None)
@given(
    validity=st.integers(min_value=1, max_value=3_600_000_000),
    delay=st.integers(min_value=0, max_value=7_200_000_000),
)
def test_rule_8_a_confirmed_call_runs_only_within_its_confirmation(
    validity: int, delay: int
) -> None:
    """Whatever the confirmation's validity and however late the claim (in microseconds), the
    call is dispatched exactly when the claim comes before the confirmation expires, and
    cancelled ``confirmation_expired`` otherwise, never both."""
    call = Call()
    awaiting(call)
    confirmed_at = T0 + timedelta(minutes=1)
    expiry = confirmed_at + timedelta(microseconds=validity)
    call.send(confirmation(expires_at=expiry), at=confirmed_at)
    assert call.state.ready
    claimed_at = confirmed_at + timedelta(microseconds=delay)
    decisions = call.send(claim(), at=claimed_at)
    if claimed_at < expiry:
        assert kinds(decisions) == tags(CallDispatched)
    else:
        assert kinds(decisions) == tags(CallCancelled, EventRejected)
        assert cancellation(decisions).reason is CancelReason.CONFIRMATION_EXPIRED


def test_rule_8_a_turn_of_rules_before_4_is_not_bounded_by_its_confirmation() -> None:
    """A turn started under rules 3 keeps the rules it was started under: its confirmed call is
    dispatched however late it is claimed, and its confirmation records no expiry."""
    turn = TurnView(principal=PRINCIPAL, tools={TOOL.name: TOOL}, rules=3)
    call = Call(ACTIVE._replace(turn=turn))
    awaiting(call)
    confirmed = call.send(confirmation(expires_at=T0 + timedelta(minutes=1)))
    assert one(confirmed, CallConfirmed).expires_at is None
    decisions = call.send(claim(), at=T0 + timedelta(days=2))
    assert kinds(decisions) == tags(CallDispatched)


def test_rule_8_the_first_claim_of_a_ready_call_dispatches_and_later_ones_are_refused() -> None:
    """A ready call is dispatched to the first claim, with its id; the second is call_terminal."""
    call = reach(Phase.VALIDATED)
    decisions = call.send(claim("claim-A"))
    assert recorded(decisions) == [
        CallDispatched(key=KEY, cause=call.position, claim_id="claim-A", executor="worker-1")
    ]
    assert call.state.phase is Phase.DISPATCHED
    assert call.state.claim_id == "claim-A"
    rejected = rejection(call.send(claim("claim-B")))
    assert rejected.reason is RejectReason.CALL_TERMINAL
    assert rejected.rejected_type == ClaimRequested.TAG
    assert call.state.claim_id == "claim-A"


# --- rule 9: deadlines -------------------------------------------------------------------------


def test_rule_9_a_collecting_call_times_out_after_its_idle_time() -> None:
    """A deadline before the idle time is rejected; at it a collecting call is cancelled."""
    limits = CallLimits(idle_timeout=timedelta(seconds=60))
    call = Call(context(limits=limits))
    call.send(opened(0), at=T0)
    call.send(fragment(PIECES[0], 1), at=T0 + timedelta(seconds=10))
    due = T0 + timedelta(seconds=70)
    assert call.state.deadline(limits) == due
    early = call.send(deadline(), at=due - timedelta(microseconds=1))
    assert rejection(early).reason is RejectReason.NOT_READY
    assert call.phase() is Phase.COLLECTING
    assert cancellation(call.send(deadline(), at=due)).reason is CancelReason.IDLE_TIMEOUT
    assert call.phase() is Phase.CANCELLED


def test_rule_9_a_candidate_waiting_for_its_response_times_out() -> None:
    """A terminal candidate whose response never ends is cancelled idle_timeout."""
    call = Call()
    candidate(call)
    due = call.state.deadline()
    assert due is not None
    assert cancellation(call.send(deadline(), at=due)).reason is CancelReason.IDLE_TIMEOUT


def test_rule_9_idle_time_counts_from_the_calls_end_event() -> None:
    """The idle time of a terminal candidate counts from its end event, not its last fragment."""
    limits = CallLimits(idle_timeout=timedelta(seconds=60))
    call = Call(context(limits=limits))
    call.send(opened(0), at=T0)
    for sequence, piece in enumerate(PIECES, 1):
        call.send(fragment(piece, sequence), at=T0 + timedelta(seconds=1))
    end_at = T0 + timedelta(seconds=50)
    call.send(ended(), at=end_at)
    assert call.state.phase is Phase.TERMINAL_CANDIDATE
    early = call.send(deadline(), at=T0 + timedelta(seconds=100))
    assert rejection(early).reason is RejectReason.NOT_READY
    assert call.state.deadline(limits) == end_at + timedelta(seconds=60)


def test_rule_9_a_call_awaiting_confirmation_expires() -> None:
    """A call awaiting confirmation is cancelled confirmation_expired at its expiry, not before."""
    call = Call()
    awaiting(call)
    expiry = call.state.confirmation_expires
    assert expiry is not None
    early = call.send(deadline(), at=expiry - timedelta(seconds=1))
    assert rejection(early).reason is RejectReason.NOT_READY
    decisions = call.send(deadline(), at=expiry)
    assert cancellation(decisions).reason is CancelReason.CONFIRMATION_EXPIRED


def test_rule_9_a_ready_call_has_no_deadline() -> None:
    """A validated call that needs no confirmation never times out; a deadline is rejected."""
    call = reach(Phase.VALIDATED)
    assert call.state.deadline() is None
    decisions = call.send(deadline(), at=T0 + timedelta(days=30))
    assert rejection(decisions).reason is RejectReason.NOT_READY
    assert call.state.ready


# --- rule 10: terminal is absorbing -------------------------------------------------------------


@pytest.mark.parametrize("phase", sorted(TERMINAL_PHASES))
def test_rule_10_a_terminal_call_drops_its_bytes_and_rejects_what_is_addressed(
    phase: Phase,
) -> None:
    """A terminal call holds no bytes, rejects what is addressed to it and ignores the rest."""
    call = reach(phase)
    assert call.state.arguments is None
    assert call.state.validating is None
    assert byte_values(call.state) == []
    before = call.state
    assert rejection(call.send(fragment(PIECES[0], 1))).reason is RejectReason.CALL_TERMINAL
    assert rejection(call.send(ended())).reason is RejectReason.CALL_TERMINAL
    assert call.send(response_ended()) == ()
    assert call.send(turn_cancelled(), ctx=context(TurnStatus.CANCELLED)) == ()
    assert call.state == before


def test_rule_10_a_terminal_reason_is_kept() -> None:
    """The state of a terminal call names why it ended."""
    assert reach(Phase.CANCELLED).state.reason == CancelReason.TURN_CANCELLED.value
    assert reach(Phase.FAILED).state.reason == FailReason.MALFORMED_ARGUMENTS.value
    assert reach(Phase.DISPATCHED).state.claim_id == "claim-1"


# --- rule 11: stop while running ----------------------------------------------------------------

STOPPING: list[tuple[Event, CallContext]] = [
    (turn_cancelled(), context(TurnStatus.CANCELLED)),
    (
        TurnSuperseded(turn=KEY.turn_ref, by=attrs.evolve(KEY.turn_ref, turn="t-next")),
        context(TurnStatus.SUPERSEDED),
    ),
    (
        TenantStopped(tenant=KEY.tenant, operator="ops", reason="incident"),
        context(blocked=CancelReason.TENANT_STOPPED),
    ),
    (
        ToolDisabled(tool=TOOL.name, tenant=None, operator="ops", reason="incident"),
        context(blocked=CancelReason.TOOL_DISABLED),
    ),
    (
        ResponseQuarantined(response=KEY.response, tenant=None, operator="ops", reason="bad"),
        context(blocked=CancelReason.RESPONSE_QUARANTINED),
    ),
]


@pytest.mark.parametrize(("event", "ctx"), STOPPING, ids=lambda value: type(value).__name__)
def test_rule_11_a_running_call_is_asked_to_stop_once_with_the_reason(
    event: Event, ctx: CallContext
) -> None:
    """A stopping input that concerns a dispatched call still running records one stop
    request for its claim, with the reason a call not yet dispatched would be cancelled for;
    the call stays dispatched and a second stopping input records nothing."""
    call = reach(Phase.DISPATCHED)
    running = ctx._replace(running=True)
    decisions = call.send(event, ctx=running)
    request = one(decisions, CallStopRequested)
    assert request.claim_id == "claim-1"
    assert request.reason is _unwanted(ctx)
    assert call.phase() is Phase.DISPATCHED
    assert call.state.stop_requested == request.reason.value
    assert call.send(event, ctx=running) == ()


def test_rule_11_a_call_whose_outcome_is_recorded_or_that_is_wanted_is_left_alone() -> None:
    """No request for a dispatched call whose outcome is in (not running), nor for an input
    that leaves the call wanted (its tool disabled for another tenant)."""
    call = reach(Phase.DISPATCHED)
    assert call.send(turn_cancelled(), ctx=context(TurnStatus.CANCELLED)) == ()
    elsewhere = ToolDisabled(tool=TOOL.name, tenant="another", operator="ops", reason="incident")
    assert call.send(elsewhere, ctx=ACTIVE._replace(running=True)) == ()
    assert call.state.stop_requested == ""


def test_rule_11_a_turn_of_rules_before_5_never_asks_a_running_call_to_stop() -> None:
    """A turn started under rules 4 keeps them: its running call is not asked to stop."""
    turn = TurnView(
        principal=PRINCIPAL, tools={TOOL.name: TOOL}, status=TurnStatus.CANCELLED, rules=4
    )
    call = reach(Phase.DISPATCHED)
    ctx = CallContext(turn=turn, running=True)
    assert call.send(turn_cancelled(), ctx=ctx) == ()


def test_no_recorded_decision_but_validated_carries_argument_bytes() -> None:
    """Over a whole life, only ``CallValidated`` holds bytes, and no detail holds a value."""
    call = Call()
    made = drive_everything(call)
    for decisions in made:
        for decision in recorded(decisions):
            found = byte_values(decision)
            if isinstance(decision, CallValidated):
                assert found == [CANONICAL]
            else:
                assert found == []
                assert MARKER not in repr(decision)


def test_a_server_tool_is_recorded_and_cancelled_as_it_opens() -> None:
    """A tool the provider ran itself is cancelled at once, even when the turn offers its name."""
    call = Call()
    decisions = call.send(ServerToolCalled(key=KEY, tool=TOOL.name))
    assert call.phase() is Phase.CANCELLED
    cancelled = [d for d in decisions if isinstance(d, CallCancelled)]
    assert [d.reason for d in cancelled] == [CancelReason.SERVER_EXECUTED]
    assert call.state.tool == TOOL.name


def test_a_server_tool_report_for_an_open_call_fails_it() -> None:
    """A key opened as the turn's call and then reported as the provider's own is a conflict."""
    call = reach(Phase.COLLECTING)
    decisions = call.send(ServerToolCalled(key=KEY, tool=TOOL.name))
    assert call.phase() is Phase.FAILED
    failed = [d for d in decisions if isinstance(d, CallFailed)]
    assert failed[0].reason is FailReason.IDENTITY_CONFLICT


def test_a_protocol_violation_of_the_response_fails_its_calls_with_that_reason() -> None:
    """An adapter that ends a response as a protocol violation fails its calls as one."""
    call = reach(Phase.COLLECTING)
    decisions = call.send(
        ResponseEnded(
            response=KEY.response_ref,
            reason=ResponseEndReason.PROTOCOL_VIOLATION,
            terminal=TerminalRef(digest="x"),
            detail="item id changed",
        )
    )
    failed = [d for d in decisions if isinstance(d, CallFailed)]
    assert failed[0].reason is FailReason.PROTOCOL_VIOLATION
    assert "item id changed" in failed[0].detail


# --- rule 12: one action per intent ------------------------------------------------------------

EARLIER = attrs.evolve(KEY, call="call_earlier")


def intent_context(rules: int = 6) -> CallContext:
    """A turn of ``rules`` whose tool runs one action per intent, with ``EARLIER`` dispatched
    already for the intent of the call's claim."""
    tool = attrs.evolve(TOOL, one_action_per_intent=IntentScope.TURN)
    turn = TurnView(principal=PRINCIPAL, tools={tool.name: tool}, rules=rules)
    return CallContext(turn=turn, duplicate_of=EARLIER)


def test_rule_12_a_claim_of_an_intent_dispatched_already_cancels_the_call() -> None:
    """A ready call whose intent ran already is cancelled ``duplicate_of``, naming the earlier
    call, and the claim is refused: the call is never dispatched."""
    call = Call(intent_context())
    validated(call)
    decisions = call.send(claim())
    assert kinds(decisions) == tags(CallCancelled, EventRejected)
    cancelled = cancellation(decisions)
    assert cancelled.reason is CancelReason.DUPLICATE_OF
    assert cancelled.duplicate_of == EARLIER
    assert one(decisions, EventRejected).reason is RejectReason.NOT_READY
    assert EARLIER.stream in one(decisions, EventRejected).detail
    assert call.state.phase is Phase.CANCELLED
    assert rejection(call.send(claim("claim-2"))).reason is RejectReason.CALL_TERMINAL


def test_rule_12_a_call_that_is_not_ready_or_not_wanted_is_judged_first() -> None:
    """The earlier dispatch matters only to a claim that would dispatch: a call awaiting its
    confirmation is refused not_ready, an unwanted one is cancelled for why it is unwanted."""
    waiting = Call(intent_context())
    awaiting(waiting)
    assert rejection(waiting.send(claim())).reason is RejectReason.NOT_READY
    assert waiting.state.awaiting_confirmation
    unwanted = Call(intent_context())
    validated(unwanted)
    stopped = unwanted.send(
        claim(), ctx=intent_context()._replace(blocked=CancelReason.TOOL_DISABLED)
    )
    assert cancellation(stopped).reason is CancelReason.TOOL_DISABLED


def test_rule_12_a_turn_of_rules_before_6_runs_every_call() -> None:
    """A turn started under rules 5 keeps them: its claim dispatches whatever ran before."""
    call = Call(intent_context(rules=5))
    validated(call)
    assert kinds(call.send(claim())) == tags(CallDispatched)


def test_rule_12_a_cancellation_names_an_earlier_call_exactly_when_it_is_a_duplicate() -> None:
    """``CallCancelled`` refuses a duplicate without the earlier call, and an earlier call for
    any other reason."""
    with pytest.raises(ValueError, match="exactly when"):
        CallCancelled(key=KEY, cause=1, reason=CancelReason.DUPLICATE_OF)
    with pytest.raises(ValueError, match="exactly when"):
        CallCancelled(key=KEY, cause=1, reason=CancelReason.SUPERSEDED, duplicate_of=EARLIER)


# --- rules 7: a call is validated at its own end, dispatched after its response's ------------

RULES_7 = context(rules=7)


def requested(decisions: tuple[Decision, ...]) -> ValidationRequested:
    """The one request for validation among the decisions."""
    found = [decision for decision in decisions if isinstance(decision, ValidationRequested)]
    assert len(found) == 1, decisions
    return found[0]


def early(call: Call, *, needs_confirmation: bool = False) -> int:
    """A call of a rules 7 turn validated at its own end, its response still open; the
    position of its end event."""
    collecting(call)
    decisions = call.send(ended())
    end = call.position
    assert requested(decisions).cause == end
    call.answer(ValidationResult(needs_confirmation=needs_confirmation))
    assert call.state.phase is Phase.VALIDATED
    return end


def end_response(
    call: Call, reason: ResponseEndReason = ResponseEndReason.COMPLETED
) -> tuple[Decision, ...]:
    """The response's first end reaching the call: the context names it, as the fold does."""
    position = call.position + 1
    end = ResponseEnd(position, reason is ResponseEndReason.COMPLETED)
    call.context = call.context._replace(response_end=end)
    return call.send(response_ended(reason))


def test_rules_7_a_call_is_validated_once_at_its_own_end() -> None:
    """The end event makes the terminal candidate and requests its one validation at once,
    caused by the end event; the validation records ``validated`` with that cause."""
    call = Call(RULES_7)
    collecting(call)
    decisions = call.send(ended())
    assert kinds(decisions) == tags(CallTerminalCandidate)
    assert requested(decisions).cause == call.position
    validated_by = call.answer()
    assert one(validated_by, CallValidated).cause == call.position
    assert call.state.phase is Phase.VALIDATED


def test_rules_7_a_claim_before_the_response_ended_is_refused() -> None:
    """A validated call whose response is open is not ready: a claim is rejected and the call
    waits, validated."""
    call = Call(RULES_7)
    early(call)
    refused = rejection(call.send(claim()))
    assert refused.reason is RejectReason.NOT_READY
    assert "response" in refused.detail
    assert call.state.phase is Phase.VALIDATED


def test_rules_7_a_successful_end_of_the_response_makes_the_call_claimable() -> None:
    """The response's successful first end decides nothing and records nothing: the claim
    after it dispatches, and the first claim only."""
    call = Call(RULES_7)
    early(call)
    assert end_response(call) == ()
    assert call.state.phase is Phase.VALIDATED
    assert kinds(call.send(claim())) == tags(CallDispatched)
    assert rejection(call.send(claim("claim-2"))).reason is RejectReason.CALL_TERMINAL


@pytest.mark.parametrize(
    ("reason", "failed_for"),
    [
        (ResponseEndReason.ERROR, FailReason.RESPONSE_FAILED),
        (ResponseEndReason.INCOMPLETE, FailReason.RESPONSE_FAILED),
        (ResponseEndReason.PROTOCOL_VIOLATION, FailReason.PROTOCOL_VIOLATION),
    ],
)
def test_rules_7_a_response_that_ends_badly_fails_its_validated_calls(
    reason: ResponseEndReason, failed_for: FailReason
) -> None:
    """Validated at its own end, a call still fails when its response's first end is not
    successful, and no claim dispatches it afterwards."""
    call = Call(RULES_7)
    early(call)
    assert failure(end_response(call, reason)).reason is failed_for
    assert rejection(call.send(claim())).reason is RejectReason.CALL_TERMINAL


def test_rules_7_only_the_first_end_of_the_response_after_the_calls_end_counts() -> None:
    """After a successful end, a later end of any kind changes nothing; a call for which no end
    of its response came after its own end event (the fold names none) is not claimable."""
    call = Call(RULES_7)
    early(call)
    end_response(call)
    assert call.send(response_ended(ResponseEndReason.ERROR)) == ()
    assert kinds(call.send(claim())) == tags(CallDispatched)
    unended = Call(RULES_7)
    early(unended)
    assert unended.send(response_ended()) == ()
    assert rejection(unended.send(claim())).reason is RejectReason.NOT_READY


def test_rules_7_a_stream_lost_before_the_response_ended_cancels_the_call() -> None:
    """A validated call still needs its stream until its response ends: lost for good, the
    call is cancelled; once the response ended, a lost stream changes nothing."""
    lost = StreamLost(response=KEY.response_ref, resumable=False)
    waiting = Call(RULES_7)
    early(waiting)
    assert cancellation(waiting.send(lost)).reason is CancelReason.CONNECTION_LOST
    resumable = Call(RULES_7)
    early(resumable)
    assert resumable.send(StreamLost(response=KEY.response_ref, resumable=True)) == ()
    done = Call(RULES_7)
    early(done)
    end_response(done)
    assert done.send(lost) == ()
    assert done.state.phase is Phase.VALIDATED


def test_rules_7_a_call_waiting_for_its_response_times_out() -> None:
    """The idle time counts from the call's end event while its response is open; a deadline
    before it is refused; once the response ended well the call has no idle deadline."""
    call = Call(RULES_7)
    end = early(call)
    due = T0 + timedelta(seconds=end) + call.context.limits.idle_timeout
    assert call.state.deadline(call.context.limits, awaiting_response=True) == due
    early_deadline = call.send(deadline(), at=due - timedelta(seconds=1))
    assert rejection(early_deadline).reason is RejectReason.NOT_READY
    assert cancellation(call.send(deadline(), at=due)).reason is CancelReason.IDLE_TIMEOUT
    done = Call(RULES_7)
    early(done)
    end_response(done)
    assert done.state.deadline(done.context.limits) is None
    refused = done.send(deadline(), at=due + timedelta(days=1))
    assert rejection(refused).reason is RejectReason.NOT_READY


def test_rules_7_a_confirmation_may_come_before_the_response_ends() -> None:
    """A call that needs confirmation waits for it and for its response, whichever first: the
    confirmation is taken, yet only the response's successful end lets a claim dispatch it;
    its deadline is the sooner of the two waits."""
    call = Call(RULES_7)
    end = early(call, needs_confirmation=True)
    assert call.state.awaiting_confirmation
    expires = call.state.confirmation_expires
    idle = T0 + timedelta(seconds=end) + call.context.limits.idle_timeout
    assert expires is not None
    assert call.state.deadline(call.context.limits, awaiting_response=True) == min(idle, expires)
    assert kinds(call.send(confirmation())) == tags(CallConfirmed)
    assert rejection(call.send(claim())).reason is RejectReason.NOT_READY
    end_response(call)
    assert kinds(call.send(claim("claim-2"))) == tags(CallDispatched)


def test_rules_7_a_call_validated_at_its_end_is_still_cancelled_when_unwanted() -> None:
    """Wanted until dispatched: a turn cancelled while the call waits for its response
    cancels it, and so does a response's end that finds it unwanted."""
    call = Call(RULES_7)
    early(call)
    stopped = call.send(turn_cancelled(), ctx=context(TurnStatus.CANCELLED, rules=7))
    assert cancellation(stopped).reason is CancelReason.TURN_CANCELLED
    blocked = Call(RULES_7)
    early(blocked)
    blocked.context = blocked.context._replace(blocked=CancelReason.TOOL_DISABLED)
    assert cancellation(end_response(blocked)).reason is CancelReason.TOOL_DISABLED


def test_rules_7_a_failed_validation_fails_the_call_at_its_end() -> None:
    """A validation that fails fails the call before its response ends: the response's end
    then concerns a terminal call and changes nothing."""
    call = Call(RULES_7)
    collecting(call)
    call.send(ended())
    decisions = call.answer(ValidationResult(failure=FailReason.SCHEMA_INVALID, detail="x"))
    assert failure(decisions).reason is FailReason.SCHEMA_INVALID
    assert end_response(call) == ()
    assert call.state.phase is Phase.FAILED


@pytest.mark.parametrize(
    "input_type",
    [input_type for input_type in INPUT_TYPES if input_type is not ValidationOutcome],
    ids=lambda input_type: input_type.__name__,
)
def test_rules_7_every_input_to_a_call_waiting_for_its_response(input_type: type) -> None:
    """Every input a validated call waiting for its response may get is in the table and
    decides with the call's key and the input's cause, as for any other call."""
    call = Call(RULES_7)
    early(call)
    made = sample(input_type)
    assert not isinstance(made, ValidationOutcome)
    received = call.input(made)
    decisions = decide(call.state, received, call.context)
    for decision in recorded(decisions):
        assert isinstance(decision, DecisionEvent)
        assert decision.key == KEY
        assert decision.cause == received.position


# --- rules 8: a ready call's lifetime ---------------------------------------------------------

RULES_8 = context(rules=8)


def ready(call: Call, *, needs_confirmation: bool = False) -> CallReady:
    """A call of a rules 8 turn made ready by its response's successful end (confirmed first
    where it needs it); the ``CallReady`` that says until when."""
    early(call, needs_confirmation=needs_confirmation)
    if needs_confirmation:
        call.send(confirmation())
    return one(end_response(call), CallReady)


def test_rules_8_the_responses_successful_end_records_until_when_the_call_is_ready() -> None:
    """The end that makes a validated call ready records ``CallReady``, caused by it, for the
    ready lifetime from its time; the call's deadline is then that time, and nothing else."""
    call = Call(RULES_8)
    made = ready(call)
    at = T0 + timedelta(seconds=call.position)
    assert made == CallReady(
        key=KEY, cause=call.position, expires_at=at + call.context.limits.ready_lifetime
    )
    assert call.state.ready_expires == made.expires_at
    assert call.state.deadline(call.context.limits) == made.expires_at


def test_rules_8_a_claim_within_the_lifetime_dispatches_and_one_after_it_cancels() -> None:
    """A claim just before the end of the lifetime dispatches; one at it cancels the call
    ``ready_expired`` and is rejected, and nothing dispatches it afterwards."""
    early_claim = Call(RULES_8)
    made = ready(early_claim)
    just_before = made.expires_at - timedelta(microseconds=1)
    assert kinds(early_claim.send(claim(), at=just_before)) == tags(CallDispatched)
    late = Call(RULES_8)
    made = ready(late)
    decisions = late.send(claim(), at=made.expires_at)
    assert kinds(decisions) == tags(CallCancelled, EventRejected)
    assert cancellation(decisions).reason is CancelReason.READY_EXPIRED
    refused = one(decisions, EventRejected)
    assert refused.reason is RejectReason.NOT_READY
    assert made.expires_at.isoformat() in refused.detail
    assert rejection(late.send(claim("claim-2"))).reason is RejectReason.CALL_TERMINAL


def test_rules_8_the_deadline_cancels_an_unclaimed_ready_call_once_it_is_due() -> None:
    """A deadline before the end of the lifetime is refused; one at or after it cancels the
    call ``ready_expired``."""
    call = Call(RULES_8)
    made = ready(call)
    refused = call.send(deadline(), at=made.expires_at - timedelta(seconds=1))
    assert rejection(refused).reason is RejectReason.NOT_READY
    expired = call.send(deadline(), at=made.expires_at + timedelta(seconds=3))
    assert cancellation(expired).reason is CancelReason.READY_EXPIRED


def test_rules_8_a_confirmed_call_is_ready_no_longer_than_its_confirmation() -> None:
    """Confirmed, a call is ready for the ready lifetime from its response's end and never
    past the confirmation's own expiry; past that expiry a deadline or a claim cancels it
    ``confirmation_expired``."""
    limits = CallLimits(ready_lifetime=timedelta(days=30))
    call = Call(context(rules=8, limits=limits))
    made = ready(call, needs_confirmation=True)
    expires = confirmation().expires_at
    assert made.expires_at == expires
    assert cancellation(call.send(deadline(), at=expires)).reason is (
        CancelReason.CONFIRMATION_EXPIRED
    )
    claimed = Call(context(rules=8, limits=limits))
    ready(claimed, needs_confirmation=True)
    late = claimed.send(claim(), at=expires)
    assert cancellation(late).reason is CancelReason.CONFIRMATION_EXPIRED


def test_rules_8_a_confirmation_after_the_responses_end_makes_the_call_ready() -> None:
    """A call waiting for confirmation when its response ended is ready once confirmed: the
    confirmation records ``CallReady`` from its own time; a shorter confirmation bounds it."""
    call = Call(RULES_8)
    early(call, needs_confirmation=True)
    assert end_response(call) == ()
    given_at = T0 + timedelta(minutes=3)
    decisions = call.send(confirmation(expires_at=given_at + timedelta(minutes=1)), at=given_at)
    assert kinds(decisions) == tags(CallConfirmed, CallReady)
    assert one(decisions, CallReady).expires_at == given_at + timedelta(minutes=1)
    longer = Call(RULES_8)
    early(longer, needs_confirmation=True)
    end_response(longer)
    decisions = longer.send(confirmation(), at=given_at)
    assert one(decisions, CallReady).expires_at == (given_at + longer.context.limits.ready_lifetime)


def test_rules_8_an_edit_confirmed_after_the_responses_end_makes_the_call_ready() -> None:
    """A principal's edit validated at confirmation, the response ended already, confirms
    the call and makes it ready from the confirmation's time."""
    call = Call(RULES_8)
    early(call, needs_confirmation=True)
    end_response(call)
    given_at = T0 + timedelta(minutes=4)
    asked = call.send(confirmation(arguments=b'{"city": "Lisbon"}'), at=given_at)
    assert requested(asked).edit is not None
    decisions = call.answer()
    assert kinds(decisions) == tags(CallValidated, CallConfirmed, CallReady)
    assert one(decisions, CallReady).expires_at == given_at + call.context.limits.ready_lifetime


def test_rules_8_a_call_validated_after_its_response_ended_is_ready_at_once() -> None:
    """A call whose validation answers once its response ended well is ready with the
    validation's answer, for the lifetime from the input that asked for it."""
    call = Call(RULES_8)
    collecting(call)
    call.send(ended())
    asked_at = T0 + timedelta(seconds=call.position)
    call.context = call.context._replace(response_end=ResponseEnd(call.position + 1, True))
    decisions = call.answer()
    assert kinds(decisions) == tags(CallValidated, CallReady)
    assert one(decisions, CallReady).expires_at == asked_at + call.context.limits.ready_lifetime


def test_rules_8_no_call_is_ready_before_its_response_ended_well_nor_twice() -> None:
    """Validated while its response is open, a call records no ``CallReady``; a failed end
    fails it; a later end of the response records no second one."""
    call = Call(RULES_8)
    early(call)
    assert call.state.ready_expires is None
    failing = Call(RULES_8)
    early(failing)
    assert failure(end_response(failing, ResponseEndReason.ERROR)).reason is (
        FailReason.RESPONSE_FAILED
    )
    again = Call(RULES_8)
    ready(again)
    assert again.send(response_ended()) == ()


@pytest.mark.parametrize("expired", [False, True], ids=["ready", "expired"])
@pytest.mark.parametrize(
    "input_type",
    [input_type for input_type in INPUT_TYPES if input_type is not ValidationOutcome],
    ids=lambda input_type: input_type.__name__,
)
def test_rules_8_every_input_to_a_ready_call(input_type: type, expired: bool) -> None:
    """Every input a ready call may get, before or after its lifetime ended, is in the table,
    decides with the call's key and the input's cause, and none dispatches an expired call."""
    call = Call(RULES_8)
    made = ready(call)
    at = made.expires_at if expired else made.expires_at - timedelta(minutes=1)
    event = sample(input_type)
    assert not isinstance(event, ValidationOutcome)
    received = call.input(event, at=at)
    decisions = decide(call.state, received, call.context)
    for decision in recorded(decisions):
        assert isinstance(decision, DecisionEvent)
        assert decision.key == KEY
        assert decision.cause == received.position
    if expired:
        assert not any(isinstance(decision, CallDispatched) for decision in decisions)
    if expired and input_type in (ClaimRequested, DeadlineReached):
        assert cancellation(decisions).reason is CancelReason.READY_EXPIRED


def test_rules_7_a_ready_call_records_no_lifetime() -> None:
    """A turn of rules 7 records no ``CallReady``, and a claim however late dispatches."""
    call = Call(RULES_7)
    early(call)
    assert end_response(call) == ()
    assert call.state.deadline(call.context.limits) is None
    assert kinds(call.send(claim(), at=T0 + timedelta(days=365))) == tags(CallDispatched)
