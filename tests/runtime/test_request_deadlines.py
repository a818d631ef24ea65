"""Nothing waits forever: every request the runtime makes of an actor has a deadline.

A claim, a confirmation or a denial is appended to the log and answered by the actor of the
process that owns the call's turn. When that process is silent but its lease has not run out,
nobody answers; the request ends with ``RequestTimedOut`` after ``request_timeout``, naming the
request and the process that holds the turn, instead of waiting until the lease is taken over
(or for ever).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from test_processes import key_of, start
from test_runtime import PRINCIPAL, TOOLS, ready_call

from inert import CallKey, ConfigurationError, RequestTimedOut, Runtime, open_runtime

SILENT_FOR = 600.0
"""A lease long enough that no takeover happens during a test."""


@asynccontextmanager
async def process(
    path: Path, name: str, *, request_timeout: float = 30.0
) -> AsyncIterator[Runtime]:
    url = f"sqlite:///{path / 'shared.db'}?poll_interval=0.02"
    async with open_runtime(
        log=url,
        create=True,
        tools=TOOLS,
        process=name,
        lease_time=SILENT_FOR,
        request_timeout=request_timeout,
    ) as runtime:
        yield runtime


async def _ready_call_of_a_silent_owner(path: Path, key: CallKey) -> None:
    """A ready call whose turn belongs to a process that is then killed (one that stops
    cleanly says it left, and is taken over at once), its lease still running."""
    with trio.CancelScope() as killed:
        async with process(path, "owner") as owner:
            await start(owner, key.turn)
            await ready_call(owner, key)
            await owner.settle()
            killed.cancel()
            await trio.lowlevel.checkpoint()


async def test_a_claim_of_a_call_whose_owner_is_silent_times_out(tmp_path: Path) -> None:
    """A claim that the turn's owner never answers ends with RequestTimedOut naming the claim
    and the owner, after the runtime's request_timeout, and nothing is dispatched."""
    key = key_of("a", turn="t1", response="r1")
    await _ready_call_of_a_silent_owner(tmp_path, key)
    async with process(tmp_path, "other", request_timeout=0.3) as other:
        await other.settle()
        started = trio.current_time()
        with pytest.raises(RequestTimedOut) as raised:
            await other.claim(key, executor="worker")
        assert 0.3 <= trio.current_time() - started < 5
        message = str(raised.value)
        assert f"the request.claim of {key.stream!r}" in message
        assert "leased by process 'owner'" in message
        assert "within 0.3 s" in message
        recorded = [r.event_type for r in await other.log.read_stream(key.stream)]
        assert "decision.dispatched" not in recorded


async def test_a_confirmation_and_a_denial_for_a_silent_owner_time_out(tmp_path: Path) -> None:
    """Confirmations and denials are requests too: each ends with RequestTimedOut."""
    key = key_of("a", turn="t1", response="r1")
    await _ready_call_of_a_silent_owner(tmp_path, key)
    async with process(tmp_path, "other", request_timeout=0.2) as other:
        await other.settle()
        with pytest.raises(RequestTimedOut, match=r"user\.confirmation_given .* leased by process"):
            await other.confirm(key, principal=PRINCIPAL, arguments_digest="sha256:x")
        with pytest.raises(
            RequestTimedOut, match=r"user\.confirmation_denied .* leased by process"
        ):
            await other.deny(key, principal=PRINCIPAL)


async def test_a_request_answered_in_time_is_unaffected(tmp_path: Path) -> None:
    """With the owner running, a claim is answered well inside a short deadline."""
    key = key_of("a", turn="t1", response="r1")
    async with process(tmp_path, "owner", request_timeout=5) as owner:
        await start(owner, key.turn)
        await ready_call(owner, key)
        dispatch = await owner.claim(key, executor="worker")
        await owner.complete(dispatch)


@pytest.mark.parametrize("seconds", [0, -1, math.nan, math.inf])
async def test_a_request_timeout_must_be_positive_and_finite(seconds: float) -> None:
    """open_runtime refuses a request_timeout that would never, or always, end a request."""
    with pytest.raises(ConfigurationError, match="request_timeout must be a positive, finite"):
        async with open_runtime(log="memory://", request_timeout=seconds):
            pass
