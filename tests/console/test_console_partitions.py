"""The console of a partitioned log follows every partition: the calls of each are on its
pages, a call appears as it lands in any of them, and a control given from the console ends
the calls of every partition and its page counts them all."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from console_support import OPERATOR, TOOLS, client_of, opened
from postgres_support import fresh_schema, log_url

from inert import (
    CallKey,
    Event,
    PartitionedRuntime,
    Phase,
    open_log,
    open_partitioned_runtime,
)
from inert.console._view import ConsoleView, key_token
from inert.log import Log, MemoryLog, MemoryStore
from inert.log._partitions import CONTROL_PARTITION

LEASE_TIME = 0.6


def _keys(log: Log) -> list[CallKey]:
    """A call of tenant acme in a conversation of each of two partitions of calls."""
    keys = []
    for partition in list(log.call_partitions())[:2]:
        conversation = next(
            f"c{n}" for n in range(1000) if log.partition_of("acme", f"c{n}") == partition
        )
        keys.append(
            CallKey(
                tenant="acme",
                conversation=conversation,
                turn="t1",
                response=f"resp-{conversation}",
                item="call_1",
                call="call_1",
            )
        )
    return keys


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None
    return found.group(1)


async def _until(done: Callable[[], bool], changed: Callable[[], Awaitable[None]]) -> None:
    """Until ``done`` holds, looked at again whenever ``changed`` returns (a runtime's leases
    run on real time)."""
    with trio.fail_after(10):
        while not done():
            with trio.move_on_after(0.1):
                await changed()


async def _collecting(runtime: PartitionedRuntime, key: CallKey, events: list[Event]) -> None:
    """Start the call's turn and feed it ``events``."""
    await runtime.start_turn(
        tenant=key.tenant, conversation=key.conversation, turn=key.turn, principal="user:alice"
    )
    await runtime.feed(events)
    await runtime.settle()


async def _shows_the_later_call(
    runtime: PartitionedRuntime, console: Any, first: CallKey, later: CallKey
) -> Callable[[], Awaitable[None]]:
    """The console shows ``first`` (made before it opened), then ``later`` once it is made;
    what waits for the console's next change."""
    view = console.feed.view

    def fed() -> Awaitable[None]:
        return console.feed.changed_after(view.sequence)  # type: ignore[no-any-return]

    assert view.call(first) is not None
    await _collecting(runtime, later, opened(later))
    await _until(lambda: view.call(later) is not None, fed)
    return fed


async def test_the_calls_of_every_partition_are_shown_and_a_control_ends_them_all() -> None:
    """On a memory log of three partitions of calls, a call made before the console opened
    and one made after are on its ledger and call pages; a tool disabled from the console
    ends both, and its audit entry lists both, whichever partition is folded first."""
    log = MemoryLog(MemoryStore(partitions=3))
    first, later = _keys(log)
    assert log.partition_of("acme", first.conversation) != CONTROL_PARTITION
    async with open_partitioned_runtime(
        log=log, process="p1", tools=TOOLS, operators=[OPERATOR], lease_time=LEASE_TIME
    ) as runtime:
        await _until(lambda: runtime.partitions_owned() == [1, 2, 3], runtime.changed)
        await _collecting(runtime, first, opened(first))
        async with client_of(log) as (client, console):
            fed = await _shows_the_later_call(runtime, console, first, later)
            ledger = (await client.get("/")).text
            for key in (first, later):
                assert key.conversation in ledger
                page = await client.get(f"/calls/{key_token(key)}")
                assert page.status_code == 200
                assert key.conversation in page.text
            csrf = _csrf((await client.get("/controls")).text)
            form = {"csrf": csrf, "action": "disable-tool", "target": "get_weather"}
            form |= {"reason": "incident", "confirmed": "yes"}
            given = await client.post("/controls", data=form)
            assert given.status_code == 303
            await _until(
                lambda: all(
                    (row := runtime.row(key)) is not None and row.state is Phase.CANCELLED
                    for key in (first, later)
                ),
                runtime.changed,
            )
            position = int(given.headers["location"].rsplit("/", 1)[1])
            await _until(
                lambda: len(console.feed.entry(position).ended) == 2,  # type: ignore[union-attr]
                fed,
            )
            entry = (await client.get(given.headers["location"])).text
            assert "Calls it ended (2)" in entry
            audit = (await client.get("/audit")).text
            assert audit.count(f"@{position}<") == 1
    # Folded with the copies before the control, the view finds the same.
    again = ConsoleView(call_partitions=log.call_partitions(), partition_of=log.partition_of)
    for number in sorted(again.partitions.parts, reverse=True):
        for recorded in await log.partition(number).read(1):
            again.apply(recorded, number)
    [control] = again.partitions.entries()
    assert (control.position, set(control.ended)) == (position, {first, later})


async def test_a_postgres_console_shows_the_calls_of_every_partition_as_they_land() -> None:
    """A console on its own connection to a PostgreSQL log of two partitions of calls shows
    the call made in one before it opened and the call made in the other after."""
    with fresh_schema() as schema:
        url = log_url(schema, partitions=2)
        async with open_log(url, create=True) as log:
            first, later = _keys(log)
            async with open_partitioned_runtime(
                log=log, process="p1", tools=TOOLS, lease_time=LEASE_TIME
            ) as runtime:
                await _until(lambda: runtime.partitions_owned() == [1, 2], runtime.changed)
                await _collecting(runtime, first, opened(first))
                async with open_log(url) as own, client_of(own) as (client, console):
                    await _shows_the_later_call(runtime, console, first, later)
                    ledger = (await client.get("/")).text
                    assert all(key.conversation in ledger for key in (first, later))
                    assert len(re.findall(r'href="[^"]*/calls/', ledger)) == 2
