"""A pydantic-ai agent's tool calls through inert, driven by pydantic-ai's own ``FunctionModel``
and ``TestModel`` streaming tool calls (no network): a tool runs only when inert dispatches the
call, once, with the arguments inert validated or the person confirmed; what users of
pydantic-ai report today (an approved call run again by a retry, a cancelled run whose tool
goes on) does not happen; and the awkward orders end as inert's suite expects."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import subprocess
import sys
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from locations import ROOT
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    FunctionToolset,
    RunContext,
    ToolFailed,
)
from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RunUsage

from inert import AsyncioRuntime, ConfirmationRefused, Phase, open_asyncio_runtime
from inert.pydantic_ai import InertTurn, declaration_from_tool_def

WEATHER = ('{"city": ', '"Paris"}')
EMAIL = ('{"to": "bob@example.com",', ' "body": "hi"}')


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 60))


async def drain(ctx: Any, events: AsyncIterable[Any]) -> None:
    """An event stream handler that reads every event: it runs an agent on the model's stream
    (as inert's capability does by itself)."""
    async for _ in events:
        pass


def returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    """The tool returns the model was given, in order."""
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def scripted(*responses: Callable[[], AsyncIterator[str | DeltaToolCalls]]) -> FunctionModel:
    """A model that streams these responses, one per request, then says ``done``."""
    answered: list[int] = []

    async def stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        index = len(answered)
        answered.append(index)
        if index < len(responses):
            async for chunk in responses[index]():
                yield chunk
        else:
            yield "done"

    return FunctionModel(stream_function=stream)


def make_agent(
    model: FunctionModel | TestModel, ran: list[tuple[str, dict[str, Any]]]
) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(model, output_type=[str, DeferredToolRequests])

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        ran.append(("get_weather", {"city": city}))
        return f"sunny in {city}"

    @agent.tool_plain(requires_approval=True)
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        ran.append(("send_email", {"to": to, "body": body}))
        return "sent"

    return agent


def inert_turn(runtime: AsyncioRuntime, turn: str = "t1", **options: Any) -> InertTurn:
    return InertTurn(
        runtime, tenant="acme", conversation="c1", turn=turn, principal="al", **options
    )


def states(runtime: AsyncioRuntime) -> dict[str, tuple[str, str | None, str | None]]:
    """Each call of the log by tool call id: its state, why it ended, its outcome."""
    return {
        row.call: (str(row.state), row.terminal_reason, row.outcome and str(row.outcome))
        for row in runtime.ledger.rows()
    }


def test_two_interleaved_calls_run_once_each_and_only_after_the_response_ends() -> None:
    """Two calls whose fragments interleave are dispatched once each, with their own
    arguments, after the response ended: nothing runs while the model still streams."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def interleaved() -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="get_weather", tool_call_id="a")}
        yield {1: DeltaToolCall(name="get_weather", tool_call_id="b")}
        yield {0: DeltaToolCall(json_args=WEATHER[0])}
        yield {1: DeltaToolCall(json_args='{"city": "Oslo"}')}
        yield {0: DeltaToolCall(json_args=WEATHER[1])}
        assert ran == [], "a tool ran while its response was streaming"

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            agent = make_agent(scripted(interleaved), ran)
            result = await agent.run("weather?", capabilities=[inert_turn(runtime)])
            assert result.output == "done"
            assert sorted(ran, key=str) == [
                ("get_weather", {"city": "Oslo"}),
                ("get_weather", {"city": "Paris"}),
            ]
            assert states(runtime) == {
                "a": ("dispatched", None, "completed"),
                "b": ("dispatched", None, "completed"),
            }

    run(main)


def test_a_cancellation_before_the_end_runs_nothing() -> None:
    """The person cancels the turn while a call streams: pydantic-ai still asks for the call,
    and it does not run; the model is told inert cancelled it."""
    ran: list[tuple[str, dict[str, Any]]] = []
    runtimes: list[InertTurn] = []

    async def cancelled_midway() -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="get_weather", tool_call_id="a", json_args=WEATHER[0])}
        turn = runtimes[0]
        await turn.runtime.cancel_turn(turn.ref, principal="al")
        yield {0: DeltaToolCall(json_args=WEATHER[1])}

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            runtimes.append(inert_turn(runtime))
            agent = make_agent(scripted(cancelled_midway), ran)
            result = await agent.run("weather?", capabilities=runtimes)
            assert ran == []
            assert states(runtime) == {"a": ("cancelled", "turn_cancelled", None)}
            [returned] = returns(result.all_messages())
            assert returned.outcome == "failed"
            assert "cancelled" in str(returned.content)

    run(main)


def test_a_new_turn_while_old_fragments_arrive_supersedes_the_old_calls() -> None:
    """A new turn of the conversation starts while the old turn's call still streams: the old
    call never runs, the new turn's call runs once."""
    ran: list[tuple[str, dict[str, Any]]] = []
    turns: list[InertTurn] = []

    async def overtaken() -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="get_weather", tool_call_id="old", json_args=WEATHER[0])}
        await turns[0].runtime.start_turn(
            tenant="acme", conversation="c1", turn="t2", principal="al"
        )
        yield {0: DeltaToolCall(json_args=WEATHER[1])}

    async def fresh() -> AsyncIterator[DeltaToolCalls]:
        yield {
            0: DeltaToolCall(name="get_weather", tool_call_id="new", json_args='{"city": "Oslo"}')
        }

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            turns.append(inert_turn(runtime))
            await make_agent(scripted(overtaken), ran).run("weather?", capabilities=turns)
            assert ran == []
            newer = inert_turn(runtime, "t2")  # takes up the turn started meanwhile
            await make_agent(scripted(fresh), ran).run("and Oslo?", capabilities=[newer])
            assert ran == [("get_weather", {"city": "Oslo"})]
            assert states(runtime) == {
                "old": ("cancelled", "superseded", None),
                "new": ("dispatched", None, "completed"),
            }

    run(main)


