"""What the console shows, folded from the log (pure: no I/O).

The projections the runtime keeps (ledger, dispatch queue, status, audit), fed the same records,
and beside them what only a person at a console asks for: when each call appeared and last
changed, since when it has been in its stage, the trace it belongs to, and which rows changed
after a page last heard. Like the projections it holds no argument value: rows, counts, sizes,
digests, reasons and times.
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
import re
from collections import Counter, OrderedDict
from collections.abc import Iterator
from datetime import datetime, timedelta

from attrs import define, frozen

from ..events import (
    CallKey,
    Phase,
    RecordedEvent,
    TraceContext,
    TurnRef,
    TurnRetired,
    TurnStarted,
    call_of,
)
from ..projections import DEFAULT_LEDGER_HORIZON, LedgerRow, Projections


class Stage(enum.StrEnum):
    """Where a call is, as a person on call reads it: its state and its dispatch together."""

    ASSEMBLING = "assembling"
    WAITING = "waiting"
    READY = "ready"
    RUNNING = "running"
    STOPPING = "stop requested"
    COMPLETED = "completed"
    STOPPED = "stopped"
    OUTCOME_FAILED = "outcome failed"
    OUTCOME_UNKNOWN = "outcome unknown"
    CANCELLED = "cancelled"
    FAILED = "failed"


STAGE_MARKS = {
    Stage.ASSEMBLING: "…",
    Stage.WAITING: "?",
    Stage.READY: "○",
    Stage.RUNNING: "▶",
    Stage.STOPPING: "◼",
    Stage.COMPLETED: "✓",
    Stage.STOPPED: "■",
    Stage.OUTCOME_FAILED: "✗",
    Stage.OUTCOME_UNKNOWN: "‽",
    Stage.CANCELLED: "⊘",
    Stage.FAILED: "✗",
}
"""A mark per stage, shown before its name: the stages tell apart without colour."""

_OUTCOME_STAGES = {
    "stop_requested": Stage.STOPPING,
    "completed": Stage.COMPLETED,
    "failed": Stage.OUTCOME_FAILED,
    "stopped": Stage.STOPPED,
    "unknown": Stage.OUTCOME_UNKNOWN,
}


def stage_of(row: LedgerRow) -> Stage:
    """The stage of a call's row."""
    match row.state:
        case Phase.COLLECTING | Phase.TERMINAL_CANDIDATE:
            return Stage.ASSEMBLING
        case Phase.VALIDATED:
            if row.dispatch == "await_response":
                # Validated at its own end (rules 7): its response is still streaming.
                return Stage.ASSEMBLING
            return Stage.WAITING if row.dispatch == "await_confirmation" else Stage.READY
        case Phase.DISPATCHED:
            return Stage.RUNNING if row.outcome is None else _OUTCOME_STAGES[row.outcome]
        case Phase.CANCELLED:
            return Stage.CANCELLED
    return Stage.FAILED


def key_token(key: CallKey) -> str:
    """A call key as one URL-safe word (provider ids hold any character)."""
    parts = [key.tenant, key.conversation, key.turn, key.response, key.item, key.call]
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode().rstrip("=")


