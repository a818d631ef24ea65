"""An executor's notes while a call runs: the task its run is on a server, and input the call
asks its principal for, answered as a confirmation is (the turn's principal, the request's
digest, before its expiry, once), with no value of the request or the answer in the log."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
import trio
import trio.testing
from test_runtime import (
    PRINCIPAL,
    TOOLS,
    call_events,
    key_of,
    ready_call,
    response_end,
    running,
    start,
)

from inert import (
    ConfigurationError,
    Dispatch,
    InputAnswer,
    InputRefused,
    PendingInput,
    RefusedError,
    Runtime,
    open_asyncio_runtime,
)
from inert.events import (
    ExecutionInputDenied,
    ExecutionInputGiven,
    ExecutionInputRequested,
    ExecutionOutcomeUnknown,
    ExecutionTaskCreated,
)
from inert.log import MemoryLog, MemoryStore

KEY = key_of("c1")
REQUEST = {"answer": {"method": "elicitation/create", "params": {"message": "secret-question"}}}
LIFETIME = timedelta(minutes=5)


async def dispatched(runtime: Runtime) -> Dispatch:
    await start(runtime)
    await ready_call(runtime, KEY)
    return await runtime.claim(KEY, executor="worker")


async def pending(runtime: Runtime) -> PendingInput:
    """Until the call asks its principal for input: what it asks."""
    async for _ in runtime.changes():
        asked = await runtime.pending_input(KEY)
        if asked is not None:
            return asked
    raise AssertionError("the changes of a runtime never end")


async def asking(
    runtime: Runtime, dispatch: Dispatch, nursery: trio.Nursery, answers: list[Any]
) -> PendingInput:
    """Start the executor's request for input in ``nursery`` (its answer goes to ``answers``):
    what the person sees."""

    async def ask() -> None:
        answers.append(await runtime.ask_for_input(dispatch, REQUEST, expires_in=LIFETIME))

    nursery.start_soon(ask)
    return await pending(runtime)


async def notes(runtime: Runtime) -> list[Any]:
    return [record.event for record in await runtime.log.read_stream(KEY.request_stream)]


async def test_an_answer_binds_to_the_principal_the_request_and_once() -> None:
    """Another principal, another request's digest and a second answer are refused, nothing
    recorded; the principal's answer reaches the executor and the log keeps its digest and
    size alone."""
    async with running() as runtime:
        dispatch = await dispatched(runtime)
        answers: list[InputAnswer | None] = []
        async with trio.open_nursery() as nursery:
            asked = await asking(runtime, dispatch, nursery, answers)
            assert (asked.principal, asked.tool, asked.request) == (
                PRINCIPAL,
                dispatch.tool,
                REQUEST,
            )
            digest = asked.request_digest
            for principal, named, reason in [
                ("user:mallory", digest, "wrong_principal"),
                (PRINCIPAL, "hmac-sha256:00", "digest_mismatch"),
            ]:
                with pytest.raises(InputRefused) as refused:
                    await runtime.give_input(
                        KEY, principal=principal, request_digest=named, value="x"
                    )
                assert refused.value.reason == reason
            await runtime.give_input(
                KEY, principal=PRINCIPAL, request_digest=digest, value={"a": "secret-answer"}
            )
            with pytest.raises(InputRefused):
                await runtime.deny_input(KEY, principal=PRINCIPAL, request_digest=digest)
        assert answers == [
            InputAnswer(principal=PRINCIPAL, given=True, value={"a": "secret-answer"})
        ]
        await runtime.settle()
        recorded = await notes(runtime)
        [requested] = [event for event in recorded if isinstance(event, ExecutionInputRequested)]
        [given] = [event for event in recorded if isinstance(event, ExecutionInputGiven)]
        assert requested.request_digest == given.request_digest == digest
        assert given.size == len(b'{"a":"secret-answer"}')
        assert not [event for event in recorded if isinstance(event, ExecutionInputDenied)]
        shown = repr(recorded) + repr(runtime.ledger.history(KEY))
        assert "secret-question" not in shown
        assert "secret-answer" not in shown
        assert await runtime.pending_input(KEY) is None


async def test_a_denial_reaches_the_executor() -> None:
    """The principal's denial is recorded and handed to the executor as an answer not given."""
    async with running() as runtime:
        dispatch = await dispatched(runtime)
        answers: list[InputAnswer | None] = []
        async with trio.open_nursery() as nursery:
            asked = await asking(runtime, dispatch, nursery, answers)
            await runtime.deny_input(KEY, principal=PRINCIPAL, request_digest=asked.request_digest)
        assert answers == [InputAnswer(principal=PRINCIPAL, given=False)]
        await runtime.settle()
        assert any(isinstance(event, ExecutionInputDenied) for event in await notes(runtime))


