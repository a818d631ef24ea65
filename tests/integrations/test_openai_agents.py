"""Agents of the OpenAI Agents SDK run as inert turns: the streamed run fed, the function tools
run through dispatch, approvals as confirmations, a cancelled run stopping its tool. The model
is the SDK's own scripted one, or its OpenAI Responses model asking a local server that replays
a captured stream."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import openai
import pytest
from adapter_support import FIXTURES
from agents import (
    Agent,
    FunctionTool,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    RunResultStreaming,
    RunState,
    Tool,
    UserError,
    function_tool,
    handoff,
    set_tracing_disabled,
    tool_namespace,
)
from agents.items import TResponseStreamEvent
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter
from replay_server import threaded_replay_server

from inert import (
    AsyncioRuntime,
    ConfigurationError,
    ConfirmationRefused,
    Phase,
    open_asyncio_runtime,
)
from inert.openai_agents import AgentTurn, CallNotFed, declaration_from_tool

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


@pytest.fixture(autouse=True)
def no_trace_export() -> Iterator[None]:
    """The SDK exports its traces to OpenAI where a key is set: never from these tests."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


class Ran:
    """What the tools ran, each with the phase inert held its call in at that moment."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], Phase | None]] = []
        self.turn: AgentTurn | None = None

    def phase(self, call_id: str) -> Phase | None:
        turn = self.turn
        key = None if turn is None else turn.key(call_id)
        return None if turn is None or key is None else turn.runtime.phase(key)


def tools(ran: Ran, *, confirm_email: bool = False) -> list[Tool]:
    """A read and an action, each noting its run."""

    @function_tool
    async def get_weather(ctx: ToolContext[Any], city: str) -> str:
        """The weather in a city."""
        ran.calls.append(("get_weather", {"city": city}, ran.phase(ctx.tool_call_id)))
        return f"sunny in {city}"

    @function_tool(needs_approval=confirm_email)
    async def send_email(ctx: ToolContext[Any], to: str) -> str:
        """Send an email."""
        ran.calls.append(("send_email", {"to": to}, ran.phase(ctx.tool_call_id)))
        return f"sent to {to}"

    return [get_weather, send_email]


def event(**fields: Any) -> TResponseStreamEvent:
    """One Responses stream event, as the SDK's models make it."""
    return EVENTS.validate_python(fields)  # type: ignore[no-any-return]


def response(rid: str, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": rid,
        "object": "response",
        "created_at": 0,
        "model": "scripted",
        "output": output,
        "status": status,
        "tool_choice": "auto",
        "tools": [],
        "parallel_tool_calls": True,
    }


def item(index: int, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{index}",
        "call_id": f"call_{index}",
        "name": name,
        "arguments": arguments,
        "status": status,
    }


class Stream:
    """A response streamed event by event, its numbering kept, that can wait mid-way."""

    def __init__(self, rid: str) -> None:
        self.rid = rid
        self.events: list[TResponseStreamEvent | tuple[str, asyncio.Event]] = []
        self.sent: list[str] = []

    def add(self, kind: str, **fields: Any) -> None:
        number = sum(1 for one in self.events if not isinstance(one, tuple))
        self.events.append(event(type=kind, sequence_number=number, **fields))

    def pause(self) -> asyncio.Event:
        """The stream waits here until the event returned is set."""
        gate = asyncio.Event()
        self.events.append(("wait", gate))
        return gate

    def reached(self) -> asyncio.Event:
        """An event set when the stream gets here."""
        mark = asyncio.Event()
        self.events.append(("set", mark))
        return mark

    def created(self) -> None:
        self.add("response.created", response=response(self.rid, "in_progress", []))

    def opened(self, index: int, name: str) -> None:
        self.add(
            "response.output_item.added",
            output_index=index,
            item=item(index, name, "", "in_progress"),
        )

    def delta(self, index: int, text: str) -> None:
        self.add(
            "response.function_call_arguments.delta",
            item_id=f"fc_{index}",
            output_index=index,
            delta=text,
        )

    def done(self, index: int, name: str, arguments: str) -> dict[str, Any]:
        self.add(
            "response.function_call_arguments.done",
            item_id=f"fc_{index}",
            output_index=index,
            arguments=arguments,
            name=name,
        )
        whole = item(index, name, arguments, "completed")
        self.add("response.output_item.done", output_index=index, item=whole)
        return whole

    def completed(self, output: list[dict[str, Any]]) -> None:
        self.add("response.completed", response=response(self.rid, "completed", output))

    def step(self) -> ModelStep:
        async def play(call: ModelCall) -> AsyncIterator[TResponseStreamEvent]:
            for one in self.events:
                if isinstance(one, tuple):
                    what, signal = one
                    if what == "wait":
                        await signal.wait()
                    else:
                        signal.set()
                else:
                    self.sent.append(one.type)
                    yield one

        return ModelStep.stream(play, response_id=self.rid)


