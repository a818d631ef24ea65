"""Retiring idle turns end to end: the runtime writes ``TurnRetired`` once a turn has had no live
call for its horizon, forgets the turn and its calls, judges what comes for them later as for a
turn never started, and holds no more than its live calls and its horizon however many calls it
has finished."""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from pathlib import Path

import pytest
import trio
import trio.testing

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    ClaimRefused,
    ConfigurationError,
    Phase,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    StreamLost,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
    trio_clock,
)
from inert.actors import CallFold
from inert.actors._fold import Work
from inert.actors._router import DEFAULT_MAX_BUSY_ACTORS, CallRouter
from inert.events import DEFAULT_CODEC, EventRejected, RejectReason, TurnRetired
from inert.log import MemoryLog, MemoryStore
from inert.log._records import decode_record

HORIZON = timedelta(hours=1)
TOOL = ToolDeclaration(name="lookup")
PRINCIPAL = "user:alice"
LIMITS = CallLimits(idle_timeout=timedelta(hours=10))


def key_of(turn: str, call: str = "call_0", *, conversation: str = "c1") -> CallKey:
    return CallKey(
        tenant="acme",
        conversation=conversation,
        turn=turn,
        response=f"r-{turn}",
        item=call,
        call=call,
    )


@asynccontextmanager
async def running(
    store: MemoryStore, horizon: timedelta | None = HORIZON
) -> AsyncIterator[Runtime]:
    log = MemoryLog(store, clock=trio_clock())
    try:
        async with open_runtime(
            log=log, tools=[TOOL], limits=LIMITS, ledger_horizon=horizon
        ) as runtime:
            yield runtime
    finally:
        await log.aclose()


