"""The HTTP face of the example agent: a Starlette app over an :class:`Agent`.

``POST /chat`` starts a turn; ``GET /turns/{turn}/events`` streams its status cues, results and
errors as server-sent events; ``POST /turns/{turn}/calls/{call}/confirm`` and ``.../stop``, and
``POST /turns/{turn}/stop``, are the person's say; ``GET /executions`` counts what the tools
did. The person is named by the ``x-user`` header (default ``user:demo``): authentication is
the embedding server's business, and a turn answers only to the person who started it. Every
refusal is JSON: ``{"error": ...}`` with a 4xx status.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from inert import RefusedError, RequestRefused

from ._agent import Agent
from ._turns import Refusal, TooLarge, TurnSession

DEFAULT_USER = "user:demo"
MAX_BODY = 64 * 1024
MAX_MESSAGE = 8_000
MAX_NAME = 128

Endpoint = Callable[[Request], Awaitable[Response]]


def _error(status: int, message: str, **more: Any) -> JSONResponse:
    return JSONResponse({"error": message, **more}, status_code=status)


def _answering(endpoint: Endpoint) -> Endpoint:
    """The endpoint, with the server's and inert's refusals answered as JSON."""

    async def answer(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Refusal as refusal:
            return _error(refusal.status, str(refusal))
        except RequestRefused as refused:
            return _error(409, str(refused), reason=refused.reason)
        except RefusedError as refused:
            return _error(409, str(refused))

    return answer


def _user(request: Request) -> str:
    user = request.headers.get("x-user", DEFAULT_USER)
    if not 0 < len(user) <= MAX_NAME:
        raise Refusal(f"the x-user header must hold 1 to {MAX_NAME} characters")
    return user


async def _json_object(request: Request, *, required: bool) -> dict[str, Any]:
    body = await request.body()
    if len(body) > MAX_BODY:
        raise TooLarge(f"the body is {len(body)} bytes, the limit is {MAX_BODY}")
    if not body.strip() and not required:
        return {}
    try:
        value = json.loads(body)
    except ValueError:
        raise Refusal("the body is not JSON") from None
    if not isinstance(value, dict):
        raise Refusal(f"the body must be a JSON object, not {type(value).__name__}")
    return value


def _text(body: dict[str, Any], name: str, limit: int, *, required: bool) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise Refusal(f"{name!r} must be a non-empty string")
    if len(value) > limit:
        raise Refusal(f"{name!r} is {len(value)} characters, the limit is {limit}")
    return value


def create_app(agent: Agent) -> Starlette:
    """The example's routes over ``agent``."""

    def session(request: Request) -> TurnSession:
        return agent.session(request.path_params["turn"], _user(request))

    async def chat(request: Request) -> Response:
        user = _user(request)
        body = await _json_object(request, required=True)
        message = _text(body, "message", MAX_MESSAGE, required=True)
        conversation = _text(body, "conversation", MAX_NAME, required=False)
        assert message is not None
        turn = await agent.chat(message, principal=user, conversation=conversation)
        return JSONResponse(
            {"turn": turn.id, "events": f"/turns/{turn.id}/events"}, status_code=202
        )

    async def events(request: Request) -> Response:
        return StreamingResponse(
            session(request).server_sent(),
            media_type="text/event-stream",
            headers={"cache-control": "no-store"},
        )

    async def confirm(request: Request) -> Response:
        turn = session(request)
        call = request.path_params["call"]
        body = await _json_object(request, required=False)
        digest = _text(body, "arguments_digest", MAX_NAME, required=False)
        edit = body.get("arguments")
        if edit is not None and not isinstance(edit, dict):
            raise Refusal("'arguments' must be a JSON object: the person's edit of the call's")
        confirmed = await agent.confirm(turn, call, digest, edit)
        return JSONResponse({"call": call, "confirmed": confirmed})

    async def stop_call(request: Request) -> Response:
        turn = session(request)
        call = request.path_params["call"]
        await agent.stop_call(turn, call)
        return JSONResponse({"call": call, "stopped": True})

    async def stop_turn(request: Request) -> Response:
        turn = session(request)
        await agent.stop_turn(turn)
        return JSONResponse({"turn": turn.id, "stopped": True})

    async def executions(_: Request) -> Response:
        return JSONResponse({"executions": dict(agent.toolbox.executions)})

    async def http_error(_: Request, error: Exception) -> Response:
        # Routing's own refusals (no such route, another method) in the same JSON shape.
        assert isinstance(error, HTTPException)
        return JSONResponse(
            {"error": error.detail}, status_code=error.status_code, headers=error.headers
        )

    return Starlette(
        routes=[
            Route("/chat", _answering(chat), methods=["POST"]),
            Route("/turns/{turn}/events", _answering(events), methods=["GET"]),
            Route("/turns/{turn}/calls/{call}/confirm", _answering(confirm), methods=["POST"]),
            Route("/turns/{turn}/calls/{call}/stop", _answering(stop_call), methods=["POST"]),
            Route("/turns/{turn}/stop", _answering(stop_turn), methods=["POST"]),
            Route("/executions", executions, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error},
    )
