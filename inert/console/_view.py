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
import heapq
import itertools
import json
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import datetime, timedelta

from attrs import define, frozen

from ..events import (
    ArgumentsAppended,
    CallAwaitingConfirmation,
    CallKey,
    RecordedEvent,
    ResponseEnded,
    ResponseRef,
    TraceContext,
    TurnRef,
    TurnRetired,
    TurnStarted,
    call_of,
)
from ..events._identity import key_part, shown_text
from ..log._partitions import CONTROL_PARTITION
from ..projections import DEFAULT_LEDGER_HORIZON, LedgerRow, Transition
from ..projections._partitions import PartitionProjections, one_partition
from ..projections._shown import STAGE_MARKS, RowFilter, Stage, shown_time, stage_of

__all__ = [
    "STAGE_MARKS",
    "WATCHED",
    "CallView",
    "CallViews",
    "ConsoleView",
    "RowFilter",
    "Stage",
    "key_of_token",
    "key_token",
    "reasons",
    "shown_age",
    "shown_time",
    "stage_of",
    "trace_id_of",
]


def key_token(key: CallKey) -> str:
    """A call key as one URL-safe word (provider ids hold any character)."""
    parts = [key.tenant, key.conversation, key.turn, key.response, key.item, key.call]
    return base64.urlsafe_b64encode(json.dumps(parts).encode()).decode().rstrip("=")


def key_of_token(token: str) -> CallKey | None:
    """The call key of ``key_token``'s word, or ``None`` for a word that is none."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        # A word of deeply nested brackets exhausts the decoder's recursion: no key either.
        parts = json.loads(raw)
    except (binascii.Error, ValueError, RecursionError):
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
    tool: str
    principal: str | None
    """The principal of the call's turn: whose confirmation a waiting call awaits."""
    expires: datetime | None = None
    """Until when the call waits for its confirmation, while it waits."""
    times: dict[int, datetime] | None = None
    """The log's time of each of the call's records but its fragments, by position: when each
    transition of its history happened (the ledger keeps no times, so that its digest does not
    depend on the clock)."""


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
    principal: str | None
    """The principal of the call's turn (``None`` where its start was not seen)."""
    confirmation_expires: datetime | None
    """Until when a waiting call waits for its principal's confirmation."""

    @property
    def reasons(self) -> str:
        """The reasons its row gives, in one cell."""
        return reasons(self.row)

    def json(self, now: datetime) -> dict[str, object]:
        """The row as the live feed sends it: every cell as the text a page shows (each id
        escaped as ``key_part`` escapes it) or a number."""
        row = self.row
        return {
            "id": self.token,
            "sequence": self.sequence,
            "tenant": key_part(row.tenant),
            "conversation": key_part(row.conversation),
            "turn": key_part(row.turn),
            "response": key_part(row.response),
            "item": key_part(row.item),
            "call": key_part(row.call),
            "tool": key_part(row.tool),
            "state": row.state.value,
            "stage": self.stage.value,
            "mark": STAGE_MARKS[self.stage],
            "fragments": row.fragments,
            "bytes": row.bytes,
            "reasons": shown_text(reasons(row)),
            "first_seen": shown_time(self.first_seen),
            "first_ms": int(self.first_seen.timestamp() * 1000),
            "changed_at": shown_time(self.changed_at),
            "age": shown_age(now - self.first_seen),
        }


def reasons(row: LedgerRow) -> str:
    """The reasons a row gives, in one cell: how it ended, its parse, its validation."""
    parts = [row.terminal_reason, row.parse if row.parse != "ok" else None]
    if row.validation not in (None, "ok", "ok, needs confirmation"):
        parts.append(row.validation)
    return ", ".join(dict.fromkeys(part for part in parts if part))


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


WATCHED = frozenset({Stage.WAITING, Stage.READY, Stage.RUNNING, Stage.STOPPING})
"""The stages of the waiting and running page."""

SWEEP_EVERY = 4096
"""Events folded between two sweeps of what the console notes of calls the ledger forgot."""


