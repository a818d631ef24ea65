"""The ledger materialized in PostgreSQL: rows and offset committed together, each event once."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
from postgres_support import connect, fresh_schema, log_url
from test_runtime import PRINCIPAL, TOOLS, call_events, response_end

from inert import (
    ArgumentsAppended,
    CallKey,
    CallOpened,
    ConfigurationError,
    Ledger,
    LedgerMaterializer,
    Log,
    LogError,
    RecordedEvent,
    Runtime,
    TurnRef,
    materialize_ledger,
    open_log,
    open_runtime,
)
from inert.log import MemoryLog
from inert.projections import DEFAULT_LEDGER_HORIZON
from inert.runtime._materialize import COLUMNS

KEY_COLUMNS = ("tenant", "conversation", "turn", "response", "item", "call")
POLL = 0.05
HORIZON = DEFAULT_LEDGER_HORIZON
Rows = dict[tuple[str, ...], dict[str, Any]]


@pytest.fixture
def url() -> Iterator[str]:
    """The URL of a log and its ledger table in a schema of the test's own."""
    with fresh_schema() as schema:
        yield log_url(schema, poll_interval=POLL)


def key_of(turn: str, call: str) -> CallKey:
    return CallKey(
        tenant="acme", conversation=turn, turn=turn, response=f"{turn}-{call}", item=call, call=call
    )


async def workload(runtime: Runtime, first: int, turns: int) -> None:
    """Turns whose calls end every way the ledger shows: completed, failed, awaiting a
    confirmation, still collecting, cancelled with their turn."""
    for number in range(first, first + turns):
        turn = f"t{number}"
        await runtime.start_turn(tenant="acme", conversation=turn, turn=turn, principal=PRINCIPAL)
        ready, email, cut = key_of(turn, "ready"), key_of(turn, "email"), key_of(turn, "cut")
        await runtime.feed(
            [
                *call_events(ready),
                response_end(ready),
                *call_events(email, b'{"to": "bob@example.com"}', tool="send_email", parts=3),
                response_end(email),
                CallOpened(key=cut, tool="get_weather", sequence=0),
                ArgumentsAppended(key=cut, data=b'{"ci', first_sequence=1, last_sequence=1),
            ]
        )
        await runtime.settle()
        dispatch = await runtime.claim(ready, executor="worker")
        if number % 2:
            await runtime.fail(dispatch, "WeatherServiceDown")
        else:
            await runtime.complete(dispatch)
        if number % 3 == 0:
            await runtime.cancel_turn(
                TurnRef(tenant="acme", conversation=turn, turn=turn), principal=PRINCIPAL
            )
        await runtime.settle()


@asynccontextmanager
async def runtime_on(log: Log) -> AsyncIterator[Runtime]:
    async with open_runtime(log=log, tools=TOOLS) as runtime:
        yield runtime


def expected(
    records: list[RecordedEvent], up_to: int | None = None, horizon: timedelta = HORIZON
) -> Rows:
    """The rows a fresh fold gives, each with the position of the last event of its call and
    the number of events of its call."""
    ledger = Ledger(horizon=horizon)
    events: dict[CallKey, int] = {}
    positions: dict[CallKey, int] = {}
    for recorded in records:
        if up_to is not None and recorded.position > up_to:
            break
        ledger.apply(recorded)
        key = getattr(recorded.kept, "key", None)
        if isinstance(key, CallKey):
            events[key] = events.get(key, 0) + 1
            positions[key] = recorded.position
    rows: Rows = {}
    for row in ledger.rows():
        values = dict(row.to_json())
        values["position"] = positions[row.key]
        values["events"] = events[row.key]
        rows[tuple(str(values[column]) for column in KEY_COLUMNS)] = values
    return rows


def schema_of(url: str) -> str:
    return url.split("schema=")[1].split("&", maxsplit=1)[0]


def stored(url: str, table: str = "ledger_rows") -> tuple[int, Rows]:
    """The committed offset and rows of a ledger table (none before it was created)."""
    schema = schema_of(url)
    with connect() as connection:
        exists = connection.execute("SELECT to_regclass(%s)", (f"{schema}.{table}",)).fetchone()
        if exists is None or exists[0] is None:
            return 0, {}
        found = connection.execute(
            f"SELECT position FROM {schema}.inert_offsets WHERE name = %s", (table,)
        ).fetchone()
        names = ", ".join(f'"{column}"' for column in COLUMNS)
        cursor = connection.execute(f"SELECT {names} FROM {schema}.{table}")
        rows: Rows = {}
        for values in cursor.fetchall():
            row = dict(zip(COLUMNS, values, strict=True))
            rows[tuple(row[column] for column in KEY_COLUMNS)] = row
    return (0 if found is None else int(found[0])), rows


