"""The server-sent-event decoder: the WHATWG rules, and any split of the body gives the same."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from locations import TESTS

from inert.adapters import ServerSentEvent, SSEDecoder

FIXTURES = TESTS / "fixtures" / "provider-streams"
SSE_FIXTURES = sorted(FIXTURES.glob("*/*.sse"))


def decode(*chunks: bytes | str) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [event for chunk in chunks for event in decoder.feed(chunk)]
    decoder.close()
    return events


def split(body: bytes, cuts: set[int]) -> list[bytes]:
    bounds = [0, *sorted(cut for cut in cuts if 0 < cut < len(body)), len(body)]
    return [body[start:end] for start, end in itertools.pairwise(bounds)]


def test_the_captured_streams_are_there() -> None:
    """The SSE captures the split property runs on are present (an empty set would test none)."""
    assert len(SSE_FIXTURES) == 8


def test_a_blank_line_dispatches_an_event_with_its_type_and_data() -> None:
    """``event`` names the type, ``data`` the payload, a blank line ends the event."""
    assert decode(b"event: ping\ndata: {}\n\n") == [ServerSentEvent("ping", "{}")]


def test_an_event_without_a_type_is_a_message() -> None:
    """Without an ``event`` field the type is ``message``."""
    assert decode(b"data: [DONE]\n\n") == [ServerSentEvent("message", "[DONE]")]


@pytest.mark.parametrize("newline", [b"\r\n", b"\r", b"\n"])
def test_every_line_ending_is_a_line_ending(newline: bytes) -> None:
    """CR LF, CR and LF all end lines."""
    body = newline.join([b"event: a", b"data: 1", b"", b"data: 2", b"", b""])
    assert decode(body) == [ServerSentEvent("a", "1"), ServerSentEvent("message", "2")]


def test_a_cr_lf_split_across_chunks_is_one_line_ending() -> None:
    """A CR at the end of a chunk waits for the next: with its LF it is one line ending."""
    assert decode(b"data: 1\r", b"\n\r", b"\ndata: 2\r\n\r\n") == [
        ServerSentEvent("message", "1"),
        ServerSentEvent("message", "2"),
    ]


def test_data_lines_join_with_newlines_and_comments_are_dropped() -> None:
    """Several data lines make one payload; lines starting with a colon are comments."""
    assert decode(b": hello\ndata: a\n: between\ndata: b\n\n") == [
        ServerSentEvent("message", "a\nb")
    ]


def test_only_one_space_after_the_colon_is_dropped() -> None:
    """``data:  x`` keeps the second space; ``data:x`` has none to drop."""
    assert decode(b"data:  x\n\ndata:y\n\n") == [
        ServerSentEvent("message", " x"),
        ServerSentEvent("message", "y"),
    ]


def test_a_leading_byte_order_mark_is_dropped_even_when_split() -> None:
    """A UTF-8 BOM at the start of the body is not part of the first field name."""
    assert decode(b"\xef", b"\xbb\xbfdata: 1\n\n") == [ServerSentEvent("message", "1")]


def test_a_utf8_character_split_across_chunks_is_whole() -> None:
    """A multi-byte character cut between two chunks decodes once, whole."""
    body = "data: caf\u00e9\n\n".encode()
    cut = body.index(b"\xc3") + 1
    assert decode(body[:cut], body[cut:]) == [ServerSentEvent("message", "caf\u00e9")]


def test_an_event_without_data_is_not_dispatched() -> None:
    """An event of fields but no data lines is dropped, as the standard says."""
    assert decode(b"event: nothing\n\ndata: 1\n\n") == [ServerSentEvent("message", "1")]


def test_the_id_field_is_kept() -> None:
    """The last ``id`` seen is carried by the events after it."""
    assert decode(b"id: 7\ndata: 1\n\n")[0].id == "7"


@pytest.mark.parametrize(
    "tail", [b'data: {"cut', b"data: [DONE]", b"data: 2\n", b"data: 2\r\n", b"data: 2\r"]
)
def test_an_event_the_body_ends_before_its_blank_line_is_discarded(tail: bytes) -> None:
    """An event not ended by a blank line when the body ends is never dispatched, its last
    line ended or not, as the rules say (``Once the end of the file is reached, any pending
    data must be discarded``)."""
    assert decode(b"data: 1\n\n" + tail) == [ServerSentEvent("message", "1")]


def test_feeding_after_close_is_an_error() -> None:
    """A closed decoder refuses more input."""
    decoder = SSEDecoder()
    decoder.close()
    with pytest.raises(ValueError, match="closed"):
        decoder.feed(b"data: 1\n\n")


def test_text_and_bytes_decode_alike() -> None:
    """Already decoded text gives the same events as its bytes."""
    body = "event: a\r\ndata: \u00fc\r\n\r\n"
    assert decode(body) == decode(body.encode())


@pytest.mark.parametrize("path", SSE_FIXTURES, ids=lambda path: f"{path.parent.name}/{path.name}")
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_any_split_of_a_captured_stream_gives_the_same_events(
    path: Path, data: st.DataObject
) -> None:
    """A real captured body split into chunks anywhere decodes to the events of the whole."""
    body = path.read_bytes()
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=40)))
    chunks = [body[start:end] for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True)]
    assert decode(*chunks) == decode(body)


def test_bytes_that_are_not_utf8_are_replaced_as_the_rules_say() -> None:
    """Each maximal run of bytes that is not UTF-8 is one U+FFFD (the Encoding standard's UTF-8
    decode); the event whose data held them is marked ``replaced``, the others are not."""
    assert decode(b'data: {"a":', b"\xff1}\n\ndata: caf\xc3(\xed\xa0\x80\n\ndata: 2\n\n") == [
        ServerSentEvent("message", '{"a":\ufffd1}', replaced=True),
        ServerSentEvent("message", "caf\ufffd(\ufffd\ufffd\ufffd", replaced=True),
        ServerSentEvent("message", "2"),
    ]
    assert decode(b"event: \xffx\ndata: 1\n\n") == [ServerSentEvent("\ufffdx", "1", replaced=True)]


def test_bytes_that_are_not_utf8_where_no_adapter_reads_them_reach_nothing() -> None:
    """Bad bytes in a comment, an id or a field the rules ignore leave the event as it is; a
    replacement character sent as UTF-8 is text like any other."""
    body = b": \xff\nid: \xfe\n\xff\ndata: 1\n\ndata: \xef\xbf\xbd\n\n"
    assert decode(body) == [
        ServerSentEvent("message", "1", id="\ufffd"),
        ServerSentEvent("message", "\ufffd", id="\ufffd"),
    ]


def test_an_unfinished_sequence_at_the_end_of_the_body_is_discarded_with_its_line() -> None:
    """A body cut inside a character leaves an unfinished line: discarded, as it would be
    whole."""
    assert decode(b"data: 1\n\ndata: caf\xc3") == [ServerSentEvent("message", "1")]


def test_only_the_first_byte_order_mark_is_dropped() -> None:
    """One BOM at the start is dropped; a second one is part of the first line (a field that
    is not ``data``)."""
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: 1\n\ndata: 2\n\n") == [
        ServerSentEvent("message", "2")
    ]


JUNK = st.binary(min_size=1, max_size=8) | st.sampled_from(
    [b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf0\x28\x8c\x28", b"\x80\x80", b"\xef\xbb", b"\r"]
)


@pytest.mark.parametrize("path", SSE_FIXTURES, ids=lambda path: f"{path.parent.name}/{path.name}")
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_captured_stream_with_junk_anywhere_decodes_alike_however_split(
    path: Path, data: st.DataObject
) -> None:
    """A real captured body with junk bytes (UTF-8 or not) inserted anywhere, split anywhere,
    byte by byte included, decodes to the events of the whole."""
    body = path.read_bytes()
    for _ in range(data.draw(st.integers(1, 3), label="junks")):
        place = data.draw(st.integers(0, len(body)), label="place")
        body = body[:place] + data.draw(JUNK, label="junk") + body[place:]
    whole = decode(body)
    cuts = data.draw(st.sets(st.integers(1, len(body) - 1), max_size=40), label="cuts")
    assert decode(*split(body, cuts)) == whole
    assert decode(*split(body, set(range(len(body))))) == whole
