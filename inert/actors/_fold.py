"""Every call as of a log position, folded from the log in order: the memory of the actors.

The fold reads each event once, in log position order, updates the turns and operator controls
it has seen, hands the event to every call it addresses or concerns, runs the decider on it and
says what must be written. Live and on replay it is the same code; the difference is only that
on replay the decisions it makes are found in the log already, and are checked against it.

- Decisions are made here, in log order, and written to the call's stream by the call's actor.
  When a decision comes back from the log it must be the next one this fold expects for the
  call; anything else is a ``ReplayDivergence`` (the log and this code disagree), and the fold
  stops rather than guess.
- Validation is the one answer from outside. While a call waits for it, the inputs of that call
  are held back in order. The decision that records the answer (``CallValidated`` or
  ``CallFailed``, caused by the input that asked) is turned back into the answer, fed to the
  decider, and the held inputs follow: a replay never asks the validator again.
- A payload dropped by retention (``Redacted``) cannot be decided again; a call that missed one
  takes its recorded decisions as they are, and skips its inputs. It decides again from a
  state that no lost byte can change (its validated arguments recorded whole, or an end), but
  on replay only once the decisions of every input it skipped are read: a call's decisions
  are written in the order of their causes, yet may land after later inputs, which its actor
  decided knowing them. Going live, every such call decides again.
- Live calls (opened, not terminal) are indexed by turn alone (with a count per tenant), so
  that turn, response, tenant and operator events reach exactly the calls they concern, in the
  order the calls became live, and the limits on live calls per turn and per tenant are counted
  in log order. A finished call leaves every index.
- One action per intent (rule 12): the dispatches of tools that ask for it are noted where
  they are read back (``inert.actors._intents``), and a claim in a conversation with such a
  tool waits, held with the inputs of its call after it, until every earlier claim of the
  conversation has its first decision read back, so that it sees the same dispatches live and
  on replay, whichever earlier calls took their decisions as recorded.
- Nothing is kept for ever. A finished call is kept, small, as long as its turn is known: what
  is addressed to it later is judged against it (``call_terminal``). The runtime retires a turn
  that has had no live call, and no dispatched call waiting for its outcome, for its horizon
  (``TurnRetired``, in the log, so that a replay forgets exactly what the live fold forgot);
  the turn and every call of it are then forgotten, and anything addressed to them is judged
  as for a turn never started (``unknown_turn``). A call that was never opened in a turn
  unknown here is forgotten as soon as its rejections are read back, so that events addressed
  to made-up turns leave nothing behind. A call whose slot is made again after it was
  forgotten does not know its stream's version (``Slot.version`` is ``None``): its actor asks
  the log for the version as of the position the decisions were made at (``AppendDecisions``
  carries it), so that a write is refused if anyone wrote to the stream since.

Pure: no trio, no storage. The actors and the runtime do the writing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from urllib.parse import unquote

import attrs
from attrs import frozen

from ..events import (
    DECISION_TYPES,
    OUTCOME_TYPES,
    ArgumentsAppended,
    ByTurn,
    CallCancelled,
    CallDispatched,
    CallEnded,
    CallFailed,
    CallKey,
    CallOpened,
    CallReady,
    CallValidated,
    ClaimRequested,
    ConfirmationDenied,
    ConfirmationGiven,
    DeadlineReached,
    EditRefused,
    Event,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    FailReason,
    InertError,
    LogDamaged,
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
    TenantStopped,
    ToolDisabled,
    TurnCancelled,
    TurnLeased,
    TurnRef,
    TurnRetired,
    TurnStarted,
    TurnSuperseded,
    without_sensitive,
)
from ._arguments import ParsedArguments, parse_arguments
from ._call import (
    DEFAULT_LIMITS,
    KEYED_DIGESTS,
    CallContext,
    CallLimits,
    Input,
    ResponseEnd,
    TurnView,
    ValidationOutcome,
    ValidationRequested,
    ValidationResult,
    awaits_response,
    disallowed_as_recorded,
    recorded,
)
from ._decider import SCOPE_EVENTS, decide
from ._handlers import takes_fragment_alone
from ._intents import Intents, asks_for_intents, intent_of, scope_of
from ._scope import LiveIndex, Members, ResponseTurns, Scope, count
from ._slot import Slot

_DECISION_TYPES = frozenset(DECISION_TYPES)
_OUTCOME_TYPES = frozenset(OUTCOME_TYPES)
# What may ask a running call to stop (rule 11): what concerns a call without addressing it.
_STOPPING_TYPES = frozenset(SCOPE_EVENTS)
_ENDING_TYPES = (CallCancelled, CallDispatched, CallFailed)

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
    """Write these decisions to the call's stream, after everything written for it before.

    ``position`` is the fold's position when they were decided: where the call's stream
    version is not known here, they are written only if the stream has nothing past it."""

    key: CallKey
    decisions: tuple[Event, ...]
    position: int


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
        self.live = live
        self.process = process
        self.digest_key = digest_key
        """The log's key for digests of arguments, given to the calls of turns whose rules key
        them (``KEYED_DIGESTS``)."""
        self._leases: dict[TurnRef, tuple[str, int]] = {}
        self.position = 0
        self.scope = Scope()
        self.responses = ResponseTurns()
        self.records: dict[CallKey, Slot] = {}
        self._index = LiveIndex()
        self.intents = Intents()
        self._resumable: dict[ResponseRef, int | None] = {}
        self._resume_points: dict[ResponseRef, ResumePoint] = {}
        # Every call with a slot, by turn: what a retirement forgets.
        self._calls_of_turn: ByTurn[CallKey] = ByTurn()
        # Dispatched calls whose outcome is not recorded yet (an executor runs them), and their
        # count per turn: a turn is not idle while one of its calls runs.
        self._running: Members = {}
        self._running_in: dict[TurnRef, int] = {}
        # Live calls as the limits count them under rules 3: a call leaves the count when its
        # ending is read back from the log, not when it is decided, so that a replay in which
        # a call takes its decisions as recorded (retention took its inputs) counts alike.
        self._counted_in_turn: dict[TurnRef, int] = {}
        self._counted_in_tenant: dict[str, int] = {}
        # Known turns without a live or running call, in the order they became so, with the
        # log's time then.
        self._idle: dict[TurnRef, datetime] = {}
        # Turns (by hash) of which a slot was forgotten while the turn was unknown: a slot made
        # again in one of them may have a stream with events already. A false positive costs a
        # read of the stream's version, never a different decision.
        self._forgotten_in = bytearray(_FORGOTTEN_BITS // 8)
        self._at: datetime | None = None

    # --- reading the log ---

    def apply(self, recorded_event: RecordedEvent) -> list[Work]:
        """Fold one event of the log (the next by position); the work it gives the actors."""
        self.position = recorded_event.position
        event = recorded_event.event
        kind = type(event)
        if kind is ArgumentsAppended and self._took_fragment(recorded_event, event):  # type: ignore[arg-type]
            return []
        if kind in _DECISION_TYPES:
            return self._decision(recorded_event, event)  # type: ignore[arg-type]
        if isinstance(event, Redacted):
            if isinstance(event.remains, DECISION_TYPES):
                return self._decision(recorded_event, event.remains)
            return self._redacted(recorded_event)
        if isinstance(event, DECISION_TYPES):
            return self._decision(recorded_event, event)
        if isinstance(event, TurnLeased):
            return self._leased(event, recorded_event.version)
        self._at = recorded_event.recorded_at
        if kind is TurnRetired:
            return self._retire(event.turn)  # type: ignore[attr-defined]
        if kind in _OUTCOME_TYPES:
            self._outcome(event)  # type: ignore[arg-type]
            return []
        if kind is TurnStarted and self.scope.turn(event.turn) is None:  # type: ignore[attr-defined]
            self._idle[event.turn] = recorded_event.recorded_at  # type: ignore[attr-defined]
        self.scope.apply(event)
        self._note_response(recorded_event, event)
        self._note_stream(event)
        work: list[Work] = []
        for key in self._targets(event):
            work.extend(self._deliver(key, recorded_event, event))
        if self._running and kind in _STOPPING_TYPES:
            for key in self._running_targets(event):
                work.extend(self._deliver(key, recorded_event, event))
        return work

    def _took_fragment(self, recorded_event: RecordedEvent, fragment: ArgumentsAppended) -> bool:
        """Take a fragment a wanted, collecting call accepts as new data, the most common input,
        without asking ``decide`` (``takes_fragment_alone`` is its rule): nothing is decided, no
        deadline comes sooner. Whether it was."""
        slot = self.records.get(fragment.key)
        # A call with inputs held back, or known only by its recorded decisions, is the slow
        # path's.
        if slot is None or slot.held or slot.degraded:
            return False
        key = slot.key
        scope = self.scope
        if not takes_fragment_alone(
            slot, fragment, scope.turn(key.turn_ref), scope.blocked(key, slot.tool), self.limits
        ):
            return False
        slot._buffer = slot._buffer.add(fragment)
        slot.last_activity = recorded_event.recorded_at
        return True

    def _note_response(self, recorded_event: RecordedEvent, event: Event) -> None:
        """The turn of a response stream's first event."""
        if recorded_event.version != 1:
            return
        response = _response_of(event)
        if response is not None:
            known = self.scope.turn(response.turn_ref) is not None
            self.responses.note(recorded_event.stream, 1, response, known=known)

    def _note_stream(self, event: Event) -> None:
        response = getattr(event, "response", None)
        if isinstance(response, ResponseRef) and self.scope.turn(response.turn_ref) is None:
            # A response of a turn unknown here has no call to resume: nothing is kept of it
            # (made-up responses would otherwise stay for good).
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
                self._note_end(response, reason is ResponseEndReason.COMPLETED)
            case StreamLost(response=response):
                self._resumable.pop(response, None)
                self._resume_points.pop(response, None)

    def _note_end(self, response: ResponseRef, completed: bool) -> None:
        """A response's end is the one that counts for each of its calls whose own end event
        came and no end of the response since (rule 5, rules 7 on): noted on every slot of the
        response, degraded or not, whatever it decides, so that a replay notes the same."""
        end = ResponseEnd(self.position, completed)
        wanted = response.response
        records = self.records
        for key in self._calls_of_turn.filed(response.turn_ref):
            if key.response == wanted:
                slot = records[key]
                if slot.ended_at is not None and slot.response_end is None:
                    slot.response_end = end

    def _targets(self, event: Event) -> Iterable[CallKey]:
        index = self._index
        match event:
            case _ if isinstance(event, _ADDRESSED):
                return (_key_of(event),)
            case ResponseEnded(response=response) | StreamLost(response=response):
                return index.of_response(response)
            case StreamResumed(response=response):
                return index.of_response(response)
            case TurnStarted(turn=turn):
                return index.of_conversation_but(turn)
            case TurnCancelled(turn=turn) | TurnSuperseded(turn=turn):
                return index.of_turn(turn)
        reaches = self._reached_by(event)
        return () if reaches is None else [key for key in index.live if reaches(key)]

    def _running_targets(self, event: Event) -> list[CallKey]:
        """The running calls (dispatched, no outcome recorded) an event may ask to stop, in the
        order they were dispatched."""
        running = self._running
        match event:
            case TurnStarted(turn=turn):
                return [
                    key
                    for key in running
                    if key.conversation == turn.conversation
                    and key.tenant == turn.tenant
                    and key.turn_ref != turn
                ]
            case TurnCancelled(turn=turn) | TurnSuperseded(turn=turn):
                return [key for key in running if key.turn_ref == turn]
        reaches = self._reached_by(event)
        return [] if reaches is None else [key for key in running if reaches(key)]

    def _reached_by(self, event: Event) -> Callable[[CallKey], bool] | None:
        """Which calls an operator control reaches; ``None`` for an event that is none."""
        records = self.records
        match event:
            case ResponseQuarantined(response=response, tenant=tenant):
                return lambda key: key.response == response and tenant in (None, key.tenant)
            case ToolDisabled(tool=tool, tenant=tenant):
                return lambda key: records[key].tool == tool and tenant in (None, key.tenant)
            case TenantStopped(tenant=tenant):
                return lambda key: key.tenant == tenant
        return None

    def _digest_key(self, turn: TurnView | None) -> bytes:
        return self.digest_key if turn is not None and turn.rules >= KEYED_DIGESTS else b""

    def _context(self, slot: Slot, event: Event) -> CallContext:
        # The slot's key, not the event's: what it derives (its turn) is cached on it.
        key = slot.key
        turn = self.scope.turn(key.turn_ref)
        if not isinstance(event, CallOpened):
            return CallContext(
                turn=turn,
                blocked=self.scope.blocked(key, slot.tool),
                limits=self.limits,
                running=slot.phase is Phase.DISPATCHED and key in self._running,
                response_end=slot.response_end,
                digest_key=self._digest_key(turn),
            )
        # Live calls are counted only where the decider looks at them: at an opening.
        if turn is not None and turn.rules >= 3:
            counted = slot.counted
            in_turn = self._counted_in_turn.get(key.turn_ref, 0) - counted
            in_tenant = self._counted_in_tenant.get(key.tenant, 0) - counted
        else:
            live = slot.live
            in_turn = len(self._index.by_turn.get(key.turn_ref, ())) - live
            in_tenant = self._index.in_tenant.get(key.tenant, 0) - live
        return CallContext(
            turn=turn,
            blocked=self.scope.blocked(key, slot.tool or event.tool),
            limits=self.limits,
            live_in_turn=in_turn,
            live_in_tenant=in_tenant,
            response_elsewhere=self.responses.elsewhere(key.response_ref, slot.opened_version)
            if slot.phase is Phase.ABSENT
            else "",
            response_over_limit=self.responses.over_limit(key.response_ref) is not None,
            digest_key=self._digest_key(turn),
        )

    def _deliver(self, key: CallKey, recorded_event: RecordedEvent, event: Event) -> list[Work]:
        slot = self.records.get(key) or self._record(key)
        claim = type(event) is ClaimRequested
        if claim and asks_for_intents(self.scope.turn(key.turn_ref)):
            # Queued whatever the call's state, degraded or not: the queue is the log's order
            # of claims alone, the same live and on every replay (rule 12).
            self.intents.claimed(key, recorded_event.position)
        if type(event) is CallEnded and slot.ended_at is None:
            slot.ended_at = recorded_event.position
        if slot.degraded:
            slot.skipped = recorded_event.position
            return []
        received = Input(
            event=event,
            position=recorded_event.position,
            event_id=recorded_event.event_id,
            at=recorded_event.recorded_at,
        )
        if slot.phase is Phase.ABSENT and recorded_event.stream == key.response_ref.stream:
            slot.opened_version = recorded_event.version
        context = self._context(slot, event)
        if slot.validating is not None or slot.held or (claim and self.intents.waits(key)):
            slot.hold(received, context)
            return []
        return self._step(slot, received, context)

    def _drain(self, slot: Slot) -> list[Work]:
        """Decide the inputs held back for the call, in order, until one must wait again: for
        a validation, or a claim for the decisions of earlier claims (rule 12)."""
        work: list[Work] = []
        while slot.held and slot.validating is None:
            received, context = slot.held[0]
            if type(received.event) is ClaimRequested and self.intents.waits(slot.key):
                break
            slot.release()
            work.extend(self._step(slot, received, context))
        return work

    def _release(self, key: CallKey | None) -> list[Work]:
        """Decide what the call first in its conversation's queue of claims held back."""
        slot = None if key is None else self.records.get(key)
        if slot is None or slot.degraded:
            return []
        return self._drain(slot)

    def _with_intent(self, slot: Slot, context: CallContext) -> CallContext:
        """The context of a claim, with the call dispatched already for its intent (rule 12)."""
        scope = scope_of(context.turn, slot.tool)
        if scope is None or not slot.arguments_digest:
            return context
        intent = intent_of(slot.key, scope, slot.tool, slot.arguments_digest)
        earlier = self.intents.earlier(intent)
        return context if earlier is None else context._replace(duplicate_of=earlier)

    def _step(
        self, slot: Slot, received: Input | ValidationOutcome, context: CallContext
    ) -> list[Work]:
        key = slot.key
        acting = self.live and self.owns(key.turn_ref)
        previous = self.deadline(slot) if acting else None
        was_live = slot.live
        if isinstance(received, Input) and type(received.event) is ClaimRequested:
            context = self._with_intent(slot, context)
        decisions = decide(slot, received, context)
        for decision in decisions:
            slot.absorb(decision)
        self._reindex(slot, was_live)
        written = recorded(decisions)
        slot.expect(written)
        work: list[Work] = []
        if acting and written and not isinstance(received, ValidationOutcome):
            work.append(AppendDecisions(key=key, decisions=tuple(written), position=self.position))
        for decision in decisions:
            if isinstance(decision, ValidationRequested):
                slot.validation_context = context
                if acting:
                    work.append(RunValidation(key=key, request=decision, context=context))
        if acting:
            # Timers look the deadline up again when they fire, so only a deadline that is new
            # or earlier than before needs scheduling; a later one is found by the earlier timer.
            deadline = self.deadline(slot)
            if deadline is not None and (previous is None or deadline < previous):
                work.append(ScheduleDeadline(key=key, at=deadline))
        return work

    def _reindex(self, slot: Slot, was_live: bool) -> None:
        """Index a call that became live, drop one that ended; note when a turn goes idle."""
        now_live = slot.live
        if was_live and not now_live:
            key = slot.key
            self._index.remove(key)
            turn = key.turn_ref
            if slot.phase is Phase.DISPATCHED:
                self._running[key] = None
                count(self._running_in, turn, 1)
            else:
                self._note_if_idle(turn)
        elif now_live and not was_live:
            key = slot.key
            self._idle.pop(key.turn_ref, None)
            self._index.add(key)
            if not slot.counted:
                slot.counted = True
                count(self._counted_in_turn, key.turn_ref, 1)
                count(self._counted_in_tenant, key.tenant, 1)

    def _note_if_idle(self, turn: TurnRef) -> None:
        if (
            turn not in self._index.by_turn
            and turn not in self._running_in
            and self.scope.turn(turn) is not None
        ):
            assert self._at is not None
            self._idle[turn] = self._at

    def _outcome(
        self,
        event: ExecutionCompleted | ExecutionFailed | ExecutionStopped | ExecutionOutcomeUnknown,
    ) -> None:
        """The outcome of a dispatch: its call no longer runs."""
        key = event.key
        slot = self.records.get(key)
        if key not in self._running or slot is None or slot.claim_id != event.claim_id:
            if self.scope.turn(key.turn_ref) is not None and (
                slot is None
                or slot.phase is not Phase.DISPATCHED
                or slot.claim_id != event.claim_id
            ):
                # The runtime records an outcome only for the claim it dispatched; of a call
                # of a turn known here, that dispatch is in view.
                raise LogDamaged(
                    self.position,
                    f"an outcome ({event.TAG}) of claim {event.claim_id!r} of call"
                    f" {key.stream!r}, which was never dispatched under that claim",
                )
            # A second outcome of the dispatch, which the runtime refuses: it reaches the log
            # only from a process buried while it still ran, reporting late. The first stands.
            return
        del self._running[key]
        turn = key.turn_ref
        count(self._running_in, turn, -1)
        self._note_if_idle(turn)

    def _decision(self, recorded_event: RecordedEvent, event: Event) -> list[Work]:
        work = self._decided(recorded_event, event)
        # Where a decision is read back, not where it is made: a call that takes its decisions
        # as recorded notes its dispatch at the same position as one that decides (rule 12).
        key = _key_of(event)
        if type(event) is CallDispatched:
            self._note_dispatch(key)
        first = self.intents.read_back(key, getattr(event, "cause", 0))
        if first is not None:
            work.extend(self._release(first))
        return work

    def _note_dispatch(self, key: CallKey) -> None:
        slot = self.records.get(key)
        if slot is None:
            return
        if scope_of(self.scope.turn(key.turn_ref), slot.tool) is not None:
            self.intents.dispatched(key, slot.tool, slot.arguments_digest)

    def _decided(self, recorded_event: RecordedEvent, event: Event) -> list[Work]:
        self._at = recorded_event.recorded_at
        key = _key_of(event)
        if isinstance(event, CallFailed) and event.reason is FailReason.LIMIT_EXCEEDED:
            self._note_over_limit(key)
        slot = self.records.get(key)
        if slot is not None and slot.counted and isinstance(event, _ENDING_TYPES):
            self._uncount(slot)
        if slot is None:
            if self.scope.turn(key.turn_ref) is None:
                # A call of a retired turn, or of one never started: nothing of it is judged
                # any more.
                return []
            slot = self._record(key)
            slot.degraded = True
        slot.version = recorded_event.version
        cause = getattr(event, "cause", 0)
        if slot.degraded or cause <= slot.trusted_through:
            _check_implied(slot, event, recorded_event.position, self.scope.turn(key.turn_ref))
            was_live = slot.live
            slot.absorb(event)
            if slot.degraded:
                slot.expected = ()
            self._reindex(slot, was_live)
            if slot.degraded and isinstance(event, CallValidated) and event.arguments:
                # The validated arguments are recorded whole: what was lost can no longer
                # matter.
                parsed = parse_arguments(
                    event.arguments,
                    self.limits.arguments,
                    digest_key=self._digest_key(self.scope.turn(key.turn_ref)),
                )
                assert isinstance(parsed, ParsedArguments)
                slot.take_arguments(parsed)
                slot.recovering = True
            elif slot.degraded and slot.terminal_phase:
                slot.recovering = True
            # Replaying, it decides again only once the decisions of every input it skipped
            # are read: the call's decisions are written in the order of their causes, but may
            # land after later inputs, which its actor decided knowing them.
            if slot.recovering and (self.live or cause >= slot.skipped):
                self._recover_from_degradation(slot, recorded_event.position)
            return []
        wanted = slot.next_expected()
        if wanted is not None:
            if _lifetime_recorded(wanted, event):
                # The lifetime a call was made ready for is the one its decision recorded,
                # whatever ``ready_lifetime`` the runtime reading the log is given now.
                assert isinstance(event, CallReady)
                slot.ready_expires = event.expires_at
            elif not _recorded_as(wanted, recorded_event, event):
                raise ReplayDivergence(
                    key, recorded_event.position, _describe(wanted), _describe(event)
                )
            if slot.phase is Phase.ABSENT:
                self._forget_if_stray(slot)
            return []
        validating = slot.validating
        if validating is not None and isinstance(event, CallValidated | CallFailed | EditRefused):
            if event.cause != validating.cause:
                raise ReplayDivergence(
                    key,
                    recorded_event.position,
                    f"the answer to the validation of position {validating.cause}",
                    _describe(event),
                )
            return self._answer(slot, recorded_event, event)
        raise ReplayDivergence(key, recorded_event.position, "no decision", _describe(event))

    def _uncount(self, slot: Slot) -> None:
        slot.counted = False
        key = slot.key
        count(self._counted_in_turn, key.turn_ref, -1)
        count(self._counted_in_tenant, key.tenant, -1)

    def _note_over_limit(self, key: CallKey) -> None:
        # Where the failure is read back from the log, not where it is decided: a call that
        # takes its decisions as recorded notes it at the same position as one that decides.
        turn = self.scope.turn(key.turn_ref)
        if turn is not None and turn.rules >= 3:
            self.responses.passed_limit(key)

    def over_limit(self, response: ResponseRef) -> CallKey | None:
        """The call of the response that passed a limit on live calls, after which no call of
        it opens any more; None while none did."""
        return self.responses.over_limit(response)

    @staticmethod
    def _recover_from_degradation(slot: Slot, position: int) -> None:
        # Later inputs are decided again; the answers to those that came meanwhile are taken as
        # recorded, inputs held back before it degraded included: held any longer, they would
        # hold back every later one.
        slot.degraded = False
        slot.recovering = False
        slot.trusted_through = position
        slot.held = ()

    def _answer(
        self,
        slot: Slot,
        recorded_event: RecordedEvent,
        event: CallValidated | CallFailed | EditRefused,
    ) -> list[Work]:
        if isinstance(event, CallValidated):
            result = ValidationResult(needs_confirmation=event.needs_confirmation)
        else:
            result = ValidationResult(failure=event.reason, detail=event.detail)
        context = slot.validation_context
        assert context is not None
        work = self._step(slot, ValidationOutcome(result=result), context)
        first = slot.next_expected()
        if first is None or not _recorded_as(first, recorded_event, event):
            raise ReplayDivergence(
                slot.key,
                recorded_event.position,
                "no decision" if first is None else _describe(first),
                _describe(event),
            )
        slot.validation_context = None
        work.extend(self._drain(slot))
        return work

    def _record(self, key: CallKey) -> Slot:
        slot = self.records[key] = Slot(key)
        self._calls_of_turn.add(key)
        turn = key.turn_ref
        byte, bit = _bit_of(turn)
        if self.scope.turn(turn) is None or self._forgotten_in[byte] & bit:
            slot.version = None
        return slot

    def _forget_if_stray(self, slot: Slot) -> None:
        """Forget a call never opened whose turn is unknown, once nothing of it is pending."""
        key = slot.key
        turn = key.turn_ref
        if (
            slot.expected
            or slot.held
            or slot.degraded
            or slot.validating is not None
            or self.scope.turn(turn) is not None
        ):
            return
        del self.records[key]
        self._calls_of_turn.remove(key)
        byte, bit = _bit_of(turn)
        self._forgotten_in[byte] |= bit

    def _retire(self, turn: TurnRef) -> list[Work]:
        """Forget a turn without a live call, and every call of it (``TurnRetired``); a claim
        that waited for the decision of a claim of one of its calls is decided now."""
        if self.scope.turn(turn) is None or turn in self._index.by_turn or turn in self._running_in:
            return []
        records = self.records
        for key in self._calls_of_turn.take(turn):
            if records[key].counted:
                self._uncount(records[key])
            del records[key]
        self.scope.retire(turn)
        self.responses.retire(turn)
        self._idle.pop(turn, None)
        self._leases.pop(turn, None)
        for responses in (self._resumable, self._resume_points):
            for response in [response for response in responses if response.turn_ref == turn]:
                del responses[response]
        return self._release(self.intents.retire(turn))

    def _redacted(self, recorded_event: RecordedEvent) -> list[Work]:
        # A call whose input is gone can no longer be decided again: it takes its recorded
        # decisions as they are from now on. What retention kept names the call; where it kept
        # nothing, only the stream name is left.
        assert isinstance(recorded_event.event, Redacted)
        remains = recorded_event.event.remains
        if remains is not None:
            self._note_response(recorded_event, remains)
            key = _key_of(remains)
            slot = self.records.get(key) or self._record(key)
            if slot.terminal_phase or slot.phase is Phase.ABSENT:
                # A terminal call, or one never opened, judges an input by identities and
                # sequences alone, which retention keeps: what remains is decided as the whole
                # input was.
                return self._deliver(key, recorded_event, remains)
            if type(remains) is CallEnded and slot.ended_at is None:
                slot.ended_at = recorded_event.position
            slot.degraded = True
            slot.skipped = recorded_event.position
            return []
        kind, names = _stream_names(recorded_event.stream)
        if kind == "call" and len(names) == len(_CALL_KEY_FIELDS):
            named = self.records.get(CallKey(**dict(zip(_CALL_KEY_FIELDS, names, strict=True))))
            if named is not None:
                named.version = recorded_event.version
                # The redacted decision is the next one expected, whatever it said.
                if named.next_expected() is not None and named.phase is Phase.ABSENT:
                    self._forget_if_stray(named)
        elif kind == "response" and len(names) == 2:
            tenant, response = names
            for key, record in self.records.items():
                if key.tenant == tenant and key.response == response:
                    record.degraded = True
                    record.skipped = recorded_event.position
        return []

    # --- going live ---

    def go_live(self) -> list[Work]:
        """End the replay: what the actors must still do for the calls found in the log.

        Decisions made but never written (the process stopped before writing them) are
        written now; validations never answered are asked again; deadlines are set.
        """
        self.live = True
        work: list[Work] = []
        for key, slot in self.records.items():
            if slot.recovering:
                # Every decision an earlier process wrote is read: the call decides again.
                self._recover_from_degradation(slot, self.position)
            if self.owns(key.turn_ref):
                work.extend(self._resume(key, slot))
        return work

    def _resume(self, key: CallKey, slot: Slot) -> list[Work]:
        """What the call's actor must do when this process starts acting for the call."""
        work: list[Work] = []
        if slot.expected and not slot.degraded:
            work.append(
                AppendDecisions(key=key, decisions=tuple(slot.expected), position=self.position)
            )
        validating = slot.validating
        if validating is not None and slot.validation_context is not None:
            work.append(RunValidation(key=key, request=validating, context=slot.validation_context))
        deadline = self.deadline(slot)
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
        for key, slot in self.records.items():
            if key.turn_ref == event.turn:
                work.extend(self._resume(key, slot))
        return work

    def idle_turns(self, until: datetime) -> list[TurnRef]:
        """The known turns without a live or running call since ``until`` or earlier, the
        longest idle first: those a runtime may retire (``TurnRetired``) once its horizon has
        passed."""
        idle: list[TurnRef] = []
        for turn, since in self._idle.items():
            if since > until:
                break
            idle.append(turn)
        return idle

    def next_idle_after(self, until: datetime) -> datetime | None:
        """The earliest time after ``until`` at which a known turn became idle, if any."""
        for since in self._idle.values():
            if since > until:
                return since
        return None

    def idle_since(self, turn: TurnRef) -> datetime | None:
        """When the turn last became idle (no live call), if it is known and idle."""
        return self._idle.get(turn)

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
            for response in self._index.responses()
            if response not in self._resumable
            and any(
                self.records[key].needs_stream or self.awaits_response(self.records[key])
                for key in self._index.of_response(response)
            )
        ]

    # --- looking ---

    def has_outcome(self, key: CallKey) -> bool:
        """Whether the call was dispatched and an outcome of its dispatch is in the log (the
        executor's, or ``outcome_unknown``): a dispatch has one, and the first stands."""
        slot = self.records.get(key)
        return slot is not None and slot.phase is Phase.DISPATCHED and key not in self._running

    def state(self, key: CallKey) -> Slot | None:
        """The call's state: its slot, read at once (it changes with the next event folded)."""
        return self.records.get(key)

    def awaits_response(self, slot: Slot) -> bool:
        """Whether the call, validated (or being validated) at its own end, waits for its
        response to end successfully before it can be claimed (rules 7 on)."""
        # Most calls asked are in no such phase: they need no look-up of their turn.
        if slot.phase is not Phase.VALIDATED and slot.phase is not Phase.TERMINAL_CANDIDATE:
            return False
        return awaits_response(slot, self.scope.turn(slot.key.turn_ref), slot.response_end)

    def deadline(self, slot: Slot) -> datetime | None:
        """When a ``DeadlineReached`` would change the call, if ever."""
        return slot.deadline(self.limits, awaiting_response=self.awaits_response(slot))

    def ready(self, key: CallKey) -> bool:
        """Whether a claim of the call may dispatch it now: validated, confirmed where its tool
        needs it and, from rules 7, its response ended successfully."""
        slot = self.records.get(key)
        return slot is not None and slot.ready and not self.awaits_response(slot)

    def live_calls_of(self, response: ResponseRef) -> list[Slot]:
        """The calls of a response that are opened and not terminal, in the order they opened."""
        return [self.records[key] for key in self._index.of_response(response)]

    def response_settled(self, response: ResponseRef) -> bool:
        """Whether no call of the response's ingress stream (its provider response id, under
        any turn of the tenant) is still live (opened and not terminal)."""
        return response.stream not in self._index.in_response_stream

    def live_keys(self) -> list[CallKey]:
        return [key for key, slot in self.records.items() if slot.live]