def test_a_tool_renamed_after_the_turn_started_does_not_run() -> None:
    """The agent's tools change between two steps of a turn (a tool renamed): pydantic-ai would
    run the new name, but the turn offered the old one, so inert fails the call and it does not
    run."""
    ran: list[str] = []
    tools = FunctionToolset[None]()

    @tools.tool_plain
    def get_weather(city: str) -> str:
        ran.append(city)
        return "sunny"

    renamed = tools.renamed({"weather_now": "get_weather"})

    async def first() -> AsyncIterator[DeltaToolCalls]:
        yield {
            0: DeltaToolCall(name="get_weather", tool_call_id="a", json_args='{"city": "Paris"}')
        }

    async def second() -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="weather_now", tool_call_id="b", json_args='{"city": "Oslo"}')}

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            agent: Agent[None, str] = Agent(
                scripted(first, second),
                toolsets=[
                    tools.filtered(lambda ctx, tool: ctx.run_step == 1),
                    renamed.filtered(lambda ctx, tool: ctx.run_step > 1),
                ],
            )
            result = await agent.run("weather?", capabilities=[inert_turn(runtime)])
            assert ran == ["Paris"]
            assert states(runtime) == {
                "a": ("dispatched", None, "completed"),
                "b": ("failed", "unknown_tool", None),
            }
            assert "unknown_tool" in str(returns(result.all_messages())[-1].content)

    run(main)


async def email() -> AsyncIterator[DeltaToolCalls]:
    yield {0: DeltaToolCall(name="send_email", tool_call_id="e", json_args=EMAIL[0])}
    yield {0: DeltaToolCall(json_args=EMAIL[1])}


async def confirm_as_shown(pending: Any) -> bool:
    return True


