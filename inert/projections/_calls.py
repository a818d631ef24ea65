"""What the ledger keeps of one call while it folds, and how each decision changes it.

The ledger's rows and transitions are frozen values; making new ones for every event of a long
log would be most of what folding it costs. So a call's row is kept as a mutable record that
each decision changes in place, and its transitions as tuples; both become the public values
only when they are read. Like those, they hold counts, sizes, digests and reasons, never an
argument value.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias

from ..events import (
    CallAwaitingConfirmation,
    CallCancelled,
    CallCollecting,
    CallConfirmed,
    CallDispatched,
    CallFailed,
    CallKey,
    CallTerminalCandidate,
    CallValidated,
    DiscardReason,
    EditRefused,
    EventRejected,
    EventsDiscarded,
    FailReason,
    Phase,
)
from ._rows import Dispatch, LedgerRow, Outcome, terminal_label

_VALIDATION_FAILURES = frozenset(
    {
        FailReason.SCHEMA_INVALID,
        FailReason.BUSINESS_INVALID,
        FailReason.PERMISSION_DENIED,
        FailReason.VALIDATION_TIMEOUT,
        FailReason.VALIDATOR_ERROR,
        FailReason.UNKNOWN_TOOL,
    }
)

Decision = (
    CallCollecting
    | CallTerminalCandidate
    | CallValidated
    | CallAwaitingConfirmation
    | CallConfirmed
    | CallDispatched
    | CallCancelled
    | CallFailed
)

Step: TypeAlias = tuple[int, str, Phase | None, str]
"""A transition as the ledger keeps it: position, event type, state and detail."""


class Call:
    """Everything the ledger holds of one call, in one record: an event costs one lookup of its
    key, and a live call one object.

    The row's columns after the key's are slots of the same names (from ``tool`` to
    ``outcome``); ``state`` is ``None`` while the call has no row, until its actor first decides
    on it. ``history`` is the
    one transition recorded, or the list of them once there are more. ``public`` is the row as
    last read, kept until the row or what was received changes.

    While the call receives fragments (before its row, and while its row is collecting),
    ``taken`` holds position, fragments and size of each fragment event counted, three integers
    a position, ascending as the log hands them out: the actor's answer to a fragment comes
    later in the log, and a fragment it rejects (a duplicate delivery, a stale turn) is taken
    back out. ``fragments`` and ``bytes`` are then what was received and not taken back. A
    fragment with an offset counts the bytes it adds to the ranges seen, so that a delivery
    chunked otherwise is not counted twice; the ranges are kept as the end of the one range from
    the start (``end``) until a fragment leaves a gap or overlaps (``covered``).
    """

    __slots__ = (
        "bytes",
        "claim",
        "covered",
        "dispatch",
        "end",
        "fragments",
        "history",
        "key",
        "opened_at",
        "outcome",
        "parse",
        "public",
        "state",
        "taken",
        "terminal_event",
        "terminal_reason",
        "tool",
        "validation",
    )

    def __init__(self, key: CallKey) -> None:
        self.key = key
        self.history: Step | list[Step] | None = None
        # An outcome counts only for the claim that dispatched the call: at most one exists.
        self.claim: str | None = None
        self.public: LedgerRow | None = None
        self.opened_at = 0
        """The position of the decision that gave the call its row: rows are read in its order."""
        self.tool = ""
        self.state: Phase | None = None
        self.fragments = 0
        self.bytes = 0
        self.terminal_event: str | None = None
        self.terminal_reason: str | None = None
        self.parse: str | None = None
        self.validation: str | None = None
        self.dispatch: Dispatch = "inert"
        self.outcome: Outcome | None = None
        self.taken: array[int] | None = None
        self.end = 0
        self.covered: list[tuple[int, int]] | None = None

    def open_row(self, tool: str, position: int) -> None:
        """Give the call its row, collecting, with what it received so far."""
        self.tool = tool
        self.state = Phase.COLLECTING
        self.opened_at = position

    def receive(self) -> None:
        """Count fragments from none (a row past collecting kept its own counts)."""
        self.taken = array("q")
        self.end = 0
        self.covered = None
        self.fragments = 0
        self.bytes = 0

    def stop_receiving(self) -> None:
        """Keep the counts as they are, and nothing to take fragments back with."""
        self.taken = None
        self.end = 0
        self.covered = None

    def cover(self, offset: int, length: int) -> int:
        """Take the range in; how many of its bytes no range seen held."""
        start, stop = offset, offset + length
        covered = self.covered
        if covered is None:
            if start == self.end:
                self.end = stop
                return length
            covered = self.covered = [(0, self.end)] if self.end else []
        if not covered or start >= covered[-1][1]:
            # In order, the usual case: the range extends the last one or follows it.
            if covered and start == covered[-1][1]:
                covered[-1] = (covered[-1][0], stop)
            elif length:
                covered.append((start, stop))
            return length
        seen = sum(max(0, min(stop, high) - max(start, low)) for low, high in covered)
        merged: list[tuple[int, int]] = []
        for low, high in sorted([*covered, (start, stop)]):
            if merged and low <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], high))
            else:
                merged.append((low, high))
        self.covered = merged
        return length - seen

    def add(self, position: int, fragments: int, size: int) -> None:
        """Count a fragment event (receiving); ``position`` is past every one counted."""
        assert self.taken is not None
        self.taken.extend((position, fragments, size))
        self.fragments += fragments
        self.bytes += size

    def drop(self, position: int) -> None:
        """Take a counted fragment event back out (nothing if none is at ``position``)."""
        taken = self.taken
        if taken is None:
            return
        low, high = 0, len(taken) // 3
        while low < high:
            middle = (low + high) // 2
            if taken[3 * middle] < position:
                low = middle + 1
            else:
                high = middle
        at = 3 * low
        if at < len(taken) and taken[at] == position:
            self.fragments -= taken[at + 1]
            self.bytes -= taken[at + 2]
            del taken[at : at + 3]

    def record(self, step: Step) -> None:
        """Add a transition to the call's history."""
        history = self.history
        if history is None:
            self.history = step
        elif isinstance(history, list):
            history.append(step)
        else:
            self.history = [history, step]

    def steps(self) -> list[Step]:
        """The call's transitions as recorded, oldest first."""
        history = self.history
        if history is None:
            return []
        return list(history) if isinstance(history, list) else [history]

    @property
    def first_step(self) -> int:
        """The position of the call's first transition (it has one)."""
        history = self.history
        assert history is not None
        return history[0][0] if isinstance(history, list) else history[0]

    def read(self) -> LedgerRow:
        """The public row (the call has one)."""
        public = self.public
        if public is not None:
            return public
        key = self.key
        state = self.state
        assert state is not None
        public = self.public = LedgerRow(
            tenant=key.tenant,
            conversation=key.conversation,
            turn=key.turn,
            response=key.response,
            item=key.item,
            call=key.call,
            tool=self.tool,
            state=state,
            fragments=self.fragments,
            bytes=self.bytes,
            terminal_event=self.terminal_event,
            terminal_reason=self.terminal_reason,
            parse=self.parse,
            validation=self.validation,
            dispatch=self.dispatch,
            outcome=self.outcome,
        )
        return public


