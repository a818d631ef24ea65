"""The projections against their reference: golden logs, simulator seeds and generated logs.

``reference_projections`` is the package as it was before the fast path, kept as the oracle.
Both fold the same recorded events and must show the same ledger (every column of every row,
every history), dispatch queue, status, audit, snapshots and digest: read along the way (reading
is part of what is checked, as rows are made when read) and at the end. Ledger horizons from
none to zero make calls age out in the middle of the logs; generated logs put events in orders
no runtime writes. Turn retirements are put into simulator logs (in the middle of each turn and
after its end) and drawn into generated logs (for turns with live calls, with finished ones,
never seen, and again), so that what the projections forget is checked as what they keep is.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest
import reference_projections
from conftest import RUN_COUNTS
from golden_logs import golden_paths, load
from hypothesis import given, settings
from hypothesis import strategies as st
from simulated_logs import simulated

from inert import CallKey, RecordedEvent, ResponseRef, TurnRef
from inert.events import (
    DEFAULT_CODEC,
    ArgumentsAppended,
    ByTurn,
    CallAwaitingConfirmation,
    CallCancelled,
    CallCollecting,
    CallConfirmed,
    CallDispatched,
    CallFailed,
    CallStopRequested,
    CallTerminalCandidate,
    CallValidated,
    CancelReason,
    ClaimRequested,
    ControlRefused,
    EditRefused,
    Event,
    EventRejected,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    FailReason,
    Redacted,
    RejectReason,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    TerminalRef,
    TextReceived,
    ToolDisabled,
    ToolEnabled,
    TurnRetired,
)
from inert.log._records import decode_record
from inert.projections import DEFAULT_LEDGER_HORIZON, DispatchQueue, Projections, StatusCue

PATHS = golden_paths()
SEEDS = range(4)
HORIZONS: dict[str, timedelta | None] = {
    "30-days": DEFAULT_LEDGER_HORIZON,
    "none": None,
    "10-seconds": timedelta(seconds=10),
    "zero": timedelta(0),
}

Fold = Any
"""``Projections`` of either package."""

_PACKAGES = ("inert.projections", "reference_projections")


def _plain(value: Any) -> object:
    """A value of either package as plain data that compares alike: the classes of the
    projections (rows, transitions, audit entries, cues) by name and content, dicts as ordered
    pairs (their order is part of the API); identities and the rest as they are."""
    kind = type(value)
    if kind is dict:
        return [(key, _plain(item)) for key, item in value.items()]
    if kind is list:
        return [_plain(item) for item in value]
    if not kind.__module__.startswith(_PACKAGES):
        return value
    if isinstance(value, enum.Enum):
        return (kind.__name__, value.value)
    return (kind.__name__, tuple(_plain(getattr(value, f.name)) for f in attrs.fields(kind)))


def _shown(
    projections: Fold, keys: Sequence[CallKey], responses: Sequence[ResponseRef]
) -> dict[str, object]:
    """Everything the projections show through their public API."""
    ledger, queue, status, audit = (
        projections.ledger,
        projections.queue,
        projections.status,
        projections.audit,
    )
    shown = {
        "position": projections.position,
        "positions": [ledger.position, queue.position, status.position, audit.position],
        "rows": ledger.rows(),
        "row": {key: ledger.row(key) for key in keys},
        "histories": ledger.histories(),
        "history": {key: ledger.history(key) for key in keys},
        "ready": queue.ready(),
        "awaiting": queue.awaiting(),
        "length": len(queue),
        "contains": {key: key in queue for key in keys},
        "calls": status.calls(),
        "of": {key: status.of(key) for key in keys},
        "text": {response: status.text_characters(response) for response in responses},
        "entries": audit.entries(),
        "refusals": audit.refusals(),
        "snapshots": [part.snapshot() for part in (ledger, queue, status, audit)],
        "digest": projections.digest(),
    }
    return {view: _plain(value) for view, value in shown.items()}


def _held(projections: Fold) -> dict[str, set[Any]]:
    """The identities each projection holds anything of, read from the internals of either
    package: what the projections forget must be freed alike, not only hidden alike."""
    ledger, queue, status = projections.ledger, projections.queue, projections.status
    if isinstance(projections, Projections):
        return {
            "ledger": set(ledger._calls),
            "ended": set(queue._ended),
            "status": set(status._calls) | set(status._claims),
            "text": set(status._text),
        }
    tables = (ledger._rows, ledger._histories, ledger._received, ledger._claims, ledger._finished)
    return {
        "ledger": set().union(*tables),
        "ended": set(queue._ended),
        "status": set(status._cues) | set(status._claims),
        "text": set(status._text),
    }


def _filed(projections: Projections) -> dict[str, set[Any]]:
    """The identities the projections have filed under their turns, as ``_held`` names them:
    every one held, and nothing else, or a retirement would miss some or keep others alive."""
    filings: dict[str, ByTurn[Any]] = {
        "ledger": projections.ledger._turns,
        "ended": projections.queue._ended_turns,
        "status": projections.status._call_turns,
        "text": projections.status._text_turns,
    }
    return {
        name: {identity for filed in filing._turns.values() for identity in filed}
        for name, filing in filings.items()
    }


class Pair:
    """The reference and the new projections, fed alike, with the identities they saw."""

    def __init__(self, horizon: timedelta | None) -> None:
        self.reference: Fold = reference_projections.Projections(ledger_horizon=horizon)
        self.projections = Projections(ledger_horizon=horizon)
        self.keys: dict[CallKey, None] = {}
        self.responses: dict[ResponseRef, None] = {}

    def feed(self, recorded: RecordedEvent, apply: Callable[[Fold, RecordedEvent], None]) -> None:
        kept = recorded.kept
        key = getattr(kept, "key", None)
        if isinstance(key, CallKey):
            self.keys[key] = None
            self.responses[key.response_ref] = None
        response = getattr(kept, "response", None)
        if isinstance(response, ResponseRef):
            self.responses[response] = None
        apply(self.reference, recorded)
        apply(self.projections, recorded)
        if isinstance(key, CallKey):
            # As a materialized ledger reads it, after each event of the call.
            expected = _plain(self.reference.ledger.row(key))
            assert _plain(self.projections.ledger.row(key)) == expected, recorded.position

    def check(self, where: str) -> None:
        keys, responses = list(self.keys), list(self.responses)
        expected = _shown(self.reference, keys, responses)
        found = _shown(self.projections, keys, responses)
        # Name what differs rather than have pytest diff the whole state.
        differ = [view for view, value in expected.items() if found[view] != value]
        assert not differ, f"{where}: {differ} differ"
        held = _held(self.projections)
        assert held == _held(self.reference), f"{where}: they hold different identities"
        assert _filed(self.projections) == held, f"{where}: not filed by turn as held"


def _together(projections: Fold, recorded: RecordedEvent) -> None:
    projections.apply(recorded)


def _apart(projections: Fold, recorded: RecordedEvent) -> None:
    for part in (projections.ledger, projections.queue, projections.status, projections.audit):
        part.apply(recorded)


def compare(
    records: Sequence[RecordedEvent],
    *,
    horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
    every: int = 1,
    apply: Callable[[Fold, RecordedEvent], None] = _together,
) -> None:
    """Feed ``records`` to both, comparing the row of each event's call after it, everything
    every ``every`` records and after each retirement, at the end, and after the last records
    are applied again (a resumed read)."""
    pair = Pair(horizon)
    for index, recorded in enumerate(records, start=1):
        pair.feed(recorded, apply)
        if index % every == 0 or isinstance(recorded.kept, TurnRetired):
            pair.check(f"after position {recorded.position} ({recorded.event_type})")
    pair.check("at the end")
    for recorded in records[-every - 3 :]:
        pair.feed(recorded, apply)
    pair.check("after applying the last records again")


def _golden(path: Path) -> list[RecordedEvent]:
    return [decode_record(DEFAULT_CODEC, row) for row in load(path).rows]


def _simulated(seed: int, retention: str) -> list[RecordedEvent]:
    records, _ = simulated(seed, retention)
    return records


@pytest.mark.parametrize("horizon", ["30-days", "zero"])
@pytest.mark.parametrize("path", PATHS, ids=[path.stem for path in PATHS])
def test_every_golden_log_projects_as_the_reference_projects_it(path: Path, horizon: str) -> None:
    """A golden log shows the same ledger, queue, status, audit and digest after every event."""
    compare(_golden(path), horizon=HORIZONS[horizon])
    RUN_COUNTS["golden logs projected by both"] = (
        RUN_COUNTS.get("golden logs projected by both", 0) + 1
    )


@pytest.mark.parametrize("path", PATHS, ids=[path.stem for path in PATHS])
def test_projections_fed_one_by_one_show_what_the_reference_shows(path: Path) -> None:
    """Each projection applied on its own, as a materialized ledger is, folds like the reference."""
    compare(_golden(path), apply=_apart)


@pytest.mark.parametrize("horizon", list(HORIZONS))
@pytest.mark.parametrize("retention", ["default", "none"])
@pytest.mark.parametrize("seed", SEEDS)
def test_simulator_logs_project_as_the_reference_projects_them(
    seed: int, retention: str, horizon: str
) -> None:
    """A simulator seed's log, redacted or not, shows the same state along the way and at the
    end, whatever the ledger's horizon."""
    compare(_simulated(seed, retention), horizon=HORIZONS[horizon], every=100)


