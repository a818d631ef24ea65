"""Rule 3 of the call state machine for fragments with offsets: each byte-range rule, then any
chunking, re-chunking, repetition and order of one call's bytes (Hypothesis).

Calls are driven through ``step`` as in ``test_decider``; the buffer itself is checked where its
sharing of bytes between successive buffers could go wrong.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_decider import (
    CANONICAL,
    DIGEST,
    KEY,
    MARKER,
    WHOLE,
    Call,
    context,
    ended,
    failure,
    one,
    opened,
    reach,
    rejection,
    response_ended,
)

from inert.actors._arguments import ArgumentLimits
from inert.actors._buffer import EMPTY_BUFFER, Fit, RangeBuffer
from inert.actors._call import CallLimits, recorded
from inert.events import (
    ArgumentsAppended,
    CallFailed,
    CallTerminalCandidate,
    CallValidated,
    FailReason,
    Phase,
    RejectReason,
)


def piece(
    start: int, stop: int, first: int | None = None, last: int | None = None
) -> ArgumentsAppended:
    """WHOLE's bytes ``[start, stop)`` at their offset (numbered ``first..last`` if given)."""
    if first is not None and last is None:
        last = first
    return ArgumentsAppended(
        key=KEY,
        data=WHOLE[start:stop],
        offset=start,
        first_sequence=first,
        last_sequence=last,
        fragments=1 if first is None or last is None else last - first + 1,
    )


def wrong(start: int, stop: int, at: int | None = None) -> ArgumentsAppended:
    """Bytes ``[start, stop)`` that differ from WHOLE's at offset ``at`` (the first byte)."""
    flipped = start if at is None else at
    data = bytearray(WHOLE[start:stop])
    data[flipped - start] ^= 0x20
    return ArgumentsAppended(key=KEY, data=bytes(data), offset=start)


CUTS = (0, 14, 33, len(WHOLE))


def collecting_by_range(call: Call, *, numbered: bool = False) -> None:
    """Opened, then WHOLE in three fragments at their offsets."""
    call.send(opened(0 if numbered else None))
    for index, (start, stop) in enumerate(itertools.pairwise(CUTS), 1):
        decisions = call.send(piece(start, stop, index if numbered else None))
        assert recorded(decisions) == []
    assert call.state.phase is Phase.COLLECTING


def finish(call: Call, end_sequence: int | None = None) -> CallValidated:
    """End the call and its response, accept its validation: what was validated."""
    assert one(call.send(ended(end_sequence)), CallTerminalCandidate).arguments_digest == DIGEST
    call.send(response_ended())
    return one(call.answer(), CallValidated)


# --- (a) inside what is stored: a duplicate, however chunked --------------------------------


@pytest.mark.parametrize(
    ("start", "stop"),
    [(0, 14), (5, 20), (14, 33), (0, len(WHOLE)), (20, 21), (0, 0), (len(WHOLE), len(WHOLE))],
    ids=["same", "across-two", "middle", "whole", "one-byte", "empty-at-0", "empty-at-end"],
)
def test_a_range_inside_what_is_stored_is_a_duplicate_however_chunked(
    start: int, stop: int
) -> None:
    """A re-delivery of stored bytes, split otherwise than before, is rejected duplicate and
    changes nothing: sizes, counts and the arguments validated stay those of the first."""
    call = Call()
    collecting_by_range(call)
    before = (call.state.size, call.state.fragments)
    found = rejection(call.send(piece(start, stop)))
    assert found.reason is RejectReason.DUPLICATE
    assert (call.state.size, call.state.fragments) == before
    assert finish(call).arguments == CANONICAL


def test_a_duplicate_inside_a_part_held_past_a_gap_is_rejected() -> None:
    """Bytes delivered again inside a part that waits past a gap are a duplicate too."""
    call = Call()
    call.send(opened(None))
    call.send(piece(0, 14))
    call.send(piece(33, len(WHOLE)))
    assert rejection(call.send(piece(40, 45))).reason is RejectReason.DUPLICATE
    call.send(piece(14, 33))
    assert finish(call).arguments == CANONICAL


