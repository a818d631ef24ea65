"""The example agent server over real HTTP: Hypercorn bound to 127.0.0.1 in the test's nursery,
the provider a local replay served the same way, ``httpx`` as the person's client.

The clock is Trio's real one: the server and the client wait on real sockets, which a
``MockClock`` would jump past.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio
from adapter_support import FIXTURES
from attrs import define
from console_support import OPERATOR_TOKEN, settings
from example_support import EMAIL, WEATHER, Events, cue, documented_requests, is_end, start
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from examples.agent_server import (
    TOOLS,
    TWO_CALLS,
    Agent,
    Replay,
    anthropic_messages,
    create_app,
    open_agent,
    openai_responses,
    provider_from_environment,
    replay_app,
    replayed,
    run,
    serve,
)
from inert.console import Console


@define
class Example:
    """A running example server, its replayed provider, and a client of it."""

    client: httpx.AsyncClient
    agent: Agent
    replay: Replay
    replay_url: str


@asynccontextmanager
async def example(replay: Replay, provider: str = "openai") -> AsyncIterator[Example]:
    async with trio.open_nursery() as nursery:
        replay_url = await nursery.start(partial(serve, replay_app(replay)))
        if provider == "openai":
            chosen = replayed(replay_url)
        else:
            chosen = anthropic_messages(api_key="test", base_url=replay_url)
        async with open_agent(chosen) as agent:
            url = await nursery.start(partial(serve, create_app(agent)))
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                yield Example(client=client, agent=agent, replay=replay, replay_url=replay_url)
            nursery.cancel_scope.cancel()


def two_calls(*, hold: bool) -> Replay:
    return Replay(TWO_CALLS.read_bytes(), fresh_ids=(b"resp_example",), hold=hold)


async def test_a_confirmed_call_runs_once_and_a_call_stopped_mid_stream_never() -> None:
    """Two calls: the person stops get_weather while its arguments still stream and confirms
    send_email; the email is sent exactly once, the weather is never looked up, and the events
    show each cue."""
    async with example(two_calls(hold=True)) as run:
        client = run.client
        turn = await start(client)
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            await events.until(cue(WEATHER, "preparing request"))
            # The replay waits before get_weather's terminal event: the call is still collecting.
            with trio.fail_after(10):
                await run.replay.paused(1)
            stopped = await client.post(f"/turns/{turn}/calls/{WEATHER}/stop")
            assert stopped.json() == {"call": WEATHER, "stopped": True}
            _, cancelled = await events.until(cue(WEATHER, "cancelled: nothing was done"))
            # The person stopped it: inert's record of that refusal, a denied confirmation,
            # would mislead the person about a call that never asked for one.
            assert cancelled["reason"] == "stopped_by_user"
            assert (await client.post(f"{run.replay_url}/release")).json() == {"released": 1}
            _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
            # The person is shown what they confirm: the arguments, and their digest.
            assert pending["arguments"] == {
                "to": "bob@example.com",
                "subject": "Lunch",
                "body": "Noon at the usual place?",
            }
            assert pending["arguments_digest"].startswith("hmac-sha256:")
            confirmed = await client.post(f"/turns/{turn}/calls/{EMAIL}/confirm")
            assert confirmed.json() == {"call": EMAIL, "confirmed": pending["arguments_digest"]}
            _, end = await events.until(is_end)
            assert end["calls"] == {EMAIL: "done", WEATHER: "cancelled: nothing was done"}
        # "about to run" lasts from the confirmation to the claim, and may pass unseen.
        assert [shown for shown in events.cues(EMAIL) if shown != "about to run"] == [
            "preparing request",
            "needs your confirmation",
            "running",
            "done",
        ]
        assert events.cues(WEATHER) == ["preparing request", "cancelled: nothing was done"]
        results = [data for kind, data in events.seen if kind == "result"]
        assert results == [
            {"call": EMAIL, "tool": "send_email", "result": {"sent_to": "bob@example.com"}}
        ]
        # Neither a second confirmation nor a late stop changes anything.
        again = await client.post(f"/turns/{turn}/calls/{EMAIL}/confirm")
        assert again.status_code == 409
        late = await client.post(f"/turns/{turn}/calls/{EMAIL}/stop")
        assert late.status_code == 409
        assert late.json()["reason"] == "call_terminal"
        assert (await client.get("/executions")).json() == {"executions": {"send_email": 1}}
        assert run.agent.toolbox.outbox == [
            {"to": "bob@example.com", "subject": "Lunch", "body": "Noon at the usual place?"}
        ]
        rows = {row.call: row for row in run.agent.runtime.projections.ledger.rows()}
        assert (rows[EMAIL].state, rows[EMAIL].outcome) == ("dispatched", "completed")
        assert (rows[WEATHER].state, rows[WEATHER].terminal_reason) == (
            "cancelled",
            "confirmation_denied",
        )


async def test_a_call_without_confirmation_runs_and_a_confirmation_must_match_its_digest() -> None:
    """get_weather runs as soon as its response ends; send_email waits, refuses a confirmation
    for other arguments than those shown, and runs once for the right one."""
    async with example(two_calls(hold=False)) as run:
        client = run.client
        turn = await start(client)
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
            wrong = await client.post(
                f"/turns/{turn}/calls/{EMAIL}/confirm",
                json={"arguments_digest": "sha256:" + "0" * 64},
            )
            assert wrong.status_code == 409
            assert "error" in wrong.json()
            right = await client.post(
                f"/turns/{turn}/calls/{EMAIL}/confirm",
                json={"arguments_digest": pending["arguments_digest"]},
            )
            assert right.status_code == 200
            _, end = await events.until(is_end)
        assert end["calls"] == {EMAIL: "done", WEATHER: "done"}
        results = {data["tool"]: data["result"] for kind, data in events.seen if kind == "result"}
        assert results["get_weather"] == {"location": "Paris", "forecast": "light rain, 14 °C"}
        assert (await client.get("/executions")).json() == {
            "executions": {"get_weather": 1, "send_email": 1}
        }
        # A second chat replays the stream as a new response, and runs its own calls.
        second = await start(client)
        async with client.stream("GET", f"/turns/{second}/events") as response:
            events = Events(response)
            await events.first(cue(EMAIL, "needs your confirmation"))
            stopped = await client.post(f"/turns/{second}/calls/{EMAIL}/stop")
            assert stopped.status_code == 200
            _, end = await events.until(is_end)
        assert end["calls"] == {EMAIL: "cancelled: nothing was done", WEATHER: "done"}
        assert run.agent.toolbox.executions == {"get_weather": 2, "send_email": 1}


async def test_the_person_edits_the_email_before_confirming_it() -> None:
    """An edit that breaks the tool's schema is refused (409, its reason) and changes nothing;
    a valid edit is validated, confirmed and is what the tool sends."""
    async with example(two_calls(hold=False)) as run:
        client = run.client
        turn = await start(client)
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
            shown = pending["arguments_digest"]
            confirm = f"/turns/{turn}/calls/{EMAIL}/confirm"
            broken = await client.post(
                confirm, json={"arguments_digest": shown, "arguments": {"to": "carol@example.com"}}
            )
            assert broken.status_code == 409
            assert broken.json()["reason"] == "schema_invalid"
            edit = {"to": "carol@example.com", "subject": "Lunch", "body": "One o'clock?"}
            edited = await client.post(confirm, json={"arguments_digest": shown, "arguments": edit})
            assert edited.status_code == 200
            assert edited.json()["confirmed"] != shown
            _, end = await events.until(is_end)
        assert end["calls"][EMAIL] == "done"
        assert run.agent.toolbox.outbox == [edit]


async def test_stopping_the_turn_mid_stream_runs_nothing() -> None:
    """A turn stopped while its stream is paused: both calls are cancelled, none runs, and
    the server stops reading the provider's stream."""
    async with example(two_calls(hold=True)) as run:
        client = run.client
        turn = await start(client)
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            await events.until(cue(WEATHER, "preparing request"))
            with trio.fail_after(10):
                await run.replay.paused(1)
            stopped = await client.post(f"/turns/{turn}/stop")
            assert stopped.json() == {"turn": turn, "stopped": True}
            _, end = await events.until(is_end)
        assert end["calls"] == {
            EMAIL: "cancelled: nothing was done",
            WEATHER: "cancelled: nothing was done",
        }
        # The server hung up on the provider: no stream waits to go on.
        assert run.replay.waiting == 0
        await run.agent.runtime.settle()
        assert run.agent.toolbox.executions == {}
        reasons = {row.terminal_reason for row in run.agent.runtime.projections.ledger.rows()}
        assert reasons == {"turn_cancelled"}


