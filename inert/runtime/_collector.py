"""The garbage collector settings a runtime applies while it runs.

A runtime allocates many short-lived objects per event, and after it has rebuilt its state from
the log it holds many long-lived ones (turns, calls, ledger rows). With CPython's default
thresholds (700 allocations for a young collection) the collector runs every few events and
walks the long-lived objects again and again. So a runtime raises the thresholds when it
starts, and freezes what it holds (``gc.freeze``: moved out of the collector's sight, still freed
by reference counting) as soon as it has loaded a snapshot and again once it is ready (a state
just loaded is all young: the first collections would walk all of it, three times over, as it
ages); when the last runtime of the process stops, the previous thresholds
come back and the frozen objects are given back to the collector (unless the host had frozen
objects of its own before: then they all stay frozen, as the host wanted its own). Garbage
alive in cycles when a runtime froze stays until the collector next walks its oldest
generation: a process opening runtime after runtime should collect (``gc.collect()``) between
them, or open them with ``CollectorSettings(freeze=False)``.

The settings are process-wide. A host that manages the collector itself opens its runtimes
with ``open_runtime(collector=None)``. A fold of a whole log outside a runtime (``inert replay``)
runs under the same thresholds, without freezing (``thresholds_of``).

A snapshot's encoding is as large as the live state it holds, and freed once it is written.
The C allocator keeps what a large transient allocation freed for the process (glibc hands
back only the free memory at the top of its heap, and moves medium allocations off their own
mappings once a large one was freed), so after each snapshot a runtime asks it to hand back
every free page (``malloc_trim``, where the C library has it): with 100,000 live calls that
is about a fifth of the process's memory (``benchmarks/RESULTS.md``).

Taking a snapshot also makes and frees millions of small objects (each call's fields, the
writer's memo). CPython keeps thousands of those it frees in its free lists (tuples above all),
scattered over the pools the capture used: they keep those arenas from going back to the
system, and the runtime's next objects, taken from the lists, would keep them for good. Only a
full collection empties the lists. So a runtime that freezes ends each capture, still held, by
collecting its young generations (what it made since, garbage in cycles included), freezing what
is alive and collecting again, which then walks nothing but empties the lists. Garbage in cycles
that had reached the oldest generation is frozen with the rest, as at start-up.
"""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from attrs import field, frozen, validators


@frozen(kw_only=True)
class CollectorSettings:
    """How a running runtime sets the garbage collector, process-wide, while it runs.

    The thresholds are raised when it starts (the runtime makes many short-lived objects per
    event); with ``freeze``, what it holds is frozen (``gc.freeze``) once a snapshot is loaded
    and again once it is ready, so that collections stop walking it. The last runtime of the
    process to stop puts the collector back as it was. A process opening runtime after runtime
    should collect (``gc.collect()``) between them, or set ``freeze=False``; a host that manages
    the collector itself opens its runtimes with ``open_runtime(collector=None)``.
    """

    freeze: bool = True
    """Freeze the objects alive once the runtime has loaded its snapshot, once it is ready (its
    state rebuilt from the log), and once it has captured each snapshot (its young generations
    collected first)."""
    thresholds: tuple[int, int, int] = field(
        default=(50_000, 50, 100), validator=validators.deep_iterable(validators.ge(1))
    )
    """``gc.set_threshold`` while a runtime runs, from its start: young allocations, then the
    two older generations' collection counts."""
    trim_after_snapshot: bool = True
    """After each snapshot written, ask the C allocator to hand its free pages back to the
    system (``malloc_trim``; nothing where the C library has none)."""


DEFAULT_COLLECTOR = CollectorSettings()


class _Applied:
    """What the process's collector was before the first runtime that set it."""

    users = 0
    previous: tuple[int, int, int] = (700, 10, 10)
    froze = False
    host_froze = False


def apply(settings: CollectorSettings) -> None:
    """Set the thresholds for a runtime that starts (undone by ``restore``)."""
    if _Applied.users == 0:
        _Applied.previous = gc.get_threshold()
        # What the host froze itself (before forking workers, say) stays frozen.
        _Applied.host_froze = gc.get_freeze_count() > 0
    _Applied.users += 1
    gc.set_threshold(*settings.thresholds)


def freeze(settings: CollectorSettings) -> None:
    """Freeze what is alive now (a state loaded or rebuilt), if the settings say so: a
    constant-time move, after which no collection walks those objects again."""
    if settings.freeze:
        gc.freeze()
        _Applied.froze = True


def restore() -> None:
    """Undo one ``apply``; the last runtime to stop puts the collector back as it was."""
    _Applied.users -= 1
    if _Applied.users:
        return
    gc.set_threshold(*_Applied.previous)
    if _Applied.froze and not _Applied.host_froze:
        gc.unfreeze()
    _Applied.froze = False


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    return trim


_TRIM = _malloc_trim()


def after_snapshot(settings: CollectorSettings | None) -> Callable[[], None]:
    """What a runtime does once a snapshot it wrote is freed."""
    if settings is None or not settings.trim_after_snapshot or _TRIM is None:
        return _nothing
    return _trim


def after_capture(settings: CollectorSettings | None) -> Callable[[], None]:
    """What a runtime does once it has captured a snapshot, before anything else runs."""
    if settings is None or not settings.freeze:
        return _nothing
    return _freeze_after_capture


def _freeze_after_capture() -> None:
    gc.collect(generation=1)
    gc.freeze()
    gc.collect()


def _trim() -> None:
    assert _TRIM is not None
    _TRIM(0)


def _nothing() -> None:
    pass


@contextmanager
def thresholds_of(settings: CollectorSettings = DEFAULT_COLLECTOR) -> Iterator[None]:
    """The thresholds of ``settings`` for the block, as a runtime would set them."""
    apply(settings)
    try:
        yield
    finally:
        restore()
