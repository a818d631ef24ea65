"""The private buffer of one call's argument bytes: where a fragment fits, and what is held.

Two kinds of fragments meet here, never in one call:

- A positioned fragment (``offset`` given; every adapter writes them) is the call's bytes
  ``[offset, offset + len(data))``. What is stored is a prefix of the call's bytes and, past a
  gap, parts that arrived early. A fragment whose range lies inside what is stored adds nothing:
  a duplicate, however differently it was chunked. Wherever it overlaps stored bytes they must be
  equal (a conflict otherwise); the bytes it adds are appended to the prefix, or held past the
  gap until the bytes before them arrive. Sequences are kept for the gap check at the end.
- An unpositioned fragment (schema 1, or an event built without an offset) is placed by its
  first sequence, or after the fragments before it where it has no sequence. One whose sequences
  were all seen is a duplicate; one that overlaps sequences seen is an overlap.

Buffers are values: adding a fragment makes a new buffer. A positioned buffer's prefix lives in
a bytearray that successive buffers share and extend in place while they are one line of
succession (the fold's case), so that appending costs the bytes appended and comparing an
overlap costs the bytes compared; a buffer extended from an older one copies its prefix first,
so that no buffer ever sees bytes another one added.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Sequence
from typing import NamedTuple

from ..events import ArgumentsAppended

Ranges = tuple[tuple[int, int], ...]


class Fit(enum.Enum):
    """Where a fragment fits in a call's buffer."""

    NEW = "new"
    """It adds bytes (or waits past a gap for the bytes before it)."""
    DUPLICATE = "duplicate"
    """It adds nothing: its bytes (or, unpositioned, its sequences) were stored already."""
    OVERLAP = "overlap"
    """Unpositioned: its sequences overlap sequences seen, without being all of them."""
    MIXED = "mixed"
    """Numbered beside unnumbered, or positioned beside unpositioned, in one call."""
    CONFLICT = "conflict"
    """Positioned: a byte it overlaps differs from the byte stored there."""
    REPLAYED = "replayed"
    """Positioned: it would add bytes under sequences that were all seen already."""


def _sequences(fragment: ArgumentsAppended) -> tuple[int, int]:
    assert fragment.first_sequence is not None
    assert fragment.last_sequence is not None
    return fragment.first_sequence, fragment.last_sequence


def _merge(ranges: Ranges, first: int, last: int) -> Ranges:
    if ranges and first == ranges[-1][1] + 1:
        # The usual case: the next fragment in order extends the last range.
        return (*ranges[:-1], (ranges[-1][0], last))
    merged: list[tuple[int, int]] = []
    for low, high in sorted((*ranges, (first, last))):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return tuple(merged)


def _covered(ranges: Ranges, first: int, last: int) -> bool:
    return any(low <= first and last <= high for low, high in ranges)


class Counts(NamedTuple):
    """What a buffer of either kind counts of the fragments it took."""

    fragments: int = 0
    """Provider fragments accepted (a coalesced event counts the fragments it joined)."""
    size: int = 0
    """Bytes stored."""
    ranges: Ranges = ()
    """Sequences seen, merged into ranges."""
    numbered: bool | None = None


NO_COUNTS = Counts()