# --- how the ledger takes each decision ------------------------------------------------------
#
# For each class of decision, how it changes the row of a call that has not ended, and the
# detail of its transition: identities, counts, digests and reasons, never values.


def _collecting(call: Call, event: CallCollecting) -> None:
    call.tool = event.tool
    call.state = Phase.COLLECTING
    call.dispatch = "inert"


def _collecting_detail(event: CallCollecting) -> str:
    # Every live call keeps it, and calls of a tool share one.
    return sys.intern(f"tool {event.tool}")


def _terminal_candidate(call: Call, event: CallTerminalCandidate) -> None:
    call.state = Phase.TERMINAL_CANDIDATE
    call.fragments = event.fragments
    call.bytes = event.size
    call.terminal_event = terminal_label(event.terminal)
    call.parse = "ok"
    call.dispatch = "inert"


def _terminal_candidate_detail(event: CallTerminalCandidate) -> str:
    return (
        f"{terminal_label(event.terminal)}, {event.fragments} fragments,"
        f" {event.size} bytes, arguments {event.arguments_digest}"
    )


def _validated(call: Call, event: CallValidated) -> None:
    needs_confirmation = event.needs_confirmation
    call.state = Phase.VALIDATED
    call.validation = "ok, needs confirmation" if needs_confirmation else "ok"
    call.dispatch = "await_confirmation" if needs_confirmation else "ready"


def _validated_detail(event: CallValidated) -> str:
    confirmation = ", needs confirmation" if event.needs_confirmation else ""
    return (
        f"tool {event.tool} {event.tool_digest}, arguments {event.arguments_digest}{confirmation}"
        + edited_detail(event)
    )


def edited_detail(event: CallValidated) -> str:
    """What a validation of a principal's edit adds to its transition: who, what it replaced
    and the edit's size, never a value."""
    if not event.edited_by:
        return ""
    return (
        f", edited by {event.edited_by} at confirmation from {event.edited_from}"
        f" ({event.edited_size} bytes)"
    )


