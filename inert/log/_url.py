"""Opening a log by URL: ``memory://``, ``memory://NAME``, ``sqlite:///PATH`` and
``postgresql://USER@HOST:PORT/DATABASE`` (or ``postgres://``, as libpq spells it too).

``sqlite:///inert.db`` names a file relative to the working directory and
``sqlite:////var/lib/inert.db`` an absolute one (three slashes, then the path). Options go in
the query: ``?synchronous=NORMAL``, ``group_commit=off``, ``max_batch_events=1024``,
``poll_interval=0.5``, ``erase_timeout=10``. ``memory://NAME`` reopens the same in-process store
under one name, so a test can close and reopen it; ``memory://`` is a fresh store every time. A
percent-escape in an SQLite path that is not UTF-8 (``%FF``) names that byte, as a file name the
shell passes.

``open_log(url, create=False)`` opens only a log that exists: a missing or empty SQLite file, or
a PostgreSQL schema without inert's tables, is a ``LogNotFound`` rather than a new log (a
command that reads must not leave a file behind where a path was mistyped, nor a command that
acts write into a new, empty log where a schema was). A memory log always exists.

A ``postgresql://`` URL is a libpq connection URL; its query takes ``schema=NAME`` (the schema
the log's tables live in, ``inert`` by default), ``group_commit``, ``max_batch_events``,
``poll_interval`` and ``redaction_linger``, and passes every other parameter (``sslmode``,
``connect_timeout``...) to libpq. Several hosts are written as libpq takes them,
``postgresql://USER@HOST1:PORT1,HOST2:PORT2/DATABASE?target_session_attrs=read-write``: every
connection the log opens, again after one is lost, goes to whichever of them takes writes now.

``partitions=N`` (in a PostgreSQL or memory URL, or ``open_log(partitions=N)``) creates a log of
``N`` partitions of calls (see :mod:`._partitions`); an existing log opens with the number it was
created with, and one that names another is refused. SQLite logs have one partition.
"""

from __future__ import annotations

import math
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode, urlsplit

from ..events._codec import Codec
from ..events._errors import ConfigurationError, LogError, LogNotFound
from ._log import Clock, Log, MemoryLog, MemoryStore
from ._partitions import check_partitions
from ._sqlite import SQLiteLog

_NAMED_MEMORY_STORES: dict[str, MemoryStore] = {}
_SQLITE_OPTIONS = {
    "synchronous",
    "group_commit",
    "max_batch_events",
    "poll_interval",
    "erase_timeout",
}
_POSTGRES_OPTIONS = {
    "schema",
    "group_commit",
    "max_batch_events",
    "poll_interval",
    "erase_timeout",
    "redaction_linger",
    "partitions",
}


def _flag(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "on", "yes"):
        return True
    if lowered in ("0", "false", "off", "no"):
        return False
    raise ConfigurationError(f"log URL option {name}={value!r} must be on or off")


def _number(name: str, value: str, kind: type[int] | type[float]) -> int | float:
    noun = "an integer" if kind is int else "a finite number"
    try:
        number = kind(value)
    except ValueError:
        raise ConfigurationError(f"log URL option {name}={value!r} must be {noun}") from None
    if not math.isfinite(number):
        raise ConfigurationError(f"log URL option {name}={value!r} must be {noun}")
    return number


@asynccontextmanager
async def _open_postgres(
    parts: SplitResult,
    options: dict[str, str],
    *,
    codec: Codec | None,
    clock: Clock | None,
    create: bool,
    partitions: int | None,
) -> AsyncIterator[Log]:
    try:
        # psycopg is an optional dependency (the postgresql extra): imported only when used.
        from ._postgres import PostgresLog  # noqa: PLC0415
    except ImportError as error:
        raise ConfigurationError(
            f"PostgreSQL logs need psycopg ({error}): install inert[postgresql]"
        ) from None
    # The log's own options leave the URL; libpq gets the rest, password included.
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    conninfo = parts._replace(
        query=urlencode([(k, v) for k, v in pairs if k not in _POSTGRES_OPTIONS], quote_via=quote)
    ).geturl()
    settings: dict[str, Any] = {}
    if "schema" in options:
        settings["schema"] = options["schema"]
    if "group_commit" in options:
        settings["group_commit"] = _flag("group_commit", options["group_commit"])
    if "max_batch_events" in options:
        settings["max_batch_events"] = _number("max_batch_events", options["max_batch_events"], int)
    if "poll_interval" in options:
        settings["poll_interval"] = _number("poll_interval", options["poll_interval"], float)
    if "erase_timeout" in options:
        settings["erase_timeout"] = _number("erase_timeout", options["erase_timeout"], float)
    if "redaction_linger" in options:
        settings["redaction_linger"] = _number(
            "redaction_linger", options["redaction_linger"], float
        )
    async with PostgresLog.open(
        conninfo, **settings, codec=codec, clock=clock, create=create, partitions=partitions
    ) as log:
        yield log