def test_an_approval_is_inert_s_confirmation_bound_to_the_arguments_digest() -> None:
    """A tool pydantic-ai holds for approval waits for inert's confirmation of the exact
    arguments: pydantic-ai's approval alone does not run it, a confirmation for another digest
    is refused, and the confirmation given through ``approve`` runs it once."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            turn = inert_turn(runtime)
            agent = make_agent(scripted(email), ran)
            held = await agent.run("mail bob", capabilities=[turn])
            requests = held.output
            assert isinstance(requests, DeferredToolRequests)
            assert [call.tool_call_id for call in requests.approvals] == ["e"]
            history = held.all_messages()

            # pydantic-ai's approval without inert's: the call is held again, with its digest.
            again = await agent.run(
                message_history=history,
                deferred_tool_results=DeferredToolResults(approvals={"e": True}),
                capabilities=[turn],
            )
            assert ran == []
            assert isinstance(again.output, DeferredToolRequests)
            metadata = again.output.metadata["e"]
            key = turn.key_of("e")
            assert key is not None
            pending = await runtime.pending_confirmation(key)
            assert pending is not None
            assert metadata == {
                "inert_call": key.stream,
                "arguments_digest": pending.arguments_digest,
            }
            with pytest.raises(ConfirmationRefused):
                await runtime.confirm(key, principal="al", arguments_digest="sha256:" + "0" * 64)

            shown: list[dict[str, Any]] = []

            async def decide(pending: Any) -> bool:
                shown.append(dict(pending.arguments))
                return True

            results = await turn.approve(requests, decide)
            await agent.run(
                message_history=history, deferred_tool_results=results, capabilities=[turn]
            )
            assert shown == [{"to": "bob@example.com", "body": "hi"}]
            assert ran == [("send_email", {"to": "bob@example.com", "body": "hi"})]

    run(main)


def test_an_edit_confirmed_in_inert_is_what_runs() -> None:
    """The person edits the arguments while confirming: inert records the edit and the tool
    runs with it, once."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            turn = inert_turn(runtime)
            agent = make_agent(scripted(email), ran)
            held = await agent.run("mail bob", capabilities=[turn])

            async def edit(pending: Any) -> dict[str, Any]:
                return {**pending.arguments, "to": "carol@example.com"}

            results = await turn.approve(held.output, edit)
            await agent.run(
                message_history=held.all_messages(),
                deferred_tool_results=results,
                capabilities=[turn],
            )
            assert ran == [("send_email", {"to": "carol@example.com", "body": "hi"})]

    run(main)


def test_a_denial_never_runs_the_call() -> None:
    """The person refuses: inert cancels the call and pydantic-ai tells the model it was
    denied; the tool never runs."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            turn = inert_turn(runtime)
            agent = make_agent(scripted(email), ran)
            held = await agent.run("mail bob", capabilities=[turn])

            async def refuse(pending: Any) -> bool:
                return False

            results = await turn.approve(held.output, refuse)
            await agent.run(
                message_history=held.all_messages(),
                deferred_tool_results=results,
                capabilities=[turn],
            )
            assert ran == []
            assert states(runtime) == {"e": ("cancelled", "confirmation_denied", None)}

    run(main)


@pytest.mark.parametrize("under_inert", [False, True], ids=["pydantic-ai alone", "under inert"])
def test_an_approved_call_resumed_again_by_a_retry_runs_once_under_inert(under_inert: bool) -> None:
    """pydantic-ai issue 5536: an approval is a plain ``True``, so an ordinary retry of the
    resumed run (the approval request sent twice, one after the other and at once) runs the
    approved tool again; under inert the call is dispatched once, and the retries are told so."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            turn = inert_turn(runtime)
            capabilities = [turn] if under_inert else []
            agent = make_agent(scripted(email), ran)
            held = await agent.run(
                "mail bob", capabilities=capabilities, event_stream_handler=drain
            )
            approvals = DeferredToolResults(approvals={"e": True})
            if under_inert:
                approvals = await turn.approve(held.output, confirm_as_shown)
            resume = functools.partial(
                agent.run,
                message_history=held.all_messages(),
                deferred_tool_results=approvals,
                capabilities=capabilities,
                event_stream_handler=drain,
            )
            first = await resume()
            retries = await asyncio.gather(resume(), resume())
            if not under_inert:
                assert len(ran) == 3, "pydantic-ai alone no longer runs a retried approval again"
                return
            assert ran == [("send_email", {"to": "bob@example.com", "body": "hi"})]
            assert returns(first.new_messages())[0].content == "sent"
            for retry in retries:
                [told] = returns(retry.new_messages())
                assert told.outcome == "failed"
                assert "dispatched this call already (completed)" in str(told.content)
            assert states(runtime) == {"e": ("dispatched", None, "completed")}

    run(main)


