"""A call's state and what changes it: the phases, the inputs and context the decider judges,
the decisions it makes, and how a decision changes a call (``changes``, ``evolve``).

The rules these follow are stated in ``inert.actors._decider``; the handlers that apply them
are in ``inert.actors._handlers``.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import NamedTuple

import attrs
from attrs import field, frozen, validators

from ..events import (
    RULES_VERSION,
    TERMINAL_PHASES,
    ArgumentsAppended,
    CallAwaitingConfirmation,
    CallCancelled,
    CallCollecting,
    CallConfirmed,
    CallDispatched,
    CallFailed,
    CallKey,
    CallReady,
    CallStopRequested,
    CallTerminalCandidate,
    CallValidated,
    CancelReason,
    DiscardReason,
    EditRefused,
    Event,
    EventRejected,
    FailReason,
    InertError,
    OfferedTool,
    Phase,
    TerminalRef,
)
from ._arguments import (
    ArgumentLimits,
    ParsedArguments,
)
from ._buffer import EMPTY_BUFFER, Buffer


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
    ready_lifetime: timedelta = timedelta(hours=1)
    """How long a ready call may wait for a claim (rules 8 on): then it is cancelled
    ``ready_expired``, and its arguments leave the log."""
    max_live_per_turn: int = field(default=64, validator=validators.ge(1))
    max_live_per_tenant: int = field(default=4096, validator=validators.ge(1))

    @property
    def max_bytes(self) -> int:
        return self.arguments.max_bytes


DEFAULT_LIMITS = CallLimits()


class ResponseEnd(NamedTuple):
    """A ``ResponseEnded`` of a call's provider response, the first after the call's own end
    event: its log position, and whether the response ended successfully."""

    position: int
    completed: bool


DIGEST_KEY = "arguments digest"
"""The purpose the log's key for these digests is derived for (``Log.key``)."""

KEYED_DIGESTS = 10
"""The first rules under which digests of arguments (and of a tool name the turn did not offer)
are keyed by the log (``CallContext.digest_key``): shown to operators and kept after retention,
they give nothing back to one who tries candidates."""


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
    running: bool = False
    """Whether the call is dispatched and its outcome is not recorded yet: an executor runs it."""
    duplicate_of: CallKey | None = None
    """For a claim of a call whose tool runs one action per intent (rule 12): the call of the
    same intent dispatched already in the tool's scope, if any."""
    response_end: ResponseEnd | None = None
    """The first end of the call's provider response after the call's own end event, where it
    came before the input (or is the input)."""
    digest_key: bytes = b""
    """The log's key that digests of the call's arguments (and of a tool name the turn did not
    offer) are keyed by, where its turn's rules key them (rules 10 on); empty otherwise."""


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

    ``detail`` names paths and kinds of problems, never values nor the names the arguments
    hold (see [What a detail may say][what-a-detail-may-say]); a call's turn of rules 9 on
    records at most 200 characters of it.
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
class Edit:
    """A confirmation that edits the call's arguments, waiting for their validation."""

    principal: str
    confirmation_event_id: str
    expires_at: datetime | None
    """The expiry of the confirmation, where the turn's rules record it (rules 4 on)."""
    size: int
    """The size of the edit as the principal gave it."""


@frozen(kw_only=True)
class ValidationRequested:
    """The call is eligible: its actor must validate these arguments once and feed the result.

    ``edit`` is set where the arguments are a principal's edit at confirmation (rule 7)."""

    key: CallKey
    tool: OfferedTool
    principal: str
    arguments: ParsedArguments
    cause: int
    at: datetime
    edit: Edit | None = None


@frozen(kw_only=True)
class ArgumentsEdited:
    """The principal's edit, validated: the arguments the call holds from now on."""

    arguments: ParsedArguments


Internal = Opened | FragmentAccepted | ArgumentsParsed | ArgumentsEdited | ValidationRequested

Validator = Callable[[ValidationRequested], Awaitable[ValidationResult]]
"""What validates a call once: the declaration's schema, and any further check (business
rules, permission policy) of a call whose declaration is known."""
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
    stop_requested: str
    """Why its executor was asked to stop a dispatched call, or empty."""
    ready_expires: datetime | None
    """Until when a ready call may be claimed, where its turn's rules bound it (rules 8 on)."""

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

    def deadline(
        self, limits: CallLimits = DEFAULT_LIMITS, *, awaiting_response: bool = False
    ) -> datetime | None:
        """When a ``DeadlineReached`` would change this call, if ever; ``awaiting_response``:
        validated before its response ended (rules 7 on), it still waits for that end."""
        if self.phase in (Phase.COLLECTING, Phase.TERMINAL_CANDIDATE) and not self.validating:
            assert self.last_activity is not None
            return self.last_activity + limits.idle_timeout
        if self.phase is Phase.VALIDATED and self.ready_expires is not None:
            # Ready (rules 8 on): nothing but its lifetime is left to wait for.
            return self.ready_expires
        idle = None
        if awaiting_response:
            assert self.last_activity is not None
            idle = self.last_activity + limits.idle_timeout
        if self.awaiting_confirmation:
            expires = self.confirmation_expires
            if idle is None or (expires is not None and expires < idle):
                return expires
        return idle


def awaits_response(state: CallView, turn: TurnView | None, end: ResponseEnd | None) -> bool:
    """Whether the call is validated (or being validated) at its own end, under rules 7 on,
    and the first end of its response after that end was not successful or has not come: it
    cannot be claimed, and still needs its stream (rule 6's connection loss, rule 9's idle
    deadline)."""
    return (
        turn is not None
        and turn.rules >= 7
        and state.phase in (Phase.TERMINAL_CANDIDATE, Phase.VALIDATED)
        and (end is None or not end.completed)
    )


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
    stop_requested: str = ""
    ready_expires: datetime | None = None


def initial_state(key: CallKey) -> CallState:
    return CallState(key=key)


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
        case ArgumentsEdited(arguments=arguments):
            return {"arguments": arguments}
        case EditRefused():
            return {"validating": None}
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
        case CallConfirmed(expires_at=expires_at):
            # From here on the expiry of the confirmation given (None: the turn's rules let it
            # be claimed however late), no longer that of the wait for one.
            return {"confirmed": True, "confirmation_expires": expires_at}
        case CallReady(expires_at=expires_at):
            return {"ready_expires": expires_at}
        case CallDispatched(claim_id=claim_id):
            return {**_ended(state, Phase.DISPATCHED, ""), "claim_id": claim_id}
        case CallCancelled(reason=reason):
            return _ended(state, Phase.CANCELLED, reason.value)
        case CallFailed(reason=reason):
            return _ended(state, Phase.FAILED, reason.value)
        case CallStopRequested(reason=reason):
            return {"stop_requested": reason.value}
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
    if decision.edited_by:
        # A principal's edit at confirmation: the call was waiting for that confirmation.
        if not state.awaiting_confirmation:
            return "an edit of arguments that were not waiting for confirmation"
        if decision.edited_from != state.arguments_digest:
            return "an edit of other arguments than the call's"
        if decision.tool != state.tool or decision.tool_digest != state.tool_digest:
            return "an edit naming another tool"
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