class ConsoleView:
    """The projections of a log and the console's notes of its calls, each partition folded
    in its order (the partitions in any order of one another).

    Besides every call in the order it last changed, it keeps the calls of each stage in the
    order they entered it, and the distinct tenants and tools: a page of a stage, or of the
    ledger unfiltered, is found without walking every call. Where a page has to walk them (a
    filter, a count, the overview), it walks a copy made at once (``newest_first``,
    ``recent``), so that a caller may pause between steps while the view folds on.
    """

    def __init__(
        self,
        *,
        ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
        call_partitions: Iterable[int] = (CONTROL_PARTITION,),
        partition_of: Callable[[str, str], int] = one_partition,
    ) -> None:
        self.partitions = PartitionProjections(
            ledger_horizon=ledger_horizon,
            call_partitions=call_partitions,
            partition_of=partition_of,
        )
        self.projections = self.partitions.controls
        """The projections of partition 0: the controls given, and on a log of one partition
        every call (on a partitioned log, ``row``, ``history`` and ``rows`` find the calls)."""
        self._seen: dict[CallKey, _Seen] = {}
        # Every call with a row, the one changed last at the end, with the sequence of its
        # change: a page asks for what changed after the sequence it last had.
        self._order: OrderedDict[CallKey, int] = OrderedDict()
        self._stages: dict[Stage, dict[CallKey, None]] = {stage: {} for stage in Stage}
        # A call validated at its own end is ready once its response ends well, which is no
        # event of the call's own: the assembling calls of each response are looked at again.
        self._assembling: dict[ResponseRef, dict[CallKey, None]] = {}
        self._tenants: Counter[str] = Counter()
        self._tools: Counter[str] = Counter()
        self._turn_traces: dict[TurnRef, str] = {}
        self._turn_principals: dict[TurnRef, str] = {}
        self.sequence = 0
        self.watched_sequence = 0
        """The sequence of the last change that made a call enter or leave a stage of
        ``WATCHED`` (a page of those stages is drawn again after it, not after every fragment)."""
        self._folded = 0

    @property
    def position(self) -> int:
        """The position of the last record of partition 0 folded (0 before any)."""
        return self.projections.position

    def position_in(self, partition: int) -> int:
        """The position of the last record of a partition folded (0 before any)."""
        return self.partitions.parts[partition].position

    def apply(self, recorded: RecordedEvent, partition: int = CONTROL_PARTITION) -> None:
        """Fold one record of a partition (the next by its position)."""
        if not self.partitions.apply(partition, recorded):
            return
        self._folded += 1
        if self._folded % SWEEP_EVERY == 0:
            self._sweep()
        event = recorded.kept
        if isinstance(event, TurnStarted):
            trace_id = trace_id_of(recorded.trace)
            if trace_id is not None:
                self._turn_traces.setdefault(event.turn, trace_id)
            self._turn_principals.setdefault(event.turn, event.principal)
            return
        if isinstance(event, TurnRetired):
            self._turn_traces.pop(event.turn, None)
            self._turn_principals.pop(event.turn, None)
            self._sweep()
            return
        if isinstance(event, ResponseEnded):
            for assembling in list(self._assembling.get(event.response, ())):
                row = self.row(assembling)
                if row is not None and stage_of(row) is not Stage.ASSEMBLING:
                    self._changed(assembling, recorded)
            return
        key = None if event is None else call_of(event)
        if key is not None:
            self._changed(key, recorded)

    def _changed(self, key: CallKey, recorded: RecordedEvent) -> None:
        row = self.row(key)
        if row is None:
            return
        at = recorded.recorded_at
        seen = self._seen.get(key)
        if seen is None:
            turn = key.turn_ref
            trace_id = self._turn_traces.get(turn) or trace_id_of(recorded.trace)
            principal = self._turn_principals.get(turn)
            seen = self._seen[key] = _Seen(at, at, None, at, trace_id, row.tool, principal)
            self._tenants[key.tenant] += 1
            self._tools[row.tool] += 1
        else:
            seen.changed = at
            if seen.trace_id is None:
                seen.trace_id = trace_id_of(recorded.trace)
        event = recorded.kept
        if not isinstance(event, (ArgumentsAppended, ResponseEnded)):
            if seen.times is None:
                seen.times = {}
            seen.times[recorded.position] = at
        stage = stage_of(row)
        if seen.stage is not stage:
            if seen.stage in WATCHED or stage in WATCHED:
                self.watched_sequence = self.sequence + 1
            self._leave_stage(key, seen)
            self._stages[stage][key] = None
            if stage is Stage.ASSEMBLING:
                self._assembling.setdefault(key.response_ref, {})[key] = None
            seen.stage, seen.since = stage, at
            seen.expires = None
        if isinstance(event, CallAwaitingConfirmation) and stage is Stage.WAITING:
            seen.expires = event.expires_at
        self.sequence += 1
        self._order[key] = self.sequence
        self._order.move_to_end(key)

    def _leave_stage(self, key: CallKey, seen: _Seen) -> None:
        if seen.stage is None:
            return
        del self._stages[seen.stage][key]
        if seen.stage is Stage.ASSEMBLING:
            response = key.response_ref
            calls = self._assembling[response]
            del calls[key]
            if not calls:
                del self._assembling[response]

    def _sweep(self) -> None:
        """Forget the notes of calls the ledger no longer has a row of."""
        for key in [key for key in self._order if self.row(key) is None]:
            del self._order[key]
            seen = self._seen.pop(key)
            self._leave_stage(key, seen)
            for counts, value in ((self._tenants, key.tenant), (self._tools, seen.tool)):
                counts[value] -= 1
                if not counts[value]:
                    del counts[value]

    # --- reading ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._order)

    def row(self, key: CallKey) -> LedgerRow | None:
        """The ledger's row of a call, from the partition of its conversation."""
        return self.partitions.row(key)

    def history(self, key: CallKey) -> list[Transition]:
        """The transitions of a call, at positions of its partition."""
        return self.partitions.history(key)

    def rows(self) -> list[LedgerRow]:
        """The ledger's rows of every partition."""
        return self.partitions.rows()

    def call(self, key: CallKey) -> CallView | None:
        """One call, or ``None`` where the ledger has no row of it."""
        sequence = self._order.get(key)
        return None if sequence is None else self._view(key, sequence)

    def _view(self, key: CallKey, sequence: int) -> CallView | None:
        row = self.row(key)
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
            principal=seen.principal,
            confirmation_expires=seen.expires,
        )

    def recorded_at(self, key: CallKey, position: int) -> datetime | None:
        """The log's time of a record of a call (``None`` for one of its fragments, or one
        before the call had a row)."""
        seen = self._seen.get(key)
        return None if seen is None or seen.times is None else seen.times.get(position)

    def views(self, keys: Collection[CallKey]) -> CallViews:
        """The calls of ``keys`` (a page of them), each made as it is read."""
        return CallViews(self, keys)

    def newest(self, *, offset: int, limit: int) -> list[CallKey]:
        """Every call, the one changed last first: ``limit`` of them from ``offset``."""
        keys = (key for key in reversed(self._order) if self.row(key) is not None)
        return list(itertools.islice(keys, offset, offset + limit))

    def newest_first(self, shown: RowFilter) -> Iterator[CallKey]:
        """The calls ``shown`` keeps, the one changed last first, walking a copy of the order
        taken at the first step."""
        seen = self._seen
        for key in reversed(list(self._order)):
            row = self.row(key)
            if row is not None and self._keeps(shown, key, row, seen.get(key)):
                yield key

    @staticmethod
    def _keeps(shown: RowFilter, key: CallKey, row: LedgerRow, seen: _Seen | None) -> bool:
        if seen is None:
            return shown.keeps(key, row)
        return shown.keeps(key, row, first=seen.first, changed=seen.changed)

    def changed_after(self, sequence: int, shown: RowFilter, *, limit: int) -> list[CallView]:
        """The calls ``shown`` keeps that changed after ``sequence``, the one changed last
        first, at most ``limit``."""
        views: list[CallView] = []
        for key, changed in reversed(self._order.items()):
            if changed <= sequence or len(views) >= limit:
                break
            row = self.row(key)
            if row is not None and self._keeps(shown, key, row, self._seen.get(key)):
                view = self._view(key, changed)
                if view is not None:
                    views.append(view)
        return views

    def count_in(self, *stages: Stage) -> int:
        """How many calls are in these stages."""
        return sum(len(self._stages[stage]) for stage in stages)

    def in_stage(self, *stages: Stage, offset: int, limit: int) -> list[CallKey]:
        """The calls in these stages, the one in its stage longest first: ``limit`` of them
        from ``offset``."""
        keys: Iterator[CallKey]
        if len(stages) == 1:
            keys = iter(self._stages[stages[0]])
        else:
            seen = self._seen
            lists = (self._stages[stage] for stage in stages)
            keys = heapq.merge(*lists, key=lambda key: seen[key].since)
        return list(itertools.islice(keys, offset, offset + limit))

    def stage_keys(self, *stages: Stage) -> list[CallKey]:
        """A copy of the keys of the calls in these stages, to walk while the view folds on."""
        return [key for stage in stages for key in self._stages[stage]]

    def recent(self, since: datetime) -> Iterator[tuple[str, Stage]]:
        """The tenant and stage of every call that changed at ``since`` or later, the one
        changed last first, walking a copy of the order taken at the first step."""
        seen = self._seen
        for key in reversed(list(self._order)):
            noted = seen.get(key)
            if noted is None:
                continue
            if noted.changed < since:
                break
            if noted.stage is not None:
                yield key.tenant, noted.stage

    def tenants(self, limit: int) -> list[str]:
        """The first ``limit`` distinct tenants of the calls, sorted (for a filter's choices)."""
        return heapq.nsmallest(limit, self._tenants)

    def tools(self, limit: int) -> list[str]:
        """The first ``limit`` distinct tools of the calls, sorted."""
        return heapq.nsmallest(limit, self._tools)


class CallViews:
    """Calls a page lists, each made into a ``CallView`` as the page reads it (so that the
    making is part of the drawing's slices); a call the ledger forgot meanwhile is left out."""

    def __init__(self, view: ConsoleView, keys: Collection[CallKey]) -> None:
        self._view = view
        self._keys = keys

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[CallView]:
        for key in self._keys:
            shown = self._view.call(key)
            if shown is not None:
                yield shown
