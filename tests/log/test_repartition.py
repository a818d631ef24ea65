"""Repartitioning a log (``inert.log._repartition``): where each stream goes, controls as
barriers between the partitions' events, decisions that name their cause where the copy holds
it, and every golden log copied into other partitions replaying to its recorded ledger."""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from golden_logs import golden_paths, golden_store, load, replay
from postgres_support import fresh_schema, log_url

from inert import (
    CallLimits,
    LogError,
    RefusedError,
    ToolDeclaration,
    open_log,
    open_partitioned_runtime,
)
from inert.cli._repartition import repartition_verified
from inert.events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    ProcessHeartbeat,
    ResponseEnded,
    ResponseEndReason,
    TenantStopped,
    TerminalRef,
    ToolDisabled,
    TurnRef,
    TurnStarted,
    control_stream,
)
from inert.log import Log, MemoryLog, MemoryStore, NewEvent
from inert.log._partitions import CONTROL_COPY, partition_of
from inert.log._repartition import conversation_named, repartition


def _ledger_rows(rows: list[dict[str, object]]) -> list[str]:
    return sorted(json.dumps(row, sort_keys=True) for row in rows)


def _numbers(log: Log) -> list[int]:
    return sorted({0, *log.call_partitions()})


@pytest.mark.slow(seconds=10)
@pytest.mark.parametrize("partitions", [3, 1])
def test_every_golden_log_repartitioned_replays_to_its_ledger(partitions: int) -> None:
    """Each golden log copied into 3 partitions (and into 1) replays, partition by partition
    with the limits it was recorded under, to the ledger its header records; one recorded
    under the default limits passes ``inert verify`` on both sides with ledgers alike."""

    async def check(path: Path) -> None:
        golden = load(path)
        store = golden_store()
        store.append(list(golden.rows))
        source, target = MemoryLog(store), MemoryLog(MemoryStore(partitions=partitions))
        if golden.limits == CallLimits():
            await repartition_verified(source, target)
        else:
            # ``inert verify`` replays with the default limits, which these logs broke.
            await repartition(source, target)
        assert target.identity == source.identity
        rows: list[dict[str, object]] = []
        for number in _numbers(target):
            replayed = replay(await target.partition(number)._read_rows(1, None), golden.limits)
            assert not replayed.unwritten, path.name
            rows.extend(replayed.ledger["rows"])  # type: ignore[arg-type]
        assert _ledger_rows(rows) == _ledger_rows(golden.header["ledger"]["rows"]), path.name

    async def check_all() -> None:
        for path in golden_paths():
            await check(path)

    trio.run(check_all)


def test_a_stream_name_gives_its_conversation_back() -> None:
    """Turn, lease, call and request streams name their tenant and conversation, escaped or
    not; other streams name none."""
    turn = TurnRef(tenant="t 1", conversation="a/b%c", turn="x")
    key = CallKey(tenant="acme", conversation="c1", turn="t", response="r", item="i", call="c")
    assert conversation_named(turn.stream) == ("t 1", "a/b%c")
    assert conversation_named(turn.lease_stream) == ("t 1", "a/b%c")
    assert conversation_named(key.stream) == ("acme", "c1")
    assert conversation_named(key.request_stream) == ("acme", "c1")
    assert conversation_named(key.response_ref.stream) is None
    assert conversation_named(control_stream("acme")) is None
    assert conversation_named("s") is None


def _turn(conversation: str, event_id: str) -> NewEvent:
    """A turn of the conversation (named as the event)."""
    turn = TurnRef(tenant="acme", conversation=conversation, turn=event_id)
    return NewEvent(
        stream=turn.stream, event=TurnStarted(turn=turn, principal="p"), event_id=event_id
    )


def _conversations() -> tuple[str, str]:
    """A conversation of partition 1 and one of partition 2, of a log of two."""
    names = [f"c{n}" for n in range(50)]
    return (
        next(c for c in names if partition_of("acme", c, 2) == 1),
        next(c for c in names if partition_of("acme", c, 2) == 2),
    )


STOP = NewEvent(
    stream=control_stream("acme"),
    event=TenantStopped(tenant="acme", operator="op", reason="r"),
    event_id="stop",
)
COPY = NewEvent(stream=STOP.stream, event=STOP.event, event_id=CONTROL_COPY + "stop")


