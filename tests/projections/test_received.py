"""The ledger's compact record of what a collecting call received (counts by position, ranges
seen, in the call's own record) counts as the reference record does, a dict by position and a
list of ranges, over any order of fragments, overlaps, gaps and rejections."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from reference_projections._ledger import _Received as ReferenceReceived

from inert.events import CallKey
from inert.projections._calls import Call

Step = tuple[str, int, int, int]

KEY = CallKey(tenant="t", conversation="v", turn="u", response="r", item="i", call="c")


def receiving() -> Call:
    """A ledger call that has started receiving fragments."""
    call = Call(KEY)
    call.receive()
    return call


steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("fragment"),
            st.integers(0, 64),
            st.integers(0, 16),
            st.integers(1, 3),
        ),
        st.tuples(st.just("drop"), st.integers(0, 40), st.just(0), st.just(0)),
    ),
    max_size=40,
)


@given(steps)
def test_the_compact_record_counts_as_the_reference_does(script: list[Step]) -> None:
    """After every fragment and every rejection the counts and the bytes added agree."""
    compact, reference = receiving(), ReferenceReceived()
    position = 0
    for kind, first, second, fragments in script:
        if kind == "fragment":
            position += 1
            assert compact.cover(first, second) == reference.cover(first, second)
            compact.add(position, fragments, second)
            reference.add(position, fragments, second)
        else:
            compact.drop(first)
            reference.drop(first)
        assert (compact.fragments, compact.bytes) == (reference.fragments, reference.size)


def test_in_order_ranges_stay_one_number_until_a_gap() -> None:
    """Ranges from the start, each following the last, are kept as their end alone."""
    received = receiving()
    assert received.cover(0, 5) == 5
    assert received.cover(5, 3) == 3
    assert (received.end, received.covered) == (8, None)
    assert received.cover(10, 2) == 2
    assert received.covered == [(0, 8), (10, 12)]
    assert received.cover(6, 6) == 2
    assert received.covered == [(0, 12)]