@pytest.mark.parametrize("horizon", ["30-days", "10-seconds"])
def test_a_simulator_log_fed_one_by_one_shows_what_the_reference_shows(horizon: str) -> None:
    """Each projection applied on its own over a simulator log folds like the reference."""
    compare(_simulated(0, "default"), horizon=HORIZONS[horizon], every=100, apply=_apart)


def test_a_ledger_fed_ahead_of_the_others_is_caught_up_as_the_reference_is() -> None:
    """Records the ledger alone has seen are skipped by it, and only by it, afterwards."""
    records = _simulated(1, "default")
    pair = Pair(timedelta(seconds=10))
    for recorded in records[: len(records) // 3]:
        pair.feed(recorded, _together)
    for recorded in records[len(records) // 3 : len(records) // 2]:
        pair.feed(recorded, lambda projections, recorded: projections.ledger.apply(recorded))
    pair.check("with the ledger ahead")
    for recorded in records[len(records) // 3 :]:
        pair.feed(recorded, _together)
    pair.check("at the end")


def test_a_projection_replaced_midway_is_fed_as_the_reference_feeds_it() -> None:
    """A dispatch queue put in place of another, at the same position, takes the records that
    follow, and the queue it replaced takes none."""
    records = _simulated(2, "none")
    middle = len(records) // 2
    pair = Pair(DEFAULT_LEDGER_HORIZON)
    replaced: list[Any] = []
    for index, recorded in enumerate(records):
        if index == middle:
            for side, queue in (
                (pair.reference, reference_projections.DispatchQueue()),
                (pair.projections, DispatchQueue()),
            ):
                for earlier in records[:middle]:
                    queue.apply(earlier)
                replaced.append(side.queue)
                side.queue = queue
        pair.feed(recorded, _together)
        if index % 100 == 0:
            pair.check(f"after position {recorded.position}")
    pair.check("at the end")
    assert replaced[0].snapshot() == replaced[1].snapshot()
    assert [queue.position for queue in replaced] == [records[middle - 1].position] * 2


def _turn_of(event: Event | None) -> TurnRef | None:
    """The turn an event is about, if it names one."""
    for name in ("key", "response", "turn"):
        identity = getattr(event, name, None)
        if isinstance(identity, CallKey | ResponseRef):
            return identity.turn_ref
        if isinstance(identity, TurnRef):
            return identity
    return None


def _spaced(event: Event | Redacted) -> Event | Redacted:
    """The event with the position it answers doubled, as ``_retiring`` doubles positions."""
    if isinstance(event, Redacted):
        remains = event.remains
        return attrs.evolve(event, remains=None if remains is None else _spaced_cause(remains))
    return _spaced_cause(event)


def _spaced_cause(event: Event) -> Event:
    cause = getattr(event, "cause", None)
    changed: Any = event
    spaced: Event = changed if cause is None else attrs.evolve(changed, cause=2 * cause)
    return spaced


def _retiring(records: Sequence[RecordedEvent]) -> list[RecordedEvent]:
    """The log with every turn retired halfway through its records (while calls of it may be
    live) and after its last record, and every turn and one never started retired at the end
    (again): positions doubled, each retirement at the odd position after a record."""
    indexes: dict[TurnRef, list[int]] = {}
    for index, recorded in enumerate(records):
        turn = _turn_of(recorded.kept)
        if turn is not None:
            indexes.setdefault(turn, []).append(index)
    retiring: dict[int, list[TurnRef]] = {}
    for turn, seen in indexes.items():
        for index in {seen[len(seen) // 2], seen[-1]}:
            retiring.setdefault(index, []).append(turn)
    never = TurnRef(tenant="acme", conversation="never", turn="started")
    retiring.setdefault(len(records) - 1, []).extend([*indexes, never])
    spaced: list[RecordedEvent] = []
    for index, recorded in enumerate(records):
        position = 2 * recorded.position
        spaced.append(attrs.evolve(recorded, position=position, event=_spaced(recorded.event)))
        for turn in retiring.get(index, ()):
            position += 1
            retired = TurnRetired(turn=turn)
            spaced.append(
                attrs.evolve(
                    recorded,
                    position=position,
                    event_id=f"retired-{position}",
                    stream=turn.stream,
                    event_type=retired.TAG,
                    trace=None,
                    event=retired,
                )
            )
    return spaced


@pytest.mark.parametrize("horizon", ["30-days", "zero"])
@pytest.mark.parametrize("retention", ["default", "none"])
@pytest.mark.parametrize("seed", SEEDS[:2])
def test_simulator_logs_with_retired_turns_project_as_the_reference_projects_them(
    seed: int, retention: str, horizon: str
) -> None:
    """Retirements in the middle and after the end of each turn of a simulator log make both
    forget the same calls, and leave nothing of a call that is not live at the end."""
    records = _retiring(_simulated(seed, retention))
    assert sum(isinstance(recorded.event, TurnRetired) for recorded in records) > 40
    compare(records, horizon=HORIZONS[horizon], every=100)
    projections = Projections(ledger_horizon=HORIZONS[horizon])
    for recorded in records:
        projections.apply(recorded)
    assert all(
        row.state not in ("dispatched", "cancelled", "failed") for row in projections.ledger.rows()
    )
    assert set(projections.ledger.histories()) <= {row.key for row in projections.ledger.rows()}
    assert all(
        cue in (StatusCue.PREPARING, StatusCue.NEEDS_CONFIRMATION, StatusCue.READY)
        for cue in projections.status.calls().values()
    )


# --- generated logs: orders no runtime writes, which the projections must still fold alike ------

T0 = datetime(2025, 1, 1, tzinfo=UTC)
KEYS = [
    CallKey(tenant="acme", conversation="c", turn=turn, response=response, item="0", call=call)
    for turn, response, call in (
        ("t", "r1", "call_0"),
        ("t", "r1", "call_1"),
        ("t", "r2", "call_0"),
        # Another turn, with the same response and call ids: retiring one leaves the other.
        ("u", "r1", "call_0"),
    )
]
TURNS = [
    KEYS[0].turn_ref,
    KEYS[-1].turn_ref,
    # Turns no call belongs to: one of another conversation with the same turn id.
    TurnRef(tenant="acme", conversation="other", turn="t"),
    TurnRef(tenant="acme", conversation="c", turn="never"),
]


@st.composite
def _events(draw: st.DrawFn) -> Event:
    """Any event a projection reads, for one of a few calls of two turns, with few enough values
    that decisions and claims meet; fragments, openings and rejections the most, as a collecting
    row changes most with them; retirements of those turns and of turns never seen, often enough
    to meet calls live, finished and only rejected. Causes are placed by the log (``_logs``)."""
    key = draw(st.sampled_from(KEYS))
    claim = draw(st.sampled_from(["claim-1", "claim-2"]))

    def counts() -> dict[str, int | None]:
        return {
            "fragments": draw(st.none() | st.integers(0, 3)),
            "size": draw(st.none() | st.integers(0, 9)),
        }

    def cancelled() -> CallCancelled:
        reason = draw(st.sampled_from(CancelReason))
        earlier = attrs.evolve(key, call="earlier") if reason is CancelReason.DUPLICATE_OF else None
        fragments, size = counts().values()
        return CallCancelled(
            key=key, cause=1, reason=reason, fragments=fragments, size=size, duplicate_of=earlier
        )

    frequent: list[Callable[[], Event]] = [
        lambda: ArgumentsAppended(
            key=key,
            data=b"x" * draw(st.integers(0, 4)),
            offset=draw(st.none() | st.integers(0, 8)),
            fragments=draw(st.integers(1, 3)),
        ),
        lambda: CallCollecting(key=key, cause=1, tool=draw(st.sampled_from(["t1", "t2"]))),
        lambda: EventRejected(
            key=key,
            cause=1,
            rejected_event_id="e",
            rejected_type=draw(st.sampled_from([ArgumentsAppended.TAG, ClaimRequested.TAG])),
            reason=draw(st.sampled_from(RejectReason)),
            detail=draw(st.sampled_from(["", "late"])),
        ),
    ]
    decisions: list[Callable[[], Event]] = [
        lambda: CallTerminalCandidate(
            key=key,
            cause=1,
            terminal=draw(st.sampled_from([TerminalRef(sequence=3), TerminalRef(digest="d")])),
            fragments=draw(st.integers(0, 3)),
            size=draw(st.integers(0, 9)),
            arguments_digest="a",
        ),
        lambda: CallValidated(
            key=key,
            cause=1,
            tool="t1",
            tool_digest="td",
            arguments=b"{}",
            arguments_digest="a",
            needs_confirmation=draw(st.booleans()),
        ),
        lambda: CallAwaitingConfirmation(key=key, cause=1, arguments_digest="a", expires_at=T0),
        lambda: CallConfirmed(key=key, cause=1, principal="p", confirmation_event_id="e"),
        lambda: CallDispatched(key=key, cause=1, claim_id=claim, executor="x"),
        cancelled,
        lambda: CallFailed(
            key=key,
            cause=1,
            reason=draw(st.sampled_from(FailReason)),
            detail=draw(st.sampled_from(["", "unexpected_eof: at 3", "too_large: 9 bytes"])),
            **counts(),
        ),
        lambda: ExecutionCompleted(key=key, claim_id=claim),
        lambda: ExecutionFailed(key=key, claim_id=claim, error=draw(st.sampled_from(["", "e"]))),
        lambda: ExecutionOutcomeUnknown(key=key, claim_id=claim),
        lambda: CallValidated(
            key=key,
            cause=1,
            tool="t1",
            tool_digest="td",
            arguments=b"{}",
            arguments_digest="b",
            needs_confirmation=True,
            edited_by="p",
            edited_from="a",
            edited_size=draw(st.integers(0, 9)),
        ),
        lambda: EditRefused(
            key=key,
            cause=1,
            confirmation_event_id="e",
            reason=draw(st.sampled_from(FailReason)),
            detail=draw(st.sampled_from(["", "/to required"])),
            size=draw(st.integers(0, 9)),
        ),
        lambda: CallStopRequested(
            key=key, cause=1, claim_id=claim, reason=draw(st.sampled_from(CancelReason))
        ),
        lambda: ExecutionStopped(key=key, claim_id=claim),
    ]
    others: list[Callable[[], Event]] = [
        lambda: TextReceived(response=key.response_ref, characters=draw(st.integers(0, 5))),
        lambda: ClaimRequested(key=key, claim_id=claim, executor="x"),
        lambda: ResponseQuarantined(response=key.response, tenant=None, operator="o", reason="r"),
        lambda: ToolDisabled(tool="t1", tenant=key.tenant, operator="o", reason="r"),
        lambda: ToolEnabled(tool="t1", tenant=None, operator="o", reason="r"),
        lambda: TenantStopped(tenant=key.tenant, operator="o", reason="r"),
        lambda: TenantResumed(tenant=key.tenant, operator="o", reason="r"),
        lambda: ControlRefused(
            control=draw(st.sampled_from([ToolDisabled.TAG, TenantStopped.TAG])),
            target="t1",
            tenant=key.tenant,
            operator="p",
            reason="r",
        ),
    ]
    retirements: list[Callable[[], Event]] = [
        lambda: TurnRetired(turn=draw(st.sampled_from(TURNS))),
    ]
    return draw(st.sampled_from(frequent * 10 + decisions * 2 + others + retirements * 4))()


@st.composite
def _logs(draw: st.DrawFn) -> list[RecordedEvent]:
    """A log of such events, some redacted (with or without what retention keeps), at times
    that let a short horizon age calls out."""
    records: list[RecordedEvent] = []
    at = T0
    positions: dict[CallKey, list[int]] = {}
    for position, drawn in enumerate(draw(st.lists(_events(), min_size=15, max_size=60)), 1):
        at += timedelta(seconds=draw(st.integers(0, 3)))
        event: Any = drawn
        key: Any = getattr(event, "key", None)
        if hasattr(event, "cause"):
            # Often an earlier event of its own call (a fragment the decision rejects), else
            # any (a control the cancellation answers).
            earlier = positions.get(key, [1])[-3:]
            cause = draw(st.sampled_from(earlier) | st.integers(1, position))
            event = attrs.evolve(event, cause=cause)
        if isinstance(key, CallKey):
            positions.setdefault(key, []).append(position)
        kept: Event | Redacted = event
        if draw(st.sampled_from([False] * 7 + [True])):
            kept = Redacted(length=1, digest="d", remains=draw(st.sampled_from([None, event])))
        records.append(
            RecordedEvent(
                position=position,
                event_id=f"event-{position}",
                stream="test",
                version=position,
                recorded_at=at,
                event_type=event.TAG,
                schema_version=1,
                trace=None,
                event=kept,
            )
        )
    return records


@pytest.mark.slow(seconds=20)
@settings(max_examples=300, deadline=None)
@given(
    records=_logs(),
    horizon=st.sampled_from([None, timedelta(0), timedelta(seconds=5)]),
    apart=st.booleans(),
)
def test_generated_logs_project_as_the_reference_projects_them(
    records: list[RecordedEvent], horizon: timedelta | None, apart: bool
) -> None:
    """Events of a few calls in any order, redacted or not, fold alike after every event."""
    compare(records, horizon=horizon, apply=_apart if apart else _together)