def key_of_token(token: str) -> CallKey | None:
    """The call key of ``key_token``'s word, or ``None`` for a word that is none."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        parts = json.loads(raw)
    except (binascii.Error, ValueError):
        return None
    if not isinstance(parts, list) or len(parts) != 6 or not all(isinstance(p, str) for p in parts):
        return None
    tenant, conversation, turn, response, item, call = parts
    try:
        return CallKey(
            tenant=tenant,
            conversation=conversation,
            turn=turn,
            response=response,
            item=item,
            call=call,
        )
    except ValueError:
        return None


_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_id_of(context: TraceContext | None) -> str | None:
    """The trace id of a W3C context as stored, where it is well formed."""
    if context is None:
        return None
    match = _TRACEPARENT.match(context.traceparent)
    return None if match is None or match[1] == "0" * 32 else match[1]


@define
class _Seen:
    """What the console notes of a call besides its row."""

    first: datetime
    changed: datetime
    stage: Stage | None
    since: datetime
    trace_id: str | None


@frozen(kw_only=True)
class CallView:
    """One call as a page shows it: its ledger row, its stage and its times."""

    key: CallKey
    token: str
    row: LedgerRow
    stage: Stage
    first_seen: datetime
    changed_at: datetime
    stage_since: datetime
    trace_id: str | None
    sequence: int

    def json(self, now: datetime) -> dict[str, object]:
        """The row as the live feed sends it: every cell as text or a number."""
        row = self.row
        return {
            "id": self.token,
            "sequence": self.sequence,
            "tenant": row.tenant,
            "conversation": row.conversation,
            "turn": row.turn,
            "response": row.response,
            "item": row.item,
            "call": row.call,
            "tool": row.tool,
            "state": row.state.value,
            "stage": self.stage.value,
            "mark": STAGE_MARKS[self.stage],
            "fragments": row.fragments,
            "bytes": row.bytes,
            "reasons": reasons(row),
            "first_seen": shown_time(self.first_seen),
            "first_ms": int(self.first_seen.timestamp() * 1000),
            "changed_at": shown_time(self.changed_at),
            "age": shown_age(now - self.first_seen),
        }


@frozen
class RowFilter:
    """Which calls a page shows: by tenant, turn, state and tool, each where given."""

    tenant: str | None = None
    turn: str | None = None
    state: str | None = None
    tool: str | None = None

    def keeps(self, row: LedgerRow) -> bool:
        return (
            (self.tenant is None or row.tenant == self.tenant)
            and (self.turn is None or row.turn == self.turn)
            and (self.state is None or row.state == self.state)
            and (self.tool is None or row.tool == self.tool)
        )


def reasons(row: LedgerRow) -> str:
    """The reasons a row gives, in one cell: how it ended, its parse, its validation."""
    parts = [row.terminal_reason, row.parse if row.parse != "ok" else None]
    if row.validation not in (None, "ok", "ok, needs confirmation"):
        parts.append(row.validation)
    return ", ".join(dict.fromkeys(part for part in parts if part))


def shown_time(moment: datetime) -> str:
    """A log time as the pages show it (UTC, to the millisecond)."""
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}"


def shown_age(age: timedelta) -> str:
    """A duration in its largest units: ``4.2 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h``."""
    seconds = max(age.total_seconds(), 0.0)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, second = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {second} s"
    hours, minute = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minute} min"
    days, hour = divmod(hours, 24)
    return f"{days} d {hour} h"


SWEEP_EVERY = 4096
"""Events folded between two sweeps of what the console notes of calls the ledger forgot."""


class ConsoleView:
    """The projections of a log and the console's notes of its calls, folded in log order."""

    def __init__(self, *, ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON) -> None:
        self.projections = Projections(ledger_horizon=ledger_horizon)
        self._seen: dict[CallKey, _Seen] = {}
        # Every call with a row, the one changed last at the end, with the sequence of its
        # change: a page asks for what changed after the sequence it last had.
        self._order: OrderedDict[CallKey, int] = OrderedDict()
        self._turn_traces: dict[TurnRef, str] = {}
        self.sequence = 0
        self._folded = 0

    @property
    def position(self) -> int:
        """The position of the last record folded (0 before any)."""
        return self.projections.position

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one record of the log (the next by position)."""
        if recorded.position <= self.projections.position:
            return
        self.projections.apply(recorded)
        self._folded += 1
        if self._folded % SWEEP_EVERY == 0:
            self._sweep()
        event = recorded.kept
        if isinstance(event, TurnStarted):
            trace_id = trace_id_of(recorded.trace)
            if trace_id is not None:
                self._turn_traces.setdefault(event.turn, trace_id)
            return
        if isinstance(event, TurnRetired):
            self._turn_traces.pop(event.turn, None)
            self._sweep()
            return
        key = None if event is None else call_of(event)
        if key is None:
            return
        row = self.projections.ledger.row(key)
        if row is None:
            return
        at = recorded.recorded_at
        stage = stage_of(row)
        seen = self._seen.get(key)
        if seen is None:
            trace_id = self._turn_traces.get(key.turn_ref) or trace_id_of(recorded.trace)
            seen = self._seen[key] = _Seen(at, at, stage, at, trace_id)
        else:
            seen.changed = at
            if seen.stage is not stage:
                seen.stage, seen.since = stage, at
            if seen.trace_id is None:
                seen.trace_id = trace_id_of(recorded.trace)
        self.sequence += 1
        self._order[key] = self.sequence
        self._order.move_to_end(key)

    def _sweep(self) -> None:
        """Forget the notes of calls the ledger no longer has a row of."""
        ledger = self.projections.ledger
        for key in [key for key in self._order if ledger.row(key) is None]:
            del self._order[key]
            del self._seen[key]

    # --- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._order)

    def call(self, key: CallKey) -> CallView | None:
        """One call, or ``None`` where the ledger has no row of it."""
        sequence = self._order.get(key)
        return None if sequence is None else self._view(key, sequence)

    def _view(self, key: CallKey, sequence: int) -> CallView | None:
        row = self.projections.ledger.row(key)
        if row is None:
            return None
        seen = self._seen[key]
        return CallView(
            key=key,
            token=key_token(key),
            row=row,
            stage=stage_of(row),
            first_seen=seen.first,
            changed_at=seen.changed,
            stage_since=seen.since,
            trace_id=seen.trace_id,
            sequence=sequence,
        )

    def _newest_first(self, shown: RowFilter) -> Iterator[tuple[CallKey, int]]:
        ledger = self.projections.ledger
        for key, sequence in reversed(self._order.items()):
            row = ledger.row(key)
            if row is not None and shown.keeps(row):
                yield key, sequence

    def page(self, shown: RowFilter, *, offset: int, limit: int) -> tuple[list[CallView], int]:
        """The calls ``shown`` keeps, the one changed last first: ``limit`` of them from
        ``offset``, and how many it keeps in all."""
        views: list[CallView] = []
        total = 0
        for key, sequence in self._newest_first(shown):
            if offset <= total < offset + limit:
                view = self._view(key, sequence)
                if view is not None:
                    views.append(view)
            total += 1
        return views, total

    def count(self, shown: RowFilter) -> int:
        """How many calls ``shown`` keeps."""
        return sum(1 for _ in self._newest_first(shown))

    def changed_after(self, sequence: int, shown: RowFilter, *, limit: int) -> list[CallView]:
        """The calls ``shown`` keeps that changed after ``sequence``, the one changed last
        first, at most ``limit``."""
        views: list[CallView] = []
        ledger = self.projections.ledger
        for key, changed in reversed(self._order.items()):
            if changed <= sequence or len(views) >= limit:
                break
            row = ledger.row(key)
            if row is not None and shown.keeps(row):
                view = self._view(key, changed)
                if view is not None:
                    views.append(view)
        return views

    def in_stage(self, stage: Stage) -> list[CallView]:
        """The calls in one stage, the one in it longest first."""
        views = [
            view
            for key, sequence in self._order.items()
            if self._seen[key].stage is stage
            and (view := self._view(key, sequence)) is not None
            and view.stage is stage
        ]
        views.sort(key=lambda view: view.stage_since)
        return views

    def overview(self, now: datetime, *, window: timedelta) -> dict[str, Counter[Stage]]:
        """Per tenant, the calls that changed within ``window`` before ``now`` by stage."""
        since = now - window
        counts: dict[str, Counter[Stage]] = {}
        for key in reversed(self._order):
            seen = self._seen[key]
            if seen.changed < since:
                break
            if seen.stage is not None:
                counts.setdefault(key.tenant, Counter())[seen.stage] += 1
        return counts

    def values(self, column: str) -> list[str]:
        """The distinct tenants or tools of the calls shown, sorted (for a filter's choices)."""
        ledger = self.projections.ledger
        found: set[str] = set()
        for key in self._order:
            row = ledger.row(key)
            if row is not None:
                found.add(row.tenant if column == "tenant" else row.tool)
        return sorted(found)
