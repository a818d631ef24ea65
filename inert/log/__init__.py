"""The log: one ordered record of every fact, its contract and its backends (in memory,
SQLite, PostgreSQL), opened by URL.

Imports only ``inert.events``, the standard library and the drivers of its backends.
"""

from typing import TYPE_CHECKING

from ._log import Log, MemoryLog, MemoryStore, Subscription
from ._records import NO_STREAM, NewEvent, new_event_id
from ._snapshots import SnapshotPayload, StoredSnapshot
from ._sqlite import SQLiteLog
from ._url import open_log

__all__ = [
    "NO_STREAM",
    "Log",
    "MemoryLog",
    "MemoryStore",
    "NewEvent",
    "SQLiteLog",
    "SnapshotPayload",
    "StoredSnapshot",
    "Subscription",
    "new_event_id",
    "open_log",
]

if TYPE_CHECKING:
    from ._postgres import PostgresLog as PostgresLog


def __getattr__(name: str) -> object:
    """``PostgresLog`` on first use: psycopg is an optional dependency (the ``postgresql``
    extra), so that ``import inert`` works without it."""
    if name == "PostgresLog":
        from ._postgres import PostgresLog  # noqa: PLC0415

        return PostgresLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
