"""What a fold gives the runtime, as plain values: for comparing two folds (the new one and the
reference), or a fold with the one a snapshot restored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from inert import RecordedEvent, TurnRef
from inert.events import DEFAULT_CODEC
from inert.log._records import StoredRecord, decode_record


def work_of(items: Sequence[Any]) -> list[tuple[object, ...]]:
    """Work for the actors as plain values: its kind, its call and what it carries."""
    described: list[tuple[object, ...]] = []
    for item in items:
        kind = type(item).__name__
        match kind:
            case "AppendDecisions":
                described.append((kind, item.key, item.decisions))
            case "RunValidation":
                described.append((kind, item.key, item.request, item.context))
            case "ScheduleDeadline":
                described.append((kind, item.key, item.at))
            case _:
                raise AssertionError(f"unknown work {kind}")
    return described


def call_of(fold: Any, state: Any) -> tuple[object, ...]:
    """What the fold knows of one call, as the runtime and the router read it."""
    return (
        state.key,
        state.phase,
        state.tool,
        state.fragments,
        state.size,
        state.next_sequence,
        state.end,
        state.terminal,
        state.arguments_digest,
        state.tool_digest,
        state.needs_confirmation,
        state.confirmation_expires,
        state.confirmed,
        state.claim_id,
        state.reason,
        state.live,
        fold.ready(state.key),
        state.needs_stream,
        fold.awaits_response(state),
        state.awaiting_confirmation,
        fold.deadline(state),
        state.validating,
    )


def folded_view(fold: Any, turns: set[TurnRef]) -> dict[str, object]:
    """What the runtime asks a fold, beyond its calls."""
    return {
        "position": fold.position,
        "calls": {key: call_of(fold, fold.state(key)) for key in fold.records},
        "live": fold.live_keys(),
        "interrupted": fold.interrupted_responses(),
        "leases": fold.leases(),
        "resumable": {turn: fold.resumable_streams(turn) for turn in sorted(turns, key=str)},
    }


def decoded(rows: Sequence[StoredRecord]) -> list[RecordedEvent]:
    return [decode_record(DEFAULT_CODEC, row) for row in rows]