def _check_sqlite_path(path: str, *, create: bool) -> None:
    """Refuse a directory; without ``create``, a path that holds no SQLite log yet: missing, or
    an empty file (whose log would be in a write-ahead log beside it, were there one)."""
    if "\0" in path:
        return  # SQLiteLog names that problem.
    if os.path.isdir(path):
        raise LogError(f"SQLite log path {path!r} is a directory, not a log file")
    if create:
        return
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise LogNotFound(
            f"no SQLite log at {path!r}: the file does not exist; check the path"
        ) from None
    except OSError as error:
        raise LogError(f"cannot open SQLite log {path!r}: {error.strerror}") from None
    if size == 0 and not os.path.exists(path + "-wal"):
        raise LogNotFound(f"no SQLite log at {path!r}: the file is empty; check the path")


def _partitions_asked(options: dict[str, str], partitions: int | None) -> int | None:
    """The partitions a URL's options and ``open_log``'s argument ask for, if they agree."""
    named = options.pop("partitions", None)
    if named is None:
        return None if partitions is None else check_partitions(partitions)
    number = check_partitions(int(_number("partitions", named, int)))
    if partitions is not None and partitions != number:
        raise ConfigurationError(
            f"the log URL asks for partitions={number} and the caller for {partitions}"
        )
    return number


@asynccontextmanager
async def open_log(
    url: str,
    *,
    codec: Codec | None = None,
    clock: Clock | None = None,
    create: bool = True,
    partitions: int | None = None,
) -> AsyncIterator[Log]:
    """Open the log a URL names; it is closed when the block ends. Without ``create``, an
    SQLite file or a PostgreSQL schema must hold a log already (``LogNotFound``). A log created
    here has ``partitions`` partitions of calls (or the URL's ``partitions=N``; 1 if neither)."""
    try:
        parts = urlsplit(url)
    except ValueError as error:
        # urlsplit's own words ("Invalid IPv6 URL") name neither the URL nor the option.
        raise ConfigurationError(f"log URL {url!r} cannot be read: {error}") from None
    options = dict(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False))
    asked = _partitions_asked(options, partitions)
    if parts.scheme == "memory":
        if options:
            raise ConfigurationError(
                f"memory logs take no options but partitions, got {sorted(options)}"
            )
        name = parts.netloc + parts.path
        store = (
            _NAMED_MEMORY_STORES.setdefault(name, MemoryStore(partitions=asked or 1))
            if name
            else MemoryStore(partitions=asked or 1)
        )
        if asked not in (None, store.partitions):
            raise ConfigurationError(
                f"memory log {name!r} has {store.partitions} partitions, not {asked}"
            )
        log = MemoryLog(store, codec=codec, clock=clock)
        try:
            yield log
        finally:
            await log.aclose()
    elif parts.scheme == "sqlite":
        if parts.netloc:
            raise ConfigurationError(
                f"SQLite URL {url!r} has a host; write sqlite:///relative.db or"
                " sqlite:////absolute/path.db"
            )
        path = (
            unquote(parts.path[1:], errors="surrogateescape") if parts.path.startswith("/") else ""
        )
        if not path:
            raise ConfigurationError(f"SQLite URL {url!r} names no file")
        if asked not in (None, 1):
            raise ConfigurationError(
                f"SQLite logs have one partition, not {asked}: a partitioned log needs PostgreSQL"
            )
        unknown = options.keys() - _SQLITE_OPTIONS
        if unknown:
            raise ConfigurationError(
                f"unknown SQLite log options {sorted(unknown)}; known: {sorted(_SQLITE_OPTIONS)}"
            )
        # Only the options the URL names are passed on: SQLiteLog's own defaults and range
        # checks stay the one place they are written.
        settings: dict[str, Any] = {}
        if "synchronous" in options:
            settings["synchronous"] = options["synchronous"].upper()
        if "group_commit" in options:
            settings["group_commit"] = _flag("group_commit", options["group_commit"])
        if "max_batch_events" in options:
            settings["max_batch_events"] = _number(
                "max_batch_events", options["max_batch_events"], int
            )
        if "poll_interval" in options:
            settings["poll_interval"] = _number("poll_interval", options["poll_interval"], float)
        if "erase_timeout" in options:
            settings["erase_timeout"] = _number("erase_timeout", options["erase_timeout"], float)
        _check_sqlite_path(path, create=create)
        async with SQLiteLog.open(
            path,
            **settings,
            codec=codec,
            clock=clock,
        ) as sqlite_log:
            yield sqlite_log
    elif parts.scheme in ("postgresql", "postgres"):
        async with _open_postgres(
            parts, options, codec=codec, clock=clock, create=create, partitions=asked
        ) as postgres_log:
            yield postgres_log
    else:
        raise ConfigurationError(
            f"unknown log URL {url!r}: use memory://, memory://NAME,"
            " sqlite:///PATH or postgresql://USER@HOST:PORT/DATABASE (postgres:// too)"
        )
