"""The example server's asyncio twin over real HTTP: Uvicorn bound to 127.0.0.1 inside
``asyncio.run``, the provider a local replay served the same way and asked through its official
SDK, ``httpx`` as the person's client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from adapter_support import FIXTURES
from attrs import define
from example_support import (
    EMAIL,
    WAIT,
    WEATHER,
    Events,
    Message,
    cue,
    documented_requests,
    is_end,
    start,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from examples.agent_server import (
    Replay,
    Toolbox,
    anthropic_messages,
    replay_app,
    replayed,
    two_calls,
)
from examples.fastapi_server import Agent, create_app, running, serve

EMAIL_ARGUMENTS = {"to": "bob@example.com", "subject": "Lunch", "body": "Noon at the usual place?"}


@define
class Example:
    """A running asyncio twin, its replayed provider, and a client of it."""

    client: httpx.AsyncClient
    agent: Agent
    replay: Replay
    replay_url: str


@asynccontextmanager
async def example(replay: Replay, provider: str = "openai") -> AsyncIterator[Example]:
    async with serve(replay_app(replay)) as replay_url:
        if provider == "openai":
            chosen = replayed(replay_url)
        else:
            chosen = anthropic_messages(api_key="test", base_url=replay_url)
        app = create_app(chosen, toolbox=Toolbox())
        async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
            yield Example(client, app.state.agent, replay, replay_url)


def scenario(
    test: Callable[[Example], Awaitable[None]],
    replay: Replay | None = None,
    provider: str = "openai",
) -> None:
    """Run ``test`` against a running example (by default of the held two-call replay), in a
    new asyncio loop."""

    async def main() -> None:
        async with example(replay or two_calls(hold=True), provider) as run:
            await asyncio.wait_for(test(run), WAIT)

    asyncio.run(main())


def test_a_confirmed_call_runs_once_and_a_call_stopped_mid_stream_never() -> None:
    """The person stops get_weather while its arguments stream and confirms send_email, shown
    its arguments and their digest: the email is sent once, the weather never looked up."""

    async def test(run: Example) -> None:
        client = run.client
        turn = await start(client)
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            await events.until(cue(WEATHER, "preparing request"))
            # The replay waits before get_weather's terminal event: the call still collects.
            await run.replay.paused(1)
            stopped = await client.post(f"/turns/{turn}/calls/{WEATHER}/stop")
            assert stopped.json() == {"call": WEATHER, "stopped": True}
            _, cancelled = await events.until(cue(WEATHER, "cancelled: nothing was done"))
            assert cancelled["reason"] == "stopped_by_user"
            assert (await client.post(f"{run.replay_url}/release")).json() == {"released": 1}
            _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
            assert pending["arguments"] == EMAIL_ARGUMENTS
            digest = pending["arguments_digest"]
            assert digest.startswith("hmac-sha256:")
            confirmed = await client.post(
                f"/turns/{turn}/calls/{EMAIL}/confirm", json={"arguments_digest": digest}
            )
            assert confirmed.json() == {"call": EMAIL, "confirmed": digest}
            _, end = await events.until(is_end)
        assert end["calls"] == {EMAIL: "done", WEATHER: "cancelled: nothing was done"}
        assert events.cues(WEATHER) == ["preparing request", "cancelled: nothing was done"]
        results = [data for kind, data in events.seen if kind == "result"]
        assert results == [
            {"call": EMAIL, "tool": "send_email", "result": {"sent_to": "bob@example.com"}}
        ]
        # Neither a second confirmation nor a late stop runs it again.
        again = await client.post(
            f"/turns/{turn}/calls/{EMAIL}/confirm", json={"arguments_digest": digest}
        )
        assert again.status_code == 409
        late = await client.post(f"/turns/{turn}/calls/{EMAIL}/stop")
        assert (late.status_code, late.json()["reason"]) == (409, "call_terminal")
        assert (await client.get("/executions")).json() == {"executions": {"send_email": 1}}
        assert run.agent.toolbox.outbox == [EMAIL_ARGUMENTS]
        rows = {row.call: row for row in run.agent.runtime.projections.ledger.rows()}
        assert (rows[EMAIL].state, rows[EMAIL].outcome) == ("dispatched", "completed")
        assert rows[WEATHER].terminal_reason == "confirmation_denied"

    scenario(test)


def test_the_person_edits_the_email_before_confirming_it() -> None:
    """Under asyncio as under Trio: an edit the schema refuses is a 409 naming why and changes
    nothing; a valid edit is confirmed and is what the tool sends."""

    async def test(run: Example) -> None:
        client = run.client
        turn = await start(client)
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            await events.until(cue(WEATHER, "preparing request"))
            await run.replay.paused(1)
            assert (await client.post(f"{run.replay_url}/release")).json() == {"released": 1}
            _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
            shown = pending["arguments_digest"]
            confirm = f"/turns/{turn}/calls/{EMAIL}/confirm"
            extra = {**EMAIL_ARGUMENTS, "bcc": "eve@example.com"}
            broken = await client.post(
                confirm, json={"arguments_digest": shown, "arguments": extra}
            )
            assert (broken.status_code, broken.json()["reason"]) == (409, "schema_invalid")
            edit = {**EMAIL_ARGUMENTS, "to": "carol@example.com"}
            edited = await client.post(confirm, json={"arguments_digest": shown, "arguments": edit})
            assert edited.status_code == 200
            assert edited.json()["confirmed"] != shown
            _, end = await events.until(is_end)
        assert end["calls"][EMAIL] == "done"
        assert run.agent.toolbox.outbox == [edit]

    scenario(test)


def test_only_the_turn_s_person_confirms_and_only_the_digest_they_were_shown() -> None:
    """A confirmation from another person, without a digest or with another digest is refused
    and runs nothing; the turn's person's, with the digest shown, runs the call once."""

    async def test(run: Example) -> None:
        client = run.client
        turn = await start(client)
        confirm = f"/turns/{turn}/calls/{EMAIL}/confirm"
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            await run.replay.paused(1)
            run.replay.release()
            _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
            digest = pending["arguments_digest"]
            other = await client.post(
                confirm, json={"arguments_digest": digest}, headers={"x-user": "user:mallory"}
            )
            assert (other.status_code, other.json()) == (
                403,
                {"error": f"turn {turn!r} belongs to another user"},
            )
            missing = await client.post(confirm, json={})
            assert missing.status_code == 422
            assert missing.json()["error"].startswith("body.arguments_digest: ")
            wrong = await client.post(confirm, json={"arguments_digest": "sha256:" + "0" * 64})
            assert wrong.status_code == 409
            assert run.agent.toolbox.executions == {"get_weather": 1}
            right = await client.post(confirm, json={"arguments_digest": digest})
            assert right.status_code == 200
            _, end = await events.until(is_end)
        assert end["calls"] == {EMAIL: "done", WEATHER: "done"}
        assert run.agent.toolbox.executions == {"get_weather": 1, "send_email": 1}

    scenario(test)


def test_stopping_the_turn_mid_stream_runs_nothing() -> None:
    """A turn stopped while its stream is paused: both calls are cancelled, none runs, and the
    server hangs up on the provider."""

    async def test(run: Example) -> None:
        client = run.client
        turn = await start(client)
        async with client.stream("GET", f"/turns/{turn}/events") as response:
            events = Events(response)
            await events.until(cue(WEATHER, "preparing request"))
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

    scenario(test)


def test_the_anthropic_sdk_asks_the_messages_api_and_its_call_runs_once() -> None:
    """With Anthropic's Messages API as the provider (a replayed capture), the SDK asks
    /v1/messages with the demo tools in Anthropic's format, and the captured call runs once."""

    async def test(run: Example) -> None:
        turn = await start(run.client, "weather in Paris?")
        async with run.client.stream("GET", f"/turns/{turn}/events") as response:
            _, end = await Events(response).until(is_end)
        assert list(end["calls"].values()) == ["done"]
        assert run.agent.toolbox.executions == {"get_weather": 1}
        [(path, asked)] = run.replay.requests
        assert path == "/v1/messages"
        assert asked["stream"] is True
        assert [tool["name"] for tool in asked["tools"]] == ["get_weather", "send_email"]

    body = (FIXTURES / "anthropic" / "text-then-tool-use.sse").read_bytes()
    scenario(test, Replay(body), provider="anthropic")


