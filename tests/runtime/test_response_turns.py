"""One provider response belongs to one turn: a response id seen under a turn never acts under
another, in any conversation of the tenant, live, after a restart and on every backend."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import trio
import trio.testing
from postgres_support import fresh_schema, log_url

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    ClaimRefused,
    Event,
    Phase,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    Runtime,
    StatusCue,
    TerminalRef,
    TextReceived,
    ToolDeclaration,
    open_runtime,
    trio_clock,
)
from inert.actors._scope import ResponseTurns
from inert.events import FailReason
from inert.log import MemoryLog, MemoryStore

TOOL = ToolDeclaration(name="lookup")
PRINCIPAL = "user:alice"
LIMITS = CallLimits(idle_timeout=timedelta(hours=10))
FIRST_TURN = ("c1", "t1")
"""Where the response is first seen: conversation and turn."""

OTHER_TURNS = {
    "next turn, same conversation": ("c1", "t2"),
    "turn of another conversation": ("c2", "t9"),
}


def key_of(where: tuple[str, str], call: str = "call_0", response: str = "resp_1") -> CallKey:
    conversation, turn = where
    return CallKey(
        tenant="acme", conversation=conversation, turn=turn, response=response, item=call, call=call
    )


def whole_call(key: CallKey) -> list[Event]:
    return [
        CallOpened(key=key, tool=TOOL.name, sequence=0),
        ArgumentsAppended(key=key, data=b'{"q": 1}', offset=0, first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
    ]


def response_end(response: ResponseRef) -> ResponseEnded:
    return ResponseEnded(
        response=response, reason=ResponseEndReason.COMPLETED, terminal=TerminalRef(sequence=3)
    )


def a_response(keys: list[CallKey]) -> list[Event]:
    """The calls of one response, whole, and the response's successful end."""
    return [
        *(event for key in keys for event in whole_call(key)),
        response_end(keys[0].response_ref),
    ]


async def start(runtime: Runtime, where: tuple[str, str]) -> None:
    conversation, turn = where
    await runtime.start_turn(
        tenant="acme", conversation=conversation, turn=turn, principal=PRINCIPAL
    )


async def run_first_response(runtime: Runtime, calls: int = 1) -> list[CallKey]:
    """The response of the first turn: its calls made ready, claimed and completed."""
    await start(runtime, FIRST_TURN)
    keys = [key_of(FIRST_TURN, f"call_{index}") for index in range(calls)]
    await runtime.feed(a_response(keys))
    await runtime.settle()
    for key in keys:
        await runtime.complete(await runtime.claim(key, executor="worker"))
    return keys


async def assert_refused(runtime: Runtime, key: CallKey, first: tuple[str, str]) -> None:
    """The call failed as a response of another turn: never ready, a claim refused, shown so
    in the ledger and the status."""
    await runtime.settle()
    assert runtime.phase(key) is Phase.FAILED
    assert key not in runtime.projections.queue.ready()
    with pytest.raises(ClaimRefused):
        await runtime.claim(key, executor="worker")
    row = runtime.projections.ledger.row(key)
    assert row is not None
    assert row.terminal_reason == FailReason.RESPONSE_OF_ANOTHER_TURN.value
    assert runtime.projections.status.of(key) is StatusCue.FAILED
    [failed] = [
        step
        for step in runtime.projections.ledger.history(key)
        if step.event_type == "decision.failed"
    ]
    assert "turn/acme/" + "/".join(first) in failed.detail


@asynccontextmanager
async def on_memory(
    store: MemoryStore, horizon: timedelta = timedelta(days=30)
) -> AsyncIterator[Runtime]:
    log = MemoryLog(store, clock=trio_clock())
    try:
        async with open_runtime(
            log=log, tools=[TOOL], limits=LIMITS, ledger_horizon=horizon
        ) as runtime:
            yield runtime
    finally:
        await log.aclose()


@pytest.mark.parametrize("other", OTHER_TURNS.values(), ids=list(OTHER_TURNS))
async def test_a_finished_response_replayed_into_another_turn_never_acts_again(
    other: tuple[str, str],
) -> None:
    """The calls of a response already executed, fed again under another turn of the tenant,
    fail response_of_another_turn; the first turn's calls keep their outcome."""
    async with on_memory(MemoryStore()) as runtime:
        [first] = await run_first_response(runtime)
        await start(runtime, other)
        replayed = key_of(other)
        await runtime.feed(a_response([replayed]))
        await assert_refused(runtime, replayed, FIRST_TURN)
        assert runtime.phase(first) is Phase.DISPATCHED


async def test_a_response_still_streaming_is_refused_under_another_turn() -> None:
    """A response id that arrives under a second turn while its first turn still collects it:
    the second's call fails, the first's goes on and becomes ready."""
    async with on_memory(MemoryStore()) as runtime:
        await start(runtime, FIRST_TURN)
        await start(runtime, ("c2", "t9"))
        first, second = key_of(FIRST_TURN), key_of(("c2", "t9"))
        await runtime.feed(whole_call(first)[:2])
        await runtime.feed(whole_call(second))
        await runtime.feed([*whole_call(first)[2:], response_end(first.response_ref)])
        await assert_refused(runtime, second, FIRST_TURN)
        assert first in runtime.projections.queue.ready()


