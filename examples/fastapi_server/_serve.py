"""Serving the asyncio twin: Uvicorn, in the asyncio loop that is also the runtime's host."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager

import uvicorn
from starlette.types import ASGIApp

from examples.agent_server import (
    TWO_CALLS,
    provider_from_environment,
    replay_app,
    replayed,
    two_calls,
)

from ._app import create_app

STARTING = 0.01
"""Seconds between two looks at whether Uvicorn has started."""


class _Server(uvicorn.Server):
    """Uvicorn's server, leaving the signals to the program, which serves more than one app."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def serve(app: ASGIApp, *, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve ``app`` (its lifespan included) on ``host:port`` (0: a free port) while the block
    runs; its URL."""
    listener = socket.create_server((host, port))
    config = uvicorn.Config(
        app, lifespan="on", log_level="warning", access_log=False, timeout_graceful_shutdown=1
    )
    server = _Server(config)
    serving = asyncio.create_task(server.serve(sockets=[listener]))
    try:
        while not server.started:
            if serving.done():
                serving.result()
                raise RuntimeError(f"Uvicorn stopped before it served on {host}:{port}")
            await asyncio.sleep(STARTING)
        yield f"http://{host}:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        await serving
        listener.close()


@asynccontextmanager
async def running(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log: str = "memory://",
    environ: Mapping[str, str] = os.environ,
    hold: bool = False,
    delay: float = 0.05,
) -> AsyncIterator[str]:
    """The example server as ``python -m examples.fastapi_server`` runs it, while the block
    runs: against the provider the environment names a key for, or else a local replay of the
    two-call stream (``hold``: paused before its last call's terminal event until
    ``POST <replay>/release``); its URL."""
    async with AsyncExitStack() as stack:
        provider = provider_from_environment(environ)
        if provider is None:
            replay = replay_app(two_calls(hold=hold, delay=delay))
            replay_url = await stack.enter_async_context(serve(replay))
            print(f"provider: a replay of {TWO_CALLS.name} at {replay_url}", flush=True)
            provider = replayed(replay_url)
        else:
            print(f"provider: {provider.name} at {provider.base_url}", flush=True)
        app = create_app(provider, log=log)
        url = await stack.enter_async_context(serve(app, host=host, port=port))
        print(f"agent server: {url}", flush=True)
        yield url
