"""One call as the fold holds it: a slotted record, changed in place by each decision.

The decider's immutable ``CallState`` and its ``evolve`` are the reference: a slot holds the
same fields, the decider reads it as it reads a state (both are a ``CallView``), and ``absorb``
makes in place the very changes ``evolve`` makes into a new state (``changes``), without a new
object per decision. Beside the call's fields a slot holds what the fold keeps of the call: the
version of its stream, the decisions made and not yet read back, the inputs held for a
validation, and whether a redacted input degraded it.

A live call collects for most of its life, and more than half of its fields stay at their
defaults until its end (its terminal event, arguments, validation, confirmation, dispatch, and
what the fold notes while it is degraded). Those are kept in a record of their own (``Later``),
made when one of them is first set to something else: a collecting call is then one small
object, read and written the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Generic, TypeVar, overload

from ..events import CallKey, Event, Phase, TerminalRef
from ._arguments import ParsedArguments
from ._buffer import EMPTY_BUFFER, Buffer
from ._call import (
    CallContext,
    CallState,
    CallView,
    Decision,
    Input,
    ResponseEnd,
    ValidationRequested,
    changes,
    check_arguments,
)

_T = TypeVar("_T")


class _LaterField(Generic[_T]):
    """A field of a call that a collecting call leaves at its default: read from the slot's
    ``Later`` record, which the first value other than the default makes."""

    __slots__ = ("default", "name")

    def __init__(self, default: _T) -> None:
        self.default = default
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, slot: None, owner: type) -> _LaterField[_T]: ...

    @overload
    def __get__(self, slot: Slot, owner: type) -> _T: ...

    def __get__(self, slot: Slot | None, owner: type) -> _T | _LaterField[_T]:
        if slot is None:
            return self
        later = slot.later
        if later is None:
            return self.default
        value: _T = getattr(later, self.name)
        return value

    def __set__(self, slot: Slot, value: _T) -> None:
        later = slot.later
        if later is None:
            if value is self.default:
                return
            later = slot.later = Later()
        setattr(later, self.name, value)


class Later:
    """The fields of a call it has at their defaults while it collects: its end, its arguments,
    its validation, confirmation and dispatch, and its bookkeeping while degraded. Every live
    call collects for most of its life, so a slot keeps them apart, made when one is set."""

    __slots__ = (
        "arguments",
        "arguments_digest",
        "claim_id",
        "confirmation_expires",
        "confirmed",
        "ended_at",
        "needs_confirmation",
        "ready_expires",
        "reason",
        "recovering",
        "response_end",
        "skipped",
        "stop_requested",
        "terminal",
        "tool_digest",
        "trusted_through",
        "validation_context",
    )

    def __init__(self) -> None:
        for name, default in _LATER_DEFAULTS:
            setattr(self, name, default)


class Slot(CallView):
    """A call's state and the fold's bookkeeping of it, mutable, one per call."""

    __slots__ = (
        "_buffer",
        "counted",
        "degraded",
        "expected",
        "held",
        "key",
        "last_activity",
        "later",
        "opened_sequence",
        "opened_version",
        "phase",
        "tool",
        "validating",
        "version",
    )

    terminal = _LaterField[TerminalRef | None](None)
    arguments = _LaterField[ParsedArguments | None](None)
    tool_digest = _LaterField("")
    arguments_digest = _LaterField("")
    needs_confirmation = _LaterField(False)
    confirmation_expires = _LaterField[datetime | None](None)
    confirmed = _LaterField(False)
    claim_id = _LaterField("")
    reason = _LaterField("")
    stop_requested = _LaterField("")
    ready_expires = _LaterField[datetime | None](None)
    validation_context = _LaterField[CallContext | None](None)
    trusted_through = _LaterField(0)
    """Decisions caused at or before this position are taken as recorded: the call was
    degraded when those inputs came, so they were never decided here."""
    skipped = _LaterField(0)
    """The position of the last input it skipped while degraded."""
    recovering = _LaterField(False)
    """Degraded, it reached a state from which it could decide again (see the fold)."""
    ended_at = _LaterField[int | None](None)
    """The position of the first end event addressed to the call."""
    response_end = _LaterField[ResponseEnd | None](None)
    """The first end of its response after ``ended_at``: what a call validated at its own
    end waits for (rules 7)."""

    def __init__(self, key: CallKey) -> None:
        self.key = key
        self.phase = Phase.ABSENT
        self.tool = ""
        self.opened_sequence: int | None = None
        self.last_activity: datetime | None = None
        self._buffer: Buffer = EMPTY_BUFFER
        self.validating: ValidationRequested | None = None
        self.later: Later | None = None
        self.counted = False
        """Counted against the limits on live calls of a turn judged by rules 3 or later: from
        when it became live until its ending decision is read back from the log."""
        self.opened_version = 1
        """The version of its response's stream that opened it: every byte it holds came after
        (what a snapshot stores its fragments from)."""
        self.version: int | None = 0
        """Events of the call's stream seen in the log; ``None`` when the stream may hold events
        this fold forgot (the call's actor asks the log)."""
        # Both empty for almost every call almost all the time: no list until one is needed.
        self.expected: list[Event] | tuple[()] = ()
        """Decisions made and not yet seen in the log, in order."""
        self.held: list[tuple[Input, CallContext]] | tuple[()] = ()
        """Inputs waiting for the answer of a validation."""
        self.degraded = False
        """An input of the call was redacted: its recorded decisions are taken as they are."""

    @property
    def state(self) -> Slot:
        """The call's state (the slot itself: it is one)."""
        return self

    def snapshot(self) -> CallState:
        """The call's state as an immutable value, to keep or compare."""
        return CallState(
            key=self.key,
            phase=self.phase,
            tool=self.tool,
            opened_sequence=self.opened_sequence,
            last_activity=self.last_activity,
            buffer=self._buffer,
            terminal=self.terminal,
            arguments=self.arguments,
            validating=self.validating,
            tool_digest=self.tool_digest,
            arguments_digest=self.arguments_digest,
            needs_confirmation=self.needs_confirmation,
            confirmation_expires=self.confirmation_expires,
            confirmed=self.confirmed,
            claim_id=self.claim_id,
            reason=self.reason,
            stop_requested=self.stop_requested,
            ready_expires=self.ready_expires,
        )

    def absorb(self, decision: Decision) -> None:
        """Take one decision in, as ``evolve`` would make a new state of it."""
        for name, value in changes(self, decision).items():
            setattr(self, name, value)

    def expect(self, decisions: Sequence[Event]) -> None:
        """Note decisions made, to be seen in the log after those noted before."""
        if not decisions:
            return
        if self.expected:
            self.expected.extend(decisions)
        else:
            self.expected = list(decisions)

    def next_expected(self) -> Event | None:
        """The first decision made and not yet seen, taken off the list; ``None`` if none."""
        expected = self.expected
        if not expected:
            return None
        if len(expected) == 1:
            # A call waits with nothing expected almost all its life: no empty list kept.
            self.expected = ()
            return expected[0]
        return expected.pop(0)

    def hold(self, received: Input, context: CallContext) -> None:
        """Hold an input back until the call may decide it."""
        if self.held:
            self.held.append((received, context))
        else:
            self.held = [(received, context)]

    def release(self) -> tuple[Input, CallContext]:
        """The first input held back, no longer held."""
        held = self.held
        if len(held) == 1:
            self.held = ()
            return held[0]
        return held.pop(0)  # type: ignore[union-attr]

    def take_arguments(self, arguments: ParsedArguments) -> None:
        """The validated arguments a degraded call's decisions recorded (``with_arguments``)."""
        check_arguments(self, arguments)
        self.arguments = arguments

    def __repr__(self) -> str:
        return f"Slot({self.key.stream!r}, {self.phase.value})"


# Read once: each look at a field's default through the class is a call of its descriptor.
_LATER_DEFAULTS = tuple((name, getattr(Slot, name).default) for name in Later.__slots__)
