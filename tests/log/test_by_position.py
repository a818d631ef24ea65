"""The bounded table of values by position that a log keeps of its own appends and commits."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from inert.log._log import ByPosition


@given(
    bound=st.integers(min_value=1, max_value=8),
    positions=st.lists(st.integers(min_value=1, max_value=30), max_size=60),
)
def test_the_last_positions_kept_stay_and_the_oldest_go_first(
    bound: int, positions: list[int]
) -> None:
    """Whatever the order and repetitions, the table holds the last ``bound`` distinct positions
    by when each was first kept, each with the value kept last."""
    table: ByPosition[int] = ByPosition(bound)
    order: list[int] = []
    values: dict[int, int] = {}
    for index, position in enumerate(positions):
        table.keep(position, index)
        if position not in values:
            order.append(position)
        values[position] = index
        if len(order) > bound:
            del values[order.pop(0)]
    assert table == values
    assert list(table) == order


def test_forgetting_empties_the_table_and_keeping_starts_again() -> None:
    """After ``forget`` nothing is kept, and the bound counts from nothing again."""
    table: ByPosition[str] = ByPosition(2)
    for position in (1, 2, 3):
        table.keep(position, "x")
    table.forget()
    assert table == {}
    table.keep(4, "a")
    table.keep(5, "b")
    assert table == {4: "a", 5: "b"}
