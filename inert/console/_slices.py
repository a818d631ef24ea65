"""Long work in the event loop, in slices: it lets the other requests in between.

The console answers every request on one event loop, which runs one task at a time until that
task waits. A walk over every call, or the drawing of a long page, waits for nothing: left
whole, it would hold every other request (the emergency stop among them) until it ended, and
several at once would hold them for all of their times added up. So such work calls
``Slices.due`` at each step, which lets the others in whenever ``SLICE_SECONDS`` passed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TypeVar

import trio

SLICE_SECONDS = 0.001
"""The longest a request's work runs before it lets the other requests in."""

Item = TypeVar("Item")


class Slices:
    """Lets the other tasks of the event loop in whenever ``SLICE_SECONDS`` passed since it
    last did, for a loop over many items to call at each."""

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def due(self) -> None:
        if time.perf_counter() - self._since >= SLICE_SECONDS:
            await trio.lowlevel.checkpoint()
            self._since = time.perf_counter()


async def page_of(items: Iterable[Item], *, offset: int, limit: int) -> tuple[list[Item], int]:
    """``limit`` of the items from ``offset``, and how many there are, walked in slices."""
    found: list[Item] = []
    total = 0
    slices = Slices()
    for item in items:
        if offset <= total < offset + limit:
            found.append(item)
        total += 1
        await slices.due()
    return found, total
