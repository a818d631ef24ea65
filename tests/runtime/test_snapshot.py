"""Snapshots against a replay from the start: a state loaded and folded on must be the same.

A snapshot is taken of the log as it was at a position (payloads unredacted), and loaded on the
log as it is later (redacted since, where retention got to it): the fold, the work it gives the
actors on going live, the projections' digest and the retention plan must be what folding the
later log from the start gives.
"""

from __future__ import annotations

import collections
import enum
import gc
from array import array
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache, partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

import attrs
import pytest
import trio
from fold_views import decoded, folded_view, work_of
from golden_logs import GOLDEN_DIGEST_KEY, golden_paths, load

from inert import RecordedEvent, TurnRef
from inert.actors import DEFAULT_LIMITS, CallFold, CallLimits
from inert.actors._call import DIGEST_KEY
from inert.events import Redacted
from inert.log import MemoryLog, StoredSnapshot
from inert.projections import Projections
from inert.runtime import _snapshot as snapshot_module
from inert.runtime._retention import DEFAULT_RETENTION, KEEP_EVERYTHING, Retention, RetentionPlan
from inert.runtime._snapshot import (
    ARGUMENTS,
    FRAGMENTS,
    Binding,
    Configuration,
    RuntimeState,
    SnapshotUnusable,
    binding_of,
    capture,
    keyed_digest,
    restore,
    stamp,
)
from inert.runtime._state_codec import Writer
from inert.testing import DEMO_TOOLS, SIMULATION_LIMITS
from inert.testing._simulator import _as_appended, _read, _run_once, demo_check
from inert.testing._workload import make_plan

STAMP = "test-stamp"
LOG = "log-test"
KEY = b"k" * 32
SEEDS = range(3)


@attrs.define
class Folded:
    """A fold, the projections and the retention plan, fed the same records."""

    fold: CallFold
    projections: Projections
    retention: RetentionPlan
    last: str = ""
    """The id of the last event folded."""

    @classmethod
    def new(cls, limits: CallLimits, retention: Retention, digest_key: bytes = b"") -> Folded:
        fold = CallFold(limits, digest_key=digest_key)
        return cls(fold, Projections(), RetentionPlan(retention))

    def apply(self, records: Sequence[RecordedEvent]) -> None:
        for recorded in records:
            self.fold.apply(recorded)
            self.projections.apply(recorded)
            self.retention.heard(recorded, self.fold)
            self.last = recorded.event_id

    def binding(self) -> Binding:
        return Binding(log=LOG, position=self.fold.position, event_id=self.last, key=KEY)

    def state(self) -> RuntimeState:
        return RuntimeState(
            position=self.fold.position,
            fold=self.fold,
            projections=self.projections,
            retention=self.retention,
            peers=None,
        )


def owns_every_turn(turn: TurnRef) -> bool:
    """A runtime alone on its log owns every turn."""
    return True


def _bound(snapshot: StoredSnapshot) -> Binding:
    """The binding of a snapshot these tests took, as the log it was taken of gives it."""
    return attrs.evolve(binding_of(snapshot), key=KEY)


def _turns(records: Sequence[RecordedEvent]) -> set[TurnRef]:
    return {key.turn_ref for r in records if (key := getattr(r.kept, "key", None)) is not None}


def _as_stored_later(snapshot: StoredSnapshot, later: Sequence[RecordedEvent]) -> StoredSnapshot:
    """The snapshot as a log holding ``later`` keeps it: payloads of redacted streams gone."""
    redacted: dict[str, int] = {}
    for r in later:
        if isinstance(r.event, Redacted):
            redacted[r.stream] = max(redacted.get(r.stream, 0), r.version)
    kept = tuple(
        payload
        for payload in snapshot.payloads
        if redacted.get(payload.stream, 0) < payload.first_version
    )
    return attrs.evolve(snapshot, payloads=kept)


