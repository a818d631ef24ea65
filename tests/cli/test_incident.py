"""An incident through the command line alone, while the agent server keeps running: on SQLite
and on PostgreSQL, a server process holds a call of each live stage for two tenants; the
operator previews the emergency stop of one (the running call listed), is stopped from a
mistyped tenant and from resuming what is not stopped, stops the tenant beside the server, sees
each call ended and the running one asked to stop and then stopped, reads the controls in force
and the audit with its counts; the other tenant's calls live on."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from locations import TESTS
from postgres_support import fresh_schema, log_url

from inert import open_runtime
from inert.cli import main

pytestmark = pytest.mark.slow(seconds=8)

OPERATOR = ["--operator", "olga", "--reason", "prompt injection"]


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'server.db'}"
        return
    with fresh_schema() as schema:
        yield log_url(schema)


@pytest.fixture
def server(url: str) -> Iterator[subprocess.Popen[str]]:
    """The agent server, running until the test ends."""
    process = subprocess.Popen(
        [sys.executable, str(TESTS / "incident_server.py"), url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line == "ready\n", (line, process.stderr.read() if process.stderr else "")
        yield process
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=60)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture(autouse=True)
def operators(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INERT_OPERATORS", "olga")


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def control(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    return run(capsys, ["control", *argv, "--log", url, *OPERATOR])


def test_an_incident_through_the_command_line_beside_a_running_server(
    url: str, server: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Preview, refusals of mistakes, the stop itself with its counts and the running call's
    outcome, the controls in force and the audit, all while the server runs."""
    status, out, err = control(capsys, url, "stop-tenant", "acme", "--dry-run")
    assert status == 0, err
    first, *listed = out.splitlines()
    assert first.startswith("dry run: stop-tenant tenant acme would end 3 calls and ask")
    assert "1 running call to stop; nothing was given (a runtime is running on this log)" in first
    stages = sorted((line.split()[-2], line.split()[-1]) for line in listed)
    assert stages == [
        ("book_flight", "running"),
        ("get_weather", "ready"),
        ("search", "assembling"),
        ("send_email", "waiting"),
    ]

    status, _, err = control(capsys, url, "stop-tenant", "initek")
    assert status == 1
    assert "tenant 'initek' has never been seen on this log" in err
    assert "--new-target" in err
    status, _, err = control(capsys, url, "resume-tenant", "globex")
    assert status == 1
    assert "tenant 'globex' is not stopped" in err

    status, out, err = control(capsys, url, "stop-tenant", "acme", "--json")
    assert status == 0, err
    given = json.loads(out)
    assert given["runtime_running"] is True
    assert sorted(key["call"] for key in given["ended"]) == [
        "call_get_weather",
        "call_search",
        "call_send_email",
    ]
    [stopping] = given["asked_to_stop"]
    assert (stopping["call"], stopping["tenant"]) == ("call_book_flight", "acme")
    assert stopping["outcome"] in ("stop_requested", "stopped")
    assert server.stdout is not None
    assert server.stdout.readline() == "stopped acme call_book_flight\n"

    # The executor's report reaches the audit, whichever process reads it.
    deadline = time.monotonic() + 10
    while True:
        status, out, _ = run(capsys, ["audit", "--log", url, "--json"])
        [entry] = [json.loads(line) for line in out.splitlines()]
        if entry["asked_to_stop"][0]["outcome"] == "stopped" or time.monotonic() > deadline:
            break
    assert entry["asked_to_stop"][0]["outcome"] == "stopped"
    assert len(entry["ended"]) == 3
    _, out, _ = run(capsys, ["audit", "--log", url])
    assert "asked to stop acme/acme-chat/acme-turn/resp_acme_book_flight/" in out
    assert out.rstrip().endswith(": stopped")

    status, out, _ = run(capsys, ["controls", "--log", url])
    assert status == 0
    [line] = out.splitlines()
    assert "tenant_stopped  tenant acme  by olga: prompt injection" in line

    status, out, _ = run(capsys, ["ledger", "--log", url, "--json"])
    rows = [json.loads(line) for line in out.splitlines()]
    globex = {row["tool"]: row["state"] for row in rows if row["tenant"] == "globex"}
    assert globex == {
        "search": "collecting",
        "send_email": "validated",
        "get_weather": "validated",
        "book_flight": "dispatched",
    }
    assert server.poll() is None


def test_a_control_with_no_runtime_running_says_it_holds_the_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the server gone, a stop is recorded and says that no runtime is running, listing
    the calls it holds; the next runtime to open the log ends them before anything else."""
    url = f"sqlite:///{tmp_path / 'server.db'}"
    process = subprocess.Popen(
        [sys.executable, str(TESTS / "incident_server.py"), url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdin is not None
    assert process.stdout.readline() == "ready\n"
    process.stdin.close()
    process.wait(timeout=60)
    process.stdout.close()
    status, out, err = control(capsys, url, "stop-tenant", "globex")
    assert status == 0, err
    first, *held = out.splitlines()
    assert first.endswith(
        "recorded, no runtime is running on this log: it takes effect before any dispatch when"
        " one opens it"
    )
    assert sorted(line.split()[-1] for line in held) == ["assembling", "ready", "waiting"]
    trio.run(_open_runtime_on, url)
    status, out, _ = run(capsys, ["audit", "--log", url, "--json"])
    [entry] = [json.loads(line) for line in out.splitlines()]
    assert len(entry["ended"]) == 3


async def _open_runtime_on(url: str) -> None:
    async with open_runtime(log=url, tools=[]) as runtime:
        await runtime.settle()
