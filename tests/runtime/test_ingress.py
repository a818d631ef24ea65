"""Ingress: fragments held and coalesced until the next append, promises durable before their
feed returns, and the fragments a stream holds written before its promises."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ConfigurationError,
    ConflictError,
    Event,
    LogError,
    Phase,
    RecordedEvent,
    Retention,
    TerminalRef,
    ToolDeclaration,
    TraceContext,
    open_runtime,
)
from inert.log import MemoryLog, NewEvent
from inert.runtime._ingress import Held, Ingress
from inert.testing import Fault, FaultyLog


def key_of(call: str, response: str = "r1") -> CallKey:
    return CallKey(
        tenant="acme", conversation="c1", turn="t1", response=response, item=call, call=call
    )


def pieces(key: CallKey, data: bytes, size: int, first: int = 1) -> list[ArgumentsAppended]:
    """``data`` cut every ``size`` bytes, each at its offset, numbered from ``first``."""
    return [
        ArgumentsAppended(
            key=key,
            data=data[start : start + size],
            offset=start,
            first_sequence=first + index,
            last_sequence=first + index,
        )
        for index, start in enumerate(range(0, len(data), size))
    ]


def end(key: CallKey, sequence: int) -> CallEnded:
    return CallEnded(key=key, terminal=TerminalRef(sequence=sequence))


async def feed(
    ingress: Ingress, events: Sequence[Event], trace: TraceContext | None = None
) -> None:
    """What ``Runtime.feed`` does with an ingress: hold fragments, append promises."""
    held = ingress.hold(events, trace)
    if held is Held.NOT_HELD:
        await ingress.append(events, trace)
    elif held is Held.FULL:
        await ingress.room()
    else:
        await trio.lowlevel.checkpoint()


async def fed_one_by_one(ingress: Ingress, events: Sequence[Event]) -> None:
    for event in events:
        await feed(ingress, [event])


async def stored(log: MemoryLog) -> list[RecordedEvent]:
    return await log.read()


async def test_a_fragments_feed_returns_before_it_is_in_the_log() -> None:
    """Fragments are held: their feed returns with nothing written."""
    log = MemoryLog()
    ingress = Ingress(log)
    await fed_one_by_one(ingress, pieces(key_of("a"), b'{"city": "Paris"}', 4))
    assert await log.head() == 0
    assert not ingress.idle


async def test_a_promise_writes_what_its_stream_holds_first_as_one_event_per_call() -> None:
    """Fragments fed one by one, then the call's end event: one fragment event holding every
    byte and sequence, then the end event, in one append."""
    log = MemoryLog()
    ingress = Ingress(log)
    key = key_of("a")
    data = b'{"city": "Paris", "days": 3}'
    fragments = pieces(key, data, 3)
    await fed_one_by_one(ingress, fragments)
    await feed(ingress, [end(key, len(fragments) + 1)])
    first, second = [recorded.event for recorded in await stored(log)]
    assert first == ArgumentsAppended(
        key=key,
        data=data,
        offset=0,
        first_sequence=1,
        last_sequence=len(fragments),
        fragments=len(fragments),
    )
    assert second == end(key, len(fragments) + 1)
    assert ingress.idle


async def test_fragments_that_do_not_follow_each_other_stay_separate_events() -> None:
    """A gap, a repeated range, fragments without offsets and another trace context each
    start a new event: joining them could change what the call's actor decides."""
    log = MemoryLog()
    ingress = Ingress(log)
    key = key_of("a")
    first, second, third = pieces(key, b"aaabbbccc", 3)
    unplaced = ArgumentsAppended(key=key, data=b"x", first_sequence=9, last_sequence=9)
    trace = TraceContext(traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    await fed_one_by_one(ingress, [first, third, second, second])
    await feed(ingress, [unplaced])
    await feed(ingress, [unplaced])
    await feed(ingress, [third], trace)
    await feed(ingress, [end(key, 4)])
    events = [recorded.event for recorded in await stored(log)]
    assert events[:-1] == [first, third, second, second, unplaced, unplaced, third]
    assert [recorded.trace for recorded in await stored(log)][-2] == trace


async def test_a_promise_writes_only_its_own_streams_fragments() -> None:
    """The end of one response's call leaves another response's fragments held."""
    log = MemoryLog()
    ingress = Ingress(log)
    mine, other = key_of("a", "r1"), key_of("b", "r2")
    await fed_one_by_one(ingress, [*pieces(mine, b"abc", 1), *pieces(other, b"xyz", 1)])
    await feed(ingress, [end(mine, 4)])
    assert [recorded.stream for recorded in await stored(log)] == [mine.response_ref.stream] * 2
    assert not ingress.idle


async def test_the_writer_appends_what_is_held_one_event_per_call() -> None:
    """Running, the writer appends the fragments held: one event per call per append."""
    log = MemoryLog()
    ingress = Ingress(log)
    keys = [key_of(name, f"r-{name}") for name in "abc"]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ingress.run)
        for key in keys:
            for fragment in pieces(key, b"0123456789", 2):
                ingress._hold([fragment], None)
        await ingress.drain()
        nursery.cancel_scope.cancel()
    events = [recorded.event for recorded in await stored(log)]
    assert events == [
        ArgumentsAppended(
            key=key, data=b"0123456789", offset=0, first_sequence=1, last_sequence=5, fragments=5
        )
        for key in keys
    ]


