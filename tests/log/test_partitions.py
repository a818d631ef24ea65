"""Partitioned logs: where a conversation lives, and partitions that share nothing on the append
path (their own positions, streams, event ids, snapshots and head locks)."""

from __future__ import annotations

import collections
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import trio
from postgres_support import connect, fresh_schema, log_url, server_url

from inert import ArgumentsAppended, CallKey, ConfigurationError, LogError, open_log, open_runtime
from inert.log import Log, MemoryLog, MemoryStore, NewEvent, PostgresLog, StoredSnapshot
from inert.log._partitions import MAX_PARTITIONS, PARTITION_HASH, partition_of

KEY = CallKey(tenant="t", conversation="c", turn="1", response="r", item="i", call="x")

OpenPartitioned = Callable[[int], AbstractAsyncContextManager[Log]]


def new(event_id: str, stream: str = "s", data: bytes = b"{}") -> NewEvent:
    return NewEvent(stream=stream, event_id=event_id, event=ArgumentsAppended(key=KEY, data=data))


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


@pytest.fixture(params=["memory", "postgresql"])
def open_partitioned(request: pytest.FixtureRequest) -> Iterator[OpenPartitioned]:
    """Opens one log of the given number of partitions, the same each time in a test."""
    if request.param == "memory":
        stores: dict[int, MemoryStore] = {}

        @asynccontextmanager
        async def open_memory(partitions: int) -> AsyncIterator[Log]:
            store = stores.setdefault(partitions, MemoryStore(partitions=partitions))
            log = MemoryLog(store)
            try:
                yield log
            finally:
                await log.aclose()

        yield open_memory
        return
    with fresh_schema() as name:
        yield lambda partitions: PostgresLog.open(server_url(), schema=name, partitions=partitions)


# --- where a conversation lives ----------------------------------------------------------


def test_a_conversation_is_placed_by_the_rule_written_down() -> None:
    """The partition of a conversation is 1 + the first 8 bytes of SHA-256 of
    ``len(tenant):tenant/conversation`` modulo P, as the docs say: values fixed here so that no
    change of code moves a conversation."""
    assert PARTITION_HASH == "sha256-tenant-conversation-v1"
    assert partition_of("acme", "c1", 1) == 0
    assert partition_of("acme", "c1", 64) == 30
    assert partition_of("acme", "c2", 64) == 62
    assert partition_of("a", "b/c", 64) != partition_of("a/b", "c", 64)


def test_conversations_spread_evenly_over_the_partitions() -> None:
    """10,000 conversations fill each of 16 partitions within 15% of an even share."""
    counts = collections.Counter(partition_of("acme", f"conv-{n}", 16) for n in range(10_000))
    assert sorted(counts) == list(range(1, 17))
    assert max(counts.values()) < 625 * 1.15
    assert min(counts.values()) > 625 * 0.85


async def test_a_partition_outside_the_log_is_refused() -> None:
    """Asking a log for a partition it does not have names the partitions it has."""
    log = MemoryLog(MemoryStore(partitions=4))
    assert log.call_partitions() == range(1, 5)
    with pytest.raises(LogError, match="no partition 5: its partitions are 0 to 4"):
        log.partition(5)
    one = MemoryLog()
    assert one.partition(0) is one
    assert one.call_partitions() == range(1)
    with pytest.raises(LogError, match="no partition 1"):
        one.partition(1)


@pytest.mark.parametrize("partitions", [0, -1, MAX_PARTITIONS + 1, True])
def test_a_number_of_partitions_out_of_range_is_refused(partitions: int) -> None:
    """A log cannot be made with no partitions, a negative number or more than the limit."""
    with pytest.raises(ConfigurationError, match="partitions must be"):
        MemoryStore(partitions=partitions)


async def test_an_sqlite_log_of_several_partitions_is_refused(tmp_path: object) -> None:
    """SQLite logs hold one partition: asking for more says PostgreSQL is needed."""
    with pytest.raises(ConfigurationError, match="SQLite logs have one partition, not 4"):
        async with open_log(f"sqlite:///{tmp_path}/log.db?partitions=4"):
            pass


# --- partitions are logs of their own ----------------------------------------------------


