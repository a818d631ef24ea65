"""What the log stores and hands back, and the append rules every backend shares.

Backends differ only in where rows live and how they are made durable. Which events of a batch
are new, which are re-appends of stored events, what position and version each new event gets,
and whether the expected versions hold, is decided here, once, by pure code.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import secrets
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import msgpack
from attrs import field, frozen, validators

from ..events._base import Event, TraceContext, registered_event_types
from ..events._codec import Codec
from ..events._errors import ConflictError, DuplicateEventError, InertError, LogDamaged, LogError
from ..events._identity import CallKey
from ..events._recorded import RecordedEvent, Redacted, recorded_event_maker
from ..events._structure import GIVE_UP

NO_STREAM = 0
"""The expected version of a stream that has no events yet."""


class _EventIds:
    """Event ids unique across processes and increasing within one.

    A random 64-bit prefix per process (drawn again in a forked child) and a counter: cheaper to
    make than a UUID, and ids that increase land at the right edge of the log's id index instead
    of anywhere in it, which keeps group-commit inserts fast.
    """

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = secrets.token_hex(8)
        self._counter = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


new_event_id = _EventIds()
"""A fresh event id (callers that need determinism pass their own)."""


@frozen(kw_only=True)
class NewEvent:
    """An event to append to a stream, with the id that makes its append idempotent."""

    stream: str = field(validator=validators.min_len(1))
    event: Event
    event_id: str = field(factory=new_event_id, validator=validators.min_len(1))
    trace: TraceContext | None = None


# Rows are named tuples rather than attrs classes: they are made once per appended event on the
# hot path of group commit, and a tuple in column order goes to sqlite3 as it is.


class PendingRecord(NamedTuple):
    """An encoded event waiting for its position and version."""

    event_id: str
    stream: str
    event_type: str
    schema_version: int
    payload: bytes
    traceparent: str | None
    tracestate: str | None
    call: str | None = None
    """The stream of the call whose argument bytes the payload holds (an event of a type that
    names ``SENSITIVE`` fields), for a backend that seals them by call."""
    restored: StoredRecord | None = None
    """The row of another log of the same identity this event is copied from (``Log._restore``):
    its row keeps that row's columns (time, payload or what redaction left of it, digest, trace)
    and takes a position and version here."""


class StoredRecord(NamedTuple):
    """One row of the log, in column order.

    ``digest`` is set when the payload is redacted and ``None`` before (the payload itself is the
    proof of content until then). Once redacted, ``payload`` holds what remains of the event (see
    ``redaction``) or ``None``, and ``schema_version`` is that of the remains.

    ``checksum`` covers every other column (``row_checksum``): set when the row is planned,
    set again when retention redacts it, checked whenever it is read.
    """

    position: int
    event_id: str
    stream: str
    version: int
    recorded_at: int
    event_type: str
    schema_version: int
    payload: bytes | None
    payload_length: int
    digest: bytes | None
    traceparent: str | None
    tracestate: str | None
    checksum: int


_CHECKED_COLUMNS = len(StoredRecord._fields) - 1


def row_checksum(columns: Sequence[object]) -> int:
    """The CRC-32 of a row's columns but the checksum itself, serialised by MessagePack (which
    tells text from bytes and ``None`` from empty): a damaged byte, a swapped column or a row
    moved to another position fails it. It detects damage; it is no signature."""
    return zlib.crc32(msgpack.packb(tuple(columns[:_CHECKED_COLUMNS])))


def with_checksum(columns: Sequence[object]) -> StoredRecord:
    """A row of the checked columns (a row of a log written before rows had checksums, or one
    just changed) with its checksum."""
    checked = tuple(columns[:_CHECKED_COLUMNS])
    return StoredRecord(*checked, zlib.crc32(msgpack.packb(checked)))  # type: ignore[arg-type, call-arg]


def check_row(row: StoredRecord) -> None:
    """Raise ``LogDamaged`` unless the row's checksum holds."""
    if zlib.crc32(msgpack.packb(row[:_CHECKED_COLUMNS])) != row.checksum:
        raise LogDamaged(
            row.position, f"the checksum of the row of event id {row.event_id!r} fails"
        )


