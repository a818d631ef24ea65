"""The invariants of the contract (I1-I13), checked over a log, one event at a time.

The checker is an independent model of what the log must show: it never asks the decider or
the projections what they think, so that a bug in either (or one planted on purpose) cannot
hide from it. It reads the log in position order and, at each event, checks what that event
may claim given everything before it:

- I1: a ``dispatched`` decision follows a durable ``validated`` one (and ``confirmed`` where
  the call needs it), answers a claim of the same call and claim id, and comes after the first
  end of the call's response since its opening, which followed its own end event and was
  ``completed``;
- I2: one ``dispatched`` decision per call key at most;
- I3: no dispatch of a call whose turn was cancelled or superseded, whose response was
  quarantined, whose tool was disabled or whose tenant was stopped while it was alive, that its
  principal denied, or that had ended already;
- I4: a ``validated`` decision names exactly the bytes delivered for the call (deduplicated,
  without a gap, ended by its own end event and, in a turn of rules 6 or earlier, its response
  ended ``completed``), which a strict parser of its own accepts as an object and the tool's
  schema accepts;
- I5: confirmations and dispatches name the turn's own principal, tenant and turn;
- I6: a confirmation that counts was fresh, for the call's tool and arguments digest, and used
  once; in a turn of rules 4 on, it dispatches the call only for a claim made before it
  expired;
- I7: a dispatched call without an outcome is recorded ``outcome_unknown`` when a runtime
  restarts, and is never dispatched again;
- I9: once everything settled, every request was answered and every duplicate delivery, every
  input for a call of a stale turn or an ended call, left a rejection in the log;
- I10: a dispatched call's provider response was first seen under the call's own turn: a
  response replayed into another turn never acts again;
- I11: in a turn of rules 5 on, a stop request names the claim that dispatched its call, comes
  while the call runs (no outcome before it), once, for a stopping input (its turn cancelled or
  superseded, its response quarantined, its tool disabled, its tenant stopped); and once
  everything settled, a call that such an input concerned while it ran was asked to stop;
- I12: in a turn of rules 6 on, a call of a tool that runs one action per intent is never
  dispatched after a call of the same tool name and arguments digest, in the tool's scope (the
  turn, or the conversation), whose own tool asked for it too, while that call's turn was not
  retired; and a ``duplicate_of`` cancellation names such a call, dispatched before it;
- I13: in a turn of rules 8 on, a ready call's lifetime counts from when it became ready (its
  own end event, the first successful end of its response after it, its confirmation, whichever
  came last): an expired call never dispatches (no dispatch answers a claim made at or after
  the lifetime's end), and no ``ready`` decision lets it be claimed later than that;
- I14: on a partitioned log, every operator control of the control partition is in every
  partition of calls once (``check_partitioned_log``), where it takes effect.

A partitioned log is checked partition by partition: a call, its turn and everything addressed
to them live in one partition, where its copy of each control takes effect; I7 there also
covers the calls claimed in a process that stopped for good (``departed``).

I8 (a replay gives the live state) needs the runtime's views; the simulator checks it. On a
log whose argument payloads retention redacted, I4 checks sequences and order only (the
simulator hands the checker what was appended, before retention). Pure: no trio, no storage.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import attrs
import jsonschema_rs
from attrs import define, field, frozen

from ..actors import CallLimits, ToolDeclaration
from ..actors._schemas import compile_schema
from ..events import (
    CONTROL_TYPES,
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
    ClaimRequested,
    ConfirmationDenied,
    ConfirmationGiven,
    DeadlineReached,
    EditRefused,
    Event,
    EventRejected,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    IntentScope,
    RecordedEvent,
    Redacted,
    ResponseEnded,
    ResponseEndReason,
    ResponseQuarantined,
    ResponseRef,
    ServerToolCalled,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnRef,
    TurnRetired,
    TurnStarted,
    TurnSuperseded,
)


@frozen(kw_only=True)
class Violation:
    """One broken invariant: which (``I1``..``I13``, ``crash``, ``nondeterminism``, or
    ``tool_error`` for a tool's own code that raised), for which call key (its stream name, or
    empty), at which log position (0 where none), and how."""

    invariant: str
    key: str
    detail: str
    position: int = 0
    partition: int | None = None
    """The partition of a partitioned log the position is in (None for a log of one)."""

    def line(self) -> str:
        where = f" at position {self.position}" if self.position else ""
        if self.partition is not None:
            where = f" in partition {self.partition}{where}"
        call = f" {self.key}" if self.key else ""
        return f"{self.invariant}{call}{where}: {self.detail}"


@frozen(kw_only=True)
class Observation:
    """What an executor was handed, and the log's head when it was (for I1, I2 and I5)."""

    head: int
    key: CallKey
    turn: TurnRef
    tenant: str
    principal: str
    tool: str
    arguments_digest: str
    claim_id: str = ""
    """Empty for a ready call offered; the claim id for a dispatch received."""


_ADDRESSED_INGRESS = (CallOpened, ArgumentsAppended, CallEnded, ServerToolCalled)
_REQUESTS = (ConfirmationGiven, ConfirmationDenied, ClaimRequested, DeadlineReached)


@define
class _Input:
    position: int
    event_id: str
    at: datetime
    event: Event


@define
class _Turn:
    position: int
    principal: str
    offered: dict[str, str]
    rules: int
    intents: dict[str, IntentScope | None] = field(factory=dict)
    cancelled: int | None = None
    superseded: int | None = None

    def active_at(self, position: int) -> bool:
        return all(end is None or end >= position for end in (self.cancelled, self.superseded))


