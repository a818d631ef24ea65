"""Fixtures of the MCP executor's tests (a plugin the tests' conftest loads): the tests' own
MCP server (``tests/mcp_server.py``), started over Streamable HTTP where a test's ``transport``
asks for it, and its journal.

A module that takes ``server_url`` defines the ``transport`` fixture, naming the transports it
runs over.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import pytest
from locations import ROOT

SERVER = ROOT / "tests" / "mcp_server.py"
"""The tests' own MCP server."""


def free_port() -> int:
    """A TCP port of localhost free now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """Where the server writes what its tools did."""
    return tmp_path / "journal.jsonl"


@pytest.fixture
def server_url(transport: str, journal: Path, tmp_path: Path) -> Iterator[str | None]:
    """The URL of a Streamable HTTP server of the tests' own on localhost (None for stdio,
    whose server the client starts itself)."""
    if not transport.startswith("http"):
        yield None
        return
    port = free_port()
    with (tmp_path / "server.log").open("w") as output:
        process = subprocess.Popen(
            [sys.executable, str(SERVER), "http", str(journal), str(port)],
            stdout=output,
            stderr=output,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert process.poll() is None, (tmp_path / "server.log").read_text()
                    assert time.monotonic() < deadline, "the MCP server did not start"
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    """Where a stdio server's own log goes."""
    with (tmp_path / "stdio-server.log").open("w") as file:
        yield file