def answer(rid: str, text: str = "done") -> ModelStep:
    return ModelStep(output=[assistant_message(text)], response_id=rid)


async def drain(result: RunResultStreaming) -> None:
    async for _ in result.stream_events():
        pass


def run(
    body: Callable[[AsyncioRuntime], Awaitable[Any]],
) -> Any:
    async def main() -> Any:
        async with open_asyncio_runtime(log="memory://") as runtime:
            return await body(runtime)

    return asyncio.run(main())


async def start(
    runtime: AsyncioRuntime, model: Any, ran: Ran, *, turn: str = "t1", **options: Any
) -> AgentTurn:
    agent = Agent(name="assistant", model=model, tools=tools(ran, **options))
    started = await AgentTurn.start(
        runtime, agent, tenant="acme", conversation="c1", turn=turn, principal="al"
    )
    ran.turn = started
    return started


def outcomes(turn: AgentTurn) -> dict[str, tuple[str, str | None]]:
    """Each call of the turn by its call id: its state and outcome in the ledger."""
    ledger = turn.runtime.ledger
    found: dict[str, tuple[str, str | None]] = {}
    for call_id in ("call_0", "call_1", "scripted"):
        key = turn.key(call_id)
        if key is not None:
            row = ledger.row(key)
            assert row is not None
            found[call_id] = (row.state, row.outcome)
    return found


def test_a_streamed_call_runs_once_and_only_once_dispatched() -> None:
    """A scripted model's call reaches its tool once, through inert's dispatch, with the
    arguments inert validated; the run ends with the model's answer."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        model = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("get_weather", {"city": "Paris"}, call_id="scripted")],
                    response_id="resp_1",
                ),
                answer("resp_2", "sunny"),
            ]
        )
        turn = await start(runtime, model, ran)
        result = Runner.run_streamed(turn.agent, "weather?")
        await drain(result)
        await runtime.settle()
        return result.final_output, outcomes(turn)

    final, rows = run(body)
    assert final == "sunny"
    assert ran.calls == [("get_weather", {"city": "Paris"}, Phase.DISPATCHED)]
    assert rows == {"scripted": ("dispatched", "completed")}


def interleaved() -> tuple[Stream, list[dict[str, Any]]]:
    stream = Stream("resp_1")
    stream.created()
    stream.opened(0, "get_weather")
    stream.opened(1, "send_email")
    for first, second in (('{"ci', '{"t'), ('ty": "Pa', 'o": "b'), ('ris"}', 'ob"}')):
        stream.delta(0, first)
        stream.delta(1, second)
    output = [
        stream.done(0, "get_weather", '{"city": "Paris"}'),
        stream.done(1, "send_email", '{"to": "bob"}'),
    ]
    return stream, output


def test_two_interleaved_calls_each_run_once_after_the_response_ends() -> None:
    """Two calls whose fragments alternate run once each, with their own arguments, and only
    once dispatched: not while their fragments arrive."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        stream, output = interleaved()
        stream.completed(output)
        model = ScriptedModel([stream.step(), answer("resp_2")])
        turn = await start(runtime, model, ran)
        await drain(Runner.run_streamed(turn.agent, "go"))
        await runtime.settle()
        return outcomes(turn)

    rows = run(body)
    assert sorted(ran.calls, key=lambda one: one[0]) == [
        ("get_weather", {"city": "Paris"}, Phase.DISPATCHED),
        ("send_email", {"to": "bob"}, Phase.DISPATCHED),
    ]
    assert rows == {
        "call_0": ("dispatched", "completed"),
        "call_1": ("dispatched", "completed"),
    }


