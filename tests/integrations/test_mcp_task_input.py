"""A task of the tests' own MCP server (``tests/mcp_server.py``) that asks for input, over stdio
and Streamable HTTP on 2026-07-28, with an executor that asks the person: the request goes to
the call's principal, bound to the call and to the request's digest; the answer given is sent
with ``tasks/update`` and the task completes once; a denial, a stop or an expiry cancels the
task with ``tasks/cancel``; a restart while it waits records the call ``outcome_unknown``
naming the task. Neither the question nor the answer is in the log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import pytest
import trio
from mcp_support import PRINCIPAL, connected, ready, start, steps

from inert import CallKey, ClaimRefused, InputRefused, PendingInput, Runtime, open_runtime
from inert.events import (
    ExecutionFailed,
    ExecutionInputDenied,
    ExecutionInputGiven,
    ExecutionInputRequested,
    ExecutionOutcomeUnknown,
    ExecutionTaskCreated,
)
from inert.mcp import MCPExecutor, Outcome, ServerRun, tasks

# Each test starts an MCP server process, and the SDK takes seconds to import.
pytestmark = pytest.mark.slow(seconds=10)

QUESTION = "which-vault-question-never-logged"
ANSWER = "the-answer-never-logged"


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    """Each transport, on 2026-07-28, the version that has the tasks extension."""
    return str(request.param)


def accept(answer: str) -> dict[str, Any]:
    """The task's ``inputResponses``: the elicitation it asked, accepted with this answer."""
    return {"answer": {"action": "accept", "content": {"answer": answer}}}


async def until_pending(runtime: Runtime, key: CallKey) -> PendingInput:
    """Until the call asks its principal for input: what it asks."""
    with trio.fail_after(20):
        async for _ in runtime.changes():
            pending = await runtime.pending_input(key)
            if pending is not None:
                return pending
    raise AssertionError("the changes of a runtime never end")


async def asked_and_answered(
    executor: MCPExecutor,
    runtime: Runtime,
    key: CallKey,
    answer: Callable[[PendingInput], Awaitable[None]],
) -> ServerRun:
    """Run the call, and once it asks for input, ``answer``: what the run ends as."""
    runs: list[ServerRun] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                runs.append(await executor.run(runtime, key))

            nursery.start_soon(run)
            await answer(await until_pending(runtime, key))
    return runs[0]


async def notes(runtime: Runtime, key: CallKey) -> list[Any]:
    """The events of the call's request stream (its requests, notes and outcome)."""
    return [record.event for record in await runtime.log.read_stream(key.request_stream)]


