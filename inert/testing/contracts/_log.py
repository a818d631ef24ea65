"""The log contract: what every log backend keeps, as a suite of tests to run against one.

Subclass ``LogContract`` in a test module and give it ``open_log``, a fixture returning a
function that opens the backend under test on one storage, empty the first time, as it was left
each time after::

    class TestMyLog(LogContract):
        @pytest.fixture
        def open_log(self, tmp_path):
            return lambda: MyLog.open(tmp_path / "log")

The tests are Trio tests: run them with pytest and pytest-trio (``trio_mode = true``, or the
``trio`` mark this class carries). inert runs this suite against every backend it ships.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest
import trio

from ...events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ConfirmationGiven,
    ConflictError,
    DuplicateEventError,
    LogError,
    RecordedEvent,
    Redacted,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    TraceContext,
)
from ...log import NO_STREAM, Log, NewEvent, SnapshotPayload, StoredSnapshot
from ...log._records import PAYLOAD_DIGEST_KEY
from ...log._snapshots import state_digest

OpenLog = Callable[[], AbstractAsyncContextManager[Log]]


class TickingClock:
    """A clock that moves one millisecond each time it is read."""

    def __init__(self) -> None:
        self._ticks = itertools.count()

    def __call__(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC) + timedelta(milliseconds=next(self._ticks))


def _key(call: str = "call_1", tenant: str = "acme") -> CallKey:
    return CallKey(
        tenant=tenant, conversation="c1", turn="t1", response="resp_1", item="fc_1", call=call
    )


def _fragment(
    data: bytes = b'{"a": 1}', call: str = "call_1", sequence: int = 0
) -> ArgumentsAppended:
    return ArgumentsAppended(
        key=_key(call), data=data, first_sequence=sequence, last_sequence=sequence
    )


def _keyed(log: Log, payload: bytes) -> str:
    """The digest a redacted payload leaves: keyed by the log, so that what retention keeps
    gives nothing back to one who tries candidates."""
    return hmac.new(log.key(PAYLOAD_DIGEST_KEY), payload, hashlib.sha256).hexdigest()


def _new(stream: str, event_id: str, data: bytes = b"x", sequence: int = 0) -> NewEvent:
    return NewEvent(stream=stream, event_id=event_id, event=_fragment(data, sequence=sequence))


def _shape(events: list[RecordedEvent]) -> list[tuple[int, str, str, int]]:
    return [(e.position, e.event_id, e.stream, e.version) for e in events]


_Part = tuple[str, str] | tuple[str, str, int]
"""A snapshot payload for a test: its part, its stream and, if not 1, its first version."""


def _snapshot(name: str, *parts: _Part, state: bytes = b"state") -> StoredSnapshot:
    """A snapshot with one payload per (part, stream) pair, from version 1 unless a third item
    says, its data naming both."""
    return StoredSnapshot(
        name=name,
        position=7,
        stamp="stamp-1",
        state=state,
        digest=state_digest(state),
        payloads=tuple(
            SnapshotPayload(
                part=part[0],
                stream=part[1],
                first_version=part[2] if len(part) == 3 else 1,
                data=f"{part[0]}|{part[1]}".encode(),
            )
            for part in parts
        ),
    )


def _siblings() -> list[NewEvent]:
    """Two calls of one response interleaved in its stream ``r`` (versions: a opens, a's
    fragment, b opens, b's fragment, a's second fragment, the response ends, a's end event)."""
    a, b = _key("a"), _key("b")
    response = a.response_ref
    events = [
        CallOpened(key=a, tool="lookup", sequence=0),
        _fragment(b'{"a": ', "a", 1),
        CallOpened(key=b, tool="lookup", sequence=0),
        _fragment(b'{"b": 2}', "b", 1),
        _fragment(b"1}", "a", 2),
        ResponseEnded(
            response=response, reason=ResponseEndReason.COMPLETED, terminal=TerminalRef(digest="e")
        ),
        CallEnded(key=a, terminal=TerminalRef(sequence=3), final_arguments=b'{"a": 1}'),
    ]
    return [
        NewEvent(stream="r", event_id=f"sibling-{index}", event=event)
        for index, event in enumerate(events)
    ]


def _payload_streams(stored: StoredSnapshot | None) -> list[tuple[str, str]]:
    assert stored is not None
    return [(p.part, p.stream) for p in stored.payloads]


class LogContract:
    """The tests every log backend passes; ``open_log`` is the subclass's to give."""

    pytestmark = pytest.mark.trio

    @pytest.fixture
    def open_log(self) -> OpenLog:
        """Opens the backend under test on one storage: empty the first time."""
        raise NotImplementedError("a LogContract subclass gives the open_log fixture")

    @pytest.fixture
    async def log(self, open_log: OpenLog) -> AsyncIterator[Log]:
        async with open_log() as opened:
            yield opened

    # --- append and read ---------------------------------------------------------------------

    async def test_append_assigns_positions_and_versions_in_batch_order(self, log: Log) -> None:
        """A batch gets consecutive positions from 1 and per-stream versions from 1."""
        positions = await log.append([_new("a", "e1"), _new("b", "e2"), _new("a", "e3")])
        assert positions == [1, 2, 3]
        assert _shape(await log.read()) == [(1, "e1", "a", 1), (2, "e2", "b", 1), (3, "e3", "a", 2)]
        assert await log.head() == 3
        assert await log.stream_version("a") == 2
        assert await log.stream_version("never") == NO_STREAM

    async def test_a_stream_version_as_of_a_position_counts_only_what_was_there(
        self, log: Log
    ) -> None:
        """``stream_version(as_of=)`` is the version of the stream's last event at or before the
        position, so that an append expecting it is refused if the stream moved on since."""
        await log.append([_new("a", "e1"), _new("b", "e2"), _new("a", "e3"), _new("b", "e4")])
        assert [await log.stream_version("a", as_of=at) for at in range(5)] == [0, 1, 1, 2, 2]
        assert await log.stream_version("b", as_of=3) == 1
        assert await log.stream_version("never", as_of=4) == NO_STREAM
        with pytest.raises(ConflictError):
            await log.append([_new("b", "e5")], {"b": await log.stream_version("b", as_of=3)})

    async def test_read_returns_the_event_and_its_envelope(self, log: Log) -> None:
        """What is read back equals what was appended, with trace context and recording time."""
        trace = TraceContext(
            traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate="k=v"
        )
        event = _fragment(b'{"city": "Paris"}', sequence=7)
        await log.append([NewEvent(stream="s", event_id="e1", event=event, trace=trace)])
        [recorded] = await log.read()
        assert recorded.event == event
        assert recorded.trace == trace
        assert recorded.event_type == "ingress.arguments_appended"
        assert recorded.schema_version == ArgumentsAppended.SCHEMA_VERSION
        assert recorded.recorded_at.tzinfo is not None
        assert recorded.recorded_at >= datetime(2026, 1, 1, tzinfo=UTC)

    async def test_empty_batch_writes_nothing(self, log: Log) -> None:
        """Appending no events returns no positions and leaves the log empty."""
        assert await log.append([]) == []
        assert await log.head() == 0
        assert await log.read() == []

    async def test_read_from_a_position_with_a_limit(self, log: Log) -> None:
        """read(from_position, limit) returns that window in position order."""
        await log.append([_new("s", f"e{i}", sequence=i) for i in range(10)])
        window = await log.read(4, limit=3)
        assert [e.position for e in window] == [4, 5, 6]
        assert [e.position for e in await log.read(9)] == [9, 10]
        assert await log.read(11) == []
        with pytest.raises(LogError, match="limit"):
            await log.read(1, limit=0)

    async def test_read_stream_returns_only_that_stream_in_version_order(self, log: Log) -> None:
        """read_stream yields one stream's events, optionally from a version on."""
        await log.append([_new("a", "a1"), _new("b", "b1")])
        await log.append([_new("a", "a2"), _new("b", "b2"), _new("a", "a3")])
        assert [e.event_id for e in await log.read_stream("a")] == ["a1", "a2", "a3"]
        assert [e.version for e in await log.read_stream("a", from_version=2)] == [2, 3]
        assert await log.read_stream("missing") == []

    async def test_append_refuses_what_is_not_a_new_event(self, log: Log) -> None:
        """A batch must hold NewEvent values and expected versions must be non-negative ints."""
        with pytest.raises(LogError, match="NewEvent"):
            await log.append([_fragment()])  # type: ignore[list-item]
        with pytest.raises(LogError, match="expected version"):
            await log.append([_new("s", "e1")], {"s": -1})
        assert await log.head() == 0

    # --- idempotency -------------------------------------------------------------------------

    async def test_reappending_an_event_returns_its_original_position(self, log: Log) -> None:
        """The same event id and content appended again is not written again."""
        await log.append([_new("s", "e1"), _new("s", "e2")])
        assert await log.append([_new("s", "e2")]) == [2]
        assert await log.append([_new("s", "e1"), _new("s", "e2")]) == [1, 2]
        assert await log.head() == 2
        assert await log.stream_version("s") == 2

    async def test_retry_of_an_acknowledged_batch_skips_the_version_check(self, log: Log) -> None:
        """A retried batch succeeds with its original expected versions, now stale."""
        batch = [_new("s", "e1"), _new("t", "e2")]
        first = await log.append(batch, {"s": NO_STREAM, "t": NO_STREAM})
        assert await log.append(batch, {"s": NO_STREAM, "t": NO_STREAM}) == first
        assert await log.head() == 2

    async def test_batch_mixing_stored_and_new_events_writes_only_the_new(self, log: Log) -> None:
        """Stored events keep their positions and the new ones are appended after the head."""
        await log.append([_new("s", "e1")])
        assert await log.append([_new("s", "e1"), _new("s", "e2")]) == [1, 2]
        assert _shape(await log.read()) == [(1, "e1", "s", 1), (2, "e2", "s", 2)]

    async def test_same_id_twice_in_one_batch_is_one_event(self, log: Log) -> None:
        """An id repeated with the same content inside a batch is written once."""
        assert await log.append([_new("s", "e1"), _new("s", "e1"), _new("s", "e2")]) == [1, 1, 2]
        assert await log.head() == 2

    @pytest.mark.parametrize(
        ("reappended", "difference"),
        [
            (_new("s", "e1", data=b"other"), "payload"),
            (_new("other-stream", "e1"), "stream"),
        ],
    )
    async def test_same_id_with_other_content_is_refused(
        self, log: Log, reappended: NewEvent, difference: str
    ) -> None:
        """An event id reused for different content is a DuplicateEventError and writes nothing."""
        await log.append([_new("s", "e1")])
        with pytest.raises(DuplicateEventError, match=difference):
            await log.append([_new("s", "e9"), reappended])
        with pytest.raises(DuplicateEventError):
            await log.append([_new("s", "e8"), _new("s", "e8", data=b"changed")])
        assert await log.head() == 1

    # --- optimistic concurrency ----------------------------------------------------------------

    async def test_expected_versions_that_hold_let_the_batch_in(self, log: Log) -> None:
        """Expected versions equal to the streams' current versions allow the append."""
        await log.append([_new("s", "e1")], {"s": NO_STREAM})
        await log.append([_new("s", "e2"), _new("t", "e3")], {"s": 1, "t": NO_STREAM})
        assert await log.stream_version("s") == 2

    async def test_a_wrong_expected_version_refuses_the_whole_batch(self, log: Log) -> None:
        """A mismatch raises ConflictError naming the stream and versions, and writes nothing."""
        await log.append([_new("s", "e1")])
        with pytest.raises(ConflictError) as caught:
            await log.append([_new("t", "e2"), _new("s", "e3")], {"t": NO_STREAM, "s": NO_STREAM})
        assert (caught.value.stream, caught.value.expected, caught.value.actual) == ("s", 0, 1)
        assert "'s'" in str(caught.value)
        assert await log.head() == 1
        assert await log.stream_version("t") == NO_STREAM

    async def test_expected_version_of_a_stream_outside_the_batch_is_checked(
        self, log: Log
    ) -> None:
        """A stream named only as a precondition must still be at its expected version."""
        await log.append([_new("guard", "g1")])
        with pytest.raises(ConflictError):
            await log.append([_new("s", "e1")], {"guard": NO_STREAM})
        await log.append([_new("s", "e1")], {"guard": 1})
        assert await log.head() == 2

    async def test_concurrent_writers_of_one_version_have_exactly_one_winner(
        self, log: Log
    ) -> None:
        """Of many appends expecting the same version of a stream, exactly one lands."""
        outcomes: list[str] = []

        async def contender(number: int) -> None:
            try:
                await log.append([_new("contested", f"c{number}")], {"contested": NO_STREAM})
                outcomes.append("won")
            except ConflictError:
                outcomes.append("lost")

        async with trio.open_nursery() as nursery:
            for number in range(20):
                nursery.start_soon(contender, number)
        assert sorted(outcomes) == ["lost"] * 19 + ["won"]
        assert await log.stream_version("contested") == 1

    # --- concurrency -------------------------------------------------------------------------

    async def test_concurrent_appenders_get_a_total_order_without_gaps(self, log: Log) -> None:
        """Many tasks appending at once give positions 1..N and per-stream order as appended."""
        tasks, appends = 40, 15

        async def appender(task: int) -> None:
            for number in range(appends):
                await log.append(
                    [_new(f"s{task}", f"t{task}-{number}", sequence=number)],
                    {f"s{task}": number},
                )

        async with trio.open_nursery() as nursery:
            for task in range(tasks):
                nursery.start_soon(appender, task)
        events = await log.read()
        assert [e.position for e in events] == list(range(1, tasks * appends + 1))
        for task in range(tasks):
            stream = await log.read_stream(f"s{task}")
            assert [e.event_id for e in stream] == [f"t{task}-{n}" for n in range(appends)]
            assert [e.version for e in stream] == list(range(1, appends + 1))

    async def test_a_conflicting_append_fails_alone_among_concurrent_ones(self, log: Log) -> None:
        """When appends land together, one that conflicts does not take the others down."""
        await log.append([_new("busy", "b1")])
        results: dict[str, str] = {}

        async def append(name: str, expected: dict[str, int]) -> None:
            try:
                await log.append([_new(name, name)], expected)
                results[name] = "ok"
            except ConflictError:
                results[name] = "conflict"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append, "x1", {})
            nursery.start_soon(append, "x2", {"busy": NO_STREAM})
            nursery.start_soon(append, "x3", {"busy": 1})
            nursery.start_soon(append, "x4", {})
        assert results == {"x1": "ok", "x2": "conflict", "x3": "ok", "x4": "ok"}
        assert await log.head() == 4

    # --- subscribe ---------------------------------------------------------------------------

    async def test_subscribe_yields_stored_events_then_new_ones(self, log: Log) -> None:
        """A subscription first replays what is stored, then waits for and yields new appends."""
        await log.append([_new("s", "e1"), _new("s", "e2")])
        subscription = log.subscribe()
        seen = [(await subscription.__anext__()).event_id for _ in range(2)]
        assert seen == ["e1", "e2"]
        async with trio.open_nursery() as nursery:

            async def append_later() -> None:
                await trio.lowlevel.checkpoint()
                await log.append([_new("s", "e3")])

            nursery.start_soon(append_later)
            with trio.fail_after(10):
                assert (await subscription.__anext__()).event_id == "e3"
        assert subscription.next_position == 4

    async def test_subscribe_hands_back_what_this_process_appended_without_decoding(
        self,
        log: Log,
    ) -> None:
        """A subscription yields the appended object itself where the round trip is exact, and a
        decoded one (times in UTC, as any reader sees them) where it holds a datetime."""
        appended = _fragment()
        local_time = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
        confirmation = ConfirmationGiven(
            key=_key(),
            principal="user:alice",
            tool_digest="sha256:0",
            arguments_digest="sha256:1",
            nonce="n",
            expires_at=local_time,
        )
        await log.append(
            [NewEvent(stream="s", event=appended), NewEvent(stream="s", event=confirmation)]
        )
        subscription = log.subscribe()
        first, second = [await subscription.__anext__() for _ in range(2)]
        assert first.event is appended
        assert second.event == confirmation
        assert isinstance(second.event, ConfirmationGiven)
        assert second.event.expires_at.utcoffset() == timedelta(0)
        [stored, _] = await log.read(1)
        assert stored.event == appended
        assert stored.event is not appended

    async def test_subscribe_while_appending_sees_every_event_once_in_order(self, log: Log) -> None:
        """A subscriber running beside concurrent appenders misses, repeats and reorders nothing."""
        total = 120
        received: list[int] = []

        async def subscriber(from_position: int) -> None:
            async for recorded in log.subscribe(from_position):
                received.append(recorded.position)
                if len(received) == total - from_position + 1:
                    return

        async def appender(task: int) -> None:
            for number in range(total // 4):
                await log.append([_new(f"s{task}", f"{task}-{number}")])

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(subscriber, 1)
                for task in range(4):
                    nursery.start_soon(appender, task)
        assert received == list(range(1, total + 1))

    async def test_subscribe_from_a_position_starts_there(self, log: Log) -> None:
        """subscribe(from_position) skips what comes before that position."""
        await log.append([_new("s", f"e{i}") for i in range(5)])
        subscription = log.subscribe(4)
        assert [(await subscription.__anext__()).position for _ in range(2)] == [4, 5]

    async def test_subscription_ends_when_the_log_closes(self, open_log: OpenLog) -> None:
        """Iteration over a subscription stops once its log is closed."""
        received: list[str] = []
        async with open_log() as opened:
            await opened.append([_new("s", "e1")])

            async def consume() -> None:
                received.extend([recorded.event_id async for recorded in opened.subscribe()])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                await trio.testing.wait_all_tasks_blocked()
                await opened.aclose()
        assert received == ["e1"]

    # --- redaction ---------------------------------------------------------------------------

    async def test_redact_replaces_payloads_by_length_and_digest(self, log: Log) -> None:
        """Redaction keeps envelopes, drops payloads up to a version, and counts what it dropped."""
        await log.append(
            [_new("s", f"e{i}", data=b"secret-%d" % i) for i in range(3)] + [_new("t", "t1")]
        )
        before = await log.read_stream("s")
        assert await log.redact("s", 2) == 2
        assert await log.redact("s", 2) == 0
        after = await log.read_stream("s")
        assert _shape(after) == _shape(before)
        assert [e.event_type for e in after] == [e.event_type for e in before]
        for old, redacted in zip(before[:2], after[:2], strict=True):
            assert isinstance(redacted.event, Redacted)
            assert isinstance(old.event, ArgumentsAppended)
            payload = log.codec.encode(old.event)[2]
            assert redacted.event == Redacted(
                length=len(payload),
                digest=_keyed(log, payload),
                remains=attrs.evolve(old.event, data=b""),
            )
            assert redacted.kept == attrs.evolve(old.event, data=b"")
        assert after[2].event == before[2].event
        assert not isinstance((await log.read_stream("t"))[0].event, Redacted)

    async def test_redact_keeps_nothing_of_an_event_type_that_names_no_sensitive_field(
        self,
        log: Log,
    ) -> None:
        """An event type without sensitive fields leaves only its length and digest."""
        opened = CallOpened(key=_key(), tool="lookup")
        await log.append([NewEvent(stream="s", event_id="o1", event=opened)])
        assert await log.redact("s", 1) == 1
        [recorded] = await log.read_stream("s")
        payload = log.codec.encode(opened)[2]
        assert recorded.event == Redacted(length=len(payload), digest=_keyed(log, payload))
        assert recorded.kept is None

    async def test_redact_limited_to_event_types_leaves_the_others(self, log: Log) -> None:
        """Redaction limited to some event types leaves the stream's other events whole."""
        opened = CallOpened(key=_key(), tool="lookup")
        await log.append([NewEvent(stream="s", event_id="o1", event=opened), _new("s", "f1")])
        assert await log.redact("s", 2, event_types={ArgumentsAppended.TAG}) == 1
        first, second = await log.read_stream("s")
        assert first.event == opened
        assert isinstance(second.event, Redacted)
        assert await log.redact("s", 2, event_types={ArgumentsAppended.TAG}) == 0

    async def test_a_subscription_yields_what_redaction_left(self, log: Log) -> None:
        """A subscription started after a redaction never hands out the payload it dropped."""
        await log.append([_new("s", "e1", data=b"secret")])
        await log.redact("s", 1)
        subscription = log.subscribe()
        recorded = await subscription.__anext__()
        assert isinstance(recorded.event, Redacted)
        assert isinstance(recorded.kept, ArgumentsAppended)
        assert recorded.kept.data == b""

    async def test_a_subscription_yields_what_redaction_left_of_events_appended_before(
        self, log: Log
    ) -> None:
        """A subscription that reaches an event this process appended after it was redacted
        gets what redaction left, not the payload appended."""
        subscription = log.subscribe()
        await log.append([_new("s", "e1", data=b"secret"), _new("t", "t1")])
        await log.redact("s", 1)
        first, second = [await subscription.__anext__() for _ in range(2)]
        assert isinstance(first.event, Redacted)
        assert not isinstance(second.event, Redacted)

    async def test_redacted_events_stay_idempotent(self, log: Log) -> None:
        """After redaction, the same event re-appended is recognised; other content is refused."""
        await log.append([_new("s", "e1", data=b"secret")])
        await log.redact("s", 1)
        assert await log.append([_new("s", "e1", data=b"secret")]) == [1]
        with pytest.raises(DuplicateEventError, match="payload"):
            await log.append([_new("s", "e1", data=b"other")])

    # --- snapshots ---------------------------------------------------------------------------

    async def test_a_snapshot_reads_back_as_written(self, log: Log) -> None:
        """A stored snapshot reads back equal, its payloads in the order written, and intact."""
        written = _snapshot("", ("c2", "r2"), ("c1", "r1"), ("c1", "r3"), state=b"\x00state\xff")
        await log.write_snapshot(written)
        stored = await log.read_snapshot("")
        assert stored == written
        assert stored.intact()

    async def test_a_snapshot_replaces_only_the_one_of_its_name(self, log: Log) -> None:
        """Writing a snapshot replaces the one of the same name whole and leaves other names'."""
        first = _snapshot("p1", ("c1", "r1"), ("c2", "r2"), state=b"first")
        other = _snapshot("p2", ("c1", "r1"), state=b"other")
        await log.write_snapshot(first)
        await log.write_snapshot(other)
        second = attrs.evolve(_snapshot("p1", ("c3", "r3"), state=b"second"), position=9)
        await log.write_snapshot(second)
        assert await log.read_snapshot("p1") == second
        assert await log.read_snapshot("p2") == other

    async def test_deleting_a_snapshot_deletes_it_and_only_it(self, log: Log) -> None:
        """A deleted snapshot reads as None, its payloads gone with it; other names' stay, and
        deleting a name without one changes nothing."""
        await log.write_snapshot(_snapshot("p1", ("c1", "r1")))
        other = _snapshot("p2", ("c2", "r2"))
        await log.write_snapshot(other)
        await log.delete_snapshot("p1")
        await log.delete_snapshot("none")
        assert await log.read_snapshot("p1") is None
        assert await log.read_snapshot("p2") == other
        await log.write_snapshot(_snapshot("p1", state=b"again"))
        again = await log.read_snapshot("p1")
        assert again is not None
        assert again.payloads == ()

    async def test_a_log_has_an_identity_and_keys_that_it_keeps(self, open_log: OpenLog) -> None:
        """A log is given an identity and a secret when it is made; both stay when it is opened
        again, and keys for different purposes differ."""
        async with open_log() as first:
            identity, key = first.identity, first.key("snapshot")
            assert identity.startswith("log-")
            assert len(key) == 32
            assert first.key("arguments") != key
        async with open_log() as second:
            assert second.identity == identity
            assert second.key("snapshot") == key

    # --- runtimes on the log ----------------------------------------------------------------

    async def test_a_runtime_is_running_while_its_presence_is_held(self, open_log: OpenLog) -> None:
        """A presence held through one opening of the log is seen through another, and by
        itself; once released, no runtime is running."""
        async with open_log() as runtime_side, open_log() as operator_side:
            assert not await operator_side.runtime_running()
            async with runtime_side.runtime_presence():
                assert await operator_side.runtime_running()
                assert await runtime_side.runtime_running()
            assert not await operator_side.runtime_running()

    async def test_a_runtime_is_running_while_any_presence_is_held(self, open_log: OpenLog) -> None:
        """Two runtimes present at once: the log has a runtime running until both have
        gone, whichever goes first."""
        async with open_log() as first, open_log() as second, open_log() as operator_side:
            async with first.runtime_presence():
                async with second.runtime_presence():
                    assert await operator_side.runtime_running()
                assert await operator_side.runtime_running()
            assert not await operator_side.runtime_running()

    async def test_no_snapshot_reads_as_none(self, log: Log) -> None:
        """A name no snapshot was written under reads as None."""
        await log.write_snapshot(_snapshot("p1"))
        assert await log.read_snapshot("") is None
        assert await log.read_snapshot("p2") is None

    async def test_redacting_a_stream_deletes_the_snapshot_payloads_stored_under_it(
        self,
        log: Log,
    ) -> None:
        """Redaction deletes every snapshot payload of its stream from the versions it reaches,
        under every name, even when its event types match no event, and leaves the other
        payloads (those of later versions too)."""
        await log.append([_new("r1", "e1"), _new("r1", "e2")])
        pairs: list[_Part] = [
            ("a1", "r1"),
            ("a2", "r1", 2),
            ("r1", "r2"),
            ("a4", "r3"),
            ("a5", "r1", 3),
        ]
        await log.write_snapshot(_snapshot("p1", *pairs))
        await log.write_snapshot(_snapshot("p2", ("a2", "r1")))
        assert await log.redact("r1", 2, event_types={CallOpened.TAG}) == 0
        assert _payload_streams(await log.read_snapshot("p1")) == [
            ("r1", "r2"),
            ("a4", "r3"),
            ("a5", "r1"),
        ]
        assert _payload_streams(await log.read_snapshot("p2")) == []
        assert (await log.read_stream("r1"))[0].event == _fragment(b"x")

    async def test_a_snapshot_written_after_a_redaction_drops_the_redacted_streams_payloads(
        self,
        log: Log,
    ) -> None:
        """A payload whose versions of its stream hold a redacted event is not stored again; one
        from a later version is."""
        await log.append([_new("c1", "e1"), _new("r9", "e2"), _new("c2", "e3"), _new("c2", "e4")])
        await log.redact("c1", 1)
        await log.redact("r9", 1)
        await log.redact("c2", 1, event_types={CallOpened.TAG})
        pairs: list[_Part] = [
            ("a1", "c1"),
            ("a2", "r2"),
            ("a3", "r9"),
            ("a4", "c2"),
            ("a5", "r4"),
            ("a6", "c1", 2),
        ]
        await log.write_snapshot(_snapshot("", *pairs, state=b"after"))
        stored = await log.read_snapshot("")
        assert _payload_streams(stored) == [("a2", "r2"), ("a4", "c2"), ("a5", "r4"), ("a6", "c1")]
        assert stored is not None
        assert stored.state == b"after"
        assert stored.intact()

    async def test_redactions_made_together_each_reach_what_they_would_alone(
        self, log: Log
    ) -> None:
        """``redact_many`` makes each redaction as ``redact`` would: several streams each up
        to its own version, one stream twice (of other event types, then further), and one
        limited to a call, in one call; the count is theirs together."""
        await log.append(
            [_new("s", f"s{i}", data=b"s-%d" % i) for i in range(3)]
            + [_new("t", f"t{i}", data=b"t-%d" % i) for i in range(2)]
        )
        await log.append(_siblings())
        fragments = {ArgumentsAppended.TAG, CallEnded.TAG}
        done = await log.redact_many(
            [
                ("s", 1, None, None),
                ("t", 2, None, None),
                ("r", 7, fragments, [_key("b")]),
                ("s", 2, {CallOpened.TAG}, None),
                ("s", 2, None, None),
            ]
        )
        assert done == 1 + 2 + 1 + 0 + 1

        def shapes(events: list[RecordedEvent]) -> list[bool]:
            return [isinstance(recorded.event, Redacted) for recorded in events]

        assert shapes(await log.read_stream("s")) == [True, True, False]
        assert shapes(await log.read_stream("t")) == [True, True]
        assert shapes(await log.read_stream("r")) == [False] * 3 + [True] + [False] * 3

    async def test_redact_limited_to_a_call_leaves_the_other_calls_of_its_stream(
        self, log: Log
    ) -> None:
        """Redaction limited to some calls' events (``keys``) redacts those of the event types
        up to the version, and no other call's events of the stream nor any event of no call."""
        await log.append(_siblings())
        fragments = {ArgumentsAppended.TAG, CallEnded.TAG}
        assert await log.redact("r", 6, event_types=fragments, keys=[_key("a")]) == 2
        assert await log.redact("r", 6, event_types=fragments, keys=[_key("a")]) == 0
        events = [recorded.event for recorded in await log.read_stream("r")]
        assert [isinstance(event, Redacted) for event in events] == [
            False,
            True,
            False,
            False,
            True,
            False,
            False,
        ]
        assert await log.redact("r", 7, keys=[_key("b"), _key("c")]) == 2
        assert isinstance((await log.read_stream("r"))[5].event, ResponseEnded)
        assert await log.redact("r", 7, keys=[_key("a"), _key("b")]) == 2

    async def test_redacting_a_calls_events_deletes_only_that_calls_snapshot_payloads(
        self, log: Log
    ) -> None:
        """A payload holds bytes of the call of the event at its first version: redacting that
        call's events deletes it (from a version the redaction reaches), under every name, and
        leaves the payloads of the stream's other calls, and those of a version past it."""
        await log.append(_siblings())
        pairs: list[_Part] = [("a", "r", 1), ("b", "r", 3), ("c", "q"), ("late", "r", 7)]
        await log.write_snapshot(_snapshot("p1", *pairs))
        await log.write_snapshot(_snapshot("p2", ("a", "r", 1)))
        await log.redact("r", 5, event_types={ArgumentsAppended.TAG}, keys=[_key("a")])
        assert _payload_streams(await log.read_snapshot("p1")) == [
            ("b", "r"),
            ("c", "q"),
            ("late", "r"),
        ]
        assert _payload_streams(await log.read_snapshot("p2")) == []

    async def test_a_snapshot_written_after_a_calls_redaction_keeps_the_other_calls_payloads(
        self, log: Log
    ) -> None:
        """After one call's events of a stream were redacted, a snapshot written stores no
        payload of that call from before, and every payload of the stream's other calls."""
        await log.append(_siblings())
        await log.redact("r", 5, event_types={ArgumentsAppended.TAG}, keys=[_key("a")])
        pairs: list[_Part] = [("a", "r", 1), ("b", "r", 3), ("c", "q")]
        await log.write_snapshot(_snapshot("", *pairs))
        assert _payload_streams(await log.read_snapshot("")) == [("b", "r"), ("c", "q")]

    async def test_a_snapshot_survives_reopening_the_log(self, open_log: OpenLog) -> None:
        """A log closed and opened again holds its snapshots and what redaction left of them."""
        written = _snapshot("", ("a1", "r1"), ("a2", "r2"))
        async with open_log() as first:
            await first.write_snapshot(written)
            await first.redact("r1", 1)
        async with open_log() as second:
            assert await second.read_snapshot("") == attrs.evolve(
                written, payloads=written.payloads[1:]
            )

    # --- lifecycle ---------------------------------------------------------------------------

    async def test_reopen_after_close_keeps_everything_and_continues(
        self, open_log: OpenLog
    ) -> None:
        """A log closed and opened again holds every event and appends after its head."""
        async with open_log() as first:
            await first.append([_new("s", "e1"), _new("t", "e2")])
            await first.redact("t", 1)
        async with open_log() as second:
            assert _shape(await second.read()) == [(1, "e1", "s", 1), (2, "e2", "t", 1)]
            assert isinstance((await second.read(2))[0].event, Redacted)
            assert await second.append([_new("s", "e3")], {"s": 1}) == [3]
            assert await second.append([_new("s", "e1")]) == [1]

    async def test_a_closed_log_refuses_work(self, open_log: OpenLog) -> None:
        """Appending to or reading from a closed log is a LogError."""
        async with open_log() as opened:
            pass
        assert opened.closed
        with pytest.raises(LogError, match="closed"):
            await opened.append([_new("s", "e1")])
        with pytest.raises(LogError, match="closed"):
            await opened.read()

    async def test_a_closed_log_refuses_snapshots(self, open_log: OpenLog) -> None:
        """Writing or reading a snapshot of a closed log is a LogError."""
        async with open_log() as opened:
            await opened.write_snapshot(_snapshot(""))
        with pytest.raises(LogError, match="closed"):
            await opened.write_snapshot(_snapshot("", ("c1", "r1")))
        with pytest.raises(LogError, match="closed"):
            await opened.read_snapshot("")
