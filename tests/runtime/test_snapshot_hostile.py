"""A snapshot is data, never a program, and belongs to its log: every hostile row is refused,
reported once, and the log replayed from the start."""

from __future__ import annotations

import copy
import logging
import sqlite3
from pathlib import Path

import attrs
import msgpack
import pytest
import trio
from hostile_snapshots import CORPUS, HostileSnapshot
from postgres_support import connect, fresh_schema, log_url
from test_runtime import TOOLS, key_of, ready_call, start
from test_snapshot_restart import _first_life, running

from inert import open_runtime
from inert.log import MemoryLog, MemoryStore, StoredSnapshot
from inert.log._records import with_checksum
from inert.log._snapshots import state_digest
from inert.runtime._snapshot import SNAPSHOT_KEY, keyed_digest

LOGGER = "inert.snapshot"


@pytest.fixture(scope="module")
def written() -> tuple[MemoryStore, StoredSnapshot]:
    """A log a runtime left, with the snapshot it wrote."""
    store = MemoryStore()
    trio.run(_first_life, store)
    [snapshot] = store.snapshots.values()
    return store, snapshot


def _copy(store: MemoryStore) -> MemoryStore:
    copied = copy.copy(store)
    copied.rows = list(store.rows)
    copied.by_id = dict(store.by_id)
    copied.streams = {name: list(positions) for name, positions in store.streams.items()}
    copied.snapshots = dict(store.snapshots)
    return copied


async def _opened(store: MemoryStore, **options: object) -> list[str]:
    """Open a runtime on the log, let it settle; the types of the events it wrote."""
    before = len(store.rows)
    async with running(store, **options) as runtime:
        await runtime.settle()
    return [row.event_type for row in store.rows[before:]]


async def _replayed_digest(store: MemoryStore) -> str:
    async with running(_copy(store), snapshot_every=None) as replayed:
        return replayed.digest()


def _digest(store: MemoryStore, state: bytes, keyed: bool) -> str:
    """The digest whoever writes the row can make: with the log's key if they read it too."""
    if not keyed:
        return state_digest(state)
    return keyed_digest(MemoryLog(store).key(SNAPSHOT_KEY), state)


# Every case with its digest made again unkeyed; those refused for what their bytes are, keyed
# by the log's own key as well (a change within data is told by the keyed digest alone).
_ROWS = [(case, False) for case in CORPUS] + [(case, True) for case in CORPUS if case.data_only]