_CALL_KEY_FIELDS = tuple(attribute.name for attribute in attrs.fields(CallKey))

_FORGOTTEN_BITS = 1 << 16


def _bit_of(turn: TurnRef) -> tuple[int, int]:
    """The byte and the bit standing for the turn in ``_forgotten_in``."""
    index = hash(turn) & (_FORGOTTEN_BITS - 1)
    return index >> 3, 1 << (index & 7)


def _stream_names(stream: str) -> tuple[str, list[str]]:
    """A stream name's kind and the identity components it was built of (each percent-encoded
    in it): the calls a redacted event names are found from its stream rather than by a table
    of every stream seen."""
    kind, _, rest = stream.partition("/")
    return kind, [unquote(part) for part in rest.split("/")]


def _key_of(event: Event) -> CallKey:
    key = getattr(event, "key", None)
    assert isinstance(key, CallKey)
    return key


def _response_of(event: Event) -> ResponseRef | None:
    """The provider response an ingress event belongs to (None for any other event)."""
    key = getattr(event, "key", None)
    if isinstance(key, CallKey):
        return key.response_ref
    response = getattr(event, "response", None)
    return response if isinstance(response, ResponseRef) else None


def _check_implied(slot: Slot, decision: Event, position: int, turn: TurnView | None) -> None:
    """Refuse a decision taken as recorded that the call's recorded history does not allow."""
    if isinstance(decision, CallValidated | CallDispatched):
        missing = disallowed_as_recorded(slot, decision, turn)
        if missing is not None:
            raise LogDamaged(
                position,
                f"a {decision.TAG} of call {slot.key.stream!r} that nothing allows: {missing}",
            )


def _describe(event: Event) -> str:
    return f"{event.TAG} {attrs.asdict(event, recurse=False, filter=_no_bytes)}"


def _no_bytes(attribute: attrs.Attribute[object], value: object) -> bool:
    return not isinstance(value, bytes)


def _lifetime_recorded(wanted: Event, event: Event) -> bool:
    """Whether the decision found in the log is the ``CallReady`` wanted but for the lifetime
    it records (made under another ``ready_lifetime``)."""
    return (
        type(wanted) is CallReady
        and type(event) is CallReady
        and wanted != event
        and attrs.evolve(wanted, expires_at=event.expires_at) == event
    )


def _recorded_as(wanted: Event, recorded_event: RecordedEvent, event: Event) -> bool:
    """Whether the decision found in the log is the one wanted (as retention left it)."""
    if isinstance(recorded_event.event, Redacted):
        return without_sensitive(wanted) == event
    return wanted == event
