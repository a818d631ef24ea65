"""Repartitioning: a copy of a log, offline, into an empty log of another number of partitions.

Every event goes to its conversation's partition of the copy (by ``partition_of``, the log's
partition rule), found from its stream: a turn's, a lease's, a call's and a request's stream
name their tenant and conversation; a response's stream names its tenant and response, and its
events (or another stream of a call of that response) name the conversation. The streams of
controls and heartbeats, and any stream of another kind, go to the control partition. A stream
moves whole and in order, so it keeps its versions; every event keeps its id, the time it was
recorded, its payload or what redaction left of it (a redacted payload is copied redacted, never
the bytes it had), its digest and its trace context; it takes a new position. A decision names
the position of the input it answers (``cause``): where that input moved, the decision is
written naming its new position (its payload, or its remains, encoded again).

An operator control is a barrier. A partitioned log holds each control in its control partition
and a copy in each partition a process folded (the same event, under the id ``control:ID``),
where the control took effect there. The copy is written so that each partition of the source
keeps its events on the same side of every control: the events of every source partition that
come before a control's copy (or before the control, in a log of one partition) are written
before it, those after it after it. The control goes to the control partition, and a copy to each
partition of calls of the copy (none to a log of one partition, whose control partition holds
the calls). Snapshots are not copied: a runtime makes them again.

The copy takes the source's identity and secret (the digests in its events are keyed by them):
it is the same log, laid out anew. Where a stream goes (``Survey``, ``target_of``), a control's
copies and a decision's new cause are pure; ``repartition`` reads and writes.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from urllib.parse import unquote

import attrs
from attrs import frozen

from ..events._base import registered_event_types
from ..events._catalog import DECISION_TYPES, OperatorControl, response_of
from ..events._codec import Codec
from ..events._errors import LogError
from ..events._recorded import Redacted
from ._log import Log
from ._partitions import CONTROL_COPY, CONTROL_PARTITION, MAX_PARTITIONS, partition_of
from ._records import StoredRecord, check_page, decode_record

READ_PAGE = 1024
"""Rows read from a source partition at a time, and rows written to a target one at a time."""

_CONVERSATION_KINDS = frozenset({"turn", "lease", "call", "request"})
_DECISION_TAGS = frozenset(cls.TAG for cls in DECISION_TYPES)
_CONTROL_TYPES = frozenset(
    tag for tag, cls in registered_event_types().items() if issubclass(cls, OperatorControl)
)

Conversation = tuple[str, str]
"""A tenant and a conversation."""


def conversation_named(stream: str) -> Conversation | None:
    """The tenant and conversation a turn's, lease's, call's or request's stream names."""
    kind, _, rest = stream.partition("/")
    if kind not in _CONVERSATION_KINDS:
        return None
    parts = rest.split("/")
    if len(parts) < 3:
        return None
    return unquote(parts[0], errors="strict"), unquote(parts[1], errors="strict")


def _response_named(stream: str) -> tuple[str, str] | None:
    """The tenant and response a response's stream names (as they are written in it)."""
    kind, _, rest = stream.partition("/")
    parts = rest.split("/")
    return (parts[0], parts[1]) if kind == "response" and len(parts) == 2 else None


def is_control(row: StoredRecord) -> bool:
    """Whether the row holds an operator control (an original or a partition's copy)."""
    return row.event_type in _CONTROL_TYPES


def control_id(row: StoredRecord) -> str:
    """The event id of the control a row of a control holds, a copy's included."""
    return row.event_id.removeprefix(CONTROL_COPY)


