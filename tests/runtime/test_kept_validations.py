"""A claim takes its call's validated arguments from what the fold read, within a budget of
bytes, and reads the call's stream back only where they were not kept: the same dispatch
either way."""

from __future__ import annotations

from typing import Any

import pytest
from test_runtime import ARGUMENTS, key_of, ready_call, running, start

from inert.events import (
    CallCancelled,
    CallDispatched,
    CallKey,
    CallValidated,
    CancelReason,
    ExecutionCompleted,
    Phase,
)
from inert.log import MemoryLog
from inert.runtime import _validations
from inert.runtime._validations import KeptValidations

KEY = key_of("a")


def validated(key: CallKey = KEY, arguments: bytes = ARGUMENTS) -> CallValidated:
    return CallValidated(
        key=key,
        cause=1,
        tool="get_weather",
        tool_digest="t",
        arguments=arguments,
        arguments_digest="a",
        needs_confirmation=False,
    )


def test_a_validation_is_kept_until_its_claim_takes_it() -> None:
    """A kept validation is taken once by its claim, and its bytes leave the budget."""
    kept = KeptValidations()
    kept.heard(validated(), Phase.VALIDATED, claimed_here=False)
    assert kept.peek(KEY) == validated()
    assert kept.bytes == len(ARGUMENTS)
    assert kept.take(KEY) == validated()
    assert kept.take(KEY) is None
    assert (len(kept), kept.bytes) == (0, 0)


def test_an_edit_s_validation_replaces_the_one_before() -> None:
    """Of two validations of one call, the last is kept, counted once."""
    kept = KeptValidations()
    kept.heard(validated(), Phase.VALIDATED, claimed_here=False)
    kept.heard(validated(arguments=b'{"city":"Rome"}'), Phase.VALIDATED, claimed_here=False)
    assert kept.peek(KEY) == validated(arguments=b'{"city":"Rome"}')
    assert kept.bytes == len(b'{"city":"Rome"}')


def test_nothing_is_kept_beyond_the_budget() -> None:
    """A validation that would pass the budget is not kept: its claim reads the log."""
    kept = KeptValidations(budget=len(ARGUMENTS))
    kept.heard(validated(), Phase.VALIDATED, claimed_here=False)
    kept.heard(validated(key_of("b")), Phase.VALIDATED, claimed_here=False)
    assert kept.peek(KEY) is not None
    assert kept.peek(key_of("b")) is None


@pytest.mark.parametrize(
    ("event", "phase", "claimed_here"),
    [
        (
            CallCancelled(key=KEY, cause=1, reason=CancelReason.TURN_CANCELLED),
            Phase.CANCELLED,
            False,
        ),
        (CallDispatched(key=KEY, cause=1, claim_id="c", executor="e"), Phase.DISPATCHED, False),
        (ExecutionCompleted(key=KEY, claim_id="c"), Phase.DISPATCHED, True),
        (CallDispatched(key=KEY, cause=1, claim_id="c", executor="e"), None, True),
    ],
    ids=["cancelled", "dispatched_elsewhere", "outcome", "forgotten"],
)
def test_a_call_that_can_no_longer_be_claimed_here_is_forgotten(
    event: object, phase: Phase | None, claimed_here: bool
) -> None:
    """A call that ended, whose outcome came, that another process's claim dispatched or
    that the fold forgot keeps nothing."""
    kept = KeptValidations()
    kept.heard(validated(), Phase.VALIDATED, claimed_here=False)
    kept.heard(event, phase, claimed_here)
    assert kept.peek(KEY) is None
    assert kept.bytes == 0


def test_a_dispatch_of_a_claim_made_here_keeps_the_validation_for_it() -> None:
    """The dispatch of this process's claim leaves the validation for the claim to take."""
    kept = KeptValidations()
    kept.heard(validated(), Phase.VALIDATED, claimed_here=False)
    kept.heard(
        CallDispatched(key=KEY, cause=1, claim_id="c", executor="e"),
        Phase.DISPATCHED,
        claimed_here=True,
    )
    assert kept.take(KEY) == validated()


def count_stream_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The streams read through any memory log from now on."""
    reads: list[str] = []
    original = MemoryLog.read_stream

    async def counted(self: MemoryLog, stream: str, from_version: int = 1) -> Any:
        reads.append(stream)
        return await original(self, stream, from_version)

    monkeypatch.setattr(MemoryLog, "read_stream", counted)
    return reads


@pytest.mark.parametrize("budget", [_validations.KEPT_ARGUMENT_BYTES, 0], ids=["kept", "read_back"])
async def test_a_claim_gives_the_same_dispatch_kept_or_read_back(
    budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With its validation kept, a claim reads no stream; without, it reads the call's; the
    dispatch's arguments and digests are the same."""
    monkeypatch.setattr(KeptValidations.__init__, "__defaults__", (budget,))
    async with running() as runtime:
        await start(runtime)
        await ready_call(runtime, KEY)
        ready = runtime.ready_call(KEY)
        assert ready is not None
        reads = count_stream_reads(monkeypatch)
        dispatch = await runtime.claim(KEY, executor="worker")
        assert dict(dispatch.arguments) == {"city": "Paris"}
        assert (dispatch.tool, dispatch.arguments_digest) == ("get_weather", ready.arguments_digest)
        assert reads == ([] if budget else [KEY.stream])
        assert len(runtime._validations) == 0