def _awaiting_confirmation(call: Call, event: CallAwaitingConfirmation) -> None:
    call.state = Phase.VALIDATED
    call.dispatch = "await_confirmation"


def _awaiting_confirmation_detail(event: CallAwaitingConfirmation) -> str:
    return f"until {event.expires_at.isoformat()}"


def _confirmed(call: Call, event: CallConfirmed) -> None:
    # As in the dispatch queue: only a call seen waiting is made ready by it.
    if call.dispatch == "await_confirmation":
        call.dispatch = "ready"


def _confirmed_detail(event: CallConfirmed) -> str:
    return f"by {event.principal}, confirmation {event.confirmation_event_id}"


def _dispatched(call: Call, event: CallDispatched) -> None:
    call.claim = event.claim_id
    call.state = Phase.DISPATCHED
    call.dispatch = "dispatched"


def _dispatched_detail(event: CallDispatched) -> str:
    return f"claim {event.claim_id} by {event.executor}"


def _cancelled(call: Call, event: CallCancelled) -> None:
    _ended(call, Phase.CANCELLED, event.reason.value, event)


def _cancelled_detail(event: CallCancelled) -> str:
    earlier = event.duplicate_of
    # A duplicate names the call that ran its intent before it.
    return event.reason.value if earlier is None else f"{event.reason.value} {earlier.stream}"


def _failed(call: Call, event: CallFailed) -> None:
    reason = event.reason
    _ended(call, Phase.FAILED, reason.value, event)
    parse = _parse_problem(reason, event.detail)
    if parse is not None:
        call.parse = parse
    if reason in _VALIDATION_FAILURES:
        call.validation = reason.value


def _failed_detail(event: CallFailed) -> str:
    reason, detail = event.reason, event.detail
    return f"{reason.value}: {detail}" if detail else reason.value


def _ended(call: Call, state: Phase, reason: str, event: CallCancelled | CallFailed) -> None:
    if call.state is Phase.COLLECTING:
        # The decision's own counts, not the fragments seen here: retention may have
        # redacted those.
        call.fragments = event.fragments or 0
        call.bytes = event.size or 0
    call.state = state
    call.terminal_reason = reason
    call.dispatch = "reject"


def _parse_problem(reason: FailReason, detail: str) -> str | None:
    """The parse problem code of a failure, if the failure is a parse failure."""
    # The decider's parse failures start their detail with the problem code; a byte limit
    # passed while fragments were still arriving is not a parse and names no code.
    if reason is FailReason.MALFORMED_ARGUMENTS:
        return detail.split(maxsplit=1)[0].rstrip(":") if detail.strip() else reason.value
    if reason is FailReason.TOO_LARGE and detail.startswith(FailReason.TOO_LARGE.value):
        return FailReason.TOO_LARGE.value
    return None


def discarded_detail(event: EventsDiscarded) -> str:
    """The detail of the transition that counts events the decider could only refuse."""
    counts = f"{event.events} events ({event.fragments} fragments, {event.size} bytes)"
    if event.reason is DiscardReason.CALL_ENDED:
        return f"{counts} discarded: the call had ended"
    return (
        f"{counts} of {event.calls} calls opened after this one passed the limit on live calls"
        " discarded: the response opens no call any more"
    )


def edit_refused_detail(event: EditRefused) -> str:
    """The detail of the transition of a principal's edit that was refused."""
    why = f"{event.reason.value}: {event.detail}" if event.detail else event.reason.value
    return (
        f"edit of {event.size} bytes with confirmation {event.confirmation_event_id}"
        f" refused ({why})"
    )


def rejected_detail(event: EventRejected) -> str:
    """The detail of the transition of a refused event."""
    text = f"{event.rejected_type} {event.rejected_event_id} {event.reason.value}"
    return f"{text}: {event.detail}" if event.detail else text


class Rule(NamedTuple):
    """How the ledger takes one class of decision."""

    kind: type[Decision]
    change: Callable[[Call, Any], None]
    detail: Callable[[Any], str]


RULES = (
    Rule(CallCollecting, _collecting, _collecting_detail),
    Rule(CallTerminalCandidate, _terminal_candidate, _terminal_candidate_detail),
    Rule(CallValidated, _validated, _validated_detail),
    Rule(CallAwaitingConfirmation, _awaiting_confirmation, _awaiting_confirmation_detail),
    Rule(CallConfirmed, _confirmed, _confirmed_detail),
    Rule(CallDispatched, _dispatched, _dispatched_detail),
    Rule(CallCancelled, _cancelled, _cancelled_detail),
    Rule(CallFailed, _failed, _failed_detail),
)
"""In the order of ``TRANSITION_TYPES``: the rule of a decision is the first whose class it is
an instance of, as when decisions were matched one by one."""
