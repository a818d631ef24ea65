"""The reference fold: the call fold as it was before the slot fold, kept as the oracle.

A copy of ``inert/actors/_fold.py`` at the start of "Core v2, part 2", folding with the
immutable ``CallState`` and the reference ``step`` of the decider. ``test_fold_differential``
folds every golden log and simulator seeds through it and through ``inert.actors.CallFold`` and
requires the same work for the actors, the same divergences and the same calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TypeVar

import attrs
from attrs import define, field, frozen

from inert.actors._arguments import ParsedArguments, parse_arguments
from inert.actors._call import (
    DEFAULT_LIMITS,
    KEYED_DIGESTS,
    CallContext,
    CallLimits,
    CallState,
    Input,
    ResponseEnd,
    TurnStatus,
    TurnView,
    ValidationOutcome,
    ValidationRequested,
    ValidationResult,
    awaits_response,
    evolve,
    initial_state,
    recorded,
    with_arguments,
)
from inert.actors._decider import step
from inert.actors._scope import ResponseTurns
from inert.events import (
    DECISION_TYPES,
    OUTCOME_TYPES,
    ArgumentsAppended,
    CallCancelled,
    CallDispatched,
    CallEnded,
    CallFailed,
    CallKey,
    CallOpened,
    CallValidated,
    CancelReason,
    ClaimRequested,
    ConfirmationDenied,
    ConfirmationGiven,
    DeadlineReached,
    EditRefused,
    Event,
    FailReason,
    InertError,
    IntentScope,
    Phase,
    RecordedEvent,
    Redacted,
    ResponseEnded,
    ResponseEndReason,
    ResponseQuarantined,
    ResponseRef,
    ServerToolCalled,
    StreamLost,
    StreamResumed,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnLeased,
    TurnRef,
    TurnRetired,
    TurnStarted,
    TurnSuperseded,
    without_sensitive,
)

_ADDRESSED = (
    CallOpened,
    ServerToolCalled,
    ArgumentsAppended,
    CallEnded,
    ConfirmationGiven,
    ConfirmationDenied,
    ClaimRequested,
    DeadlineReached,
)


class ReplayDivergence(InertError):
    """A decision in the log is not the one this code makes from the same inputs."""

    def __init__(self, key: CallKey, position: int, expected: str, found: str) -> None:
        super().__init__(
            f"replay diverged at position {position} for call {key.stream!r}: the decider"
            f" expects {expected}, the log holds {found}; refusing to go on"
        )
        self.key = key
        self.position = position


# --- resuming a lost stream --------------------------------------------------------------------


@frozen(kw_only=True)
class ResumedState:
    """A call as its response's resume point found it: the sequence and byte offset its next
    fragment takes, and whether its own end event had arrived."""

    next_sequence: int
    offset: int
    ended: bool


@frozen(kw_only=True)
class ResumePoint:
    """A lost, resumable response: the provider sequence it can be resumed after, and its live
    calls then."""

    after: int | None
    calls: Mapping[CallKey, ResumedState]


# --- work for the actors ----------------------------------------------------------------------


@frozen(kw_only=True)
class AppendDecisions:
    """Write these decisions to the call's stream, after everything written for it before."""

    key: CallKey
    decisions: tuple[Event, ...]


@frozen(kw_only=True)
class RunValidation:
    """Validate the call once; the actor feeds the answer to the decider and writes it."""

    key: CallKey
    request: ValidationRequested
    context: CallContext


@frozen(kw_only=True)
class ScheduleDeadline:
    """Ask for a ``DeadlineReached`` for the call at this time, if it is still due then."""

    key: CallKey
    at: datetime


Work = AppendDecisions | RunValidation | ScheduleDeadline


# --- turns and controls ----------------------------------------------------------------------


@define
class _Turn:
    view: TurnView