class Slow:
    """A tool that runs until it is cancelled, noting that it started and how it ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.ended: list[str] = []

    async def __call__(self, city: str) -> str:
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        self.ended.append("finished")
        return "sunny"


def slow_agent(slow: Slow) -> Agent[None, str]:
    async def call() -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="get_weather", tool_call_id="a", json_args=WEATHER[0])}
        yield {0: DeltaToolCall(json_args=WEATHER[1])}

    async def later() -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="get_weather", tool_call_id="b", json_args='{"city": "Oslo"}')}

    agent: Agent[None, str] = Agent(scripted(call, later))

    @agent.tool_plain
    async def get_weather(city: str) -> str:
        return await slow(city)

    return agent


def test_a_cancelled_agent_run_stops_its_running_tool() -> None:
    """pydantic-ai issue 3960: cancelling the task of ``agent.run`` while a tool runs. Under
    inert the turn is cancelled: the tool's task is cancelled, the call recorded stopped, and
    nothing of the turn runs afterwards."""
    slow = Slow()

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            turn = inert_turn(runtime)
            agent = slow_agent(slow)
            running = asyncio.ensure_future(agent.run("weather?", capabilities=[turn]))
            await slow.started.wait()
            running.cancel()
            with pytest.raises(asyncio.CancelledError):
                await running
            assert slow.ended == ["cancelled"]
            await runtime.settle()
            assert states(runtime) == {"a": ("dispatched", None, "stopped")}
            # A later run of the cancelled turn: inert takes none of its calls, none runs.
            later = await agent.run("and now?", capabilities=[turn])
            assert slow.ended == ["cancelled"]
            [told] = returns(later.all_messages())
            assert told.outcome == "failed"
            assert "not run" in str(told.content)
            assert "b" not in states(runtime)

    run(main)


def test_inert_s_stop_ends_a_running_tool_and_the_model_is_told() -> None:
    """The person cancels the turn in inert while its tool runs (the agent run itself is not
    cancelled): inert stops the tool, records it stopped, and the model is told; inert takes no
    call the model makes next in the cancelled turn, and none runs."""
    slow = Slow()

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            turn = inert_turn(runtime)
            running = asyncio.ensure_future(slow_agent(slow).run("weather?", capabilities=[turn]))
            await slow.started.wait()
            await runtime.cancel_turn(turn.ref, principal="al")
            result = await running
            assert slow.ended == ["cancelled"]
            told = returns(result.all_messages())
            assert "inert stopped the call: turn_cancelled" in str(told[0].content)
            assert "not run" in str(told[1].content)
            assert states(runtime) == {"a": ("dispatched", None, "stopped")}

    run(main)


def test_test_model_s_streamed_calls_run_once_each() -> None:
    """pydantic-ai's ``TestModel`` calls every tool with arguments it makes up, streamed: under
    inert the tool it may run runs once, and the one held for approval waits for the person."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            agent = make_agent(TestModel(), ran)
            result = await agent.run("anything", capabilities=[inert_turn(runtime)])
            assert isinstance(result.output, DeferredToolRequests)
            assert [name for name, _ in ran] == ["get_weather"]
            found = {row.tool: row.state for row in runtime.ledger.rows()}
            assert found == {"get_weather": Phase.DISPATCHED, "send_email": Phase.VALIDATED}

    run(main)


