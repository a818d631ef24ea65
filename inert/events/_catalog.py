"""Every event inert writes or reads, by family.

Ingress events come from adapters and the agent server, user events from the person behind the
turn, operator events from the operators, decisions only from a call's own actor, notes and outcomes
from the executor through the runtime. Argument bytes appear only in ``ArgumentsAppended``,
``CallEnded.final_arguments`` and ``CallValidated.arguments``: the payloads that retention
redacts. Every other field is an identity, a count, a size, a digest, a reason or a time.
"""

from __future__ import annotations

import enum
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from attrs import field, frozen, validators

from ._base import Event, event_type
from ._identity import CallKey, ResponseRef, TurnRef

_non_negative = validators.ge(0)
_positive = validators.ge(1)


class ResponseEndReason(enum.StrEnum):
    """How a provider response ended. Only ``COMPLETED`` lets its calls become dispatchable."""

    COMPLETED = "completed"
    LENGTH = "length"
    CONTENT_FILTER = "content_filter"
    REFUSAL = "refusal"
    CONTEXT_WINDOW_EXCEEDED = "context_window_exceeded"
    PAUSED = "paused"
    INCOMPLETE = "incomplete"
    CANCELLED = "cancelled"
    ERROR = "error"
    PROTOCOL_VIOLATION = "protocol_violation"
    """The adapter saw the provider break its own protocol (an identity that changed, a gap)."""


class CancelReason(enum.StrEnum):
    """Why a call ended without running, at someone's wish or by time."""

    TURN_CANCELLED = "turn_cancelled"
    SUPERSEDED = "superseded"
    CONNECTION_LOST = "connection_lost"
    IDLE_TIMEOUT = "idle_timeout"
    CONFIRMATION_DENIED = "confirmation_denied"
    CONFIRMATION_EXPIRED = "confirmation_expired"
    RESPONSE_QUARANTINED = "response_quarantined"
    TOOL_DISABLED = "tool_disabled"
    TENANT_STOPPED = "tenant_stopped"
    SERVER_EXECUTED = "server_executed"
    DUPLICATE_OF = "duplicate_of"
    """A call identical to one dispatched already (same tool, same canonical arguments) in the
    scope its tool asks for (``IntentScope``): the cancellation names the earlier call."""
    READY_EXPIRED = "ready_expired"
    """A ready call nobody claimed within its ready lifetime (``CallLimits.ready_lifetime``)."""


class FailReason(enum.StrEnum):
    """Why a call ended without running because something about it was wrong."""

    MALFORMED_ARGUMENTS = "malformed_arguments"
    TOO_LARGE = "too_large"
    TOO_MANY_FRAGMENTS = "too_many_fragments"
    SEQUENCE_GAP = "sequence_gap"
    CONFLICTING_FRAGMENT = "conflicting_fragment"
    """A fragment's bytes differ from the bytes stored for the same range of the call."""
    FINAL_ARGUMENTS_MISMATCH = "final_arguments_mismatch"
    UNKNOWN_TOOL = "unknown_tool"
    SCHEMA_INVALID = "schema_invalid"
    BUSINESS_INVALID = "business_invalid"
    PERMISSION_DENIED = "permission_denied"
    VALIDATION_TIMEOUT = "validation_timeout"
    VALIDATOR_ERROR = "validator_error"
    RESPONSE_FAILED = "response_failed"
    IDENTITY_CONFLICT = "identity_conflict"
    LIMIT_EXCEEDED = "limit_exceeded"
    PROTOCOL_VIOLATION = "protocol_violation"
    RESPONSE_OF_ANOTHER_TURN = "response_of_another_turn"
    """The call's provider response was seen under another turn first: a response replayed
    into a new turn never acts again."""
    RESPONSE_OVER_LIMIT = "response_over_limit"
    """An earlier call of the same provider response passed a limit on live calls: the response
    opens no call any more."""


