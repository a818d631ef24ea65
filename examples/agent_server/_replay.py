"""A local provider endpoint that answers every request with one recorded stream.

The example server's default provider: every POST gets ``200 text/event-stream`` and the
recorded body, one server-sent event at a time. Ids named in ``fresh_ids`` get a suffix per
request, new in each process too, so that each replay is a new response, as from a provider
(which never reuses a response id: inert knows a response's events by it, and refuses a
response seen in another turn, before a restart of the server on the same log included). With
``hold``, the replay waits at each ``: pause`` comment line of the body until ``release()`` (or
``POST /release``) lets every stream waiting there go on: meanwhile a person can stop a call
whose arguments are still streaming, before its terminal event is sent. It waits with AnyIO,
so that it serves on Trio (the example) and on asyncio (its FastAPI twin) alike.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from attrs import define, field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

TWO_CALLS = Path(__file__).resolve().parent / "two-calls.sse"
"""The default stream: a synthetic OpenAI Responses body with a ``send_email`` call and a
``get_weather`` call, and a pause point before ``get_weather``'s terminal event."""

PAUSE = b": pause"


@define
class Replay:
    """One recorded body, replayed to every request; what was asked is kept in ``requests``."""

    body: bytes
    fresh_ids: tuple[bytes, ...] = ()
    hold: bool = False
    delay: float = 0.0
    """Seconds between events, so that a person watching sees the stream unfold."""
    requests: list[tuple[str, Any]] = field(factory=list)
    replay: bytes = field(factory=lambda: secrets.token_hex(4).encode())
    """Names this replay in the ids it makes fresh: the requests of another process, counted
    from 1 again, get other ids."""
    waiting: int = 0
    """Streams waiting at a pause point now."""
    _released: anyio.Event = field(factory=anyio.Event, init=False)
    _arrived: anyio.Event = field(factory=anyio.Event, init=False)

    def release(self) -> int:
        """Let every stream waiting at a pause point go on; how many there were."""
        self._released.set()
        self._released = anyio.Event()
        return self.waiting

    async def paused(self, streams: int) -> None:
        """Until ``streams`` streams wait at a pause point."""
        while self.waiting < streams:
            await self._arrived.wait()

    async def stream(self, number: int) -> AsyncIterator[bytes]:
        """The body for the ``number``-th request, one event (or comment) at a time."""
        body = self.body.replace(b"\r\n", b"\n")
        for identity in self.fresh_ids:
            body = body.replace(identity, b"%s-%s-%d" % (identity, self.replay, number))
        for block in body.split(b"\n\n"):
            if not block.strip(b"\n"):
                continue
            if self.hold and PAUSE in block.split(b"\n"):
                self.waiting += 1
                self._arrived.set()
                self._arrived = anyio.Event()
                try:
                    await self._released.wait()
                finally:
                    self.waiting -= 1
            elif self.delay:
                await anyio.sleep(self.delay)
            yield block.strip(b"\n") + b"\n\n"


def two_calls(*, hold: bool = False, delay: float = 0.0) -> Replay:
    """The replay of :data:`TWO_CALLS` the example servers default to, a new response each time."""
    return Replay(TWO_CALLS.read_bytes(), fresh_ids=(b"resp_example",), hold=hold, delay=delay)


def replay_app(replay: Replay) -> Starlette:
    """The replay as an ASGI app: ``POST /release``, and any other POST streams the body."""

    async def release(_: Request) -> JSONResponse:
        return JSONResponse({"released": replay.release()})

    async def respond(request: Request) -> StreamingResponse | JSONResponse:
        raw = await request.body()
        try:
            asked: Any = json.loads(raw) if raw else None
        except ValueError:
            return JSONResponse({"error": "the request body is not JSON"}, status_code=400)
        replay.requests.append((request.url.path, asked))
        return StreamingResponse(
            replay.stream(len(replay.requests)), media_type="text/event-stream"
        )

    return Starlette(
        routes=[
            Route("/release", release, methods=["POST"]),
            Route("/{path:path}", respond, methods=["POST"]),
        ]
    )