async def test_a_new_turn_supersedes_the_last_of_its_conversation_for_its_person_only() -> None:
    """A person's new turn in a conversation cancels the calls of their last one there; another
    person's turn under the same conversation name is their own and cancels nothing."""
    async with example(two_calls(hold=True)) as run:
        client = run.client
        chat = {"message": "mail bob, weather in Paris", "conversation": "c1"}
        first = (await client.post("/chat", json=chat)).json()["turn"]
        async with client.stream("GET", f"/turns/{first}/events") as response:
            events = Events(response)
            await events.until(cue(WEATHER, "preparing request"))
            other = await client.post("/chat", json=chat, headers={"x-user": "user:olga"})
            olga = other.json()["turn"]
            second = (await client.post("/chat", json=chat)).json()["turn"]
            _, end = await events.until(is_end)
        assert end["calls"] == {
            EMAIL: "cancelled: nothing was done",
            WEATHER: "cancelled: nothing was done",
        }
        # The first turn's stream stopped at the pause; the two others wait there now.
        with trio.fail_after(10):
            await run.replay.paused(2)
        assert run.replay.release() == 2
        for turn, user in ((olga, "user:olga"), (second, "user:demo")):
            async with client.stream(
                "GET", f"/turns/{turn}/events", headers={"x-user": user}
            ) as response:
                events = Events(response)
                await events.first(cue(EMAIL, "needs your confirmation"))
                # The weather lookup runs before the person stops the turn (a stop while it
                # ran would stop it).
                if "done" not in events.cues(WEATHER):
                    await events.until(cue(WEATHER, "done"))
                await client.post(f"/turns/{turn}/stop", headers={"x-user": user})
                await events.until(is_end)
        reasons = {
            row.turn: row.terminal_reason
            for row in run.agent.runtime.projections.ledger.rows()
            if row.call == WEATHER
        }
        assert reasons == {first: "superseded", olga: None, second: None}
        assert run.agent.toolbox.executions == {"get_weather": 2}