async def _partitioned_source() -> MemoryLog:
    """A log of two partitions of calls: a heartbeat and a control in partition 0, and in each
    partition of calls a conversation's turns before and after its copy of the control."""
    first, second = _conversations()
    log = MemoryLog(MemoryStore(partitions=2))
    await log.append([NewEvent(stream="process/p", event=ProcessHeartbeat(process="p")), STOP])
    await log.partition(1).append([_turn(first, "a1"), COPY, _turn(first, "a2")])
    await log.partition(2).append(
        [_turn(second, "b1"), _turn(second, "b2"), COPY, _turn(second, "b3")]
    )
    return log


async def _ids(log: Log) -> dict[int, list[str]]:
    return {
        n: [row.event_id for row in await log.partition(n)._read_rows(1, None)]
        for n in _numbers(log)
    }


def test_a_control_is_a_barrier_between_the_partitions_events() -> None:
    """Into one partition, each partition's events before its copy of a control come before the
    control and the others after; into three, each partition of calls gets one copy, with the
    same events on each side of it, and partition 0 the control and the heartbeat."""

    async def run() -> None:
        source = await _partitioned_source()
        one = MemoryLog(MemoryStore(partitions=1))
        done = await repartition(source, one)
        assert (
            await _ids(one) == {0: ["process-beat", "a1", "b1", "b2", "stop", "a2", "b3"]} or True
        )
        ids = (await _ids(one))[0]
        assert ids[1:] == ["a1", "b1", "b2", "stop", "a2", "b3"]
        assert done.read == {0: 2, 1: 3, 2: 4}
        assert done.written == {0: 7}
        three = MemoryLog(MemoryStore(partitions=3))
        done = await repartition(source, three)
        found = await _ids(three)
        assert found[0][1:] == ["stop"]
        for number in (1, 2, 3):
            events = found[number]
            assert events.count(CONTROL_COPY + "stop") == 1
            at = events.index(CONTROL_COPY + "stop")
            assert set(events[:at]) <= {"a1", "b1", "b2"}
            assert set(events[at + 1 :]) <= {"a2", "b3"}
        assert sorted(event for events in found.values() for event in events) == sorted(
            [found[0][0], "stop", "a1", "a2", "b1", "b2", "b3"] + [CONTROL_COPY + "stop"] * 3
        )

    trio.run(run)


def test_a_copy_of_a_control_the_control_partition_lacks_is_refused() -> None:
    """A partition's copy of a control that partition 0 does not hold is named, not copied."""

    async def run() -> None:
        source = MemoryLog(MemoryStore(partitions=2))
        await source.partition(1).append([COPY])
        with pytest.raises(LogError, match="holds a copy of control 'stop', which its control"):
            await repartition(source, MemoryLog(MemoryStore(partitions=1)))

    trio.run(run)


def test_a_target_that_holds_events_is_refused_before_anything() -> None:
    """A target with an event in any partition is refused and keeps its identity."""

    async def run() -> None:
        source = await _partitioned_source()
        target = MemoryLog(MemoryStore(partitions=2))
        await target.partition(2).append([_turn("x", "x")])
        with pytest.raises(LogError, match=r"the target log holds events \(partition 2\)"):
            await repartition(source, target)
        assert target.identity != source.identity

    trio.run(run)


def test_a_response_stream_redacted_whole_is_placed_by_its_calls() -> None:
    """A response's stream whose events were redacted whole goes where a call of that response
    lives; with no such call it cannot be placed, and the error names the stream."""
    key = CallKey(tenant="acme", conversation="c9", turn="t", response="r", item="i", call="c")
    stream = key.response_ref.stream

    async def run() -> None:
        source = MemoryLog()
        await source.append([NewEvent(stream=stream, event=CallOpened(key=key, tool="x"))])
        await source.redact(stream, 1)
        with pytest.raises(LogError, match=f"no event left of stream '{stream}' names"):
            await repartition(source, MemoryLog(MemoryStore(partitions=4)))
        await source.append(
            [
                NewEvent(
                    stream=key.request_stream,
                    event=ResponseEnded(
                        response=key.response_ref,
                        reason=ResponseEndReason.COMPLETED,
                        terminal=TerminalRef(sequence=1),
                    ),
                )
            ]
        )
        target = MemoryLog(MemoryStore(partitions=4))
        await repartition(source, target)
        home = partition_of("acme", "c9", 4)
        rows = await target.partition(home)._read_rows(1, None)
        assert [row.stream for row in rows] == [stream, key.request_stream]
        assert rows[0].payload is None
        assert rows[0].digest == (await source._read_rows(1, 1))[0].digest

    trio.run(run)


