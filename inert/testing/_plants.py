"""Planted bugs: the simulator must catch each of them (testing the tester).

Each plant replaces one pure function or one row of the decider's transition table for the
duration of a ``planted(name)`` block, and puts the original back afterwards. Nothing in the
production code paths knows about plants: they patch it from here, the way a mutation test
would.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from typing import Any

import attrs

from ..actors import _buffer, _call, _decider, _handlers
from ..actors._arguments import (
    ArgumentLimits,
    ArgumentProblem,
    ParsedArguments,
    RejectedArguments,
    arguments_digest,
    parse_arguments,
)
from ..events import CallOpened, ClaimRequested, ConfirmationGiven, InertError, Phase


class UnknownPlant(InertError):
    """A planted bug was asked for by a name no plant has."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no planted bug is named {name!r}: choose from {', '.join(PLANTS)}")
        self.name = name


@contextmanager
def _replaced(owner: Any, name: str, value: object) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextmanager
def _table_row(phase: Phase, input_type: type, handler: _handlers.Handler) -> Iterator[None]:
    table = _decider.TABLE
    original = table[(phase, input_type)]
    table[(phase, input_type)] = handler
    try:
        yield
    finally:
        table[(phase, input_type)] = original


@contextmanager
def _skip_dedup() -> Iterator[None]:
    """A fragment delivered already (its bytes or its sequences seen) is taken as new again."""
    with ExitStack() as stack:
        for kind in (_buffer.SequencedBuffer, _buffer.RangeBuffer):
            stack.enter_context(_replaced(kind, "fit", _without_dedup(kind.fit)))
        yield


def _without_dedup(fit: Any) -> Any:
    def fit_without_dedup(buffer: Any, fragment: Any) -> Any:
        found = fit(buffer, fragment)
        return _buffer.Fit.NEW if found is _buffer.Fit.DUPLICATE else found

    return fit_without_dedup


def _dispatch_before_response_end() -> Any:
    """A claim of a call validated at its own end is dispatched before its response ended
    successfully."""
    original = _decider.TABLE[(Phase.VALIDATED, ClaimRequested)]

    def response_end_ignored(judge: Any, context: _call.CallContext) -> Any:
        ended = _call.ResponseEnd(position=0, completed=True)
        return original(judge, context._replace(response_end=ended))

    return _table_row(Phase.VALIDATED, ClaimRequested, response_end_ignored)


def _accept_stale_confirmation() -> Any:
    """A confirmation that expired before it arrived is judged as if it were fresh."""
    original = _decider.TABLE[(Phase.VALIDATED, ConfirmationGiven)]

    def stale_accepted(judge: Any, context: _call.CallContext) -> Any:
        received = judge.received
        fresh = attrs.evolve(received.event, expires_at=received.at + timedelta(days=1))
        judged = type(judge)(judge.state, received._replace(event=fresh), judge.cause)
        return original(judged, context)

    return _table_row(Phase.VALIDATED, ConfirmationGiven, stale_accepted)


@contextmanager
def _claim_after_confirmation_expired() -> Iterator[None]:
    """A claim after the confirmation given expired is judged as if it came just before, and
    no deadline ends the call when it expires."""
    original_deadline = _call.CallView.deadline
    original = _decider.TABLE[(Phase.VALIDATED, ClaimRequested)]

    def deadline_past_confirmation(
        state: Any, limits: Any = _call.DEFAULT_LIMITS, *, awaiting_response: bool = False
    ) -> Any:
        due = original_deadline(state, limits, awaiting_response=awaiting_response)
        if state.confirmed and due is not None and due == state.confirmation_expires:
            return None
        return due

    def expiry_ignored(judge: Any, context: _call.CallContext) -> Any:
        state, received = judge.state, judge.received
        expires = state.confirmation_expires
        if state.confirmed and expires is not None and received.at >= expires:
            earlier = received._replace(at=expires - timedelta(microseconds=1))
            judge = type(judge)(state, earlier, judge.cause)
        return original(judge, context)

    with (
        _replaced(_call.CallView, "deadline", deadline_past_confirmation),
        _table_row(Phase.VALIDATED, ClaimRequested, expiry_ignored),
    ):
        yield


