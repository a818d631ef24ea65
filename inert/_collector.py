"""The garbage collector settings a runtime applies while it runs.

A runtime allocates many short-lived objects per event, and after it has rebuilt its state from
the log it holds many long-lived ones (turns, calls, ledger rows). With CPython's default
thresholds (700 allocations for a young collection) the collector runs every few events and
walks the long-lived objects again and again. So once the runtime is ready it freezes what it
holds (``gc.freeze``: moved out of the collector's sight, still freed by reference counting)
and raises the thresholds; when the last runtime of the process stops, the previous thresholds
come back and the frozen objects are given back to the collector, which collects the whole
process once then (unless the host had frozen objects of its own before: then they all stay
frozen, as the host wanted its own).

The settings are process-wide. A host that manages the collector itself opens its runtimes
with ``open_runtime(collector=None)``.
"""

from __future__ import annotations

import gc

from attrs import field, frozen, validators


@frozen(kw_only=True)
class CollectorSettings:
    """How a running runtime sets the garbage collector (see :mod:`inert._collector`)."""

    freeze: bool = True
    """Freeze the objects alive once the runtime is ready (its state rebuilt from the log)."""
    thresholds: tuple[int, int, int] = field(
        default=(50_000, 50, 100), validator=validators.deep_iterable(validators.ge(1))
    )
    """``gc.set_threshold`` while a runtime runs: young allocations, then the two older
    generations' collection counts."""


DEFAULT_COLLECTOR = CollectorSettings()


class _Applied:
    """What the process's collector was before the first runtime that set it."""

    users = 0
    previous: tuple[int, int, int] = (700, 10, 10)
    froze = False
    host_froze = False


def apply(settings: CollectorSettings) -> None:
    """Set the collector for a runtime that is ready (undone by :func:`restore`)."""
    if _Applied.users == 0:
        _Applied.previous = gc.get_threshold()
        # What the host froze itself (before forking workers, say) stays frozen.
        _Applied.host_froze = gc.get_freeze_count() > 0
    _Applied.users += 1
    if settings.freeze:
        gc.freeze()
        _Applied.froze = True
    gc.set_threshold(*settings.thresholds)


def restore() -> None:
    """Undo one :func:`apply`; the last runtime to stop puts the collector back as it was."""
    _Applied.users -= 1
    if _Applied.users:
        return
    gc.set_threshold(*_Applied.previous)
    if _Applied.froze and not _Applied.host_froze:
        gc.unfreeze()
        # Unfrozen, they are counted as old, and the collector would look at the old
        # generation again only once it grew by a quarter: the garbage among them (cycles
        # frozen with the rest) would stay, runtime after runtime, in a process that opens
        # many one after another.
        gc.collect()
    _Applied.froze = False
