"""Two runtime processes on one log whose clocks disagree: one ten minutes ahead and running
fast, one ten minutes behind and running slow, then each jumping twenty minutes the other way.

Each process is a runtime on a log of its own over the same storage (memory, SQLite,
PostgreSQL), opened with a ``SkewedClock``, as two machines would. What must hold: a
confirmation given through the process ahead, for a second, no longer lets a claim through the
process behind run the call two seconds later; a confirmation's lifetime by the log's clock is
the one it was given for; an idle call is cancelled when its idle time has passed by the log's
clock, no sooner and not much later; no process takes the turns of the other while both beat (on
PostgreSQL, whose clock is the server's, even across the jumps); and a turn's lease is held by
one process at a time (its leases form one chain).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import trio
from postgres_support import fresh_schema, server_url

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    ClaimRefused,
    Event,
    RecordedEvent,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
)
from inert.events import CallCancelled, CallDispatched, ConfirmationGiven, TurnLeased
from inert.log import Log, MemoryLog, MemoryStore, PostgresLog, SQLiteLog
from inert.testing import SkewedClock

TOOLS = [
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
]
PRINCIPAL = "user:alice"
LEASE_TIME = 1.0
LIMITS = CallLimits(idle_timeout=timedelta(seconds=2))
SKEW = 600.0
FAST = 2.0
CONFIRMED_FOR = timedelta(seconds=1)
MEASURE = timedelta(seconds=1)
"""What a process's reading of the log's clock may be off by here: far less than the skew."""

OpenLog = Callable[[Callable[[], datetime]], AbstractAsyncContextManager[Log]]


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> OpenLog:
    """Logs over one storage, each opened with the clock given (one per process)."""
    if request.param == "memory":
        store = MemoryStore()

        @asynccontextmanager
        async def on_memory(clock: Callable[[], datetime]) -> AsyncIterator[Log]:
            log = MemoryLog(store, clock=clock)
            try:
                yield log
            finally:
                await log.aclose()

        return on_memory
    if request.param == "sqlite":
        return lambda clock: SQLiteLog.open(tmp_path / "log.db", clock=clock)
    schema = request.getfixturevalue("schema")
    return lambda clock: PostgresLog.open(server_url(), schema=schema, clock=clock)


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def key_of(turn: str, call: str) -> CallKey:
    return CallKey(
        tenant="acme", conversation=turn, turn=turn, response=f"r-{call}", item=call, call=call
    )


def whole_call(key: CallKey, tool: str, data: bytes) -> list[Event]:
    return [
        CallOpened(key=key, tool=tool, sequence=0),
        ArgumentsAppended(key=key, data=data, offset=0, first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


async def start(runtime: Runtime, turn: str) -> None:
    await runtime.start_turn(tenant="acme", conversation=turn, turn=turn, principal=PRINCIPAL)


@asynccontextmanager
async def two_processes(
    backend: OpenLog, clocks: dict[str, SkewedClock]
) -> AsyncIterator[dict[str, Runtime]]:
    async with AsyncExitStack() as stack:
        runtimes = {}
        for name, clock in clocks.items():
            log = await stack.enter_async_context(backend(clock))
            runtimes[name] = await stack.enter_async_context(
                open_runtime(
                    log=log, tools=TOOLS, limits=LIMITS, process=name, lease_time=LEASE_TIME
                )
            )
        yield runtimes


async def test_skewed_and_jumping_clocks_keep_confirmations_and_leases(backend: OpenLog) -> None:
    """A confirmation lasts what it was given for by the log's clock, whichever process gave
    it, decides and claims; nothing runs after it expired; a turn's lease is held by one
    process at a time, and by the process that started it while both beat."""
    clocks = {
        "ahead": SkewedClock(offset=SKEW, rate=FAST),
        "behind": SkewedClock(offset=-SKEW, rate=0.5),
    }
    async with two_processes(backend, clocks) as runtimes:
        ahead, behind = runtimes["ahead"], runtimes["behind"]
        await start(ahead, "t-ahead")
        await start(behind, "t-behind")
        # The call is decided by the process behind, which started its turn; it is confirmed
        # through the process ahead, and claimed through the one behind.
        email = key_of("t-behind", "email")
        await behind.feed(whole_call(email, "send_email", b'{"to": "bob"}'))
        await ahead.feed(whole_call(key_of("t-ahead", "weather"), "get_weather", b"{}"))
        # Left collecting in the turn of the process whose clock runs fast: idle, by the log's
        # clock, two seconds after its fragment.
        draft = key_of("t-ahead", "draft")
        await ahead.feed(whole_call(draft, "get_weather", b'{"city": "Paris"}')[:2])
        await behind.settle()
        await ahead.settle()
        pending = await behind.pending_confirmation(email)
        assert pending is not None
        await ahead.confirm(
            email,
            principal=PRINCIPAL,
            arguments_digest=pending.arguments_digest,
            expires_in=CONFIRMED_FOR,
        )
        await trio.sleep(2 * CONFIRMED_FOR.total_seconds())
        # Refused as expired, or as cancelled already by the confirmation's deadline.
        with pytest.raises(ClaimRefused, match=r"confirmation_expired|call_terminal"):
            await behind.claim(email, executor="late")
        await trio.sleep(2 * LEASE_TIME)
        clocks["ahead"].jump(-2 * SKEW)
        clocks["behind"].jump(2 * SKEW)
        await trio.sleep(2 * LEASE_TIME)
        records = await ahead.log.read()
        on_postgresql = isinstance(ahead.log, PostgresLog)
    assert_confirmations_kept(records, email)
    # Without a server, the log's clock runs at its fastest writer's rate, and a deadline's
    # timer sleeps by the process's own: late by that rate, never early.
    assert_idle_when_due(records, draft, 1.0 if on_postgresql else FAST)
    assert_leases_chained(records, taken_over=not on_postgresql)


def assert_confirmations_kept(records: list[RecordedEvent], key: CallKey) -> None:
    """Every confirmation lasts, by the log's clock, what it was given for; the call it
    confirmed is cancelled as expired, never dispatched."""
    confirmations = [r for r in records if isinstance(r.event, ConfirmationGiven)]
    assert confirmations
    for recorded in confirmations:
        assert isinstance(recorded.event, ConfirmationGiven)
        lifetime = recorded.event.expires_at - recorded.recorded_at
        assert abs(lifetime - CONFIRMED_FOR) < MEASURE, lifetime
    assert not [r for r in records if isinstance(r.event, CallDispatched)]
    cancelled = [
        r.event for r in records if isinstance(r.event, CallCancelled) and r.event.key == key
    ]
    assert [event.reason.value for event in cancelled] == ["confirmation_expired"]


def assert_idle_when_due(records: list[RecordedEvent], key: CallKey, late: float) -> None:
    """The idle call is cancelled once its idle time has passed since its last fragment, by
    the log's clock, and not later than ``late`` times it (and a measurement)."""
    fed = [
        r
        for r in records
        if r.event_type.startswith("ingress.") and getattr(r.event, "key", None) == key
    ]
    ended = [r for r in records if isinstance(r.event, CallCancelled) and r.event.key == key]
    assert fed
    assert len(ended) == 1
    assert isinstance(ended[0].event, CallCancelled)
    assert ended[0].event.reason.value == "idle_timeout"
    idle = ended[0].recorded_at - fed[-1].recorded_at
    assert LIMITS.idle_timeout <= idle < LIMITS.idle_timeout * late + MEASURE, idle


def assert_leases_chained(records: list[RecordedEvent], *, taken_over: bool) -> None:
    """Each turn's leases form one chain, each taken from the holder before it; without a
    takeover, each turn stays with the process that started it."""
    holders: dict[str, list[tuple[str, str | None]]] = {}
    for recorded in records:
        if isinstance(recorded.event, TurnLeased):
            lease = recorded.event
            holders.setdefault(lease.turn.turn, []).append((lease.owner, lease.previous))
    assert set(holders) == {"t-ahead", "t-behind"}
    for turn, chain in holders.items():
        assert chain[0] == (turn.removeprefix("t-"), None), chain
        for (owner, _), (_, previous) in itertools.pairwise(chain):
            assert previous == owner, chain
        if not taken_over:
            assert len(chain) == 1, chain