async def test_each_partition_has_its_own_positions_streams_and_event_ids(
    open_partitioned: OpenPartitioned,
) -> None:
    """The same stream name and the same event id in two partitions are two streams and two
    events; each partition's positions start at 1; a read of one never holds the other's."""
    async with open_partitioned(3) as log:
        one, two = log.partition(1), log.partition(2)
        assert await one.append([new("a"), new("b")]) == [1, 2]
        assert await two.append([new("a", data=b'{"x": 2}')]) == [1]
        assert await log.append([new("control")]) == [1]
        assert [e.event_id for e in await one.read()] == ["a", "b"]
        assert [(e.event_id, e.version) for e in await two.read_stream("s")] == [("a", 1)]
        assert await one.stream_version("s") == 2
        assert await two.head() == 1
        assert await log.partition(3).head() == 0
        assert [e.event_id for e in await log.read()] == ["control"]
    async with open_partitioned(3) as log:
        assert log.partitions == 3
        assert [e.event_id for e in await log.partition(1).read()] == ["a", "b"]
        assert await log.partition(2).storage_problems() == []


async def test_snapshots_and_redactions_stay_in_their_partition(
    open_partitioned: OpenPartitioned,
) -> None:
    """A snapshot of one name in two partitions is two snapshots; redacting a stream of one
    partition leaves the stream of the same name in another as it was."""
    async with open_partitioned(2) as log:
        one, two = log.partition(1), log.partition(2)
        for number, partition in ((1, one), (2, two)):
            await partition.append([new(f"e{number}")])
            await partition.write_snapshot(
                StoredSnapshot(name="n", position=1, stamp=f"s{number}", state=b"", payloads=())
            )
        assert await one.redact("s", 1) == 1
        assert (await two.read())[0].event == ArgumentsAppended(key=KEY, data=b"{}")
        snapshots = [await partition.read_snapshot("n") for partition in (one, two)]
        assert [snapshot.stamp for snapshot in snapshots if snapshot] == ["s1", "s2"]


async def _follow(log: Log, count: int, seen: list[str]) -> None:
    async for recorded in log.subscribe():
        seen.append(recorded.event_id)
        if len(seen) == count:
            return


async def test_a_subscription_of_a_partition_yields_its_appends_alone(
    open_partitioned: OpenPartitioned,
) -> None:
    """A subscription of a partition yields what is appended to it as it lands, and nothing
    of the other partitions."""
    async with open_partitioned(2) as log:
        seen: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_follow, log.partition(2), 2, seen)
            await log.partition(1).append([new("elsewhere")])
            await log.append([new("control")])
            await log.partition(2).append([new("first")])
            await log.partition(2).append([new("second")])
        assert seen == ["first", "second"]


async def test_a_subscription_of_a_partition_sees_another_processes_appends(
    schema: str,
) -> None:
    """A subscription of a partition of a PostgreSQL log yields what another log (another
    process) appends to it, found by the log's poll of every partition's head (a partition of
    calls sends no notification)."""
    async with (
        PostgresLog.open(server_url(), schema=schema, partitions=2, poll_interval=0.2) as reader,
        PostgresLog.open(server_url(), schema=schema, partitions=2) as writer,
    ):
        seen: list[str] = []
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_follow, reader.partition(2), 2, seen)
                await writer.partition(1).append([new("elsewhere")])
                await writer.partition(2).append([new("first")])
                await writer.partition(2).append([new("second")])
        assert seen == ["first", "second"]


async def test_concurrent_appends_to_many_partitions_keep_each_gap_free(
    open_partitioned: OpenPartitioned,
) -> None:
    """Appends racing over every partition from two logs leave each partition's positions
    gap-free and its streams' versions whole."""
    async with open_partitioned(4) as first, open_partitioned(4) as second:

        async def append(log: Log, number: int, writer: str) -> None:
            for batch in range(10):
                await log.partition(number).append(
                    [new(f"{writer}-{batch}-{n}", stream=f"s{n % 2}") for n in range(3)]
                )

        async with trio.open_nursery() as nursery:
            for number in first.call_partitions():
                nursery.start_soon(append, first, number, "a")
                nursery.start_soon(append, second, number, "b")
        for number in first.call_partitions():
            events = await first.partition(number).read()
            assert [e.position for e in events] == list(range(1, 61))
            assert await first.partition(number).storage_problems() == []


# --- PostgreSQL: the partition count is the log's, and no lock is shared ------------------


async def test_a_postgres_log_keeps_the_partitions_it_was_created_with(schema: str) -> None:
    """A log created with 8 partitions (by the URL) opens with 8 without being told, and one
    that asks for another number is refused, naming both."""
    async with open_log(log_url(schema, partitions=8)) as log:
        assert log.partitions == 8
    async with open_log(log_url(schema)) as log:
        assert log.partitions == 8
    with pytest.raises(ConfigurationError, match="holds a log of 8 partitions, not 4"):
        async with open_log(log_url(schema), partitions=4):
            pass
    with fresh_schema() as other:
        async with open_log(log_url(other)) as log:
            assert log.partitions == 1
        with pytest.raises(ConfigurationError, match="holds a log of 1 partition, not 16"):
            async with open_log(log_url(other, partitions=16)):
                pass


