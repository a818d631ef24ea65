"""A runtime's presence on a log outlives nothing: held by a runtime of another process, it is
seen from here, and it is gone as soon as that process is killed, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
import trio
from postgres_support import fresh_schema, log_url

from inert import open_log

HOLDER = """
import sys, trio
from inert import open_log, open_runtime

async def main() -> None:
    async with open_runtime(log=sys.argv[1], tools=[], collector=None):
        print("running", flush=True)
        await trio.sleep_forever()

trio.run(main)
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{os.fspath(tmp_path)}/log.db"
        return
    with fresh_schema() as schema:
        yield log_url(schema)


async def _running(url: str) -> bool:
    async with open_log(url) as log:
        return await log.runtime_running()


async def test_a_killed_runtime_process_is_no_longer_running(url: str) -> None:
    """A runtime in another process is running on the log while it lives, and not once it
    is killed (SIGKILL: nothing of it gets to say goodbye)."""
    assert not await _running(url)
    holder = await trio.lowlevel.open_process(
        [sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        said = b""
        with trio.fail_after(60):
            while not said.endswith(b"\n"):
                said += await holder.stdout.receive_some(64)
        assert said.strip() == b"running"
        assert await _running(url)
    finally:
        holder.send_signal(signal.SIGKILL)
        await holder.wait()
        if holder.stdout is not None:
            await holder.stdout.aclose()
    # The server learns of a dead client's session from its closed socket: a moment.
    for _ in range(200):
        if not await _running(url):
            break
        await trio.sleep(0.05)
    else:
        pytest.fail("the killed runtime was still running on the log after 10 s")