class RejectReason(enum.StrEnum):
    """Why an event addressed to a call was refused instead of applied."""

    CALL_TERMINAL = "call_terminal"
    STALE_TURN = "stale_turn"
    DUPLICATE = "duplicate"
    UNKNOWN_CALL = "unknown_call"
    WRONG_PRINCIPAL = "wrong_principal"
    NOT_READY = "not_ready"
    MISMATCHED_CONFIRMATION = "mismatched_confirmation"
    UNKNOWN_TURN = "unknown_turn"
    EXPIRED_CONFIRMATION = "expired_confirmation"
    PROTOCOL_VIOLATION = "protocol_violation"


@frozen(kw_only=True)
class TerminalRef:
    """The identity of a provider's terminal event, so that a replayed one is known as the same.

    Either the provider's sequence number within the response, or a digest of the raw event
    where the protocol has no sequence.
    """

    sequence: int | None = field(default=None, validator=validators.optional(_non_negative))
    digest: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.sequence is None and not self.digest:
            raise ValueError("a terminal reference needs a provider sequence or a digest")


class IntentScope(enum.StrEnum):
    """Where a tool runs one action per intent: a call identical to one dispatched already
    (same tool, same canonical arguments) in the same turn, or in the same conversation, is
    cancelled ``duplicate_of`` instead of running again (rules 6 on)."""

    TURN = "turn"
    CONVERSATION = "conversation"


@frozen(kw_only=True)
class OfferedTool:
    """A tool declaration offered to the model for a turn, bound by name and digest, with what
    of the declaration the decider reads: whether it runs one action per intent, and where."""

    name: str = field(validator=validators.min_len(1))
    digest: str
    one_action_per_intent: IntentScope | None = None


# --- ingress -------------------------------------------------------------------------------


RULES_VERSION = 10
"""The version of the decider's rules a turn started now is judged by. 2: a provider response
belongs to the turn it was first seen under (a call of it under another turn fails
``response_of_another_turn``). 3: a response one of whose calls passed a limit on live calls
opens no call any more (each later one fails ``response_over_limit``). 4: a confirmation's
validity bounds the ready window (a call confirmed and not claimed before its confirmation
expires is cancelled ``confirmation_expired`` when it is claimed). 5: a call that is running
(dispatched, its outcome not recorded) when its turn is cancelled or superseded, its response
quarantined, its tool disabled or its tenant stopped gets one stop request
(``CallStopRequested``) that its executor is told of. 6: a tool may ask for one action per
intent (``OfferedTool.one_action_per_intent``): a claim of a call identical to one dispatched
already in its scope cancels it ``duplicate_of``. 7: a terminal candidate is validated at
its own end event, without waiting for its response's end; it can be claimed only once the
response ended successfully, and fails if the response ends any other way. 8: a ready call
has a lifetime (``CallLimits.ready_lifetime``, recorded in its ``CallReady``): a claim at or
after its end no longer dispatches it, and a deadline then cancels it ``ready_expired``. 9: no
detail holds text of the arguments: refused arguments (and a refused edit) name a place by
array indexes and the positions of names, never a name; a tool the turn did not offer is named
by its length and a digest, in the call's opening decision and its failure, never by its text;
every detail of a decision is at most 200 characters. 10: digests of the arguments (and of a
tool name the turn did not offer) are keyed by the log (``hmac-sha256:``), so that one who sees
them cannot tell which arguments they name by trying some. A turn is judged by the rules it was
started under, so that a log written before a rule existed replays to the decisions it holds."""


