"""``python -m examples.fastapi_server [--host H] [--port P] [--log URL] [--hold] [--delay S]``."""

from __future__ import annotations

import argparse
import asyncio
import signal

from examples.agent_server import server_options

from ._serve import running


async def serve_until_stopped(options: argparse.Namespace) -> None:
    """Serve until SIGINT or SIGTERM, then stop everything, the runtime's log included."""
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for stop in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(stop, stopped.set)
    async with running(
        host=options.host,
        port=options.port,
        log=options.log,
        hold=options.hold,
        delay=options.delay,
    ):
        await stopped.wait()
        print("stopping", flush=True)


def main() -> None:
    parser = server_options(
        "python -m examples.fastapi_server",
        "The example agent server on FastAPI and asyncio: chats whose tool calls"
        " run through inert.",
    )
    asyncio.run(serve_until_stopped(parser.parse_args()))


if __name__ == "__main__":
    main()