def test_a_run_cancelled_before_its_stream_ends_runs_nothing() -> None:
    """Cancelling the turn mid-stream cancels the SDK's run: the calls whose fragments came are
    never run, and the log holds them cancelled."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        stream, output = interleaved()
        gate = stream.pause()
        stream.completed(output)
        model = ScriptedModel([stream.step(), answer("resp_2")])
        turn = await start(runtime, model, ran)
        result = Runner.run_streamed(turn.agent, "go")
        async for seen in result.stream_events():
            raw = getattr(seen, "data", None)
            if getattr(raw, "type", None) == "response.output_item.done" and (
                getattr(raw, "output_index", None) == 1
            ):
                await turn.cancel(result, reason="the person left")
        gate.set()
        await runtime.settle()
        return stream.sent, outcomes(turn)

    sent, rows = run(body)
    assert "response.completed" not in sent
    assert ran.calls == []
    assert rows == {"call_0": ("cancelled", None), "call_1": ("cancelled", None)}


def test_a_new_turn_while_the_old_one_streams_leaves_the_old_calls_unrun() -> None:
    """A turn started in the conversation while the previous turn's fragments still arrive
    supersedes it: the old turn's call, finished later, is refused when the SDK runs it, and
    only the new turn's call runs."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        old = Stream("resp_old")
        old.created()
        old.opened(0, "send_email")
        old.delta(0, '{"to": "b')
        fragment_sent = old.reached()
        gate = old.pause()
        old.delta(0, 'ob"}')
        old.completed([old.done(0, "send_email", '{"to": "bob"}')])
        first = await start(runtime, ScriptedModel([old.step(), answer("resp_a")]), ran)
        old_run = Runner.run_streamed(first.agent, "email bob")
        draining = asyncio.ensure_future(drain(old_run))
        await fragment_sent.wait()
        new_model = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("get_weather", {"city": "Rome"}, call_id="scripted")],
                    response_id="resp_new",
                ),
                answer("resp_b"),
            ]
        )
        second = await start(runtime, new_model, ran, turn="t2")
        gate.set()
        await draining
        ran.turn = second
        await drain(Runner.run_streamed(second.agent, "weather in Rome"))
        await runtime.settle()
        return old_run.new_items, outcomes(first), outcomes(second)

    old_items, old_rows, new_rows = run(body)
    assert ran.calls == [("get_weather", {"city": "Rome"}, Phase.DISPATCHED)]
    assert old_rows == {"call_0": ("cancelled", None)}
    assert new_rows == {"scripted": ("dispatched", "completed")}
    told = [getattr(one, "output", None) for one in old_items]
    assert any(isinstance(text, str) and text.startswith("inert did not run") for text in told)


def test_a_call_renamed_mid_stream_runs_under_neither_name() -> None:
    """A call opened as one tool and finished as another fails in inert; the SDK, which runs
    the name the response ended with, gets a refusal and neither tool runs."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        stream = Stream("resp_1")
        stream.created()
        stream.opened(0, "get_weather")
        stream.delta(0, '{"to": "bob"}')
        stream.completed([stream.done(0, "send_email", '{"to": "bob"}')])
        turn = await start(runtime, ScriptedModel([stream.step(), answer("resp_2")]), ran)
        await drain(Runner.run_streamed(turn.agent, "go"))
        await runtime.settle()
        return outcomes(turn)

    rows = run(body)
    assert ran.calls == []
    assert rows == {"call_0": ("failed", None)}


def test_an_approval_is_a_confirmation_bound_to_the_arguments_digest() -> None:
    """A tool needing approval interrupts the run where inert waits for confirmation; an
    approval naming other arguments is refused and changes nothing, the right one confirms the
    call in inert and approves it in the SDK, and the resumed run runs it once."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        model = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("send_email", {"to": "bob"}, call_id="scripted")],
                    response_id="resp_1",
                ),
                answer("resp_2", "sent"),
            ]
        )
        turn = await start(runtime, model, ran, confirm_email=True)
        result = Runner.run_streamed(turn.agent, "email bob")
        await drain(result)
        [interruption] = result.interruptions
        pending = await turn.pending(interruption)
        state = result.to_state()
        with pytest.raises(ConfirmationRefused):
            await turn.approve(state, interruption, arguments_digest="sha256:" + "0" * 64)
        waiting = runtime.phase(pending.key)
        await turn.approve(state, interruption, arguments_digest=pending.arguments_digest)
        resumed = Runner.run_streamed(turn.agent, state)
        await drain(resumed)
        await runtime.settle()
        return dict(pending.arguments), waiting, resumed.final_output, outcomes(turn)

    shown, waiting, final, rows = run(body)
    assert shown == {"to": "bob"}
    assert waiting is Phase.VALIDATED
    assert final == "sent"
    assert ran.calls == [("send_email", {"to": "bob"}, Phase.DISPATCHED)]
    assert rows == {"scripted": ("dispatched", "completed")}


