"""A log that proves its integrity: checksums, positions, implied decisions, ``inert verify``.

Every row carries a checksum of its columns; every read checks it and that positions (and a
stream's versions) follow each other; replay compares every recorded decision whole and refuses
a decision taken as recorded that the call's history does not allow; ``verify_log`` runs all of
it plus the backend's own checks and lists every problem instead of stopping at the first.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import attrs
import pytest
from golden_logs import GOLDEN, load, replay
from hypothesis import given, settings
from hypothesis import strategies as st
from postgres_support import connect, drop_schema, new_schema, server_url

from inert import ArgumentsAppended, CallKey, Log, LogDamaged, ReplayDivergence, open_runtime
from inert.actors._fold import CallFold
from inert.cli import main
from inert.events import (
    DECISION_TYPES,
    DEFAULT_CODEC,
    CallConfirmed,
    CallDispatched,
    CallOpened,
    CallTerminalCandidate,
    CallValidated,
    ExecutionCompleted,
    OfferedTool,
    RecordedEvent,
    Redacted,
    TerminalRef,
    TurnStarted,
)
from inert.log import MemoryLog, MemoryStore, NewEvent, PostgresLog, SQLiteLog
from inert.log._records import (
    StoredRecord,
    check_page,
    check_row,
    check_stream_page,
    decode_record,
    with_checksum,
)
from inert.log._sqlite import _SNAPSHOT_SCHEMA, APPLICATION_ID, SCHEMA_VERSION
from inert.runtime._verify import verify_log

KEY = CallKey(tenant="t", conversation="c", turn="1", response="r", item="i", call="x")


def events(count: int, streams: int = 3) -> list[NewEvent]:
    return [
        NewEvent(
            stream=f"s{number % streams}",
            event_id=f"e{number}",
            event=ArgumentsAppended(key=KEY, data=b'{"n": %d}' % number),
        )
        for number in range(1, count + 1)
    ]


# --- the checksum of a row -------------------------------------------------------------------


def _row() -> StoredRecord:
    return with_checksum(
        (7, "e7", "s1", 3, 1_764_000_000_000_000, "t", 2, b"\x81\xa1k\x01", 4, None, "tp", None)
    )


def _changed(value: object) -> list[object]:
    """Values a damaged or rewritten column could hold instead of ``value``."""
    match value:
        case bool():
            return [not value]
        case int():
            return [value + 1, value - 1, value ^ 1 << 20, -value]
        case str():
            return [value + "x", value[:-1], value.upper() if value != value.upper() else "z", ""]
        case bytes():
            return [value + b"\0", value[:-1], bytes([value[0] ^ 1]) + value[1:], b""]
        case None:
            return ["", b"", 0]
    raise AssertionError(value)


@pytest.mark.parametrize("column", StoredRecord._fields[:-1])
def test_a_change_to_any_column_fails_the_checksum(column: str) -> None:
    """Every column is covered: each plausible change of each one is refused, naming the
    position the row claims."""
    row = _row()
    check_row(row)
    for value in _changed(getattr(row, column)):
        damaged = row._replace(**{column: value})  # type: ignore[arg-type]
        with pytest.raises(LogDamaged, match=f"damaged at position {damaged.position}"):
            check_row(damaged)


def test_columns_swapped_between_rows_fail_the_checksum() -> None:
    """A row moved to another position, or given another's payload, fails."""
    first = _row()
    second = with_checksum(first._replace(position=8, event_id="e8", payload=b"\x81\xa1k\x02"))
    for damaged in (
        first._replace(position=8),
        first._replace(payload=second.payload),
        second._replace(checksum=first.checksum),
    ):
        with pytest.raises(LogDamaged):
            check_row(damaged)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(min_size=1, max_size=300), flip=st.integers(0, 10_000))
