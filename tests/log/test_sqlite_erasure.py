"""Redacted bytes leave an SQLite log's files: its free space and its write-ahead log."""

from __future__ import annotations

import logging
import sqlite3
import sys
from pathlib import Path

import pytest
import trio

from inert import ArgumentsAppended, CallKey
from inert.log import NewEvent, SQLiteLog

CANARY = b"CANARY-7f3a9c"


def _key(call: str) -> CallKey:
    return CallKey(tenant="t", conversation="c", turn="u", response="r", item="i", call=call)


def _fragment(call: str, data: bytes) -> NewEvent:
    key = _key(call)
    event = ArgumentsAppended(key=key, data=data, offset=0, first_sequence=1, last_sequence=1)
    return NewEvent(stream=key.response_ref.stream + call, event=event)


def _found(path: Path) -> list[str]:
    """The files of the log whose bytes hold the canary."""
    return [
        file.name
        for file in sorted(path.parent.glob(path.name + "*"))
        if CANARY in file.read_bytes()
    ]


async def _written_and_redacted(path: Path, **options: object) -> SQLiteLog:
    async with SQLiteLog.open(path, **options) as log:  # type: ignore[arg-type]
        await log.append([_fragment(f"c{n}", b'{"pin": "' + CANARY + b'"}') for n in range(50)])
        await log.append([_fragment("other", b"{}")])
        assert _found(path)
        for n in range(50):
            await log.redact(f"{_key(f'c{n}').response_ref.stream}c{n}", 1)
        assert await log.erased()
        assert not _found(path)
        assert (path.parent / f"{path.name}-wal").stat().st_size == 0
        return log


async def test_redacted_bytes_are_in_no_file_of_the_log_once_erased(tmp_path: Path) -> None:
    """After redactions and their erasure, neither the database file (its free space zeroed)
    nor its write-ahead log (checkpointed and truncated) holds a byte of what was redacted."""
    path = tmp_path / "log.db"
    await _written_and_redacted(path)
    assert not _found(path)


async def test_without_secure_delete_the_free_space_would_keep_them(tmp_path: Path) -> None:
    """The check above can see the bytes: with SQLite's default (no secure delete) and the
    write-ahead log checkpointed, the rewritten rows' old cells stay in the file."""
    path = tmp_path / "log.db"
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA secure_delete = OFF")
        connection.execute("CREATE TABLE t (payload BLOB)")
        connection.execute("INSERT INTO t VALUES (?)", (b"x" * 100 + CANARY + b"x" * 100,))
        connection.commit()
        connection.execute("UPDATE t SET payload = ?", (b"redacted",))
        connection.commit()
    assert _found(path) == ["log.db"]


async def test_a_reader_holding_the_write_ahead_log_delays_erasure_and_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """While another connection reads an older state, the truncation waits (tried again, then
    reported once, as a storage problem too); it happens once the reader lets go."""
    path = tmp_path / "log.db"
    async with SQLiteLog.open(path, erase_timeout=0.2) as log:
        await log.append([_fragment("c", b'{"pin": "' + CANARY + b'"}')])
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()
        with caplog.at_level(logging.WARNING, logger="inert.log"):
            await log.redact(f"{_key('c').response_ref.stream}c", 1)
            assert not await log.erased()
        assert "redacted bytes stay in" in caplog.text
        assert any("redacted bytes stay in" in p for p in await log.storage_problems())
        assert "log.db-wal" in _found(path)
        reader.execute("COMMIT")
        reader.close()
        with trio.fail_after(5):
            # Polled: nothing tells this process when another connection lets go. The file
            # is clean a moment before the eraser, back from its worker thread, says so.
            while _found(path) or not await log.erased():  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert not [p for p in await log.storage_problems() if "redacted" in p]


_UNCLEAN = """
import os, sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA journal_mode = WAL")
connection.execute("PRAGMA wal_autocheckpoint = 0")
connection.execute("PRAGMA secure_delete = ON")
update = "UPDATE events SET payload = {} WHERE position = 1"
connection.execute(update.format("payload || ?"), (sys.argv[2].encode(),))
connection.execute(update.format("substr(payload, 1, 1)"))
os._exit(0)
"""


async def test_a_log_opened_after_an_unclean_stop_erases_its_write_ahead_log_first(
    tmp_path: Path,
) -> None:
    """A process that stopped without closing leaves frames of rewritten rows in the
    write-ahead log; the next open checkpoints and truncates it before anything else."""
    path = tmp_path / "log.db"
    async with SQLiteLog.open(path) as log:
        await log.append([_fragment("c", b"{}")])
    with trio.fail_after(30):
        await trio.run_process([sys.executable, "-c", _UNCLEAN, str(path), CANARY.decode()])
    assert "log.db-wal" in _found(path)
    async with SQLiteLog.open(path):
        assert not _found(path)
