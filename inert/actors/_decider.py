"""The call state machine: every rule of one call's life, and nothing else, lives here.

States::

    absent -> collecting -> terminal_candidate -> validated -> dispatched
                  \\                 \\                 \\
                   +-----------------+-----------------+--> cancelled | failed

``dispatched``, ``cancelled`` and ``failed`` are terminal. ``validated`` may wait for a
confirmation before a claim can dispatch it. ``absent`` is where every call key starts and where
it stays while everything addressed to it is rejected.

Rules:

1. Determinism. An input is judged against the state, the context as of the input's log
   position (the turn, the operator controls, the limits, the turn its response was first
   seen under) and the time the log recorded it.
   Nothing else is consulted, so the same log gives the same decisions, live and on replay. The
   only answer from outside is a validation result, fed back as ``ValidationOutcome`` and
   recorded in the decision it produces, so that replay never asks for it again.
2. Opening. A call opens only in a known, active turn; in a cancelled or superseded turn every
   event addressed to it is rejected (``stale_turn``) and it never leaves ``absent``; a request
   for a call never opened is rejected (``unknown_call``). A provider response belongs to the
   turn it was first seen under: a call opened in a response first seen under another turn (or
   whose stream had events before, of a turn unknown now) fails at once
   (``response_of_another_turn``), so that a response replayed into a new turn never acts again.
   A tool the turn did not offer fails the call at once. A call opened under an operator control
   is cancelled at once. A call opened past a limit on live calls (of its turn, of its tenant)
   fails (``limit_exceeded``); in a turn judged by rules 3 or later its response then opens no
   call any more (each later one fails ``response_over_limit``), and a call counts against the
   limits from its opening until its ending is read back from the log (not from when it is
   decided), so that a replay in which a call takes its decisions as recorded counts alike.
   Fragments or an end event before the opening fail the call: its data can no longer be whole.
   A call the provider ran itself (a server tool) is on record and cancelled as it opens
   (``server_executed``): no tool of the turn makes it dispatchable.
3. Fragments are transport data. They go to a private buffer (``inert.actors._buffer``). A
   fragment with an offset is the call's bytes ``[offset, offset + len)``:
   a. a range wholly inside what is stored is a duplicate, however differently it was chunked:
      rejected, never data;
   b. a range that overlaps stored bytes must equal them there, or the call fails
      (``conflicting_fragment``); a range that straddles the end appends its suffix;
   c. a range that starts past the end is held until the bytes before it arrive (a gap still
      open at the end event fails the call, rule 4);
   d. sequences keep their meaning: new bytes under sequences that were all seen fail the call
      (``conflicting_fragment``), and the sequences accepted are checked for a gap at the end.
   A fragment without an offset (schema 1) is placed by its sequences: one whose sequences were
   all seen is a duplicate; one that overlaps what was seen fails the call. Fragments with and
   without offsets, or numbered and unnumbered, in one call fail it; so does one numbered at or
   before the opening. Past the byte limit (the furthest byte a fragment reaches counts) or the
   fragment limit the call fails.
4. The call's own end event permits parsing, nothing more. A sequence number missing between
   the opening and the end, or bytes missing before a part held past a gap, fail the call
   (``sequence_gap``); final arguments sent by the provider must equal the assembled bytes (or
   stand for them when there were no fragments); then the bytes are parsed once, strictly
   (``inert.actors._arguments``). Only a parse that passes makes a ``terminal_candidate``.
5. Only a successful end of its response makes a terminal candidate eligible: validation is
   requested once. A response that ends any other way, or ends before the call's own end
   event, fails the call.
6. Wanted until dispatched. A cancelled or superseded turn, a quarantined response, a disabled
   tool or a stopped tenant cancels the call at the first input that sees it, in every state
   before ``dispatched``. A stream lost without a way to resume it cancels a call whose
   response has not ended (``connection_lost``).
7. Confirmation. A validated call whose tool needs it waits for one confirmation from the
   turn's principal, for the tool digest and arguments digest of the call, before both its own
   expiry and the call's. Anything else is rejected and recorded. A denial from that principal
   cancels the call in any state before ``dispatched``.
8. Claim. A claim dispatches only a validated, wanted call (confirmed where needed, the
   digest of the arguments that would run computed again and equal to the one confirmed) and
   is answered with ``dispatched`` or a rejection. The first claim wins; every later one is
   rejected.
9. Deadlines. A call still collecting or waiting for its response is cancelled once the idle
   time has passed since its last ingress event (its opening, a fragment or its end event); a
   call waiting for confirmation is cancelled when the confirmation lifetime ends. Both are
   judged when a ``DeadlineReached`` request is in the log, at the time the log recorded it.
10. Terminal is absorbing. Events addressed to a terminal call are rejected (``call_terminal``);
    events that merely concern it (its response, turn, tenant) are ignored. This holds while
    the call's turn is known: a turn the runtime retired (``TurnRetired``, once idle for its
    horizon) is forgotten with its calls, and what is addressed to them afterwards meets a call
    key that starts ``absent`` in an unknown turn (rule 2: ``unknown_turn``).

The transition table below is closed: a (state, input) pair missing from it is an
``IllegalTransition``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import NamedTuple

import attrs
from attrs import field, frozen, validators

from ..events import (
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
    CallTerminalCandidate,
    CallValidated,
    CancelReason,
    ClaimRequested,
    ConfirmationDenied,
    ConfirmationGiven,
    DeadlineReached,
    DiscardReason,
    Event,
    EventRejected,
    FailReason,
    InertError,
    OfferedTool,
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
    TurnStarted,
    TurnSuperseded,
)
from ._arguments import (
    ArgumentLimits,
    ArgumentProblem,
    ParsedArguments,
    RejectedArguments,
    arguments_digest,
    parse_arguments,
)
from ._buffer import EMPTY_BUFFER, Buffer, Fit


class Phase(enum.StrEnum):
    """Where a call is in its life."""

    ABSENT = "absent"
    COLLECTING = "collecting"
    TERMINAL_CANDIDATE = "terminal_candidate"
    VALIDATED = "validated"
    DISPATCHED = "dispatched"
    CANCELLED = "cancelled"
    FAILED = "failed"


TERMINAL_PHASES = frozenset({Phase.DISPATCHED, Phase.CANCELLED, Phase.FAILED})


class IllegalTransition(InertError):
    """An input arrived in a state where the call state machine has no rule for it."""

    def __init__(self, phase: Phase, input_type: str) -> None:
        super().__init__(f"no transition of a {phase.value} call on {input_type}")
        self.phase = phase
        self.input_type = input_type


# --- context ---------------------------------------------------------------------------------


class TurnStatus(enum.StrEnum):
    ACTIVE = "active"
    CANCELLED = "cancelled"
    SUPERSEDED = "superseded"


@frozen(kw_only=True)
class TurnView:
    """What a call may know of its turn: who started it, what it offered, whether it is on."""

    principal: str
    tools: Mapping[str, OfferedTool]
    status: TurnStatus = TurnStatus.ACTIVE
    rules: int = RULES_VERSION
    """The version of these rules the turn was started under (``TurnStarted.rules``)."""


@frozen(kw_only=True)
class CallLimits:
    """Bounds on one call and on the calls alive at once (the design's defaults, configurable)."""

    arguments: ArgumentLimits = field(factory=ArgumentLimits)
    max_fragments: int = field(default=10_000, validator=validators.ge(1))
    idle_timeout: timedelta = timedelta(seconds=60)
    confirmation_lifetime: timedelta = timedelta(minutes=10)
    max_live_per_turn: int = field(default=64, validator=validators.ge(1))
    max_live_per_tenant: int = field(default=4096, validator=validators.ge(1))

    @property
    def max_bytes(self) -> int:
        return self.arguments.max_bytes


DEFAULT_LIMITS = CallLimits()


class CallContext(NamedTuple):
    """The world as of an input's position: the call's turn, a control that forbids the call,
    and how many other calls of its turn and tenant are alive.

    A named tuple rather than an attrs class, as ``Input``: the fold makes one per input.
    """

    turn: TurnView | None
    blocked: CancelReason | None = None
    limits: CallLimits = DEFAULT_LIMITS
    live_in_turn: int = 0
    live_in_tenant: int = 0
    response_elsewhere: str = ""
    """Where the call's provider response was seen under another turn first, that turn."""
    response_over_limit: bool = False
    """Whether an earlier call of the call's provider response passed a limit on live calls."""


class Input(NamedTuple):
    """An event from the log, as the call's actor receives it."""

    event: Event
    position: int
    event_id: str
    at: datetime


# --- validation, the one answer from outside -----------------------------------------------


@frozen(kw_only=True)
class ValidationResult:
    """What validation said of a call: accepted (maybe needing confirmation) or why not.

    ``detail`` names paths and kinds of problems, never values.
    """

    failure: FailReason | None = None
    detail: str = ""
    needs_confirmation: bool = False

    @property
    def accepted(self) -> bool:
        return self.failure is None


@frozen(kw_only=True)
class ValidationOutcome:
    """The result of the validation a ``ValidationRequested`` asked for, fed back in."""

    result: ValidationResult


# --- decisions that are not written to the log -------------------------------------------
#
# They carry what the state needs from an input (the fragment, the parsed arguments) and are
# made again by replay, which runs ``decide`` on the same inputs.


@frozen(kw_only=True)
class Opened:
    sequence: int | None
    at: datetime


@frozen(kw_only=True)
class FragmentAccepted:
    fragment: ArgumentsAppended
    at: datetime


@frozen(kw_only=True)
class ArgumentsParsed:
    arguments: ParsedArguments
    terminal: TerminalRef
    at: datetime


@frozen(kw_only=True)
class ValidationRequested:
    """The call is eligible: its actor must validate these arguments once and feed the result."""

    key: CallKey
    tool: OfferedTool
    principal: str
    arguments: ParsedArguments
    cause: int
    at: datetime


Internal = Opened | FragmentAccepted | ArgumentsParsed | ValidationRequested
Decision = Event | Internal


def recorded(decisions: tuple[Decision, ...]) -> list[Event]:
    """The decisions that are written to the call's stream."""
    return [decision for decision in decisions if isinstance(decision, Event)]


# --- the state -------------------------------------------------------------------------------


class CallView:
    """What the decider reads of a call, and what it derives from it: the immutable
    ``CallState`` below, or the fold's mutable record of a call (``inert.actors._slot``)."""

    __slots__ = ()

    key: CallKey
    phase: Phase
    tool: str
    opened_sequence: int | None
    last_activity: datetime | None
    _buffer: Buffer
    terminal: TerminalRef | None
    arguments: ParsedArguments | None
    validating: ValidationRequested | None
    tool_digest: str
    arguments_digest: str
    needs_confirmation: bool
    confirmation_expires: datetime | None
    confirmed: bool
    claim_id: str
    reason: str

    @property
    def terminal_phase(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def fragments(self) -> int:
        return self._buffer.fragments

    @property
    def size(self) -> int:
        return self._buffer.size

    @property
    def end(self) -> int:
        """The offset the call's next positioned fragment in order takes."""
        return self._buffer.end

    @property
    def next_sequence(self) -> int:
        """The sequence number the call's next event would carry: one past all it has seen
        (its opening, its fragments, its end event)."""
        seen = [-1 if self.opened_sequence is None else self.opened_sequence]
        seen += [high for _, high in self._buffer.ranges]
        if self.terminal is not None and self.terminal.sequence is not None:
            seen.append(self.terminal.sequence)
        return max(seen) + 1

    @property
    def live(self) -> bool:
        """Opened and not terminal: counted against the limits of its turn and tenant."""
        return self.phase is not Phase.ABSENT and self.phase not in TERMINAL_PHASES

    @property
    def needs_stream(self) -> bool:
        """Still waiting for its provider stream: collecting, or ended and waiting for the
        response's end. A terminal candidate being validated has all it needs already."""
        if self.phase is Phase.COLLECTING:
            return True
        return self.phase is Phase.TERMINAL_CANDIDATE and self.validating is None

    @property
    def awaiting_confirmation(self) -> bool:
        return self.phase is Phase.VALIDATED and self.needs_confirmation and not self.confirmed

    @property
    def ready(self) -> bool:
        """Validated, and confirmed where the tool needs it: a claim may dispatch it."""
        return self.phase is Phase.VALIDATED and (self.confirmed or not self.needs_confirmation)

    def deadline(self, limits: CallLimits = DEFAULT_LIMITS) -> datetime | None:
        """When a ``DeadlineReached`` would change this call, if ever."""
        if self.phase in (Phase.COLLECTING, Phase.TERMINAL_CANDIDATE) and not self.validating:
            assert self.last_activity is not None
            return self.last_activity + limits.idle_timeout
        if self.awaiting_confirmation:
            return self.confirmation_expires
        return None


@frozen(kw_only=True)
class CallState(CallView):
    """Everything the decider knows of one call. Only ``evolve`` makes a new one."""

    key: CallKey
    phase: Phase = Phase.ABSENT
    tool: str = ""
    opened_sequence: int | None = None
    last_activity: datetime | None = None
    _buffer: Buffer = EMPTY_BUFFER
    terminal: TerminalRef | None = None
    arguments: ParsedArguments | None = None
    validating: ValidationRequested | None = None
    tool_digest: str = ""
    arguments_digest: str = ""
    needs_confirmation: bool = False
    confirmation_expires: datetime | None = None
    confirmed: bool = False
    claim_id: str = ""
    reason: str = ""


def initial_state(key: CallKey) -> CallState:
    return CallState(key=key)


# --- decide ----------------------------------------------------------------------------------


class _Judge:
    """Builds the decisions of one input: each one names the call and the input's position."""

    def __init__(self, state: CallView, received: Input | ValidationOutcome, cause: int) -> None:
        self.state = state
        self.received = received
        self.cause = cause

    def cancel(self, reason: CancelReason) -> tuple[Decision, ...]:
        fragments, size = self._received()
        return (
            CallCancelled(
                key=self.state.key, cause=self.cause, reason=reason, fragments=fragments, size=size
            ),
        )

    def fail(self, reason: FailReason, detail: str = "") -> tuple[Decision, ...]:
        fragments, size = self._received()
        return (
            CallFailed(
                key=self.state.key,
                cause=self.cause,
                reason=reason,
                detail=detail,
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

    def reject(self, reason: RejectReason, detail: str = "") -> tuple[Decision, ...]:
        assert isinstance(self.received, Input)
        return (
            EventRejected(
                key=self.state.key,
                cause=self.cause,
                rejected_event_id=self.received.event_id,
                rejected_type=self.received.event.TAG,
                reason=reason,
                detail=detail,
            ),
        )


Handler = Callable[[_Judge, CallContext], tuple[Decision, ...]]
NOTHING: tuple[Decision, ...] = ()


def _event(judge: _Judge) -> Event:
    assert isinstance(judge.received, Input)
    return judge.received.event


def _at(judge: _Judge) -> datetime:
    assert isinstance(judge.received, Input)
    return judge.received.at


def _unwanted(context: CallContext) -> CancelReason | None:
    turn = context.turn
    if turn is not None and turn.status is TurnStatus.CANCELLED:
        return CancelReason.TURN_CANCELLED
    if turn is not None and turn.status is TurnStatus.SUPERSEDED:
        return CancelReason.SUPERSEDED
    return context.blocked


def _stale(judge: _Judge, context: CallContext) -> tuple[Decision, ...] | None:
    """The rejection of an event addressed to a call of a turn that is unknown or over."""
    if context.turn is None:
        return judge.reject(RejectReason.UNKNOWN_TURN)
    if context.turn.status is not TurnStatus.ACTIVE:
        return judge.reject(RejectReason.STALE_TURN, f"the turn is {context.turn.status.value}")
    return None


# absent


def _open(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
    stale = _stale(judge, context)
    if stale is not None:
        return stale
    event = _event(judge)
    assert isinstance(event, CallOpened)
    assert context.turn is not None
    opened: tuple[Decision, ...] = (
        CallCollecting(key=judge.state.key, cause=judge.cause, tool=event.tool),
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
    if event.tool not in context.turn.tools:
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


def _before_open(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
    stale = _stale(judge, context)
    if stale is not None:
        return stale
    return judge.fail(
        FailReason.PROTOCOL_VIOLATION,
        f"{_event(judge).TAG} arrived before the call was opened",
    )


def _unknown_call(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
    stale = _stale(judge, context)
    if stale is not None:
        return stale
    return judge.reject(RejectReason.UNKNOWN_CALL, "the call was never opened")


def _ignore(_: _Judge, __: CallContext) -> tuple[Decision, ...]:
    return NOTHING


# open calls (collecting, terminal candidate, validated)


def _wanted(handler: Handler, *, answer: bool = False) -> Handler:
    """Run ``handler`` only while the call is wanted; otherwise cancel it (rule 6).

    ``answer``: the input is a request whose sender waits for a reply, so it is also rejected.
    """

    def checked(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
        reason = _unwanted(context)
        if reason is None:
            return handler(judge, context)
        decisions = judge.cancel(reason)
        if answer:
            decisions += judge.reject(RejectReason.NOT_READY, f"the call is cancelled: {reason}")
        return decisions

    return checked


def _reopen(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, CallOpened)
    if event.tool == judge.state.tool:
        return judge.reject(RejectReason.DUPLICATE, "the call is open already")
    return judge.fail(
        FailReason.IDENTITY_CONFLICT,
        f"opened again as {event.tool!r}, it was {judge.state.tool!r}",
    )


def accepts_fragment(state: CallView, event: ArgumentsAppended, limits: CallLimits) -> bool:
    """Whether a wanted, collecting call takes this fragment as new data (rule 3): the common
    case, which the fold checks before it asks ``decide``."""
    buffer = state._buffer
    opened = state.opened_sequence
    first = event.first_sequence
    return (
        buffer.fit(event) is Fit.NEW
        and (opened is None or first is None or first > opened)
        and buffer.needed(event) <= limits.max_bytes
        and buffer.fragments + event.fragments <= limits.max_fragments
    )


def _fragment(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
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


def _late_fragment(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ArgumentsAppended)
    if judge.state._buffer.covers(event):
        return judge.reject(RejectReason.DUPLICATE, _DUPLICATE[event.offset is None])
    return judge.fail(FailReason.PROTOCOL_VIOLATION, "fragment after the call's end event")


def _end(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
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
    parsed = parse_arguments(data, context.limits.arguments)
    if isinstance(parsed, RejectedArguments):
        reason = (
            FailReason.TOO_LARGE
            if parsed.problem is ArgumentProblem.TOO_LARGE
            else FailReason.MALFORMED_ARGUMENTS
        )
        return judge.fail(reason, parsed.describe())
    return (
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


def _end_again(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, CallEnded)
    if event.terminal == judge.state.terminal:
        return judge.reject(RejectReason.DUPLICATE, "the same end event arrived already")
    return judge.fail(FailReason.PROTOCOL_VIOLATION, "a second, different end event")


def _response_ended_early(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ResponseEnded)
    if event.reason is ResponseEndReason.COMPLETED:
        return judge.fail(
            FailReason.PROTOCOL_VIOLATION, "the response ended before the call's end event"
        )
    return _response_failed(judge, event)


def _response_ended(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ResponseEnded)
    if event.reason is not ResponseEndReason.COMPLETED:
        return _response_failed(judge, event)
    state = judge.state
    assert context.turn is not None
    assert state.arguments is not None
    return (
        ValidationRequested(
            key=state.key,
            tool=context.turn.tools[state.tool],
            principal=context.turn.principal,
            arguments=state.arguments,
            cause=judge.cause,
            at=_at(judge),
        ),
    )


def _response_failed(judge: _Judge, event: ResponseEnded) -> tuple[Decision, ...]:
    detail = f"the response ended: {event.reason.value}"
    if event.detail:
        detail = f"{detail} ({event.detail})"
    if event.reason is ResponseEndReason.PROTOCOL_VIOLATION:
        return judge.fail(FailReason.PROTOCOL_VIOLATION, detail)
    return judge.fail(FailReason.RESPONSE_FAILED, detail)


def _server_tool(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
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


def _server_tool_on_open_call(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
    return judge.fail(
        FailReason.IDENTITY_CONFLICT, "a call opened here was reported as the provider's own tool"
    )


def _stream_lost(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, StreamLost)
    return NOTHING if event.resumable else judge.cancel(CancelReason.CONNECTION_LOST)


def _validation_outcome(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
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
        validated += (
            CallAwaitingConfirmation(
                key=key,
                cause=judge.cause,
                arguments_digest=request.arguments.digest,
                expires_at=request.at + context.limits.confirmation_lifetime,
            ),
        )
    return validated


def _confirm(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
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
    return (
        CallConfirmed(
            key=state.key,
            cause=judge.cause,
            principal=event.principal,
            confirmation_event_id=judge.received.event_id,
        ),
    )


def _not_ready(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
    return judge.reject(RejectReason.NOT_READY, f"the call is {judge.state.phase.value}")


def _deny(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
    event = _event(judge)
    assert isinstance(event, ConfirmationDenied)
    assert context.turn is not None
    if event.principal != context.turn.principal:
        return judge.reject(RejectReason.WRONG_PRINCIPAL, "not the principal of the turn")
    return judge.cancel(CancelReason.CONFIRMATION_DENIED)


def _claim(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
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
    if state.needs_confirmation and (
        state.arguments is None
        or arguments_digest(state.arguments.canonical) != state.arguments_digest
    ):
        # The confirmation bound a digest; what would run is recomputed from the validated
        # arguments now, so that nothing but the arguments confirmed can be dispatched.
        return judge.reject(
            RejectReason.MISMATCHED_CONFIRMATION,
            "the arguments to run are not the ones the confirmation named",
        )
    return (
        CallDispatched(
            key=state.key, cause=judge.cause, claim_id=event.claim_id, executor=event.executor
        ),
    )


def _deadline(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
    state = judge.state
    due = state.deadline(context.limits)
    if due is None or _at(judge) < due:
        return judge.reject(RejectReason.NOT_READY, "no deadline of the call is due")
    if state.awaiting_confirmation:
        return judge.cancel(CancelReason.CONFIRMATION_EXPIRED)
    return judge.cancel(CancelReason.IDLE_TIMEOUT)


def _changes_wish(judge: _Judge, context: CallContext) -> tuple[Decision, ...]:
    """A turn, tenant or operator event that concerns the call: cancel it if it is unwanted."""
    reason = _unwanted(context)
    return NOTHING if reason is None else judge.cancel(reason)


# terminal calls


def _terminal(judge: _Judge, _: CallContext) -> tuple[Decision, ...]:
    return judge.reject(RejectReason.CALL_TERMINAL, f"the call is {judge.state.phase.value}")


# --- the table -------------------------------------------------------------------------------

A, C, T, V = Phase.ABSENT, Phase.COLLECTING, Phase.TERMINAL_CANDIDATE, Phase.VALIDATED
ENDED = tuple(TERMINAL_PHASES)
OPEN = (C, T, V)

_SCOPE_EVENTS: tuple[type[Event], ...] = (
    TurnStarted,
    TurnCancelled,
    TurnSuperseded,
    ResponseQuarantined,
    ToolDisabled,
    TenantStopped,
)

INPUT_TYPES: tuple[type, ...] = (
    CallOpened,
    ServerToolCalled,
    ArgumentsAppended,
    CallEnded,
    ResponseEnded,
    StreamLost,
    StreamResumed,
    *_SCOPE_EVENTS,
    ConfirmationGiven,
    ConfirmationDenied,
    ClaimRequested,
    DeadlineReached,
    ValidationOutcome,
)
"""Every kind of input a call's actor may be handed."""


def _rows(
    input_type: type, handlers: dict[tuple[Phase, ...], Handler]
) -> dict[tuple[Phase, type], Handler]:
    return {
        (phase, input_type): handler for phases, handler in handlers.items() for phase in phases
    }


TABLE: dict[tuple[Phase, type], Handler] = {
    **_rows(
        CallOpened,
        {(A,): _open, OPEN: _wanted(_reopen), ENDED: _terminal},
    ),
    **_rows(
        ServerToolCalled,
        {(A,): _server_tool, OPEN: _wanted(_server_tool_on_open_call), ENDED: _terminal},
    ),
    **_rows(
        ArgumentsAppended,
        {
            (A,): _before_open,
            (C,): _wanted(_fragment),
            (T, V): _wanted(_late_fragment),
            ENDED: _terminal,
        },
    ),
    **_rows(
        CallEnded,
        {(A,): _before_open, (C,): _wanted(_end), (T, V): _wanted(_end_again), ENDED: _terminal},
    ),
    **_rows(
        ResponseEnded,
        {
            (C,): _wanted(_response_ended_early),
            (T,): _wanted(_response_ended),
            (A, V, *ENDED): _ignore,
        },
    ),
    **_rows(StreamLost, {(C, T): _wanted(_stream_lost), (A, V, *ENDED): _ignore}),
    **_rows(StreamResumed, {OPEN: _wanted(_ignore), (A, *ENDED): _ignore}),
    **{
        pair: handler
        for scope_event in _SCOPE_EVENTS
        for pair, handler in _rows(scope_event, {OPEN: _changes_wish, (A, *ENDED): _ignore}).items()
    },
    **_rows(
        ConfirmationGiven,
        {
            (A,): _unknown_call,
            (C, T): _wanted(_not_ready, answer=True),
            (V,): _wanted(_confirm, answer=True),
            ENDED: _terminal,
        },
    ),
    **_rows(ConfirmationDenied, {(A,): _unknown_call, OPEN: _wanted(_deny), ENDED: _terminal}),
    **_rows(
        ClaimRequested,
        {
            (A,): _unknown_call,
            (C, T): _wanted(_not_ready, answer=True),
            (V,): _wanted(_claim, answer=True),
            ENDED: _terminal,
        },
    ),
    **_rows(DeadlineReached, {(A,): _unknown_call, OPEN: _wanted(_deadline), ENDED: _terminal}),
    **_rows(ValidationOutcome, {(T,): _validation_outcome}),
}


def decide(
    state: CallView, received: Input | ValidationOutcome, context: CallContext
) -> tuple[Decision, ...]:
    """The decisions of one input: what to record, and what the state needs to remember."""
    input_type = type(received.event) if isinstance(received, Input) else ValidationOutcome
    handler = TABLE.get((state.phase, input_type))
    if handler is None or (state.validating is not None) != (input_type is ValidationOutcome):
        name = getattr(input_type, "TAG", input_type.__name__)
        raise IllegalTransition(state.phase, name)
    if isinstance(received, Input):
        cause = received.position
    else:
        assert state.validating is not None
        cause = state.validating.cause
    return handler(_Judge(state, received, cause), context)


# --- evolve ----------------------------------------------------------------------------------


_STATE_FIELDS = tuple(attribute.name for attribute in attrs.fields(CallState))


def _replace(state: CallState, **changes: object) -> CallState:
    """``attrs.evolve`` without its introspection: one new state per fragment is the hot path
    of the fold. Field names are the attribute names (``_buffer``, not ``buffer``)."""
    new = object.__new__(CallState)
    for name in _STATE_FIELDS:
        object.__setattr__(new, name, changes[name] if name in changes else getattr(state, name))
    return new


def _ended(state: CallView, phase: Phase, reason: str) -> dict[str, object]:
    # A terminal call keeps its record of sequences (to know a replayed fragment) and drops
    # every byte of its arguments.
    return {
        "phase": phase,
        "reason": reason,
        "_buffer": state._buffer.without_data(),
        "arguments": None,
        "validating": None,
    }


def with_arguments(state: CallState, arguments: ParsedArguments) -> CallState:
    """A validated call whose assembly is known only by its recorded decisions (its fragments
    were redacted) given back the validated arguments those decisions recorded: from there on
    it decides as if it had assembled them."""
    check_arguments(state, arguments)
    return _replace(state, arguments=arguments)


def check_arguments(state: CallView, arguments: ParsedArguments) -> None:
    """Refuse arguments other than the ones a call was validated with."""
    if state.phase is not Phase.VALIDATED or arguments.digest != state.arguments_digest:
        raise IllegalTransition(state.phase, "arguments other than the ones validated")


def changes(state: CallView, decision: Decision) -> dict[str, object]:
    """What one decision changes in a call's state, field by field (nothing for a rejection):
    ``evolve`` makes a new state of them, the fold's record of a call takes them in place."""
    match decision:
        case FragmentAccepted(fragment=fragment, at=at):
            return {"_buffer": state._buffer.add(fragment), "last_activity": at}
        case Opened(sequence=sequence, at=at):
            return {"opened_sequence": sequence, "last_activity": at}
        case CallCollecting(tool=tool):
            return {"phase": Phase.COLLECTING, "tool": tool}
        case ArgumentsParsed(arguments=arguments, terminal=terminal, at=at):
            return {"arguments": arguments, "terminal": terminal, "last_activity": at}
        case CallTerminalCandidate(arguments_digest=digest):
            return {"phase": Phase.TERMINAL_CANDIDATE, "arguments_digest": digest}
        case ValidationRequested():
            return {"validating": decision}
        case CallValidated():
            return {
                "phase": Phase.VALIDATED,
                "tool_digest": decision.tool_digest,
                "arguments_digest": decision.arguments_digest,
                "needs_confirmation": decision.needs_confirmation,
                "validating": None,
                "_buffer": state._buffer.without_data(),
            }
        case CallAwaitingConfirmation(expires_at=expires_at):
            return {"confirmation_expires": expires_at}
        case CallConfirmed():
            return {"confirmed": True}
        case CallDispatched(claim_id=claim_id):
            return {**_ended(state, Phase.DISPATCHED, ""), "claim_id": claim_id}
        case CallCancelled(reason=reason):
            return _ended(state, Phase.CANCELLED, reason.value)
        case CallFailed(reason=reason):
            return _ended(state, Phase.FAILED, reason.value)
        case EventRejected():
            return {}
    raise IllegalTransition(state.phase, f"decision {type(decision).__name__}")


def disallowed_as_recorded(
    state: CallView, decision: CallValidated | CallDispatched, turn: TurnView | None
) -> str | None:
    """Why a validation or a dispatch taken as recorded (its inputs are gone, or it answers
    one held back) cannot follow the call's recorded history, or None where it can: a
    validation follows the terminal candidate and names the tool the call opened with, as its
    turn offered it, and the arguments the candidate named; a dispatch needs the validation
    and, where the call needs one, its confirmation. Decisions made again are compared whole
    instead."""
    if isinstance(decision, CallDispatched):
        if state.phase is not Phase.VALIDATED:
            return f"the call is {state.phase.value}, not validated"
        if state.needs_confirmation and not state.confirmed:
            return "the call needs a confirmation and has none"
        return None
    if state.phase is not Phase.TERMINAL_CANDIDATE:
        return f"the call is {state.phase.value}, not a terminal candidate"
    if decision.tool != state.tool:
        return f"it names tool {decision.tool!r}, the call opened {state.tool!r}"
    offered = None if turn is None else turn.tools.get(decision.tool)
    if offered is not None and offered.digest != decision.tool_digest:
        return f"its tool digest is not the one the turn offered ({offered.digest})"
    if decision.arguments_digest != state.arguments_digest:
        return "its arguments digest is not the one the terminal candidate named"
    return None


def refused_whatever_comes(state: CallView | None, response_closed: bool) -> DiscardReason | None:
    """Why the decider can only refuse every ingress event addressed to the call now, or None:
    the call is terminal (rule 10), or it was never opened in a response closed to new calls
    (rule 2: every opening fails ``response_over_limit``, and what comes before an opening
    fails or is rejected)."""
    if state is not None and state.phase in TERMINAL_PHASES:
        return DiscardReason.CALL_ENDED
    if response_closed and (state is None or state.phase is Phase.ABSENT):
        return DiscardReason.RESPONSE_OVER_LIMIT
    return None


def evolve(state: CallState, decision: Decision) -> CallState:
    """The state after one decision."""
    changed = changes(state, decision)
    return _replace(state, **changed) if changed else state


def step(
    state: CallState, received: Input | ValidationOutcome, context: CallContext
) -> tuple[CallState, tuple[Decision, ...]]:
    """Decide on one input and apply the decisions: the new state and what was decided."""
    decisions = decide(state, received, context)
    for decision in decisions:
        state = evolve(state, decision)
    return state, decisions