def test_one_flipped_bit_of_a_payload_fails_the_checksum(data: bytes, flip: int) -> None:
    """CRC-32 finds every single-bit error, whatever the payload."""
    row = with_checksum(_row()._replace(payload=data, payload_length=len(data)))
    bit = flip % (len(data) * 8)
    damaged = bytearray(data)
    damaged[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(LogDamaged):
        check_row(row._replace(payload=bytes(damaged)))


def test_a_page_with_a_missing_position_is_refused() -> None:
    """Positions follow each other from the first asked; a stream's versions from theirs."""
    rows = [with_checksum(_row()._replace(position=n, version=n)) for n in range(1, 6)]
    check_page(rows, 1)
    check_stream_page(rows, "s1", 1)
    with pytest.raises(LogDamaged, match="damaged at position 3: the position is missing"):
        check_page(rows[:2] + rows[3:], 1)
    with pytest.raises(LogDamaged, match="damaged at position 1: the position is missing"):
        check_page(rows[1:], 1)
    with pytest.raises(LogDamaged, match="lacks version 3"):
        check_stream_page(rows[:2] + rows[3:], "s1", 1)
    with pytest.raises(LogDamaged, match="lacks version 1"):
        check_stream_page(rows, "s2", 1)


# --- every backend ---------------------------------------------------------------------------


class Backend(Enum):
    MEMORY = "memory"
    SQLITE = "sqlite"
    POSTGRESQL = "postgresql"


@attrs.define
class Tamperable:
    """A log of a backend, and a way to change its stored rows behind its back."""

    open: Callable[[], Any]
    execute: Callable[[str, tuple[object, ...]], None]
    cleanup: Callable[[], None] = lambda: None


def _memory_sql(store: MemoryStore) -> Callable[[str, tuple[object, ...]], None]:
    def execute(statement: str, parameters: tuple[object, ...]) -> None:
        # The few statements the tests send, done on the rows of a memory store.
        (position,) = parameters[-1:]
        index = next(i for i, row in enumerate(store.rows) if row.position == position)
        row = store.rows[index]
        if statement.startswith("DELETE"):
            del store.rows[index]
        elif "payload" in statement:
            payload = parameters[0]
            assert isinstance(payload, bytes)
            store.rows[index] = row._replace(payload=payload)
        else:
            store.rows[index] = row._replace(recorded_at=row.recorded_at + 1)

    return execute


@pytest.fixture(params=list(Backend), ids=[backend.value for backend in Backend])
def tamperable(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    backend: Backend = request.param
    if backend is Backend.MEMORY:
        store = MemoryStore()

        @asynccontextmanager
        async def open_memory() -> AsyncIterator[Log]:
            log = MemoryLog(store)
            try:
                yield log
            finally:
                await log.aclose()

        yield Tamperable(open=open_memory, execute=_memory_sql(store))
    elif backend is Backend.SQLITE:
        path = tmp_path / "log.db"

        def execute_sqlite(statement: str, parameters: tuple[object, ...]) -> None:
            with sqlite3.connect(path) as connection:
                connection.execute(statement, parameters)

        yield Tamperable(open=lambda: SQLiteLog.open(path), execute=execute_sqlite)
    else:
        schema = new_schema()

        def execute_postgres(statement: str, parameters: tuple[object, ...]) -> None:
            with connect() as connection:
                connection.execute(
                    statement.replace("events", f"{schema}.events").replace("?", "%s"),
                    parameters,
                )

        try:
            yield Tamperable(
                open=lambda: PostgresLog.open(server_url(), schema=schema),
                execute=execute_postgres,
            )
        finally:
            drop_schema(schema)


async def _subscribed(log: Log, first: int, count: int) -> None:
    subscription = log.subscribe(first)
    for _ in range(count):
        await subscription.__anext__()


async def test_every_read_refuses_a_damaged_row(tamperable: Tamperable) -> None:
    """A row changed behind the log's back is refused by read, read_stream and subscribe alike,
    naming its position; the rows before it read as they were."""
    async with tamperable.open() as log:
        await log.append(events(9))
    tamperable.execute("UPDATE events SET recorded_at = recorded_at + 1 WHERE position = ?", (5,))
    async with tamperable.open() as log:
        assert [r.position for r in await log.read(1, limit=4)] == [1, 2, 3, 4]
        assert len(await log.read(6)) == 4
        with pytest.raises(LogDamaged, match="damaged at position 5: the checksum"):
            await log.read()
        with pytest.raises(LogDamaged, match="damaged at position 5"):
            await log.read_stream("s2")
        with pytest.raises(LogDamaged, match="damaged at position 5"):
            await _subscribed(log, 1, 9)
        problems = (await verify_log(log)).problems
        assert [(p.position, p.what.split(" of ")[0]) for p in problems] == [(5, "the checksum")]


async def test_every_read_refuses_a_missing_row(tamperable: Tamperable) -> None:
    """A row deleted from the middle is a missing position to read and subscribe, a missing
    version to its stream's reads, and a problem of the storage to verify."""
    async with tamperable.open() as log:
        await log.append(events(9))
    tamperable.execute("DELETE FROM events WHERE position = ?", (4,))
    async with tamperable.open() as log:
        with pytest.raises(LogDamaged, match="damaged at position 4: the position is missing"):
            await log.read()
        with pytest.raises(LogDamaged, match="lacks version 2"):
            await log.read_stream("s1")
        with pytest.raises(LogDamaged, match="damaged at position 4"):
            await _subscribed(log, 2, 9)
        found = await verify_log(log)
        assert not found.ok
        assert any(p.position == 4 and "missing" in p.what for p in found.problems)
        assert any(p.position is None for p in found.problems)


async def test_redaction_refuses_to_rewrite_a_damaged_row(tamperable: Tamperable) -> None:
    """Retention rewrites a row with a checksum of its own; a damaged row is refused first, so
    that redacting it cannot make it whole again."""
    async with tamperable.open() as log:
        await log.append(events(6))
        assert await log.redact("s0", 1) == 1
        assert [type(r.event) for r in await log.read_stream("s0")] == [Redacted, ArgumentsAppended]
    tamperable.execute("UPDATE events SET payload = ? WHERE position = ?", (b"\x80", 6))
    async with tamperable.open() as log:
        with pytest.raises(LogDamaged, match="damaged at position 6"):
            await log.redact("s0", 2)
        with pytest.raises(LogDamaged, match="damaged at position 6"):
            await log.read_stream("s0")


async def test_verify_passes_a_sound_log_and_gives_the_replay_digest(
    tamperable: Tamperable,
) -> None:
    """A log as written verifies whole, with the digest a replay reaches."""
    async with tamperable.open() as log:
        await log.append(events(20))
        found = await verify_log(log)
    assert found.ok
    assert found.replayed
    assert found.events == 20
    assert found.digest is not None


# --- upgrades of older logs ------------------------------------------------------------------

SCHEMA_2_EVENTS = """
CREATE TABLE streams (stream_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE events (
    position INTEGER PRIMARY KEY, event_id TEXT NOT NULL UNIQUE,
    stream_id INTEGER NOT NULL REFERENCES streams (stream_id),
    version INTEGER NOT NULL CHECK (version >= 1), recorded_at INTEGER NOT NULL,
    event_type TEXT NOT NULL, schema_version INTEGER NOT NULL, payload BLOB,
    payload_length INTEGER NOT NULL, payload_digest BLOB, traceparent TEXT, tracestate TEXT,
    UNIQUE (stream_id, version)
);
"""


async def test_a_schema_2_sqlite_log_is_upgraded_with_checksums(tmp_path: Path) -> None:
    """A file written before rows had checksums gets one for every row it holds when it is
    opened, reads back whole, and refuses its rows damaged later."""
    written = tmp_path / "written.db"
    async with SQLiteLog.open(written) as log:
        await log.append(events(5000))
        expected = await log.read()
    old = tmp_path / "schema-2.db"
    with sqlite3.connect(old) as connection:
        connection.executescript(SCHEMA_2_EVENTS)
        connection.execute(f"ATTACH DATABASE '{written}' AS written")
        connection.execute("INSERT INTO streams SELECT * FROM written.streams")
        connection.execute(
            "INSERT INTO events SELECT position, event_id, stream_id, version, recorded_at,"
            " event_type, schema_version, payload, payload_length, payload_digest, traceparent,"
            " tracestate FROM written.events"
        )
        connection.executescript(_SNAPSHOT_SCHEMA)
        connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        connection.execute("PRAGMA user_version = 2")
    async with SQLiteLog.open(old) as log:
        assert await log.read() == expected
        assert (await verify_log(log)).ok
    with sqlite3.connect(old) as connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        connection.execute("UPDATE events SET event_type = 'x' WHERE position = 4321")
    async with SQLiteLog.open(old) as log:
        with pytest.raises(LogDamaged, match="damaged at position 4321"):
            await log.read()


# --- the backend's own checks ----------------------------------------------------------------


def _damage_index(path: Path) -> None:
    """Overwrite the root page of the index of event ids, which a read by position never
    touches."""
    with sqlite3.connect(path) as connection:
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        [(root,)] = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"
            " AND sql IS NULL AND name LIKE 'sqlite_autoindex_events_1'"
        ).fetchall()
    with path.open("r+b") as file:
        file.seek((root - 1) * page_size + 16)
        file.write(b"\xff" * 64)


async def test_verify_finds_a_damaged_index_page_that_reads_never_touch(tmp_path: Path) -> None:
    """A damaged index page of an SQLite file leaves every read whole; ``PRAGMA
    integrity_check``, run by verify, finds it and verify fails."""
    path = tmp_path / "log.db"
    async with SQLiteLog.open(path) as log:
        await log.append(events(300))
    _damage_index(path)
    async with SQLiteLog.open(path) as log:
        assert len(await log.read()) == 300
        found = await verify_log(log)
    assert not found.ok
    assert found.replayed
    assert all(p.position is None for p in found.problems)
    assert any("PRAGMA integrity_check" in p.what for p in found.problems)


async def test_verify_lists_every_damaged_row_and_goes_on(tmp_path: Path) -> None:
    """Verify does not stop at the first damaged row: it lists each, and the replay stops at
    the first, since what follows can no longer be judged."""
    path = tmp_path / "log.db"
    async with SQLiteLog.open(path) as log:
        await log.append(events(50))
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE events SET payload = x'00' WHERE position IN (7, 21, 40)")
        connection.execute("DELETE FROM events WHERE position = 30")
    async with SQLiteLog.open(path) as log:
        found = await verify_log(log)
    assert found.events == 49
    assert not found.replayed
    assert found.digest is None
    by_position = [(p.position, p.what) for p in found.problems if p.position is not None]
    assert [position for position, _ in by_position] == [7, 21, 30, 40]
    assert by_position[2][1] == "missing (the next row is at 31)"
    assert "49 rows hold positions up to 50: some are missing" in [
        p.what for p in found.problems if p.position is None
    ]


# --- the command line ------------------------------------------------------------------------


def _demo_log(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert main(["demo", "--log", url]) == 0
    return url


def test_inert_verify_and_replay_on_a_sound_and_a_damaged_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``inert verify`` passes the demo's log with the digest ``inert replay`` prints; after one
    row is damaged both exit non-zero with a line naming the position, and no traceback."""
    url = _demo_log(tmp_path)
    capsys.readouterr()
    assert main(["replay", "--log", url]) == 0
    digest = capsys.readouterr().out.splitlines()[-1]
    assert main(["verify", "--log", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith("verified ")
    assert out.splitlines()[-1] == digest
    with sqlite3.connect(tmp_path / "demo.db") as connection:
        connection.execute("UPDATE events SET recorded_at = recorded_at + 1 WHERE position = 10")
    assert main(["verify", "--log", url]) == 1
    captured = capsys.readouterr()
    assert re.fullmatch(
        r"position 10: the checksum of the row of event id '\w+' fails\n", captured.out
    )
    assert re.fullmatch(
        r"inert: the log failed verification: 1 problem in \d+ events read\n", captured.err
    )
    assert main(["replay", "--log", url]) == 1
    err = capsys.readouterr().err
    assert "damaged at position 10" in err
    assert "Traceback" not in err


def test_inert_verify_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--json`` gives one object with the problems by position."""
    url = _demo_log(tmp_path)
    with sqlite3.connect(tmp_path / "demo.db") as connection:
        connection.execute("DELETE FROM events WHERE position = 3")
    capsys.readouterr()
    assert main(["verify", "--log", url, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False
    assert report["replayed"] is False
    assert {"position": 3, "problem": "missing (the next row is at 4)"} in report["problems"]


async def test_a_runtime_refuses_a_damaged_log_and_executes_nothing(tmp_path: Path) -> None:
    """A runtime opened on a log with a damaged row refuses to start, naming the position."""
    path = tmp_path / "log.db"
    async with SQLiteLog.open(path) as log:
        await log.append(events(10))
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE events SET payload = x'00' WHERE position = 8")
    with pytest.raises(LogDamaged, match="damaged at position 8"):
        async with SQLiteLog.open(path) as log, open_runtime(log=log, tools=[]):
            pass


# --- what recorded decisions imply -----------------------------------------------------------


class _Records:
    """Recorded events numbered as a log numbers them."""

    def __init__(self) -> None:
        self.position = 0
        self.versions: dict[str, int] = {}

    def add(self, stream: str, event: Any) -> RecordedEvent:
        self.position += 1
        self.versions[stream] = version = self.versions.get(stream, 0) + 1
        return RecordedEvent(
            position=self.position,
            event_id=f"e{self.position}",
            stream=stream,
            version=version,
            recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
            event_type=getattr(event, "TAG", "ingress.arguments_appended"),
            schema_version=1,
            trace=None,
            event=event,
        )


def _degraded_call() -> tuple[CallFold, _Records]:
    """A fold holding one collecting call whose fragment retention redacted: it takes its
    decisions as recorded from there."""
    fold = CallFold()
    records = _Records()
    lookup = OfferedTool(name="lookup", digest="sha256:t")
    turn = TurnStarted(turn=KEY.turn_ref, principal="user:alice", tools=(lookup,))
    fold.apply(records.add("turn", turn))
    fold.apply(records.add("response", CallOpened(key=KEY, tool="lookup", sequence=0)))
    fragment = Redacted(
        length=9,
        digest="00",
        remains=ArgumentsAppended(key=KEY, data=b"", first_sequence=1, last_sequence=1),
    )
    fold.apply(records.add("response", fragment))
    slot = fold.state(KEY)
    assert slot is not None
    assert slot.degraded
    return fold, records


def _candidate(cause: int) -> CallTerminalCandidate:
    return CallTerminalCandidate(
        key=KEY,
        cause=cause,
        terminal=TerminalRef(sequence=2),
        fragments=1,
        size=9,
        arguments_digest="sha256:a",
    )


def _validated(needs_confirmation: bool, cause: int) -> CallValidated:
    return CallValidated(
        key=KEY,
        cause=cause,
        tool="lookup",
        tool_digest="sha256:t",
        arguments=b"",
        arguments_digest="sha256:a",
        needs_confirmation=needs_confirmation,
    )


def _dispatched(cause: int) -> CallDispatched:
    return CallDispatched(key=KEY, cause=cause, claim_id="claim-1", executor="x")


def test_a_dispatch_taken_as_recorded_needs_its_validation() -> None:
    """A call that takes its decisions as recorded refuses a dispatch before any validation."""
    fold, records = _degraded_call()
    with pytest.raises(
        LogDamaged, match=r"decision\.dispatched of call .* nothing allows: .* not validated"
    ):
        fold.apply(records.add(KEY.stream, _dispatched(records.position)))


def test_a_dispatch_taken_as_recorded_needs_the_confirmation_it_asked_for() -> None:
    """A validation that asked for a confirmation makes a dispatch without one damage; with the
    confirmation recorded, the dispatch stands and so does its outcome."""
    fold, records = _degraded_call()
    fold.apply(records.add(KEY.stream, _candidate(records.position)))
    fold.apply(records.add(KEY.stream, _validated(True, records.position)))
    with pytest.raises(LogDamaged, match="needs a confirmation and has none"):
        fold.apply(records.add(KEY.stream, _dispatched(records.position)))
    fold, records = _degraded_call()
    fold.apply(records.add(KEY.stream, _candidate(records.position)))
    fold.apply(records.add(KEY.stream, _validated(True, records.position)))
    confirmed = CallConfirmed(
        key=KEY, cause=records.position, principal="user:alice", confirmation_event_id="e9"
    )
    fold.apply(records.add(KEY.stream, confirmed))
    fold.apply(records.add(KEY.stream, _dispatched(records.position)))
    fold.apply(records.add("outcome", ExecutionCompleted(key=KEY, claim_id="claim-1")))
    with pytest.raises(LogDamaged, match=r"claim 'claim-2' .* never dispatched"):
        fold.apply(records.add("outcome", ExecutionCompleted(key=KEY, claim_id="claim-2")))


@pytest.mark.parametrize(
    ("change", "found"),
    [
        ({"tool": "send_mail"}, "it names tool 'send_mail', the call opened 'lookup'"),
        ({"tool_digest": "sha256:other"}, "its tool digest is not the one the turn offered"),
        ({"arguments_digest": "sha256:b"}, "its arguments digest is not the one the terminal"),
    ],
)
def test_a_validation_taken_as_recorded_must_match_the_call_and_its_turn(
    change: dict[str, str], found: str
) -> None:
    """A validation taken as recorded names the tool the call opened, with the digest its turn
    offered, and the arguments its terminal candidate named; a validation before any terminal
    candidate is refused too."""
    fold, records = _degraded_call()
    with pytest.raises(LogDamaged, match="not a terminal candidate"):
        fold.apply(records.add(KEY.stream, _validated(False, records.position)))
    fold, records = _degraded_call()
    fold.apply(records.add(KEY.stream, _candidate(records.position)))
    forged = attrs.evolve(_validated(False, records.position), **change)  # type: ignore[arg-type]
    with pytest.raises(LogDamaged, match=re.escape(found)):
        fold.apply(records.add(KEY.stream, forged))


def test_an_outcome_needs_the_dispatch_of_its_claim() -> None:
    """An outcome recorded for a call of a known turn that was never dispatched is damage."""
    fold, records = _degraded_call()
    with pytest.raises(LogDamaged, match=r"outcome .* never dispatched"):
        fold.apply(records.add("outcome", ExecutionCompleted(key=KEY, claim_id="claim-1")))


# --- every field of every recorded decision --------------------------------------------------


def _other(value: object) -> object | None:
    """Another value of the same type, or None where the field has no simple other value."""
    match value:
        case bool():
            return not value
        case Enum():
            members = [member for member in type(value) if member is not value]
            return members[0] if members else None
        case int():
            return value + 1
        case str():
            return value + "x"
        case bytes():
            return value + b" "
        case datetime():
            return value.replace(microsecond=(value.microsecond + 1) % 1_000_000)
    return None


def _forgeries(path: Path) -> list[tuple[int, str, StoredRecord]]:
    """Each decision of an unredacted golden log with one field changed (and the row's checksum
    made again, as a bug rather than damage would write it)."""
    golden = load(path)
    forged = []
    for index, row in enumerate(golden.rows):
        recorded = decode_record(DEFAULT_CODEC, row)
        event = recorded.event
        if not isinstance(event, DECISION_TYPES):
            continue
        for field in attrs.fields(type(event)):
            other = _other(getattr(event, field.name))
            if other is None:
                continue
            try:
                changed = attrs.evolve(event, **{field.name: other})  # type: ignore[arg-type]
            except (TypeError, ValueError):
                continue
            _, version, payload = DEFAULT_CODEC.encode(changed)
            forged.append(
                (
                    index,
                    f"{event.TAG}.{field.name}",
                    with_checksum(
                        row._replace(
                            schema_version=version, payload=payload, payload_length=len(payload)
                        )
                    ),
                )
            )
    return forged


@pytest.mark.parametrize(
    "name",
    ["v2-runtime-confirmation-given", "runtime-executor-outcomes", "v2-runtime-busy-conversation"],
)
def test_every_field_of_every_recorded_decision_is_compared(name: str) -> None:
    """A replay of an unredacted log refuses each of its decisions with any one field changed,
    for every field of every decision type it holds."""
    path = GOLDEN / f"{name}.jsonl"
    golden = load(path)
    seen: set[str] = set()
    for index, what, row in _forgeries(path):
        rows = list(golden.rows)
        rows[index] = row
        with pytest.raises((ReplayDivergence, LogDamaged)):
            replay(rows, golden.limits)
        seen.add(what)
    assert {"decision.dispatched.claim_id", "decision.validated.arguments_digest"} <= seen
