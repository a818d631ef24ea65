"""A page of rows decodes in one loop exactly as each row decodes on its own."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from golden_logs import golden_paths, load

from inert import ArgumentsAppended, CallKey, CodecError
from inert.events import DEFAULT_CODEC
from inert.log._records import StoredRecord, decode_record, decode_records, with_checksum

KEY = CallKey(tenant="t", conversation="c", turn="1", response="r", item="i", call="x")


def _row(position: int, payload: bytes | None, **changes: Any) -> StoredRecord:
    tag, version, _ = DEFAULT_CODEC.encode(ArgumentsAppended(key=KEY, data=b"{}"))
    columns = StoredRecord(
        position,
        f"e{position}",
        "s",
        position,
        1_700_000_000_000_000,
        tag,
        version,
        payload,
        0 if payload is None else len(payload),
        None,
        None,
        None,
        0,
    )._replace(**changes)
    return with_checksum(columns)


def _payload(**fields: object) -> bytes:
    _, _, payload = DEFAULT_CODEC.encode(ArgumentsAppended(key=KEY, data=b"{}"))
    decoded = msgpack.unpackb(payload, raw=False)
    decoded.update(fields)
    packed: bytes = msgpack.packb(decoded, use_bin_type=True)
    return packed


@pytest.mark.parametrize("path", golden_paths(), ids=lambda path: path.stem)
def test_every_golden_row_decodes_in_a_page_as_on_its_own(path: object) -> None:
    """Redacted rows, older schema versions, trace contexts: the page loop agrees row by row."""
    rows = load(path).rows  # type: ignore[arg-type]
    assert decode_records(DEFAULT_CODEC, rows) == [decode_record(DEFAULT_CODEC, r) for r in rows]


def test_events_the_caller_holds_are_taken_for_rows_that_were_not_redacted() -> None:
    """``known`` events replace the decoding of rows with their payload, never of redacted ones."""
    held = ArgumentsAppended(key=KEY, data=b"[1]")
    plain = _row(1, _payload())
    redacted = _row(2, None, digest=b"\x01" * 32, payload_length=9)
    decoded = decode_records(DEFAULT_CODEC, [plain, redacted], {1: held, 2: held})
    assert decoded[0].event is held
    assert decoded[1] == decode_record(DEFAULT_CODEC, redacted)


def test_a_payload_the_fast_path_refuses_fails_as_the_checked_path_says() -> None:
    """A payload with an unknown field is refused with the converter's own message."""
    row = _row(1, _payload(extra=1))
    with pytest.raises(CodecError) as alone:
        decode_record(DEFAULT_CODEC, row)
    with pytest.raises(CodecError) as paged:
        decode_records(DEFAULT_CODEC, [row])
    assert str(paged.value) == str(alone.value)


def test_a_corrupt_payload_fails_as_on_its_own() -> None:
    """Bytes that are no MessagePack map fail the page with the message of a row on its own."""
    for payload in (b"\xc1", msgpack.packb([1, 2])):
        row = _row(1, payload)
        with pytest.raises(CodecError) as alone:
            decode_record(DEFAULT_CODEC, row)
        with pytest.raises(CodecError) as paged:
            decode_records(DEFAULT_CODEC, [row])
        assert str(paged.value) == str(alone.value)