@contextmanager
def _ready_calls_never_expire() -> Iterator[None]:
    """A ready call's lifetime is ignored: no deadline ends it, and a claim after it is judged
    as if it came just before."""
    original_deadline = _call.CallView.deadline
    original_claim = _decider.TABLE[(Phase.VALIDATED, ClaimRequested)]

    def deadline_without_lifetime(
        state: Any, limits: Any = _call.DEFAULT_LIMITS, *, awaiting_response: bool = False
    ) -> Any:
        if state.phase is Phase.VALIDATED and state.ready_expires is not None:
            return None
        return original_deadline(state, limits, awaiting_response=awaiting_response)

    def expiry_ignored(judge: Any, context: _call.CallContext) -> Any:
        state, received = judge.state, judge.received
        until = state.ready_expires
        if until is not None and received.at >= until:
            earlier = received._replace(at=until - timedelta(microseconds=1))
            judge = type(judge)(state, earlier, judge.cause)
        return original_claim(judge, context)

    with (
        _replaced(_call.CallView, "deadline", deadline_without_lifetime),
        _table_row(Phase.VALIDATED, ClaimRequested, expiry_ignored),
    ):
        yield


@contextmanager
def _never_stop_a_running_call() -> Iterator[None]:
    """A running call is never asked to stop, whatever makes it unwanted."""
    with ExitStack() as stack:
        for phase, input_type in list(_decider.TABLE):
            if phase is Phase.DISPATCHED and _decider.TABLE[(phase, input_type)] is (
                _handlers.stop_running
            ):
                stack.enter_context(_table_row(phase, input_type, _handlers.ignore))
        yield


def _dispatch_repeated_intent() -> Any:
    """A claim of a call whose intent ran already is judged as if none had (one action per
    intent ignored)."""
    original = _decider.TABLE[(Phase.VALIDATED, ClaimRequested)]

    def intent_ignored(judge: Any, context: _call.CallContext) -> Any:
        return original(judge, context._replace(duplicate_of=None))

    return _table_row(Phase.VALIDATED, ClaimRequested, intent_ignored)


def _redispatch_unknown_outcome() -> Any:
    """A claim of a dispatched call (its outcome unknown after a restart) dispatches it again."""
    return _table_row(Phase.DISPATCHED, ClaimRequested, _handlers.claim)


def _accept_nan() -> Any:
    """Arguments the strict parser refuses for a non-finite number are parsed leniently."""
    strict = parse_arguments

    def lenient(
        data: bytes, limits: ArgumentLimits | None = None, *, digest_key: bytes = b""
    ) -> ParsedArguments | RejectedArguments:
        parsed = strict(data, limits, digest_key=digest_key)
        if (
            not isinstance(parsed, RejectedArguments)
            or parsed.problem is not ArgumentProblem.NON_FINITE_NUMBER
        ):
            return parsed
        value = json.loads(data)
        if not isinstance(value, dict):
            return parsed
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
        return ParsedArguments(
            value=value, canonical=canonical, digest=arguments_digest(canonical, digest_key)
        )

    return _replaced(_handlers, "parse_arguments", lenient)


def _accept_replayed_response() -> Any:
    """A call of a provider response first seen under another turn opens as if it were new."""
    original = _decider.TABLE[(Phase.ABSENT, CallOpened)]

    def replay_accepted(judge: Any, context: _call.CallContext) -> Any:
        return original(judge, context._replace(response_elsewhere=""))

    return _table_row(Phase.ABSENT, CallOpened, replay_accepted)


PLANTS: dict[str, Callable[[], Any]] = {
    "skip_dedup": _skip_dedup,
    "dispatch_before_response_end": _dispatch_before_response_end,
    "accept_stale_confirmation": _accept_stale_confirmation,
    "claim_after_confirmation_expired": _claim_after_confirmation_expired,
    "ready_calls_never_expire": _ready_calls_never_expire,
    "dispatch_repeated_intent": _dispatch_repeated_intent,
    "redispatch_unknown_outcome": _redispatch_unknown_outcome,
    "never_stop_a_running_call": _never_stop_a_running_call,
    "accept_nan": _accept_nan,
    "accept_replayed_response": _accept_replayed_response,
}
"""Every planted bug, by name; its docstring says what it breaks."""


def plant_description(name: str) -> str:
    """The one line that says what a planted bug breaks."""
    factory = PLANTS.get(name)
    if factory is None:
        raise UnknownPlant(name)
    return (factory.__doc__ or "").strip()


@contextmanager
def planted(name: str | None) -> Iterator[None]:
    """Run the block with the named bug planted in the decider (``None``: none)."""
    if name is None:
        yield
        return
    factory = PLANTS.get(name)
    if factory is None:
        raise UnknownPlant(name)
    with factory():
        yield