@pytest.mark.parametrize(
    ("case", "keyed"),
    _ROWS,
    ids=[f"{case.name}, {'keyed' if keyed else 'unkeyed'}" for case, keyed in _ROWS],
)
async def test_a_hostile_snapshot_is_refused_reported_once_and_the_log_replayed(
    case: HostileSnapshot,
    keyed: bool,
    written: tuple[MemoryStore, StoredSnapshot],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The runtime starts from the start of the log, as one without a snapshot does; nothing
    the row names runs; the refusal is said once, and the row does not come back."""
    valid_store, valid = written
    canary = tmp_path / "ran"
    store = _copy(valid_store)
    state = case.forge(valid, canary)
    store.snapshots[""] = attrs.evolve(valid, state=state, digest=_digest(store, state, keyed))
    without = _copy(valid_store)
    without.snapshots.clear()
    expected = await _opened(without, snapshot_every=None)
    before = len(store.rows)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        async with running(store) as runtime:
            await runtime.settle()
            assert runtime.restored_from is None
            assert runtime.snapshot_refusal
            digest = runtime.digest()
    # The same decisions, in whatever order the actors' appends landed.
    assert sorted(row.event_type for row in store.rows[before:]) == sorted(expected)
    assert digest == await _replayed_digest(store)
    assert not canary.exists()
    refusals = [record for record in caplog.records if record.name == LOGGER]
    assert len(refusals) == 1
    assert runtime.snapshot_refusal in refusals[0].getMessage()
    caplog.clear()
    async with running(store) as again:
        await again.settle()
        assert again.snapshot_refusal is None
    assert not [record for record in caplog.records if record.name == LOGGER]


async def test_the_valid_snapshot_of_the_corpus_is_loaded(
    written: tuple[MemoryStore, StoredSnapshot],
) -> None:
    """The snapshot the cases are made of is one a runtime starts from."""
    store, valid = written
    async with running(_copy(store)) as runtime:
        assert runtime.restored_from == valid.position
        assert runtime.snapshot_refusal is None


async def test_a_snapshot_of_another_log_with_the_same_events_is_refused(
    written: tuple[MemoryStore, StoredSnapshot], caplog: pytest.LogCaptureFixture
) -> None:
    """Two logs holding the same events (a copy, two environments fed alike) are still two
    logs: a snapshot taken of one is refused by the other, which replays and goes on."""
    store, valid = written
    other = _copy(store)
    other.identity = "log-other"
    other.snapshots[""] = valid
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        async with running(other) as runtime:
            await runtime.settle()
            assert runtime.restored_from is None
            assert "another log" in (runtime.snapshot_refusal or "")


async def test_a_snapshot_past_the_head_is_refused_at_once(
    written: tuple[MemoryStore, StoredSnapshot],
) -> None:
    """A log restored from a backup older than its snapshot: the snapshot is past the head,
    refused without waiting for positions that may never come."""
    store, valid = written
    older = _copy(store)
    cut = valid.position - 3
    older.rows = older.rows[:cut]
    older.by_id = {row.event_id: row for row in older.rows}
    older.streams = {
        name: [position for position in positions if position <= cut]
        for name, positions in older.streams.items()
    }
    older.streams = {name: positions for name, positions in older.streams.items() if positions}
    async with running(older) as runtime:
        await runtime.settle()
        assert runtime.restored_from is None
        assert "past the log's head" in (runtime.snapshot_refusal or "")


async def test_a_snapshot_whose_position_holds_another_event_is_refused(
    written: tuple[MemoryStore, StoredSnapshot],
) -> None:
    """The log restored from a backup and written on since holds other events where the
    snapshot was taken: refused by the event at its position."""
    store, valid = written
    diverged = _copy(store)
    row = diverged.rows[valid.position - 1]
    other = with_checksum(row._replace(event_id="another-event"))
    diverged.rows[valid.position - 1] = other
    del diverged.by_id[row.event_id]
    diverged.by_id[other.event_id] = other
    async with running(diverged, snapshot_every=None) as runtime:
        assert runtime.snapshot_refusal is None
    diverged.snapshots[""] = valid
    async with running(diverged) as runtime:
        await runtime.settle()
        assert runtime.restored_from is None
        assert "not the one it was taken after" in (runtime.snapshot_refusal or "")


async def test_a_snapshot_changed_into_another_valid_state_is_refused_by_its_keyed_digest(
    written: tuple[MemoryStore, StoredSnapshot],
) -> None:
    """A change that leaves a state of the right types (an integer for an integer), its digest
    made again as whoever writes the row can, is told by the digest the log keys."""
    store, valid = written
    state = bytearray(valid.state)
    at = state.index(msgpack.packb(valid.position), len(state) // 2)
    state[at] = (state[at] + 1) % 0x80
    changed = _copy(store)
    changed.snapshots[""] = attrs.evolve(
        valid, state=bytes(state), digest=state_digest(bytes(state))
    )
    async with running(changed) as runtime:
        assert runtime.restored_from is None
        assert "not the one written" in (runtime.snapshot_refusal or "")


# --- in real storage ---------------------------------------------------------------------------


async def _left_by_a_runtime(url: str) -> tuple[str, bytes]:
    """A log at ``url`` left by a runtime that wrote a snapshot; its identity and snapshot key."""
    async with open_runtime(log=url, create=True, tools=TOOLS, snapshot_every=4) as runtime:
        await start(runtime)
        for name in "abc":
            await ready_call(runtime, key_of(name, response=name))
        return runtime.log.identity, runtime.log.key(SNAPSHOT_KEY)


def _pickle_that_runs(canary: Path) -> bytes:
    return next(case for case in CORPUS if case.name == "pickle 5: os.system").forge(
        StoredSnapshot(name="", position=1, stamp="", state=b""), canary
    )


async def _reopened(url: str, caplog: pytest.LogCaptureFixture) -> str | None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        async with open_runtime(log=url, tools=TOOLS, snapshot_every=4) as runtime:
            await runtime.settle()
            assert runtime.restored_from is None
            return runtime.snapshot_refusal


async def test_a_pickle_in_an_sqlite_snapshot_row_is_refused_without_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The snapshot row of an SQLite log replaced by a pickle that runs a program, digest keyed
    by the log's own key: the runtime replays and the program never runs."""
    path = tmp_path / "log.db"
    _, key = await _left_by_a_runtime(f"sqlite:///{path}")
    canary = tmp_path / "ran"
    state = _pickle_that_runs(canary)
    with sqlite3.connect(path) as connection:
        connection.execute(
            "UPDATE snapshots SET state = ?, digest = ?", (state, keyed_digest(key, state))
        )
    assert "does not begin as a snapshot" in (await _reopened(f"sqlite:///{path}", caplog) or "")
    assert not canary.exists()


async def test_a_snapshot_copied_between_postgresql_schemas_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two logs on one server fed alike: the snapshot row of one copied into the other (a
    restored backup of another environment) is refused, and the other replays."""
    with fresh_schema() as first, fresh_schema() as second:
        await _left_by_a_runtime(log_url(first))
        await _left_by_a_runtime(log_url(second))
        with connect() as connection:
            connection.execute(f"DELETE FROM {second}.snapshot_payloads")
            connection.execute(f"DELETE FROM {second}.snapshots")
            connection.execute(f"INSERT INTO {second}.snapshots SELECT * FROM {first}.snapshots")
            connection.execute(
                f"INSERT INTO {second}.snapshot_payloads SELECT * FROM {first}.snapshot_payloads"
            )
        refusal = await _reopened(log_url(second), caplog) or ""
        # Its payloads are sealed under the first log's keys, its digest keyed by it.
        assert "does not open with its key" in refusal or "not the one written" in refusal
