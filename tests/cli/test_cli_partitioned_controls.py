"""``inert control``, ``inert audit`` and ``inert ledger`` on a partitioned (PostgreSQL) log:
the calls are found in every partition of calls, and what a control did there is reported and
audited."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import trio
from postgres_support import fresh_schema, log_url
from test_cli_partitions import WEATHER, call_key, ready_call_events

from inert import (
    CallKey,
    PartitionedRuntime,
    open_log,
    open_partitioned_runtime,
)
from inert.cli import main
from inert.cli._operators import control_command

PARTITIONS = 2
LEASE_TIME = 0.6


async def _ready_call(runtime: PartitionedRuntime, key: CallKey) -> None:
    await runtime.start_turn(
        tenant=key.tenant, conversation=key.conversation, turn=key.turn, principal="user:alice"
    )
    await runtime.feed(ready_call_events(key))


async def _until(runtime: PartitionedRuntime, done: object) -> None:
    with trio.fail_after(10):
        while not done():  # type: ignore[operator]
            with trio.move_on_after(0.1):
                await runtime.changed()


@pytest.fixture
def calls() -> Iterator[tuple[str, list[CallKey]]]:
    """A PostgreSQL log of two partitions of calls with a ready call in each, no runtime on
    it."""
    with fresh_schema() as schema:
        url = log_url(schema, partitions=PARTITIONS)
        yield url, trio.run(_fill, url)


async def _fill(url: str) -> list[CallKey]:

    async with open_log(url, create=True) as log:
        keys = [
            call_key(next(f"c{n}" for n in range(1000) if log.partition_of("acme", f"c{n}") == p))
            for p in (1, 2)
        ]
        async with open_partitioned_runtime(
            log=log, process="p1", tools=[WEATHER], lease_time=LEASE_TIME
        ) as runtime:
            await _until(runtime, lambda: runtime.partitions_owned() == [1, 2])
            for key in keys:
                await _ready_call(runtime, key)
            await _until(runtime, lambda: all(runtime.row(key) for key in keys))
            await runtime.settle()
    return keys


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _calls(keys: list[dict[str, str]]) -> set[str]:
    return {key["conversation"] for key in keys}


def test_a_control_finds_the_calls_of_every_partition_and_the_audit_what_it_ended(
    calls: tuple[str, list[CallKey]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Given while no runtime runs, a control previews and holds the ready calls of every
    partition; once a runtime has copied it into each, the audit shows every call it ended."""
    monkeypatch.setenv("INERT_OPERATORS", "olga")
    url, keys = calls
    conversations = {key.conversation for key in keys}
    argv = ["control", "disable-tool", "get_weather", "--log", url, "--operator", "olga"]
    argv += ["--reason", "incident", "--json"]
    status, out, err = _run(capsys, [*argv, "--dry-run"])
    assert status == 0, err
    assert _calls(json.loads(out)["would_end"]) == conversations
    status, out, err = _run(capsys, argv)
    assert status == 0, err
    given = json.loads(out)
    assert (given["runtime_running"], given["ended"]) == (False, [])
    assert _calls(given["held"]) == conversations

    async def open_again() -> None:
        async with open_partitioned_runtime(
            log=url, process="p1", tools=[WEATHER], lease_time=LEASE_TIME
        ) as runtime:
            await _until(
                runtime,
                lambda: all(
                    (row := runtime.row(key)) is not None and row.state == "cancelled"
                    for key in keys
                ),
            )

    trio.run(open_again)
    status, out, err = _run(capsys, ["audit", "--log", url, "--json"])
    assert status == 0, err
    [entry] = [json.loads(line) for line in out.splitlines()]
    assert _calls(entry["ended"]) == conversations
    status, out, _ = _run(capsys, ["audit", "--log", url])
    assert out.count(" ended acme/") == 2


async def test_a_control_given_while_a_runtime_runs_reports_what_it_ended_in_each_partition(
    calls: tuple[str, list[CallKey]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a runtime running, ``inert control`` follows every partition until the calls it
    concerns are ended there, and reports them."""
    monkeypatch.setenv("INERT_OPERATORS", "olga")
    url, keys = calls
    async with open_partitioned_runtime(
        log=url, process="p1", tools=[WEATHER], lease_time=LEASE_TIME
    ) as runtime:
        await _until(runtime, lambda: runtime.partitions_owned() == [1, 2])
        capsys.readouterr()
        await control_command(
            url,
            "disable-tool",
            "get_weather",
            tenant=None,
            operator="olga",
            reason="incident",
            as_json=True,
        )
    given = json.loads(capsys.readouterr().out)
    assert given["runtime_running"] is True
    assert _calls(given["ended"]) == {key.conversation for key in keys}
    assert given["held"] == []


def test_the_ledger_of_a_partitioned_log_lists_the_calls_of_every_partition(
    calls: tuple[str, list[CallKey]], capsys: pytest.CaptureFixture[str]
) -> None:
    """``inert ledger`` folds every partition of calls: each JSON row names its partition,
    and the table is headed by each partition's number."""
    url, keys = calls
    status, out, err = _run(capsys, ["ledger", "--log", url, "--json"])
    assert status == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert {(row["conversation"], row["partition"]) for row in rows} == {
        (key.conversation, number) for key, number in zip(keys, (1, 2), strict=True)
    }
    assert {row["state"] for row in rows} == {"validated"}
    status, out, err = _run(capsys, ["ledger", "--log", url])
    assert status == 0, err
    lines = out.splitlines()
    assert lines.index("partition 1") < lines.index("partition 2")
    assert sum(line.count("get_weather") for line in lines) == 2
