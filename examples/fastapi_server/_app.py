"""The HTTP face of the asyncio twin: a FastAPI app whose lifespan opens the agent and inert.

The routes are the Trio example's: ``POST /chat`` starts a turn; ``GET /turns/{turn}/events``
streams its status cues, results and errors as server-sent events;
``POST /turns/{turn}/calls/{call}/confirm`` and ``.../stop``, and ``POST /turns/{turn}/stop``,
are the person's say; ``GET /executions`` counts what the tools did. A confirmation names the
digest of the arguments the person was shown (``{"arguments_digest": ...}``): the "needs your
confirmation" cue carries both. The person is named by the ``x-user`` header (default
``user:demo``), and a turn answers only to the person who started it. Every refusal is JSON:
``{"error": ...}`` with a 4xx status.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from examples.agent_server import Provider, Refusal, Toolbox, TurnSession
from examples.agent_server._app import DEFAULT_USER, MAX_MESSAGE, MAX_NAME
from inert import RefusedError, RequestRefused

from ._agent import Agent, open_agent


class Chat(BaseModel):
    """A chat turn: the person's message, and the conversation it goes on (default: a new one)."""

    message: Annotated[str, Field(min_length=1, max_length=MAX_MESSAGE)]
    conversation: Annotated[str | None, Field(min_length=1, max_length=MAX_NAME)] = None


class Confirmation(BaseModel):
    """The digest of the arguments the person was shown, and confirms; or, with
    ``arguments``, the person's edit of them, which runs instead if it validates."""

    arguments_digest: Annotated[str, Field(min_length=1, max_length=MAX_NAME)]
    arguments: dict[str, Any] | None = None


def _agent(request: Request) -> Agent:
    agent: Agent = request.app.state.agent
    return agent


def _user(x_user: Annotated[str, Header(min_length=1, max_length=MAX_NAME)] = DEFAULT_USER) -> str:
    # Authentication is the embedding server's business: here the header names the person.
    return x_user


CurrentAgent = Annotated[Agent, Depends(_agent)]
User = Annotated[str, Depends(_user)]


def _session(turn: str, agent: CurrentAgent, user: User) -> TurnSession:
    return agent.session(turn, user)


Session = Annotated[TurnSession, Depends(_session)]

routes = APIRouter()


@routes.post("/chat", status_code=202)
async def chat(body: Chat, agent: CurrentAgent, user: User) -> dict[str, str]:
    """Start a turn; its events are at the URL answered."""
    turn = await agent.chat(body.message, principal=user, conversation=body.conversation)
    return {"turn": turn.id, "events": f"/turns/{turn.id}/events"}


@routes.get("/turns/{turn}/events", response_class=StreamingResponse)
async def events(session: Session) -> StreamingResponse:
    """The turn's messages as server-sent events, from its first until its ``end``."""
    return StreamingResponse(
        session.server_sent(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store"},
    )


@routes.post("/turns/{turn}/calls/{call}/confirm")
async def confirm(
    call: str, body: Confirmation, session: Session, agent: CurrentAgent
) -> dict[str, str]:
    """Confirm a call waiting for its person, for the arguments of the digest shown (or the
    person's edit of them); the digest of the arguments that run."""
    confirmed = await agent.confirm(session, call, body.arguments_digest, body.arguments)
    return {"call": call, "confirmed": confirmed}


@routes.post("/turns/{turn}/calls/{call}/stop")
async def stop_call(call: str, session: Session, agent: CurrentAgent) -> dict[str, Any]:
    """Refuse a call, even while its arguments still stream: it never runs."""
    await agent.stop_call(session, call)
    return {"call": call, "stopped": True}


@routes.post("/turns/{turn}/stop")
async def stop_turn(session: Session, agent: CurrentAgent) -> dict[str, Any]:
    """Cancel the turn, and stop reading its stream."""
    await agent.stop_turn(session)
    return {"turn": session.id, "stopped": True}


@routes.get("/executions")
async def executions(agent: CurrentAgent) -> dict[str, dict[str, int]]:
    """How many times each tool ran."""
    return {"executions": dict(agent.toolbox.executions)}


async def _refused(_: Request, error: Exception) -> JSONResponse:
    if isinstance(error, Refusal):
        return JSONResponse({"error": str(error)}, status_code=error.status)
    if isinstance(error, RequestRefused):
        return JSONResponse({"error": str(error), "reason": error.reason}, status_code=409)
    return JSONResponse({"error": str(error)}, status_code=409)


async def _invalid(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    said = "; ".join(
        f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}"
        for problem in error.errors()
    )
    kind = request.headers.get("content-type", "")
    if request.method == "POST" and not kind.startswith("application/json"):
        # FastAPI reads a body as JSON only when it says it is: curl -d says otherwise.
        sent = f"as {kind}" if kind else "without a content type"
        said += f"; the body was sent {sent}: send it with content-type: application/json"
    return JSONResponse({"error": said}, status_code=422)


async def _http_error(_: Request, error: Exception) -> JSONResponse:
    # Routing's own refusals (no such route, another method) in the same JSON shape.
    assert isinstance(error, HTTPException)
    return JSONResponse(
        {"error": error.detail}, status_code=error.status_code, headers=error.headers
    )


def create_app(
    provider: Provider, *, log: str = "memory://", toolbox: Toolbox | None = None
) -> FastAPI:
    """The example's routes over an agent of ``provider`` on a runtime over ``log``, both opened
    by the app's lifespan (the agent is ``app.state.agent`` while it runs)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_agent(provider, log=log, toolbox=toolbox) as agent:
            app.state.agent = agent
            yield

    app = FastAPI(title="inert's example agent server, on asyncio", lifespan=lifespan)
    app.include_router(routes)
    app.add_exception_handler(Refusal, _refused)
    app.add_exception_handler(RefusedError, _refused)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http_error)
    return app
