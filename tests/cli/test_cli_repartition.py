"""``inert repartition``: a log copied into another number of partitions verifies on both sides
with the same ledger call for call, keeps its controls in partition 0, never brings a redacted
payload back, and refuses a target that holds events or a source a runtime still writes."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from postgres_support import fresh_schema, log_url

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    open_log,
    open_runtime,
)
from inert.cli import main
from inert.events import ProcessHeartbeat, process_stream
from inert.log import Log, NewEvent
from inert.log._partitions import CONTROL_COPY
from inert.log._records import StoredRecord

WEATHER = ToolDeclaration(name="get_weather")
CONVERSATIONS = [("acme", f"c{index}") for index in range(6)] + [("globex", "g0"), ("globex", "g1")]
DISPATCHED = ("c0", "c1")
"""Conversations whose call runs: retention redacts its arguments."""
ERASED = "c3"
"""The conversation whose fragments an operator redacted by hand."""


def _key(tenant: str, conversation: str) -> CallKey:
    return CallKey(
        tenant=tenant,
        conversation=conversation,
        turn="t1",
        response=f"r-{conversation}",
        item="i",
        call="c",
    )


def _secret(conversation: str) -> bytes:
    return f"secret-city-{conversation}".encode()


async def _fill(log: Log) -> None:
    """A ready call in each conversation; those of ``DISPATCHED`` run (their arguments are
    redacted then); globex is stopped (its calls end); a refused control; the fragments of
    ``ERASED`` are redacted."""
    async with open_runtime(log=log, tools=[WEATHER], operators=["op"]) as runtime:
        for tenant, conversation in CONVERSATIONS:
            key = _key(tenant, conversation)
            await runtime.start_turn(
                tenant=tenant, conversation=conversation, turn="t1", principal="user:alice"
            )
            data = b'{"city": "' + _secret(conversation) + b'"}'
            await runtime.feed(
                [
                    CallOpened(key=key, tool="get_weather", sequence=0),
                    ArgumentsAppended(key=key, data=data, first_sequence=1, last_sequence=1),
                    CallEnded(key=key, terminal=TerminalRef(sequence=2)),
                    ResponseEnded(
                        response=key.response_ref,
                        reason=ResponseEndReason.COMPLETED,
                        terminal=TerminalRef(sequence=3),
                    ),
                ]
            )
        await runtime.settle()
        for conversation in DISPATCHED:
            dispatch = await runtime.claim(_key("acme", conversation), executor="worker")
            await runtime.complete(dispatch)
        await runtime.stop_tenant("globex", operator="op", reason="incident")
        with pytest.raises(RefusedError):
            await runtime.stop_tenant("acme", operator="mallory", reason="not an operator")
        await runtime.settle()
    key = _key("acme", ERASED)
    await log.redact(
        key.response_ref.stream,
        await log.stream_version(key.response_ref.stream),
        event_types=[ArgumentsAppended.TAG],
    )


async def _rows(log: Log) -> dict[int, list[StoredRecord]]:
    """Every row of every partition of the log."""
    return {
        number: await log.partition(number)._read_rows(1, None)
        for number in sorted({0, *log.call_partitions()})
    }


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _replayed(capsys: pytest.CaptureFixture[str], url: str) -> dict[str, object]:
    """``inert verify`` passes on the log; ``inert replay``'s counts."""
    status, _, error = _run(capsys, ["verify", "--log", url])
    assert status == 0, error
    status, output, error = _run(capsys, ["replay", "--log", url, "--json"])
    assert status == 0, error
    summary = json.loads(output)
    return {name: summary[name] for name in ("events", "calls", "states", "ready", "rejections")}


def _check_partitions(rows: dict[int, list[StoredRecord]], partitions: int) -> None:
    """The controls are in partition 0 once (and the refusal, the only other event there), and
    each partition of calls holds a copy of the control alone of them; no payload holds the
    arguments retention redacted, no fragment those the operator redacted."""
    control_rows = [row for row in rows[0] if row.stream.startswith("control/")]
    assert [row.event_type for row in control_rows] == [
        "operator.tenant_stopped",
        "operator.control_refused",
    ]
    stop = control_rows[0]
    if partitions == 1:
        assert not any(row.event_id.startswith(CONTROL_COPY) for row in rows[0])
    else:
        assert rows[0] == control_rows
        for number in range(1, partitions + 1):
            copies = [row for row in rows[number] if row.stream.startswith("control/")]
            assert [row.event_id for row in copies] == [CONTROL_COPY + stop.event_id]
    for part in rows.values():
        for row in part:
            for conversation in DISPATCHED:
                assert _secret(conversation) not in (row.payload or b"")
            if row.event_type == ArgumentsAppended.TAG:
                assert _secret(ERASED) not in (row.payload or b"")


async def _fill_sqlite(url: str) -> dict[int, list[StoredRecord]]:
    async with open_log(url) as log:
        await _fill(log)
        return await _rows(log)


async def _read(url: str) -> dict[int, list[StoredRecord]]:
    async with open_log(url, create=False) as log:
        return await _rows(log)


@pytest.fixture
def schemas() -> Iterator[tuple[str, str]]:
    with fresh_schema() as four, fresh_schema() as two:
        yield four, two