async def test_a_failed_append_of_fragments_is_raised_by_the_next_feed_of_their_stream() -> None:
    """Fragments whose feed returned and whose append then failed make the next feed of their
    stream raise that failure, once; nothing of them is in the log."""
    inner = MemoryLog()
    log = FaultyLog(inner, script={1: Fault.WRITE_ERROR})
    ingress = Ingress(log)
    key = key_of("a")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ingress.run)
        await feed(ingress, pieces(key, b"abcdef", 2))
        await ingress.drain()
        with pytest.raises(LogError, match="write failed"):
            await feed(ingress, [end(key, 4)])
        await feed(ingress, [end(key, 4)])
        nursery.cancel_scope.cancel()
    assert [recorded.event for recorded in await inner.read()] == [end(key, 4)]


async def test_a_stream_another_writer_appended_to_is_a_conflict() -> None:
    """Each response stream has one feeder: a promise fed after another writer appended to
    the stream is refused with a ConflictError, and the next feed learns the version again."""
    log = MemoryLog()
    ingress = Ingress(log)
    key = key_of("a")
    await feed(ingress, [CallOpened(key=key, tool="get_weather", sequence=0)])
    opened_elsewhere = CallOpened(key=key_of("b"), tool="get_weather", sequence=0)
    await log.append([NewEvent(stream=key.response_ref.stream, event=opened_elsewhere)])
    with pytest.raises(ConflictError):
        await feed(ingress, [end(key, 1)])
    await feed(ingress, [end(key, 1)])
    assert await log.head() == 3


class VersionCountingLog(MemoryLog):
    """A memory log that counts the reads of a stream's version."""

    version_reads = 0

    async def _stream_version(self, stream: str) -> int:
        self.version_reads += 1
        return await super()._stream_version(stream)


async def test_a_stream_the_ingress_has_not_written_is_taken_to_be_new() -> None:
    """A new response's first append reads no version; a response written before (by another
    process, or before a restart) is appended at the version its refusal names, and the
    feed succeeds."""
    log = VersionCountingLog()
    earlier = key_of("a")
    opened = CallOpened(key=earlier, tool="get_weather", sequence=0)
    await log.append([NewEvent(stream=earlier.response_ref.stream, event=opened)])
    ingress = Ingress(log)
    await feed(ingress, [end(earlier, 1)])
    fresh = key_of("b", response="r2")
    await feed(ingress, [CallOpened(key=fresh, tool="get_weather", sequence=0)])
    assert [(recorded.stream, recorded.version) for recorded in await stored(log)] == [
        (earlier.response_ref.stream, 1),
        (earlier.response_ref.stream, 2),
        (fresh.response_ref.stream, 1),
    ]
    assert log.version_reads == 0


async def test_past_the_bound_a_fragments_feed_waits_for_the_writer() -> None:
    """With more bytes held than the bound allows, a fragment's feed waits for an append."""
    log = MemoryLog()
    ingress = Ingress(log, max_pending_bytes=4)
    key = key_of("a")
    first, second = pieces(key, b"abcdef", 3)
    await feed(ingress, [first])
    with trio.move_on_after(1) as waited:
        await feed(ingress, [second])
    assert waited.cancelled_caught
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ingress.run)
        await feed(ingress, [second])
        nursery.cancel_scope.cancel()


async def test_a_runtime_that_stops_cleanly_writes_the_fragments_it_holds(tmp_path: Path) -> None:
    """Fragments fed before a clean stop are in the log when it is opened again."""
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    key = key_of("a")
    # Fragments stay in the log: retention would redact those of a call that ended.
    kept = Retention(fragments=False)
    tools = [ToolDeclaration(name="get_weather")]
    async with open_runtime(log=url, create=True, retention=kept, tools=tools) as runtime:
        await runtime.start_turn(
            tenant="acme", conversation="c1", turn="t1", principal="user:alice"
        )
        await runtime.feed([CallOpened(key=key, tool="get_weather", sequence=0)])
        for fragment in pieces(key, b'{"city": "Paris"}', 5):
            await runtime.feed([fragment])
    async with open_runtime(log=url, retention=kept, tools=tools) as runtime:
        fragments = [
            recorded.event
            for recorded in await runtime.log.read()
            if isinstance(recorded.event, ArgumentsAppended)
        ]
        assert b"".join(fragment.data for fragment in fragments) == b'{"city": "Paris"}'
        # Nothing feeds the call any more: the restart ends it.
        await runtime.settle()
        assert runtime.phase(key) is Phase.CANCELLED


async def test_a_runtime_bounds_the_fragments_it_holds() -> None:
    """``held_bytes`` bounds the fragments held for the next append; below one it is refused."""
    with pytest.raises(ConfigurationError, match="held_bytes"):
        async with open_runtime(log="memory://", held_bytes=0):
            pass
    async with open_runtime(log="memory://", held_bytes=4) as runtime:
        assert runtime._ingress.hold(pieces(key_of("a"), b"abcdef", 6), None) is Held.FULL
