"""The handlers of the call state machine: one per (state, input) row of the table in
``inert.actors._decider``, each deciding one input under the rules stated there.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ..events import (
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
    EditRefused,
    Event,
    EventRejected,
    FailReason,
    Phase,
    RejectReason,
    ResponseEnded,
    ResponseEndReason,
    ServerToolCalled,
    StreamLost,
)
from ._arguments import (
    ArgumentProblem,
    ParsedArguments,
    RejectedArguments,
    arguments_digest,
    described_by_earlier_rules,
    parse_arguments,
)
from ._buffer import Buffer, Fit
from ._call import (
    ArgumentsEdited,
    ArgumentsParsed,
    CallContext,
    CallLimits,
    CallView,
    Decision,
    Edit,
    FragmentAccepted,
    IllegalTransition,
    Input,
    Opened,
    TurnStatus,
    TurnView,
    ValidationOutcome,
    ValidationRequested,
    awaits_response,
)
from ._places import bounded, unoffered_tool

NO_ARGUMENT_TEXT = 9
"""The first rules under which no detail holds text of the arguments, nor the name of a tool
the turn did not offer, and every detail is bounded (``inert.actors._places``)."""


class Judge:
    """Builds the decisions of one input: each one names the call and the input's position.

    ``bounded``: the call's turn is judged by rules 9 on, under which every detail is cut to
    ``MAX_DETAIL_LENGTH`` characters.
    """

    def __init__(
        self,
        state: CallView,
        received: Input | ValidationOutcome,
        cause: int,
        *,
        bounded: bool = True,
    ) -> None:
        self.state = state
        self.received = received
        self.cause = cause
        self.bounded = bounded

    def _detail(self, detail: str) -> str:
        return bounded(detail) if self.bounded else detail

    def cancel(
        self, reason: CancelReason, *, duplicate_of: CallKey | None = None
    ) -> tuple[Decision, ...]:
        fragments, size = self._received()
        return (
            CallCancelled(
                key=self.state.key,
                cause=self.cause,
                reason=reason,
                fragments=fragments,
                size=size,
                duplicate_of=duplicate_of,
            ),
        )

    def fail(self, reason: FailReason, detail: str = "") -> tuple[Decision, ...]:
        fragments, size = self._received()
        return (
            CallFailed(
                key=self.state.key,
                cause=self.cause,
                reason=reason,
                detail=self._detail(detail),
                fragments=fragments,
                size=size,
            ),
        )

    def _received(self) -> tuple[int | None, int | None]:
        """The argument data a call ending while it collects had received, with the fragment
        that ends it; none for a call never opened; ``None`` past collecting, where its
        terminal candidate has the counts.

        Recorded in the ending decision, so that the ledger's counts do not depend on the
        fragments' payloads, which retention redacts.
        """
        state = self.state
        # A call never opened received nothing as its data: what came before its opening
        # is a protocol violation, not arguments.
        if state.phase is Phase.ABSENT:
            return 0, 0
        if state.phase is not Phase.COLLECTING:
            return None, None
        fragments, size = state.fragments, state.size
        received = self.received
        if isinstance(received, Input) and isinstance(received.event, ArgumentsAppended):
            fragments += received.event.fragments
            size += state._buffer.added(received.event)
        return fragments, size

    def refuse_edit(
        self, confirmation_event_id: str, reason: FailReason, detail: str, size: int
    ) -> tuple[Decision, ...]:
        return (
            EditRefused(
                key=self.state.key,
                cause=self.cause,
                confirmation_event_id=confirmation_event_id,
                reason=reason,
                detail=self._detail(detail),
                size=size,
            ),
        )

    def reject(self, reason: RejectReason, detail: str = "") -> tuple[Decision, ...]:
        assert isinstance(self.received, Input)
        return (
            EventRejected(
                key=self.state.key,
                cause=self.cause,
                rejected_event_id=self.received.event_id,
                rejected_type=self.received.event.TAG,
                reason=reason,
                detail=self._detail(detail),
            ),
        )


Handler = Callable[[Judge, CallContext], tuple[Decision, ...]]
NOTHING: tuple[Decision, ...] = ()


def _event(judge: Judge) -> Event:
    assert isinstance(judge.received, Input)
    return judge.received.event


def _at(judge: Judge) -> datetime:
    assert isinstance(judge.received, Input)
    return judge.received.at


def _unwanted(context: CallContext) -> CancelReason | None:
    turn = context.turn
    if turn is not None and turn.status is TurnStatus.CANCELLED:
        return CancelReason.TURN_CANCELLED
    if turn is not None and turn.status is TurnStatus.SUPERSEDED:
        return CancelReason.SUPERSEDED
    return context.blocked


def _stale(judge: Judge, context: CallContext) -> tuple[Decision, ...] | None:
    """The rejection of an event addressed to a call of a turn that is unknown or over."""
    if context.turn is None:
        return judge.reject(RejectReason.UNKNOWN_TURN)
    if context.turn.status is not TurnStatus.ACTIVE:
        return judge.reject(RejectReason.STALE_TURN, f"the turn is {context.turn.status.value}")
    return None


# absent


def open_call(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    stale = _stale(judge, context)
    if stale is not None:
        return stale
    event = _event(judge)
    assert isinstance(event, CallOpened)
    assert context.turn is not None
    offered = event.tool in context.turn.tools
    hidden = not offered and context.turn.rules >= NO_ARGUMENT_TEXT
    opened: tuple[Decision, ...] = (
        CallCollecting(
            key=judge.state.key,
            cause=judge.cause,
            tool=unoffered_tool(event.tool, context.digest_key) if hidden else event.tool,
        ),
        Opened(sequence=event.sequence, at=_at(judge)),
    )
    if context.response_elsewhere and context.turn.rules >= 2:
        return opened + judge.fail(
            FailReason.RESPONSE_OF_ANOTHER_TURN,
            f"the provider response {judge.state.key.response!r} belongs to"
            f" {context.response_elsewhere}",
        )
    if context.response_over_limit and context.turn.rules >= 3:
        return opened + judge.fail(
            FailReason.RESPONSE_OVER_LIMIT,
            f"an earlier call of the provider response {judge.state.key.response!r} passed a"
            " limit on live calls: it opens no call any more",
        )
    if hidden:
        return opened + judge.fail(
            FailReason.UNKNOWN_TOOL,
            f"the turn did not offer the tool {unoffered_tool(event.tool, context.digest_key)}",
        )
    if not offered:
        return opened + judge.fail(
            FailReason.UNKNOWN_TOOL, f"the turn did not offer a tool named {event.tool!r}"
        )
    blocked = context.blocked
    if blocked is not None:
        return opened + judge.cancel(blocked)
    limits = context.limits
    if context.live_in_turn >= limits.max_live_per_turn:
        return opened + judge.fail(
            FailReason.LIMIT_EXCEEDED,
            f"{context.live_in_turn} calls of the turn are alive, the limit is"
            f" {limits.max_live_per_turn}",
        )
    if context.live_in_tenant >= limits.max_live_per_tenant:
        return opened + judge.fail(
            FailReason.LIMIT_EXCEEDED,
            f"{context.live_in_tenant} calls of the tenant are alive, the limit is"
            f" {limits.max_live_per_tenant}",
        )
    return opened


def before_open(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    stale = _stale(judge, context)
    if stale is not None:
        return stale
    return judge.fail(
        FailReason.PROTOCOL_VIOLATION,
        f"{_event(judge).TAG} arrived before the call was opened",
    )


def unknown_call(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    stale = _stale(judge, context)
    if stale is not None:
        return stale
    return judge.reject(RejectReason.UNKNOWN_CALL, "the call was never opened")


def ignore(_: Judge, __: CallContext) -> tuple[Decision, ...]:
    return NOTHING


# open calls (collecting, terminal candidate, validated)


def wanted(handler: Handler, *, answer: bool = False) -> Handler:
    """Run ``handler`` only while the call is wanted; otherwise cancel it (rule 6).

    ``answer``: the input is a request whose sender waits for a reply, so it is also rejected.
    """

    def checked(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
        reason = _unwanted(context)
        if reason is None:
            return handler(judge, context)
        decisions = judge.cancel(reason)
        if answer:
            decisions += judge.reject(RejectReason.NOT_READY, f"the call is cancelled: {reason}")
        return decisions

    return checked


def reopen(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, CallOpened)
    if event.tool == judge.state.tool:
        return judge.reject(RejectReason.DUPLICATE, "the call is open already")
    turn = context.turn
    if turn is not None and turn.rules >= NO_ARGUMENT_TEXT and event.tool not in turn.tools:
        return judge.fail(
            FailReason.IDENTITY_CONFLICT,
            f"opened again as {unoffered_tool(event.tool, context.digest_key)}, it was"
            f" {judge.state.tool!r}",
        )
    return judge.fail(
        FailReason.IDENTITY_CONFLICT,
        f"opened again as {event.tool!r}, it was {judge.state.tool!r}",
    )


def accepts_fragment(state: CallView, event: ArgumentsAppended, limits: CallLimits) -> bool:
    """Whether a wanted, collecting call takes this fragment as new data (rule 3)."""
    buffer = state._buffer
    opened = state.opened_sequence
    first = event.first_sequence
    return (
        buffer.fit(event) is Fit.NEW
        and (opened is None or first is None or first > opened)
        and buffer.needed(event) <= limits.max_bytes
        and buffer.fragments + event.fragments <= limits.max_fragments
    )


def takes_fragment_alone(
    state: CallView,
    event: ArgumentsAppended,
    turn: TurnView | None,
    blocked: CancelReason | None,
    limits: CallLimits,
) -> bool:
    """Whether the only decision on this fragment is to take it as data: the call is collecting,
    not being validated, wanted (rule 6: its turn active, no control against it) and the
    fragment is new data within the limits (rule 3). The most common input: the fold asks this
    before it asks ``decide``, and takes the fragment without a decision where it holds."""
    return (
        state.phase is Phase.COLLECTING
        and state.validating is None
        and turn is not None
        and turn.status is TurnStatus.ACTIVE
        and blocked is None
        and accepts_fragment(state, event, limits)
    )


def take_fragment(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ArgumentsAppended)
    if accepts_fragment(judge.state, event, context.limits):
        return (FragmentAccepted(fragment=event, at=_at(judge)),)
    buffer = judge.state._buffer
    fit = buffer.fit(event)
    if fit is Fit.DUPLICATE:
        return judge.reject(RejectReason.DUPLICATE, _DUPLICATE[event.offset is None])
    if fit is Fit.CONFLICT:
        return judge.fail(
            FailReason.CONFLICTING_FRAGMENT,
            f"bytes {event.offset}..{_last_byte(event)} differ from the bytes stored there",
        )
    if fit is Fit.REPLAYED:
        return judge.fail(
            FailReason.CONFLICTING_FRAGMENT,
            f"sequences {event.first_sequence}..{event.last_sequence} arrived already,"
            " with other bytes",
        )
    if fit is Fit.OVERLAP:
        return judge.fail(FailReason.PROTOCOL_VIOLATION, "fragment overlaps sequences seen")
    if fit is Fit.MIXED:
        return judge.fail(FailReason.PROTOCOL_VIOLATION, _mixed(buffer, event))
    opened = judge.state.opened_sequence
    if opened is not None and event.first_sequence is not None and event.first_sequence <= opened:
        return judge.fail(
            FailReason.PROTOCOL_VIOLATION,
            f"fragment numbered {event.first_sequence}, not after the opening's {opened}",
        )
    limits = context.limits
    needed = buffer.needed(event)
    if needed > limits.max_bytes:
        return judge.fail(FailReason.TOO_LARGE, f"{needed} bytes, the limit is {limits.max_bytes}")
    if buffer.fragments + event.fragments > limits.max_fragments:
        return judge.fail(
            FailReason.TOO_MANY_FRAGMENTS,
            f"{buffer.fragments + event.fragments} fragments, the limit is {limits.max_fragments}",
        )
    return (FragmentAccepted(fragment=event, at=_at(judge)),)


_DUPLICATE = {True: "these sequences arrived already", False: "these bytes arrived already"}


def _last_byte(event: ArgumentsAppended) -> int:
    assert event.offset is not None
    return event.offset + len(event.data) - 1


def _mixed(buffer: Buffer, event: ArgumentsAppended) -> str:
    if buffer.positioned is not None and buffer.positioned != (event.offset is not None):
        return "fragments with and without offsets in one call"
    return "numbered and unnumbered fragments in one call"


def late_fragment(judge: Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ArgumentsAppended)
    if judge.state._buffer.covers(event):
        return judge.reject(RejectReason.DUPLICATE, _DUPLICATE[event.offset is None])
    return judge.fail(FailReason.PROTOCOL_VIOLATION, "fragment after the call's end event")


def end_call(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, CallEnded)
    state = judge.state
    buffer = state._buffer
    gap = buffer.gap(state.opened_sequence, event.terminal.sequence)
    if gap is not None:
        return judge.fail(FailReason.SEQUENCE_GAP, gap)
    data = buffer.assembled()
    if event.final_arguments is not None:
        if buffer.fragments and event.final_arguments != data:
            return judge.fail(
                FailReason.FINAL_ARGUMENTS_MISMATCH,
                f"the provider's {len(event.final_arguments)} bytes differ from the"
                f" {len(data)} assembled",
            )
        data = event.final_arguments
    parsed = parse_arguments(data, context.limits.arguments, digest_key=context.digest_key)
    if isinstance(parsed, RejectedArguments):
        return judge.fail(_refusal(parsed), _described(parsed, data, context))
    candidate: tuple[Decision, ...] = (
        ArgumentsParsed(arguments=parsed, terminal=event.terminal, at=_at(judge)),
        CallTerminalCandidate(
            key=state.key,
            cause=judge.cause,
            terminal=event.terminal,
            fragments=buffer.fragments,
            size=len(data),
            arguments_digest=parsed.digest,
        ),
    )
    turn = context.turn
    assert turn is not None
    if turn.rules < 7:
        return candidate
    return (*candidate, _validation(judge, context, parsed))


def _refusal(parsed: RejectedArguments) -> FailReason:
    if parsed.problem is ArgumentProblem.TOO_LARGE:
        return FailReason.TOO_LARGE
    return FailReason.MALFORMED_ARGUMENTS


def _described(parsed: RejectedArguments, data: bytes, context: CallContext) -> str:
    """The detail of refused arguments: under earlier rules the path named the names of the
    arguments, which a replay of a turn judged by them must repeat."""
    turn = context.turn
    if turn is not None and turn.rules < NO_ARGUMENT_TEXT:
        return described_by_earlier_rules(data, context.limits.arguments)
    return parsed.describe()


def end_again(judge: Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, CallEnded)
    if event.terminal == judge.state.terminal:
        return judge.reject(RejectReason.DUPLICATE, "the same end event arrived already")
    return judge.fail(FailReason.PROTOCOL_VIOLATION, "a second, different end event")


def response_ended_early(judge: Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ResponseEnded)
    if event.reason is ResponseEndReason.COMPLETED:
        return judge.fail(
            FailReason.PROTOCOL_VIOLATION, "the response ended before the call's end event"
        )
    return _response_failed(judge, event)


def response_ended(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ResponseEnded)
    if event.reason is not ResponseEndReason.COMPLETED:
        return _response_failed(judge, event)
    assert judge.state.arguments is not None
    return (_validation(judge, context, judge.state.arguments),)


def _validation(judge: Judge, context: CallContext, arguments: ParsedArguments) -> Decision:
    """The one request to validate the call's arguments, caused by the input judged."""
    turn = context.turn
    assert turn is not None
    state = judge.state
    return ValidationRequested(
        key=state.key,
        tool=turn.tools[state.tool],
        principal=turn.principal,
        arguments=arguments,
        cause=judge.cause,
        at=_at(judge),
    )


