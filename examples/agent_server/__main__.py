"""``python -m examples.agent_server [--host H] [--port P] [--log URL] [--hold] [--delay S]``."""

from __future__ import annotations

import argparse
import signal
from functools import partial

import trio

from ._serve import run


async def serve_until_stopped(options: argparse.Namespace) -> None:
    """Serve until SIGINT or SIGTERM, then stop everything, the runtime's log included."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(
                    run,
                    host=options.host,
                    port=options.port,
                    log=options.log,
                    hold=options.hold,
                    delay=options.delay,
                )
            )
            async for _ in signals:
                print("stopping", flush=True)
                nursery.cancel_scope.cancel()
                break


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m examples.agent_server",
        description="The example agent server: chats whose tool calls run through inert.",
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
    trio.run(serve_until_stopped, parser.parse_args())


if __name__ == "__main__":
    main()