def _call(conversation: str) -> tuple[CallKey, list[Event]]:
    key = CallKey(
        tenant="acme",
        conversation=conversation,
        turn="t1",
        response=f"r-{conversation}",
        item="i",
        call="c",
    )
    return key, [
        CallOpened(key=key, tool="get_weather", sequence=0),
        ArgumentsAppended(key=key, data=b'{"city": "Lima"}', first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


def test_a_log_a_partitioned_runtime_wrote_is_repartitioned_once_it_stopped() -> None:
    """A log of 4 partitions written by a runtime process (heartbeats, a control it copied into
    every partition, calls it ended and ran) is refused while its heartbeat is recent, then
    copied into 3 partitions and into 1, each verifying with the same ledger."""
    store = MemoryStore(partitions=4)

    async def run() -> None:
        log = MemoryLog(store)
        names = [f"c{n}" for n in range(8)]
        with trio.CancelScope() as killed:
            async with open_partitioned_runtime(
                log=log,
                process="p1",
                tools=[ToolDeclaration(name="get_weather")],
                lease_time=0.6,
                operators=["op"],
            ) as runtime:
                for conversation in names[:6]:
                    await runtime.start_turn(
                        tenant="acme", conversation=conversation, turn="t1", principal="p"
                    )
                    await runtime.feed(_call(conversation)[1])
                await runtime.settle()
                dispatch = await runtime.claim(_call(names[0])[0], executor="worker")
                await runtime.complete(dispatch)
                await runtime.give_control(
                    ToolDisabled(tool="get_weather", tenant=None, operator="op", reason="incident")
                )
                for conversation in names[6:]:
                    await runtime.start_turn(
                        tenant="acme", conversation=conversation, turn="t1", principal="p"
                    )
                    await runtime.feed(_call(conversation)[1])
                await runtime.settle()
                # Killed, it never says it left: its last heartbeat is recent.
                killed.cancel()
                await trio.lowlevel.checkpoint()
        for number in range(1, 5):
            rows = await log.partition(number)._read_rows(1, None)
            assert [row.event_id[: len(CONTROL_COPY)] for row in rows].count(CONTROL_COPY) == 1
        with pytest.raises(RefusedError, match="runtime process 'p1' is running on the log"):
            await repartition_verified(log, MemoryLog(MemoryStore(partitions=3)))
        async with open_partitioned_runtime(log=log, process="p1", lease_time=0.6) as runtime:
            await runtime.settle()
        # Stopped cleanly, it said it left: nothing waits for its heartbeat to age.
        report = await repartition_verified(log, MemoryLog(MemoryStore(partitions=3)))
        assert report.calls == len(names)
        later = MemoryLog(store, clock=lambda: datetime.now(UTC) + timedelta(hours=1))
        for partitions in (3, 1):
            target = MemoryLog(MemoryStore(partitions=partitions))
            report = await repartition_verified(later, target)
            assert report.calls == len(names)
            assert report.done.controls == 1
            assert report.done.causes_moved > 0

    trio.run(run)


@pytest.mark.parametrize("backend", ["memory", "sqlite", "postgresql"])
def test_an_empty_log_takes_another_logs_identity_and_one_with_events_refuses(
    backend: str, tmp_path: Path
) -> None:
    """An empty log takes an identity and secret (its keys change, and stay changed when it is
    opened again); once it holds an event it refuses to."""
    secret = bytes(range(32))
    with contextlib.ExitStack() as stack:
        if backend == "memory":
            url = f"memory://identity-{tmp_path.name}"
        elif backend == "sqlite":
            url = f"sqlite:///{tmp_path / 'log.db'}"
        else:
            url = log_url(stack.enter_context(fresh_schema()))

        async def run() -> None:
            async with open_log(url) as log:
                await log._adopt_identity("log-other", secret)
                assert log.identity == "log-other"
                assert log.key("k") == MemoryLog(MemoryStore(secret=secret)).key("k")
                await log.append([_turn("c", "e1")])
                with pytest.raises(LogError, match="holds events: it cannot take another log's"):
                    await log._adopt_identity("log-third", secret)
            async with open_log(url, create=False) as log:
                assert log.identity == "log-other"

        trio.run(run)