async def test_bad_requests_get_clear_json_errors() -> None:
    """Malformed chats, unknown turns and calls, another person's turn, a call not waiting for
    confirmation, unknown routes and methods: each a 4xx with a JSON error naming the problem."""
    async with example(two_calls(hold=True)) as run:
        client = run.client
        asked: list[tuple[int, str]] = []
        for body in (b"", b"{not json", b"[1, 2]", b'{"message": ""}', b'{"message": 5}'):
            answer = await client.post("/chat", content=body)
            asked.append((answer.status_code, answer.json()["error"]))
        assert asked == [
            (400, "the body is not JSON"),
            (400, "the body is not JSON"),
            (400, "the body must be a JSON object, not list"),
            (400, "'message' must be a non-empty string"),
            (400, "'message' must be a non-empty string"),
        ]
        huge = await client.post("/chat", json={"message": "x" * 70_000})
        assert huge.status_code == 413
        assert "limit is 65536" in huge.json()["error"]
        long = await client.post("/chat", json={"message": "x" * 9_000})
        assert long.json() == {"error": "'message' is 9000 characters, the limit is 8000"}

        unknown = await client.get("/turns/turn-none/events")
        assert (unknown.status_code, unknown.json()) == (404, {"error": "no turn 'turn-none'"})
        turn = await start(client)
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            await events.until(cue(WEATHER, "preparing request"))
            no_call = await client.post(f"/turns/{turn}/calls/call_none/confirm")
            assert no_call.status_code == 404
            assert no_call.json()["error"] == f"turn {turn!r} has no call 'call_none' (yet)"
            other = await client.post(
                f"/turns/{turn}/calls/{WEATHER}/stop", headers={"x-user": "user:mallory"}
            )
            assert (other.status_code, other.json()) == (
                403,
                {"error": f"turn {turn!r} belongs to another user"},
            )
            early = await client.post(f"/turns/{turn}/calls/{WEATHER}/confirm")
            assert early.status_code == 409
            assert early.json()["error"] == (
                f"call {WEATHER!r} is not waiting for confirmation (it is 'preparing request')"
            )
            bad_digest = await client.post(
                f"/turns/{turn}/calls/{WEATHER}/confirm", json={"arguments_digest": 7}
            )
            assert bad_digest.json() == {"error": "'arguments_digest' must be a non-empty string"}
            with trio.fail_after(10):
                await run.replay.paused(1)
            run.replay.release()
            await events.first(cue(EMAIL, "needs your confirmation"))
            await client.post(f"/turns/{turn}/calls/{EMAIL}/stop")
            await events.until(is_end)
        assert run.agent.toolbox.executions == {"get_weather": 1}

        missing = await client.get("/nowhere")
        assert (missing.status_code, missing.json()) == (404, {"error": "Not Found"})
        wrong_method = await client.get("/chat")
        assert (wrong_method.status_code, wrong_method.json()) == (
            405,
            {"error": "Method Not Allowed"},
        )


