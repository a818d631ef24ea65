"""A log whose files become read-only while a runtime uses it: the runtime stops with an inert
error that names the log and the write that failed, never a hang or a crash signal, and nothing
runs from a write that did not land. ``inert feed`` on a read-only log says so in one line.

A file is made read-only with ``chmod``, which a process running as root ignores; there the
file is made immutable (``chattr +i``), which stops root too, even through a file descriptor
opened before. Where neither works the tests are skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
import trio

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Dispatch,
    Event,
    LogError,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    open_log,
    open_runtime,
)
from inert.cli import main
from inert.events import CallDispatched

WEATHER = ToolDeclaration(name="get_weather")


def _chattr(flag: str, path: Path) -> bool:
    chattr = shutil.which("chattr")
    if chattr is None:
        return False
    done = subprocess.run([chattr, flag, str(path)], capture_output=True, check=False)
    return done.returncode == 0


@contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    """The files read-only for this process, whoever it runs as, until the block ends."""
    modes = {path: path.stat().st_mode for path in paths}
    immutable: list[Path] = []
    try:
        for path in paths:
            path.chmod(0o444)
            if os.access(path, os.W_OK) and _chattr("+i", path):
                immutable.append(path)
            if os.access(path, os.W_OK):
                pytest.skip("this process can make no file read-only (root, without chattr +i)")
        yield
    finally:
        for path in immutable:
            _chattr("-i", path)
        for path, mode in modes.items():
            path.chmod(mode)


def key_of(call: str) -> CallKey:
    return CallKey(
        tenant="acme", conversation="c1", turn="t1", response=f"r-{call}", item="i", call=call
    )


def whole_call(call: str) -> list[Event]:
    """A call of its own response, streamed whole: it becomes ready."""
    key = key_of(call)
    data = b'{"city": "Paris"}'
    return [
        CallOpened(key=key, tool="get_weather", sequence=0),
        ArgumentsAppended(key=key, data=data, offset=0, first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


async def recorded_types(url: str, call: str) -> list[str]:
    """The types of the events the log holds for one call, requests included."""
    async with open_log(url) as log:
        key = key_of(call)
        events = [*await log.read_stream(key.stream), *await log.read_stream(key.request_stream)]
    return [recorded.event_type for recorded in events]


async def run_until_refused(
    url: str, broken: Callable[[], AbstractContextManager[object]]
) -> tuple[list[str], BaseException]:
    """Run one call, then claim a second inside ``broken()`` (the log made unwritable): the
    calls that ran and the error the runtime stopped with."""
    ran: list[str] = []

    async def executor(dispatch: Dispatch) -> None:
        ran.append(dispatch.key.call)

    with pytest.raises((LogError, BaseExceptionGroup)) as raised:  # noqa: PT012
        async with open_runtime(log=url, create=True, tools=[WEATHER]) as runtime:
            await runtime.start_turn(
                tenant="acme", conversation="c1", turn="t1", principal="user:alice"
            )
            await runtime.feed([*whole_call("first"), *whole_call("second")])
            await runtime.settle()
            await runtime.execute(key_of("first"), executor, name="worker")
            # Retention redacts the first call's arguments now that its outcome is in, on a
            # connection of its own, and the log then checkpoints the write-ahead log to erase
            # them, in a thread: let both finish, so that the files turn read-only between two
            # requests. SQLite writes the -shm file through a shared mapping, and a write to a
            # mapping whose file turned immutable since ends the process with SIGBUS; the log
            # checks the files before each step, but a step already past its check (a
            # checkpoint slowed by a loaded disk) cannot be stopped by anything.
            await runtime.settle()
            await runtime.log.erased()
            with broken():
                with trio.fail_after(30):
                    await runtime.execute(key_of("second"), executor, name="worker")
                pytest.fail("a claim was answered from a log that cannot be written")
    return ran, raised.value


@pytest.mark.parametrize("made_read_only", ["database", "wal", "shm", "every file"])
async def test_a_log_made_read_only_mid_run_stops_the_runtime_and_runs_nothing_more(
    made_read_only: str, tmp_path: Path
) -> None:
    """A claim on a log gone read-only raises a LogError naming it; nothing more runs."""
    path = tmp_path / "inert.db"
    url = f"sqlite:///{path}"
    files = {
        "database": [path],
        "wal": [Path(f"{path}-wal")],
        "shm": [Path(f"{path}-shm")],
        "every file": [path, Path(f"{path}-wal"), Path(f"{path}-shm")],
    }[made_read_only]
    ran, error = await run_until_refused(url, lambda: read_only(*files))
    errors = leaves(error)
    assert all(isinstance(leaf, LogError) for leaf in errors), errors
    assert any(
        "can no longer be written" in str(leaf) and str(path) in str(leaf) for leaf in errors
    ), errors
    assert ran == ["first"]
    assert CallDispatched.TAG in await recorded_types(url, "first")
    # The claim request itself may be on record: the kernel can still report an immutable
    # file writable for a moment while SQLite holds it open (and a write through that open
    # descriptor then succeeds). What must never be there is its dispatch.
    assert CallDispatched.TAG not in await recorded_types(url, "second")


async def test_a_read_only_directory_stops_nothing(tmp_path: Path) -> None:
    """The log's files stay writable in a directory that is not: the runtime goes on."""
    folder = tmp_path / "logs"
    folder.mkdir()
    url = f"sqlite:///{folder / 'inert.db'}"
    ran: list[str] = []

    async def executor(dispatch: Dispatch) -> None:
        ran.append(dispatch.key.call)

    async with open_runtime(log=url, create=True, tools=[WEATHER]) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="user:a")
        await runtime.feed(whole_call("first"))
        await runtime.settle()
        with read_only(folder):
            await runtime.execute(key_of("first"), executor, name="worker")
    assert ran == ["first"]


def test_feed_into_a_read_only_log_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``inert feed`` into a read-only log exits 1 with one line; the log holds what it held."""
    path = tmp_path / "inert.db"
    url = f"sqlite:///{path}"
    stream = tmp_path / "stream.jsonl"
    stream.write_text(
        '{"type": "message_start", "message": {"id": "msg_1"}}\n{"type": "message_stop"}\n'
    )
    tools = tmp_path / "tools.json"
    tools.write_text('[{"name": "get_weather", "x-inert": {"strict": false}}]')

    async def head() -> int:
        async with open_log(url) as log:
            return await log.head()

    before = trio.run(head)
    with read_only(path):
        status = main(
            ["feed", str(stream), "--provider", "anthropic", "--tools", str(tools), "--log", url]
        )
    captured = capsys.readouterr()
    assert status == 1
    assert captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("inert: ")
    assert "inert.db" in line
    assert "readonly" in line or "read-only" in line
    assert trio.run(head) == before