def _judged_by_the_first_rules(fields: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 turns were started before the rules had versions: they are judged by the first."""
    return {**fields, "rules": 1}


def _offered_without_intents(fields: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 turns were started before a tool could ask for one action per intent."""
    tools = [{**tool, "one_action_per_intent": None} for tool in fields.get("tools", ())]
    return {**fields, "tools": tools}


@event_type(
    "ingress.turn_started",
    schema_version=3,
    upcasters={1: _judged_by_the_first_rules, 2: _offered_without_intents},
)
@frozen(kw_only=True)
class TurnStarted(Event):
    """The agent server started a turn for an authenticated principal with these tools, to be
    judged by these rules (``RULES_VERSION``)."""

    turn: TurnRef
    principal: str = field(validator=validators.min_len(1))
    tools: tuple[OfferedTool, ...] = ()
    rules: int = field(default=RULES_VERSION, validator=[_positive, validators.le(RULES_VERSION)])


@event_type("ingress.call_opened")
@frozen(kw_only=True)
class CallOpened(Event):
    """A provider stream opened a tool call."""

    key: CallKey
    tool: str
    sequence: int | None = field(default=None, validator=validators.optional(_non_negative))


def _unpositioned(fields: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 fragments had no offset: they are placed by their sequences, as they were."""
    return {**fields, "offset": None}


@event_type("ingress.arguments_appended", schema_version=2, upcasters={1: _unpositioned})
@frozen(kw_only=True)
class ArgumentsAppended(Event):
    """Argument bytes of an open call: transport data, never an instruction.

    A fragment is the call's bytes ``[offset, offset + len(data))``. The offset identifies the
    bytes whatever the chunking: a range inside what is stored is a duplicate delivery, one that
    straddles the end must agree with the stored bytes it overlaps, one that starts past the end
    waits for the bytes before it (see the decider's rules). Adapters count each call's bytes
    as they come off the wire, so that the same stream fed twice gives the same ranges.
    ``offset=None`` (every fragment written by schema 1) places the fragment by its sequences,
    or after the fragments before it where it has none.

    Sequences number the events of one call consecutively: ``CallOpened.sequence``, then each
    fragment, then ``CallEnded.terminal.sequence``. Where the provider numbers a call's events
    that way its numbers serve; otherwise the adapter counts the call's fragments as they come
    off the wire, or gives no sequence at all. A number missing when the call ends is a gap.
    Consecutive fragments may be coalesced into one event (the runtime does so between two
    commits of the log); it keeps the first and last sequence and the number of fragments
    joined.
    """

    SENSITIVE = ("data",)

    key: CallKey
    data: bytes
    offset: int | None = field(default=None, validator=validators.optional(_non_negative))
    first_sequence: int | None = field(default=None, validator=validators.optional(_non_negative))
    last_sequence: int | None = field(default=None, validator=validators.optional(_non_negative))
    fragments: int = field(default=1, validator=_positive)

    def __attrs_post_init__(self) -> None:
        if (self.first_sequence is None) != (self.last_sequence is None):
            raise ValueError("first_sequence and last_sequence are given together or not at all")
        if (
            self.first_sequence is not None
            and self.last_sequence is not None
            and self.last_sequence < self.first_sequence
        ):
            raise ValueError(
                f"last_sequence {self.last_sequence} is before first_sequence {self.first_sequence}"
            )


class DiscardReason(enum.StrEnum):
    """Why the runtime counted ingress events instead of storing them."""

    CALL_ENDED = "call_ended"
    """The call had ended: the decider could only reject what came for it."""
    RESPONSE_OVER_LIMIT = "response_over_limit"
    """The call was never opened, in a response that had passed its limit on live calls: the
    decider could only fail or reject it."""


@event_type("ingress.events_discarded")
@frozen(kw_only=True)
class EventsDiscarded(Event):
    """Ingress events fed that the decider could only refuse, counted instead of stored.

    The runtime does not write such events one by one: it writes one of these per append of the
    log and ``key``, with how many calls and events it dropped, how many argument fragments they
    held (as the adapters counted them) and their bytes. For ``call_ended`` they are the events
    of the call ``key`` itself, fed after it ended; for ``response_over_limit`` they are the
    calls its response opened after ``key`` passed a limit on live calls, with their fragments
    and end events. A stream that keeps sending for an ended call, or a response that keeps
    opening calls past its limit, thus costs the log one row per commit, not one or more per
    event. Only counts: no argument byte is kept.
    """

    key: CallKey
    reason: DiscardReason
    calls: int = field(validator=_positive)
    events: int = field(validator=_positive)
    fragments: int = field(validator=_non_negative)
    size: int = field(validator=_non_negative)


@event_type("ingress.call_ended")
@frozen(kw_only=True)
class CallEnded(Event):
    """The provider's end event for one call arrived; it permits parsing, nothing more."""

    SENSITIVE = ("final_arguments",)

    key: CallKey
    terminal: TerminalRef
    final_arguments: bytes | None = None


@event_type("ingress.response_ended")
@frozen(kw_only=True)
class ResponseEnded(Event):
    """The provider response ended, successfully or not."""

    response: ResponseRef
    reason: ResponseEndReason
    terminal: TerminalRef
    detail: str = ""


@event_type("ingress.stream_lost")
@frozen(kw_only=True)
class StreamLost(Event):
    """The connection carrying a provider response went away."""

    response: ResponseRef
    resumable: bool
    last_sequence: int | None = field(default=None, validator=validators.optional(_non_negative))


@event_type("ingress.stream_resumed")
@frozen(kw_only=True)
class StreamResumed(Event):
    """A lost provider response is being fed again, after the given provider sequence."""

    response: ResponseRef
    after_sequence: int | None = field(default=None, validator=validators.optional(_non_negative))


@event_type("ingress.text_received")
@frozen(kw_only=True)
class TextReceived(Event):
    """The response carried text for the person; kept out of every call buffer."""

    response: ResponseRef
    characters: int = field(validator=_non_negative)


@event_type("ingress.server_tool_called")
@frozen(kw_only=True)
class ServerToolCalled(Event):
    """The provider ran a tool of its own (a hosted search, an MCP server) within the response.

    Recorded so that the ledger shows it; its call is cancelled as it opens (``server_executed``),
    so that nothing of it can reach an executor here, whatever tools the turn offered.
    """

    key: CallKey
    tool: str


# --- user ----------------------------------------------------------------------------------


@event_type("user.turn_cancelled")
@frozen(kw_only=True)
class TurnCancelled(Event):
    """The person (or the agent server for them) cancelled the turn."""

    turn: TurnRef
    principal: str
    reason: str = ""


@event_type("user.turn_superseded")
@frozen(kw_only=True)
class TurnSuperseded(Event):
    """A new turn of the same conversation replaced this one."""

    turn: TurnRef
    by: TurnRef


def _confirmed_as_shown(fields: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 confirmations could not change the arguments they confirmed."""
    return {"arguments": None, **fields}


@event_type("user.confirmation_given", schema_version=2, upcasters={1: _confirmed_as_shown})
@frozen(kw_only=True)
class ConfirmationGiven(Event):
    """The principal confirmed one call, bound to the exact tool and arguments, once.

    ``arguments_digest`` names the arguments the principal was shown. ``arguments``, where
    given, are the principal's edit of them (JSON text): parsed and validated like the model's,
    once, they replace them if they pass, and the confirmation is refused otherwise.
    """

    SENSITIVE = ("arguments",)

    key: CallKey
    principal: str
    tool_digest: str
    arguments_digest: str
    nonce: str
    expires_at: datetime
    arguments: bytes | None = None


@event_type("user.confirmation_denied")
@frozen(kw_only=True)
class ConfirmationDenied(Event):
    """The principal refused one call."""

    key: CallKey
    principal: str
    reason: str = ""


# --- operator ------------------------------------------------------------------------------
#
# One family: every control says who gave it and why, for every tenant or for one. A new
# control is a class of it here and its meaning in ``inert.actors._scope``; the audit, the spans
# and the decider's table find it by its family.


@frozen(kw_only=True)
class OperatorControl(Event):
    """An operator's control of what may run. ``STOPS``: it stops calls (a quarantine, a
    disabled tool, a stopped tenant) rather than letting new ones run again."""

    STOPS: ClassVar[bool]

    if TYPE_CHECKING:
        # Each control declares these as its own fields (the stored order of its payload).
        tenant: str | None
        operator: str
        reason: str


@event_type("operator.response_quarantined")
@frozen(kw_only=True)
class ResponseQuarantined(OperatorControl):
    """An operator quarantined a provider response: none of its calls may run."""

    STOPS = True

    response: str
    tenant: str | None
    operator: str
    reason: str


@event_type("operator.tool_disabled")
@frozen(kw_only=True)
class ToolDisabled(OperatorControl):
    """An operator disabled a tool, for every tenant or for one."""

    STOPS = True

    tool: str
    tenant: str | None
    operator: str
    reason: str


@event_type("operator.tool_enabled")
@frozen(kw_only=True)
class ToolEnabled(OperatorControl):
    """An operator enabled a disabled tool again; calls it ended stay ended."""

    STOPS = False

    tool: str
    tenant: str | None
    operator: str
    reason: str


@event_type("operator.tenant_stopped")
@frozen(kw_only=True)
class TenantStopped(OperatorControl):
    """An operator stopped every call of a tenant that has not been dispatched."""

    STOPS = True

    tenant: str
    operator: str
    reason: str


@event_type("operator.tenant_resumed")
@frozen(kw_only=True)
class TenantResumed(OperatorControl):
    """An operator let a stopped tenant start new turns again."""

    STOPS = False

    tenant: str
    operator: str
    reason: str


@event_type("operator.control_refused")
@frozen(kw_only=True)
class ControlRefused(Event):
    """A control was asked for by a principal the operator authorizer does not accept: nothing
    was stopped or let run, and the attempt is kept for the audit. ``control`` is the tag of the
    control asked for, ``target`` the response, tool or tenant it named."""

    control: str
    target: str
    tenant: str | None
    operator: str
    reason: str


# --- processes sharing one log -----------------------------------------------------------


@event_type("process.turn_leased")
@frozen(kw_only=True)
class TurnLeased(Event):
    """The named runtime process owns the turn from here on: only its actors decide for the
    turn's calls. Appended to the turn's lease stream at an expected version, so that of two
    processes taking a turn over one wins, and a former owner's decisions, written against the
    lease's version, are refused."""

    turn: TurnRef
    owner: str = field(validator=validators.min_len(1))
    previous: str | None = None


@event_type("process.heartbeat")
@frozen(kw_only=True)
class ProcessHeartbeat(Event):
    """A runtime process is alive, as of the time the log recorded this."""

    process: str = field(validator=validators.min_len(1))


@event_type("process.left")
@frozen(kw_only=True)
class ProcessLeft(Event):
    """A runtime process stopped on purpose, its actors and executors stopped first: the
    others take it for dead at once, not once its last heartbeat is older than the lease time,
    and take its partitions and turns over. A heartbeat of the same name after this is a
    process that joined again."""

    process: str = field(validator=validators.min_len(1))


@event_type("process.turn_retired")
@frozen(kw_only=True)
class TurnRetired(Event):
    """The turn has had no live call, and no dispatched call without an outcome, for the
    runtime's horizon (its ``ledger_horizon``): it is over, and what the runtime held of it and
    of its calls is forgotten. From here on, anything addressed to the turn or to one of its
    calls is judged as for a turn never started. Void (ignored) if a call of the turn is live or
    running again by the time it is folded."""

    turn: TurnRef


# --- requests to a call's actor ------------------------------------------------------------


@event_type("request.claim")
@frozen(kw_only=True)
class ClaimRequested(Event):
    """An executor asks to run a ready call; the call's actor answers in the call's stream.

    ``process`` names the runtime process the executor runs in, where several share the log:
    should that process die, the calls it claimed have an unknown outcome.
    """

    key: CallKey
    claim_id: str
    executor: str
    process: str | None = None


@event_type("request.deadline")
@frozen(kw_only=True)
class DeadlineReached(Event):
    """A timer of the runtime found one of the call's deadlines due.

    It is a request like a claim: the call's actor judges it in log order, against the time the
    log recorded it, so that a timeout is decided the same way live and on replay.
    """

    key: CallKey


# --- decisions (written only by the call's actor) ------------------------------------------
#
# Every decision names its ``cause``: the log position of the input it answers. Replay applies a
# decision right after its cause, which is where the live actor made it, even when other inputs
# reached the log between the cause and the decision.


@event_type("decision.collecting")
@frozen(kw_only=True)
class CallCollecting(Event):
    """The actor took charge of a newly opened call and is buffering its arguments."""

    key: CallKey
    cause: int = field(validator=_positive)
    tool: str


@event_type("decision.terminal_candidate")
@frozen(kw_only=True)
class CallTerminalCandidate(Event):
    """The call's own end event arrived; it waits for its response to end successfully."""

    key: CallKey
    cause: int = field(validator=_positive)
    terminal: TerminalRef
    fragments: int = field(validator=_non_negative)
    size: int = field(validator=_non_negative)
    arguments_digest: str


def _the_models_arguments(fields: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 validations were of the model's arguments: nobody could edit them."""
    return {"edited_by": "", "edited_from": "", "edited_size": None, **fields}


@event_type("decision.validated", schema_version=2, upcasters={1: _the_models_arguments})
@frozen(kw_only=True)
class CallValidated(Event):
    """The call parsed and validated once; these canonical arguments are the ones that may run.

    A call whose principal edited its arguments at confirmation is validated again, for the
    edit: ``edited_by`` names the principal, ``edited_from`` the digest of the arguments it
    replaced and ``edited_size`` the size of the edit as given.
    """

    SENSITIVE = ("arguments",)

    key: CallKey
    cause: int = field(validator=_positive)
    tool: str
    tool_digest: str
    arguments: bytes
    arguments_digest: str
    needs_confirmation: bool
    edited_by: str = ""
    edited_from: str = ""
    edited_size: int | None = field(default=None, validator=validators.optional(_non_negative))


@event_type("decision.awaiting_confirmation")
@frozen(kw_only=True)
class CallAwaitingConfirmation(Event):
    """A validated call waits for its principal to confirm it before this time."""

    key: CallKey
    cause: int = field(validator=_positive)
    arguments_digest: str
    expires_at: datetime


def _unbounded_confirmation(fields: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 confirmations were made before a confirmation bounded the ready window."""
    return {**fields, "expires_at": None}


@event_type("decision.confirmed", schema_version=2, upcasters={1: _unbounded_confirmation})
@frozen(kw_only=True)
class CallConfirmed(Event):
    """The awaited confirmation matched the call and was used up.

    ``expires_at`` is the confirmation's own expiry, past which a claim no longer dispatches
    the call (rules 4 on); ``None`` for a turn judged by earlier rules, where it does not.
    """

    key: CallKey
    cause: int = field(validator=_positive)
    principal: str
    confirmation_event_id: str
    expires_at: datetime | None = None


@event_type("decision.ready")
@frozen(kw_only=True)
class CallReady(Event):
    """The call can be claimed now (validated, confirmed where its tool needs it, its response
    ended successfully), until ``expires_at``: a claim at or after it cancels the call
    (``ready_expired``, or ``confirmation_expired`` where the confirmation's own expiry came
    first), and so does the deadline the runtime sets for it (rules 8 on)."""

    key: CallKey
    cause: int = field(validator=_positive)
    expires_at: datetime


@event_type("decision.dispatched")
@frozen(kw_only=True)
class CallDispatched(Event):
    """The call was handed to one executor claim; durable before the executor is called."""

    key: CallKey
    cause: int = field(validator=_positive)
    claim_id: str
    executor: str


def _not_a_duplicate(fields: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 cancellations were made before a call could be the duplicate of another."""
    return {**fields, "duplicate_of": None}


@event_type("decision.cancelled", schema_version=2, upcasters={1: _not_a_duplicate})
@frozen(kw_only=True)
class CallCancelled(Event):
    """The call ended without running because it was no longer wanted.

    For a call that ends while its arguments are still arriving, ``fragments`` and ``size``
    count what it had received (with the fragment that ended it, if one did), so that the record
    outlives the fragments, which retention redacts; past that, its terminal candidate holds them.
    ``duplicate_of`` names the earlier call dispatched for the same intent, where the reason is
    ``duplicate_of``, and only there.
    """

    key: CallKey
    cause: int = field(validator=_positive)
    reason: CancelReason
    fragments: int | None = field(default=None, validator=validators.optional(_non_negative))
    size: int | None = field(default=None, validator=validators.optional(_non_negative))
    duplicate_of: CallKey | None = None

    def __attrs_post_init__(self) -> None:
        if (self.duplicate_of is not None) != (self.reason is CancelReason.DUPLICATE_OF):
            raise ValueError("a cancellation names an earlier call exactly when it is a duplicate")


@event_type("decision.failed")
@frozen(kw_only=True)
class CallFailed(Event):
    """The call ended without running because it was wrong; ``detail`` never holds values.

    ``fragments`` and ``size`` count as in [`CallCancelled`][inert.events.CallCancelled].
    """

    key: CallKey
    cause: int = field(validator=_positive)
    reason: FailReason
    detail: str = ""
    fragments: int | None = field(default=None, validator=validators.optional(_non_negative))
    size: int | None = field(default=None, validator=validators.optional(_non_negative))


@event_type("decision.edit_refused")
@frozen(kw_only=True)
class EditRefused(Event):
    """The arguments a principal gave with a confirmation were refused (they do not parse, are
    too large or do not validate): the confirmation changed nothing, and the call still waits
    for one. ``detail`` names paths and kinds of problems, never values."""

    key: CallKey
    cause: int = field(validator=_positive)
    confirmation_event_id: str
    reason: FailReason
    detail: str = ""
    size: int = field(validator=_non_negative)


@event_type("decision.stop_requested")
@frozen(kw_only=True)
class CallStopRequested(Event):
    """A dispatched call, still running, is no longer wanted: the executor holding its claim is
    asked to stop. The call stays dispatched (nothing runs again); the executor's outcome says
    how the run ended."""

    key: CallKey
    cause: int = field(validator=_positive)
    claim_id: str
    reason: CancelReason


@event_type("decision.rejected")
@frozen(kw_only=True)
class EventRejected(Event):
    """An event addressed to the call was refused and recorded, not applied."""

    key: CallKey
    cause: int = field(validator=_positive)
    rejected_event_id: str
    rejected_type: str
    reason: RejectReason
    detail: str = ""


# --- outcomes (from the executor, through the runtime) -------------------------------------


@event_type("outcome.completed")
@frozen(kw_only=True)
class ExecutionCompleted(Event):
    """The executor reported that the dispatched call ran to completion."""

    key: CallKey
    claim_id: str


@event_type("outcome.failed")
@frozen(kw_only=True)
class ExecutionFailed(Event):
    """The executor reported that the dispatched call failed; ``error`` never holds values."""

    key: CallKey
    claim_id: str
    error: str = ""


@event_type("outcome.stopped")
@frozen(kw_only=True)
class ExecutionStopped(Event):
    """The executor reported that it stopped the dispatched call's run when asked to (what the
    run had done by then is the executor's to say, never a value here)."""

    key: CallKey
    claim_id: str


def _no_task_named(fields: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 unknown outcomes were recorded before an executor could note a task."""
    return {**fields, "task_id": None}


@event_type("outcome.unknown", schema_version=2, upcasters={1: _no_task_named})
@frozen(kw_only=True)
class ExecutionOutcomeUnknown(Event):
    """A dispatched call has no recorded outcome after a restart: surfaced, never re-run.

    ``task_id`` names the task the run was on its server, where the executor noted one
    (``ExecutionTaskCreated``): the task to look for there.
    """

    key: CallKey
    claim_id: str
    task_id: str | None = None


# --- notes (from the executor, through the runtime) ----------------------------------------
#
# What an executor's run of a dispatched call showed on its way, between the dispatch and the
# outcome: no decider reads them, and they change no call's state. Written to the call's request
# stream, like outcomes; never a value of the call, only identities, digests and sizes.


@event_type("note.task_created")
@frozen(kw_only=True)
class ExecutionTaskCreated(Event):
    """The executor's run of the dispatched call is a task on the server that runs it, known
    there by ``task_id`` (the server's handle): after a restart, the task to look for."""

    key: CallKey
    claim_id: str
    task_id: str = field(validator=validators.min_len(1))


@event_type("note.input_requested")
@frozen(kw_only=True)
class ExecutionInputRequested(Event):
    """The running call asks its principal for input (a task's ``input_required``): the
    request is named by ``request_digest`` and ``size`` (its canonical JSON), never shown
    here; an answer is taken until ``expires_at``, once."""

    key: CallKey
    claim_id: str
    request_digest: str
    size: int = field(validator=_non_negative)
    expires_at: datetime


@event_type("note.input_given")
@frozen(kw_only=True)
class ExecutionInputGiven(Event):
    """The principal answered the request ``request_digest`` names with input of this digest
    and size (its canonical JSON); the executor sends it on."""

    key: CallKey
    claim_id: str
    principal: str
    request_digest: str
    input_digest: str
    size: int = field(validator=_non_negative)


@event_type("note.input_denied")
@frozen(kw_only=True)
class ExecutionInputDenied(Event):
    """The principal refused the request ``request_digest`` names: the executor ends the run."""

    key: CallKey
    claim_id: str
    principal: str
    request_digest: str


# --- families, for code that routes by family --------------------------------------------

INGRESS_TYPES: tuple[type[Event], ...] = (
    CallOpened,
    ArgumentsAppended,
    CallEnded,
    ResponseEnded,
    StreamLost,
    StreamResumed,
    TextReceived,
    ServerToolCalled,
)
"""What an agent server feeds from its provider streams."""


def call_of(event: Event | None) -> CallKey | None:
    """The call an event is about (what feeds it, asks of it, decides on it or reports its
    run), or ``None`` for an event about no one call (or none at all)."""
    key = getattr(event, "key", None)
    return key if isinstance(key, CallKey) else None


def response_of(event: Event) -> ResponseRef | None:
    """The provider response an ingress event belongs to (the stream it is written to is the
    response's); ``None`` for an event of another family."""
    match event:
        case CallOpened() | ArgumentsAppended() | CallEnded() | ServerToolCalled():
            return event.key.response_ref
        case ResponseEnded() | StreamLost() | StreamResumed() | TextReceived():
            return event.response
    return None


TRANSITION_TYPES = (
    CallCollecting,
    CallTerminalCandidate,
    CallValidated,
    CallAwaitingConfirmation,
    CallConfirmed,
    CallDispatched,
    CallCancelled,
    CallFailed,
)
"""The decisions that move a call along its states."""

DECISION_TYPES = (*TRANSITION_TYPES, CallReady, EditRefused, CallStopRequested, EventRejected)
"""Everything a call's actor writes to the call's stream."""

CONTROL_TYPES: tuple[type[OperatorControl], ...] = (
    ResponseQuarantined,
    ToolDisabled,
    ToolEnabled,
    TenantStopped,
    TenantResumed,
)
"""Every operator control."""

STOPPING_CONTROL_TYPES = tuple(control for control in CONTROL_TYPES if control.STOPS)
"""The controls that stop calls: what a call's actor must hear."""

OUTCOME_TYPES = (
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionStopped,
    ExecutionOutcomeUnknown,
)
"""What the runtime records of an executor's run."""

NOTE_TYPES = (
    ExecutionTaskCreated,
    ExecutionInputRequested,
    ExecutionInputGiven,
    ExecutionInputDenied,
)
"""What the runtime records of an executor's run on its way (no decider reads them)."""