# --- (b) overlap: equal bytes append the suffix, unequal ones fail --------------------------


def test_a_range_straddling_the_end_appends_its_suffix_when_the_overlap_agrees() -> None:
    """Stored ``[0, 14)``, then ``[5, 40)``: the bytes ``[14, 40)`` are added, once."""
    call = Call()
    call.send(opened(None))
    call.send(piece(0, 14))
    assert recorded(call.send(piece(5, 40))) == []
    assert call.state.size == 40
    call.send(piece(40, len(WHOLE)))
    assert call.state.size == len(WHOLE)
    assert finish(call).arguments == CANONICAL


@pytest.mark.parametrize(
    ("start", "stop"), [(5, 20), (10, 40), (0, 14)], ids=["inside", "straddling", "same-range"]
)
def test_a_range_whose_overlap_differs_fails_conflicting_fragment(start: int, stop: int) -> None:
    """Bytes that disagree with the bytes stored for the same offsets fail the call
    ``conflicting_fragment``, naming the range and never the value."""
    call = Call()
    call.send(opened(None))
    call.send(piece(0, 14))
    call.send(piece(14, 33))
    found = failure(call.send(wrong(start, stop)))
    assert found.reason is FailReason.CONFLICTING_FRAGMENT
    assert f"bytes {start}..{stop - 1}" in found.detail
    assert MARKER not in found.detail
    assert call.state.phase is Phase.FAILED


def test_an_overlap_with_a_part_held_past_a_gap_must_agree_too() -> None:
    """A fragment overlapping a held part fails on unequal bytes and merges with equal ones."""
    conflicting = Call()
    conflicting.send(opened(None))
    conflicting.send(piece(33, len(WHOLE)))
    assert failure(conflicting.send(wrong(30, 40, at=35))).reason is FailReason.CONFLICTING_FRAGMENT
    merging = Call()
    merging.send(opened(None))
    merging.send(piece(33, 45))
    merging.send(piece(40, len(WHOLE)))
    merging.send(piece(20, 35))
    assert merging.state.size == len(WHOLE) - 20
    merging.send(piece(0, 20))
    assert merging.state.size == len(WHOLE)
    assert finish(merging).arguments == CANONICAL


# --- (c) past the end: held until the bytes before it arrive --------------------------------


def test_a_range_past_the_end_waits_for_the_bytes_before_it() -> None:
    """Fragments arriving as the third, the first, the second are assembled by offset."""
    call = Call()
    call.send(opened(None))
    for index in (2, 0, 1):
        assert recorded(call.send(piece(CUTS[index], CUTS[index + 1]))) == []
    assert finish(call).arguments == CANONICAL


def test_bytes_still_missing_at_the_end_event_fail_sequence_gap() -> None:
    """A part held past a gap when the end event arrives fails ``sequence_gap`` naming the
    missing bytes."""
    call = Call()
    call.send(opened(None))
    call.send(piece(0, 14))
    call.send(piece(33, len(WHOLE)))
    found = failure(call.send(ended(None)))
    assert found.reason is FailReason.SEQUENCE_GAP
    assert "bytes 14..32 never arrived" in found.detail


def test_the_byte_limit_counts_the_furthest_byte_a_fragment_reaches() -> None:
    """A fragment past a gap whose end lies beyond the byte limit fails ``too_large`` at once,
    and the ending decision counts only the bytes the call holds and would add."""
    limits = CallLimits(arguments=ArgumentLimits(max_bytes=40))
    call = Call(context(limits=limits))
    call.send(opened(None))
    call.send(piece(0, 10))
    found = failure(call.send(piece(35, 45)))
    assert found.reason is FailReason.TOO_LARGE
    assert "45 bytes, the limit is 40" in found.detail
    assert (found.fragments, found.size) == (2, 20)


