"""The asyncio facade offers every operation of the Trio runtime, alike, and behaves alike:
the same answers and errors, async iterators where the runtime has them, cancellation of an
asyncio task reaching into Trio, and a closed runtime refusing with an inert error."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from builders import call_key

from inert import (
    ArgumentsAppended,
    AsyncioRuntime,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    Dispatch,
    Event,
    Phase,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    RuntimeClosed,
    TerminalRef,
    ToolDeclaration,
    open_asyncio_runtime,
    open_runtime,
)
from inert.runtime._guest import MAX_IDLE_WORKERS

TOOLS = [
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
]
OPERATOR = "ops:carol"


def key(call: str, turn: str = "t1") -> CallKey:
    return call_key(call, item=call, turn=turn)


def whole_call(call: str, tool: str, turn: str = "t1") -> list[Event]:
    """A call and its response, from opening to the response's successful end."""
    return [
        CallOpened(key=key(call, turn), tool=tool, sequence=0),
        ArgumentsAppended(
            key=key(call, turn), data=b'{"city": "Oslo"}', first_sequence=1, last_sequence=1
        ),
        CallEnded(key=key(call, turn), terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key(call, turn).response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


@asynccontextmanager
async def started(**options: Any) -> AsyncIterator[AsyncioRuntime]:
    async with open_asyncio_runtime(
        log="memory://", tools=TOOLS, operators=[OPERATOR], **options
    ) as runtime:
        await runtime.start_turn(
            tenant="acme", conversation="c1", turn="t1", principal="user:alice"
        )
        yield runtime


def public_members(cls: type) -> dict[str, Any]:
    return {name: member for name, member in inspect.getmembers(cls) if not name.startswith("_")}


# --- the two APIs compared ------------------------------------------------------------------


def test_every_public_member_of_the_runtime_is_on_the_facade() -> None:
    """Each method and property of Runtime has a namesake on AsyncioRuntime."""
    missing = set(public_members(Runtime)) - set(public_members(AsyncioRuntime))
    assert not missing


def test_the_facade_s_operations_take_the_runtime_s_parameters_and_kinds() -> None:
    """Every operation has the runtime's signature and a docstring, a coroutine where the
    runtime has one and a plain function where it has a view or an iterator."""
    facade = public_members(AsyncioRuntime)
    for name, member in public_members(Runtime).items():
        if isinstance(member, property):
            assert isinstance(facade[name], property), name
            continue
        twin = facade[name]
        assert inspect.signature(twin).parameters == inspect.signature(member).parameters, name
        assert inspect.iscoroutinefunction(twin) == inspect.iscoroutinefunction(member), name
        assert twin.__doc__, name


def test_every_public_attribute_of_a_runtime_is_read_through_the_facade() -> None:
    """What an open runtime holds in public attributes, the facade gives as the very objects."""

    async def compare() -> None:
        async with open_asyncio_runtime(log="memory://", tools=TOOLS) as facade:
            runtime = facade._runtime
            for name in (name for name in vars(runtime) if not name.startswith("_")):
                assert getattr(facade, name) is getattr(runtime, name), name

    asyncio.run(compare())


def test_open_asyncio_runtime_takes_the_options_of_open_runtime() -> None:
    """The opener under asyncio has the parameters of ``open_runtime``, to the letter."""
    assert (
        inspect.signature(open_asyncio_runtime).parameters
        == inspect.signature(open_runtime).parameters
    )


# --- behaviour --------------------------------------------------------------------------------


def test_executors_run_in_asyncio_and_their_outcomes_are_recorded() -> None:
    """``execute`` runs an asyncio coroutine on the claimed call and records its outcome; a
    failing executor's error reaches the caller and the call is recorded failed."""

    async def run() -> tuple[list[str], str | None, str | None]:
        seen: list[str] = []

        async def tool(dispatch: Dispatch) -> None:
            await asyncio.sleep(0)
            seen.append(str(dispatch.arguments["city"]))

        async def broken(dispatch: Dispatch) -> None:
            raise OSError("the weather service is down")

        async with started() as runtime:
            await runtime.feed(whole_call("a", "get_weather") + whole_call("b", "get_weather"))
            await runtime.settle()
            await runtime.execute(key("a"), tool, name="worker")
            with pytest.raises(OSError, match="weather service"):
                await runtime.execute(key("b"), broken, name="worker")
            await runtime.settle()
            first, second = runtime.ledger.row(key("a")), runtime.ledger.row(key("b"))
            assert first is not None
            assert second is not None
            return seen, first.outcome, second.outcome

    assert asyncio.run(run()) == (["Oslo"], "completed", "failed")


def test_ready_calls_and_changes_are_async_iterators_under_asyncio() -> None:
    """``ready_calls`` gives each ready call once as it becomes ready, and ``changes`` the
    positions the views move to, iterated with ``async for`` in asyncio."""

    async def run() -> tuple[list[str], bool]:
        async with started() as runtime:
            ready = runtime.ready_calls()
            changes = runtime.changes()
            first = await anext(changes)
            await runtime.feed(whole_call("a", "get_weather"))
            later = await anext(changes)
            await runtime.feed(whole_call("b", "get_weather"))
            calls = [await anext(ready), await anext(ready)]
            return [call.key.call for call in calls], later > first

    assert asyncio.run(run()) == (["a", "b"], True)


def test_views_are_the_runtime_s_own() -> None:
    """Phase, principal, owner, digest and the resumable views answer as the runtime does."""

    async def run() -> None:
        async with started(process="p1") as runtime:
            await runtime.feed(whole_call("a", "get_weather"))
            await runtime.settle()
            turn = key("a").turn_ref
            assert runtime.phase(key("a")) is Phase.VALIDATED
            assert runtime.turn_principal(turn) == "user:alice"
            assert runtime.turn_owner(turn) == "p1"
            assert runtime.resumable_streams(turn) == {}
            resumable = runtime.resumable_calls(key("a").response_ref)
            assert [call.key for call in resumable] == [key("a")]
            assert runtime.digest() == runtime.projections.digest()

    asyncio.run(run())


def test_operator_controls_run_under_asyncio() -> None:
    """Quarantining a response, disabling a tool and stopping a tenant end calls inertly, as
    under Trio; a control by someone not an operator is refused with the same error."""

    async def run() -> list[str | None]:
        async with started() as runtime:
            for call, tool in (("a", "get_weather"), ("b", "send_email"), ("c", "get_weather")):
                await runtime.feed(whole_call(call, tool)[:2])
            await runtime.quarantine_response(
                key("a").response, operator=OPERATOR, reason="bad stream"
            )
            await runtime.disable_tool("send_email", operator=OPERATOR, reason="incident")
            await runtime.stop_tenant("acme", operator=OPERATOR, reason="stop")
            with pytest.raises(RefusedError):
                await runtime.resume_tenant("acme", operator="user:mallory", reason="no")
            await runtime.resume_tenant("acme", operator=OPERATOR, reason="over")
            await runtime.enable_tool("send_email", operator=OPERATOR, reason="over")
            await runtime.settle()
            return [runtime.phase(key(call)).value for call in "abc"]

    assert asyncio.run(run()) == ["cancelled", "cancelled", "cancelled"]


def test_confirmation_and_turn_cancellation_under_asyncio() -> None:
    """A confirmed call is claimed once; a cancelled turn's call never is; a stranger's
    confirmation is refused with the runtime's error."""

    async def run() -> None:
        async with started() as runtime:
            await runtime.feed(whole_call("a", "send_email"))
            await runtime.settle()
            pending = await runtime.pending_confirmation(key("a"))
            assert pending is not None
            with pytest.raises(RefusedError):
                await runtime.confirm(
                    key("a"), principal="user:mallory", arguments_digest=pending.arguments_digest
                )
            await runtime.confirm(
                key("a"), principal="user:alice", arguments_digest=pending.arguments_digest
            )
            dispatch = await runtime.claim(key("a"), executor="worker")
            await runtime.complete(dispatch)
            with pytest.raises(ClaimRefused):
                await runtime.claim(key("a"), executor="worker")
            turn = await runtime.start_turn(
                tenant="acme", conversation="c2", turn="t2", principal="user:alice"
            )
            other = call_key("x", item="x", conversation="c2", turn="t2", response="r2")
            await runtime.feed([CallOpened(key=other, tool="get_weather", sequence=0)])
            await runtime.cancel_turn(turn, principal="user:alice", reason="changed my mind")
            await runtime.settle()
            assert runtime.phase(other) is Phase.CANCELLED

    asyncio.run(run())


def test_cancelling_the_asyncio_task_cancels_the_wait_in_trio() -> None:
    """A task cancelled while it waits for the next ready call stops waiting in Trio too: the
    runtime goes on, and the call that becomes ready later is given to the next wait."""

    async def run() -> str:
        async with started() as runtime:
            ready = runtime.ready_calls()
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(ready), timeout=0.05)
            await runtime.feed(whole_call("a", "get_weather"))
            call = await asyncio.wait_for(anext(ready), timeout=10)
            return call.key.call

    assert asyncio.run(run()) == "a"


def test_a_task_cancelled_again_while_trio_stops_its_operation_still_waits_for_it() -> None:
    """Cancelling a waiting task twice ends it cancelled once Trio has stopped its wait, and
    the iterator it waited on goes on giving what comes next."""

    async def run() -> bool:
        async with started() as runtime:
            changes = runtime.changes()
            first = await anext(changes)
            waiting = asyncio.ensure_future(anext(changes))
            await asyncio.sleep(0.01)
            waiting.cancel()
            await asyncio.sleep(0)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            await runtime.feed(whole_call("a", "get_weather"))
            return await asyncio.wait_for(anext(changes), timeout=10) > first

    assert asyncio.run(run())


def test_an_operation_after_the_runtime_closed_is_refused_as_closed() -> None:
    """The facade used after its block ended raises RuntimeClosed, an inert error."""

    async def run() -> AsyncioRuntime:
        async with open_asyncio_runtime(log="memory://", tools=TOOLS) as runtime:
            pass
        return runtime

    async def use_after_close() -> None:
        runtime = await run()
        await runtime.settle()

    with pytest.raises(RuntimeClosed):
        asyncio.run(use_after_close())


def test_a_refused_turn_reaches_asyncio_as_the_runtime_s_error() -> None:
    """An identity the runtime refuses is the same RefusedError under asyncio."""

    async def run() -> None:
        async with open_asyncio_runtime(log="memory://", tools=TOOLS) as runtime:
            await runtime.start_turn(tenant="", conversation="c", turn="t", principal="p")

    with pytest.raises(RefusedError):
        asyncio.run(run())


def test_a_burst_of_operations_is_done_and_leaves_few_workers_parked() -> None:
    """Many operations at once each get their answer; afterwards at most MAX_IDLE_WORKERS
    Trio tasks stay parked for the next ones."""

    async def run() -> tuple[int, int]:
        async with started() as runtime:
            phases = await asyncio.gather(*(runtime.settle() for _ in range(300)))
            return len(phases), len(runtime._crossing._idle)

    done, parked = asyncio.run(run())
    assert done == 300
    assert 0 < parked <= MAX_IDLE_WORKERS


def test_a_worker_whose_operation_was_cancelled_is_replaced() -> None:
    """After operations cancelled mid-way, later operations still run, on fresh workers."""

    async def run() -> list[str]:
        async with started() as runtime:
            for _ in range(3):
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(anext(runtime.ready_calls()), timeout=0.01)
            await runtime.feed(whole_call("a", "get_weather"))
            return [call.key.call for call in await runtime.ready()]

    assert asyncio.run(run()) == ["a"]