def test_a_tool_declared_once_per_intent_runs_an_intent_once() -> None:
    """A tool declared with one action per intent: the model asks for the same call twice in
    its turn (two responses); the second is cancelled as a duplicate and never runs."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def ask(call: str) -> AsyncIterator[DeltaToolCalls]:
        yield {
            0: DeltaToolCall(name="get_weather", tool_call_id=call, json_args='{"city": "Paris"}')
        }

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            once = functools.partial(declaration_from_tool_def, one_action_per_intent="turn")
            agent = make_agent(scripted(lambda: ask("a"), lambda: ask("b")), ran)
            await agent.run("weather?", capabilities=[inert_turn(runtime, declare=once)])
            assert ran == [("get_weather", {"city": "Paris"})]
            assert states(runtime)["b"] == ("cancelled", "duplicate_of", None)

    run(main)


def test_the_page_shows_an_agent_under_inert_in_under_60_lines() -> None:
    """The documentation's pydantic-ai page shows a whole agent under inert (the capability, an
    approval, the resumed run) in a Python example of under 60 lines, which tests/test_docs.py
    runs and checks the output of."""
    page = (ROOT / "docs" / "integrations" / "pydantic-ai.md").read_text()
    [example] = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(example.strip().splitlines()) < 60
    for shown in ("InertTurn(", "capabilities=[turn]", "turn.approve(", "deferred_tool_results="):
        assert shown in example


def test_inert_imports_without_pydantic_ai_and_inert_pydantic_ai_names_the_extra() -> None:
    """``import inert`` never loads pydantic-ai; without it, ``import inert.pydantic_ai`` is a
    ``ConfigurationError`` naming the extra to install."""
    program = """
import sys
import inert
assert "pydantic_ai" not in sys.modules
sys.modules["pydantic_ai"] = None
try:
    import inert.pydantic_ai
except inert.ConfigurationError as error:
    print(error)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert "pip install 'inert[pydantic-ai]'" in done.stdout


async def paris() -> AsyncIterator[DeltaToolCalls]:
    yield {0: DeltaToolCall(name="get_weather", tool_call_id="a", json_args='{"city": "Paris"}')}


async def by_events(agent: Agent[None, Any], turn: InertTurn) -> None:
    async with agent.run_stream_events("weather?", capabilities=[turn]) as events:
        async for _ in events:
            pass


async def by_nodes(agent: Agent[None, Any], turn: InertTurn) -> None:
    async with agent.iter("weather?", capabilities=[turn]) as run:
        async for _ in run:
            pass


async def by_stream(agent: Agent[None, Any], turn: InertTurn) -> None:
    async with agent.run_stream("weather?", capabilities=[turn]) as result:
        await result.get_output()


@pytest.mark.parametrize(
    "drive", [by_events, by_nodes, by_stream], ids=lambda drive: drive.__name__
)
def test_every_way_of_running_the_agent_goes_through_inert(
    drive: Callable[[Agent[None, Any], InertTurn], Awaitable[None]],
) -> None:
    """``run_stream_events``, ``iter`` and ``run_stream`` feed the model's stream to inert and
    run the call once it is dispatched, as ``run`` does."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            await drive(make_agent(scripted(paris), ran), inert_turn(runtime))
            assert ran == [("get_weather", {"city": "Paris"})]
            assert states(runtime) == {"a": ("dispatched", None, "completed")}

    run(main)


def test_leaving_iter_early_cancels_the_turn() -> None:
    """A loop over ``agent.iter`` left before the tools run ends the run: its turn is
    cancelled and the call never runs."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            agent = make_agent(scripted(paris), ran)
            async with agent.iter("weather?", capabilities=[inert_turn(runtime)]) as nodes:
                async for node in nodes:
                    if Agent.is_call_tools_node(node):
                        break
            await runtime.settle()
            assert ran == []
            assert states(runtime) == {"a": ("cancelled", "turn_cancelled", None)}

    run(main)