class Buffer:
    """What every buffer knows: fragments, sequences seen, bytes stored. Empty as itself."""

    __slots__ = ("fragments", "numbered", "ranges", "size")

    def __init__(self, counts: Counts = NO_COUNTS) -> None:
        self.fragments, self.size, self.ranges, self.numbered = counts

    @property
    def positioned(self) -> bool | None:
        """Whether the call's fragments carry offsets (``None`` before the first one)."""
        return None

    @property
    def end(self) -> int:
        """One past the furthest byte stored: the offset the next fragment in order takes."""
        return self.size

    @property
    def holds_bytes(self) -> bool:
        """Whether it holds argument bytes (a buffer ``without_data`` holds only counts)."""
        return False

    # The empty buffer takes the kind of the first fragment; the kinds override these.

    def fit(self, fragment: ArgumentsAppended) -> Fit:
        """Where the fragment fits (for a call still collecting)."""
        return _empty_for(fragment).fit(fragment)

    def covers(self, fragment: ArgumentsAppended) -> bool:
        """Whether the fragment was delivered already, judged without the bytes (which a call
        past collecting no longer holds): its range, or unpositioned its sequences, seen."""
        return False

    def needed(self, fragment: ArgumentsAppended) -> int:
        """The fewest bytes the call's arguments have once the fragment is added."""
        return _empty_for(fragment).needed(fragment)

    def added(self, fragment: ArgumentsAppended) -> int:
        """How many bytes the fragment would add to what is stored."""
        return _empty_for(fragment).added(fragment)

    def add(self, fragment: ArgumentsAppended) -> Buffer:
        """The buffer with a fragment that fits as ``NEW``."""
        return _empty_for(fragment).add(fragment)

    def gap(self, opened: int | None, terminal: int | None) -> str | None:
        """The first sequence number (or byte) missing between the opening and the end, if any."""
        first_seen = self.ranges[0][0] if self.ranges else None
        last_seen = self.ranges[-1][1] if self.ranges else None
        start = opened + 1 if opened is not None else first_seen
        end = terminal - 1 if terminal is not None else last_seen
        if self.numbered is False or start is None or end is None:
            return None
        if not self.ranges:
            return f"sequences {start}..{end} never arrived" if end >= start else None
        low, high = self.ranges[0]
        if low > start:
            return f"sequence {start} never arrived"
        if len(self.ranges) > 1:
            return f"sequence {high + 1} never arrived"
        if high > end:
            return f"sequence {high} came after the end event's {end + 1}"
        if high < end:
            return f"sequence {high + 1} never arrived"
        return None

    def assembled(self) -> bytes:
        """The call's bytes in order (only once ``gap`` found none)."""
        return b""

    def without_data(self) -> Buffer:
        """The same record of sequences, ranges and counts, with the bytes dropped."""
        return self

    @property
    def prefix_only(self) -> bool:
        """Whether the bytes it holds are ``assembled()`` alone: a positioned buffer holding
        nothing past a gap, which ``without_data`` and ``with_prefix`` take apart and back."""
        return False

    def with_prefix(self, data: bytes) -> Buffer:
        """The buffer this one was ``without_data`` of, given what ``assembled()`` gave; a
        ``ValueError`` if those cannot be its bytes."""
        raise ValueError(f"a {type(self).__name__} holds no prefix of bytes")

    def _counts(self, fragment: ArgumentsAppended, added: int) -> Counts:
        ranges = self.ranges
        if fragment.first_sequence is not None:
            ranges = _merge(ranges, *_sequences(fragment))
        return Counts(
            self.fragments + fragment.fragments,
            self.size + added,
            ranges,
            fragment.first_sequence is not None,
        )

    def _kept(self) -> Counts:
        return Counts(self.fragments, self.size, self.ranges, self.numbered)

    def _key(self) -> tuple[object, ...]:
        return (type(self), self.fragments, self.size, self.ranges, self.numbered)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Buffer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"{type(self).__name__}(fragments={self.fragments}, size={self.size})"


EMPTY_BUFFER = Buffer()


def _empty_for(fragment: ArgumentsAppended) -> Buffer:
    return RangeBuffer() if fragment.offset is not None else SequencedBuffer()


# --- unpositioned fragments (placed by sequence) ------------------------------------------------


_Parts = tuple[object, int, bytes] | tuple[()]
"""The fragments as a persistent chain, newest first: ``(earlier parts, order, data)``.

Appending in order, the usual case, is then O(1) without copying what came before."""


def _chain(parts: list[tuple[int, bytes]]) -> _Parts:
    chain: _Parts = ()
    for order, data in parts:
        chain = (chain, order, data)
    return chain


def links_of(chain: _Parts) -> list[int | bytes]:
    """The fragments of a chain, oldest first, flat: order, data, order, data..."""
    return [link for order, data in _unchain(chain) for link in (order, data)]


def chain_of(links: Sequence[object]) -> _Parts:
    """The chain ``links_of`` made flat; ``ValueError`` for anything else."""
    orders, parts = links[::2], links[1::2]
    if len(orders) != len(parts):
        raise ValueError("the links of a chain are pairs of an order and its bytes")
    if any(type(order) is not int for order in orders) or any(
        type(part) is not bytes for part in parts
    ):
        raise ValueError("the links of a chain are pairs of an order and its bytes")
    return _chain(list(zip(orders, parts, strict=True)))  # type: ignore[arg-type]


