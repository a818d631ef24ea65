"""The assignment of partitions to processes: every process computes the same one, shares are
fair, and a process joining or leaving moves few partitions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inert.runtime._assignment import assign, owned_by

names = st.sets(st.text(min_size=1, max_size=8), min_size=1, max_size=12)


@given(partitions=st.integers(min_value=1, max_value=256), processes=names)
def test_every_partition_has_one_owner_and_shares_differ_by_one_at_most(
    partitions: int, processes: set[str]
) -> None:
    """Each partition goes to one of the processes, and no process holds more than one
    partition beyond another's."""
    owners = assign(range(1, partitions + 1), processes)
    assert sorted(owners) == list(range(1, partitions + 1))
    assert set(owners.values()) <= processes
    loads = [len(owned_by(owners, process)) for process in processes]
    assert max(loads) - min(loads) <= 1


@given(partitions=st.integers(min_value=1, max_value=128), processes=names)
def test_the_assignment_depends_on_the_set_of_processes_alone(
    partitions: int, processes: set[str]
) -> None:
    """The order in which processes are named changes nothing: processes that agree on who
    is alive agree on the assignment."""
    forward = assign(range(1, partitions + 1), sorted(processes))
    backward = assign(reversed(range(1, partitions + 1)), sorted(processes, reverse=True))
    assert forward == backward


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_a_process_joining_moves_about_its_share(count: int) -> None:
    """Of 64 partitions among ``count`` processes, a process joining takes its share and
    moves few others' (at most twice its share in all)."""
    before = assign(range(1, 65), [f"p{n}" for n in range(count)])
    after = assign(range(1, 65), [f"p{n}" for n in range(count + 1)])
    moved = sum(before[number] != after[number] for number in range(1, 65))
    share = -(-64 // (count + 1))
    assert len(owned_by(after, f"p{count}")) >= share - 1
    assert moved <= 2 * share


def test_no_process_is_refused() -> None:
    """Assigning among no process is a clear error, not an empty assignment."""
    with pytest.raises(ValueError, match="one process at least"):
        assign(range(1, 5), [])
