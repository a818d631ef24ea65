"""The damaged-log corpus: named ways an SQLite log file can be damaged or forged, each with the
position the damage must be found at.

A sibling of ``bad_inputs.py``: those are bad bytes a provider sends, these are bad bytes a disk,
a copy or a hand leaves in the log. Each case changes a sound log (one the demo wrote) with SQL
or by writing the file, and names the row it damaged; ``tests/test_damaged_log_corpus.py``
checks that a read refuses it there, that ``inert verify`` names it, and that a runtime does not
start on it. Cases that damage the storage itself without touching a row's content have no
position: only the backend's own checks (``PRAGMA integrity_check``) can find them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import attrs
from attrs import frozen

from inert.events import DEFAULT_CODEC, CallValidated
from inert.log._records import with_checksum
from inert.log._sqlite import _SELECT

Damage = Callable[[sqlite3.Connection, Path], int | None]
"""Damages the open file; the position of the row it damaged (None: the storage only)."""


@frozen
class DamagedLog:
    name: str
    damage: Damage
    refused_by: str
    """What refuses it: ``checksum``, ``missing``, ``replay`` or ``storage``."""


def _row_of(connection: sqlite3.Connection, event_type: str, nth: int = 0) -> int:
    positions: list[int] = [
        position
        for (position,) in connection.execute(
            "SELECT position FROM events WHERE event_type = ? ORDER BY position", (event_type,)
        )
    ]
    return positions[nth]


def _fragment(connection: sqlite3.Connection) -> int:
    return _row_of(connection, "ingress.arguments_appended", 1)


def _update(sql: str, pick: Callable[[sqlite3.Connection], int] = _fragment) -> Damage:
    def damage(connection: sqlite3.Connection, _: Path) -> int:
        position = pick(connection)
        connection.execute(sql, (position,))
        return position

    return damage


def _flip_a_payload_bit(connection: sqlite3.Connection, _: Path) -> int:
    position = _fragment(connection)
    [(payload,)] = connection.execute("SELECT payload FROM events WHERE position = ?", (position,))
    flipped = bytes([payload[0] ^ 0x01]) + payload[1:]
    connection.execute("UPDATE events SET payload = ? WHERE position = ?", (flipped, position))
    return position


def _swap_payloads(connection: sqlite3.Connection, _: Path) -> int:
    first = _row_of(connection, "ingress.arguments_appended", 0)
    second = _row_of(connection, "ingress.arguments_appended", 1)
    rows = dict(
        connection.execute(
            "SELECT position, payload FROM events WHERE position IN (?, ?)", (first, second)
        ).fetchall()
    )
    for position, other in ((first, second), (second, first)):
        connection.execute(
            "UPDATE events SET payload = ? WHERE position = ?", (rows[other], position)
        )
    return first


def _renumber(connection: sqlite3.Connection, _: Path) -> int:
    position = _fragment(connection)
    connection.execute(
        "UPDATE events SET position = position + 1000000 WHERE position = ?", (position,)
    )
    return position


def _forge_a_decision(connection: sqlite3.Connection, _: Path) -> int:
    """A decision rewritten with a field changed and its checksum made again, as a bug (not a
    disk) would write it: only a replay can tell."""
    position = _row_of(connection, "decision.validated")
    [values] = connection.execute(f"{_SELECT} WHERE e.position = ?", (position,)).fetchall()
    row = with_checksum(values)
    assert row.payload is not None
    event = DEFAULT_CODEC.decode(row.event_type, row.schema_version, row.payload)
    assert isinstance(event, CallValidated)
    payload = DEFAULT_CODEC.encode(attrs.evolve(event, tool_digest="sha256:forged"))[2]
    rewritten = with_checksum(row._replace(payload=payload, payload_length=len(payload)))
    connection.execute(
        "UPDATE events SET payload = ?, payload_length = ?, checksum = ? WHERE position = ?",
        (rewritten.payload, rewritten.payload_length, rewritten.checksum, position),
    )
    return position


def _overwrite_an_index_page(connection: sqlite3.Connection, path: Path) -> None:
    page_size = connection.execute("PRAGMA page_size").fetchone()[0]
    [(root,)] = connection.execute(
        "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_events_1'"
    ).fetchall()
    connection.commit()
    # From the page's first byte: its header and cell pointers, whatever the index's depth
    # (past them an interior page of a few cells has only free space).
    with path.open("r+b") as file:
        file.seek((root - 1) * page_size)
        file.write(b"\xff" * 64)


CASES: list[DamagedLog] = [
    DamagedLog("a payload bit flipped", _flip_a_payload_bit, "checksum"),
    DamagedLog(
        "a payload cut short",
        _update(
            "UPDATE events SET payload = substr(payload, 1, length(payload) / 2) WHERE position = ?"
        ),
        "checksum",
    ),
    DamagedLog(
        "a payload lost", _update("UPDATE events SET payload = NULL WHERE position = ?"), "checksum"
    ),
    DamagedLog(
        "a payload zeroed",
        _update("UPDATE events SET payload = zeroblob(length(payload)) WHERE position = ?"),
        "checksum",
    ),
    DamagedLog(
        "the event type renamed",
        _update("UPDATE events SET event_type = 'ingress.call_ended' WHERE position = ?"),
        "checksum",
    ),
    DamagedLog(
        "the schema version changed",
        _update("UPDATE events SET schema_version = 1 WHERE position = ?"),
        "checksum",
    ),
    DamagedLog(
        "the recorded time moved",
        _update("UPDATE events SET recorded_at = recorded_at - 1 WHERE position = ?"),
        "checksum",
    ),
    DamagedLog(
        "the event id changed",
        _update("UPDATE events SET event_id = event_id || '0' WHERE position = ?"),
        "checksum",
    ),
    DamagedLog(
        "the row moved to another stream",
        _update(
            "UPDATE events SET stream_id = (SELECT min(stream_id) FROM streams) WHERE position = ?",
            lambda connection: _row_of(connection, "decision.validated"),
        ),
        "checksum",
    ),
    DamagedLog(
        "the version changed",
        _update("UPDATE events SET version = version + 1000 WHERE position = ?"),
        "checksum",
    ),
    DamagedLog(
        "the length changed",
        _update("UPDATE events SET payload_length = payload_length + 1 WHERE position = ?"),
        "checksum",
    ),
    DamagedLog(
        "a redaction digest added",
        _update("UPDATE events SET payload_digest = x'00' WHERE position = ?"),
        "checksum",
    ),
    DamagedLog(
        "a trace context added",
        _update(
            "UPDATE events SET traceparent ="
            " '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' WHERE position = ?"
        ),
        "checksum",
    ),
    DamagedLog(
        "the checksum changed",
        _update("UPDATE events SET checksum = checksum + 1 WHERE position = ?"),
        "checksum",
    ),
    DamagedLog("two payloads swapped", _swap_payloads, "checksum"),
    DamagedLog("a row deleted", _update("DELETE FROM events WHERE position = ?"), "missing"),
    DamagedLog("a row renumbered", _renumber, "missing"),
    DamagedLog("a decision forged with its checksum", _forge_a_decision, "replay"),
    DamagedLog("an index page overwritten", _overwrite_an_index_page, "storage"),
]