async def test_the_anthropic_protocol_through_the_same_server() -> None:
    """With Anthropic's Messages API as the provider (a replayed capture), the server asks
    /v1/messages with the demo tools in Anthropic's format and runs the captured call once."""
    body = (FIXTURES / "anthropic" / "text-then-tool-use.sse").read_bytes()
    async with example(Replay(body), provider="anthropic") as run:
        client = run.client
        turn = await start(client, "weather in Paris?")
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            _, end = await events.until(is_end)
        assert list(end["calls"].values()) == ["done"]
        assert run.agent.toolbox.executions == {"get_weather": 1}
        [(path, asked)] = run.replay.requests
        assert path == "/v1/messages"
        assert asked["stream"] is True
        assert [tool["name"] for tool in asked["tools"]] == ["get_weather", "send_email"]
        assert asked["tools"][0]["input_schema"]["required"] == ["location"]


async def errors_of_a_turn(provider_url: str) -> list[str]:
    """The errors a turn's events report, with a provider at ``provider_url``; the turn ends
    without a call."""
    async with (
        open_agent(replayed(provider_url)) as agent,
        trio.open_nursery() as nursery,
    ):
        url = await nursery.start(partial(serve, create_app(agent)))
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            turn = await start(client)
            async with client.stream("GET", f"/turns/{turn}/events") as response:
                events = Events(response)
                _, end = await events.until(is_end)
        nursery.cancel_scope.cancel()
    assert end == {"turn": turn, "calls": {}}
    return [data["error"] for kind, data in events.seen if kind == "error"]


async def test_a_provider_that_cannot_be_reached_ends_the_turn_with_an_error() -> None:
    """A provider endpoint nobody listens on: the turn's events say the stream broke, and end."""
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    errors = await errors_of_a_turn(f"http://127.0.0.1:{port}")
    assert errors == ["the stream from replay broke: ConnectError"]


async def test_a_provider_that_refuses_the_request_ends_the_turn_with_its_answer() -> None:
    """A provider answering 401: the turn's events show its status and what it said, and end."""

    async def refuse(_: Request) -> Response:
        return JSONResponse({"error": "invalid key"}, status_code=401)

    provider = Starlette(routes=[Route("/v1/responses", refuse, methods=["POST"])])
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve, provider))
        errors = await errors_of_a_turn(url)
        nursery.cancel_scope.cancel()
    assert errors == ['replay answered HTTP 401, not a stream: {"error":"invalid key"}']


async def test_a_stream_that_breaks_mid_call_runs_nothing() -> None:
    """The provider goes away while get_weather's arguments stream: the events say the stream
    broke, and both calls are cancelled, send_email's although its arguments were whole."""
    replay = two_calls(hold=True)
    provider_scope = trio.CancelScope()

    async def provider(task_status: trio.TaskStatus[str]) -> None:
        with provider_scope:
            await serve(replay_app(replay), task_status=task_status)

    async with trio.open_nursery() as nursery:
        replay_url = await nursery.start(provider)
        async with open_agent(replayed(replay_url)) as agent:
            url = await nursery.start(partial(serve, create_app(agent)))
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                turn = await start(client)
                async with client.stream("GET", f"/turns/{turn}/events") as response:
                    events = Events(response)
                    await events.until(cue(WEATHER, "preparing request"))
                    with trio.fail_after(10):
                        await replay.paused(1)
                    provider_scope.cancel()
                    _, end = await events.until(is_end)
            nursery.cancel_scope.cancel()
    assert end["calls"] == {
        EMAIL: "cancelled: nothing was done",
        WEATHER: "cancelled: nothing was done",
    }
    reasons = {data["call"]: data.get("reason") for kind, data in events.seen if kind == "status"}
    assert reasons == {EMAIL: "connection_lost", WEATHER: "connection_lost"}
    [error] = [data["error"] for kind, data in events.seen if kind == "error"]
    assert error == "the stream from replay broke: RemoteProtocolError"
    assert agent.toolbox.executions == {}


async def test_the_server_runs_as_python_m_runs_it(capsys: pytest.CaptureFixture[str]) -> None:
    """``run`` with no key in the environment: the default replay, chat after chat."""
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(run, port=0, environ={}, delay=0.0))
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            for _ in range(2):
                turn = await start(client)
                async with client.stream("GET", f"/turns/{turn}/events") as response:
                    events = Events(response)
                    await events.first(cue(EMAIL, "needs your confirmation"))
                    await client.post(f"/turns/{turn}/calls/{EMAIL}/confirm")
                    _, end = await events.until(is_end)
                assert end["calls"] == {EMAIL: "done", WEATHER: "done"}
            executions = (await client.get("/executions")).json()
        nursery.cancel_scope.cancel()
    assert executions == {"executions": {"get_weather": 2, "send_email": 2}}
    printed = capsys.readouterr().out
    assert f"agent server: {url}\n" in printed
    assert "provider: a replay of two-calls.sse at http://127.0.0.1:" in printed