def check_page(rows: Sequence[StoredRecord], first_position: int) -> None:
    """Check the rows of a read from ``first_position``: each checksum, and positions that
    follow each other from there without a gap."""
    expected = first_position
    for row in rows:
        if row.position != expected:
            raise LogDamaged(
                expected, f"the position is missing (the next row read is at {row.position})"
            )
        check_row(row)
        expected += 1


def check_stream_page(rows: Sequence[StoredRecord], stream: str, first_version: int) -> None:
    """Check the rows of a read of one stream from ``first_version``: each checksum, and
    versions that follow each other from there without a gap, at increasing positions."""
    expected = first_version
    position = 0
    for row in rows:
        if row.version != expected or row.stream != stream or row.position <= position:
            raise LogDamaged(
                row.position,
                f"stream {stream!r} lacks version {expected} (the row read is version"
                f" {row.version} of {row.stream!r})",
            )
        check_row(row)
        expected += 1
        position = row.position


PAYLOAD_DIGEST_KEY = "payload digest"
"""The purpose the log's key for the digests of redacted payloads is derived for."""


def payload_digest(payload: bytes, key: bytes = b"") -> bytes:
    """The digest that stands for a payload once it is redacted: an HMAC-SHA-256 keyed by the
    log (what stays after retention gives nothing back to one who tries candidates), or, for a
    log without a key, its SHA-256."""
    if key:
        return hmac.new(key, payload, hashlib.sha256).digest()
    return hashlib.sha256(payload).digest()


class Redaction(NamedTuple):
    """What redacting one payload leaves: the remains, at their schema version, and the digest."""

    schema_version: int
    payload: bytes | None
    digest: bytes


def redaction(
    codec: Codec, event_type: str, schema_version: int, payload: bytes, key: bytes = b""
) -> Redaction:
    """Redact one payload: an event type that names its ``SENSITIVE`` fields keeps the rest of
    the event (identities, counts, digests, reasons), those fields emptied; any other payload
    leaves only its digest. Pure, so that every backend redacts alike."""
    digest = payload_digest(payload, key)
    cls = registered_event_types().get(event_type)
    if cls is None or not cls.SENSITIVE:
        return Redaction(schema_version, None, digest)
    version, remains = codec.without_sensitive(event_type, schema_version, payload)
    return Redaction(version, remains, digest)


def call_of(row: StoredRecord, codec: Codec) -> CallKey | None:
    """The call a row's event is addressed to, as far as the row still tells: ``None`` for an
    event that names none, or one redacted without remains (nothing of it is left to say)."""
    if row.payload is None:
        return None
    key = getattr(codec.decode(row.event_type, row.schema_version, row.payload), "key", None)
    return key if isinstance(key, CallKey) else None


def reached(
    row: StoredRecord,
    codec: Codec,
    event_types: frozenset[str] | None,
    keys: frozenset[CallKey] | None,
) -> bool:
    """Whether a redaction of those event types (``None``: all) and of those calls' events
    (``None``: every event's) reaches a row not redacted yet."""
    if event_types is not None and row.event_type not in event_types:
        return False
    return keys is None or call_of(row, codec) in keys


def redacted(row: StoredRecord, codec: Codec, key: bytes = b"") -> StoredRecord:
    """The row with its payload redacted (unchanged if it is redacted already)."""
    if row.digest is not None or row.payload is None:
        return row
    check_row(row)
    done = redaction(codec, row.event_type, row.schema_version, row.payload, key)
    return with_checksum(
        row._replace(schema_version=done.schema_version, payload=done.payload, digest=done.digest)
    )


def encode_batch(codec: Codec, events: Iterable[NewEvent]) -> list[PendingRecord]:
    """Encode the events of an append; done by the appender, before any storage is touched."""
    records = []
    for new in events:
        if not isinstance(new, NewEvent):
            raise LogError(f"append takes NewEvent values, not {type(new).__name__}")
        tag, version, payload = codec.encode(new.event)
        trace = new.trace
        key = getattr(new.event, "key", None) if new.event.SENSITIVE else None
        records.append(
            PendingRecord(
                new.event_id,
                new.stream,
                tag,
                version,
                payload,
                trace.traceparent if trace else None,
                trace.tracestate if trace else None,
                key.stream if isinstance(key, CallKey) else None,
            )
        )
    return records


