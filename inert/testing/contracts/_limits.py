"""The event-limit contract: an event past an adapter's limit is never passed over unsaid.

Wherever it comes in a stream (its first event, after events that name no response yet, while
a response is open, after the last response ended), whatever its shape (one long data line, a
comment, many small lines, a line that never ends) and however the body is split, the adapter
either ends the open response as a protocol violation or raises ``ProtocolError``, in the very
chunk that takes the event past the limit (or earlier, where its size is announced first, as an
event-stream frame's is): an adapter that read past it without a word would leave its caller
reading a stream it can learn nothing from. And nothing before it is lost: the events the same
chunk held before it come out (with the violation, or in the error's ``events``).

Subclass ``EventLimitContract`` in a test module and give it ``wire``, a fixture that
returns the ``LimitWire`` of the adapter under test::

    class TestMyAdapterLimits(EventLimitContract):
        @pytest.fixture
        def wire(self):
            return LimitWire(
                adapter=lambda limit: MyAdapter(TURN, max_event_size=limit),
                opening=b"...",  # a response opened with a call: its identity is known
                ending=b"...",  # the end of that response
                oversized=sse_oversized,
                fitting=sse_fitting,
            )
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

import pytest
from attrs import frozen

from ...adapters import ProtocolError, StreamAdapter
from ...events import Event, ResponseEnded, ResponseEndReason


@frozen
class Oversized:
    """One event of a given shape past the limit; ``endless`` ones never end (no line end, no
    frame end): nothing is fed after them."""

    shape: str
    data: bytes
    endless: bool = False


@frozen(kw_only=True)
class LimitWire:
    """What the contract needs of an adapter's wire format."""

    adapter: Callable[[int], StreamAdapter]
    """A fresh adapter of the turn under test, with this ``max_event_size``."""
    opening: bytes
    """The wire of a response opened with a call (its identity known), whole events, each well
    under 1,000 characters."""
    ending: bytes
    """The wire that ends the response ``opening`` opened."""
    oversized: Callable[[int, int], Sequence[Oversized]]
    """Events past ``limit`` by ``excess`` units (at least), in every shape the wire has."""
    fitting: Callable[[int], bytes]
    """An event of exactly ``limit`` units that the adapter reads as nothing."""
    preamble: bytes = b""
    """Events a stream may begin with that name no response yet (a ping, a comment)."""