class Scope:
    """The turns and operator controls as of a log position."""

    def __init__(self) -> None:
        self._turns: dict[TurnRef, _Turn] = {}
        self._latest: dict[tuple[str, str], TurnRef] = {}
        self._quarantined: set[tuple[str | None, str]] = set()
        self._disabled: set[tuple[str | None, str]] = set()
        self._stopped: set[str] = set()

    def apply(self, event: Event) -> None:
        match event:
            case TurnStarted(turn=turn, principal=principal, tools=tools, rules=rules):
                if turn in self._turns:
                    return
                conversation = (turn.tenant, turn.conversation)
                previous = self._latest.get(conversation)
                if previous is not None:
                    self._set_status(previous, TurnStatus.SUPERSEDED)
                self._latest[conversation] = turn
                offered = {tool.name: tool for tool in tools}
                self._turns[turn] = _Turn(TurnView(principal=principal, tools=offered, rules=rules))
            case TurnSuperseded(turn=turn):
                self._set_status(turn, TurnStatus.SUPERSEDED)
            case TurnCancelled(turn=turn, principal=principal):
                known = self._turns.get(turn)
                # Only the person the turn belongs to (through the agent server) cancels it.
                if known is not None and known.view.principal == principal:
                    self._set_status(turn, TurnStatus.CANCELLED)
            case ResponseQuarantined(response=response, tenant=tenant):
                self._quarantined.add((tenant, response))
            case ToolDisabled(tool=tool, tenant=tenant):
                self._disabled.add((tenant, tool))
            case ToolEnabled(tool=tool, tenant=tenant):
                self._disabled.discard((tenant, tool))
            case TenantStopped(tenant=tenant):
                self._stopped.add(tenant)
            case TenantResumed(tenant=tenant):
                self._stopped.discard(tenant)

    def retire(self, turn: TurnRef) -> None:
        del self._turns[turn]
        conversation = (turn.tenant, turn.conversation)
        if self._latest.get(conversation) == turn:
            del self._latest[conversation]

    def _set_status(self, turn: TurnRef, status: TurnStatus) -> None:
        known = self._turns.get(turn)
        if known is not None and known.view.status is TurnStatus.ACTIVE:
            known.view = attrs.evolve(known.view, status=status)

    def turn(self, turn: TurnRef) -> TurnView | None:
        known = self._turns.get(turn)
        return None if known is None else known.view

    def blocked(self, key: CallKey, tool: str) -> CancelReason | None:
        """The operator control that forbids this call now, if any (the widest first)."""
        if key.tenant in self._stopped:
            return CancelReason.TENANT_STOPPED
        quarantined = self._quarantined
        if (None, key.response) in quarantined or (key.tenant, key.response) in quarantined:
            return CancelReason.RESPONSE_QUARANTINED
        if tool and ((None, tool) in self._disabled or (key.tenant, tool) in self._disabled):
            return CancelReason.TOOL_DISABLED
        return None


# --- calls -----------------------------------------------------------------------------------


@define
class CallRecord:
    """One call as the fold knows it.

    Lists rather than deques: they hold a decision or two at a time, and an empty deque costs
    ten times the memory of an empty list, for every call alive.
    """

    state: CallState
    version: int = 0
    """Events of the call's stream seen in the log."""
    expected: list[Event] = field(factory=list)
    """Decisions made and not yet seen in the log, in order."""
    held: list[tuple[Input, CallContext]] = field(factory=list)
    """Inputs waiting for the answer of a validation."""
    validation_context: CallContext | None = None
    degraded: bool = False
    """An input of the call was redacted: its recorded decisions are taken as they are."""
    trusted_through: int = 0
    """Decisions caused at or before this position are taken as recorded: the call was
    degraded when those inputs came, so they were never decided here."""
    skipped: int = 0
    """The position of the last input it skipped while degraded."""
    recovering: bool = False
    """Degraded, it reached a state from which it could decide again."""
    ended_at: int | None = None
    """The position of the first end event addressed to the call."""
    response_end: ResponseEnd | None = None
    """The first end of its response after ``ended_at``."""


_Members = dict[CallKey, None]
"""Keys in the order they were added (a dict, so that iteration never depends on hashing)."""


class _Index:
    """Keys of live calls by what turn, tenant and operator events address."""

    def __init__(self) -> None:
        self.by_response: dict[ResponseRef, _Members] = {}
        self.by_turn: dict[TurnRef, _Members] = {}
        self.by_conversation: dict[tuple[str, str], _Members] = {}
        self.by_tenant: dict[str, _Members] = {}
        self.by_response_id: dict[str, _Members] = {}
        self.by_tool: dict[str, _Members] = {}

    def add(self, key: CallKey, tool: str) -> None:
        _join(self.by_response, key.response_ref, key)
        _join(self.by_turn, key.turn_ref, key)
        _join(self.by_conversation, (key.tenant, key.conversation), key)
        _join(self.by_tenant, key.tenant, key)
        _join(self.by_response_id, key.response, key)
        _join(self.by_tool, tool, key)

    def remove(self, key: CallKey, tool: str) -> None:
        _leave(self.by_response, key.response_ref, key)
        _leave(self.by_turn, key.turn_ref, key)
        _leave(self.by_conversation, (key.tenant, key.conversation), key)
        _leave(self.by_tenant, key.tenant, key)
        _leave(self.by_response_id, key.response, key)
        _leave(self.by_tool, tool, key)


