"""The classes a snapshot's state may hold, each with its fields and their types: the explicit
list ``inert.runtime._state_codec`` reads a state by, and nothing else (see
``inert.runtime._state_shapes``).

attrs classes and named tuples declare their fields themselves; every other class of the state
names here the attributes a snapshot keeps and the type of each, checked as the state is loaded.
A class of the state that is not listed, or one listed whose attributes are not those named, is
refused when a snapshot is taken (a test takes snapshots of many states): a new field is added
here with its type, or the class says how it is written.
"""

from __future__ import annotations

import collections
from array import array
from datetime import datetime, timedelta
from functools import cache
from typing import Any

from ..actors._arguments import ArgumentLimits, ArgumentProblem, ParsedArguments
from ..actors._buffer import Buffer, RangeBuffer, SequencedBuffer, chain_of, links_of
from ..actors._call import (
    CallContext,
    CallLimits,
    Edit,
    Input,
    ResponseEnd,
    TurnStatus,
    TurnView,
    ValidationRequested,
)
from ..actors._fold import CallFold, ResumedState, ResumePoint
from ..actors._intents import Intent, Intents
from ..actors._scope import LiveIndex, Members, ResponseTurns, Scope, _Turn
from ..actors._slot import Later, Slot
from ..events import (
    CallKey,
    CancelReason,
    DiscardReason,
    Event,
    FailReason,
    IntentScope,
    OfferedTool,
    Phase,
    RejectReason,
    ResponseEndReason,
    ResponseRef,
    TerminalRef,
    TurnRef,
)
from ..events._by_turn import ByTurn
from ..events._codec import DEFAULT_CODEC
from ..projections import Projections
from ..projections._audit import Audit, AuditEntry
from ..projections._calls import Call, Step
from ..projections._dispatch import DispatchQueue
from ..projections._ledger import Ledger
from ..projections._response_ends import ResponseEnds
from ..projections._routing import Routed
from ..projections._rows import Dispatch, LedgerRow, Outcome
from ..projections._status import Status, StatusCue
from ._peers import Peers
from ._retention import Retention, RetentionPlan
from ._state_shapes import (
    Shape,
    Shapes,
    StateNotWritable,
    enum_shape,
    object_shape,
    tuple_shape,
)

_Ranges = tuple[tuple[int, int], ...]
_Turns = dict[tuple[str, str, str], dict[CallKey | ResponseRef, None]]
_BUFFER = {"fragments": int, "numbered": bool | None, "ranges": _Ranges, "size": int}


def _sequenced_fields(buffer: SequencedBuffer) -> list[Any]:
    # The chain of fragments nests one tuple per fragment: written flat, made again as a chain.
    return [
        buffer.fragments,
        buffer.numbered,
        buffer.ranges,
        buffer.size,
        buffer.count,
        links_of(buffer.parts),
    ]


def _sequenced_load(buffer: SequencedBuffer, values: list[Any]) -> None:
    fragments, numbered, ranges, size, count, links = values
    buffer.fragments, buffer.numbered, buffer.ranges, buffer.size = (
        fragments,
        numbered,
        ranges,
        size,
    )
    buffer.count = count
    buffer.parts = chain_of(links)


def _routed(cls: type[Routed], types: dict[str, Any], *, position: bool = True) -> Shape:
    """A projection: its position and fields; its routes (its own bound methods) made again.
    ``Projections`` keeps no position of its own (each of its parts does)."""
    fields = {"_position": int, **types} if position else types

    def load(projection: Routed, values: list[Any]) -> None:
        for name, value in zip(fields, values, strict=True):
            object.__setattr__(projection, name, value)
        projection.route()

    return object_shape(cls, fields, load=load)


_PLAN = {
    "policy": Retention,
    "_types": frozenset[str],
    "_unredacted": dict[str, int],
    "_fragments": dict[str, tuple[CallKey, int] | dict[CallKey, int]],
    "_due": dict[str, tuple[int, frozenset[str], TurnRef]],
    "_due_calls": dict[str, dict[CallKey, int]],
    "_making": dict[tuple[str, int], tuple[frozenset[str], TurnRef]],
    "_making_calls": list[tuple[str, int, tuple[CallKey, ...]]],
    "_deferred": dict[TurnRef, dict[str, tuple[int, frozenset[str]]]],
    "_deferred_calls": dict[TurnRef, dict[str, dict[CallKey, int]]],
}