def _unchain(chain: _Parts) -> list[tuple[int, bytes]]:
    parts: list[tuple[int, bytes]] = []
    while chain:
        earlier, order, data = chain
        parts.append((order, data))
        chain = earlier  # type: ignore[assignment]
    parts.reverse()
    return parts


class SequencedBuffer(Buffer):
    """Unpositioned fragments: numbered ones ordered by their first sequence, unnumbered ones by
    arrival."""

    __slots__ = ("count", "parts")

    def __init__(self, parts: _Parts = (), count: int = 0, counts: Counts = NO_COUNTS) -> None:
        super().__init__(counts)
        self.parts = parts
        self.count = count

    @property
    def positioned(self) -> bool:
        return False

    @property
    def holds_bytes(self) -> bool:
        return bool(self.parts)

    def fit(self, fragment: ArgumentsAppended) -> Fit:
        numbered = fragment.first_sequence is not None
        if fragment.offset is not None or (self.numbered is not None and numbered != self.numbered):
            return Fit.MIXED
        if not numbered:
            return Fit.NEW
        first, last = _sequences(fragment)
        for low, high in self.ranges:
            if low <= first and last <= high:
                return Fit.DUPLICATE
            if first <= high and last >= low:
                return Fit.OVERLAP
        return Fit.NEW

    def covers(self, fragment: ArgumentsAppended) -> bool:
        if fragment.first_sequence is None:
            return False
        return _covered(self.ranges, *_sequences(fragment))

    def needed(self, fragment: ArgumentsAppended) -> int:
        return self.size + len(fragment.data)

    def added(self, fragment: ArgumentsAppended) -> int:
        return len(fragment.data)

    def add(self, fragment: ArgumentsAppended) -> SequencedBuffer:
        if fragment.first_sequence is None:
            parts: _Parts = (self.parts, self.count, fragment.data)
        else:
            first, _ = _sequences(fragment)
            if not self.parts or first > self.parts[1]:
                parts = (self.parts, first, fragment.data)
            else:
                # Out of order: rare, so the chain is rebuilt rather than kept sorted.
                earlier = _unchain(self.parts)
                index = bisect.bisect(earlier, first, key=lambda item: item[0])
                earlier.insert(index, (first, fragment.data))
                parts = _chain(earlier)
        return SequencedBuffer(parts, self.count + 1, self._counts(fragment, len(fragment.data)))

    def assembled(self) -> bytes:
        return b"".join(data for _, data in _unchain(self.parts))

    def without_data(self) -> SequencedBuffer:
        return SequencedBuffer((), self.count, self._kept())


# --- positioned fragments (placed by byte range) ------------------------------------------------


Held = tuple[tuple[int, bytes], ...]
"""Parts past a gap, by offset; never overlapping, never touching, each after a gap."""