async def test_the_table_holds_the_rows_of_a_fresh_fold_after_a_run(url: str) -> None:
    """Batches written while the runtime runs end with the rows, positions and change counts of
    a fresh fold of the whole log, and the offset at its head."""
    async with open_log(url) as log:
        async with (
            materialize_ledger(log, url, max_batch_events=7, poll_interval=POLL) as table,
            runtime_on(log) as runtime,
        ):
            await workload(runtime, 0, 6)
            head = await log.head()
            await table.wait_for(head)
        records = await log.read()
    offset, rows = stored(url)
    assert offset == head
    assert rows == expected(records)
    assert {row.key.call for row in table.ledger.rows()} == {"ready", "email", "cut"}
    assert len(table.ledger.rows()) == len(rows) == 18
    states = {row["state"] for row in rows.values()}
    assert {"dispatched", "validated", "cancelled", "collecting"} <= states
    assert {row["outcome"] for row in rows.values()} >= {"completed", "failed", None}


async def test_a_commit_that_fails_after_the_row_writes_leaves_the_last_commit(url: str) -> None:
    """A batch whose commit fails (after its rows were written) leaves rows and offset as the
    last commit left them; a restart writes the rest, every event counted once."""
    async with open_log(url) as log:
        async with runtime_on(log) as runtime:
            await workload(runtime, 0, 3)
        async with materialize_ledger(log, url, poll_interval=POLL) as table:
            await table.wait_for(await log.head())
        before = stored(url)
        schema = schema_of(url)
        with connect() as connection:
            # Checked at commit, once the batch's rows are written: the commit fails.
            connection.execute(
                f"""
                CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS
                $$ BEGIN RAISE EXCEPTION 'the disk is full'; END $$;
                CREATE CONSTRAINT TRIGGER refuse AFTER UPDATE ON {schema}.inert_offsets
                DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {schema}.refuse();
                """
            )
        async with runtime_on(log) as runtime:
            await workload(runtime, 3, 3)
        head = await log.head()
        with pytest.raises(LogError, match="was not committed: the disk is full"):
            async with materialize_ledger(log, url, poll_interval=POLL) as table:
                await table.wait_for(head)
        assert stored(url) == before
        with connect() as connection:
            connection.execute(f"DROP TRIGGER refuse ON {schema}.inert_offsets")
        async with materialize_ledger(log, url, max_batch_events=5, poll_interval=POLL) as table:
            await table.wait_for(head)
        # Opened again at the head, it has nothing to write and says it is there.
        async with materialize_ledger(log, url, poll_interval=POLL) as table:
            await table.wait_for(head)
            assert table.position == head
        records = await log.read()
    assert stored(url) == (head, expected(records))


CHILD = textwrap.dedent(
    """
    import sys, trio
    from inert import materialize_ledger, open_log

    async def main(url):
        async with open_log(url) as log:
            async with materialize_ledger(log, url, max_batch_events=3, poll_interval=0.05) as m:
                head = await log.head()
                while m.position < head:
                    await m.wait_for(m.position + 1)
                    print(m.position, flush=True)

    trio.run(main, sys.argv[1])
    """
)