@attrs.frozen
class FullReplay:
    """What folding a log from the start gives, as the comparisons read it: the same at every
    cut of that log, so folded once for all of them."""

    work: Any
    view: dict[str, Any]
    digest: str
    effective: set[tuple[str, int, str]]

    @classmethod
    def of(
        cls,
        later: Sequence[RecordedEvent],
        *,
        limits: CallLimits,
        retention: Retention,
        digest_key: bytes = b"",
    ) -> FullReplay:
        full = Folded.new(limits, retention, digest_key)
        full.apply(later)
        # Read in the order a comparison reads them: going live and taking the redactions due
        # change the fold and the plan.
        work = work_of(full.fold.go_live())
        view = folded_view(full.fold, _turns(later))
        digest = full.projections.digest()
        return cls(work, view, digest, _effective(full.retention, later))


def compare_from_snapshot(
    written: Sequence[RecordedEvent],
    later: Sequence[RecordedEvent],
    cut: int,
    full: FullReplay,
    *,
    limits: CallLimits,
    retention: Retention,
    live: bool,
    digest_key: bytes = b"",
) -> None:
    """Snapshot ``written[:cut]``, load it on ``later`` and fold the rest: as ``full``, the
    replay of ``later`` from the start."""
    before = Folded.new(limits, retention, digest_key)
    before.fold.live = live
    before.apply(written[:cut])
    binding = before.binding()
    snapshot = capture(before.state(), name="", stamp=STAMP, binding=binding)
    loaded = restore(_as_stored_later(snapshot, later), stamp=STAMP, binding=binding)
    assert loaded.position == cut
    after = Folded(loaded.fold, loaded.projections, loaded.retention)
    after.apply(later[cut:])
    turns = _turns(later)
    assert work_of(after.fold.go_live()) == full.work
    kept = _as_stored_later(snapshot, later).payloads
    dropped = {_call_stream(p.part) for p in snapshot.payloads if p not in kept}
    dropped |= _redacted_since(written[:cut], later)
    assert _without_counts(folded_view(after.fold, turns), dropped) == _without_counts(
        full.view, dropped
    )
    assert after.projections.digest() == full.digest
    assert _effective(after.retention, later) == full.effective


def _redacted_since(folded: Sequence[RecordedEvent], later: Sequence[RecordedEvent]) -> set[str]:
    """The calls an event of which the snapshot folded as written and the later log holds
    redacted (their payloads freed before the snapshot, their counts taken in)."""
    return {
        key.stream
        for before, after in zip(folded, later, strict=False)
        if isinstance(after.event, Redacted) and not isinstance(before.event, Redacted)
        if (key := getattr(before.event, "key", None)) is not None
    }


def _call_stream(part: str) -> str:
    return part.split(" ", 1)[1]


def _effective(plan: RetentionPlan, log: Sequence[RecordedEvent]) -> set[tuple[str, int, str]]:
    """The payloads of ``log`` the redactions due now would redact (a redaction due again for
    payloads redacted since the snapshot redacts nothing)."""
    due = plan.take(owns_every_turn)
    return {
        (r.stream, r.version, r.event_type)
        for stream, version, types, keys in due
        for r in log
        if r.stream == stream
        and r.version <= version
        and r.event_type in types
        and (keys is None or getattr(r.event, "key", None) in keys)
        and not isinstance(r.event, Redacted)
    }


def _without_counts(folded: dict[str, Any], dropped: set[str]) -> dict[str, Any]:
    """A fold's answers, where a call whose payload was redacted since the snapshot (not live by
    then, judged by identities and phase alone) is compared without what it received (counts,
    sequences, its end event): loaded, it keeps them; a replay of the redacted log, degraded
    from the first redacted fragment, never took them in."""
    calls = dict(folded["calls"])
    for key, call in calls.items():
        if key.stream in dropped:
            assert not call[15], f"{key.stream} is {call[1].value}, yet redacted"
            calls[key] = call[:3] + call[8:]
    return {**folded, "calls": calls}


