"""The command line of both example servers (the Trio one and its asyncio twin)."""

from __future__ import annotations

import argparse


def server_options(prog: str, description: str) -> argparse.ArgumentParser:
    """``--host``, ``--port``, ``--log``, ``--hold`` and ``--delay``, for ``python -m prog``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
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
    return parser