def test_a_call_the_sdk_asks_for_again_runs_once() -> None:
    """Resuming the same approved ``RunState`` twice asks the tool for the same call twice:
    inert runs it the first time and refuses it the second."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        model = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("send_email", {"to": "bob"}, call_id="scripted")],
                    response_id="resp_1",
                ),
                answer("resp_2", "sent"),
                answer("resp_3", "sent again"),
            ]
        )
        turn = await start(runtime, model, ran, confirm_email=True)
        result = Runner.run_streamed(turn.agent, "email bob")
        await drain(result)
        [interruption] = result.interruptions
        pending = await turn.pending(interruption)
        state = result.to_state()
        await turn.approve(state, interruption, arguments_digest=pending.arguments_digest)
        saved = state.to_json()
        await drain(Runner.run_streamed(turn.agent, state))
        again = await RunState.from_json(turn.agent, saved)
        second = Runner.run_streamed(turn.agent, again)
        await drain(second)
        await runtime.settle()
        told = [getattr(one, "output", None) for one in second.new_items]
        return told, outcomes(turn)

    told, rows = run(body)
    assert ran.calls == [("send_email", {"to": "bob"}, Phase.DISPATCHED)]
    assert rows == {"scripted": ("dispatched", "completed")}
    assert any(isinstance(text, str) and text.startswith("inert did not run") for text in told)


def test_a_rejection_denies_the_call_and_it_never_runs() -> None:
    """Rejecting an interruption denies the call in inert and rejects it in the SDK: the
    resumed run tells the model, and the tool never runs."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        model = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("send_email", {"to": "eve"}, call_id="scripted")],
                    response_id="resp_1",
                ),
                answer("resp_2", "not sent"),
            ]
        )
        turn = await start(runtime, model, ran, confirm_email=True)
        result = Runner.run_streamed(turn.agent, "email eve")
        await drain(result)
        state = result.to_state()
        await turn.reject(state, result.interruptions[0], reason="not eve")
        resumed = Runner.run_streamed(turn.agent, state)
        await drain(resumed)
        await runtime.settle()
        return resumed.final_output, outcomes(turn)

    final, rows = run(body)
    assert final == "not sent"
    assert ran.calls == []
    assert rows == {"scripted": ("cancelled", None)}


def slow_tool(started: asyncio.Event, ended: list[str]) -> FunctionTool:
    @function_tool
    async def transfer(amount: int) -> str:
        """Move money, slowly."""
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise
        ended.append("finished")
        return "moved"

    return transfer


@pytest.mark.parametrize("how", ["turn", "sdk"])
def test_a_cancelled_run_stops_the_running_tool(how: str) -> None:
    """Cancelling the run while a tool runs cancels the tool's task and records it: ``stopped``
    when the turn is cancelled through inert, ``failed run_cancelled`` when the SDK's run alone
    is; the model is not asked again."""

    async def body(runtime: AsyncioRuntime) -> Any:
        started = asyncio.Event()
        ended: list[str] = []
        model = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("transfer", {"amount": 5}, call_id="scripted")],
                    response_id="resp_1",
                ),
                answer("resp_2"),
            ]
        )
        agent = Agent(name="bank", model=model, tools=[slow_tool(started, ended)])
        turn = await AgentTurn.start(
            runtime, agent, tenant="acme", conversation="c1", turn="t1", principal="al"
        )
        result = Runner.run_streamed(turn.agent, "move 5")
        draining = asyncio.ensure_future(drain(result))
        await started.wait()
        if how == "turn":
            await turn.cancel(result)
        else:
            result.cancel()
        await draining
        key = turn.key("scripted")
        assert key is not None
        # The SDK's cancellation ends the run before the tool's outcome is written.
        async with asyncio.timeout(30):
            async for _ in runtime.changes():
                row = runtime.ledger.row(key)
                if row is not None and row.outcome is not None:
                    break
        return ended, row, model.remaining_steps

    ended, row, remaining = run(body)
    assert ended == ["cancelled"]
    assert remaining == 1
    if how == "turn":
        assert (row.state, row.outcome) == ("dispatched", "stopped")
    else:
        assert (row.state, row.outcome) == ("dispatched", "failed")