@define
class _Call:
    key: CallKey
    stop_requested: int | None = None
    """The cause of the call's stop request (I11)."""
    outcome_at: int | None = None
    ingress: list[_Input] = field(factory=list)
    requests: list[_Input] = field(factory=list)
    opened: int | None = None
    tool: str = ""
    validated: CallValidated | None = None
    validated_at: int = 0
    awaiting: CallAwaitingConfirmation | None = None
    confirmed: list[CallConfirmed] = field(factory=list)
    dispatched: list[CallDispatched] = field(factory=list)
    ended: int | None = None
    """The cause of the decision that ended the call (dispatched, cancelled, failed)."""
    answered: set[int] = field(factory=set)
    """Causes of the call's ending or confirming decisions."""
    rejected: set[str] = field(factory=set)
    outcome: str | None = None
    unknown_at: int | None = None
    redacted: bool = False
    """Retention took argument bytes of the call: they can no longer be compared."""
    delivered: dict[tuple[int | None, int, bool], dict[str, Any] | str] = field(factory=dict)
    """What ``_parsed_delivery`` found, by opening, end event and ``redacted``: a terminal
    candidate and the validated decision after it ask about the same bytes."""


class _Refused(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise _Refused
    return dict(pairs)


def _constant(_: str) -> float:
    raise _Refused


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused
    return value


def strict_json_object(data: bytes) -> dict[str, Any] | None:
    """The object these bytes hold by strict JSON rules (UTF-8 without a BOM, no repeated name,
    no NaN or infinity), or ``None``: the checker's own parser, independent of inert's."""
    if data.startswith(b"\xef\xbb\xbf"):
        return None
    try:
        value = json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_pairs,
            parse_constant=_constant,
            parse_float=_float,
        )
    except (_Refused, ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class InvariantChecker:
    """Checks I1-I7 and I9-I13 over a log fed to it in position order (``observe``).

    ``tools``: the declarations the runtime was given (their digests tell which calls need a
    confirmation and what size each allows); ``limits``: the runtime's limits.
    """

    def __init__(
        self, tools: Iterable[ToolDeclaration], limits: CallLimits, *, max_violations: int = 50
    ) -> None:
        self._declarations = {declaration.digest: declaration for declaration in tools}
        self._schemas: dict[str, jsonschema_rs.Validator | None] = {}
        self._limits = limits
        self._max = max_violations
        self.violations: list[Violation] = []
        self.steps = 0
        self.head = 0
        """The position of the last event observed."""
        self._calls: dict[CallKey, _Call] = {}
        self._turns: dict[TurnRef, _Turn] = {}
        self._latest: dict[tuple[str, str], TurnRef] = {}
        self._response_ends: dict[ResponseRef, list[tuple[int, ResponseEndReason]]] = {}
        self._response_end_times: dict[int, datetime] = {}
        self._controls: list[tuple[int, Event]] = []
        self._requests: dict[int, _Input] = {}
        self._used_confirmations: set[str] = set()
        self._dispatch_claims: dict[str, int] = {}
        # The turn each provider response (tenant, response id) was first seen under.
        self._response_turns: dict[tuple[str, str], TurnRef] = {}
        # I12: the calls dispatched for each (tenant, conversation, tool, arguments digest), of
        # tools that run one action per intent, and the turns a retirement was recorded for.
        self._ran: dict[tuple[str, str, str, str], list[CallKey]] = {}
        self._retired: set[TurnRef] = set()

    # --- reporting ---

    def _violate(self, invariant: str, key: CallKey | None, detail: str, position: int) -> None:
        if len(self.violations) < self._max:
            stream = "" if key is None else key.stream
            self.violations.append(
                Violation(invariant=invariant, key=stream, detail=detail, position=position)
            )

    # --- reading the log ---

    def observe(self, recorded: RecordedEvent) -> None:
        """Check one event, the next by position, against everything before it."""
        self.steps += 1
        self.head = recorded.position
        event = recorded.kept
        if event is None:
            return
        position = recorded.position
        if isinstance(recorded.event, Redacted) and isinstance(
            event, (*_ADDRESSED_INGRESS, CallValidated, ConfirmationGiven)
        ):
            self._call(_key(event)).redacted = True
        match event:
            case TurnStarted():
                self._turn_started(event, position)
            case TurnCancelled(turn=turn, principal=principal):
                known = self._turns.get(turn)
                if known is not None and known.principal == principal and known.cancelled is None:
                    known.cancelled = position
            case TurnSuperseded(turn=turn):
                known = self._turns.get(turn)
                if known is not None and known.superseded is None:
                    known.superseded = position
            case TurnRetired(turn=turn):
                # Void or not: what a turn retired forgets may run again (I12), and the
                # checker never claims more than the log shows.
                self._retired.add(turn)
            case ResponseEnded(response=response, reason=reason):
                self._response_ends.setdefault(response, []).append((position, reason))
                self._response_end_times[position] = recorded.recorded_at
                self._response_turns.setdefault(
                    (response.tenant, response.response), response.turn_ref
                )
            case _ if isinstance(event, CONTROL_TYPES):
                self._controls.append((position, event))
            case _ if isinstance(event, _ADDRESSED_INGRESS):
                entry = _Input(position, recorded.event_id, recorded.recorded_at, event)
                key = _key(event)
                self._call(key).ingress.append(entry)
                self._response_turns.setdefault((key.tenant, key.response), key.turn_ref)
            case _ if isinstance(event, _REQUESTS):
                entry = _Input(position, recorded.event_id, recorded.recorded_at, event)
                self._call(_key(event)).requests.append(entry)
                self._requests[position] = entry
            case _:
                self._decision_or_outcome(event, position)

    def _turn_started(self, event: TurnStarted, position: int) -> None:
        turn = event.turn
        if turn in self._turns:
            return
        conversation = (turn.tenant, turn.conversation)
        previous = self._latest.get(conversation)
        if previous is not None:
            known = self._turns[previous]
            if known.superseded is None:
                known.superseded = position
        self._latest[conversation] = turn
        offered = {tool.name: tool.digest for tool in event.tools}
        intents = {tool.name: tool.one_action_per_intent for tool in event.tools}
        self._turns[turn] = _Turn(position, event.principal, offered, event.rules, intents)

    def _call(self, key: CallKey) -> _Call:
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = _Call(key)
        return call

    def _decision_or_outcome(self, event: Event, position: int) -> None:
        match event:
            case CallCollecting(key=key, cause=cause, tool=tool):
                call = self._call(key)
                call.opened, call.tool = cause, tool
            case CallTerminalCandidate(key=key):
                self._terminal_candidate(self._call(key), event, position)
            case CallValidated(key=key):
                self._validated(self._call(key), event, position)
            case CallAwaitingConfirmation(key=key):
                self._call(key).awaiting = event
            case CallConfirmed(key=key):
                self._confirmed(self._call(key), event, position)
            case CallReady(key=key, expires_at=expires_at):
                self._ready(self._call(key), expires_at, position)
            case CallDispatched(key=key):
                self._dispatched(self._call(key), event, position)
            case CallCancelled(key=key, cause=cause, duplicate_of=earlier) if earlier is not None:
                call = self._call(key)
                call.answered.add(cause)
                if call.ended is None:
                    call.ended = cause
                self._check_duplicate(call, earlier, position)
            case CallCancelled(key=key, cause=cause) | CallFailed(key=key, cause=cause):
                call = self._call(key)
                call.answered.add(cause)
                if call.ended is None:
                    call.ended = cause
            case EventRejected(key=key, rejected_event_id=rejected):
                self._call(key).rejected.add(rejected)
            case EditRefused(key=key, confirmation_event_id=refused):
                self._call(key).rejected.add(refused)
            case CallStopRequested(key=key):
                self._stop_requested(self._call(key), event, position)
            case ExecutionCompleted(key=key) | ExecutionFailed(key=key) | ExecutionStopped(key=key):
                call = self._call(key)
                call.outcome = event.TAG
                if call.outcome_at is None:
                    call.outcome_at = position
            case ExecutionOutcomeUnknown(key=key):
                call = self._call(key)
                call.outcome = event.TAG
                call.unknown_at = position
                if call.outcome_at is None:
                    call.outcome_at = position

    # --- I11: stopping a running call ---

    def _stop_requested(self, call: _Call, event: CallStopRequested, position: int) -> None:
        key, cause = call.key, event.cause
        turn = self._turns.get(key.turn_ref)
        if turn is None or turn.rules < 5:
            self._violate("I11", key, "asked to stop in a turn of rules before 5", position)
            return
        if not any(dispatch.claim_id == event.claim_id for dispatch in call.dispatched):
            self._violate("I11", key, "asked to stop a claim that did not dispatch it", position)
            return
        if call.stop_requested is not None:
            self._violate("I11", key, "asked to stop twice", position)
        call.stop_requested = cause
        if call.outcome_at is not None and call.outcome_at < cause:
            self._violate("I11", key, "asked to stop after its outcome was recorded", position)
        if self._stopping_since_dispatch(call, cause + 1) is None:
            self._violate("I11", key, "asked to stop for no stopping input", position)

    def _stopping_since_dispatch(self, call: _Call, before: int) -> str | None:
        """What made the call unwanted after its dispatch and before ``before``, if anything."""
        turn = self._turns.get(call.key.turn_ref)
        dispatched = call.dispatched[0].cause
        if turn is None:
            return None
        for end, what in ((turn.cancelled, "cancelled"), (turn.superseded, "superseded")):
            if end is not None and end < before:
                return f"its turn was {what}"
        return self._blocked_between(call.key, call.tool, dispatched, before)

    # --- I4: what is validated is exactly what was delivered, strictly parsed ---

    def _validated(self, call: _Call, event: CallValidated, position: int) -> None:
        before = call.validated
        call.validated, call.validated_at = event, position
        key = call.key
        if event.edited_by:
            problem = self._edit_problem(call, before, event)
        else:
            problem = self._delivered_problem(call, event, position)
        if problem is not None:
            self._violate("I4", key, f"validated, yet {problem}", position)

    def _edit_problem(
        self, call: _Call, before: CallValidated | None, event: CallValidated
    ) -> str | None:
        """What is wrong with a validation of a principal's edit at confirmation, if anything:
        it follows a validation waiting for confirmation, of the arguments the confirmation
        named, and holds exactly the edit that confirmation carried, which parses strictly
        and fits the tool's schema."""
        key = call.key
        given = self._requests.get(event.cause)
        turn = self._turns.get(key.turn_ref)
        if given is None or not isinstance(given.event, ConfirmationGiven):
            return "an edit that no confirmation of the call carried"
        confirmation = given.event
        if turn is None or confirmation.principal != turn.principal:
            return "an edit by another principal than the turn's"
        if event.edited_by != confirmation.principal:
            return "an edit naming another principal than its confirmation's"
        if before is None or not before.needs_confirmation or call.confirmed:
            return "an edit of a call that was not waiting for confirmation"
        if (
            event.edited_from != before.arguments_digest
            or confirmation.arguments_digest != before.arguments_digest
        ):
            return "an edit of other arguments than those validated and shown"
        if event.tool != before.tool or event.tool_digest != before.tool_digest:
            return "an edit naming another tool"
        if confirmation.arguments is None:
            return "an edit that its confirmation did not carry" if not call.redacted else None
        if call.redacted:
            return None
        named, edited = (
            strict_json_object(event.arguments),
            strict_json_object(confirmation.arguments),
        )
        if named is None or edited is None or named != edited:
            return "its arguments are not the edit the principal gave"
        declaration = self._declarations.get(event.tool_digest)
        if declaration is not None and not self._fits(declaration, named):
            return "its edited arguments break its tool's schema"
        return None

    def _delivered_problem(self, call: _Call, event: CallValidated, position: int) -> str | None:
        key = call.key
        opened = call.opened
        if opened is None:
            return "the call was never opened"
        turn = self._turns.get(key.turn_ref)
        if turn is None or turn.position > opened:
            return "its turn was not started when it opened"
        if turn.offered.get(event.tool) != event.tool_digest or event.tool != call.tool:
            return f"tool {event.tool!r} is not the one its turn offered and the call opened"
        opening = next((entry.event for entry in call.ingress if entry.position == opened), None)
        if not isinstance(opening, CallOpened):
            return "the call did not open with a CallOpened"
        end = _own_end(call, position)
        if end is None:
            return "its own end event never arrived"
        assert isinstance(end.event, CallEnded)
        delivered = self._parsed_delivery(call, opening, end)
        if isinstance(delivered, str):
            return delivered
        # From rules 7 a call is validated at its own end; its response's end gates dispatch.
        problem = None if turn.rules >= 7 else self._response_problem(call, end.position, position)
        if problem is not None:
            return problem
        if call.redacted:
            return None
        named = strict_json_object(event.arguments)
        if named is None:
            return "its canonical arguments are not a strict JSON object"
        if named != delivered:
            return "its arguments are not the bytes delivered for the call"
        declaration = self._declarations.get(event.tool_digest)
        if (
            declaration is not None
            and declaration.max_bytes is not None
            and len(event.arguments) > declaration.max_bytes
        ):
            return (
                f"{len(event.arguments)} canonical bytes, the tool allows {declaration.max_bytes}"
            )
        if declaration is not None and not self._fits(declaration, named):
            return "its arguments break its tool's schema"
        return None

    def _response_problem(self, call: _Call, end: int, before: int) -> str | None:
        """What keeps the call's response from having ended well for it before ``before``: its
        first end since the call opened must follow the call's own end event (at ``end``) and
        be ``completed``."""
        opened = call.opened
        assert opened is not None
        response_ends = [
            (at, reason)
            for at, reason in self._response_ends.get(call.key.response_ref, ())
            if opened < at < before
        ]
        if not response_ends or response_ends[0][0] < end:
            return "its response did not end after its end event"
        if response_ends[0][1] is not ResponseEndReason.COMPLETED:
            return f"its response ended {response_ends[0][1].value}"
        return None

    def _fits(self, declaration: ToolDeclaration, arguments: dict[str, Any]) -> bool:
        """Whether the tool's schema, compiled here once, accepts the arguments."""
        digest = declaration.digest
        if digest not in self._schemas:
            self._schemas[digest] = compile_schema(declaration)
        schema = self._schemas[digest]
        return schema is None or schema.is_valid(arguments)

    def _parsed_delivery(
        self, call: _Call, opening: CallOpened, end: _Input
    ) -> dict[str, Any] | str:
        """The object the bytes delivered for the call hold by strict rules, or what is wrong."""
        asked = (call.opened, end.position, call.redacted)
        found = call.delivered.get(asked)
        if found is None:
            found = call.delivered[asked] = self._parse_delivery(call, opening, end)
        return found

    def _parse_delivery(
        self, call: _Call, opening: CallOpened, end: _Input
    ) -> dict[str, Any] | str:
        assert call.opened is not None
        assert isinstance(end.event, CallEnded)
        assembled = self._assembled(call, call.opened, end.position, opening.sequence, end.event)
        if isinstance(assembled, str):
            return assembled
        if call.redacted:
            # Retention left sizes and digests: only the sequences could be checked.
            return {}
        if len(assembled) > self._limits.max_bytes:
            return f"{len(assembled)} bytes were delivered, the limit is {self._limits.max_bytes}"
        delivered = strict_json_object(assembled)
        if delivered is None:
            return "the delivered bytes are not a strict JSON object"
        return delivered

    def _terminal_candidate(self, call: _Call, event: CallTerminalCandidate, position: int) -> None:
        """I4: only bytes the strict parser accepts become a terminal candidate."""
        opening = next(
            (entry.event for entry in call.ingress if entry.position == call.opened), None
        )
        end = next((entry for entry in call.ingress if entry.position == event.cause), None)
        if not isinstance(opening, CallOpened) or end is None:
            self._violate("I4", call.key, "a terminal candidate without its end event", position)
            return
        delivered = self._parsed_delivery(call, opening, end)
        if isinstance(delivered, str):
            self._violate("I4", call.key, f"a terminal candidate, yet {delivered}", position)

    @staticmethod
    def _assembled(
        call: _Call, opened: int, ended: int, opened_sequence: int | None, end: CallEnded
    ) -> bytes | str:
        """The bytes delivered between the opening and the end, deduplicated, or what is wrong."""
        fragments = [
            entry.event
            for entry in call.ingress
            if isinstance(entry.event, ArgumentsAppended) and opened < entry.position < ended
        ]
        positioned = [fragment for fragment in fragments if fragment.offset is not None]
        if positioned:
            if len(positioned) != len(fragments):
                return "fragments with and without offsets were mixed"
            return _by_range(positioned, opened_sequence, end, redacted=call.redacted)
        numbered: dict[tuple[int, int], bytes] = {}
        unnumbered: list[bytes] = []
        for fragment in fragments:
            if fragment.first_sequence is None or fragment.last_sequence is None:
                unnumbered.append(fragment.data)
                continue
            span = (fragment.first_sequence, fragment.last_sequence)
            if span in numbered and numbered[span] != fragment.data:
                return f"sequences {span} were delivered twice with different bytes"
            numbered.setdefault(span, fragment.data)
        if numbered and unnumbered:
            return "numbered and unnumbered fragments were mixed"
        if numbered:
            spans = sorted(numbered)
            expected = None if opened_sequence is None else opened_sequence + 1
            for first, last in spans:
                if expected is not None and first != expected:
                    return f"sequence {expected} was not delivered before the end event"
                expected = last + 1
            last_sequence = end.terminal.sequence
            if last_sequence is not None and expected != last_sequence:
                return f"sequence {expected} was not delivered before the end event"
            data = b"".join(numbered[span] for span in spans)
        else:
            data = b"".join(unnumbered)
        if end.final_arguments is not None:
            if fragments and end.final_arguments != data:
                return "the provider's final arguments differ from the bytes delivered"
            data = end.final_arguments
        return data

    # --- I5, I6: confirmations ---

    def _confirmed(self, call: _Call, event: CallConfirmed, position: int) -> None:
        key = call.key
        call.confirmed.append(event)
        call.answered.add(event.cause)
        given = self._requests.get(event.cause)
        if (
            given is None
            or not isinstance(given.event, ConfirmationGiven)
            or given.event.key != key
            or given.event_id != event.confirmation_event_id
        ):
            self._violate("I6", key, "confirmed by no confirmation of this call", position)
            return
        confirmation = given.event
        turn = self._turns.get(key.turn_ref)
        if turn is None or confirmation.principal != turn.principal:
            self._violate("I5", key, "confirmed by another principal than the turn's", position)
        if event.principal != confirmation.principal:
            self._violate("I5", key, "the confirmation names another principal", position)
        validated = call.validated
        if validated is None or not validated.needs_confirmation:
            self._violate("I6", key, "confirmed while no confirmation was awaited", position)
            return
        if confirmation.tool_digest != validated.tool_digest:
            self._violate("I6", key, "confirmed for another tool declaration", position)
        # A confirmation that edits the arguments names those it was shown: the edit's
        # validation, just before, names them as the digest it replaced.
        shown = validated.edited_from if validated.edited_by else validated.arguments_digest
        if confirmation.arguments_digest != shown:
            self._violate("I6", key, "confirmed for other arguments", position)
        if confirmation.expires_at <= given.at:
            self._violate(
                "I6", key, f"a confirmation stale when it arrived accepted ({given.at})", position
            )
        awaiting = call.awaiting
        if awaiting is not None and awaiting.expires_at <= given.at:
            self._violate("I6", key, "confirmed after the call stopped waiting", position)
        if len(call.confirmed) > 1:
            self._violate("I6", key, "confirmed twice", position)
        if given.event_id in self._used_confirmations:
            self._violate("I6", key, "a confirmation used a second time", position)
        self._used_confirmations.add(given.event_id)

    # --- I1, I2, I3, I7: dispatches ---

    def _dispatched(self, call: _Call, event: CallDispatched, position: int) -> None:
        key = call.key
        call.dispatched.append(event)
        call.answered.add(event.cause)
        claim = event.cause
        self._dispatch_claims[event.claim_id] = position
        if len(call.dispatched) > 1:
            self._violate("I2", key, f"dispatched {len(call.dispatched)} times", position)
        if call.unknown_at is not None:
            self._violate("I7", key, "dispatched again after its outcome was unknown", position)
        request = self._requests.get(claim)
        if (
            request is None
            or not isinstance(request.event, ClaimRequested)
            or request.event.key != key
            or request.event.claim_id != event.claim_id
        ):
            self._violate("I1", key, "dispatched without a claim of this call", position)
        validated = call.validated
        if validated is None:
            self._violate("I1", key, "dispatched before a durable validated decision", position)
        else:
            declaration = self._declarations.get(validated.tool_digest)
            needs = validated.needs_confirmation or (
                declaration is not None and declaration.needs_confirmation
            )
            if needs and not call.confirmed:
                self._violate("I1", key, "dispatched without the confirmation it needs", position)
        if request is not None and call.confirmed:
            self._check_confirmation_in_time(call, request, position)
        problem = self._ended_well_before(call, claim)
        if problem is not None:
            self._violate("I1", key, f"dispatched, yet {problem}", position)
        if call.ended is not None and call.ended < claim and len(call.dispatched) == 1:
            self._violate("I3", key, "dispatched after the call had ended", position)
        owner = self._response_turns.get((key.tenant, key.response))
        if owner is not None and owner != key.turn_ref:
            self._violate(
                "I10",
                key,
                f"dispatched although its response was first seen under turn {owner.stream!r}",
                position,
            )
        self._check_wanted(call, claim, position)
        self._check_intent(call, position)
        if request is not None:
            self._check_ready_in_time(call, request, position)

    def _ended_well_before(self, call: _Call, claim: int) -> str | None:
        """What keeps the call from having ended and its response from having ended well
        after it, before the claim at ``claim``, if anything."""
        if call.opened is None:
            return "the call was never opened"
        end = _own_end(call, claim)
        if end is None:
            return "its own end event never arrived before the claim"
        return self._response_problem(call, end.position, claim)

    # --- I13: a ready call's lifetime ---

    def _ready_until(self, call: _Call, before: int) -> datetime | None:
        """When the lifetime of a call of a turn of rules 8 on, ready before ``before``, ends:
        the ready lifetime from when it became ready (its own end event, the first successful
        end of its response after it, its confirmation where it has one, whichever came last);
        None where its turn's rules bound no lifetime or it was not ready."""
        turn = self._turns.get(call.key.turn_ref)
        if turn is None or turn.rules < 8 or call.opened is None:
            return None
        end = _own_end(call, before)
        if end is None:
            return None
        ends = [
            (at, reason)
            for at, reason in self._response_ends.get(call.key.response_ref, ())
            if end.position < at < before
        ]
        if not ends or ends[0][1] is not ResponseEndReason.COMPLETED:
            return None
        since = max(end.at, self._response_end_times[ends[0][0]])
        given = self._requests.get(call.confirmed[0].cause) if call.confirmed else None
        if given is not None:
            since = max(since, given.at)
        return since + self._limits.ready_lifetime

    def _ready(self, call: _Call, expires_at: datetime, position: int) -> None:
        until = self._ready_until(call, position)
        if until is None:
            self._violate("I13", call.key, "recorded ready, yet it was not ready", position)
        elif expires_at > until:
            self._violate(
                "I13",
                call.key,
                f"recorded ready until {expires_at}, past the end of its lifetime ({until})",
                position,
            )

    def _check_ready_in_time(self, call: _Call, claim: _Input, position: int) -> None:
        until = self._ready_until(call, claim.position)
        if until is not None and claim.at >= until:
            self._violate(
                "I13",
                call.key,
                f"dispatched for a claim at {claim.at}, after its ready lifetime ended ({until})",
                position,
            )

    # --- I12: one action per intent ---

    def _intent(self, call: _Call) -> tuple[IntentScope, tuple[str, str, str, str]] | None:
        """The scope and intent of a validated call whose tool, as its turn offered it, runs
        one action per intent (in a turn of rules 6 on); None for any other call."""
        key, validated = call.key, call.validated
        turn = self._turns.get(key.turn_ref)
        if validated is None or turn is None or turn.rules < 6:
            return None
        scope = turn.intents.get(validated.tool)
        if scope is None:
            return None
        return scope, (key.tenant, key.conversation, validated.tool, validated.arguments_digest)

    def _ran_before(
        self, key: CallKey, scope: IntentScope, intent: tuple[str, str, str, str]
    ) -> list[CallKey]:
        """The calls of the intent dispatched so far, in the scope, of turns not retired."""
        return [
            earlier
            for earlier in self._ran.get(intent, ())
            if earlier != key
            and earlier.turn_ref not in self._retired
            and (scope is IntentScope.CONVERSATION or earlier.turn == key.turn)
        ]

    def _check_intent(self, call: _Call, position: int) -> None:
        found = self._intent(call)
        if found is None:
            return
        scope, intent = found
        ran = self._ran_before(call.key, scope, intent)
        if ran:
            self._violate(
                "I12",
                call.key,
                f"dispatched although {ran[0].stream} ran the same intent before, in its"
                f" {scope.value}",
                position,
            )
        self._ran.setdefault(intent, []).append(call.key)

    def _check_duplicate(self, call: _Call, earlier: CallKey, position: int) -> None:
        found = self._intent(call)
        if found is None or earlier not in self._ran_before(call.key, *found):
            self._violate(
                "I12",
                call.key,
                f"cancelled as a duplicate of {earlier.stream}, which did not run its intent"
                " before, in its tool's scope",
                position,
            )

    def _check_confirmation_in_time(self, call: _Call, claim: _Input, position: int) -> None:
        turn = self._turns.get(call.key.turn_ref)
        given = self._requests.get(call.confirmed[0].cause)
        if turn is None or turn.rules < 4 or given is None:
            return
        assert isinstance(given.event, ConfirmationGiven)
        if given.event.expires_at <= claim.at:
            self._violate(
                "I6",
                call.key,
                f"dispatched for a claim at {claim.at}, after its confirmation expired"
                f" ({given.event.expires_at})",
                position,
            )

    def _check_wanted(self, call: _Call, claim: int, position: int) -> None:
        key = call.key
        turn = self._turns.get(key.turn_ref)
        if turn is None:
            self._violate("I4", key, "dispatched for a turn never started", position)
            return
        if turn.cancelled is not None and turn.cancelled < claim:
            self._violate("I3", key, "dispatched after its turn was cancelled", position)
        if turn.superseded is not None and turn.superseded < claim:
            self._violate("I4", key, "dispatched after a newer turn superseded its own", position)
        opened = call.opened if call.opened is not None else 0
        blocked = self._blocked_between(key, call.tool, opened, claim)
        if blocked is not None:
            self._violate("I3", key, f"dispatched although {blocked}", position)
        for entry in call.requests:
            if (
                isinstance(entry.event, ConfirmationDenied)
                and entry.event.principal == turn.principal
                and opened < entry.position < claim
            ):
                self._violate("I3", key, "dispatched after its principal denied it", position)

    def _blocked_between(self, key: CallKey, tool: str, opened: int, claim: int) -> str | None:
        """The operator control that applied to the call while it was alive, if any."""
        stopped = False
        disabled: set[str | None] = set()
        looked_at_opening = False
        for position, control in self._controls:
            if position >= claim:
                break
            if position > opened and not looked_at_opening:
                looked_at_opening = True
                if stopped or disabled:
                    return "an operator control forbade it when it opened"
            alive = position > opened
            match control:
                case ResponseQuarantined(response=response, tenant=tenant):
                    if response == key.response and tenant in (None, key.tenant):
                        return "its response was quarantined"
                case TenantStopped(tenant=tenant) if tenant == key.tenant:
                    if alive:
                        return "its tenant was stopped"
                    stopped = True
                case TenantResumed(tenant=tenant) if tenant == key.tenant:
                    stopped = False
                case ToolDisabled(tool=name, tenant=tenant) if name == tool and tenant in (
                    None,
                    key.tenant,
                ):
                    if alive:
                        return "its tool was disabled"
                    disabled.add(tenant)
                case ToolEnabled(tool=name, tenant=tenant) if name == tool:
                    disabled.discard(tenant)
        if not looked_at_opening and (stopped or disabled):
            return "an operator control forbade it when it opened"
        return None

    # --- what executors were handed ---

    def observed(self, observation: Observation) -> None:
        """Check a ready call offered or a dispatch received, against the log up to then.

        Call it after the whole log up to ``observation.head`` was observed.
        """
        key = observation.key
        call = self._calls.get(key)
        turn = self._turns.get(key.turn_ref)
        head = observation.head
        kind = "dispatch" if observation.claim_id else "ready call"
        if call is None or call.validated is None or call.validated_at > head:
            self._violate("I1", key, f"a {kind} handed out before a validated decision", head)
            return
        validated = call.validated
        if validated.needs_confirmation and not call.confirmed:
            self._violate("I1", key, f"a {kind} handed out before its confirmation", head)
        if turn is None or (
            observation.turn != key.turn_ref
            or observation.tenant != key.tenant
            or observation.principal != turn.principal
        ):
            self._violate("I5", key, f"a {kind} names another turn, tenant or principal", head)
        if observation.tool != validated.tool or (
            observation.arguments_digest != validated.arguments_digest
        ):
            self._violate("I4", key, f"a {kind} names other arguments than validated", head)
        if observation.claim_id:
            written = self._dispatch_claims.get(observation.claim_id)
            if written is None or written > head:
                self._violate("I1", key, "a dispatch handed out before it was durable", head)

    # --- I7 at a restart, I9 once settled ---

    def recovered(self, head: int) -> None:
        """After a runtime restarted: every dispatched call has an outcome, if only unknown."""
        for call in self._calls.values():
            if call.dispatched and call.outcome is None:
                self._violate(
                    "I7", call.key, "dispatched, without an outcome after a restart", head
                )

    def departed(self, processes: Iterable[str]) -> None:
        """Once everything settled, after these processes stopped for good: every call
        dispatched for a claim made in one of them has an outcome, if only unknown (I7)."""
        gone = frozenset(processes)
        for call in self._calls.values():
            if not call.dispatched or call.outcome is not None:
                continue
            claim = self._requests.get(call.dispatched[0].cause)
            made_in = (
                claim.event.process if claim and isinstance(claim.event, ClaimRequested) else None
            )
            if made_in is not None and made_in in gone:
                self._violate(
                    "I7",
                    call.key,
                    f"dispatched in process {made_in!r}, which stopped, and without an outcome",
                    self.head,
                )

    def settled(self) -> None:
        """Once everything in the log was answered: every input accounted for (I9), every call
        that became unwanted while it ran asked to stop (I11)."""
        for call in self._calls.values():
            self._check_answers(call)
            self._check_asked_to_stop(call)

    def _check_asked_to_stop(self, call: _Call) -> None:
        turn = self._turns.get(call.key.turn_ref)
        if not call.dispatched or call.stop_requested is not None or turn is None or turn.rules < 5:
            return
        # Up to its outcome, or to the end of the log.
        until = call.outcome_at if call.outcome_at is not None else self.head + 1
        why = self._stopping_since_dispatch(call, until)
        if why is not None:
            self._violate("I11", call.key, f"never asked to stop, although {why}", until)

    def _check_answers(self, call: _Call) -> None:
        key = call.key
        for entry in call.requests:
            if entry.event_id in call.rejected:
                continue
            match entry.event:
                case ClaimRequested() | ConfirmationDenied() | DeadlineReached():
                    answered = entry.position in call.answered
                case ConfirmationGiven():
                    answered = any(
                        confirmed.confirmation_event_id == entry.event_id
                        for confirmed in call.confirmed
                    )
                case _:
                    answered = True
            if not answered and not isinstance(entry.event, DeadlineReached):
                self._violate(
                    "I9", key, f"{entry.event.TAG} neither applied nor rejected", entry.position
                )
            if not answered and call.ended is not None and entry.position > call.ended:
                self._violate(
                    "I9", key, f"{entry.event.TAG} for an ended call not rejected", entry.position
                )
        seen: list[Event] = []
        turn = self._turns.get(key.turn_ref)
        for entry in call.ingress:
            event = entry.event
            rejected = entry.event_id in call.rejected
            opened = call.opened is not None and call.opened <= entry.position
            if not rejected and call.ended is not None and entry.position > call.ended:
                self._violate(
                    "I9", key, f"{event.TAG} for an ended call not rejected", entry.position
                )
            elif (
                not rejected
                and not opened
                and (turn is None or not turn.active_at(entry.position))
                and (turn is None or turn.position < entry.position)
            ):
                self._violate(
                    "I9", key, f"{event.TAG} for a stale turn not rejected", entry.position
                )
            elif (
                not rejected
                and opened
                and call.opened != entry.position
                and _delivered_before(seen, event)
            ):
                self._violate("I9", key, f"a repeated {event.TAG} not rejected", entry.position)
            if opened:
                seen.append(event)


def _own_end(call: _Call, before: int) -> _Input | None:
    """The call's first end event after its opening and before ``before``, if any."""
    opened = call.opened
    assert opened is not None
    for entry in call.ingress:
        if isinstance(entry.event, CallEnded) and opened < entry.position < before:
            return entry
    return None


def _delivered_before(seen: list[Event], later: Event) -> bool:
    """Whether ``later`` delivers again what the events ``seen`` delivered: for a fragment with
    an offset, bytes that earlier fragments covered between them, however they were chunked."""
    if isinstance(later, ArgumentsAppended) and later.offset is not None:
        ranges = sorted(
            (event.offset, event.offset + len(event.data))
            for event in seen
            if isinstance(event, ArgumentsAppended) and event.offset is not None
        )
        start, stop = later.offset, later.offset + len(later.data)
        if start == stop:
            return any(low <= start <= high for low, high in ranges)
        for low, high in ranges:
            if low <= start < high:
                start = high
            if start >= stop:
                return True
        return False
    return any(_same_delivery(earlier, later) for earlier in seen)


def _by_range(
    fragments: list[ArgumentsAppended],
    opened_sequence: int | None,
    end: CallEnded,
    *,
    redacted: bool,
) -> bytes | str:
    """The bytes fragments with offsets delivered, each byte once, or what is wrong: a byte
    delivered twice with different values, a byte or a sequence missing before the end."""
    spans = sorted(
        (fragment.first_sequence, fragment.last_sequence)
        for fragment in fragments
        if fragment.first_sequence is not None and fragment.last_sequence is not None
    )
    if spans:
        expected = spans[0][0] if opened_sequence is None else opened_sequence + 1
        for first, last in spans:
            if first > expected:
                return f"sequence {expected} was not delivered before the end event"
            expected = max(expected, last + 1)
        if end.terminal.sequence is not None and expected != end.terminal.sequence:
            return f"sequence {expected} was not delivered before the end event"
    if redacted:
        return b""
    size = max((fragment.offset or 0) + len(fragment.data) for fragment in fragments)
    data = bytearray(size)
    filled = bytearray(size)
    for fragment in fragments:
        assert fragment.offset is not None
        start, stop = fragment.offset, fragment.offset + len(fragment.data)
        covered = filled[start:stop]
        # Almost every fragment is new bytes or a repeat of bytes all delivered before: whole
        # slices tell those apart, and only a partial or unequal overlap needs the loop over
        # each byte, which was the checker's slowest.
        if 1 not in covered:
            data[start:stop], filled[start:stop] = fragment.data, b"\x01" * (stop - start)
            continue
        if 0 not in covered and data[start:stop] == fragment.data:
            continue
        for index, value in enumerate(fragment.data):
            at = start + index
            if filled[at] and data[at] != value:
                return f"byte {at} was delivered twice with different values"
            data[at], filled[at] = value, 1
    if 0 in filled:
        return f"byte {filled.index(0)} was not delivered before the end event"
    return bytes(data)


def _same_delivery(earlier: Event, later: Event) -> bool:
    """Whether ``later`` delivers again what ``earlier`` delivered."""
    match earlier, later:
        case ArgumentsAppended(), ArgumentsAppended():
            return (
                later.first_sequence is not None
                and earlier.first_sequence is not None
                and earlier.last_sequence is not None
                and later.last_sequence is not None
                and earlier.first_sequence <= later.first_sequence
                and later.last_sequence <= earlier.last_sequence
            )
        case CallEnded(), CallEnded():
            return earlier.terminal == later.terminal
        case CallOpened(), CallOpened():
            return earlier.tool == later.tool
    return False


def _key(event: Event) -> CallKey:
    key = getattr(event, "key", None)
    assert isinstance(key, CallKey)
    return key


def check_log(
    records: Iterable[RecordedEvent],
    tools: Iterable[ToolDeclaration],
    limits: CallLimits,
    *,
    observations: Mapping[int, list[Observation]] | None = None,
    restarts: Iterable[int] = (),
) -> InvariantChecker:
    """Check a whole, settled log: every event in order, what executors were handed (by the
    log's head when they were), and the log as each restart left it (by its head then)."""
    checker = InvariantChecker(tools, limits)
    pending = dict(observations or {})
    recovered = sorted(restarts)
    for recorded in records:
        checker.observe(recorded)
        for observation in pending.pop(recorded.position, ()):
            checker.observed(observation)
        while recovered and recovered[0] <= recorded.position:
            checker.recovered(recovered.pop(0))
    for head in sorted(pending):
        for observation in pending[head]:
            checker.observed(observation)
    checker.settled()
    return checker


CONTROL_PARTITION = 0
"""The partition of the heartbeats and the operator controls (as ``inert.log`` numbers it: the
checker imports no storage)."""


@frozen(kw_only=True)
class PartitionedCheck:
    """What ``check_partitioned_log`` found: the violations of every partition, each naming
    its partition, and the events checked in all of them."""

    violations: tuple[Violation, ...]
    steps: int


def check_partitioned_log(
    partitions: Mapping[int, Iterable[RecordedEvent]],
    tools: Iterable[ToolDeclaration],
    limits: CallLimits,
    *,
    observations: Mapping[int, Mapping[int, list[Observation]]] | None = None,
    departed: Iterable[str] = (),
) -> PartitionedCheck:
    """Check a whole, settled partitioned log: each partition of calls (1 to ``P``) as a log of
    its own (its positions, its copies of the controls, the observations made at its heads),
    and the control partition (0) against them all (I14: every control there is in every
    partition of calls, once). ``departed``: the processes that stopped for good, whose
    dispatched calls must have an outcome (I7).

    A call lives in one partition with its turn and everything addressed to it, and a control
    takes effect in a partition where its copy is: nothing in one partition's invariants
    depends on the order of another's events.
    """
    gone = tuple(departed)
    tools = tuple(tools)
    seen = {number: list(records) for number, records in partitions.items()}
    violations: list[Violation] = []
    steps = 0
    controls = Counter(
        (recorded.stream, recorded.event)
        for recorded in seen.get(CONTROL_PARTITION, ())
        if isinstance(recorded.event, CONTROL_TYPES)
    )
    for number in sorted(seen):
        if number == CONTROL_PARTITION:
            steps += len(seen[number])
            continue
        checker = check_log(
            seen[number], tools, limits, observations=(observations or {}).get(number)
        )
        checker.departed(gone)
        steps += checker.steps
        violations.extend(attrs.evolve(v, partition=number) for v in checker.violations)
        copied = Counter(
            (recorded.stream, recorded.event)
            for recorded in seen[number]
            if isinstance(recorded.event, CONTROL_TYPES)
        )
        if copied != controls:
            missing = sum((controls - copied).values())
            extra = sum((copied - controls).values())
            violations.append(
                Violation(
                    invariant="I14",
                    key="",
                    detail=f"{missing} controls of the control partition are not in the"
                    f" partition, {extra} are more than once or not in the control partition",
                    partition=number,
                )
            )
    return PartitionedCheck(violations=tuple(violations), steps=steps)