def _cuts(count: int) -> list[int]:
    return sorted({1, count // 5, count // 3, count // 2, (3 * count) // 4, count - 1, count})


@cache
def _simulated(
    seed: int, retention: Retention
) -> tuple[list[RecordedEvent], list[RecordedEvent], bytes]:
    """A seed's log as each event was written, and as the log holds it at the end, and the key of
    its arguments digests. Kept for the tests that follow (never changed by them): several read
    each seed's log, and the run is deterministic, so a second would write the same."""
    plan = make_plan(seed, 200, DEMO_TOOLS, SIMULATION_LIMITS)
    run = _run_once(
        seed,
        plan=plan,
        tools=DEMO_TOOLS,
        check=demo_check,
        limits=SIMULATION_LIMITS,
        retention=retention,
        horizon=timedelta(seconds=2),
    )
    later: list[RecordedEvent] = trio.run(partial(_read, run.store.rows))
    return _as_appended(later, run.appended), later, MemoryLog(run.store).key(DIGEST_KEY)


@pytest.mark.parametrize("live", [False, True], ids=["replayed", "live"])
@pytest.mark.parametrize("retention", ["default", "keep"])
@pytest.mark.parametrize("seed", SEEDS)
def test_a_snapshot_of_a_simulator_log_folds_on_as_a_full_replay(
    seed: int, retention: str, live: bool
) -> None:
    """At every cut of a seed's log, redacted since or not, loading a snapshot and folding the
    rest reaches the state, the work and the digest of folding the log from the start."""
    policy = DEFAULT_RETENTION if retention == "default" else KEEP_EVERYTHING
    written, later, digest_key = _simulated(seed, policy)
    full = FullReplay.of(later, limits=SIMULATION_LIMITS, retention=policy, digest_key=digest_key)
    for cut in _cuts(len(later)):
        compare_from_snapshot(
            written,
            later,
            cut,
            full,
            limits=SIMULATION_LIMITS,
            retention=policy,
            live=live,
            digest_key=digest_key,
        )


@pytest.mark.parametrize("path", golden_paths(), ids=[path.stem for path in golden_paths()])
def test_a_snapshot_of_a_golden_log_folds_on_as_a_full_replay(path: Path) -> None:
    """Every golden log, cut anywhere, folds on from a snapshot as from the start."""
    golden = load(path)
    records = decoded(golden.rows)
    full = FullReplay.of(
        records, limits=golden.limits, retention=DEFAULT_RETENTION, digest_key=GOLDEN_DIGEST_KEY
    )
    for cut in range(1, len(records) + 1):
        compare_from_snapshot(
            records,
            records,
            cut,
            full,
            limits=golden.limits,
            retention=DEFAULT_RETENTION,
            live=False,
            digest_key=GOLDEN_DIGEST_KEY,
        )


def _some_state() -> tuple[Folded, StoredSnapshot]:
    written, _, digest_key = _simulated(0, KEEP_EVERYTHING)
    folded = Folded.new(SIMULATION_LIMITS, KEEP_EVERYTHING, digest_key)
    folded.apply(written[: len(written) // 3])
    return folded, capture(folded.state(), name="", stamp=STAMP, binding=folded.binding())


def test_capturing_leaves_the_state_as_it_was() -> None:
    """Payloads are taken out of the calls while the state is written and put back after."""
    folded, snapshot = _some_state()
    assert snapshot.payloads
    turns = {key.turn_ref for key in folded.fold.records}
    before = folded_view(folded.fold, turns)
    held = {key: _payload_fields(slot) for key, slot in folded.fold.records.items()}
    capture(folded.state(), name="", stamp=STAMP, binding=folded.binding())
    assert folded_view(folded.fold, turns) == before
    for key, slot in folded.fold.records.items():
        assert all(a is b for a, b in zip(_payload_fields(slot), held[key], strict=True))


def test_a_snapshots_payloads_are_each_calls_parts_in_order_and_read_as_a_tuple() -> None:
    """A capture holds one payload per part a call holds, named by the part and the call, under
    the stream whose redaction takes it; it indexes, slices and compares as their tuple does."""
    folded, snapshot = _some_state()
    payloads = tuple(snapshot.payloads)
    expected = [
        (f"{part.kind} {slot.key.stream}", *part.stream(slot))
        for slot in folded.fold.records.values()
        for part in (FRAGMENTS, ARGUMENTS)
        if part.held_by(slot)
    ]
    assert [(p.part, p.stream, p.first_version) for p in payloads] == expected
    assert all(type(p.data) is bytes and p.data for p in payloads)
    assert snapshot.payloads == payloads
    assert snapshot.payloads != payloads[1:]
    assert list(snapshot.payloads[1:4]) == list(payloads[1:4])
    assert snapshot.payloads[-1] == payloads[-1]
    with pytest.raises(IndexError):
        snapshot.payloads[len(payloads)]
    restored = restore(
        attrs.evolve(snapshot, payloads=payloads), stamp=STAMP, binding=_bound(snapshot)
    )
    assert restored.fold.records.keys() == folded.fold.records.keys()


@pytest.mark.parametrize("enabled", [True, False])
def test_no_collection_runs_while_a_state_is_captured(
    enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cyclic collector is paused while a state is written (its objects die by reference
    counts alone), and left as the host had it after."""
    folded, _ = _some_state()
    seen: list[bool] = []

    class Watched(Writer):
        def __call__(self, value: object) -> bytes:
            seen.append(gc.isenabled())
            return super().__call__(value)

    monkeypatch.setattr(snapshot_module, "Writer", Watched)
    was_enabled = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        capture(folded.state(), name="", stamp=STAMP, binding=folded.binding())
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was_enabled else gc.disable)()
    assert seen
    assert not any(seen)


def _payload_fields(slot: Any) -> tuple[object, ...]:
    return tuple(getattr(slot, name) for name in (*FRAGMENTS.fields, *ARGUMENTS.fields))


def test_a_snapshot_of_another_stamp_is_not_loaded() -> None:
    """Other code or configuration made it: unusable."""
    _, snapshot = _some_state()
    with pytest.raises(SnapshotUnusable, match="another code or configuration"):
        restore(snapshot, stamp="another", binding=_bound(snapshot))


def test_a_damaged_snapshot_is_not_loaded() -> None:
    """A state that is not what was written is refused by its digest."""
    _, snapshot = _some_state()
    damaged = bytearray(snapshot.state)
    damaged[len(damaged) // 2] ^= 0xFF
    with pytest.raises(SnapshotUnusable, match="damaged"):
        restore(attrs.evolve(snapshot, state=bytes(damaged)), stamp=STAMP, binding=_bound(snapshot))


def test_fragments_that_are_a_prefix_of_the_calls_bytes_are_stored_as_those_bytes() -> None:
    """A collecting call's buffer with nothing past a gap is its bytes as they are; a forged
    one of another length is refused."""
    folded, snapshot = _some_state()
    assembled = {
        f"fragments {slot.key.stream}": slot._buffer.assembled()
        for slot in folded.fold.records.values()
        if slot._buffer.prefix_only and not slot.held
    }
    stored = tuple(snapshot.payloads)
    as_bytes = [p for p in stored if p.part in assembled]
    assert as_bytes
    for payload in as_bytes:
        assert payload.data == b"\x00" + assembled[payload.part]
    assert any(not p.data.startswith(b"\x00") for p in stored)
    loaded = restore(snapshot, stamp=STAMP, binding=_bound(snapshot))
    for payload in as_bytes:
        assert _slot_of(loaded, payload.part)._buffer.assembled() == assembled[payload.part]
    forged = attrs.evolve(as_bytes[0], data=as_bytes[0].data + b" ")
    payloads = tuple(forged if p is as_bytes[0] else p for p in stored)
    with pytest.raises(SnapshotUnusable, match=r"is not a call's: .* bytes are not the prefix"):
        restore(attrs.evolve(snapshot, payloads=payloads), stamp=STAMP, binding=_bound(snapshot))


def _slot_of(state: RuntimeState, part: str) -> Any:
    return next(s for s in state.fold.records.values() if part == f"fragments {s.key.stream}")


def test_a_truncated_state_is_unreadable_not_an_error_of_the_reader() -> None:
    """Whatever reading the bytes raises is said as an unusable snapshot."""
    _, snapshot = _some_state()
    cut = snapshot.state[: len(snapshot.state) // 2]
    with pytest.raises(SnapshotUnusable, match="cannot be read"):
        restore(
            attrs.evolve(snapshot, state=cut, digest=keyed_digest(KEY, cut)),
            stamp=STAMP,
            binding=_bound(snapshot),
        )


def test_the_stamp_changes_with_the_configuration_the_fold_depends_on() -> None:
    """Limits, horizon, retention, process and lease time each make another stamp."""
    base = Configuration(
        limits=DEFAULT_LIMITS,
        ledger_horizon=timedelta(days=30),
        retention=DEFAULT_RETENTION,
        process=None,
        lease_time=10.0,
    )
    variants = [
        attrs.evolve(base, limits=attrs.evolve(DEFAULT_LIMITS, max_live_per_turn=1)),
        attrs.evolve(base, ledger_horizon=None),
        attrs.evolve(base, retention=KEEP_EVERYTHING),
        attrs.evolve(base, process="a"),
        attrs.evolve(base, lease_time=11.0),
    ]
    stamps = {stamp(base), *(stamp(variant) for variant in variants)}
    assert len(stamps) == len(variants) + 1
    assert stamp(base) == stamp(attrs.evolve(base))


def _same_graph(
    written: Any, loaded: Any, pairs: dict[int, int], path: str, within: bool = False
) -> None:
    """``loaded`` is ``written`` made again: the same types, the same values field by field,
    and the same sharing of what can change (a mutable object met twice in one is one object
    met twice in the other; a value that cannot change, and what it holds, may be equal
    copies)."""
    assert type(loaded) is type(written), path
    if isinstance(written, (str, bytes, int, float, type(None))):
        assert loaded == written, path
        return
    within = within or _immutable(written)
    if not within:
        seen = pairs.get(id(written))
        if seen is not None:
            assert seen == id(loaded), f"{path}: shared in the state, not once loaded"
            return
        pairs[id(written)] = id(loaded)
    if isinstance(written, (dict, MappingProxyType)):
        assert list(written) == list(loaded), path
        for (key, value), other in zip(written.items(), loaded.values(), strict=True):
            _same_graph(value, other, pairs, f"{path}[{key!r}]", within)
    elif isinstance(written, (list, tuple, collections.deque)):
        assert len(written) == len(loaded), path
        for at, (value, other) in enumerate(zip(written, loaded, strict=True)):
            _same_graph(value, other, pairs, f"{path}[{at}]", within)
    elif isinstance(written, (set, frozenset, array, bytearray, datetime, timedelta, enum.Enum)):
        assert loaded == written, path
    else:
        names = {
            name
            for base in type(written).__mro__
            for name in base.__dict__.get("__slots__", ())
            if name not in ("__weakref__", "_routes")
        } | set(getattr(written, "__dict__", {}))
        for name in sorted(names):
            value = getattr(written, name, _ABSENT)
            other = getattr(loaded, name, _ABSENT)
            if value is _ABSENT or other is _ABSENT:
                assert value is other, f"{path}.{name}"
                continue
            _same_graph(value, other, pairs, f"{path}.{name}", within)


_ABSENT = object()


def _immutable(value: object) -> bool:
    cls = type(value)
    if isinstance(value, (tuple, frozenset, MappingProxyType, enum.Enum, datetime, timedelta)):
        return True
    return attrs.has(cls) and getattr(cls.__setattr__, "__name__", "") == "_frozen_setattrs"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_restored_state_is_the_captured_state_made_again(seed: int) -> None:
    """At every cut of a seed's log, the state a snapshot gives back is the state it was taken
    of, object for object, with the same sharing (the fold, projections and retention plan)."""
    written, _, digest_key = _simulated(seed, KEEP_EVERYTHING)
    for cut in _cuts(len(written)):
        folded = Folded.new(SIMULATION_LIMITS, KEEP_EVERYTHING, digest_key)
        folded.apply(written[:cut])
        binding = folded.binding()
        snapshot = capture(folded.state(), name="", stamp=STAMP, binding=binding)
        loaded = restore(snapshot, stamp=STAMP, binding=binding)
        original = folded.state()
        _same_graph(original.fold, loaded.fold, {}, "fold")
        _same_graph(original.projections, loaded.projections, {}, "projections")
        _same_graph(original.retention.kept(), loaded.retention.kept(), {}, "retention")
