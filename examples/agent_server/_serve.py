"""Serving the example: Hypercorn's Trio worker, so the inert runtime shares the server's loop."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import cast

import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.typing import Framework
from starlette.types import ASGIApp

from ._agent import open_agent
from ._app import create_app
from ._providers import provider_from_environment, replayed
from ._replay import TWO_CALLS, replay_app, two_calls


async def serve(
    app: ASGIApp,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` (0: a free port) until cancelled; starts with its URL."""
    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    config.graceful_timeout = 1.0

    async with trio.open_nursery() as nursery:
        # The same ASGI protocol, typed apart by Starlette and by Hypercorn.
        framework = cast(Framework, app)
        binds: list[str] = await nursery.start(partial(hypercorn_serve, framework, config))
        task_status.started(binds[0])


async def run(
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log: str = "memory://",
    environ: Mapping[str, str] = os.environ,
    hold: bool = False,
    delay: float = 0.05,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """The example server as ``python -m examples.agent_server`` runs it: against the provider
    the environment names a key for, or else a local replay of the two-call stream (``hold``:
    paused before its last call's terminal event until ``POST <replay>/release``)."""
    async with trio.open_nursery() as nursery:
        provider = provider_from_environment(environ)
        if provider is None:
            replay_url = await nursery.start(
                partial(serve, replay_app(two_calls(hold=hold, delay=delay)))
            )
            print(f"provider: a replay of {TWO_CALLS.name} at {replay_url}", flush=True)
            provider = replayed(replay_url)
        else:
            print(f"provider: {provider.name} at {provider.url}", flush=True)
        async with open_agent(provider, log=log) as agent, trio.open_nursery() as served:
            url = await served.start(partial(serve, create_app(agent), host=host, port=port))
            print(f"agent server: {url}", flush=True)
            task_status.started(url)