@pytest.mark.parametrize(
    ("environ", "url", "header"),
    [
        ({}, None, None),
        ({"OPENAI_API_KEY": "k1"}, "https://api.openai.com/v1/responses", "authorization"),
        (
            {"ANTHROPIC_API_KEY": "k2", "ANTHROPIC_BASE_URL": "http://proxy:1"},
            "http://proxy:1/v1/messages",
            "x-api-key",
        ),
        (
            {"OPENAI_API_KEY": "k1", "ANTHROPIC_API_KEY": "k2"},
            "https://api.openai.com/v1/responses",
            "authorization",
        ),
    ],
)
def test_the_provider_comes_from_the_environment(
    environ: dict[str, str], url: str | None, header: str | None
) -> None:
    """No key: the replay; an OpenAI key: OpenAI (first); an Anthropic key: Anthropic."""
    provider = provider_from_environment(environ)
    if url is None:
        assert provider is None
        return
    assert provider is not None
    assert provider.url == url
    assert header in provider.headers
    request = provider.request("hi", TOOLS)
    assert request["stream"] is True
    assert len(request["tools"]) == 2


def test_the_openai_request_offers_the_tools_in_the_responses_format() -> None:
    """The Responses request carries the message as input and each tool as a function."""
    request = openai_responses(api_key="k").request("mail bob", TOOLS)
    assert request["input"] == "mail bob"
    assert [(tool["type"], tool["name"]) for tool in request["tools"]] == [
        ("function", "get_weather"),
        ("function", "send_email"),
    ]
    assert request["tools"][1]["parameters"]["required"] == ["to", "subject", "body"]


async def test_the_documented_requests_work_as_written() -> None:
    """The requests of docs/example-server.md, sent as their curl commands send them (the turn
    and the digest shown put where the page writes them): a chat starts, its events stream,
    and either confirmation the page shows confirms the email."""
    chat, events_of, confirm, confirm_digest = documented_requests()
    async with example(two_calls(hold=False)) as run:
        client = run.client
        for confirmation in (confirm, confirm_digest):
            started = await chat.send(client)
            assert started.status_code == 202, started.text
            turn = started.json()["turn"]
            path = events_of.written(turn).path
            async with client.stream(events_of.method, path) as response:
                events = Events(response)
                _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
                written = confirmation.written(turn, pending["arguments_digest"])
                confirmed = await written.send(client)
                assert confirmed.status_code == 200, confirmed.text
                _, end = await events.until(is_end)
            assert end["calls"] == {EMAIL: "done", WEATHER: "done"}


async def test_the_server_restarts_on_its_log_and_the_console_reads_it(tmp_path: Path) -> None:
    """Run on an SQLite log, stopped and run again on it: the chats after the restart run as
    before (each replayed response is new, in every process), and the console beside the
    running server, over the same log, shows the calls of both runs."""
    log = f"sqlite:///{tmp_path / 'chat.db'}"
    pages = []
    for _ in range(2):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(run, port=0, environ={}, delay=0.0, log=log))
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                turn = await start(client)
                async with client.stream("GET", f"/turns/{turn}/events") as response:
                    events = Events(response)
                    await events.first(cue(EMAIL, "needs your confirmation"))
                    await client.post(f"/turns/{turn}/calls/{EMAIL}/confirm")
                    _, end = await events.until(is_end)
                assert end["calls"] == {EMAIL: "done", WEATHER: "done"}
            pages.append(await console_page(log, "/?stage=completed"))
            nursery.cancel_scope.cancel()
    # Each run's email call is a row of the same markup: the second page holds two.
    once, twice = (page.count(EMAIL) for page in pages)
    assert once > 0
    assert twice == 2 * once


async def console_page(log: str, path: str) -> str:
    """A page of the operator console over ``log``, as an operator reads it."""
    console = Console(log, settings())
    transport = httpx.ASGITransport(app=console.app, client=("127.0.0.1", 50000))
    headers = {"authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with (
        console.running(),
        httpx.AsyncClient(transport=transport, base_url="http://console", headers=headers) as web,
    ):
        page = await web.get(path)
    assert page.status_code == 200
    return page.text