def test_a_provider_that_refuses_the_request_ends_the_turn_with_its_answer() -> None:
    """A provider answering 401: the turn's events show its status and what it said, and end."""

    async def refuse(_: Request) -> Response:
        return JSONResponse({"error": "invalid key"}, status_code=401)

    async def main() -> list[Message]:
        provider = Starlette(routes=[Route("/v1/responses", refuse, methods=["POST"])])
        async with serve(provider) as provider_url:
            app = create_app(replayed(provider_url))
            async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=WAIT) as client:
                turn = await start(client)
                async with client.stream("GET", f"/turns/{turn}/events") as response:
                    events = Events(response)
                    await asyncio.wait_for(events.until(is_end), WAIT)
        return events.seen

    seen = asyncio.run(main())
    assert [data["error"] for kind, data in seen if kind == "error"] == [
        'replay answered HTTP 401, not a stream: {"error":"invalid key"}'
    ]
    assert seen[-1][1]["calls"] == {}


def test_the_server_runs_as_python_m_runs_it(capsys: pytest.CaptureFixture[str]) -> None:
    """``running`` with no key in the environment: the default replay, chat after chat."""

    async def main() -> tuple[str, Any]:
        async with (
            running(port=0, environ={}, delay=0.0) as url,
            httpx.AsyncClient(base_url=url, timeout=WAIT) as client,
        ):
            for _ in range(2):
                turn = await start(client)
                async with client.stream("GET", f"/turns/{turn}/events") as response:
                    events = Events(response)
                    _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
                    await client.post(
                        f"/turns/{turn}/calls/{EMAIL}/confirm",
                        json={"arguments_digest": pending["arguments_digest"]},
                    )
                    _, end = await events.until(is_end)
                assert end["calls"] == {EMAIL: "done", WEATHER: "done"}
            return url, (await client.get("/executions")).json()

    url, executions = asyncio.run(main())
    assert executions == {"executions": {"get_weather": 2, "send_email": 2}}
    printed = capsys.readouterr().out
    assert f"agent server: {url}\n" in printed
    assert "provider: a replay of two-calls.sse at http://127.0.0.1:" in printed