def kill_after(url: str, commits: int) -> None:
    """Start a materializing process and SIGKILL it once it has reported ``commits`` commits."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, url], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    for _ in range(commits):
        if not child.stdout.readline():
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()


@pytest.mark.slow
async def test_a_killed_materializer_leaves_a_consistent_table_and_a_restart_converges(
    url: str,
) -> None:
    """SIGKILLs of a materializing process at different points of its run each leave rows that
    equal a fresh fold up to the committed offset; a restart ends with the whole log, once."""
    async with open_log(url) as log:
        async with runtime_on(log) as runtime:
            await workload(runtime, 0, 12)
        head = await log.head()
        records = await log.read()
        offsets: list[int] = []
        for commits in (0, 8, 30):
            await trio.to_thread.run_sync(kill_after, url, commits)
            offset, rows = stored(url)
            assert rows == expected(records, up_to=offset)
            offsets.append(offset)
        assert offsets == sorted(offsets)
        assert offsets[-1] < head
        async with materialize_ledger(log, url, poll_interval=POLL) as table:
            await table.wait_for(head)
    assert stored(url) == (head, expected(records))


async def test_a_second_materializer_waits_and_takes_over_without_applying_twice(
    url: str,
) -> None:
    """Two materializers of one table: the second waits while the first writes, carries on from
    its offset once the first stops, and no event is counted twice."""
    async with open_log(url) as log, runtime_on(log) as runtime:
        await workload(runtime, 0, 2)
        first = LedgerMaterializer(log, url, max_batch_events=4, poll_interval=POLL)
        async with trio.open_nursery() as nursery:
            first_scope = trio.CancelScope()

            async def run_first(task_status: trio.TaskStatus[None]) -> None:
                with first_scope:
                    await first.run(task_status=task_status)

            await nursery.start(run_first)
            await first.wait_for(await log.head())
            async with materialize_ledger(log, url, poll_interval=POLL) as second:
                await workload(runtime, 2, 2)
                await first.wait_for(await log.head())
                assert second.position == 0
                first_scope.cancel()
                await workload(runtime, 4, 2)
                head = await log.head()
                await second.wait_for(head)
        records = await log.read()
    assert stored(url) == (head, expected(records))


async def test_a_writer_whose_offset_moved_writes_nothing(url: str) -> None:
    """A batch finds the offset where its materializer left it or is refused whole: a writer
    that another moved the offset under stops with a LogError naming both offsets."""
    async with open_log(url) as log, runtime_on(log) as runtime:
        await workload(runtime, 0, 1)
        before: list[tuple[int, Rows]] = []

        async def moved_under() -> None:
            async with materialize_ledger(log, url, poll_interval=POLL) as table:
                await table.wait_for(await log.head())
                before.append(stored(url))
                with connect() as connection:
                    connection.execute(f"UPDATE {schema_of(url)}.inert_offsets SET position = 1")
                await workload(runtime, 1, 1)
                await table.wait_for(await log.head())

        with pytest.raises(LogError, match=r"offset of ledger table .* is 1, not \d+"):
            await moved_under()
    offset, rows = stored(url)
    assert offset == 1
    assert rows == before[0][1]


async def test_a_table_ahead_of_its_log_is_refused(url: str) -> None:
    """A table whose offset lies past the log's head belongs to another log: refused."""
    async with open_log(url) as log:
        async with runtime_on(log) as runtime:
            await workload(runtime, 0, 1)
        async with materialize_ledger(log, url, poll_interval=POLL) as table:
            await table.wait_for(await log.head())
    with fresh_schema() as other:
        async with open_log(log_url(other)) as empty:
            with pytest.raises(ConfigurationError, match="ends at 0: it is another log's table"):
                async with materialize_ledger(empty, url, poll_interval=POLL) as table:
                    await table.wait_for(1)


@pytest.mark.parametrize("table", ["Rows", "1rows", "inert_offsets", "rows; drop"])
async def test_a_bad_table_name_is_refused(url: str, table: str) -> None:
    """Table names are plain lower-case identifiers, never the offsets table."""
    async with open_log(url) as log:
        with pytest.raises(ConfigurationError, match="ledger table"):
            async with materialize_ledger(log, url, table=table):
                pass


@pytest.mark.parametrize("interval", [math.nan, math.inf, 0.0, -1.0])
async def test_a_poll_interval_that_is_not_a_positive_finite_number_is_refused(
    url: str, interval: float
) -> None:
    """NaN, an infinite or a non-positive poll interval is refused by name."""
    async with open_log(url) as log:
        with pytest.raises(ConfigurationError, match="poll_interval must be a positive, finite"):
            async with materialize_ledger(log, url, poll_interval=interval):
                pass


async def test_rows_of_calls_finished_longer_ago_than_the_horizon_are_deleted(url: str) -> None:
    """Rows the ledger ages out by the log's times leave the table in the batch that aged them,
    whatever log the events come from."""
    horizon = timedelta(hours=1)
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    log = MemoryLog(clock=lambda: now[0])
    async with (
        runtime_on(log) as runtime,
        materialize_ledger(log, url, horizon=horizon, max_batch_events=5) as table,
    ):
        await workload(runtime, 0, 3)
        await table.wait_for(await log.head())
        _, rows = stored(url)
        assert len(rows) == 9
        now[0] += 2 * horizon
        await workload(runtime, 3, 1)
        head = await log.head()
        await table.wait_for(head)
        records = await log.read()
    await log.aclose()
    offset, rows = stored(url)
    assert offset == head
    assert rows == expected(records, horizon=horizon)
    # Turn t0 was cancelled, and the executed calls of t1 and t2 have their outcomes: gone.
    assert sorted((key[2], key[5]) for key in rows) == [
        ("t1", "cut"),
        ("t1", "email"),
        ("t2", "cut"),
        ("t2", "email"),
        ("t3", "cut"),
        ("t3", "email"),
        ("t3", "ready"),
    ]
