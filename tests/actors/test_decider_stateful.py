"""The call state machine under random inputs: invariants I1-I7 checked after every step.

A Hypothesis state machine drives two calls of one turn and one response with random inputs:
fragments of a fixed object (numbered, duplicated, out of order, coalesced, or garbage), end
events with or without final arguments, response ends, validation answers when the decider asks,
confirmations and denials (right or wrong), claims, deadlines at random times, turn
cancellation, operator controls and lost streams. Inputs reaching a call while its validation is
pending are held and decided after the answer, in order, with the context of their position, as
the fold does.

A small reference model, written from the rules and not from the decider, says what must hold
and, where the rules leave no choice, what the decision must be. It models a turn of rules 6,
where a call is validated when its response ends; rules 7 (validation at the call's own end) is
driven by ``test_decider`` and end to end by the simulator, whose checker holds dispatch to a
response that ended well after the call's end.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from typing import cast

import attrs
import pytest
from conftest import RUN_COUNTS
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from inert.actors._call import (
    CallContext,
    CallLimits,
    CallState,
    Decision,
    FragmentAccepted,
    Input,
    TurnStatus,
    TurnView,
    ValidationOutcome,
    ValidationRequested,
    ValidationResult,
    recorded,
)
from inert.actors._decider import step
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
    ConfirmationDenied,
    ConfirmationGiven,
    DeadlineReached,
    Event,
    EventRejected,
    FailReason,
    OfferedTool,
    Phase,
    RejectReason,
    ResponseEnded,
    ResponseEndReason,
    ResponseQuarantined,
    StreamLost,
    TenantStopped,
    TerminalRef,
    ToolDisabled,
    TurnCancelled,
)

T0 = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
KEYS = (
    CallKey(
        tenant="acme", conversation="conv-1", turn="turn-1", response="resp-1", item="0", call="c0"
    ),
    CallKey(
        tenant="acme", conversation="conv-1", turn="turn-1", response="resp-1", item="1", call="c1"
    ),
)
RESPONSE = KEYS[0].response_ref
TOOL = OfferedTool(name="lookup", digest="sha256:tool-lookup")
PRINCIPAL = "user:alice"
LIMITS = CallLimits(idle_timeout=timedelta(seconds=60), confirmation_lifetime=timedelta(minutes=2))

# Found nowhere but in argument bytes: any decision other than ``CallValidated`` that shows it
# leaks a value.
MARKER = "ZQX-SECRET-VALUE"
OBJECTS: dict[CallKey, dict[str, object]] = {
    KEYS[0]: {"days": 3, "city": f"Paris {MARKER}"},
    KEYS[1]: {"query": f"{MARKER} news", "limit": 10, "tags": ["a", MARKER]},
}
WHOLE = {key: json.dumps(value).encode() for key, value in OBJECTS.items()}
# RFC 8785 for these values (ASCII names, small integers, strings): sorted names, no spaces.
CANONICAL = {
    key: json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    for key, value in OBJECTS.items()
}
DIGEST = {key: "sha256:" + hashlib.sha256(data).hexdigest() for key, data in CANONICAL.items()}
PARTS = 3
PIECES = {
    key: tuple(data[len(data) * i // PARTS : len(data) * (i + 1) // PARTS] for i in range(PARTS))
    for key, data in WHOLE.items()
}
OPEN_SEQUENCE = 0
ALL_SEQUENCES = frozenset(range(OPEN_SEQUENCE + 1, PARTS + 1))
END_SEQUENCE = PARTS + 1
# A raw control character is refused wherever it lands, inside a string or not.
GARBAGE = b"\x01" + MARKER.encode() + b"\x01"
WRONG_FINAL = b'{"city": "Rome"}'

ADDRESSED: tuple[type[Event], ...] = (
    CallOpened,
    ArgumentsAppended,
    CallEnded,
    ConfirmationGiven,
    ConfirmationDenied,
    ClaimRequested,
    DeadlineReached,
)
TERMINAL_DECISIONS = (CallCancelled, CallFailed, CallDispatched)
ALLOWED_MOVES: dict[Phase, set[Phase]] = {
    Phase.ABSENT: {Phase.ABSENT, Phase.COLLECTING, Phase.CANCELLED, Phase.FAILED},
    Phase.COLLECTING: {Phase.COLLECTING, Phase.TERMINAL_CANDIDATE, Phase.CANCELLED, Phase.FAILED},
    Phase.TERMINAL_CANDIDATE: {
        Phase.TERMINAL_CANDIDATE,
        Phase.VALIDATED,
        Phase.CANCELLED,
        Phase.FAILED,
    },
    Phase.VALIDATED: {Phase.VALIDATED, Phase.DISPATCHED, Phase.CANCELLED, Phase.FAILED},
    Phase.DISPATCHED: {Phase.DISPATCHED},
    Phase.CANCELLED: {Phase.CANCELLED},
    Phase.FAILED: {Phase.FAILED},
}
CONTROLS: dict[CancelReason, Event] = {
    CancelReason.RESPONSE_QUARANTINED: ResponseQuarantined(
        response=RESPONSE.response, tenant=None, operator="op", reason="abuse"
    ),
    CancelReason.TOOL_DISABLED: ToolDisabled(
        tool=TOOL.name, tenant="acme", operator="op", reason="incident"
    ),
    CancelReason.TENANT_STOPPED: TenantStopped(tenant="acme", operator="op", reason="billing"),
}


@attrs.define
class Model:
    """What the rules say of one call, kept from the inputs and the decisions it saw."""

    phase: str = "absent"
    """absent, collecting, candidate, validating, validated or ended."""
    seen: set[int] = attrs.field(factory=set)
    garbage: bool = False
    final: bytes | None = None
    last_activity: datetime | None = None
    response_completed_at: datetime | None = None
    needs_confirmation: bool = False
    confirmed: bool = False
    expires: datetime | None = None
    """Until when a confirmation may be given (the awaiting decision's expiry)."""
    confirmed_until: datetime | None = None
    """Until when a confirmed call may be claimed (the confirmation's own expiry, rules 4)."""
    dispatches: int = 0
    saw_unwanted: bool = False

    @property
    def awaiting(self) -> bool:
        return self.phase == "validated" and self.needs_confirmation and not self.confirmed

    @property
    def ready(self) -> bool:
        return self.phase == "validated" and (self.confirmed or not self.needs_confirmation)

    def lapsed(self, at: datetime) -> bool:
        """Whether a confirmed call's confirmation has expired by ``at``."""
        return self.confirmed_until is not None and at >= self.confirmed_until


def wanted(context: CallContext) -> bool:
    assert context.turn is not None
    return context.turn.status is TurnStatus.ACTIVE and context.blocked is None


def unwanted_reason(context: CallContext) -> CancelReason | None:
    assert context.turn is not None
    if context.turn.status is TurnStatus.CANCELLED:
        return CancelReason.TURN_CANCELLED
    return context.blocked


def byte_values(value: object) -> list[bytes]:
    """Every non-empty bytes value reachable through attrs fields, tuples and lists."""
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
    return []


def only(decisions: tuple[Decision, ...]) -> Event:
    written = recorded(decisions)
    assert len(written) == 1, decisions
    return written[0]


class DeciderMachine(RuleBasedStateMachine):
    """Two calls of one turn fed random inputs in log order, checked after every step."""

    examples = 0
    """Machines made: one per example Hypothesis runs."""

    def __init__(self) -> None:
        super().__init__()
        DeciderMachine.examples += 1
        self.position = 0
        self.clock = T0
        self.turn_status = TurnStatus.ACTIVE
        self.blocked: CancelReason | None = None
        self.states = {key: CallState(key=key) for key in KEYS}
        self.models = {key: Model() for key in KEYS}
        self.asked: dict[CallKey, CallContext] = {}
        self.held: dict[CallKey, list[tuple[Input, CallContext]]] = {key: [] for key in KEYS}

    # --- the log ---

    def context(self) -> CallContext:
        return CallContext(
            turn=TurnView(
                principal=PRINCIPAL, tools={TOOL.name: TOOL}, status=self.turn_status, rules=6
            ),
            blocked=self.blocked,
            limits=LIMITS,
        )

    def append(self, event: Event) -> Input:
        """Append ``event`` to the log: the next position, at the machine's clock."""
        self.position += 1
        return Input(
            event=event, position=self.position, event_id=f"event-{self.position}", at=self.clock
        )

    def hand(self, key: CallKey, received: Input) -> None:
        """Hand an input to the call, with the context of its position (held while the call
        is being validated, as the fold holds it)."""
        context = self.context()
        if self.states[key].validating is not None:
            self.held[key].append((received, context))
            return
        self.process(key, received, context)

    def deliver(self, key: CallKey, event: Event) -> None:
        self.hand(key, self.append(event))

    def deliver_all(self, event: Event) -> None:
        """One event that concerns both calls: one position, handed to each."""
        received = self.append(event)
        for key in KEYS:
            self.hand(key, received)

    def skip(self, event: Event) -> None:
        """Append ``event`` to the log for no call of this machine."""
        self.append(event)

    def process(
        self, key: CallKey, received: Input | ValidationOutcome, context: CallContext
    ) -> None:
        before = self.states[key]
        after, decisions = step(before, received, context)
        self.states[key] = after
        self.check(
            key,
            before=before,
            after=after,
            received=received,
            context=context,
            decisions=decisions,
        )
        self.learn(key, received, context, decisions)

    # --- the invariants ---

    def check(
        self,
        key: CallKey,
        *,
        before: CallState,
        after: CallState,
        received: Input | ValidationOutcome,
        context: CallContext,
        decisions: tuple[Decision, ...],
    ) -> None:
        model = self.models[key]
        written = recorded(decisions)
        event = received.event if isinstance(received, Input) else None
        addressed = isinstance(event, ADDRESSED)
        if isinstance(received, Input):
            cause = received.position
        else:
            assert before.validating is not None
            cause = before.validating.cause
        assert after.phase in ALLOWED_MOVES[before.phase], (before.phase, after.phase)

        # Every decision names the call and its cause; only CallValidated carries bytes.
        for decision in written:
            assert getattr(decision, "key", None) == key
            assert getattr(decision, "cause", None) == cause
            if isinstance(decision, CallValidated):
                assert byte_values(decision) == [decision.arguments]
            else:
                assert byte_values(decision) == [], decision
                assert MARKER not in repr(decision), decision

        # I3: terminal is absorbing; what is addressed to a terminal call is rejected.
        if model.phase == "ended":
            assert after.phase is before.phase
            assert after.arguments is None
            if addressed:
                rejected = only(decisions)
                assert isinstance(rejected, EventRejected)
                assert rejected.reason is RejectReason.CALL_TERMINAL
            else:
                assert decisions == ()
            return

        # I7: nothing addressed to the call is dropped silently.
        if addressed:
            assert written or after != before, (event, decisions)

        at = received.at if isinstance(received, Input) else self.clock
        for decision in written:
            match decision:
                case CallDispatched():
                    # I1, I2, I3: validated, confirmed where needed, wanted, once.
                    assert before.phase is Phase.VALIDATED
                    assert before.arguments is not None
                    assert before.confirmed or not before.needs_confirmation
                    assert model.ready
                    assert wanted(context)
                    assert not model.saw_unwanted
                    assert model.dispatches == 0
                    assert isinstance(event, ClaimRequested)
                case CallValidated():
                    # I4: the whole object, canonical, never a prefix.
                    assert decision.arguments == CANONICAL[key]
                    assert decision.arguments_digest == DIGEST[key]
                    assert model.phase == "validating"
                    assert model.seen == ALL_SEQUENCES
                    assert not model.garbage
                    assert model.final in (None, WHOLE[key])
                case CallTerminalCandidate():
                    assert model.seen == ALL_SEQUENCES
                    assert not model.garbage
                    assert decision.size == len(WHOLE[key])
                    assert decision.arguments_digest == DIGEST[key]
                case CallAwaitingConfirmation():
                    assert model.response_completed_at is not None
                    assert decision.expires_at == (
                        model.response_completed_at + LIMITS.confirmation_lifetime
                    )
                case CallConfirmed():
                    # I6: only the principal, for this call's digests, before both expiries.
                    assert isinstance(event, ConfirmationGiven)
                    assert event.principal == PRINCIPAL
                    assert event.tool_digest == TOOL.digest
                    assert event.arguments_digest == DIGEST[key]
                    assert event.expires_at > at
                    assert model.awaiting
                    assert model.expires is not None
                    assert at < model.expires
                case CallCancelled(reason=CancelReason.IDLE_TIMEOUT):
                    assert isinstance(event, DeadlineReached)
                    assert model.phase in ("collecting", "candidate")
                    assert model.last_activity is not None
                    assert at >= model.last_activity + LIMITS.idle_timeout
                case CallCancelled(reason=CancelReason.CONFIRMATION_EXPIRED):
                    # Awaiting past the time to confirm, or confirmed and claimed (or reached by
                    # its deadline) past the confirmation's own expiry.
                    if model.awaiting:
                        assert model.expires is not None
                        assert at >= model.expires
                    else:
                        assert model.lapsed(at)
                case CallCancelled(reason=CancelReason.CONNECTION_LOST):
                    assert isinstance(event, StreamLost)
                    assert not event.resumable
                    assert model.phase in ("collecting", "candidate")
                case CallCancelled(reason=CancelReason.CONFIRMATION_DENIED):
                    assert isinstance(event, ConfirmationDenied)
                    assert event.principal == PRINCIPAL
                case CallCancelled(reason=reason):
                    assert not wanted(context)
                    assert reason is unwanted_reason(context)
        self.predict(
            key,
            model=model,
            before=before,
            after=after,
            event=event,
            at=at,
            context=context,
            decisions=decisions,
        )

    def predict(
        self,
        key: CallKey,
        *,
        model: Model,
        before: CallState,
        after: CallState,
        event: Event | None,
        at: datetime,
        context: CallContext,
        decisions: tuple[Decision, ...],
    ) -> None:
        """Where the rules leave no choice, the decision they call for."""
        written = recorded(decisions)
        if event is None or not wanted(context):
            if event is not None and model.phase != "absent":
                # The first input that sees an unwanted call cancels it (or is ignored).
                assert not any(isinstance(d, CallDispatched | CallConfirmed) for d in written)
            return
        match event:
            case ArgumentsAppended(first_sequence=first, last_sequence=last) if (
                model.phase == "collecting"
            ):
                assert first is not None
                assert last is not None
                sequences = set(range(first, last + 1))
                if sequences <= model.seen:
                    rejected = only(decisions)
                    assert isinstance(rejected, EventRejected)
                    assert rejected.reason is RejectReason.DUPLICATE
                    assert after.size == before.size
                elif sequences & model.seen or first <= OPEN_SEQUENCE:
                    failed = only(decisions)
                    assert isinstance(failed, CallFailed)
                    assert failed.reason is FailReason.PROTOCOL_VIOLATION
                else:
                    assert written == []
                    assert after.size == before.size + len(event.data)
            case CallEnded(final_arguments=final) if model.phase == "collecting":
                outcome = only(decisions)
                if model.seen != ALL_SEQUENCES:
                    assert isinstance(outcome, CallFailed)
                    assert outcome.reason is FailReason.SEQUENCE_GAP
                elif final is not None and (model.garbage or final != WHOLE[key]):
                    assert isinstance(outcome, CallFailed)
                    assert outcome.reason is FailReason.FINAL_ARGUMENTS_MISMATCH
                elif model.garbage:
                    assert isinstance(outcome, CallFailed)
                    assert outcome.reason is FailReason.MALFORMED_ARGUMENTS
                else:
                    assert isinstance(outcome, CallTerminalCandidate)
            case ResponseEnded(reason=reason) if model.phase == "candidate":
                if reason is ResponseEndReason.COMPLETED:
                    assert [type(d) for d in decisions] == [ValidationRequested]
                else:
                    failed = only(decisions)
                    assert isinstance(failed, CallFailed)
                    assert failed.reason is FailReason.RESPONSE_FAILED
            case ResponseEnded() if model.phase == "collecting":
                assert isinstance(only(decisions), CallFailed)
            case ClaimRequested() if model.phase == "validated":
                if model.ready and model.lapsed(at):
                    # Cancelled, and the claim refused with it.
                    assert [getattr(d, "reason", None) for d in recorded(decisions)] == [
                        CancelReason.CONFIRMATION_EXPIRED,
                        RejectReason.NOT_READY,
                    ]
                elif model.ready:
                    dispatched = only(decisions)
                    assert isinstance(dispatched, CallDispatched)
                    assert dispatched.claim_id == event.claim_id
                elif model.expires is not None and at < model.expires:
                    rejected = only(decisions)
                    assert isinstance(rejected, EventRejected)
                    assert rejected.reason is RejectReason.NOT_READY
            case DeadlineReached() if model.phase in ("collecting", "candidate"):
                assert model.last_activity is not None
                found = only(decisions)
                if at >= model.last_activity + LIMITS.idle_timeout:
                    assert isinstance(found, CallCancelled)
                    assert found.reason is CancelReason.IDLE_TIMEOUT
                else:
                    assert isinstance(found, EventRejected)
                    assert found.reason is RejectReason.NOT_READY
            case ClaimRequested() if model.phase in ("collecting", "candidate"):
                rejected = only(decisions)
                assert isinstance(rejected, EventRejected)
                assert rejected.reason is RejectReason.NOT_READY
            case ConfirmationGiven() if model.awaiting:
                assert model.expires is not None
                written_reasons = [getattr(d, "reason", None) for d in written]
                if event.principal != PRINCIPAL:
                    assert written_reasons == [RejectReason.WRONG_PRINCIPAL]
                elif event.arguments_digest != DIGEST[key]:
                    assert written_reasons == [RejectReason.MISMATCHED_CONFIRMATION]
                elif event.expires_at <= at:
                    assert written_reasons == [RejectReason.EXPIRED_CONFIRMATION]
                elif at < model.expires:
                    assert [type(d) for d in written] == [CallConfirmed]
                else:
                    assert written_reasons == [
                        CancelReason.CONFIRMATION_EXPIRED,
                        RejectReason.EXPIRED_CONFIRMATION,
                    ]
            case ConfirmationDenied(principal=principal) if model.phase != "absent":
                found = only(decisions)
                if principal == PRINCIPAL:
                    assert isinstance(found, CallCancelled)
                    assert found.reason is CancelReason.CONFIRMATION_DENIED
                else:
                    assert isinstance(found, EventRejected)
                    assert found.reason is RejectReason.WRONG_PRINCIPAL
            case StreamLost(resumable=resumable) if model.phase in ("collecting", "candidate"):
                if resumable:
                    assert decisions == ()
                else:
                    cancelled = only(decisions)
                    assert isinstance(cancelled, CallCancelled)
                    assert cancelled.reason is CancelReason.CONNECTION_LOST
            case _:
                pass

    def learn(
        self,
        key: CallKey,
        received: Input | ValidationOutcome,
        context: CallContext,
        decisions: tuple[Decision, ...],
    ) -> None:
        """Bring the model up to date with the input and what was decided."""
        model = self.models[key]
        at = received.at if isinstance(received, Input) else self.clock
        for decision in decisions:
            match decision:
                case CallCollecting():
                    model.phase = "collecting"
                    model.last_activity = at
                case FragmentAccepted(fragment=fragment):
                    assert fragment.first_sequence is not None
                    assert fragment.last_sequence is not None
                    model.seen |= set(range(fragment.first_sequence, fragment.last_sequence + 1))
                    model.garbage |= fragment.data == GARBAGE
                    model.last_activity = at
                case CallTerminalCandidate():
                    assert isinstance(received, Input)
                    assert isinstance(received.event, CallEnded)
                    model.phase = "candidate"
                    model.final = received.event.final_arguments
                    model.last_activity = at
                case ValidationRequested():
                    model.phase = "validating"
                    model.response_completed_at = at
                    self.asked[key] = context
                case CallValidated(needs_confirmation=needs):
                    model.phase = "validated"
                    model.needs_confirmation = needs
                case CallAwaitingConfirmation(expires_at=expires_at):
                    model.expires = expires_at
                case CallConfirmed():
                    model.confirmed = True
                    if isinstance(received, Input) and isinstance(
                        received.event, ConfirmationGiven
                    ):
                        model.confirmed_until = received.event.expires_at
                case CallDispatched():
                    model.dispatches += 1
                case _:
                    pass
            if isinstance(decision, TERMINAL_DECISIONS):
                model.phase = "ended"
        if isinstance(received, Input) and not wanted(context):
            model.saw_unwanted = True
        assert model.dispatches <= 1

    # --- rules ---
    #
    # Rules are drawn evenly, so the happy path gets three rules of its own (a call must go
    # through about eight inputs to be dispatched), and the inputs that end calls for good share
    # rules with harmless variants of themselves.

    @initialize(first=st.booleans(), second=st.booleans())
    def open_calls(self, first: bool, second: bool) -> None:
        """Most lives start with their calls open; some start with a stray input instead."""
        for key, opening in zip(KEYS, (first, second), strict=True):
            if opening:
                self.deliver(key, CallOpened(key=key, tool=TOOL.name, sequence=OPEN_SEQUENCE))

    def progress(self, key: CallKey, needs_confirmation: bool) -> None:
        """The next input of a call's good life: open, the next fragment, end, response end,
        an accepting validation (needing confirmation or not), the confirmation it awaits (after
        a premature claim, when ``needs_confirmation``), the claim."""
        model = self.models[key]
        if key in self.asked:
            self.answer(key, ValidationResult(needs_confirmation=needs_confirmation))
        elif model.phase == "absent":
            self.deliver(key, CallOpened(key=key, tool=TOOL.name, sequence=OPEN_SEQUENCE))
        elif model.phase == "collecting" and model.seen != ALL_SEQUENCES:
            sequence = min(ALL_SEQUENCES - model.seen)
            self.deliver(
                key,
                ArgumentsAppended(
                    key=key,
                    data=PIECES[key][sequence - 1],
                    first_sequence=sequence,
                    last_sequence=sequence,
                ),
            )
        elif model.phase == "collecting":
            self.deliver(key, CallEnded(key=key, terminal=TerminalRef(sequence=END_SEQUENCE)))
        elif model.phase == "candidate":
            other = next(other for other in KEYS if other != key)
            if self.models[other].phase == "collecting":
                # A response ends after its calls: bring the other call along first.
                self.progress(other, needs_confirmation)
            else:
                self.end_response(ResponseEndReason.COMPLETED)
        elif model.awaiting:
            if needs_confirmation:
                # An executor that does not wait: its claim must be refused.
                self.request(key, "claim")
            self.user_action(key, "confirm", right_principal=True, right_digest=True, fresh=True)
        else:
            self.request(key, "claim")

    @rule(key=st.sampled_from(KEYS), needs_confirmation=st.booleans())
    def progress_one(self, key: CallKey, needs_confirmation: bool) -> None:
        self.progress(key, needs_confirmation)

    @rule(key=st.sampled_from(KEYS), needs_confirmation=st.booleans())
    def progress_two(self, key: CallKey, needs_confirmation: bool) -> None:
        self.progress(key, needs_confirmation)

    @rule(needs_confirmation=st.booleans())
    def progress_first(self, needs_confirmation: bool) -> None:
        self.progress(KEYS[0], needs_confirmation)

    @rule(
        key=st.sampled_from(KEYS),
        first=st.integers(OPEN_SEQUENCE, PARTS),
        width=st.integers(1, PARTS),
        garbage=st.sampled_from([False, False, False, True]),
    )
    def fragment(self, key: CallKey, first: int, width: int, garbage: bool) -> None:
        last = min(PARTS, first + width - 1)
        data = GARBAGE if garbage else b"".join(PIECES[key][max(first - 1, 0) : last])
        self.deliver(
            key,
            ArgumentsAppended(
                key=key,
                data=data,
                first_sequence=first,
                last_sequence=last,
                fragments=last - first + 1,
            ),
        )

    @rule(key=st.sampled_from(KEYS), final=st.sampled_from(["none", "whole", "wrong"]))
    def end_call(self, key: CallKey, final: str) -> None:
        given = {"none": None, "whole": WHOLE[key], "wrong": WRONG_FINAL}[final]
        self.deliver(
            key,
            CallEnded(key=key, terminal=TerminalRef(sequence=END_SEQUENCE), final_arguments=given),
        )

    def end_response(self, reason: ResponseEndReason) -> None:
        self.deliver_all(
            ResponseEnded(response=RESPONSE, reason=reason, terminal=TerminalRef(sequence=90))
        )

    @precondition(lambda self: bool(self.asked))
    @rule(
        index=st.integers(0, 1),
        answer=st.sampled_from(["accept", "confirm", "confirm", "fail"]),
    )
    def answer_validation(self, index: int, answer: str) -> None:
        pending = [key for key in KEYS if key in self.asked]
        key = pending[index % len(pending)]
        assert self.states[key].validating is not None
        result = {
            "accept": ValidationResult(),
            "confirm": ValidationResult(needs_confirmation=True),
            "fail": ValidationResult(failure=FailReason.SCHEMA_INVALID, detail="$.days: type"),
        }[answer]
        self.answer(key, result)

    def answer(self, key: CallKey, result: ValidationResult) -> None:
        """Feed the validation's answer, with the context of the input that asked for it, then
        the inputs held meanwhile, in order."""
        self.process(key, ValidationOutcome(result=result), self.asked.pop(key))
        while self.held[key] and self.states[key].validating is None:
            received, context = self.held[key].pop(0)
            self.process(key, received, context)

    @rule(
        key=st.sampled_from(KEYS),
        action=st.sampled_from(["confirm", "confirm", "deny"]),
        right_principal=st.booleans(),
        right_digest=st.booleans(),
        fresh=st.booleans(),
    )
    def user_action(
        self, key: CallKey, action: str, right_principal: bool, right_digest: bool, fresh: bool
    ) -> None:
        principal = PRINCIPAL if right_principal else "user:mallory"
        if action == "deny":
            self.deliver(key, ConfirmationDenied(key=key, principal=principal))
            return
        self.deliver(
            key,
            ConfirmationGiven(
                key=key,
                principal=principal,
                tool_digest=TOOL.digest,
                arguments_digest=DIGEST[key] if right_digest else DIGEST[KEYS[0]] + "0",
                nonce=f"nonce-{self.position}",
                expires_at=self.clock + (timedelta(minutes=5) if fresh else timedelta(0)),
            ),
        )

    @rule(key=st.sampled_from(KEYS), kind=st.sampled_from(["claim", "deadline", "open"]))
    def request(self, key: CallKey, kind: str) -> None:
        if kind == "claim":
            event: Event = ClaimRequested(
                key=key, claim_id=f"claim-{self.position}", executor="worker"
            )
        elif kind == "deadline":
            event = DeadlineReached(key=key)
        else:
            event = CallOpened(key=key, tool=TOOL.name, sequence=OPEN_SEQUENCE)
        self.deliver(key, event)

    @rule(seconds=st.sampled_from([1, 20, 59, 61, 150]))
    def advance(self, seconds: int) -> None:
        self.clock += timedelta(seconds=seconds)

    @rule(
        kind=st.sampled_from(
            [
                "cancel-turn",
                "cancel-turn-as-another",
                "cancel-turn-as-another",
                "stream-lost",
                "stream-lost-resumable",
                "stream-lost-resumable",
                "stream-lost-resumable",
                *sorted(CONTROLS),
                *(f"response-{reason}" for reason in ("completed", "length", "error")),
            ]
        ),
        delivered=st.booleans(),
    )
    def disrupt(self, kind: str, delivered: bool) -> None:
        """A turn, stream or operator event; when not ``delivered`` only the context changes,
        and the next input of the call must see it (rule 6: the first input that sees it)."""
        deliver_all = self.deliver_all if delivered else self.skip
        if kind.startswith("response-"):
            self.end_response(ResponseEndReason(kind.removeprefix("response-")))
        elif kind == "cancel-turn":
            # The fold's scope lets only the turn's principal cancel it.
            self.turn_status = TurnStatus.CANCELLED
            deliver_all(TurnCancelled(turn=KEYS[0].turn_ref, principal=PRINCIPAL))
        elif kind == "cancel-turn-as-another":
            deliver_all(TurnCancelled(turn=KEYS[0].turn_ref, principal="user:mallory"))
        elif kind.startswith("stream-lost"):
            resumable = kind.endswith("resumable")
            deliver_all(StreamLost(response=RESPONSE, resumable=resumable))
        else:
            control = CancelReason(kind)
            if self.blocked is None:
                self.blocked = control
            deliver_all(CONTROLS[control])

    @rule(kind=st.sampled_from(["cancel-turn", *sorted(CONTROLS)]))
    def stop_unseen(self, kind: str) -> None:
        """The turn is cancelled or a control applies, and no input has told the calls yet."""
        self.disrupt(kind, delivered=False)

    @precondition(lambda self: any(model.ready for model in self.models.values()))
    @rule(index=st.integers(0, 1), kind=st.sampled_from(["cancel-turn", *sorted(CONTROLS)]))
    def claim_after_unseen_stop(self, index: int, kind: str) -> None:
        """The time-of-use check: a ready call is claimed right after a stop it was not told of."""
        ready = [key for key in KEYS if self.models[key].ready]
        self.stop_unseen(kind)
        self.request(ready[index % len(ready)], "claim")

    @precondition(lambda self: any(model.awaiting for model in self.models.values()))
    @rule(index=st.integers(0, 1), flaw=st.sampled_from(["principal", "digest", "expired"]))
    def confirm_wrongly(self, index: int, flaw: str) -> None:
        """A call awaiting confirmation gets one that must not count (I6)."""
        waiting = [key for key in KEYS if self.models[key].awaiting]
        self.user_action(
            waiting[index % len(waiting)],
            "confirm",
            right_principal=flaw != "principal",
            right_digest=flaw != "digest",
            fresh=flaw != "expired",
        )


EXAMPLES = int(os.environ.get("INERT_DECIDER_EXAMPLES", "1000"))
"""Random runs of 50 steps; ``make soak`` asks for 20,000 (``INERT_DECIDER_EXAMPLES``)."""


@pytest.mark.slow(seconds=25)
def test_the_decider_keeps_its_invariants_under_random_inputs() -> None:
    """I1-I7 hold after every step of random inputs to two calls of one turn."""
    before = DeciderMachine.examples
    run_state_machine_as_test(
        DeciderMachine,
        settings=settings(max_examples=EXAMPLES, stateful_step_count=50, deadline=None),
    )
    RUN_COUNTS["decider state machine examples"] = DeciderMachine.examples - before
