"""``python -m examples.fastapi_server [--host H] [--port P] [--log URL] [--hold] [--delay S]``."""

from __future__ import annotations

import argparse
import asyncio
import signal

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
    parser = argparse.ArgumentParser(
        prog="python -m examples.fastapi_server",
        description="The example agent server on FastAPI and asyncio: chats whose tool calls"
        " run through inert.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--log", default="memory://", help="inert's log, e.g. sqlite:///chat.db")
    parser.add_argument(
        "--hold",
        action="store_true",
        help="the replay pauses before its last call ends, until POST <replay>/release",
    )
    parser.add_argument(
        "--delay", type=float, default=0.05, help="seconds between the replay's events"
    )
    asyncio.run(serve_until_stopped(parser.parse_args()))


if __name__ == "__main__":
    main()
