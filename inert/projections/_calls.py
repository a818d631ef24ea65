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


class Received:
    """Fragment counts and sizes of one call not yet at its terminal candidate, by position.

    Kept per position because the actor's answer to a fragment comes later in the log: a
    fragment it rejects (a duplicate delivery, a stale turn) is taken back out. A fragment with
    an offset counts the bytes it adds to the ranges seen, so that a delivery chunked otherwise
    is not counted twice.

    Compact, since every collecting call holds one: the positions with their counts in one
    array of integers (three a position, ascending, as the log hands them out), and the ranges
    seen as the end of the one range from the start until a fragment leaves a gap or overlaps.
    """

    __slots__ = ("covered", "end", "fragments", "size", "taken")

    def __init__(self) -> None:
        self.taken = array("q")
        """Position, fragments and size of each fragment event taken, by ascending position."""
        self.end = 0
        """Bytes ``[0, end)`` seen, while ``covered`` is ``None``."""
        self.covered: list[tuple[int, int]] | None = None
        """The ranges seen, once they are not one range from the start."""
        self.fragments = 0
        self.size = 0

    # A snapshot holds plain values only: the array goes into it as a tuple of integers.
    def __getstate__(self) -> tuple[object, ...]:
        return (tuple(self.taken), self.end, self.covered, self.fragments, self.size)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        taken, self.end, self.covered, self.fragments, self.size = state
        self.taken = array("q", taken)

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
        """Count a fragment event; ``position`` is past every one counted."""
        self.taken.extend((position, fragments, size))
        self.fragments += fragments
        self.size += size

    def drop(self, position: int) -> None:
        """Take a counted fragment event back out (nothing if none is at ``position``)."""
        taken = self.taken
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
            self.size -= taken[at + 2]
            del taken[at : at + 3]


class Row:
    """A call's row as the ledger changes it: the columns of ``LedgerRow`` after the key's."""

    __slots__ = (
        "bytes",
        "dispatch",
        "fragments",
        "outcome",
        "parse",
        "state",
        "terminal_event",
        "terminal_reason",
        "tool",
        "validation",
    )

    def __init__(self, tool: str, fragments: int, size: int) -> None:
        self.tool = tool
        self.state: Phase = Phase.COLLECTING
        self.fragments = fragments
        self.bytes = size
        self.terminal_event: str | None = None
        self.terminal_reason: str | None = None
        self.parse: str | None = None
        self.validation: str | None = None
        self.dispatch: Dispatch = "inert"
        self.outcome: Outcome | None = None


class Call:
    """Everything the ledger holds of one call, so that an event costs one lookup of its key.

    ``row`` is ``None`` until the call's actor first decides on the call; ``received`` is kept
    while the call collects; ``public`` is the row as last read, kept until the row or what was
    received changes.
    """

    __slots__ = ("claim", "history", "key", "public", "received", "row")

    def __init__(self, key: CallKey) -> None:
        self.key = key
        self.row: Row | None = None
        self.received: Received | None = None
        self.history: list[Step] | None = None
        # An outcome counts only for the claim that dispatched the call: at most one exists.
        self.claim: str | None = None
        self.public: LedgerRow | None = None

    def read(self, row: Row) -> LedgerRow:
        """The public row (``row`` is this call's)."""
        public = self.public
        if public is not None:
            return public
        key = self.key
        received = self.received
        # A collecting row's counts are read from what was received when the row is read, not
        # copied into it on every fragment (only a collecting call keeps ``received``).
        if received is None:
            fragments, size = row.fragments, row.bytes
        else:
            fragments, size = received.fragments, received.size
        public = self.public = LedgerRow(
            tenant=key.tenant,
            conversation=key.conversation,
            turn=key.turn,
            response=key.response,
            item=key.item,
            call=key.call,
            tool=row.tool,
            state=row.state,
            fragments=fragments,
            bytes=size,
            terminal_event=row.terminal_event,
            terminal_reason=row.terminal_reason,
            parse=row.parse,
            validation=row.validation,
            dispatch=row.dispatch,
            outcome=row.outcome,
        )
        return public