def restored_record(row: StoredRecord, codec: Codec) -> PendingRecord:
    """A row read (and checked) from another log, to append as it is (see
    ``PendingRecord.restored``): a payload of a type that names ``SENSITIVE`` fields is a call's,
    for a backend that seals payloads by call; a redacted one is sealed under nothing."""
    call = None
    if row.digest is None and row.payload is not None:
        cls = registered_event_types().get(row.event_type)
        if cls is not None and cls.SENSITIVE:
            key = call_of(row, codec)
            call = None if key is None else key.stream
    return PendingRecord(
        row.event_id,
        row.stream,
        row.event_type,
        row.schema_version,
        row.payload or b"",
        row.traceparent,
        row.tracestate,
        call,
        row,
    )


def check_expected_versions(expected_versions: Mapping[str, int] | None) -> dict[str, int]:
    checked: dict[str, int] = {}
    for stream, expected in (expected_versions or {}).items():
        if type(expected) is not int or expected < NO_STREAM:
            raise LogError(f"expected version of {stream!r} must be an int >= 0, not {expected!r}")
        checked[stream] = expected
    return checked


def _same_content(stored: StoredRecord, pending: PendingRecord, key: bytes) -> str | None:
    """Which part of a re-appended event differs from the stored one, if any (a payload
    redacted before digests were keyed bears its plain digest)."""
    if stored.stream != pending.stream:
        return "stream"
    if stored.event_type != pending.event_type:
        return "event type"
    if pending.restored is not None:
        return None if stored[6:12] == pending.restored[6:12] else "payload"
    if stored.digest is None:
        same_payload = stored.payload == pending.payload
    else:
        same_payload = stored.digest in (
            payload_digest(pending.payload, key),
            payload_digest(pending.payload),
        )
    return None if same_payload else "payload"


AppendRequest = tuple[Sequence[PendingRecord], Mapping[str, int]]
"""The encoded events of one append and its expected versions."""


@frozen(kw_only=True)
class GroupPlan:
    """The outcome of planning appends together: per append its positions or its error."""

    outcomes: list[list[int] | InertError]
    rows: list[StoredRecord]
    head: int


def plan_appends(
    requests: Sequence[AppendRequest],
    *,
    existing: dict[str, StoredRecord],
    stream_versions: dict[str, int],
    head: int,
    recorded_at: int,
    digest_key: bytes = b"",
) -> GroupPlan:
    """Plan appends one after the other against the current state of the log.

    ``existing`` holds the stored rows of those event ids of the appends that are already in
    the log, ``stream_versions`` the current version of every stream they touch or name
    (missing means empty), ``head`` the highest position; both dicts are updated with the rows
    planned, so that a later append of the group sees the earlier ones. Each append is atomic on
    its own: one that fails leaves no row and does not affect the others.

    Events already stored are not written again and keep their original position. When every
    event of an append is already stored it is the retry of an acknowledged append and succeeds
    without a version check; otherwise every expected version must hold. ``digest_key`` is the
    key the log's redacted payloads are digested with (a re-appended event's payload is
    compared by it).
    """
    outcomes: list[list[int] | InertError] = []
    rows: list[StoredRecord] = []
    for records, expected_versions in requests:
        try:
            positions, planned = _plan_one(
                records,
                expected_versions,
                existing=existing,
                stream_versions=stream_versions,
                head=head,
                recorded_at=recorded_at,
                digest_key=digest_key,
            )
        except InertError as error:
            outcomes.append(error)
            continue
        for row in planned:
            existing[row.event_id] = row
            stream_versions[row.stream] = row.version
        head += len(planned)
        rows.extend(planned)
        outcomes.append(positions)
    return GroupPlan(outcomes=outcomes, rows=rows, head=head)


