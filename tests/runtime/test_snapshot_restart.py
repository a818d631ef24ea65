"""Runtimes that write snapshots and restart from them: the same log, the same state."""

from __future__ import annotations

import gc
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from test_runtime import (
    ARGUMENTS,
    PRINCIPAL,
    TOOLS,
    call_events,
    key_of,
    ready_call,
    response_end,
    start,
)

from inert import (
    CallKey,
    CallLimits,
    CollectorSettings,
    ConfigurationError,
    Phase,
    Runtime,
    open_runtime,
    trio_clock,
)
from inert.log import MemoryLog, MemoryStore, StoredSnapshot
from inert.runtime import _collector


@asynccontextmanager
async def running(store: MemoryStore, **options: Any) -> AsyncIterator[Runtime]:
    """A runtime on a memory log kept in ``store``, snapshotting every 4 events by default."""
    options.setdefault("snapshot_every", 4)
    log = MemoryLog(store, clock=trio_clock())
    try:
        async with open_runtime(log=log, tools=TOOLS, **options) as runtime:
            yield runtime
    finally:
        await log.aclose()


async def _first_life(store: MemoryStore, **options: Any) -> None:
    """Calls in every phase a restart must handle, left by a runtime that stops."""
    collecting, candidate, ready, dispatched, confirming = (
        key_of(name, response=name) for name in "abcde"
    )
    async with running(store, **options) as runtime:
        await start(runtime)
        await runtime.feed(call_events(collecting)[:2])
        await runtime.feed(call_events(candidate))
        await ready_call(runtime, ready)
        await ready_call(runtime, dispatched)
        await runtime.claim(dispatched, executor="worker")
        await ready_call(runtime, confirming, tool="send_email")


async def _second_life(store: MemoryStore, **options: Any) -> int | None:
    """A restart that goes on; the position it started from. Its digest is the one a replay of
    the log it leaves reaches."""
    ready, confirming = key_of("c", response="c"), key_of("e", response="e")
    async with running(store, **options) as runtime:
        await runtime.settle()
        assert runtime.phase(key_of("a", response="a")) is Phase.CANCELLED
        assert runtime.phase(confirming) is Phase.VALIDATED
        await runtime.claim(ready, executor="worker")
        pending = await runtime.pending_confirmation(confirming)
        assert pending is not None
        await runtime.confirm(
            confirming, principal=PRINCIPAL, arguments_digest=pending.arguments_digest
        )
        await runtime.settle()
        await runtime.claim(confirming, executor="worker")
        await runtime.settle()
        digest, restored = runtime.digest(), runtime.restored_from
    async with running(store, snapshot_every=None) as replayed:
        assert replayed.digest() == digest
    return restored


async def test_a_restart_from_a_snapshot_goes_on_as_a_restart_that_replays_everything() -> None:
    """From its snapshot or from the start, a restart ends what the stopped process left alike,
    goes on to dispatch, and a replay of the log it leaves reaches its digest. (The simulator
    requires the two logs to be equal event for event, under seeded scheduling.)"""
    stores = MemoryStore(), MemoryStore()
    for store in stores:
        await _first_life(store)
    stores[1].snapshots.clear()
    restored, replayed = [await _second_life(store) for store in stores]
    assert restored is not None
    assert restored > 0
    assert replayed is None


async def test_a_snapshot_is_written_every_so_many_events_at_whole_multiples() -> None:
    """The newest snapshot is at the last multiple of ``snapshot_every`` the runtime folded."""
    store = MemoryStore()
    await _first_life(store, snapshot_every=7)
    [snapshot] = store.snapshots.values()
    assert snapshot.position % 7 == 0
    assert len(store.rows) - 7 < snapshot.position <= len(store.rows)


async def test_a_restart_that_replayed_enough_writes_a_snapshot_before_it_serves() -> None:
    """Without a usable snapshot, a restart that folded ``snapshot_every`` events or more
    writes one at the position it reached, so that the next restart starts from there."""
    store = MemoryStore()
    await _first_life(store, snapshot_every=None)
    assert not store.snapshots
    head = len(store.rows)
    # Every ``head`` events: the restart's own snapshot is the only one before it serves (the
    # events it writes going live never reach the next).
    async with running(store, snapshot_every=head) as runtime:
        assert runtime.restored_from is None
        assert store.snapshots[""].position == head