def test_a_model_replaced_on_the_way_runs_no_tool() -> None:
    """A run whose model inert does not read (a ``RunConfig`` model) cannot run the turn's tools:
    the call is refused as never fed, and the tool does not run."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        turn = await start(runtime, ScriptedModel([]), ran)
        other = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("get_weather", {"city": "Oslo"}, call_id="scripted")],
                    response_id="resp_1",
                )
            ]
        )
        result = Runner.run_streamed(turn.agent, "go", run_config=RunConfig(model=other))
        # The SDK wraps what a tool raises in its own error.
        with pytest.raises(UserError) as raised:
            await drain(result)
        assert isinstance(raised.value.__cause__, CallNotFed)

    run(body)
    assert ran.calls == []


def test_a_captured_responses_stream_through_the_sdk_s_own_client_runs_both_calls() -> None:
    """The SDK's OpenAI Responses model asks a local server replaying a captured gpt-4o stream
    of two calls: both run once, through inert."""
    body = (FIXTURES / "openai-responses" / "two-function-calls-gpt-4o.sse").read_bytes()
    ran: list[str] = []

    @function_tool
    def search(query: str) -> str:
        """Search the web."""
        ran.append(f"search {query}")
        return "at 6:40pm"

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        ran.append(f"weather {city}")
        return "rain"

    async def main(url: str) -> Any:
        client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0)
        model = OpenAIResponsesModel(model="gpt-4o", openai_client=client)
        agent = Agent(
            name="a", model=model, tools=[search, weather], tool_use_behavior="stop_on_first_tool"
        )
        async with open_asyncio_runtime(log="memory://") as runtime:
            turn = await AgentTurn.start(
                runtime, agent, tenant="acme", conversation="c1", turn="t1", principal="al"
            )
            await drain(Runner.run_streamed(turn.agent, "Tigers game and weather?"))
            await runtime.settle()
            await client.close()
            return [(row.tool, row.outcome) for row in runtime.ledger.rows()]

    with threaded_replay_server(body) as url:
        rows = asyncio.run(main(url))
    assert sorted(ran) == ["search Detroit Tigers game time October 6, 2023", "weather Detroit"]
    assert sorted(rows) == [("search", "completed"), ("weather", "completed")]


def test_an_agent_with_tools_inert_cannot_hold_is_refused() -> None:
    """An agent with handoffs, or a tool needing approval per call without a confirmation rule,
    is refused before any turn starts."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> None:
        other = Agent(name="other")
        agent = Agent(name="a", tools=tools(ran), handoffs=[handoff(other)])
        with pytest.raises(ConfigurationError, match="handoffs"):
            await AgentTurn.start(
                runtime, agent, tenant="acme", conversation="c1", turn="t1", principal="al"
            )

    run(body)

    async def per_call(ctx: Any, parameters: dict[str, Any], call_id: str) -> bool:
        return True

    tool = tools(ran)[0]
    assert isinstance(tool, FunctionTool)
    tool.needs_approval = per_call
    with pytest.raises(ConfigurationError, match="needs_confirmation"):
        declaration_from_tool(tool)
    assert declaration_from_tool(tool, needs_confirmation=True).needs_confirmation


