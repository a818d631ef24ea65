"""The log contract (``inert.testing.contracts.LogContract``) against every backend inert ships,
in each of its configurations."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import attrs
import pytest
from postgres_support import drop_schema, new_schema, server_url

from inert import Log
from inert.log import MemoryLog, MemoryStore, PostgresLog, SQLiteLog
from inert.testing.contracts import LogContract, OpenLog, TickingClock


@attrs.define
class Backend:
    name: str
    open: OpenLog
    cleanup: Callable[[], None] | None = None


def _memory(_: Path) -> Backend:
    store = MemoryStore()
    clock = TickingClock()

    @asynccontextmanager
    async def open_memory() -> AsyncIterator[Log]:
        log = MemoryLog(store, clock=clock)
        try:
            yield log
        finally:
            await log.aclose()

    return Backend("memory", open_memory)


def _memory_partition(_: Path) -> Backend:
    """Partition 2 of a memory log of three partitions of calls."""
    store = MemoryStore(partitions=3)
    clock = TickingClock()

    @asynccontextmanager
    async def open_partition() -> AsyncIterator[Log]:
        log = MemoryLog(store, clock=clock)
        try:
            yield log.partition(2)
        finally:
            await log.aclose()

    return Backend("memory-partition", open_partition)


def _sqlite(**options: object) -> Callable[[Path], Backend]:
    def make(tmp_path: Path) -> Backend:
        clock = TickingClock()

        def open_sqlite() -> AbstractAsyncContextManager[Log]:
            return SQLiteLog.open(tmp_path / "log.db", clock=clock, **options)  # type: ignore[arg-type]

        return Backend("sqlite", open_sqlite)

    return make


def _postgres(**options: object) -> Callable[[Path], Backend]:
    def make(_: Path) -> Backend:
        clock = TickingClock()
        schema = new_schema()

        def open_postgres() -> AbstractAsyncContextManager[Log]:
            return PostgresLog.open(server_url(), schema=schema, clock=clock, **options)  # type: ignore[arg-type]

        return Backend("postgresql", open_postgres, lambda: drop_schema(schema))

    return make


def _postgres_partition(number: int, **options: object) -> Callable[[Path], Backend]:
    """Partition ``number`` of a PostgreSQL log of four partitions of calls (0: its control
    partition)."""

    def make(_: Path) -> Backend:
        clock = TickingClock()
        schema = new_schema()

        @asynccontextmanager
        async def open_partition() -> AsyncIterator[Log]:
            async with PostgresLog.open(
                server_url(),
                schema=schema,
                clock=clock,
                partitions=4,
                **options,  # type: ignore[arg-type]
            ) as log:
                yield log.partition(number)

        return Backend("postgresql-partition", open_partition, lambda: drop_schema(schema))

    return make


BACKENDS: dict[str, Callable[[Path], Backend]] = {
    "memory": _memory,
    "sqlite": _sqlite(),
    "sqlite-normal": _sqlite(synchronous="NORMAL"),
    "sqlite-no-group-commit": _sqlite(group_commit=False),
    "sqlite-tiny-groups": _sqlite(max_batch_events=3, stream_cache_size=2),
    "postgresql": _postgres(),
    "postgresql-tiny-groups": _postgres(max_batch_events=3),
    "memory-partition": _memory_partition,
    "postgresql-control-partition": _postgres_partition(0),
    "postgresql-partition": _postgres_partition(3),
    "postgresql-partition-tiny-groups": _postgres_partition(2, max_batch_events=3),
}


class TestLogContract(LogContract):
    """Every backend inert ships keeps the log contract."""

    @pytest.fixture(params=sorted(BACKENDS))
    def open_log(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenLog]:
        made = BACKENDS[request.param](tmp_path)
        try:
            yield made.open
        finally:
            if made.cleanup is not None:
                made.cleanup()