@pytest.mark.parametrize(
    ("collector", "asked"),
    [
        (CollectorSettings(), True),
        (CollectorSettings(trim_after_snapshot=False), False),
        (None, False),
    ],
    ids=["default", "turned-off", "host-managed"],
)
async def test_the_allocator_is_asked_for_its_free_pages_once_a_snapshot_is_written(
    monkeypatch: pytest.MonkeyPatch, collector: CollectorSettings | None, asked: bool
) -> None:
    """After a snapshot written, before serving or going on, the C allocator is asked to hand
    back its free pages (not where the settings say not to, or the host manages memory);
    ``settle`` returns once the snapshot due is written."""
    trims: list[int] = []

    def trim(pad: int) -> int:
        trims.append(pad)
        return 0

    monkeypatch.setattr(_collector, "_TRIM", trim)
    store = MemoryStore()
    await _first_life(store, snapshot_every=None)
    head = len(store.rows)
    async with running(store, snapshot_every=4, collector=collector) as runtime:
        assert store.snapshots[""].position >= head
        assert trims[:1] == ([0] if asked else [])
        written = len(trims)
        await ready_call(runtime, key_of("f", response="f"))
        await runtime.settle()
        assert store.snapshots[""].position == len(store.rows) // 4 * 4 > head
        assert len(trims) > written if asked else not trims


class _Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.itself = self


@pytest.mark.parametrize(
    ("collector", "freezes"),
    [(CollectorSettings(), True), (CollectorSettings(freeze=False), False), (None, False)],
    ids=["default", "turned-off", "host-managed"],
)
async def test_once_it_has_captured_a_snapshot_a_runtime_collects_the_young_and_freezes(
    collector: CollectorSettings | None, freezes: bool
) -> None:
    """A capture ends, the runtime still held, with a collection of the young generations and a
    freeze of what is alive: a cycle that was garbage is freed, not frozen; an object alive is
    frozen (not where the settings say not to freeze, or the host manages the collector)."""
    store = MemoryStore()
    async with running(store, snapshot_every=4, collector=collector) as runtime:
        await start(runtime)
        await runtime.settle()
        alive = _Cycle()
        garbage = weakref.ref(_Cycle())
        await ready_call(runtime, key_of("f", response="f"))
        await runtime.settle()
        assert store.snapshots[""].position > 0
        assert all(tracked is not alive for tracked in gc.get_objects()) is freezes
        if freezes:
            assert garbage() is None


async def test_without_snapshots_none_is_written_or_read() -> None:
    """``snapshot_every=None`` writes no snapshot and ignores one there is."""
    store = MemoryStore()
    await _first_life(store)
    written = store.snapshots[""]
    async with running(store, snapshot_every=None) as runtime:
        await runtime.settle()
        assert runtime.restored_from is None
    assert list(store.snapshots) == [""]
    assert store.snapshots[""].state == written.state


async def test_a_snapshot_of_another_configuration_is_replaced_not_loaded() -> None:
    """Other limits make another stamp: the log is replayed from the start, and the snapshot
    written then is of the new configuration."""
    store = MemoryStore()
    await _first_life(store)
    before = store.snapshots[""]
    async with running(store, limits=CallLimits(max_live_per_turn=32)) as runtime:
        assert runtime.restored_from is None
    assert store.snapshots[""].stamp != before.stamp


async def test_a_damaged_snapshot_is_replayed_past() -> None:
    """A snapshot whose state is not what was written is not loaded: the restart replays the
    log from the start."""
    store = MemoryStore()
    await _first_life(store)
    snapshot = store.snapshots[""]
    store.snapshots[""] = attrs.evolve(snapshot, state=snapshot.state[:-1] + b"\x00")
    assert await _second_life(store) is None


async def test_snapshot_every_must_be_positive() -> None:
    """Zero or less is refused by name."""
    with pytest.raises(ConfigurationError, match="snapshot_every must be at least 1"):
        async with running(MemoryStore(), snapshot_every=0):
            pass