def whole_call(key: CallKey) -> list[object]:
    return [
        CallOpened(key=key, tool=TOOL.name, sequence=0),
        ArgumentsAppended(key=key, data=b'{"q": 1}', offset=0, first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
    ]


async def finish_turn(runtime: Runtime, turn: str, calls: int = 1, **where: str) -> list[CallKey]:
    """Start the turn, make its calls ready, claim and complete them."""
    keys = [key_of(turn, f"call_{index}", **where) for index in range(calls)]
    await runtime.start_turn(
        tenant="acme", conversation=keys[0].conversation, turn=turn, principal=PRINCIPAL
    )
    events = [event for key in keys for event in whole_call(key)]
    events.append(
        ResponseEnded(
            response=keys[0].response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        )
    )
    await runtime.feed(events)  # type: ignore[arg-type]
    await runtime.settle()
    for key in keys:
        await runtime.complete(await runtime.claim(key, executor="worker"))
    return keys


def retirements(store: MemoryStore) -> list[TurnRetired]:
    return [
        event
        for row in store.rows
        if isinstance(event := decode_record(DEFAULT_CODEC, row).event, TurnRetired)
    ]


async def test_a_finished_turn_is_retired_after_the_horizon_and_forgotten(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Once idle for the horizon, a turn is retired in the log; its call is forgotten, a claim
    of it is refused as for an unknown turn, and the turn cannot be started again."""
    store = MemoryStore()
    async with running(store) as runtime:
        [key] = await finish_turn(runtime, "t1")
        await trio.sleep(HORIZON.total_seconds() / 2)
        assert retirements(store) == []
        await trio.sleep(HORIZON.total_seconds())
        await runtime.settle()
        assert retirements(store) == [TurnRetired(turn=key.turn_ref)]
        assert runtime._fold.records == {}
        assert runtime.phase(key) is Phase.ABSENT
        with pytest.raises(ClaimRefused, match="unknown_turn"):
            await runtime.claim(key, executor="worker")
        await runtime.settle()
        assert runtime._fold.records == {}
        with pytest.raises(RefusedError, match="started before"):
            await runtime.start_turn(
                tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL
            )


async def test_a_turn_with_a_live_call_is_not_retired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A turn whose call is still collecting stays, however long it waits."""
    store = MemoryStore()
    async with running(store) as runtime:
        key = key_of("t1")
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL)
        await runtime.feed([CallOpened(key=key, tool=TOOL.name, sequence=0)])
        await trio.sleep(3 * HORIZON.total_seconds())
        await runtime.settle()
        assert retirements(store) == []
        assert runtime.phase(key) is Phase.COLLECTING


async def test_without_a_horizon_nothing_is_retired(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A runtime keeping every ledger row (no horizon) keeps every turn too."""
    store = MemoryStore()
    async with running(store, horizon=None) as runtime:
        [key] = await finish_turn(runtime, "t1")
        await trio.sleep(1000 * HORIZON.total_seconds())
        await runtime.settle()
        assert retirements(store) == []
        assert runtime.phase(key) is Phase.DISPATCHED


async def test_a_restart_and_a_replay_forget_what_the_live_runtime_forgot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The retirement is in the log: a restarted runtime and a plain replay (which knows no
    horizon) forget the same turns as the live runtime did."""
    store = MemoryStore()
    async with running(store) as runtime:
        [old] = await finish_turn(runtime, "t1")
        await trio.sleep(2 * HORIZON.total_seconds())
        [new] = await finish_turn(runtime, "t2")
        await runtime.settle()
        digest = runtime.digest()
    async with running(store) as restarted:
        assert restarted.phase(old) is Phase.ABSENT
        assert restarted.phase(new) is Phase.DISPATCHED
        assert restarted.digest() == digest
    fold = CallFold(LIMITS)
    for row in store.rows:
        fold.apply(decode_record(DEFAULT_CODEC, row))
    assert set(fold.records) == {new}


async def test_inputs_addressed_to_made_up_turns_leave_nothing_behind(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Calls of turns never started are rejected and forgotten by the fold at once, and by the
    ledger after the horizon: a flood of them leaves no memory behind."""
    store = MemoryStore()
    async with running(store) as runtime:
        for index in range(200):
            key = key_of(f"made-up-{index}")
            await runtime.feed(whole_call(key))  # type: ignore[arg-type]
        await runtime.settle()
        assert runtime._fold.records == {}
        # Their fragments are redacted as those of any call that ended: nothing is kept to do.
        assert runtime._retention._unredacted == {}
        await trio.sleep(2 * HORIZON.total_seconds())
        await runtime.start_turn(tenant="acme", conversation="c9", turn="t9", principal=PRINCIPAL)
        await runtime.settle()
        assert runtime.ledger.histories() == {}
        assert runtime.ledger._calls == {}
        rejected = [
            event
            for row in store.rows
            if isinstance(event := decode_record(DEFAULT_CODEC, row).event, EventRejected)
        ]
        assert len(rejected) == 600
        assert {event.reason for event in rejected} == {RejectReason.UNKNOWN_TURN}


async def test_a_call_rejected_before_its_turn_started_runs_once_the_turn_starts() -> None:
    """A call whose stream took a rejection before its turn existed is written to at the
    stream's true version once it opens: it goes on to be claimed, the runtime does not stop."""
    store = MemoryStore()
    async with running(store) as runtime:
        early = key_of("t1")
        await runtime.feed([CallOpened(key=early, tool=TOOL.name, sequence=0)])
        await runtime.settle()
        assert runtime._fold.records == {}
        [key] = await finish_turn(runtime, "t1")
        assert key == early
        assert runtime.phase(key) is Phase.DISPATCHED


async def test_a_runtime_that_finished_many_turns_holds_its_horizon_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Turn after turn finished, a minute apart, with a horizon of ten minutes: what the fold,
    the router and the runtime hold stays the size of the horizon, not of the history."""
    store = MemoryStore()
    horizon = timedelta(minutes=10)
    async with running(store, horizon=horizon) as runtime:
        for index in range(120):
            await finish_turn(runtime, f"t{index}", calls=3, conversation=f"c{index % 7}")
            await trio.sleep(60)
        await runtime.settle()
        fold = runtime._fold
        # Eleven turns at most are younger than the horizon, each with three calls.
        assert len(fold.records) <= 33
        assert len(fold._calls_of_turn) <= 11
        assert len(fold.scope._turns) <= 11
        assert len(fold._idle) <= 11
        assert len(runtime._router._written) <= 1024 + 33
        assert len(runtime._reported) <= 1024 + 33
        assert len(retirements(store)) >= 109


async def test_lost_streams_of_made_up_responses_leave_nothing_behind() -> None:
    """A resumable loss of a response whose turn was never started keeps no resume point."""
    store = MemoryStore()
    async with running(store) as runtime:
        for index in range(50):
            response = key_of(f"made-up-{index}").response_ref
            await runtime.feed([StreamLost(response=response, resumable=True, last_sequence=3)])
        await runtime.settle()
        assert runtime._fold._resumable == {}
        assert runtime._fold._resume_points == {}


async def test_refused_claims_leave_no_claimer_behind(tmp_path: Path) -> None:
    """Where processes share the log, executors racing for a call leave one claimer: the one
    dispatched, until its outcome is recorded."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    async with open_runtime(
        log=url, create=True, tools=[TOOL], limits=LIMITS, process="p1"
    ) as runtime:
        key = key_of("t1")
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL)
        await runtime.feed(whole_call(key))  # type: ignore[arg-type]
        await runtime.feed(
            [
                ResponseEnded(
                    response=key.response_ref,
                    reason=ResponseEndReason.COMPLETED,
                    terminal=TerminalRef(sequence=3),
                )
            ]
        )
        await runtime.settle()
        dispatches = []
        for index in range(5):
            with suppress(ClaimRefused):
                dispatches.append(await runtime.claim(key, executor=f"worker-{index}"))
        await runtime.settle()
        assert runtime.peers is not None
        assert len(dispatches) == 1
        assert list(runtime.peers._claimers) == [dispatches[0].claim_id]
        assert runtime.peers._asked == {}
        await runtime.complete(dispatches[0])
        await runtime.settle()
        assert runtime.peers._claimers == {}


async def test_an_inbox_of_one_still_delivers_every_decision_in_order() -> None:
    """With room for one piece of work per actor the router waits for each actor, and every
    call still reaches its end; an inbox below one is refused."""
    with pytest.raises(ConfigurationError, match="inbox_size"):
        async with open_runtime(log="memory://", inbox_size=0):
            pass
    log = MemoryLog(MemoryStore(), clock=trio_clock())
    async with open_runtime(log=log, tools=[TOOL], limits=LIMITS, inbox_size=1) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL)
        keys = [key_of("t1", f"call_{index}") for index in range(20)]
        events = [event for key in keys for event in whole_call(key)]
        events.append(
            ResponseEnded(
                response=keys[0].response_ref,
                reason=ResponseEndReason.COMPLETED,
                terminal=TerminalRef(sequence=3),
            )
        )
        await runtime.feed(events)  # type: ignore[arg-type]
        await runtime.settle()
        assert [runtime.phase(key) for key in keys] == [Phase.VALIDATED] * 20