def test_a_tool_called_while_its_response_streams_waits_for_the_end() -> None:
    """A caller that asks the gate for a call before its response ended (as an eager executor
    would) waits: the tool runs only after the end, and once between that caller and
    pydantic-ai's own."""
    ran: list[tuple[str, dict[str, Any]]] = []
    early: list[asyncio.Future[Any]] = []
    turns: list[InertTurn] = []
    tools = FunctionToolset[None]()

    @tools.tool_plain
    def get_weather(city: str) -> str:
        ran.append(("get_weather", {"city": city}))
        return "sunny"

    async def eager() -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="get_weather", tool_call_id="a", json_args='{"city": ')}
        yield {0: DeltaToolCall(json_args='"Paris"}')}
        turn = turns[0]
        ctx = RunContext[None](deps=None, model=TestModel(), usage=RunUsage(), tool_call_id="a")
        gate = turn.get_wrapper_toolset(tools)
        assert gate is not None
        tool = (await gate.get_tools(ctx))["get_weather"]
        call = gate.call_tool("get_weather", {"city": "Paris"}, ctx, tool)
        early.append(asyncio.ensure_future(call))
        for _ in range(20):
            await asyncio.sleep(0)
        assert not early[0].done()
        assert ran == []
        yield {1: DeltaToolCall(name="get_weather", tool_call_id="b", json_args='{"city": "Oslo"}')}

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            turns.append(inert_turn(runtime))
            agent: Agent[None, str] = Agent(scripted(eager), toolsets=[tools])
            await agent.run("weather?", capabilities=turns)
            with contextlib.suppress(ToolFailed):
                await early[0]
            assert sorted(ran, key=str) == [
                ("get_weather", {"city": "Oslo"}),
                ("get_weather", {"city": "Paris"}),
            ]

    run(main)


def test_an_output_tool_s_call_is_the_run_s_answer_and_not_fed() -> None:
    """A structured output comes as a call of pydantic-ai's output tool: it is the run's
    answer, which no toolset runs, so inert is not fed it (nor told of a tool the turn never
    offered)."""

    class City(BaseModel):
        name: str

    async def answer(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[DeltaToolCalls]:
        [output] = info.output_tools
        yield {0: DeltaToolCall(name=output.name, tool_call_id="o", json_args='{"name": ')}
        yield {0: DeltaToolCall(json_args='"Paris"}')}

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            agent = Agent(FunctionModel(stream_function=answer), output_type=City)
            result = await agent.run("which city?", capabilities=[inert_turn(runtime)])
            assert result.output == City(name="Paris")
            await runtime.settle()
            assert states(runtime) == {}

    run(main)


def test_two_first_runs_of_a_turn_at_once_share_it() -> None:
    """Two runs of one turn that start together: one starts the turn, the other takes it up,
    and each one's call runs once."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def oslo() -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="get_weather", tool_call_id="b", json_args='{"city": "Oslo"}')}

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            agent = make_agent(scripted(paris, oslo), ran)
            turns = [inert_turn(runtime), inert_turn(runtime)]
            await asyncio.gather(*(agent.run("weather?", capabilities=[turn]) for turn in turns))
            assert sorted(ran, key=str) == [
                ("get_weather", {"city": "Oslo"}),
                ("get_weather", {"city": "Paris"}),
            ]
            assert states(runtime) == {
                "a": ("dispatched", None, "completed"),
                "b": ("dispatched", None, "completed"),
            }

    run(main)


def test_a_turn_resumed_by_another_instance_finds_its_calls_in_the_log() -> None:
    """The run that resumes with the approvals uses a new ``InertTurn`` (as another process
    would, with no memory of the stream): it finds the held call in inert's ledger and runs it
    once."""
    ran: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        async with open_asyncio_runtime(log="memory://") as runtime:
            agent = make_agent(scripted(email), ran)
            held = await agent.run("mail bob", capabilities=[inert_turn(runtime)])
            later = inert_turn(runtime)
            results = await later.approve(held.output, confirm_as_shown)
            assert results.approvals == {"e": True}
            resume = functools.partial(
                agent.run,
                message_history=held.all_messages(),
                deferred_tool_results=results,
            )
            await resume(capabilities=[later])
            await resume(capabilities=[inert_turn(runtime)])
            assert ran == [("send_email", {"to": "bob@example.com", "body": "hi"})]

    run(main)