async def test_the_answer_given_goes_to_the_task_which_completes_once(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """The task's request for input reaches the call's principal; an answer of another
    principal or for another request is refused, the principal's is sent with
    ``tasks/update``, a second is refused, and the task completes once; the log holds digests
    and sizes, never the question or the answer."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client, ask_person=True)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "q", "task_ask", {"question": QUESTION})

            async def answer(pending: PendingInput) -> None:
                assert pending.principal == PRINCIPAL
                assert pending.tool == "task_ask"
                assert pending.task_id is not None
                shown = pending.request["answer"]["params"]["message"]
                assert shown == QUESTION
                digest = pending.request_digest
                with pytest.raises(InputRefused) as other:
                    await runtime.give_input(
                        key, principal="user:mallory", request_digest=digest, value=accept("x")
                    )
                assert other.value.reason == "wrong_principal"
                with pytest.raises(InputRefused) as stale:
                    await runtime.give_input(
                        key, principal=PRINCIPAL, request_digest="sha256:00", value=accept("x")
                    )
                assert stale.value.reason == "digest_mismatch"
                await runtime.give_input(
                    key, principal=PRINCIPAL, request_digest=digest, value=accept(ANSWER)
                )
                with pytest.raises(InputRefused) as again:
                    await runtime.give_input(
                        key, principal=PRINCIPAL, request_digest=digest, value=accept("x")
                    )
                assert again.value.reason in {"answered", "not_awaiting_input"}

            run = await asked_and_answered(executor, runtime, key, answer)
            assert run.outcome is Outcome.COMPLETED
            assert run.result is not None
            assert run.result.structured_content == {"result": ANSWER}
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "completed"
            recorded = await notes(runtime, key)
            [created] = [event for event in recorded if isinstance(event, ExecutionTaskCreated)]
            assert created.task_id == run.task_id
            [asked] = [event for event in recorded if isinstance(event, ExecutionInputRequested)]
            [given] = [event for event in recorded if isinstance(event, ExecutionInputGiven)]
            assert (given.principal, given.request_digest) == (PRINCIPAL, asked.request_digest)
            assert given.input_digest.startswith("hmac-sha256:")
            shown = repr(recorded) + repr(runtime.ledger.history(key))
            assert QUESTION not in shown
            assert ANSWER not in shown
    assert [entry["step"] for entry in steps(journal, key)] == [
        "started",
        "tasks/update",
        "answered",
    ]
    [answered] = [entry for entry in steps(journal, key) if entry["step"] == "answered"]
    assert answered["answer"] == accept(ANSWER)["answer"]


async def test_a_denial_cancels_the_task_and_records_the_call_failed(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """The principal denies the request for input: the task is cancelled with
    ``tasks/cancel``, and the call recorded failed ``input_denied`` as the server's
    cancellation ends it."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client, ask_person=True)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "d", "task_ask", {"question": QUESTION})

            async def deny(pending: PendingInput) -> None:
                await runtime.deny_input(
                    key, principal=PRINCIPAL, request_digest=pending.request_digest
                )

            run = await asked_and_answered(executor, runtime, key, deny)
            assert (run.outcome, run.error) == (Outcome.FAILED, "input_denied")
            await runtime.settle()
            recorded = await notes(runtime, key)
            [denied] = [event for event in recorded if isinstance(event, ExecutionInputDenied)]
            assert denied.principal == PRINCIPAL
            [failed] = [event for event in recorded if isinstance(event, ExecutionFailed)]
            assert failed.error == "input_denied"
    assert [entry["step"] for entry in steps(journal, key)] == [
        "started",
        "tasks/cancel",
        "cancelled",
    ]


async def test_a_stop_while_the_task_awaits_input_cancels_it(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """The turn is cancelled while the task waits for the person: the request is withdrawn
    (an answer afterwards is refused), the task cancelled, and the call recorded stopped."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client, ask_person=True)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "s", "task_ask", {"question": QUESTION})
            asked: list[PendingInput] = []

            async def stop(pending: PendingInput) -> None:
                asked.append(pending)
                await runtime.cancel_turn(key.turn_ref, principal=PRINCIPAL)

            run = await asked_and_answered(executor, runtime, key, stop)
            assert run.outcome is Outcome.STOPPED
            assert await runtime.pending_input(key) is None
            with pytest.raises(InputRefused) as late:
                await runtime.give_input(
                    key,
                    principal=PRINCIPAL,
                    request_digest=asked[0].request_digest,
                    value=accept(ANSWER),
                )
            assert late.value.reason == "not_awaiting_input"
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "stopped"
    assert [entry["step"] for entry in steps(journal, key)] == [
        "started",
        "tasks/cancel",
        "cancelled",
    ]


async def test_an_unanswered_request_expires_and_cancels_the_task(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO
) -> None:
    """Nobody answers within the input lifetime: the task is cancelled and the call recorded
    failed ``input_expired``."""
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client, ask_person=True, input_lifetime=0.5)
        async with open_runtime(log="memory://", tools=await executor.declarations()) as runtime:
            await start(runtime)
            key = await ready(runtime, "e", "task_ask", {"question": QUESTION})
            with trio.fail_after(30):
                run = await executor.run(runtime, key)
            assert (run.outcome, run.error) == (Outcome.FAILED, "input_expired")
    assert [entry["step"] for entry in steps(journal, key)] == [
        "started",
        "tasks/cancel",
        "cancelled",
    ]


async def test_a_restart_while_the_task_awaits_input_names_the_task(
    transport: str, journal: Path, server_url: str | None, errlog: TextIO, tmp_path: Path
) -> None:
    """The process following the task stops while the person has not answered: the restarted
    runtime records the call ``outcome_unknown`` naming the task's id, the ledger shows both,
    the request is no longer pending, and the call is never sent again."""
    log = f"sqlite:///{tmp_path / 'inert.db'}"
    async with connected(transport, journal, server_url, errlog, [tasks()]) as client:
        executor = MCPExecutor(client, ask_person=True)
        tools = await executor.declarations()
        async with open_runtime(log=log, create=True, tools=tools) as runtime:
            await start(runtime)
            key = await ready(runtime, "r", "task_ask", {"question": QUESTION})
            async with trio.open_nursery() as nursery:
                nursery.start_soon(executor.run, runtime, key)
                pending = await until_pending(runtime, key)
                # The executor's process stops here, the person's answer never came.
                nursery.cancel_scope.cancel()
        task_id = pending.task_id
        assert task_id is not None
        async with open_runtime(log=log, tools=tools) as runtime:
            await runtime.settle()
            row = runtime.ledger.row(key)
            assert row is not None
            assert row.outcome == "unknown"
            [unknown] = [
                event
                for event in await notes(runtime, key)
                if isinstance(event, ExecutionOutcomeUnknown)
            ]
            assert unknown.task_id == task_id
            details = [step.detail for step in runtime.ledger.history(key)]
            assert any(detail.endswith(f"runs as task {task_id}") for detail in details)
            assert any(f"its run was task {task_id}" in detail for detail in details)
            assert await runtime.pending_input(key) is None
            with pytest.raises(ClaimRefused):
                await executor.run(runtime, key)
    assert [entry["step"] for entry in steps(journal, key)].count("started") == 1
    assert "answered" not in [entry["step"] for entry in steps(journal, key)]
