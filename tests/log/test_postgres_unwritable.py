"""A PostgreSQL log whose server stops taking writes while a runtime uses it (made read-only,
out of disk, the role's rights taken away, the connections ended): the runtime stops with an
inert error that names the log and the server's reason, never a hang or a crash, and nothing
runs from a write that did not land.

The server's refusals are made by a trigger on the events table that raises the error the server
itself raises in each case (the SQLSTATE and message), so that no other test sharing the server is
touched; ending the connections is the real thing, done to this log's connections only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
import trio
from postgres_support import connect, fresh_schema, log_url
from test_log_unwritable import (
    WEATHER,
    key_of,
    leaves,
    recorded_types,
    run_until_refused,
    whole_call,
)

from inert import Dispatch, LogError, open_log, open_runtime
from inert.events import CallDispatched, ClaimRequested, Redacted
from inert.log import NewEvent

REFUSALS = {
    "read-only": ("25006", "cannot execute INSERT in a read-only transaction"),
    "disk full": ("53100", "could not extend file: No space left on device"),
    "no rights": ("42501", "permission denied for table events"),
}


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


@contextmanager
def refusing_writes(schema: str, sqlstate: str, message: str) -> Iterator[None]:
    """Every row written to the log's events table fails as the server would, until the block
    ends."""
    with connect() as connection:
        connection.execute(
            f"""
            CREATE FUNCTION {schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION '{message}' USING ERRCODE = '{sqlstate}'; END $$;
            CREATE TRIGGER refuse BEFORE INSERT ON {schema}.events
            FOR EACH ROW EXECUTE FUNCTION {schema}.refuse();
            """
        )
    try:
        yield
    finally:
        with connect() as connection:
            connection.execute(f"DROP TRIGGER refuse ON {schema}.events")


def new_events(call: str) -> list[NewEvent]:
    return [NewEvent(stream=f"call-{call}", event=event) for event in whole_call(call)]


def end_connections(application: str) -> int:
    """End every server connection of the log (found by its application name)."""
    with connect() as connection:
        rows = connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (application,),
        ).fetchall()
    return len(rows)


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
async def test_a_server_that_stops_taking_writes_stops_the_runtime(
    refusal: str, schema: str
) -> None:
    """A claim on a log whose server refuses writes raises a LogError with the server's reason."""
    sqlstate, message = REFUSALS[refusal]
    url = log_url(schema)
    ran, error = await run_until_refused(url, lambda: refusing_writes(schema, sqlstate, message))
    errors = leaves(error)
    assert all(isinstance(leaf, LogError) for leaf in errors), errors
    assert any(message in str(leaf) and "PostgreSQL" in str(leaf) for leaf in errors), errors
    assert ran == ["first"]
    assert CallDispatched.TAG in await recorded_types(url, "first")
    second = await recorded_types(url, "second")
    assert ClaimRequested.TAG not in second
    assert CallDispatched.TAG not in second


@pytest.mark.parametrize("when", ["between calls", "before every request"])
async def test_connections_ended_by_the_server_are_opened_again(when: str, schema: str) -> None:
    """Connections ended by the server (a restart, an administrator, a pooler) are opened again:
    the runtime goes on, and each call runs once."""
    application = f"inert_test_{uuid.uuid4().hex[:8]}"
    url = log_url(schema, application_name=application)
    calls = [f"call{number}" for number in range(4)]
    ran: list[str] = []

    async def executor(dispatch: Dispatch) -> None:
        ran.append(dispatch.key.call)

    async with open_runtime(log=url, create=True, tools=[WEATHER]) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="user:a")
        await runtime.feed([event for call in calls for event in whole_call(call)])
        await runtime.settle()
        ended = end_connections(application)
        for call in calls:
            if when == "before every request":
                ended += end_connections(application)
            with trio.fail_after(30):
                await runtime.execute(key_of(call), executor, name="worker")
    assert ended >= 2
    assert ran == calls
    for call in calls:
        assert (await recorded_types(url, call)).count(CallDispatched.TAG) == 1


async def test_a_log_reads_again_after_its_connections_were_ended(schema: str) -> None:
    """A read after the server ended the log's connections opens a new one and answers."""
    application = f"inert_test_{uuid.uuid4().hex[:8]}"
    url = log_url(schema, application_name=application)
    async with open_log(url) as log:
        await log.append(new_events("first"))
        assert end_connections(application) >= 2
        assert len(await log.read()) == len(whole_call("first"))
        assert end_connections(application) >= 1
        await log.append(new_events("second"))
        assert await log.head() == 2 * len(whole_call("first"))


async def test_a_connection_ended_while_it_is_set_up_is_opened_again(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new connection the server ends before it is set up is lost like one in use: the
    redaction that opened it opens another and goes on."""
    connect_to_server = psycopg.connect
    ended: list[int] = []

    def connect_and_end(*arguments: Any, **options: Any) -> psycopg.Connection[Any]:
        connection = connect_to_server(*arguments, **options)
        if not ended:
            ended.append(connection.info.backend_pid)
            with connect() as other:
                other.execute("SELECT pg_terminate_backend(%s)", (connection.info.backend_pid,))
        return connection

    async with open_log(log_url(schema)) as log:
        await log.append(new_events("first"))
        monkeypatch.setattr(psycopg, "connect", connect_and_end)
        assert await log.redact("call-first", 1) == 1
        monkeypatch.undo()
        assert ended
        assert isinstance((await log.read(1, limit=1))[0].event, Redacted)


@contextmanager
def own_role() -> Iterator[str]:
    """A role of this test's own that may log in, dropped afterwards."""
    role = f"inert_test_{uuid.uuid4().hex[:8]}"
    with connect() as connection:
        connection.execute(f"CREATE ROLE {role} LOGIN SUPERUSER")
    try:
        yield role
    finally:
        with connect() as connection:
            connection.execute(f"DROP OWNED BY {role} CASCADE")
            connection.execute(f"DROP ROLE {role}")


async def test_a_log_whose_server_takes_no_connection_raises_a_log_error(schema: str) -> None:
    """Once the server ended the connections and takes no new one, a read and an append each
    raise one LogError with the server's reason."""
    with own_role() as role:
        url = log_url(schema, application_name=role, user=role)
        async with open_log(url) as log:
            await log.append(new_events("first"))
            with connect() as connection:
                connection.execute(f"ALTER ROLE {role} NOLOGIN")
            end_connections(role)
            with pytest.raises(LogError, match="not permitted to log in"):
                await log.read()
            with pytest.raises(LogError, match="not permitted to log in"):
                await log.append(new_events("second"))


async def test_a_log_whose_server_lost_its_appends_refuses_to_go_on(schema: str) -> None:
    """A new connection to a server that no longer holds the process's last append (as after
    an asynchronous failover) makes every later use of the log a LogError saying so."""
    application = f"inert_test_{uuid.uuid4().hex[:8]}"
    url = log_url(schema, application_name=application)
    async with open_log(url) as log:
        await log.append(new_events("first"))
        head = await log.head()
        with connect() as connection:
            connection.execute(f"DELETE FROM {schema}.events WHERE position = %s", (head,))
            connection.execute(
                f"UPDATE {schema}.heads SET position = %s WHERE partition = 0", (head - 1,)
            )
        assert end_connections(application) >= 1
        lost = f"lost events this process appended: position {head} of partition 0 holds nothing"
        with pytest.raises(LogError, match=lost):
            await log.append(new_events("second"))
        with pytest.raises(LogError, match=lost):
            await log.read()
    async with open_log(url) as log:
        await log.append(new_events("second"))
        assert await log.head() == head - 1 + len(whole_call("second"))
