"""The step that erases redacted bytes from storage: how often it runs, and, on PostgreSQL,
that one rewrite of the table of keys serves every process of the log."""

from __future__ import annotations

import itertools

import trio
import trio.testing
from postgres_support import connect, fresh_schema, log_url

from inert import ArgumentsAppended, CallKey, open_log
from inert.log import NewEvent
from inert.log._erasure import Eraser
from inert.log._postgres import PostgresLog


async def test_after_a_step_the_eraser_rests_nine_times_as_long_as_the_step_took(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Under a steady stream of redactions, each step starts no sooner than nine times the
    previous step's length after it ended, and the redactions made meanwhile share it."""
    starts: list[float] = []

    async def step() -> bool:
        starts.append(trio.current_time())
        await trio.sleep(1.0)
        return True

    eraser = Eraser(step, holds="the test's table")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eraser.run)
        for _ in range(40):
            eraser.redacted()
            await trio.sleep(0.5)
        assert await eraser.erased()
        nursery.cancel_scope.cancel()
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(starts) >= 2
    assert all(gap >= 10.0 for gap in gaps), gaps
    # Forty redactions over twenty seconds: a step at the first, one ten seconds later, and a
    # last one for those made while that one rested.
    assert len(starts) <= 3


async def test_the_rest_counts_the_tries_of_a_step_not_its_waits_while_held_off(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A step held off (tried again after waits that hold nothing) rests nine times as long as
    its tries took, not as long as it waited: the next redaction is erased seconds later, not
    half a minute."""
    starts: list[float] = []
    refusals = 8

    async def step() -> bool:
        nonlocal refusals
        starts.append(trio.current_time())
        await trio.sleep(0.1)
        refusals -= 1
        return refusals < 0

    eraser = Eraser(step, holds="the test's table")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eraser.run)
        begun = trio.current_time()
        eraser.redacted()
        assert await eraser.erased()
        first_done = trio.current_time()
        eraser.redacted()
        assert await eraser.erased()
        nursery.cancel_scope.cancel()
    # Nine tries of 0.1 s, and 2.27 s of waits between them.
    assert first_done - begun > 3.0
    assert starts[-1] - first_done <= 9 * 0.9 + 0.01


async def test_a_redaction_is_erased_at_once_when_the_eraser_has_rested(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The first step after a quiet while runs as soon as the redaction is committed."""
    starts: list[float] = []

    async def step() -> bool:
        starts.append(trio.current_time())
        return True

    eraser = Eraser(step, holds="the test's table")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(eraser.run)
        start = trio.current_time()
        await trio.sleep(5.0)
        eraser.redacted()
        assert await eraser.erased()
        nursery.cancel_scope.cancel()
    assert starts == [start + 5.0]


def _keys_file(schema: str) -> int:
    with connect() as connection:
        row = connection.execute(
            "SELECT pg_relation_filenode(%s::regclass)", (f"{schema}.payload_keys",)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def _destroy_a_key(log: PostgresLog, call: str) -> None:
    """Append a sealed payload of a call of its own and redact it: its key is destroyed."""
    key = CallKey(tenant="t", conversation="c", turn="1", response="r", item="i", call=call)
    event = ArgumentsAppended(key=key, data=b'{"n": 1}')
    await log.append([NewEvent(stream=call, event=event)])
    assert await log.redact(call, 1) == 1


async def test_a_rewrite_of_the_keys_begun_after_a_redaction_serves_it() -> None:
    """A process whose keys another process's rewrite of the table already erased does not
    rewrite the table again; without that rewrite it does."""
    with fresh_schema() as schema:
        async with open_log(log_url(schema), create=True) as log:
            assert isinstance(log, PostgresLog)
            await _destroy_a_key(log, "first")
            assert await log.erased()
            rewritten = _keys_file(schema)
            await _destroy_a_key(log, "second")
            async with log._background_lock:
                # Held, so that this log's eraser waits while another process rewrites.
                with connect() as other:
                    other.execute(f"VACUUM (FULL) {schema}.payload_keys")
                by_the_other = _keys_file(schema)
                assert by_the_other != rewritten
            assert await log.erased()
            assert _keys_file(schema) == by_the_other
            await _destroy_a_key(log, "third")
            assert await log.erased()
            assert _keys_file(schema) != by_the_other