@pytest.mark.slow(seconds=10)
def test_a_log_goes_from_sqlite_to_four_then_two_partitions_and_back(
    tmp_path: Path, schemas: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite → PostgreSQL of 4 partitions → of 2 → SQLite: each log verifies, replays to the
    same counts and keeps every event id; the last is the first row for row but positions."""
    first, last = f"sqlite:///{tmp_path / 'first.db'}", f"sqlite:///{tmp_path / 'last.db'}"
    four, two = log_url(schemas[0]), log_url(schemas[1])
    source = trio.run(_fill_sqlite, first)
    redacted = [row for row in source[0] if row.digest is not None]
    assert redacted, "retention and the operator redacted payloads"
    _check_partitions(source, 1)
    counts = _replayed(capsys, first)
    assert counts["calls"] == len(CONVERSATIONS)
    for url, to, partitions in ((first, four, 4), (four, two, 2), (two, last, 1)):
        status, output, error = _run(
            capsys,
            ["repartition", "--log", url, "--to", to, "--partitions", str(partitions), "--json"],
        )
        assert status == 0, error
        report = json.loads(output)
        assert report["calls"] == len(CONVERSATIONS)
        assert report["target"]["partitions"] == partitions
        # One control, copied into each partition of calls.
        copies = partitions if partitions > 1 else 0
        events = counts["events"]
        assert isinstance(events, int)
        assert _replayed(capsys, to) == counts | {"events": events + copies}
        copied = trio.run(_read, to)
        assert [part["events"] for part in report["target"]["written"]] == [
            len(copied[number]) for number in sorted(copied)
        ]
        _check_partitions(copied, partitions)
        ids = {row.event_id for part in copied.values() for row in part}
        assert {row.event_id for row in source[0]} <= ids
        by_id = {row.event_id: row for part in copied.values() for row in part}
        for row in redacted:
            assert (by_id[row.event_id].digest, by_id[row.event_id].payload_length) == (
                row.digest,
                row.payload_length,
            )
    back = {row.event_id: row for row in trio.run(_read, last)[0]}
    assert back.keys() == {row.event_id for row in source[0]}
    for row in source[0]:
        again = back[row.event_id]
        # A decision's payload names its cause's position, which the copy may have moved.
        same = row[1:6] + row[8:12] if row.event_type.startswith("decision.") else row[1:12]
        assert (
            again[1:6] + again[8:12] if row.event_type.startswith("decision.") else again[1:12]
        ) == same
    assert _secret("c0") not in (tmp_path / "last.db").read_bytes()


def test_a_target_that_holds_events_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A target with an event in it is refused, and both logs are left as they were."""
    source, target = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    before = trio.run(_fill_sqlite, source)

    async def one_event() -> None:
        async with open_log(target) as log:
            await log.append([NewEvent(stream="s", event=ProcessHeartbeat(process="p"))])

    trio.run(one_event)
    status, output, error = _run(
        capsys, ["repartition", "--log", source, "--to", target, "--partitions", "1"]
    )
    assert status == 1
    assert output == ""
    assert "the target log holds events (partition 0)" in error
    assert "the source is as it was" in error
    assert trio.run(_read, source) == before
    assert len(trio.run(_read, target)[0]) == 1


def test_a_source_a_runtime_runs_on_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A source whose runtime holds its presence, or whose process beat a moment ago, is
    refused, the process named, before the target is made."""
    path = tmp_path / "a.db"
    source, target = f"sqlite:///{path}", f"sqlite:///{tmp_path / 'b.db'}"
    trio.run(_fill_sqlite, source)
    descriptor = os.open(f"{path}-runtimes", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH)
        status, _, error = _run(
            capsys, ["repartition", "--log", source, "--to", target, "--partitions", "1"]
        )
    finally:
        os.close(descriptor)
    assert status == 1
    assert "a runtime is running on the log to repartition" in error

    async def beat() -> None:
        async with open_log(source) as log:
            await log.append(
                [
                    NewEvent(
                        stream=process_stream("node-7"), event=ProcessHeartbeat(process="node-7")
                    )
                ]
            )

    trio.run(beat)
    status, _, error = _run(
        capsys, ["repartition", "--log", source, "--to", target, "--partitions", "1"]
    )
    assert status == 1
    assert "runtime process 'node-7' is running on the log to repartition" in error
    assert not (tmp_path / "b.db").exists()


def test_an_sqlite_target_of_several_partitions_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQLite holds one partition: a copy into several there is refused before anything."""
    source = f"sqlite:///{tmp_path / 'a.db'}"
    trio.run(_fill_sqlite, source)
    status, _, error = _run(
        capsys,
        [
            "repartition",
            "--log",
            source,
            "--to",
            f"sqlite:///{tmp_path / 'b.db'}",
            "--partitions",
            "3",
        ],
    )
    assert status == 1
    assert "SQLite logs have one partition, not 3" in error


def test_the_report_names_what_was_copied(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --json, the report names the events of each partition, the controls, the calls
    whose ledgers agree and that snapshots are made again."""
    source = f"sqlite:///{tmp_path / 'a.db'}"
    trio.run(_fill_sqlite, source)
    status, output, error = _run(
        capsys,
        ["repartition", "--log", source, "--to", "memory://", "--partitions", "3"],
    )
    assert status == 0, error
    lines = output.splitlines()
    assert lines[0].startswith("copied ")
    assert " of 1 partition into " in lines[0]
    assert [line.split(":")[0] for line in lines[1:5]] == [f"partition {n}" for n in range(4)]
    assert "controls: 1, in partition 0 and copied into every partition of calls" in output
    assert (
        f"verified both logs, whose ledgers agree for each of {len(CONVERSATIONS)} calls" in output
    )
    assert lines[-1] == "snapshots are not copied: a runtime on the copy makes them again"