async def test_an_unanswered_request_expires(autojump_clock: trio.testing.MockClock) -> None:
    """Past its lifetime, the request ends unanswered for the executor, and an answer is
    refused (nothing is pending any more)."""
    async with running() as runtime:
        dispatch = await dispatched(runtime)
        answers: list[InputAnswer | None] = []
        async with trio.open_nursery() as nursery:
            asked = await asking(runtime, dispatch, nursery, answers)
        assert answers == [None]
        with pytest.raises(InputRefused) as late:
            await runtime.give_input(
                KEY, principal=PRINCIPAL, request_digest=asked.request_digest, value="x"
            )
        assert late.value.reason == "not_awaiting_input"


async def test_one_request_at_a_time_of_json_while_the_call_runs() -> None:
    """A second request while one waits, a request that is not JSON, and a request or a note
    after the outcome are refused."""
    async with running() as runtime:
        dispatch = await dispatched(runtime)
        answers: list[InputAnswer | None] = []
        async with trio.open_nursery() as nursery:
            await asking(runtime, dispatch, nursery, answers)
            with pytest.raises(RefusedError):
                await runtime.ask_for_input(dispatch, REQUEST, expires_in=LIFETIME)
            nursery.cancel_scope.cancel()
        assert await runtime.pending_input(KEY) is None
        not_json: list[Any] = [{"a": object()}, {"a": float("nan")}, {1: "a"}]
        for request in not_json:
            with pytest.raises(ConfigurationError):
                await runtime.ask_for_input(dispatch, request, expires_in=LIFETIME)
        await runtime.complete(dispatch)
        with pytest.raises(RefusedError):
            await runtime.ask_for_input(dispatch, REQUEST, expires_in=LIFETIME)
        with pytest.raises(RefusedError):
            await runtime.note_task(dispatch, "task-1")


@pytest.mark.parametrize("task_id", ["", "with space", "x" * 257, "naïve"])
async def test_a_task_id_the_log_cannot_keep_is_refused(task_id: str) -> None:
    """An empty, spaced, overlong or non-ASCII task id is refused before anything is
    recorded."""
    async with running() as runtime:
        dispatch = await dispatched(runtime)
        with pytest.raises(ConfigurationError):
            await runtime.note_task(dispatch, task_id)
        assert not [e for e in await notes(runtime) if isinstance(e, ExecutionTaskCreated)]


async def test_a_restart_names_the_task_of_a_call_whose_outcome_is_unknown() -> None:
    """The task noted for a running call is named by the outcome a restart records, and in
    the ledger's history."""
    store = MemoryStore()
    async with running(store) as runtime:
        dispatch = await dispatched(runtime)
        await runtime.note_task(dispatch, "task-42")
        await runtime.settle()
        details = [step.detail for step in runtime.ledger.history(KEY)]
        assert f"claim {dispatch.claim_id}: runs as task task-42" in details
    async with running(store) as runtime:
        await runtime.settle()
        [unknown] = [e for e in await notes(runtime) if isinstance(e, ExecutionOutcomeUnknown)]
        assert unknown.task_id == "task-42"
        row = runtime.ledger.row(KEY)
        assert row is not None
        assert row.outcome == "unknown"
        [last] = runtime.ledger.history(KEY)[-1:]
        assert last.detail.endswith("its run was task task-42")


def test_under_asyncio_the_executor_asks_and_the_person_answers() -> None:
    """Through the asyncio facade, an executor's request for input is answered by the
    principal, and the task it notes is in the log."""

    async def main() -> tuple[InputAnswer | None, list[str]]:
        async with open_asyncio_runtime(log=MemoryLog(MemoryStore()), tools=TOOLS) as runtime:
            await runtime.start_turn(
                tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL
            )
            await runtime.feed([*call_events(KEY), response_end(KEY)])
            await runtime.settle()
            dispatch = await runtime.claim(KEY, executor="worker")
            await runtime.note_task(dispatch, "task-7")
            asking = asyncio.ensure_future(
                runtime.ask_for_input(dispatch, REQUEST, expires_in=LIFETIME)
            )
            async for _ in runtime.changes():
                asked = await runtime.pending_input(KEY)
                if asked is not None:
                    break
            assert asked is not None
            assert asked.task_id == "task-7"
            await runtime.give_input(
                KEY, principal=PRINCIPAL, request_digest=asked.request_digest, value=[1]
            )
            answer = await asyncio.wait_for(asking, 10)
            await runtime.complete(dispatch)
            await runtime.settle()
            return answer, [step.event_type for step in runtime.ledger.history(KEY)]

    answer, steps = asyncio.run(main())
    assert answer == InputAnswer(principal=PRINCIPAL, given=True, value=[1])
    assert [step for step in steps if step.startswith("note.")] == [
        ExecutionTaskCreated.TAG,
        ExecutionInputRequested.TAG,
        ExecutionInputGiven.TAG,
    ]
