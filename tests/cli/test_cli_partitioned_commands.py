"""``inert execute``, ``deny`` and ``cancel-turn`` on a partitioned (PostgreSQL) log with no
runtime on it: the command's own process takes every partition of calls, acts on the calls
of each, and says it left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from postgres_support import fresh_schema, log_url
from test_cli_feed import CHAT, CHAT_TOOLS, tools_file
from test_cli_partitioned_controls import (  # noqa: F401
    LEASE_TIME,
    PARTITIONS,
    _run,
    _until,
    calls,
)
from test_cli_partitions import WEATHER

from inert import CallKey, open_log, open_partitioned_runtime
from inert.cli._common import COMMAND_PROCESS
from inert.events import ProcessLeft
from inert.log._partitions import partition_of

PRINCIPAL = "user:alice"


def _states(url: str, keys: list[CallKey]) -> list[str]:
    async def read() -> list[str]:
        states: dict[CallKey, str] = {}
        async with open_log(url) as log:
            for number in log.call_partitions():
                for recorded in await log.partition(number).read():
                    key = getattr(recorded.event, "key", None)
                    if key in keys:
                        states[key] = recorded.event_type
        return [states[key] for key in keys]

    return trio.run(read)


def _left(url: str) -> list[str]:
    async def read() -> list[str]:
        async with open_log(url) as log:
            return [
                recorded.event.process
                for recorded in await log.read()
                if isinstance(recorded.event, ProcessLeft)
            ]

    return trio.run(read)


def _turn_options(key: CallKey) -> list[str]:
    return ["--tenant", key.tenant, "--conversation", key.conversation, "--turn", key.turn]


def test_execute_runs_the_ready_calls_of_every_partition_once(
    calls: tuple[str, list[CallKey]],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The ready call of each partition is claimed and recorded completed, once; a second run
    finds nothing to execute; the command's process left the log."""
    url, keys = calls
    status, out, err = _run(capsys, ["execute", "--log", url, "--json"])
    assert status == 0, err
    entries = [json.loads(line) for line in out.splitlines()]
    assert sorted(entry["conversation"] for entry in entries) == sorted(
        key.conversation for key in keys
    )
    assert all("claim_id" in entry for entry in entries)
    assert _states(url, keys) == ["outcome.completed", "outcome.completed"]
    status, out, err = _run(capsys, ["execute", "--log", url])
    assert (status, out.strip()) == (0, "nothing to execute: no call is ready"), err
    commands = [process for process in _left(url) if process != "p1"]
    assert len(commands) == 2
    assert all(process.startswith(f"{COMMAND_PROCESS}-") for process in commands)


def test_deny_and_cancel_turn_act_in_the_partition_of_their_turn(
    calls: tuple[str, list[CallKey]],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A call denied and a turn cancelled, each in its own partition, are cancelled there and
    never run."""
    url, (first, second) = calls
    argv = ["deny", "--log", url, *_turn_options(first), "--call-id", first.call]
    status, out, err = _run(capsys, [*argv, "--principal", PRINCIPAL, "--json"])
    assert status == 0, err
    assert json.loads(out)["state"] == "cancelled"
    argv = ["cancel-turn", "--log", url, *_turn_options(second), "--principal", PRINCIPAL]
    status, out, err = _run(capsys, [*argv, "--json"])
    assert status == 0, err
    assert [call["conversation"] for call in json.loads(out)["cancelled"]] == [second.conversation]
    assert _states(url, [first, second]) == ["decision.cancelled", "decision.cancelled"]
    status, out, err = _run(capsys, ["execute", "--log", url])
    assert (status, out.strip()) == (0, "nothing to execute: no call is ready"), err


def test_feed_creates_a_partitioned_log_and_runs_the_turn_in_its_partition(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``inert feed`` on a new partitioned log writes the turn in its conversation's partition
    and runs its calls once; fed again, nothing changes."""
    with fresh_schema() as schema:
        url = log_url(schema, partitions=PARTITIONS)
        argv = ["feed", str(CHAT), "--provider", "openai-chat", "--log", url, "--json"]
        argv += ["--tools", str(tools_file(tmp_path, CHAT_TOOLS)), "--execute"]
        status, out, err = _run(capsys, argv)
        assert status == 0, err
        rows = [json.loads(line) for line in out.splitlines()]
        assert sorted(str(row["outcome"]) for row in rows) == ["None", *["completed"] * 3]
        status, again, err = _run(capsys, argv)
        assert status == 0, err
        assert [json.loads(line) for line in again.splitlines()] == rows

        async def partitions_written() -> set[int]:
            async with open_log(url) as log:
                return {
                    number
                    for number in log.call_partitions()
                    if await log.partition(number).head() > 0
                }

        [conversation] = {str(row["conversation"]) for row in rows}
        assert trio.run(partitions_written) == {
            partition_of(str(rows[0]["tenant"]), conversation, PARTITIONS)
        }


async def test_a_command_is_refused_while_a_process_runs_on_the_partitioned_log(
    calls: tuple[str, list[CallKey]],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    """While a runtime process beats on the log, ``inert execute`` refuses, naming it, and
    records nothing."""
    url, keys = calls
    async with open_partitioned_runtime(
        log=url, process="p2", tools=[WEATHER], lease_time=LEASE_TIME
    ) as runtime:
        await _until(runtime, lambda: runtime.partitions_owned() == [1, 2])
        status, out, err = await trio.to_thread.run_sync(_run, capsys, ["execute", "--log", url])
        assert (status, out) == (1, "")
        assert "runtime process 'p2'" in err
        assert all((row := runtime.row(key)) and row.state == "validated" for key in keys)