@asynccontextmanager
async def held(take: Callable[[Any], object]) -> AsyncIterator[Callable[[], None]]:
    """A transaction of another session that has taken what ``take`` takes, open until the
    function yielded is called (or the block ends)."""
    taken = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with connect() as connection, connection.transaction():
            take(connection)
            taken.set()
            release.wait(10)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, hold)
        await trio.to_thread.run_sync(taken.wait, 10)
        try:
            yield release.set
        finally:
            release.set()


async def _waits(nursery: trio.Nursery, step: Callable[[], Awaitable[object]]) -> list[object]:
    """Start ``step``; what it returned, once it has (empty after 0.3 s while it waits)."""
    done: list[object] = []

    async def run() -> None:
        done.append(await step())

    nursery.start_soon(run)
    await trio.sleep(0.3)
    return done


async def test_an_append_to_one_partition_takes_no_lock_of_another(schema: str) -> None:
    """While a transaction holds the head of partition 1, appends to partition 2 and to the
    control partition commit; an append to partition 1 waits for it."""
    async with PostgresLog.open(server_url(), schema=schema, partitions=2) as log:
        await log.partition(1).append([new("first")])
        heads = f"SELECT position FROM {schema}.heads WHERE partition = 1 FOR UPDATE"
        async with (
            trio.open_nursery() as nursery,
            held(lambda connection: connection.execute(heads)) as release,
        ):
            with trio.fail_after(5):
                assert await log.partition(2).append([new("beside")]) == [1]
                assert await log.append([new("control")]) == [1]
            blocked = await _waits(nursery, lambda: log.partition(1).append([new("after")]))
            assert blocked == []
            release()
        assert blocked == [[2]]


async def test_redactions_and_snapshots_of_one_partition_wait_for_no_other(schema: str) -> None:
    """While a transaction holds the lock that redactions and snapshot writes of partition 1
    share, a redaction and a snapshot write in partition 2 go through; a redaction in
    partition 1 waits for it."""
    async with PostgresLog.open(server_url(), schema=schema, partitions=2) as log:
        for number in (1, 2):
            await log.partition(number).append([new(f"e{number}")])
        async with (
            trio.open_nursery() as nursery,
            held(lambda connection: log._lock_snapshots(connection, [1])) as release,
        ):
            with trio.fail_after(5):
                assert await log.partition(2).redact("s", 1) == 1
                await log.partition(2).write_snapshot(
                    StoredSnapshot(name="n", position=1, stamp="s2", state=b"", payloads=())
                )
            redacted = await _waits(nursery, lambda: log.partition(1).redact("s", 1))
            assert redacted == []
            release()
        assert redacted == [1]


async def test_open_runtime_sends_a_partitioned_log_to_open_partitioned_runtime() -> None:
    """``open_runtime`` folds a log whole: on a partitioned log it says which function folds
    the partitions a process takes."""
    with pytest.raises(ConfigurationError, match="4 partitions of calls: open it with"):
        async with open_runtime(log="memory://?partitions=4", tools=[]):
            pass


async def test_redactions_falling_due_together_share_one_transaction(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redactions of two partitions that fall due within the linger are made in one
    transaction; the linger comes from the log's URL, and a bad one is refused."""
    url = log_url(schema, partitions=2)
    async with open_log(f"{url}&redaction_linger=0.3", create=True) as log:
        assert isinstance(log, PostgresLog)
        assert log.redaction_linger == 0.3
        for number in (1, 2):
            await log.partition(number).append([new(f"e{number}")])
        transactions: list[str] = []
        in_own_transaction = PostgresLog._in_own_transaction

        def counted(self: PostgresLog, what: str, work: Callable[[Any], Any]) -> Any:
            transactions.append(what)
            return in_own_transaction(self, what, work)

        monkeypatch.setattr(PostgresLog, "_in_own_transaction", counted)
        redacted: list[int] = []

        async def redact(number: int) -> None:
            redacted.append(await log.partition(number).redact("s", 1))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(redact, 1)
            await trio.sleep(0.05)
            nursery.start_soon(redact, 2)
        assert (redacted, transactions) == ([1, 1], ["redaction"])
    with pytest.raises(ConfigurationError, match="redaction_linger must be a finite number"):
        async with open_log(f"{url}&redaction_linger=-1"):
            pass