class _FirstSnapshotOnly(MemoryLog):
    """Keeps the first snapshot written: what redaction does to it afterwards shows."""

    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None:
        if not self.store.snapshots:
            await super()._write_snapshot(snapshot)


async def test_no_argument_byte_outlives_its_redaction_in_a_snapshot() -> None:
    """A snapshot holds a live call's bytes only in its payloads, never in its state, and
    retention's redaction of the call deletes them."""
    store = MemoryStore()
    key = key_of("a", response="a")
    log = _FirstSnapshotOnly(store, clock=trio_clock())
    async with open_runtime(log=log, tools=TOOLS, snapshot_every=3) as runtime:
        await start(runtime)
        await runtime.feed(call_events(key, ARGUMENTS, parts=3)[:3])
        await runtime.settle()
        # Taken as the fold passed its position; written by a task of its own, which may not
        # have run yet.
        await trio.testing.wait_all_tasks_blocked()
        [snapshot] = store.snapshots.values()
        assert ARGUMENTS[:4] in b"".join(payload.data for payload in snapshot.payloads)
        assert ARGUMENTS[:4] not in snapshot.state
        await runtime.feed([*call_events(key, ARGUMENTS, parts=3)[3:], response_end(key)])
        await runtime.settle()
        await runtime.complete(await runtime.claim(key, executor="worker"))
        await runtime.settle()
    [snapshot] = store.snapshots.values()
    assert all(ARGUMENTS[:4] not in payload.data for payload in snapshot.payloads)
    assert ARGUMENTS[:4] not in snapshot.state


async def test_a_restart_on_sqlite_starts_from_its_snapshot(tmp_path: Path) -> None:
    """On SQLite, with retention on, a restart loads the snapshot beside the log and reaches
    the digest a replay from the start reaches."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    key = key_of("a", response="a")
    async with open_runtime(log=url, create=True, tools=TOOLS, snapshot_every=3) as runtime:
        await start(runtime)
        await ready_call(runtime, key)
        dispatch = await runtime.claim(key, executor="worker")
        await runtime.complete(dispatch)
        await runtime.settle()
        digest = runtime.digest()
    async with open_runtime(log=url, tools=TOOLS, snapshot_every=3) as runtime:
        assert runtime.restored_from is not None
        assert runtime.digest() == digest
        assert runtime.phase(key) is Phase.DISPATCHED
    async with open_runtime(log=url, tools=TOOLS, snapshot_every=None) as runtime:
        assert runtime.digest() == digest


class _StopsWhileRedacting(MemoryLog):
    """A process that stops while it makes a redaction: left to the next one."""

    snapshot_written = trio.Event()

    async def _redact(
        self,
        stream: str,
        up_to_version: int,
        event_types: frozenset[str] | None,
        keys: frozenset[CallKey] | None,
    ) -> int:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def _write_snapshot(self, snapshot: StoredSnapshot) -> None:
        await super()._write_snapshot(snapshot)
        self.snapshot_written.set()
        self.snapshot_written = trio.Event()


async def test_a_redaction_not_made_when_the_snapshot_was_taken_is_made_after_the_restart() -> None:
    """A redaction due, or taken and not yet made, when a snapshot was taken is due again when
    a runtime restarts from it: the restart makes it and settles, and the bytes leave the log."""
    store = MemoryStore()
    key = key_of("a", response="a")
    log = _StopsWhileRedacting(store, clock=trio_clock())
    async with open_runtime(log=log, tools=TOOLS, snapshot_every=1) as runtime:
        await start(runtime)
        await ready_call(runtime, key)
        await runtime.complete(await runtime.claim(key, executor="worker"))
        with trio.fail_after(60):
            while (snapshot := store.snapshots.get("")) is None or snapshot.position < len(
                store.rows
            ):
                await log.snapshot_written.wait()
    assert any(ARGUMENTS[:4] in (row.payload or b"") for row in store.rows)
    async with running(store, snapshot_every=1) as runtime:
        assert runtime.restored_from == len(store.rows)
        await runtime.settle()
    assert all(ARGUMENTS[:4] not in (row.payload or b"") for row in store.rows)