class Survey:
    """What a first read of the source finds: the conversation of each stream (``None``: the
    control partition's) and the controls of the control partition, in order. Fed the rows of
    every source partition, the control partition first."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self.homes: dict[str, Conversation | None] = {}
        self.controls: list[str] = []
        # A response's stream whose events name no conversation (all of them redacted
        # without remains) is placed by a call of that response.
        self._unplaced: dict[tuple[str, str], str] = {}
        self._responses: dict[tuple[str, str], Conversation] = {}

    def add(self, partition: int, row: StoredRecord) -> None:
        if is_control(row):
            if partition == CONTROL_PARTITION:
                self.controls.append(row.event_id)
            return
        stream = row.stream
        if stream in self.homes:
            return
        named = conversation_named(stream)
        if named is not None:
            self.homes[stream] = named
            kind, _, rest = stream.partition("/")
            if kind in ("call", "request"):
                parts = rest.split("/")
                self._responses.setdefault((parts[0], parts[3]), named)
            return
        response = _response_named(stream)
        if response is None:
            self.homes[stream] = None
            return
        found = self._conversation_in(row)
        if found is None:
            self._unplaced[response] = stream
        else:
            self.homes[stream] = found
            self._unplaced.pop(response, None)

    def _conversation_in(self, row: StoredRecord) -> Conversation | None:
        recorded = decode_record(self._codec, row)
        event = recorded.event
        if isinstance(event, Redacted):
            if event.remains is None:
                return None
            event = event.remains
        ref = response_of(event)
        return None if ref is None else (ref.tenant, ref.conversation)

    def finish(self) -> dict[str, Conversation | None]:
        """Each stream's conversation; ``LogError`` naming a response's stream that nothing
        left in the log places."""
        for response, stream in self._unplaced.items():
            found = self._responses.get(response)
            if found is None:
                raise LogError(
                    f"no event left of stream {stream!r} names its conversation (its payloads"
                    " were redacted whole), nor does a call of that response: it cannot be"
                    " placed in a partition"
                )
            self.homes[stream] = found
        return self.homes


def target_of(homes: dict[str, Conversation | None], stream: str, partitions: int) -> int:
    """The partition of the copy a stream goes to."""
    home = homes[stream]
    return CONTROL_PARTITION if home is None else partition_of(*home, partitions)


def control_copies(original: StoredRecord, partitions: int) -> Iterator[tuple[int, StoredRecord]]:
    """A control as the copy holds it: itself in the control partition, and a copy (the id a
    partitioned runtime gives the copies) in each partition of calls of a partitioned copy."""
    yield CONTROL_PARTITION, original
    if partitions > 1:
        copy = original._replace(event_id=CONTROL_COPY + original.event_id)
        for number in range(1, partitions + 1):
            yield number, copy


@frozen(kw_only=True)
class Repartitioned:
    """What a repartition copied: rows read from each source partition, rows written to each
    target partition, the controls among them (each once, with its copies) and the decisions
    whose cause moved to another position."""

    read: dict[int, int]
    written: dict[int, int]
    controls: int
    causes_moved: int


_CONTROL = -1
"""Where a control (or a partition's copy of it) of the source went: to every partition."""
_SLOTS = 8192
"""Each row of the source is placed at ``position * _SLOTS + partition`` in the copy."""
assert _SLOTS > MAX_PARTITIONS


class _Cursor:
    """The rows of one source partition, a page at a time, and where each row read went."""

    def __init__(self, log: Log, number: int) -> None:
        self.log = log
        self.number = number
        self._page: list[StoredRecord] = []
        self._index = 0
        self._next = 1
        self.done = False
        self.placed = array("q")
        """Per row read (by position), where it went in the copy."""
        self.controls: dict[int, str] = {}
        """The control each row of a control held, by position."""

    @property
    def read(self) -> int:
        return len(self.placed)

    async def head(self) -> StoredRecord | None:
        if self._index == len(self._page) and not self.done:
            self._page = await self.log._read_rows(self._next, READ_PAGE)
            check_page(self._page, self._next)
            self._index = 0
            self._next += len(self._page)
            self.done = not self._page
        return None if self.done else self._page[self._index]

    def advance(self, placed: int) -> None:
        self._index += 1
        self.placed.append(placed)

    def advance_control(self, control: str) -> None:
        self.controls[len(self.placed) + 1] = control
        self.advance(_CONTROL)


class _Writer:
    """Rows for the target's partitions, written a page at a time, each where it is due."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.written: dict[int, int] = {}
        self._due: dict[int, list[StoredRecord]] = {}

    async def add(self, number: int, row: StoredRecord) -> int:
        """Write the row to a partition of the copy (soon); its position there."""
        due = self._due.setdefault(number, [])
        due.append(row)
        position = self.written.get(number, 0) + len(due)
        if len(due) >= READ_PAGE:
            await self.flush(number)
        return position

    async def flush(self, number: int) -> None:
        rows = self._due.pop(number, [])
        if not rows:
            return
        first = self.written.get(number, 0) + 1
        positions = await self.log.partition(number)._restore(rows)
        if positions != list(range(first, first + len(rows))):
            repeated = next(
                row
                for index, (row, at) in enumerate(zip(rows, positions, strict=True))
                if at != first + index
            )
            raise LogError(
                f"event id {repeated.event_id!r} comes twice into partition {number} of the copy"
                " (two partitions of the source hold it): the copy is not the source"
            )
        self.written[number] = first - 1 + len(rows)

    async def flush_all(self) -> None:
        for number in sorted(self._due):
            await self.flush(number)


def with_cause(row: StoredRecord, codec: Codec, cause: int) -> StoredRecord:
    """A decision's row answering the input at position ``cause`` (where the copy holds the
    input it answered): its payload, or what redaction left of it, encoded again. A payload
    redacted whole keeps nothing to change."""
    event = decode_record(codec, row).event
    changes: dict[str, object] = {"cause": cause}
    if isinstance(event, Redacted):
        if event.remains is None:
            return row
        _, version, remains = codec.encode(attrs.evolve(event.remains, **changes))
        return row._replace(schema_version=version, payload=remains)
    _, version, payload = codec.encode(attrs.evolve(event, **changes))
    return row._replace(schema_version=version, payload=payload, payload_length=len(payload))


def cause_of(row: StoredRecord, codec: Codec) -> int | None:
    """The position of the input a decision's row answers, as far as the row still tells."""
    if row.event_type not in _DECISION_TAGS:
        return None
    event = decode_record(codec, row).event
    kept = event.remains if isinstance(event, Redacted) else event
    cause = getattr(kept, "cause", None)
    return cause if isinstance(cause, int) else None