@pytest.mark.parametrize(
    "opening",
    [
        pytest.param(lambda r: [TextReceived(response=r, characters=5)], id="text"),
        pytest.param(lambda r: [response_end(r)], id="an empty response"),
        pytest.param(
            lambda r: [
                ArgumentsAppended(
                    key=key_of(FIRST_TURN, "orphan"),
                    data=b"{}",
                    offset=0,
                    first_sequence=1,
                    last_sequence=1,
                )
            ],
            id="a fragment before its opening",
        ),
    ],
)
async def test_a_response_first_seen_without_calls_still_belongs_to_its_turn(
    opening: Callable[[ResponseRef], list[Event]],
) -> None:
    """Whatever the first event of a response under its turn was (text, its end, a stray
    fragment), a call of the same response id under another turn fails."""
    async with on_memory(MemoryStore()) as runtime:
        await start(runtime, FIRST_TURN)
        await runtime.feed(opening(key_of(FIRST_TURN).response_ref))
        other = ("c1", "t2")
        await start(runtime, other)
        replayed = key_of(other)
        await runtime.feed(a_response([replayed]))
        await assert_refused(runtime, replayed, FIRST_TURN)


async def test_every_call_of_a_replayed_response_fails_and_other_responses_act() -> None:
    """All the calls of a replayed response fail; a new response of the same turn runs."""
    async with on_memory(MemoryStore()) as runtime:
        await run_first_response(runtime, calls=3)
        other = ("c1", "t2")
        await start(runtime, other)
        replayed = [key_of(other, f"call_{index}") for index in range(3)]
        fresh = key_of(other, "call_0", response="resp_2")
        await runtime.feed(a_response(replayed))
        await runtime.feed(a_response([fresh]))
        for key in replayed:
            await assert_refused(runtime, key, FIRST_TURN)
        assert fresh in runtime.projections.queue.ready()


async def test_a_response_of_a_retired_turn_is_refused_under_a_new_turn(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Once the first turn is retired and forgotten, a call of its response id under a new
    turn still fails: the response's stream had events of a turn unknown now."""
    horizon = timedelta(hours=1)
    async with on_memory(MemoryStore(), horizon=horizon) as runtime:
        await run_first_response(runtime)
        await trio.sleep(2 * horizon.total_seconds())
        await runtime.settle()
        assert runtime.turn_principal(key_of(FIRST_TURN).turn_ref) is None
        other = ("c1", "t2")
        await start(runtime, other)
        replayed = key_of(other)
        await runtime.feed(a_response([replayed]))
        await runtime.settle()
        assert runtime.phase(replayed) is Phase.FAILED
        row = runtime.projections.ledger.row(replayed)
        assert row is not None
        assert row.terminal_reason == FailReason.RESPONSE_OF_ANOTHER_TURN.value


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("snapshot", [True, False], ids=["from a snapshot", "replayed"])
async def test_the_refusal_holds_after_a_restart_on_every_backend(
    backend: str, snapshot: bool, tmp_path: Path
) -> None:
    """A runtime restarted on the log (from its snapshot, or replaying it all) refuses the
    response under another turn as the first runtime would have, and replays the refusal made
    before the restart to the same decisions."""

    def opened(url: str) -> AbstractAsyncContextManager[Runtime]:
        return open_runtime(
            log=url,
            create=True,
            tools=[TOOL],
            limits=LIMITS,
            snapshot_every=1 if snapshot else None,
        )

    async def scenario(url: str) -> None:
        async with opened(url) as runtime:
            await run_first_response(runtime)
            await start(runtime, ("c2", "t9"))
            early = key_of(("c2", "t9"))
            await runtime.feed(a_response([early]))
            await assert_refused(runtime, early, FIRST_TURN)
        async with opened(url) as runtime:
            await runtime.settle()
            assert runtime.phase(early) is Phase.FAILED
            later = ("c1", "t2")
            await start(runtime, later)
            replayed = key_of(later)
            await runtime.feed(a_response([replayed]))
            await assert_refused(runtime, replayed, FIRST_TURN)

    if backend == "sqlite":
        await scenario(f"sqlite:///{tmp_path / 'log.db'}")
        return
    with fresh_schema() as schema:
        await scenario(log_url(schema))


def test_response_turns_knows_the_first_turn_and_forgets_it_with_the_turn() -> None:
    """The first event of a response stream names its turn; another turn's response of the
    same id is elsewhere, the same turn's is not; a retired turn's stream is elsewhere for
    everyone, a fresh stream for nobody."""
    turns = ResponseTurns()
    first = key_of(FIRST_TURN).response_ref
    other = key_of(("c2", "t9")).response_ref
    assert turns.elsewhere(first, 1) == ""
    turns.note(first.stream, 1, first, known=True)
    turns.note(other.stream, 2, other, known=True)
    assert turns.elsewhere(first, 5) == ""
    assert turns.elsewhere(other, 5) == "turn 'turn/acme/c1/t1'"
    turns.retire(first.turn_ref)
    assert turns.elsewhere(other, 7).startswith("a turn unknown here")
    assert turns.elsewhere(key_of(("c2", "t9"), response="resp_new").response_ref, 1) == ""