@pytest.mark.parametrize("bound", [1, 2, None])
async def test_no_more_actors_than_the_bound_have_work_at_once(
    bound: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The router starts an actor only while fewer than ``max_busy_actors`` have work, and
    every call still reaches its end; unbounded, the same feed keeps more busy at once; a bound
    below one is refused."""
    with pytest.raises(ConfigurationError, match="max_busy_actors"):
        async with open_runtime(log="memory://", max_busy_actors=0):
            pass
    busy = most = 0
    actor = CallRouter._actor

    async def counted(router: CallRouter, key: CallKey, inbox: deque[Work]) -> None:
        nonlocal busy, most
        busy += 1
        most = max(most, busy)
        try:
            await actor(router, key, inbox)
        finally:
            busy -= 1

    monkeypatch.setattr(CallRouter, "_actor", counted)
    log = MemoryLog(MemoryStore(), clock=trio_clock())
    busy_actors = DEFAULT_MAX_BUSY_ACTORS if bound is None else bound
    async with open_runtime(
        log=log, tools=[TOOL], limits=LIMITS, max_busy_actors=busy_actors
    ) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL)
        keys = [key_of("t1", f"call_{index}") for index in range(20)]
        await runtime.feed([event for key in keys for event in whole_call(key)])  # type: ignore[misc]
        await runtime.settle()
        assert [runtime.phase(key) for key in keys] == [Phase.VALIDATED] * 20
    if bound is None:
        assert most > 2
    else:
        assert most == bound