def _plan_fields(plan: RetentionPlan) -> list[Any]:
    kept = plan.kept()
    if kept.keys() != _PLAN.keys():
        raise StateNotWritable(f"a retention plan keeps {sorted(kept)}, not {sorted(_PLAN)}")
    return [kept[name] for name in _PLAN]


@cache
def state_shapes() -> Shapes:
    """Every class a runtime's state may hold."""
    return Shapes(
        extra_types=DEFAULT_CODEC.event_types.values(),
        shapes=[
            *(
                enum_shape(cls)
                for cls in (
                    Phase,
                    TurnStatus,
                    StatusCue,
                    IntentScope,
                    RejectReason,
                    CancelReason,
                    FailReason,
                    ResponseEndReason,
                    DiscardReason,
                    ArgumentProblem,
                )
            ),
            *(
                object_shape(cls)
                for cls in (
                    CallKey,
                    ResponseRef,
                    TurnRef,
                    TerminalRef,
                    OfferedTool,
                    TurnView,
                    CallLimits,
                    ArgumentLimits,
                    ParsedArguments,
                    ValidationRequested,
                    Edit,
                    ResumedState,
                    ResumePoint,
                    Retention,
                    AuditEntry,
                    LedgerRow,
                    _Turn,
                )
            ),
            *(tuple_shape(cls) for cls in (ResponseEnd, CallContext, Input)),
            object_shape(
                Slot,
                {
                    "key": CallKey,
                    "phase": Phase,
                    "tool": str,
                    "opened_sequence": int | None,
                    "last_activity": datetime | None,
                    "_buffer": Buffer,
                    "validating": ValidationRequested | None,
                    "later": Later | None,
                    "counted": bool,
                    "opened_version": int,
                    "version": int | None,
                    "expected": list[Event] | tuple[()],
                    "held": list[tuple[Input, CallContext]] | tuple[()],
                    "degraded": bool,
                },
            ),
            object_shape(
                Later,
                {
                    "arguments": ParsedArguments | None,
                    "arguments_digest": str,
                    "claim_id": str,
                    "confirmation_expires": datetime | None,
                    "confirmed": bool,
                    "ended_at": int | None,
                    "needs_confirmation": bool,
                    "reason": str,
                    "ready_expires": datetime | None,
                    "recovering": bool,
                    "response_end": ResponseEnd | None,
                    "skipped": int,
                    "stop_requested": str,
                    "terminal": TerminalRef | None,
                    "tool_digest": str,
                    "trusted_through": int,
                    "validation_context": CallContext | None,
                },
            ),
            object_shape(Buffer, _BUFFER),
            object_shape(
                SequencedBuffer,
                {**_BUFFER, "count": int, "parts": list[bytes | int]},
                dump=_sequenced_fields,
                load=_sequenced_load,
            ),
            object_shape(
                RangeBuffer,
                {
                    **_BUFFER,
                    "data": bytearray,
                    "prefix": int,
                    "held": tuple[tuple[int, bytes], ...],
                },
            ),
            object_shape(
                CallFold,
                {
                    "limits": CallLimits,
                    "live": bool,
                    "process": str | None,
                    "digest_key": bytes,
                    "_leases": dict[TurnRef, tuple[str, int]],
                    "position": int,
                    "scope": Scope,
                    "responses": ResponseTurns,
                    "records": dict[CallKey, Slot],
                    "_index": LiveIndex,
                    "intents": Intents,
                    "_resumable": dict[ResponseRef, int | None],
                    "_resume_points": dict[ResponseRef, ResumePoint],
                    "_calls_of_turn": ByTurn[CallKey],
                    "_running": Members,
                    "_running_in": dict[TurnRef, int],
                    "_counted_in_turn": dict[TurnRef, int],
                    "_counted_in_tenant": dict[str, int],
                    "_idle": dict[TurnRef, datetime],
                    "_forgotten_in": bytearray,
                    "_at": datetime | None,
                },
            ),
            object_shape(
                Scope,
                {
                    "_turns": dict[TurnRef, _Turn],
                    "_latest": dict[tuple[str, str], TurnRef],
                    "_quarantined": set[tuple[str | None, str]],
                    "_disabled": set[tuple[str | None, str]],
                    "_stopped": set[str],
                },
            ),
            object_shape(
                ResponseTurns,
                {
                    "_first": dict[str, ResponseRef],
                    "_of_turn": ByTurn[ResponseRef],
                    "_of_unknown_turns": collections.OrderedDict[ResponseRef, None],
                    "_over_limit": dict[ResponseRef, CallKey],
                },
            ),
            object_shape(
                LiveIndex,
                {
                    "live": Members,
                    "by_turn": dict[TurnRef, Members],
                    "turns": dict[tuple[str, str], dict[TurnRef, None]],
                    "in_tenant": dict[str, int],
                    "in_response_stream": dict[str, int],
                },
            ),
            object_shape(
                Intents,
                {
                    "_dispatched": dict[Intent, Members],
                    "_noted": dict[CallKey, tuple[Intent, Intent]],
                    "_noted_in": ByTurn[CallKey],
                    "_claims": dict[tuple[str, str], collections.OrderedDict[CallKey, int]],
                },
            ),
            object_shape(ByTurn, {"_turns": _Turns}),
            _routed(
                Projections,
                {"audit": Audit, "ledger": Ledger, "queue": DispatchQueue, "status": Status},
                position=False,
            ),
            _routed(
                Ledger,
                {
                    "_calls": dict[CallKey, Call],
                    "_due": datetime | None,
                    "_finished": collections.OrderedDict[CallKey, datetime],
                    "_horizon": timedelta | None,
                    "_response_ends": ResponseEnds,
                    "_turns": ByTurn[CallKey],
                },
            ),
            _routed(
                Status,
                {
                    "_call_turns": ByTurn[CallKey],
                    "_calls": dict[CallKey, StatusCue],
                    "_claims": dict[CallKey, str],
                    "_response_ends": ResponseEnds,
                    "_text": dict[ResponseRef, int],
                    "_text_turns": ByTurn[ResponseRef],
                    "_waiting": Members,
                },
            ),
            _routed(
                DispatchQueue,
                {
                    "_admitted": int,
                    "_awaiting": Members,
                    "_ended": set[CallKey],
                    "_ended_turns": ByTurn[CallKey],
                    "_pending": dict[ResponseRef, Members],
                    "_ready": dict[CallKey, int],
                    "_response_ends": ResponseEnds,
                },
            ),
            _routed(
                Audit,
                {
                    "_entries": dict[int, AuditEntry],
                    "_refusals": list[AuditEntry],
                    "_stopping": dict[CallKey, int],
                },
            ),
            object_shape(
                ResponseEnds,
                {
                    "_ended": dict[CallKey, bool],
                    "_keys": ByTurn[CallKey],
                    "_turns": dict[TurnRef, None],
                    "_waiting": dict[ResponseRef, Members],
                },
            ),
            object_shape(
                Call,
                {
                    "bytes": int,
                    "claim": str | None,
                    "covered": list[tuple[int, int]] | None,
                    "dispatch": Dispatch,
                    "end": int,
                    "fragments": int,
                    "history": Step | list[Step] | None,
                    "key": CallKey,
                    "opened_at": int,
                    "outcome": Outcome | None,
                    "parse": str | None,
                    "public": LedgerRow | None,
                    "state": Phase | None,
                    "taken": array | None,  # of integers
                    "terminal_event": str | None,
                    "terminal_reason": str | None,
                    "tool": str,
                    "validation": str | None,
                },
            ),
            object_shape(RetentionPlan, _PLAN, dump=_plan_fields),
            object_shape(
                Peers,
                {
                    "process": str,
                    "lease_time": timedelta,
                    "_seen": dict[str, datetime],
                    "_claimers": dict[str, str],
                    "_asked": dict[int, str],
                    "_buried": set[str],
                    "gained": list[TurnRef],
                },
            ),
        ],
    )