def response_ended_validated(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    """A response's end reaching a validated call: nothing before rules 7 (it was validated
    because its response ended well); from rules 7 a call validated at its own end waits for
    its response's first end, which fails it unless successful."""
    end = context.response_end
    if end is None or end.position != judge.cause:
        # A later end of the response: its first one decided already.
        return NOTHING
    if not awaits_response(judge.state, context.turn, None):
        return NOTHING
    reason = _unwanted(context)
    if reason is not None:
        return judge.cancel(reason)
    if end.completed:
        state = judge.state
        if state.awaiting_confirmation:
            return NOTHING
        return _ready(judge, context, _at(judge), state.confirmation_expires)
    event = _event(judge)
    assert isinstance(event, ResponseEnded)
    return _response_failed(judge, event)


def _ready(
    judge: Judge, context: CallContext, since: datetime, confirmation_expires: datetime | None
) -> tuple[Decision, ...]:
    """The decision that the call is ready, since ``since``, for the ready lifetime and no
    longer than its confirmation lets it be claimed, in a turn of rules 8 on."""
    turn = context.turn
    if turn is None or turn.rules < 8 or judge.state.ready_expires is not None:
        return NOTHING
    expires_at = since + context.limits.ready_lifetime
    if confirmation_expires is not None:
        expires_at = min(expires_at, confirmation_expires)
    return (CallReady(key=judge.state.key, cause=judge.cause, expires_at=expires_at),)


def stream_lost_validated(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    """A lost stream reaching a validated call: from rules 7, one validated at its own end
    whose response has not ended is cancelled as one still collecting would be."""
    if context.response_end is not None or not awaits_response(judge.state, context.turn, None):
        return NOTHING
    return wanted(stream_lost)(judge, context)


def _response_failed(judge: Judge, event: ResponseEnded) -> tuple[Decision, ...]:
    detail = f"the response ended: {event.reason.value}"
    if event.detail:
        detail = f"{detail} ({event.detail})"
    if event.reason is ResponseEndReason.PROTOCOL_VIOLATION:
        return judge.fail(FailReason.PROTOCOL_VIOLATION, detail)
    return judge.fail(FailReason.RESPONSE_FAILED, detail)


def server_tool(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    stale = _stale(judge, context)
    if stale is not None:
        return stale
    event = _event(judge)
    assert isinstance(event, ServerToolCalled)
    return (
        CallCollecting(key=judge.state.key, cause=judge.cause, tool=event.tool),
        Opened(sequence=None, at=_at(judge)),
        *judge.cancel(CancelReason.SERVER_EXECUTED),
    )


def server_tool_on_open_call(judge: Judge, _: CallContext) -> tuple[Decision, ...]:
    return judge.fail(
        FailReason.IDENTITY_CONFLICT, "a call opened here was reported as the provider's own tool"
    )


def stream_lost(judge: Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, StreamLost)
    return NOTHING if event.resumable else judge.cancel(CancelReason.CONNECTION_LOST)


def validation_outcome(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    outcome = judge.received
    request = judge.state.validating
    if not isinstance(outcome, ValidationOutcome) or request is None:
        raise IllegalTransition(judge.state.phase, "a validation outcome nobody asked for")
    result = outcome.result
    if result.failure is not None:
        return judge.fail(result.failure, result.detail)
    key = judge.state.key
    validated: tuple[Decision, ...] = (
        CallValidated(
            key=key,
            cause=judge.cause,
            tool=request.tool.name,
            tool_digest=request.tool.digest,
            arguments=request.arguments.canonical,
            arguments_digest=request.arguments.digest,
            needs_confirmation=result.needs_confirmation,
        ),
    )
    if result.needs_confirmation:
        awaiting = CallAwaitingConfirmation(
            key=key,
            cause=judge.cause,
            arguments_digest=request.arguments.digest,
            expires_at=request.at + context.limits.confirmation_lifetime,
        )
        return (*validated, awaiting)
    if awaits_response(judge.state, context.turn, context.response_end):
        return validated
    return validated + _ready(judge, context, request.at, None)


def confirm(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ConfirmationGiven)
    assert context.turn is not None
    state = judge.state
    at = _at(judge)
    if not state.needs_confirmation:
        return judge.reject(RejectReason.MISMATCHED_CONFIRMATION, "the tool needs none")
    if state.confirmed:
        return judge.reject(RejectReason.DUPLICATE, "the call is confirmed already")
    if event.principal != context.turn.principal:
        return judge.reject(RejectReason.WRONG_PRINCIPAL, "not the principal of the turn")
    if event.tool_digest != state.tool_digest:
        return judge.reject(RejectReason.MISMATCHED_CONFIRMATION, "for another tool declaration")
    if event.arguments_digest != state.arguments_digest:
        return judge.reject(RejectReason.MISMATCHED_CONFIRMATION, "for other arguments")
    if event.expires_at <= at:
        return judge.reject(RejectReason.EXPIRED_CONFIRMATION, "the confirmation expired")
    assert state.confirmation_expires is not None
    if state.confirmation_expires <= at:
        return judge.cancel(CancelReason.CONFIRMATION_EXPIRED) + judge.reject(
            RejectReason.EXPIRED_CONFIRMATION, "the call stopped waiting for confirmation"
        )
    assert isinstance(judge.received, Input)
    expires_at = event.expires_at if context.turn.rules >= 4 else None
    if event.arguments is not None:
        edited = _edit(judge, context, event, expires_at)
        if edited is not None:
            return edited
    confirmed: tuple[Decision, ...] = (
        CallConfirmed(
            key=state.key,
            cause=judge.cause,
            principal=event.principal,
            confirmation_event_id=judge.received.event_id,
            expires_at=expires_at,
        ),
    )
    if awaits_response(state, context.turn, context.response_end):
        return confirmed
    return confirmed + _ready(judge, context, at, expires_at)


def _edit(
    judge: Judge, context: CallContext, event: ConfirmationGiven, expires_at: datetime | None
) -> tuple[Decision, ...] | None:
    """A confirmation with the principal's edit of the arguments: refused if the edit does not
    parse, validated once (as the model's arguments were) if it does; None for an edit that
    changes nothing, which confirms as it is."""
    assert event.arguments is not None
    assert context.turn is not None
    assert isinstance(judge.received, Input)
    state = judge.state
    size = len(event.arguments)
    parsed = parse_arguments(
        event.arguments, context.limits.arguments, digest_key=context.digest_key
    )
    if isinstance(parsed, RejectedArguments):
        return judge.refuse_edit(
            judge.received.event_id,
            _refusal(parsed),
            _described(parsed, event.arguments, context),
            size,
        )
    if parsed.digest == state.arguments_digest:
        return None
    return (
        ValidationRequested(
            key=state.key,
            tool=context.turn.tools[state.tool],
            principal=context.turn.principal,
            arguments=parsed,
            cause=judge.cause,
            at=_at(judge),
            edit=Edit(
                principal=event.principal,
                confirmation_event_id=judge.received.event_id,
                expires_at=expires_at,
                size=size,
            ),
        ),
    )


def edit_validated(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    """The validation of a principal's edit at confirmation: the edited arguments replace the
    call's and the confirmation binds them, or the edit is refused and the call still waits."""
    outcome = judge.received
    request = judge.state.validating
    if not isinstance(outcome, ValidationOutcome) or request is None or request.edit is None:
        raise IllegalTransition(judge.state.phase, "a validation outcome nobody asked for")
    edit, state, result = request.edit, judge.state, outcome.result
    if result.failure is not None:
        return judge.refuse_edit(
            edit.confirmation_event_id, result.failure, result.detail, edit.size
        )
    arguments = request.arguments
    return (
        ArgumentsEdited(arguments=arguments),
        CallValidated(
            key=state.key,
            cause=judge.cause,
            tool=request.tool.name,
            tool_digest=request.tool.digest,
            arguments=arguments.canonical,
            arguments_digest=arguments.digest,
            needs_confirmation=True,
            edited_by=edit.principal,
            edited_from=state.arguments_digest,
            edited_size=edit.size,
        ),
        CallConfirmed(
            key=state.key,
            cause=judge.cause,
            principal=edit.principal,
            confirmation_event_id=edit.confirmation_event_id,
            expires_at=edit.expires_at,
        ),
    ) + (
        NOTHING
        if awaits_response(state, context.turn, context.response_end)
        else _ready(judge, context, request.at, edit.expires_at)
    )


def not_ready(judge: Judge, _: CallContext) -> tuple[Decision, ...]:
    return judge.reject(RejectReason.NOT_READY, f"the call is {judge.state.phase.value}")


def deny(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ConfirmationDenied)
    assert context.turn is not None
    if event.principal != context.turn.principal:
        return judge.reject(RejectReason.WRONG_PRINCIPAL, "not the principal of the turn")
    return judge.cancel(CancelReason.CONFIRMATION_DENIED)


def claim(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ClaimRequested)
    state = judge.state
    if state.awaiting_confirmation:
        assert state.confirmation_expires is not None
        if state.confirmation_expires <= _at(judge):
            return judge.cancel(CancelReason.CONFIRMATION_EXPIRED) + judge.reject(
                RejectReason.NOT_READY, "the call stopped waiting for confirmation"
            )
        return judge.reject(RejectReason.NOT_READY, "the call awaits confirmation")
    # A confirmed call has an expiry only where its turn's rules bound the ready window.
    expires = state.confirmation_expires
    if state.confirmed and expires is not None and expires <= _at(judge):
        return judge.cancel(CancelReason.CONFIRMATION_EXPIRED) + judge.reject(
            RejectReason.NOT_READY, "the confirmation expired before a claim"
        )
    ready_until = state.ready_expires
    if ready_until is not None and ready_until <= _at(judge):
        return judge.cancel(CancelReason.READY_EXPIRED) + judge.reject(
            RejectReason.NOT_READY,
            f"nobody claimed the call while it was ready, until {ready_until.isoformat()}",
        )
    if awaits_response(state, context.turn, context.response_end):
        return judge.reject(
            RejectReason.NOT_READY, "the call's response has not ended successfully yet"
        )
    if state.needs_confirmation and (
        state.arguments is None
        or arguments_digest(state.arguments.canonical, context.digest_key) != state.arguments_digest
    ):
        # The confirmation bound a digest; what would run is recomputed from the validated
        # arguments now, so that nothing but the arguments confirmed can be dispatched.
        return judge.reject(
            RejectReason.MISMATCHED_CONFIRMATION,
            "the arguments to run are not the ones the confirmation named",
        )
    earlier = context.duplicate_of
    if earlier is not None and context.turn is not None and context.turn.rules >= 6:
        return judge.cancel(CancelReason.DUPLICATE_OF, duplicate_of=earlier) + judge.reject(
            RejectReason.NOT_READY, f"an identical call ran already: {earlier.stream}"
        )
    return (
        CallDispatched(
            key=state.key, cause=judge.cause, claim_id=event.claim_id, executor=event.executor
        ),
    )


def deadline_passed(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    state = judge.state
    at = _at(judge)
    awaiting = awaits_response(state, context.turn, context.response_end)
    due = state.deadline(context.limits, awaiting_response=awaiting)
    if due is None or at < due:
        return judge.reject(RejectReason.NOT_READY, "no deadline of the call is due")
    expires = state.confirmation_expires
    if state.awaiting_confirmation and expires is not None and expires <= at:
        return judge.cancel(CancelReason.CONFIRMATION_EXPIRED)
    if state.phase is Phase.VALIDATED and state.ready_expires is not None:
        if state.confirmed and expires is not None and expires <= at:
            return judge.cancel(CancelReason.CONFIRMATION_EXPIRED)
        return judge.cancel(CancelReason.READY_EXPIRED)
    return judge.cancel(CancelReason.IDLE_TIMEOUT)


def changes_wish(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    """A turn, tenant or operator event that concerns the call: cancel it if it is unwanted."""
    reason = _unwanted(context)
    return NOTHING if reason is None else judge.cancel(reason)


# terminal calls


def stop_running(judge: Judge, context: CallContext) -> tuple[Decision, ...]:
    """A turn, tenant or operator event that concerns a dispatched call: while an executor runs
    it, ask that executor to stop, once (rules 5 on)."""
    state = judge.state
    turn = context.turn
    if turn is None or turn.rules < 5 or not context.running or state.stop_requested:
        return NOTHING
    reason = _unwanted(context)
    if reason is None:
        return NOTHING
    return (
        CallStopRequested(key=state.key, cause=judge.cause, claim_id=state.claim_id, reason=reason),
    )


def refuse_terminal(judge: Judge, _: CallContext) -> tuple[Decision, ...]:
    return judge.reject(RejectReason.CALL_TERMINAL, f"the call is {judge.state.phase.value}")