class RangeBuffer(Buffer):
    """Positioned fragments: a prefix of the call's bytes, and parts held past a gap."""

    __slots__ = ("data", "held", "prefix")

    def __init__(
        self,
        data: bytearray | None = None,
        prefix: int = 0,
        held: Held = (),
        counts: Counts = NO_COUNTS,
    ) -> None:
        super().__init__(counts)
        self.data = bytearray() if data is None else data
        """The prefix, shared with the buffers this one came from and goes to (see above)."""
        self.prefix = prefix
        """How many bytes of ``data`` are this buffer's: the call's bytes from 0 with no gap."""
        self.held = held

    @property
    def positioned(self) -> bool:
        return True

    @property
    def holds_bytes(self) -> bool:
        return bool(self.data) or bool(self.held)

    @property
    def end(self) -> int:
        if self.held:
            offset, data = self.held[-1]
            return offset + len(data)
        return self.prefix

    def fit(self, fragment: ArgumentsAppended) -> Fit:
        numbered = fragment.first_sequence is not None
        if fragment.offset is None or (self.numbered is not None and numbered != self.numbered):
            return Fit.MIXED
        start = fragment.offset
        data = fragment.data
        stop = start + len(data)
        if start < self.prefix:
            overlap = min(stop, self.prefix)
            if self.data[start:overlap] != data[: overlap - start]:
                return Fit.CONFLICT
        for offset, part in self.held:
            low, high = max(start, offset), min(stop, offset + len(part))
            if low >= high:
                continue
            if part[low - offset : high - offset] != data[low - start : high - start]:
                return Fit.CONFLICT
        if self._inside(start, stop):
            return Fit.DUPLICATE
        if numbered and _covered(self.ranges, *_sequences(fragment)):
            return Fit.REPLAYED
        return Fit.NEW

    def _inside(self, start: int, stop: int) -> bool:
        if stop <= self.prefix:
            return True
        rest = max(start, self.prefix)
        return any(offset <= rest and stop <= offset + len(part) for offset, part in self.held)

    def covers(self, fragment: ArgumentsAppended) -> bool:
        if fragment.offset is None:
            return False
        return self._inside(fragment.offset, fragment.offset + len(fragment.data))

    def needed(self, fragment: ArgumentsAppended) -> int:
        # Every byte stored and added lies below the larger of the two ends.
        assert fragment.offset is not None
        return max(self.end, fragment.offset + len(fragment.data))

    def added(self, fragment: ArgumentsAppended) -> int:
        if fragment.offset is None:
            return len(fragment.data)
        start = max(fragment.offset, self.prefix)
        stop = fragment.offset + len(fragment.data)
        if stop <= start:
            return 0
        stored = sum(
            max(0, min(stop, offset + len(part)) - max(start, offset)) for offset, part in self.held
        )
        return stop - start - stored

    def add(self, fragment: ArgumentsAppended) -> RangeBuffer:
        assert fragment.offset is not None
        added = self.added(fragment)
        start, data = fragment.offset, fragment.data
        prefix, held = self.prefix, self.held
        if start > prefix:
            held = _hold(held, start, data)
            suffix = b""
        else:
            suffix = data[prefix - start :]
        # Held parts the prefix now reaches join it (their overlap was found equal by ``fit``).
        reach = prefix + len(suffix)
        joined = [suffix]
        while held and held[0][0] <= reach:
            offset, part = held[0]
            joined.append(part[reach - offset :])
            reach = max(reach, offset + len(part))
            held = held[1:]
        shared = self.data
        if len(shared) != prefix:
            # Another buffer extended this prefix already: this line of succession copies it.
            shared = bytearray(shared[:prefix])
        for piece in joined:
            shared += piece
        return RangeBuffer(shared, len(shared), held, self._counts(fragment, added))

    def gap(self, opened: int | None, terminal: int | None) -> str | None:
        missing = super().gap(opened, terminal)
        if missing is not None or not self.held:
            return missing
        return f"bytes {self.prefix}..{self.held[0][0] - 1} never arrived"

    def assembled(self) -> bytes:
        return bytes(self.data[: self.prefix])

    def without_data(self) -> RangeBuffer:
        # The prefix length stays: it tells a late delivery of bytes seen from new ones.
        return RangeBuffer(bytearray(), self.prefix, (), self._kept())

    @property
    def prefix_only(self) -> bool:
        return not self.held

    def with_prefix(self, data: bytes) -> RangeBuffer:
        if self.data or self.held or len(data) != self.prefix:
            raise ValueError(
                f"{len(data)} bytes are not the prefix of {self.prefix} of a buffer without data"
            )
        return RangeBuffer(bytearray(data), self.prefix, (), self._kept())

    def _key(self) -> tuple[object, ...]:
        return (*super()._key(), self.prefix, bytes(self.data[: self.prefix]), self.held)


def _hold(held: Held, start: int, data: bytes) -> Held:
    """The held parts with ``data`` at ``start`` joined to those it overlaps or touches."""
    if not data:
        return held
    stop = start + len(data)
    parts = list(held)
    index = bisect.bisect_left(parts, start, key=lambda part: part[0] + len(part[1]))
    low, high = start, stop
    pieces = [(start, data)]
    while index < len(parts) and parts[index][0] <= stop:
        offset, part = parts.pop(index)
        low, high = min(low, offset), max(high, offset + len(part))
        pieces.append((offset, part))
    # Overlapping pieces agree (``fit`` found no conflict), so the order of writing is free.
    whole = bytearray(high - low)
    for offset, piece in pieces:
        whole[offset - low : offset - low + len(piece)] = piece
    parts.insert(index, (low, bytes(whole)))
    return tuple(parts)