def test_the_documented_requests_work_as_written() -> None:
    """The requests of docs/example-server.md, sent as their curl commands send them: the chat
    starts, its events stream and the confirmation naming the digest shown confirms; the one
    without a digest is 422, as the page says, and a JSON body sent without its content type
    is 422 with an error that asks for it."""
    chat, events_of, confirm, confirm_digest = documented_requests()

    async def test(run: Example) -> None:
        client = run.client
        started = await chat.send(client)
        assert started.status_code == 202, started.text
        turn = started.json()["turn"]
        async with client.stream(events_of.method, events_of.written(turn).path) as response:
            events = Events(response)
            _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
            assert (await confirm.written(turn).send(client)).status_code == 422
            written = confirm_digest.written(turn, pending["arguments_digest"])
            confirmed = await written.send(client)
            assert confirmed.status_code == 200, confirmed.text
            _, end = await events.until(is_end)
        assert end["calls"] == {EMAIL: "done", WEATHER: "done"}
        untyped = await client.post("/chat", content=chat.body)
        assert untyped.status_code == 422
        assert "content-type: application/json" in untyped.json()["error"]

    scenario(test, two_calls(hold=False))


def test_the_server_restarts_on_its_log(tmp_path: Path) -> None:
    """Run on an SQLite log, stopped and run again on it: the chats after the restart run as
    before, each replayed response new in every process."""
    log = f"sqlite:///{tmp_path / 'chat.db'}"

    async def chat_once() -> Any:
        async with (
            running(port=0, environ={}, delay=0.0, log=log) as url,
            httpx.AsyncClient(base_url=url, timeout=WAIT) as client,
        ):
            turn = await start(client)
            async with client.stream("GET", f"/turns/{turn}/events") as response:
                events = Events(response)
                _, pending = await events.first(cue(EMAIL, "needs your confirmation"))
                await client.post(
                    f"/turns/{turn}/calls/{EMAIL}/confirm",
                    json={"arguments_digest": pending["arguments_digest"]},
                )
                _, end = await events.until(is_end)
            return end["calls"]

    for _ in range(2):
        assert asyncio.run(chat_once()) == {EMAIL: "done", WEATHER: "done"}