def _plan_one(
    records: Sequence[PendingRecord],
    expected_versions: Mapping[str, int],
    *,
    existing: Mapping[str, StoredRecord],
    stream_versions: Mapping[str, int],
    head: int,
    recorded_at: int,
    digest_key: bytes,
) -> tuple[list[int], list[StoredRecord]]:
    positions: list[int] = []
    rows: list[StoredRecord] = []
    in_batch: dict[str, StoredRecord] = {}
    versions: dict[str, int] = {}
    for pending in records:
        event_id = pending.event_id
        stored = existing.get(event_id) or in_batch.get(event_id)
        if stored is not None:
            difference = _same_content(stored, pending, digest_key)
            if difference is not None:
                raise DuplicateEventError(event_id, difference)
            positions.append(stored.position)
            continue
        stream = pending.stream
        version = versions.get(stream) or stream_versions.get(stream, NO_STREAM)
        versions[stream] = version = version + 1
        position = head + len(rows) + 1
        restored = pending.restored
        row = with_checksum(
            (
                position,
                event_id,
                stream,
                version,
                recorded_at,
                pending.event_type,
                pending.schema_version,
                pending.payload,
                len(pending.payload),
                None,
                pending.traceparent,
                pending.tracestate,
            )
            if restored is None
            else (position, event_id, stream, version, *restored[4:12])
        )
        in_batch[event_id] = row
        rows.append(row)
        positions.append(position)
    if rows:
        for stream, expected in expected_versions.items():
            actual = stream_versions.get(stream, NO_STREAM)
            if actual != expected:
                raise ConflictError(stream, expected, actual)
    return positions, rows


_make_recorded = recorded_event_maker()


def decode_records(
    codec: Codec, rows: Sequence[StoredRecord], known: Mapping[int, Event] | None = None
) -> list[RecordedEvent]:
    """``decode_record`` of each row (``known``: events by position that the caller holds
    already, taken for rows not redacted); the usual row (a payload of the current schema, no
    trace context) is decoded in this loop: on replay, a call per row is a large share of the
    cost of reading."""
    current = codec.current
    time = codec.time
    unpackb = msgpack.unpackb
    make = _make_recorded
    recorded: list[RecordedEvent] = []
    append = recorded.append
    for row in rows:
        (position, event_id, stream, version, at, event_type, schema, payload, _, digest, trace) = (
            row[:11]
        )
        entry = current.get(event_type)
        if entry is None or digest is not None or trace is not None or schema != entry[1]:
            held = None if known is None or digest is not None else known.get(position)
            append(decode_record(codec, row, held))
            continue
        event = None if known is None else known.get(position)
        if event is None:
            try:
                fields = unpackb(payload, raw=False, strict_map_key=True)
            except Exception:
                fields = None
            event = GIVE_UP if fields is None else entry[2](fields)
            if event is GIVE_UP:
                append(decode_record(codec, row))
                continue
        append(make(position, event_id, stream, version, time(at), entry[0], schema, None, event))
    return recorded


def decode_record(codec: Codec, row: StoredRecord, known: Event | None = None) -> RecordedEvent:
    """The envelope and event of a stored row (a ``Redacted`` where the payload is gone);
    ``known``: the event itself, when the caller holds what the payload encodes already."""
    event: Event | Redacted
    if known is not None:
        event = known
    elif row.digest is not None:
        remains = (
            None
            if row.payload is None
            else codec.decode(row.event_type, row.schema_version, row.payload)
        )
        event = Redacted(length=row.payload_length, digest=row.digest.hex(), remains=remains)
    elif row.payload is None:
        raise LogError(f"event at position {row.position} has neither payload nor digest")
    else:
        event = codec.decode(row.event_type, row.schema_version, row.payload)
    trace = (
        TraceContext(traceparent=row.traceparent, tracestate=row.tracestate)
        if row.traceparent is not None
        else None
    )
    return RecordedEvent(
        position=row.position,
        event_id=row.event_id,
        stream=row.stream,
        version=row.version,
        recorded_at=codec.time(row.recorded_at),
        event_type=codec.tag(row.event_type),
        schema_version=row.schema_version,
        trace=trace,
        event=event,
    )
