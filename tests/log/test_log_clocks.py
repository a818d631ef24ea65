"""The log's clock when its writers' clocks are wrong: ahead, behind, fast, slow, jumping.

On PostgreSQL the log's clock is the server's: every stamp is the server's time, whatever the
appending process's clock says, and ``Log.now`` follows the server within a round trip once an
append (or the opening) has measured it. On a log without a server (memory, SQLite) the log's
clock is its writers' own, but never goes back: a writer whose clock is behind stamps no earlier
than the last stamp.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from postgres_support import connect, fresh_schema, server_url

from inert import ArgumentsAppended, CallKey
from inert.log import Log, MemoryLog, MemoryStore, NewEvent, PostgresLog, SQLiteLog
from inert.testing import SkewedClock

KEY = CallKey(tenant="acme", conversation="c1", turn="t1", response="r1", item="i1", call="c1")
TEN_MINUTES = 600.0
ROUND_TRIP = timedelta(seconds=1)
"""Far more than a round trip to the local server takes, far less than any skew tried."""

OpenLog = Callable[[Callable[[], datetime]], AbstractAsyncContextManager[Log]]


def event(data: bytes) -> NewEvent:
    return NewEvent(stream="s", event=ArgumentsAppended(key=KEY, data=data))


def clocks() -> dict[str, SkewedClock]:
    """A clock ten minutes ahead and running fast, and one ten minutes behind running slow."""
    return {
        "ahead": SkewedClock(offset=TEN_MINUTES, rate=2.0, base=_wall),
        "behind": SkewedClock(offset=-TEN_MINUTES, rate=0.5, base=_wall),
    }


def _wall() -> datetime:
    return datetime.now(UTC)


@pytest.fixture(params=["memory", "sqlite"])
def serverless(request: pytest.FixtureRequest, tmp_path: Path) -> OpenLog:
    """Logs of one storage, each opened with the clock given: memory or SQLite."""
    if request.param == "memory":
        store = MemoryStore()

        @asynccontextmanager
        async def on_memory(clock: Callable[[], datetime]) -> AsyncIterator[Log]:
            log = MemoryLog(store, clock=clock)
            try:
                yield log
            finally:
                await log.aclose()

        return on_memory
    return lambda clock: SQLiteLog.open(tmp_path / "log.db", clock=clock)


async def stamps(log: Log) -> list[datetime]:
    return [recorded.recorded_at for recorded in await log.read()]


async def test_a_serverless_log_never_stamps_back(serverless: OpenLog) -> None:
    """A writer whose clock is behind, or jumps back, stamps no earlier than the last stamp;
    a writer whose clock is ahead stamps its own time."""
    skewed = clocks()
    async with serverless(skewed["ahead"]) as ahead, serverless(skewed["behind"]) as behind:
        await ahead.append([event(b"a")])
        await behind.append([event(b"b")])
        await ahead.append([event(b"c")])
        skewed["ahead"].jump(-3 * TEN_MINUTES)
        await ahead.append([event(b"d")])
        skewed["ahead"].jump(6 * TEN_MINUTES)
        await ahead.append([event(b"e")])
        times = await stamps(ahead)
    assert times == sorted(times)
    assert times[1] == times[0]
    assert times[3] == times[2]
    assert times[4] > _wall() + timedelta(minutes=30)


async def test_a_serverless_writer_behind_goes_on_from_the_logs_time(serverless: OpenLog) -> None:
    """A writer whose clock is behind the log's, once it found out by appending, tells and
    stamps the log's time as it goes on: its stamps advance instead of standing still."""
    skewed = clocks()
    async with serverless(skewed["ahead"]) as ahead, serverless(skewed["behind"]) as behind:
        await ahead.append([event(b"a")])
        assert behind.now() < _wall()
        await behind.append([event(b"b")])
        assert behind.now() > _wall() + timedelta(minutes=9)
        await trio.sleep(0.05)
        await behind.append([event(b"c")])
        times = await stamps(behind)
    assert times[0] == times[1] < times[2]


async def test_postgresql_stamps_the_servers_time_whatever_the_writers_clock() -> None:
    """Writers ten minutes ahead and running fast, ten minutes behind and running slow, and
    one whose clock jumps both ways, stamp the server's time; each one's ``now`` is the
    server's within a round trip after it appended."""
    skewed = clocks()
    with fresh_schema() as schema:
        async with (
            PostgresLog.open(server_url(), schema=schema, clock=skewed["ahead"]) as ahead,
            PostgresLog.open(server_url(), schema=schema, clock=skewed["behind"]) as behind,
        ):
            written: list[tuple[datetime, datetime]] = []
            for index in range(6):
                writer = ahead if index % 2 else behind
                if index == 2:
                    skewed["ahead"].jump(-3 * TEN_MINUTES)
                if index == 4:
                    skewed["behind"].jump(3 * TEN_MINUTES)
                before = _wall()
                await writer.append([event(bytes([index]))])
                after = _wall()
                written.append((before, after))
                assert abs(writer.now() - _wall()) < ROUND_TRIP
            times = await stamps(ahead)
    assert times == sorted(times)
    for stamp, (before, after) in zip(times, written, strict=True):
        # The server runs on this machine: its clock is the test's.
        assert before - ROUND_TRIP <= stamp <= after + ROUND_TRIP


async def test_postgresql_now_follows_the_server_from_the_opening() -> None:
    """A log opened by a process whose clock is ten minutes behind tells the server's time
    before it appends anything, and again after its clock jumped, once it appended."""
    clock = SkewedClock(offset=-TEN_MINUTES, base=_wall)
    with fresh_schema() as schema:
        async with PostgresLog.open(server_url(), schema=schema, clock=clock) as log:
            assert abs(log.now() - _wall()) < ROUND_TRIP
            partition = log.partition(0)
            assert abs(partition.now() - _wall()) < ROUND_TRIP
            clock.jump(2 * TEN_MINUTES)
            await log.append([event(b"a")])
            assert abs(log.now() - _wall()) < ROUND_TRIP


async def test_postgresql_never_stamps_before_the_last_stamp() -> None:
    """A server whose clock is now behind the log's last stamp (set back, or a standby promoted
    whose clock is behind the old primary's) stamps a new append no earlier than it."""
    with fresh_schema() as schema:
        async with PostgresLog.open(server_url(), schema=schema) as log:
            await log.append([event(b"a")])
            ahead = 3_600_000_000
            with connect() as connection:
                # As the old primary's clock stamped it: an hour ahead of this server's.
                connection.execute(
                    f"UPDATE {schema}.events SET recorded_at = recorded_at + %s", (ahead,)
                )
                [(first,)] = connection.execute(
                    f"SELECT recorded_at FROM {schema}.events"
                ).fetchall()
            await log.append([event(b"b")])
            assert abs(log.now() - _wall()) < ROUND_TRIP
        with connect() as connection:
            stamps = [
                stamp
                for (stamp,) in connection.execute(
                    f"SELECT recorded_at FROM {schema}.events ORDER BY position"
                )
            ]
    assert stamps == [first, first]