# --- how the ledger takes each decision ------------------------------------------------------
#
# For each class of decision, how it changes the row of a call that has not ended, and the
# detail of its transition: identities, counts, digests and reasons, never values.


def _collecting(call: Call, row: Row, event: CallCollecting) -> None:
    row.tool = event.tool
    row.state = Phase.COLLECTING
    row.dispatch = "inert"


def _collecting_detail(event: CallCollecting) -> str:
    # Every live call keeps it, and calls of a tool share one.
    return sys.intern(f"tool {event.tool}")


def _terminal_candidate(call: Call, row: Row, event: CallTerminalCandidate) -> None:
    row.state = Phase.TERMINAL_CANDIDATE
    row.fragments = event.fragments
    row.bytes = event.size
    row.terminal_event = terminal_label(event.terminal)
    row.parse = "ok"
    row.dispatch = "inert"


def _terminal_candidate_detail(event: CallTerminalCandidate) -> str:
    return (
        f"{terminal_label(event.terminal)}, {event.fragments} fragments,"
        f" {event.size} bytes, arguments {event.arguments_digest}"
    )


def _validated(call: Call, row: Row, event: CallValidated) -> None:
    needs_confirmation = event.needs_confirmation
    row.state = Phase.VALIDATED
    row.validation = "ok, needs confirmation" if needs_confirmation else "ok"
    row.dispatch = "await_confirmation" if needs_confirmation else "ready"


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


def _awaiting_confirmation(call: Call, row: Row, event: CallAwaitingConfirmation) -> None:
    row.state = Phase.VALIDATED
    row.dispatch = "await_confirmation"


def _awaiting_confirmation_detail(event: CallAwaitingConfirmation) -> str:
    return f"until {event.expires_at.isoformat()}"


def _confirmed(call: Call, row: Row, event: CallConfirmed) -> None:
    # As in the dispatch queue: only a call seen waiting is made ready by it.
    if row.dispatch == "await_confirmation":
        row.dispatch = "ready"


def _confirmed_detail(event: CallConfirmed) -> str:
    return f"by {event.principal}, confirmation {event.confirmation_event_id}"


def _dispatched(call: Call, row: Row, event: CallDispatched) -> None:
    call.claim = event.claim_id
    row.state = Phase.DISPATCHED
    row.dispatch = "dispatched"


def _dispatched_detail(event: CallDispatched) -> str:
    return f"claim {event.claim_id} by {event.executor}"


def _cancelled(call: Call, row: Row, event: CallCancelled) -> None:
    _ended(row, Phase.CANCELLED, event.reason.value, event)


def _cancelled_detail(event: CallCancelled) -> str:
    earlier = event.duplicate_of
    # A duplicate names the call that ran its intent before it.
    return event.reason.value if earlier is None else f"{event.reason.value} {earlier.stream}"


def _failed(call: Call, row: Row, event: CallFailed) -> None:
    reason = event.reason
    _ended(row, Phase.FAILED, reason.value, event)
    parse = _parse_problem(reason, event.detail)
    if parse is not None:
        row.parse = parse
    if reason in _VALIDATION_FAILURES:
        row.validation = reason.value


def _failed_detail(event: CallFailed) -> str:
    reason, detail = event.reason, event.detail
    return f"{reason.value}: {detail}" if detail else reason.value


def _ended(row: Row, state: Phase, reason: str, event: CallCancelled | CallFailed) -> None:
    if row.state is Phase.COLLECTING:
        # The decision's own counts, not the fragments seen here: retention may have
        # redacted those.
        row.fragments = event.fragments or 0
        row.bytes = event.size or 0
    row.state = state
    row.terminal_reason = reason
    row.dispatch = "reject"


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
    change: Callable[[Call, Row, Any], None]
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