G = TypeVar("G")


def _join(index: dict[G, _Members], group: G, key: CallKey) -> None:
    index.setdefault(group, {})[key] = None


def _leave(index: dict[G, _Members], group: G, key: CallKey) -> None:
    members = index.get(group)
    if members is not None:
        members.pop(key, None)
        if not members:
            del index[group]


def _members(index: dict[G, _Members], group: G) -> list[CallKey]:
    return list(index.get(group, ()))


class CallFold:
    """Folds the log into the state of every call and says what the actors must do."""

    def __init__(
        self,
        limits: CallLimits = DEFAULT_LIMITS,
        *,
        live: bool = False,
        process: str | None = None,
        digest_key: bytes = b"",
    ) -> None:
        self.limits = limits
        self.digest_key = digest_key
        self.live = live
        self.process = process
        self._leases: dict[TurnRef, tuple[str, int]] = {}
        self.position = 0
        self.scope = Scope()
        self.responses = ResponseTurns()
        self._counted: dict[CallKey, None] = {}
        self.records: dict[CallKey, CallRecord] = {}
        self._index = _Index()
        self._resumable: dict[ResponseRef, int | None] = {}
        self._resume_points: dict[ResponseRef, ResumePoint] = {}
        self._by_stream: dict[str, CallKey | list[CallKey]] = {}
        self._outcomes: set[CallKey] = set()
        # Dispatched calls in the order they were dispatched: those without an outcome run.
        self._dispatched: dict[CallKey, None] = {}
        # Rule 12: claims whose first decision is not read back, in log order; dispatches read
        # back of tools that run one action per intent, with the tool and arguments digest.
        self._claims: list[tuple[CallKey, int]] = []
        self._dispatches: list[tuple[CallKey, str, str]] = []

    # --- reading the log ---

    def apply(self, recorded_event: RecordedEvent) -> list[Work]:
        """Fold one event of the log (the next by position); the work it gives the actors."""
        self.position = recorded_event.position
        event = recorded_event.event
        if isinstance(event, Redacted):
            if isinstance(event.remains, DECISION_TYPES):
                return self._decision(recorded_event, event.remains)
            return self._redacted(recorded_event)
        if isinstance(event, DECISION_TYPES):
            return self._decision(recorded_event, event)
        if isinstance(event, TurnLeased):
            return self._leased(event, recorded_event.version)
        if isinstance(event, TurnRetired):
            return self._retire(event.turn)
        if isinstance(event, OUTCOME_TYPES):
            record = self.records.get(event.key)
            if record is not None and record.state.claim_id == event.claim_id:
                # One outcome per dispatch (rule 15): a later one finds the first in the set.
                self._outcomes.add(event.key)
            return []
        self.scope.apply(event)
        self._note_response(recorded_event, event)
        self._note_stream(event)
        work: list[Work] = []
        for key in self._targets(event):
            work.extend(self._deliver(key, recorded_event, event))
        for key in self._running_targets(event):
            work.extend(self._deliver(key, recorded_event, event))
        return work

    def _running(self, key: CallKey) -> bool:
        record = self.records.get(key)
        return (
            record is not None
            and record.state.phase is Phase.DISPATCHED
            and key not in self._outcomes
        )

    def _running_targets(self, event: Event) -> list[CallKey]:
        running = [key for key in self._dispatched if self._running(key)]
        match event:
            case TurnStarted(turn=turn):
                conversation = (turn.tenant, turn.conversation)
                return [
                    key
                    for key in running
                    if (key.tenant, key.conversation) == conversation and key.turn_ref != turn
                ]
            case TurnCancelled(turn=turn) | TurnSuperseded(turn=turn):
                return [key for key in running if key.turn_ref == turn]
            case ResponseQuarantined(response=response, tenant=tenant):
                return [
                    key
                    for key in running
                    if key.response == response and (tenant is None or key.tenant == tenant)
                ]
            case ToolDisabled(tool=tool, tenant=tenant):
                return [
                    key
                    for key in running
                    if self.records[key].state.tool == tool
                    and (tenant is None or key.tenant == tenant)
                ]
            case TenantStopped(tenant=tenant):
                return [key for key in running if key.tenant == tenant]
        return []

    def _note_response(self, recorded_event: RecordedEvent, event: Event) -> None:
        key = getattr(event, "key", None)
        response = key.response_ref if isinstance(key, CallKey) else getattr(event, "response", 0)
        if isinstance(response, ResponseRef):
            known = self.scope.turn(response.turn_ref) is not None
            self.responses.note(
                recorded_event.stream, recorded_event.version, response, known=known
            )

    def _note_stream(self, event: Event) -> None:
        response = getattr(event, "response", None)
        if isinstance(response, ResponseRef) and self.scope.turn(response.turn_ref) is None:
            return
        match event:
            case StreamLost(response=response, resumable=True, last_sequence=last):
                self._resumable[response] = last
                point = self._resume_points.get(response)
                # The same point recorded again (by a restart) keeps the calls as they were.
                if point is None or point.after != last:
                    self._resume_points[response] = ResumePoint(
                        after=last,
                        calls={
                            state.key: ResumedState(
                                next_sequence=state.next_sequence,
                                offset=state.end,
                                ended=state.phase is not Phase.COLLECTING,
                            )
                            for state in self.live_calls_of(response)
                        },
                    )
            case StreamResumed(response=response):
                self._resumable.pop(response, None)
            case ResponseEnded(response=response, reason=reason):
                self._resumable.pop(response, None)
                self._resume_points.pop(response, None)
                end = ResponseEnd(self.position, reason is ResponseEndReason.COMPLETED)
                for record in self.records.values():
                    if (
                        record.state.key.response_ref == response
                        and record.ended_at is not None
                        and record.response_end is None
                    ):
                        record.response_end = end
            case StreamLost(response=response):
                self._resumable.pop(response, None)
                self._resume_points.pop(response, None)

    def _targets(self, event: Event) -> Iterable[CallKey]:
        index = self._index
        match event:
            case _ if isinstance(event, _ADDRESSED):
                return (_key_of(event),)
            case ResponseEnded(response=response) | StreamLost(response=response):
                return _members(index.by_response, response)
            case StreamResumed(response=response):
                return _members(index.by_response, response)
            case TurnStarted(turn=turn):
                conversation = (turn.tenant, turn.conversation)
                return [
                    key
                    for key in _members(index.by_conversation, conversation)
                    if key.turn_ref != turn
                ]
            case TurnCancelled(turn=turn) | TurnSuperseded(turn=turn):
                return _members(index.by_turn, turn)
            case ResponseQuarantined(response=response, tenant=tenant):
                return [
                    key
                    for key in _members(index.by_response_id, response)
                    if tenant is None or key.tenant == tenant
                ]
            case ToolDisabled(tool=tool, tenant=tenant):
                return [
                    key
                    for key in _members(index.by_tool, tool)
                    if tenant is None or key.tenant == tenant
                ]
            case TenantStopped(tenant=tenant):
                return _members(index.by_tenant, tenant)
        return ()

    def _digest_key(self, turn: TurnView | None) -> bytes:
        return self.digest_key if turn is not None and turn.rules >= KEYED_DIGESTS else b""

    def _context(self, record: CallRecord, event: Event, version: int | None = None) -> CallContext:
        # The record's key, not the event's: what it derives (its turn) is cached on it.
        key = record.state.key
        turn = self.scope.turn(key.turn_ref)
        digest_key = self._digest_key(turn)
        if not isinstance(event, CallOpened):
            return CallContext(
                turn=turn,
                digest_key=digest_key,
                blocked=self.scope.blocked(key, record.state.tool),
                limits=self.limits,
                running=self._running(key),
                response_end=record.response_end,
            )
        # Live calls are counted only where the decider looks at them: at an opening.
        if turn is not None and turn.rules >= 3:
            others = [other for other in self._counted if other != key]
            in_turn = sum(other.turn_ref == key.turn_ref for other in others)
            in_tenant = sum(other.tenant == key.tenant for other in others)
        else:
            live = record.state.live
            in_turn = len(self._index.by_turn.get(key.turn_ref, ())) - live
            in_tenant = len(self._index.by_tenant.get(key.tenant, ())) - live
        return CallContext(
            turn=turn,
            digest_key=digest_key,
            blocked=self.scope.blocked(key, record.state.tool or event.tool),
            limits=self.limits,
            live_in_turn=in_turn,
            live_in_tenant=in_tenant,
            response_elsewhere=self.responses.elsewhere(key.response_ref, version)
            if record.state.phase is Phase.ABSENT
            else "",
            response_over_limit=self.responses.over_limit(key.response_ref) is not None,
        )

    def _deliver(self, key: CallKey, recorded_event: RecordedEvent, event: Event) -> list[Work]:
        record = self.records.get(key) or self._record(key)
        claim = isinstance(event, ClaimRequested)
        turn = self.scope.turn(key.turn_ref)
        if (
            claim
            and turn is not None
            and turn.rules >= 6
            and any(tool.one_action_per_intent for tool in turn.tools.values())
            and all(queued != key for queued, _ in self._claims)
        ):
            self._claims.append((key, recorded_event.position))
        if isinstance(event, CallEnded) and record.ended_at is None:
            record.ended_at = recorded_event.position
        if record.degraded:
            record.skipped = recorded_event.position
            return []
        received = Input(
            event=event,
            position=recorded_event.position,
            event_id=recorded_event.event_id,
            at=recorded_event.recorded_at,
        )
        context = self._context(record, event, recorded_event.version)
        if record.state.validating is not None or record.held or (claim and self._waits(key)):
            record.held.append((received, context))
            return []
        return self._step(record, received, context)

    def _waits(self, key: CallKey) -> bool:
        """Whether a claim of the call's conversation queued before the call's has no decision
        read back yet."""
        for queued, _ in self._claims:
            if queued == key:
                return False
            if (queued.tenant, queued.conversation) == (key.tenant, key.conversation):
                return True
        return False

    def _drain(self, record: CallRecord) -> list[Work]:
        work: list[Work] = []
        while record.held and record.state.validating is None:
            received, context = record.held[0]
            if isinstance(received.event, ClaimRequested) and self._waits(record.state.key):
                break
            record.held.pop(0)
            work.extend(self._step(record, received, context))
        return work

    def _release(self, tenant: str, conversation: str) -> list[Work]:
        for queued, _ in self._claims:
            if (queued.tenant, queued.conversation) == (tenant, conversation):
                record = self.records.get(queued)
                if record is None or record.degraded:
                    return []
                return self._drain(record)
        return []

    def _scope_of(self, key: CallKey, tool: str) -> IntentScope | None:
        turn = self.scope.turn(key.turn_ref)
        if turn is None or turn.rules < 6 or tool not in turn.tools:
            return None
        return turn.tools[tool].one_action_per_intent

    def _duplicate_of(self, state: CallState) -> CallKey | None:
        key = state.key
        scope = self._scope_of(key, state.tool)
        if scope is None or not state.arguments_digest:
            return None
        for other, tool, digest in reversed(self._dispatches):
            if (
                (other.tenant, other.conversation) == (key.tenant, key.conversation)
                and (scope is IntentScope.CONVERSATION or other.turn == key.turn)
                and (tool, digest) == (state.tool, state.arguments_digest)
            ):
                return other
        return None

    def _step(
        self, record: CallRecord, received: Input | ValidationOutcome, context: CallContext
    ) -> list[Work]:
        before = record.state
        if isinstance(received, Input) and isinstance(received.event, ClaimRequested):
            context = context._replace(duplicate_of=self._duplicate_of(before))
        after, decisions = step(before, received, context)
        record.state = after
        self._reindex(before, after)
        written = recorded(decisions)
        record.expected.extend(written)
        work: list[Work] = []
        key = after.key
        acting = self.live and self.owns(key.turn_ref)
        if acting and written and not isinstance(received, ValidationOutcome):
            work.append(AppendDecisions(key=key, decisions=tuple(written)))
        for decision in decisions:
            if isinstance(decision, ValidationRequested):
                record.validation_context = context
                if acting:
                    work.append(RunValidation(key=key, request=decision, context=context))
        if acting:
            # Timers look the deadline up again when they fire, so only a deadline that is new
            # or earlier than before needs scheduling; a later one is found by the earlier timer.
            deadline = self.deadline(after)
            previous = self.deadline(before)
            if deadline is not None and (previous is None or deadline < previous):
                work.append(ScheduleDeadline(key=key, at=deadline))
        return work

    def _reindex(self, before: CallState, after: CallState) -> None:
        was, now = before.live, after.live
        if was and not now:
            self._index.remove(before.key, before.tool)
            if after.phase is Phase.DISPATCHED:
                self._dispatched[after.key] = None
        elif now and not was:
            self._index.add(after.key, after.tool)
            self._counted[after.key] = None

    def _decision(self, recorded_event: RecordedEvent, event: Event) -> list[Work]:
        work = self._decided(recorded_event, event)
        key = _key_of(event)
        record = self.records.get(key)
        if (
            isinstance(event, CallDispatched)
            and record is not None
            and self._scope_of(key, record.state.tool) is not None
        ):
            self._dispatches.append((key, record.state.tool, record.state.arguments_digest))
        cause = getattr(event, "cause", 0)
        queued = [position for other, position in self._claims if other == key]
        if queued and queued[0] <= cause:
            self._claims.remove((key, queued[0]))
            work.extend(self._release(key.tenant, key.conversation))
        return work

    def _decided(self, recorded_event: RecordedEvent, event: Event) -> list[Work]:
        key = _key_of(event)
        if isinstance(event, CallFailed) and event.reason is FailReason.LIMIT_EXCEEDED:
            turn = self.scope.turn(key.turn_ref)
            if turn is not None and turn.rules >= 3:
                self.responses.passed_limit(key)
        if isinstance(event, CallCancelled | CallDispatched | CallFailed):
            # Under rules 3 a call counts against the limits until its ending is read back.
            self._counted.pop(key, None)
        record = self.records.get(key)
        if record is None:
            if self.scope.turn(key.turn_ref) is None:
                return []
            record = self._record(key)
            record.degraded = True
        record.version = recorded_event.version
        cause = getattr(event, "cause", 0)
        if record.degraded or cause <= record.trusted_through:
            before = record.state
            record.state = evolve(before, event)
            if record.degraded:
                record.expected.clear()
            self._reindex(before, record.state)
            if record.degraded and isinstance(event, CallValidated) and event.arguments:
                # The validated arguments are recorded whole: what was lost can no longer
                # matter.
                parsed = parse_arguments(
                    event.arguments,
                    self.limits.arguments,
                    digest_key=self._digest_key(self.scope.turn(key.turn_ref)),
                )
                assert isinstance(parsed, ParsedArguments)
                record.state = with_arguments(record.state, parsed)
                record.recovering = True
            elif record.degraded and record.state.terminal_phase:
                record.recovering = True
            # Replaying, it decides again only once the decisions of every input it skipped
            # are read.
            if record.recovering and (self.live or cause >= record.skipped):
                self._recover_from_degradation(record, recorded_event.position)
            return []
        if record.expected:
            wanted = record.expected.pop(0)
            if not _recorded_as(wanted, recorded_event, event):
                raise ReplayDivergence(
                    key, recorded_event.position, _describe(wanted), _describe(event)
                )
            self._forget_if_stray(record)
            return []
        validating = record.state.validating
        if validating is not None and isinstance(event, CallValidated | CallFailed | EditRefused):
            if event.cause != validating.cause:
                raise ReplayDivergence(
                    key,
                    recorded_event.position,
                    f"the answer to the validation of position {validating.cause}",
                    _describe(event),
                )
            return self._answer(record, recorded_event, event)
        raise ReplayDivergence(key, recorded_event.position, "no decision", _describe(event))

    @staticmethod
    def _recover_from_degradation(record: CallRecord, position: int) -> None:
        # Later inputs are decided again; the answers to those that came meanwhile are taken as
        # recorded.
        record.degraded = False
        record.recovering = False
        record.trusted_through = position

    def _answer(
        self,
        record: CallRecord,
        recorded_event: RecordedEvent,
        event: CallValidated | CallFailed | EditRefused,
    ) -> list[Work]:
        if isinstance(event, CallValidated):
            result = ValidationResult(needs_confirmation=event.needs_confirmation)
        else:
            result = ValidationResult(failure=event.reason, detail=event.detail)
        context = record.validation_context
        assert context is not None
        work = self._step(record, ValidationOutcome(result=result), context)
        first = record.expected.pop(0) if record.expected else None
        if first is None or not _recorded_as(first, recorded_event, event):
            raise ReplayDivergence(
                record.state.key,
                recorded_event.position,
                "no decision" if first is None else _describe(first),
                _describe(event),
            )
        record.validation_context = None
        work.extend(self._drain(record))
        return work

    def _record(self, key: CallKey) -> CallRecord:
        record = self.records[key] = CallRecord(initial_state(key))
        self._by_stream[key.stream] = key
        self._by_stream.setdefault(key.response_ref.stream, [])
        responses = self._by_stream[key.response_ref.stream]
        assert isinstance(responses, list)
        responses.append(key)
        return record

    def _forget_if_stray(self, record: CallRecord) -> None:
        """A call never opened, of a turn unknown, with nothing pending, is forgotten."""
        state = record.state
        if (
            state.phase is Phase.ABSENT
            and not record.expected
            and not record.held
            and not record.degraded
            and state.validating is None
            and self.scope.turn(state.key.turn_ref) is None
        ):
            self._forget([state.key])

    def _forget(self, keys: list[CallKey]) -> None:
        for key in keys:
            del self.records[key]
            self._outcomes.discard(key)
            self._dispatched.pop(key, None)
            del self._by_stream[key.stream]
            responses = self._by_stream[key.response_ref.stream]
            assert isinstance(responses, list)
            responses.remove(key)
            if not responses:
                del self._by_stream[key.response_ref.stream]

    def _retire(self, turn: TurnRef) -> list[Work]:
        if self.scope.turn(turn) is None or any(
            key.turn_ref == turn
            and (
                record.state.live
                or (record.state.phase is Phase.DISPATCHED and key not in self._outcomes)
            )
            for key, record in self.records.items()
        ):
            return []
        self._forget([key for key in self.records if key.turn_ref == turn])
        for key in [key for key in self._counted if key.turn_ref == turn]:
            del self._counted[key]
        self.scope.retire(turn)
        self.responses.retire(turn)
        self._leases.pop(turn, None)
        for response in list(self._resumable):
            if response.turn_ref == turn:
                del self._resumable[response]
        for response in list(self._resume_points):
            if response.turn_ref == turn:
                del self._resume_points[response]
        self._claims = [(key, at) for key, at in self._claims if key.turn_ref != turn]
        self._dispatches = [entry for entry in self._dispatches if entry[0].turn_ref != turn]
        return self._release(turn.tenant, turn.conversation)

    def _redacted(self, recorded_event: RecordedEvent) -> list[Work]:
        # A call whose input is gone can no longer be decided again: it takes its recorded
        # decisions as they are from now on. What retention kept names the call; where it kept
        # nothing, only the stream name is left.
        assert isinstance(recorded_event.event, Redacted)
        remains = recorded_event.event.remains
        if remains is not None:
            self._note_response(recorded_event, remains)
            key = _key_of(remains)
            record = self.records.get(key) or self._record(key)
            if record.state.terminal_phase or record.state.phase is Phase.ABSENT:
                # A terminal call, or one never opened, judges an input by identities and
                # sequences alone, which retention keeps: what remains is decided as the whole
                # input was.
                return self._deliver(key, recorded_event, remains)
            if isinstance(remains, CallEnded) and record.ended_at is None:
                record.ended_at = recorded_event.position
            record.degraded = True
            record.skipped = recorded_event.position
            return []
        found = self._by_stream.get(recorded_event.stream)
        if isinstance(found, CallKey):
            record = self.records[found]
            record.version = recorded_event.version
            if record.expected:
                record.expected.pop(0)
                self._forget_if_stray(record)
        elif found is not None:
            for key in found:
                self.records[key].degraded = True
                self.records[key].skipped = recorded_event.position
        return []

    # --- going live ---

    def go_live(self) -> list[Work]:
        """End the replay: what the actors must still do for the calls found in the log.

        Decisions made but never written (the process stopped before writing them) are
        written now; validations never answered are asked again; deadlines are set.
        """
        self.live = True
        work: list[Work] = []
        for key, record in self.records.items():
            if record.recovering:
                self._recover_from_degradation(record, self.position)
            if self.owns(key.turn_ref):
                work.extend(self._resume(key, record))
        return work

    def _resume(self, key: CallKey, record: CallRecord) -> list[Work]:
        """What the call's actor must do when this process starts acting for the call."""
        work: list[Work] = []
        if record.expected and not record.degraded:
            work.append(AppendDecisions(key=key, decisions=tuple(record.expected)))
        validating = record.state.validating
        if validating is not None and record.validation_context is not None:
            work.append(
                RunValidation(key=key, request=validating, context=record.validation_context)
            )
        deadline = self.deadline(record.state)
        if deadline is not None:
            work.append(ScheduleDeadline(key=key, at=deadline))
        return work

    # --- processes sharing the log ---

    def owns(self, turn: TurnRef) -> bool:
        """Whether this process decides for the turn's calls: always when it is alone on the
        log (``process`` is ``None``); else when it holds the turn's lease, or when nobody
        does (a turn unknown here, or started before processes shared the log): then every
        process answers, the first answer is written and the others are refused by the call
        stream's version."""
        if self.process is None:
            return True
        lease = self._leases.get(turn)
        return lease is None or lease[0] == self.process

    def lease(self, turn: TurnRef) -> tuple[str, int] | None:
        """The owner of the turn and the version of its lease stream, if it was leased."""
        return self._leases.get(turn)

    def leases(self) -> dict[TurnRef, tuple[str, int]]:
        return dict(self._leases)

    def _leased(self, event: TurnLeased, version: int) -> list[Work]:
        gained = (
            self.live
            and self.process is not None
            and event.owner == self.process
            and not self.owns(event.turn)
        )
        self._leases[event.turn] = (event.owner, version)
        if not gained:
            return []
        # Taken over: what the former owner decided but never wrote, validations it never
        # answered and deadlines it watched are this process's now.
        work: list[Work] = []
        for key, record in self.records.items():
            if key.turn_ref == event.turn:
                work.extend(self._resume(key, record))
        return work

    def resumable_streams(self, turn: TurnRef) -> dict[ResponseRef, int | None]:
        """The responses of ``turn`` whose stream was lost and can be resumed, each with the last
        provider sequence number its feeder saw."""
        return {
            response: last
            for response, last in self._resumable.items()
            if response.turn_ref == turn
        }

    def resume_point(self, response: ResponseRef) -> ResumePoint | None:
        """Where a response that was lost and resumable can be taken up again: after the
        sequence its loss recorded, with its calls as the log held them then (what came after
        it, the continuation sends again)."""
        return self._resume_points.get(response)

    def interrupted_responses(self) -> list[ResponseRef]:
        """Responses with calls still assembling whose stream cannot be resumed.

        After a restart nothing feeds them any more: the runtime records them as lost.
        """
        return [
            response
            for response, keys in self._index.by_response.items()
            if response not in self._resumable
            and any(
                self.records[key].state.needs_stream
                or self.awaits_response(self.records[key].state)
                for key in keys
            )
        ]

    # --- looking ---

    def state(self, key: CallKey) -> CallState | None:
        record = self.records.get(key)
        return None if record is None else record.state

    def awaits_response(self, state: CallState) -> bool:
        key = state.key
        record = self.records.get(key)
        end = None if record is None else record.response_end
        return awaits_response(state, self.scope.turn(key.turn_ref), end)

    def deadline(self, state: CallState) -> datetime | None:
        return state.deadline(self.limits, awaiting_response=self.awaits_response(state))

    def ready(self, key: CallKey) -> bool:
        state = self.state(key)
        return state is not None and state.ready and not self.awaits_response(state)

    def live_calls_of(self, response: ResponseRef) -> list[CallState]:
        """The calls of a response that are opened and not terminal, in the order they opened."""
        return [
            self.records[key].state
            for key in _members(self._index.by_response, response)
            if self.records[key].state.live
        ]

    def response_settled(self, response: ResponseRef) -> bool:
        """Whether no call seen in the response is still live (opened and not terminal)."""
        found = self._by_stream.get(response.stream)
        assert not isinstance(found, CallKey)
        return all(not self.records[key].state.live for key in found or ())

    def live_keys(self) -> list[CallKey]:
        return [key for key, record in self.records.items() if record.state.live]


def _key_of(event: Event) -> CallKey:
    key = getattr(event, "key", None)
    assert isinstance(key, CallKey)
    return key


def _describe(event: Event) -> str:
    return f"{event.TAG} {attrs.asdict(event, recurse=False, filter=_no_bytes)}"


def _no_bytes(attribute: attrs.Attribute[object], value: object) -> bool:
    return not isinstance(value, bytes)


def _recorded_as(wanted: Event, recorded_event: RecordedEvent, event: Event) -> bool:
    """Whether the decision found in the log is the one wanted (as retention left it)."""
    if isinstance(recorded_event.event, Redacted):
        return without_sensitive(wanted) == event
    return wanted == event