def sse_oversized(limit: int, excess: int) -> list[Oversized]:
    """An SSE event of ``limit + excess`` characters or more (its line ends counted, one each),
    in each of the shapes an SSE reader meets."""
    size = limit + excess
    line = b"data: xxxxxxxx\n"
    lines = line * -(-size // len(line))
    return [
        Oversized("one data line", b"data: " + b"x" * (size - 7) + b"\n\n"),
        Oversized("a comment", b": " + b"y" * (size - 3) + b"\n\n"),
        Oversized("many small lines", lines + b"\n"),
        Oversized("comments between data lines", (b": k\n" + line) * -(-size // 19) + b"\n"),
        Oversized("carriage returns", lines.replace(b"\n", b"\r") + b"\r"),
        Oversized(
            "fields of every kind",
            b"event: message\nid: 7\nretry: 10\n" + lines + b": end\n\n",
        ),
        Oversized("a line that never ends", b"data: " + b"z" * size, endless=True),
        Oversized("a comment that never ends", b":" + b"z" * size, endless=True),
        Oversized("a line cut short", lines + b"data: " + b"z" * size, endless=True),
    ]


def sse_fitting(limit: int) -> bytes:
    """An SSE comment of exactly ``limit`` characters with its line end, then its blank line."""
    return b": " + b"f" * (limit - 3) + b"\n\n"


POSITIONS = ("first", "after the preamble", "while a response is open", "after it ended")
LIMITS = (1024, 1531)
EXCESSES = (1, 2, 97)
"""How far past each limit an event goes; the limit itself and three times it are added."""


@frozen
class _Case:
    prefix: bytes
    event: Oversized
    suffix: bytes
    limit: int

    @property
    def body(self) -> bytes:
        return self.prefix + self.event.data + self.suffix

    @property
    def crossing(self) -> int:
        """The end of the byte that takes the event past the limit (its units are bytes)."""
        return len(self.prefix) + self.limit + 1


def _cases(wire: LimitWire, position: str, shape: str) -> Iterator[_Case]:
    for limit in LIMITS:
        for excess in (*EXCESSES, limit, 3 * limit):
            [event] = [each for each in wire.oversized(limit, excess) if each.shape == shape]
            prefix = {
                "first": b"",
                "after the preamble": wire.preamble,
                "while a response is open": wire.preamble + wire.opening,
                "after it ended": wire.preamble + wire.opening + wire.ending,
            }[position]
            suffix = b"" if event.endless else wire.opening + wire.ending
            yield _Case(prefix, event, suffix, limit)


def _splits(case: _Case, seed: int) -> Iterator[list[int]]:
    """Chunk ends for the body: whole, cut either side of the crossing byte, a byte at a time
    (for the smaller bodies) and at random places."""
    length = len(case.body)
    yield [length]
    yield sorted({case.crossing - 1, case.crossing, length})
    if length <= 4096:
        yield list(range(1, length + 1))
    chance = random.Random(seed)
    for _ in range(3):
        cuts = {chance.randrange(1, length) for _ in range(chance.randrange(1, 40))}
        yield sorted({*cuts, length})


def _check(wire: LimitWire, position: str, case: _Case, split: list[int]) -> None:
    where = f"{case.event.shape!r} {position}, limit {case.limit}, chunk ends {split[:8]}..."
    before = wire.adapter(case.limit).feed(case.prefix)
    adapter = wire.adapter(case.limit)
    seen: list[Event] = []
    start = 0
    for end in split:
        refused: ProtocolError | None = None
        try:
            events = adapter.feed(case.body[start:end])
        except ProtocolError as error:
            refused = error
        if refused is not None:
            assert position != "while a response is open", f"{where}: {refused}"
            assert seen + list(refused.events) == before, f"{where}: events lost"
            assert end > len(case.prefix), f"{where}: refused before the event"
            with pytest.raises(ProtocolError):
                adapter.feed(wire.ending)
            adapter.close()
            return
        violated = _violation(events)
        if violated is not None:
            assert position == "while a response is open", f"{where}: {events}"
            assert seen + events[:violated] == before, f"{where}: events lost"
            assert end > len(case.prefix), f"{where}: ended before the event"
            return
        seen += events
        # A chunk that held the byte taking the event past the limit had to say so.
        assert end < case.crossing, f"{where}: nothing said by byte {end}"
        start = end
    raise AssertionError(f"{where}: the event was passed over unsaid")


def _violation(events: Sequence[Event]) -> int | None:
    violation = ResponseEndReason.PROTOCOL_VIOLATION
    for index, event in enumerate(events):
        if isinstance(event, ResponseEnded) and event.reason is violation:
            return index
    return None


class EventLimitContract:
    """The event-limit contract through one adapter; ``wire`` is the subclass's to give."""

    @pytest.fixture
    def wire(self) -> LimitWire:
        """The wire format of the adapter under test."""
        raise NotImplementedError("an EventLimitContract subclass gives the wire fixture")

    @pytest.mark.parametrize("position", POSITIONS)
    def test_an_event_past_the_limit_is_never_passed_over(
        self, wire: LimitWire, position: str
    ) -> None:
        """Every shape, past each limit by a unit to three times the limit, split whole, either
        side of the crossing byte, a byte at a time and at random: the open response ends as a
        protocol violation, or ``ProtocolError`` is raised where none is open, in the chunk
        that takes the event past the limit, and nothing before it is lost."""
        for shape in [each.shape for each in wire.oversized(LIMITS[0], 1)]:
            for number, case in enumerate(_cases(wire, position, shape)):
                for split in _splits(case, seed=number):
                    _check(wire, position, case, split)

    def test_an_event_of_exactly_the_limit_is_read(self, wire: LimitWire) -> None:
        """An event of exactly the limit is no refusal, and the response after it (the event
        that follows its blank line included) is read whole, however the body is split."""
        for limit in LIMITS:
            body = wire.preamble + wire.fitting(limit) + wire.opening + wire.ending
            whole = wire.adapter(limit).feed(body)
            assert any(isinstance(event, ResponseEnded) for event in whole), limit
            assert _violation(whole) is None, whole
            adapter = wire.adapter(limit)
            pieces = [adapter.feed(body[start : start + 1]) for start in range(len(body))]
            assert [event for piece in pieces for event in piece] == whole

    def test_a_refused_stream_stays_refused(self, wire: LimitWire) -> None:
        """After ``ProtocolError`` nothing more is read: every feed raises it again, decoded
        events too, and ``close`` ends the adapter without an event."""
        limit = LIMITS[0]
        [event, *_] = wire.oversized(limit, 1)
        adapter = wire.adapter(limit)
        with pytest.raises(ProtocolError) as refused:
            adapter.feed(event.data)
        assert refused.value.events == ()
        assert str(limit) in str(refused.value)
        for _ in range(2):
            with pytest.raises(ProtocolError):
                adapter.feed(wire.opening)
            with pytest.raises(ProtocolError):
                adapter.feed_event({})
        assert adapter.close() == []