def test_a_call_ending_while_collecting_counts_a_straddling_fragments_new_bytes() -> None:
    """The ending decision of a fragment that straddles the end counts only its new bytes."""
    limits = CallLimits(arguments=ArgumentLimits(max_bytes=20))
    call = Call(context(limits=limits))
    call.send(opened(None))
    call.send(piece(0, 14))
    found = failure(call.send(piece(10, 30)))
    assert found.reason is FailReason.TOO_LARGE
    assert (found.fragments, found.size) == (2, 30)


# --- (d) sequences keep their meaning -------------------------------------------------------


def test_sequences_missing_at_the_end_fail_even_when_the_bytes_are_whole() -> None:
    """Numbered fragments whose bytes are whole but whose sequences skip one fail
    ``sequence_gap`` at the end event."""
    call = Call()
    call.send(opened(0))
    call.send(piece(0, 14, 1))
    call.send(piece(14, len(WHOLE), 3))
    found = failure(call.send(ended(4)))
    assert found.reason is FailReason.SEQUENCE_GAP
    assert "sequence 2 never arrived" in found.detail


def test_new_bytes_under_sequences_seen_fail_conflicting_fragment() -> None:
    """A fragment that brings bytes not stored under sequences that were all seen contradicts
    them: the call fails ``conflicting_fragment``."""
    call = Call()
    call.send(opened(0))
    call.send(piece(0, 14, 1))
    call.send(piece(14, 33, 2))
    found = failure(call.send(piece(33, len(WHOLE), 2)))
    assert found.reason is FailReason.CONFLICTING_FRAGMENT
    assert "sequences 2..2 arrived already" in found.detail


def test_a_coalesced_re_delivery_over_sequences_seen_and_new_is_taken() -> None:
    """A re-delivery that joins fragments seen and one not seen (sequences 2..3 after 1..2)
    appends the new bytes; the sequences are whole at the end."""
    call = Call()
    call.send(opened(0))
    call.send(piece(0, 14, 1))
    call.send(piece(14, 33, 2))
    assert recorded(call.send(piece(14, len(WHOLE), 2, 3))) == []
    assert finish(call, 4).arguments == CANONICAL


def test_offsets_and_no_offsets_do_not_mix_in_one_call() -> None:
    """A fragment without an offset in a call whose fragments have offsets (or the other way)
    fails ``protocol_violation``."""
    for first, second in (
        (piece(0, 14), ArgumentsAppended(key=KEY, data=WHOLE[14:33])),
        (ArgumentsAppended(key=KEY, data=WHOLE[:14]), piece(14, 33)),
    ):
        call = Call()
        call.send(opened(None))
        call.send(first)
        found = failure(call.send(second))
        assert found.reason is FailReason.PROTOCOL_VIOLATION
        assert "with and without offsets" in found.detail


@pytest.mark.parametrize("phase", [Phase.TERMINAL_CANDIDATE, Phase.VALIDATED])
def test_a_fragment_after_the_end_event_is_a_duplicate_inside_its_bytes_only(phase: Phase) -> None:
    """After the end event a range inside the call's bytes is a duplicate; any other fails."""
    call = Call()
    collecting_by_range(call)
    call.send(ended(None))
    if phase is Phase.VALIDATED:
        call.send(response_ended())
        call.answer()
    assert call.state.phase is phase
    assert rejection(call.send(piece(5, 20))).reason is RejectReason.DUPLICATE
    found = failure(call.send(wrong_tail()))
    assert found.reason is FailReason.PROTOCOL_VIOLATION


def wrong_tail() -> ArgumentsAppended:
    """A byte past the end of the call's arguments."""
    return ArgumentsAppended(key=KEY, data=b"}", offset=len(WHOLE))


def test_a_terminal_call_rejects_fragments_with_offsets_as_terminal() -> None:
    """Whatever its range, a fragment for a terminal call is rejected ``call_terminal``."""
    call = reach(Phase.DISPATCHED)
    assert rejection(call.send(piece(0, 14))).reason is RejectReason.CALL_TERMINAL


# --- any chunking, repetition and order --------------------------------------------------------


