"""``python -m examples.agent_server [--host H] [--port P] [--log URL] [--hold] [--delay S]``."""

from __future__ import annotations

import argparse
import signal
from functools import partial

import trio

from ._options import server_options
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
    parser = server_options(
        "python -m examples.agent_server",
        "The example agent server: chats whose tool calls run through inert.",
    )
    trio.run(serve_until_stopped, parser.parse_args())


if __name__ == "__main__":
    main()