class _Copy:
    """The copy under way: where each control went, and the decisions whose cause moved."""

    def __init__(self, source: Log, target: Log, homes: dict[str, Conversation | None]) -> None:
        self.codec = source.codec
        self.homes = homes
        self.partitions = target.partitions
        self.writer = _Writer(target)
        self.controls_at: dict[str, dict[int, int]] = {}
        self.causes_moved = 0

    async def row(self, cursor: _Cursor, row: StoredRecord) -> None:
        """Copy a row that is no control to its conversation's partition."""
        number = target_of(self.homes, row.stream, self.partitions)
        cause = cause_of(row, self.codec)
        if cause is not None:
            moved = self._placed(cursor, cause, number, row)
            if moved != cause:
                row = with_cause(row, self.codec, moved)
                self.causes_moved += 1
        position = await self.writer.add(number, row)
        cursor.advance(position * _SLOTS + number)

    def _placed(self, cursor: _Cursor, cause: int, number: int, row: StoredRecord) -> int:
        """Where the copy holds the input at position ``cause`` of the cursor's partition, in
        partition ``number`` of the copy, where the decision ``row`` answering it goes."""
        placed = cursor.placed[cause - 1] if 0 < cause <= len(cursor.placed) else None
        if placed == _CONTROL:
            found = self.controls_at.get(cursor.controls[cause], {}).get(number)
        elif placed is not None and placed % _SLOTS == number:
            found = placed // _SLOTS
        else:
            found = None
        if found is None:
            raise LogError(
                f"the decision at position {row.position} of partition {cursor.number} of the"
                f" source answers position {cause}, which the copy does not hold in the"
                f" decision's partition ({number})"
            )
        return found

    async def control(self, original: StoredRecord) -> None:
        """Copy a control: itself, and its copies where the copy has partitions of calls."""
        self.controls_at[original.event_id] = {
            number: await self.writer.add(number, row)
            for number, row in control_copies(original, self.partitions)
        }


async def survey(source: Log) -> Survey:
    """Read the source once: where each stream goes, and its controls in order."""
    found = Survey(source.codec)
    for number in sorted({CONTROL_PARTITION, *source.call_partitions()}):
        cursor = _Cursor(source.partition(number), number)
        while (row := await cursor.head()) is not None:
            found.add(number, row)
            cursor.advance(0)
    found.finish()
    return found


async def repartition(source: Log, target: Log) -> Repartitioned:
    """Copy ``source`` into ``target``, an empty log of any number of partitions, which takes the
    source's identity and secret first. The source is only read."""
    for number in sorted({CONTROL_PARTITION, *target.call_partitions()}):
        if await target.partition(number).head():
            raise LogError(
                f"the target log holds events (partition {number}): a repartition copies into an"
                " empty log only"
            )
    found = await survey(source)
    await target._adopt_identity(source.identity, source._secret)
    cursors = [
        _Cursor(source.partition(number), number)
        for number in sorted({CONTROL_PARTITION, *source.call_partitions()})
    ]
    copy = _Copy(source, target, found.homes)
    originals: dict[str, StoredRecord] = {}
    known = set(found.controls)
    for control in [*found.controls, None]:
        # Every partition up to its copy of the control (or a later control, or its end), then
        # the control.
        for cursor in cursors:
            while (row := await cursor.head()) is not None:
                if not is_control(row):
                    await copy.row(cursor, row)
                    continue
                copied = control_id(row)
                if copied not in known:
                    raise LogError(
                        f"partition {cursor.number} of the source holds a copy of control"
                        f" {copied!r}, which its control partition does not hold"
                    )
                if copied in copy.controls_at:
                    cursor.advance_control(copied)
                    continue
                if copied == control:
                    if cursor.number == CONTROL_PARTITION:
                        originals[copied] = row
                    cursor.advance_control(copied)
                # What follows comes after this control (or a later one).
                break
        if control is not None:
            await copy.control(originals.pop(control))
    await copy.writer.flush_all()
    return Repartitioned(
        read={cursor.number: cursor.read for cursor in cursors},
        written={
            number: copy.writer.written.get(number, 0)
            for number in sorted({CONTROL_PARTITION, *target.call_partitions()})
        },
        controls=len(found.controls),
        causes_moved=copy.causes_moved,
    )