def test_an_edit_made_while_confirming_is_what_the_tool_runs() -> None:
    """The tool runs the arguments inert dispatched: the person's edit made while approving,
    not the model's arguments the SDK holds."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        model = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("send_email", {"to": "bob"}, call_id="scripted")],
                    response_id="resp_1",
                ),
                answer("resp_2"),
            ]
        )
        turn = await start(runtime, model, ran, confirm_email=True)
        result = Runner.run_streamed(turn.agent, "email bob")
        await drain(result)
        [interruption] = result.interruptions
        pending = await turn.pending(interruption)
        state = result.to_state()
        await turn.approve(
            state,
            interruption,
            arguments_digest=pending.arguments_digest,
            arguments={"to": "bob@example.com"},
        )
        await drain(Runner.run_streamed(turn.agent, state))

    run(body)
    assert ran.calls == [("send_email", {"to": "bob@example.com"}, Phase.DISPATCHED)]


def test_a_run_that_is_not_streamed_is_refused() -> None:
    """``Runner.run`` asks the model for a whole response, which inert cannot read as it comes:
    the run is refused before any tool runs."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> None:
        model = ScriptedModel(
            [ModelStep(output=[function_call("get_weather", {"city": "Oslo"}, call_id="x")])]
        )
        turn = await start(runtime, model, ran)
        with pytest.raises(ConfigurationError, match="run_streamed"):
            await Runner.run(turn.agent, "go")

    run(body)
    assert ran.calls == []


def test_inert_imports_without_the_sdk_and_inert_openai_agents_names_the_extra() -> None:
    """``import inert`` never loads the Agents SDK; without it, ``import inert.openai_agents``
    is a ``ConfigurationError`` naming the extra to install."""
    program = """
import sys
import inert
assert "agents" not in sys.modules
sys.modules["agents"] = None
try:
    import inert.openai_agents
except inert.ConfigurationError as error:
    print(error)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert "pip install 'inert[openai-agents]'" in done.stdout


def test_a_tool_in_a_namespace_is_declared_and_run_by_its_qualified_name() -> None:
    """A function tool in a ``tool_namespace`` is offered as ``<namespace>.<name>``, the name
    the adapter gives its call, and runs once; the same name outside the namespace is another
    tool."""
    ran = Ran()

    async def body(runtime: AsyncioRuntime) -> Any:
        weather = tools(ran)[0]
        assert isinstance(weather, FunctionTool)
        [namespaced] = tool_namespace(name="geo", description="Places.", tools=[weather])
        model = ScriptedModel(
            [
                ModelStep(
                    output=[
                        function_call(
                            "get_weather", {"city": "Oslo"}, call_id="scripted", namespace="geo"
                        )
                    ],
                    response_id="resp_1",
                ),
                answer("resp_2"),
            ]
        )
        agent = Agent(name="a", model=model, tools=[namespaced])
        turn = await AgentTurn.start(
            runtime, agent, tenant="acme", conversation="c1", turn="t1", principal="al"
        )
        ran.turn = turn
        await drain(Runner.run_streamed(turn.agent, "weather in Oslo"))
        await runtime.settle()
        return list(turn.declarations), outcomes(turn)

    declared, rows = run(body)
    assert declared == ["geo.get_weather"]
    assert ran.calls == [("get_weather", {"city": "Oslo"}, Phase.DISPATCHED)]
    assert rows == {"scripted": ("dispatched", "completed")}


def test_a_tool_past_its_timeout_is_cancelled_and_recorded_failed() -> None:
    """A tool the SDK stops at its ``timeout_seconds`` has its task cancelled and its call
    recorded failed; the SDK tells the model and goes on."""

    async def body(runtime: AsyncioRuntime) -> Any:
        started = asyncio.Event()
        ended: list[str] = []
        tool = slow_tool(started, ended)
        tool.timeout_seconds = 0.05
        model = ScriptedModel(
            [
                ModelStep(
                    output=[function_call("transfer", {"amount": 5}, call_id="scripted")],
                    response_id="resp_1",
                ),
                answer("resp_2", "too slow"),
            ]
        )
        agent = Agent(name="bank", model=model, tools=[tool])
        turn = await AgentTurn.start(
            runtime, agent, tenant="acme", conversation="c1", turn="t1", principal="al"
        )
        result = Runner.run_streamed(turn.agent, "move 5")
        await drain(result)
        key = turn.key("scripted")
        assert key is not None
        async with asyncio.timeout(30):
            async for _ in runtime.changes():
                row = runtime.ledger.row(key)
                if row is not None and row.outcome is not None:
                    break
        return ended, row, result.final_output

    ended, row, final = run(body)
    assert ended == ["cancelled"]
    assert (row.state, row.outcome) == ("dispatched", "failed")
    assert final == "too slow"
