"""Golden logs: every log an earlier version wrote replays on this one to the state it recorded.

Each file of ``tests/golden`` (see ``golden_logs.py``) must decode row by row with this codec
(older schema versions through its upcasters), fold through the call decider with every recorded
decision found to be the one it makes (no ``ReplayDivergence``), and reach the recorded state
digest and ledger.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio.testing
from conftest import RUN_COUNTS
from golden_logs import GOLDEN, RECORDINGS, golden_paths, golden_store, load, replay

from inert import ReplayDivergence, Retention, open_runtime
from inert.events import DEFAULT_CODEC, CallCancelled, CancelReason
from inert.events._times import micros_to_datetime
from inert.log import MemoryLog
from inert.log._records import decode_record, redacted, with_checksum

PATHS = golden_paths()
MIN_LOGS = 50
# Two generations of logs: schema 1's (fragments placed by sequence) and schema 2's (by offset).
MAX_BYTES = 4 * 1024 * 1024


def test_there_are_enough_golden_logs() -> None:
    """At least 50 golden logs are kept, and they stay small enough to keep in the repository."""
    RUN_COUNTS["golden logs replayed"] = len(PATHS)
    assert len(PATHS) >= MIN_LOGS
    assert sum(path.stat().st_size for path in PATHS) < MAX_BYTES


def test_every_recording_has_its_golden_log() -> None:
    """A scenario added to the recorder is recorded before it is committed."""
    recorded = {path.stem for path in PATHS}
    missing = [r.name for r in RECORDINGS if r.name not in recorded]
    assert not missing, f"run `make golden` to record {missing}"
    assert all(path.parent == GOLDEN for path in PATHS)


@pytest.mark.parametrize("path", PATHS, ids=[path.stem for path in PATHS])
def test_every_row_decodes_and_its_schema_round_trips(path: Path) -> None:
    """Each payload decodes with this codec (upcast when older), encodes again under its tag,
    and decodes to the same event; a payload already at the current version encodes to the very
    bytes stored. A redacted row keeps its digest and the length of what it stood for."""
    golden = load(path)
    assert golden.header["events"] == len(golden.rows)
    assert [row.position for row in golden.rows] == list(range(1, len(golden.rows) + 1))
    for row in golden.rows:
        decode_record(DEFAULT_CODEC, row)
        if row.digest is not None:
            assert len(row.digest) == 32, row.position
            assert row.payload_length > 0, row.position
        if row.payload is None:
            continue
        event = DEFAULT_CODEC.decode(row.event_type, row.schema_version, row.payload)
        tag, version, payload = DEFAULT_CODEC.encode(event)
        assert tag == row.event_type
        assert DEFAULT_CODEC.decode(tag, version, payload) == event, row.position
        if version == row.schema_version:
            assert payload == row.payload, row.position


@pytest.mark.parametrize("path", PATHS, ids=[path.stem for path in PATHS])
def test_a_golden_log_replays_to_its_recorded_state(path: Path) -> None:
    """The call decider makes every decision the log records, and none it lacks; the
    projections reach the recorded state digest and ledger."""
    golden = load(path)
    try:
        replayed = replay(golden.rows, golden.limits)
    except ReplayDivergence as divergence:
        pytest.fail(f"{path.name}: {divergence}")
    assert replayed.unwritten == {}
    assert replayed.ledger == golden.header["ledger"]
    assert replayed.digest == golden.header["digest"]


@pytest.mark.parametrize("path", PATHS, ids=[path.stem for path in PATHS])
def test_a_golden_log_redacted_as_retention_would_replays_alike(path: Path) -> None:
    """With every payload the default retention may redact redacted, the log still replays
    without a divergence to the recorded digest and ledger: retention never changes a state."""
    golden = load(path)
    types = Retention().types()
    rows = [redacted(row, DEFAULT_CODEC) if row.event_type in types else row for row in golden.rows]
    replayed = replay(rows, golden.limits)
    assert replayed.unwritten == {}
    assert replayed.ledger == golden.header["ledger"]
    assert replayed.digest == golden.header["digest"]


@pytest.mark.parametrize("path", PATHS, ids=[path.stem for path in PATHS])
async def test_a_runtime_opened_on_a_golden_log_reaches_its_recorded_state(
    path: Path, mock_clock: trio.testing.MockClock
) -> None:
    """A runtime restarted on the log, at the time of its last event, finds nothing left to
    do (every log ends with its calls settled) and reaches the recorded digest."""
    golden = load(path)
    store = golden_store()
    store.append(list(golden.rows))
    now = micros_to_datetime(golden.rows[-1].recorded_at)
    log = MemoryLog(store, clock=lambda: now)
    async with open_runtime(log=log, limits=golden.limits) as runtime:
        await runtime.settle()
        assert await log.head() == len(golden.rows)
        assert runtime.digest() == golden.header["digest"]


def test_a_golden_log_with_an_altered_decision_does_not_replay() -> None:
    """The replay check bites: a denied call's cancellation rewritten as a disabled tool's is a
    divergence, and a log missing its last decision leaves that decision unwritten."""
    golden = load(GOLDEN / "runtime-confirmation-denied.jsonl")
    [index] = [i for i, row in enumerate(golden.rows) if row.event_type == "decision.cancelled"]
    row = golden.rows[index]
    assert row.payload is not None
    cancelled = DEFAULT_CODEC.decode(row.event_type, row.schema_version, row.payload)
    assert isinstance(cancelled, CallCancelled)
    forged = attrs.evolve(cancelled, reason=CancelReason.TOOL_DISABLED)
    _, _, payload = DEFAULT_CODEC.encode(forged)
    rows = list(golden.rows)
    rows[index] = with_checksum(row._replace(payload=payload, payload_length=len(payload)))
    with pytest.raises(ReplayDivergence, match="tool_disabled"):
        replay(rows, golden.limits)
    assert replay(golden.rows[:index], golden.limits).unwritten == {row.stream: 1}