@st.composite
def deliveries(draw: st.DrawFn) -> list[tuple[int, int]]:
    """Ranges of WHOLE covering it all: a chunking, then re-deliveries of any ranges inside
    it, in any order."""
    size = len(WHOLE)
    cuts = sorted(draw(st.sets(st.integers(1, size - 1), max_size=8)))
    ranges = list(zip([0, *cuts], [*cuts, size], strict=True))
    extra = draw(
        st.lists(
            st.tuples(st.integers(0, size), st.integers(0, size)).map(
                lambda pair: tuple(sorted(pair))
            ),
            max_size=6,
        )
    )
    ranges += [(start, stop) for start, stop in extra if start < stop]
    return draw(st.permutations(ranges))


@given(ranges=deliveries())
def test_any_chunking_repetition_and_order_assembles_the_same_arguments(
    ranges: list[tuple[int, int]],
) -> None:
    """However the bytes are cut, repeated and reordered, the call assembles WHOLE and each
    delivery is taken or rejected as a duplicate: never a failure."""
    call = Call()
    call.send(opened(None))
    for start, stop in ranges:
        decisions = recorded(call.send(piece(start, stop)))
        assert not any(isinstance(decision, CallFailed) for decision in decisions), decisions
    assert call.state.size == len(WHOLE)
    assert finish(call).arguments == CANONICAL


# --- the buffer's shared bytes ----------------------------------------------------------------


def test_two_buffers_grown_from_one_never_see_each_others_bytes() -> None:
    """A buffer extended twice (two lines of succession) keeps each line's bytes its own."""
    base = EMPTY_BUFFER.add(ArgumentsAppended(key=KEY, data=b"abc", offset=0))
    assert isinstance(base, RangeBuffer)
    left = base.add(ArgumentsAppended(key=KEY, data=b"def", offset=3))
    right = base.add(ArgumentsAppended(key=KEY, data=b"xyz", offset=3))
    assert (base.assembled(), left.assembled(), right.assembled()) == (b"abc", b"abcdef", b"abcxyz")
    assert left.fit(ArgumentsAppended(key=KEY, data=b"cd", offset=2)) is Fit.DUPLICATE
    assert right.fit(ArgumentsAppended(key=KEY, data=b"cd", offset=2)) is Fit.CONFLICT
    assert base != left
    assert left == base.add(ArgumentsAppended(key=KEY, data=b"def", offset=3))


@given(ranges=deliveries())
def test_a_buffer_without_its_bytes_takes_back_its_prefix_and_is_the_same_buffer(
    ranges: list[tuple[int, int]],
) -> None:
    """Whatever came, a buffer holding a prefix alone is ``without_data`` and ``with_prefix``
    of what it assembles again; one holding bytes past a gap says it is not prefix-only."""
    buffer = EMPTY_BUFFER
    for start, stop in ranges:
        fragment = piece(start, stop)
        if buffer.fit(fragment) is Fit.NEW:
            buffer = buffer.add(fragment)
        assert isinstance(buffer, RangeBuffer)
        assert buffer.prefix_only is not bool(buffer.held)
        if buffer.prefix_only:
            back = buffer.without_data().with_prefix(buffer.assembled())
            assert back == buffer
            assert back.fit(piece(0, buffer.prefix)) is Fit.DUPLICATE


def test_a_prefix_of_another_length_or_for_a_buffer_with_bytes_is_refused() -> None:
    """``with_prefix`` gives back only the bytes a buffer without data lacks."""
    buffer = EMPTY_BUFFER.add(piece(0, 14))
    stripped = buffer.without_data()
    with pytest.raises(ValueError, match="13 bytes are not the prefix of 14"):
        stripped.with_prefix(WHOLE[:13])
    with pytest.raises(ValueError, match="not the prefix of 14 of a buffer without data"):
        buffer.with_prefix(WHOLE[:14])
    with pytest.raises(ValueError, match="holds no prefix"):
        EMPTY_BUFFER.with_prefix(b"")
    assert not EMPTY_BUFFER.prefix_only
