"""The embedding API end to end: turns, feeding, timers, claims, confirmations and restarts."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
import trio
import trio.testing
from builders import digest_in

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    ClaimRefused,
    ConfigurationError,
    ConfirmationRefused,
    ConflictError,
    Dispatch,
    Event,
    LogError,
    Phase,
    ReadyCall,
    RefusedError,
    ReplayDivergence,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    StatusCue,
    StreamLost,
    TerminalRef,
    ToolDeclaration,
    TurnRef,
    ValidationResult,
    open_runtime,
    trio_clock,
)
from inert.actors import ValidationRequested, Validator
from inert.events import (
    CallFailed,
    ClaimRequested,
    ExecutionCompleted,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    ToolDisabled,
    TurnStarted,
)
from inert.log import MemoryLog, MemoryStore, NewEvent
from inert.log._records import PendingRecord
from inert.projections import Projections
from inert.testing import FaultRates, FaultyLog

TOOLS = [
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
]
PRINCIPAL = "user:alice"
ARGUMENTS = b'{"city": "Paris"}'


def key_of(call: str, *, turn: str = "t1", response: str = "r1") -> CallKey:
    return CallKey(
        tenant="acme",
        conversation="c1",
        turn=turn,
        response=response,
        item=f"item-{call}",
        call=call,
    )


@asynccontextmanager
async def running(
    store: MemoryStore | None = None,
    *,
    check: Validator | None = None,
    limits: CallLimits | None = None,
    validation_timeout: float = 1.0,
) -> AsyncIterator[Runtime]:
    """A runtime on a memory log (kept in ``store`` across restarts) with the test tools."""
    log = MemoryLog(store if store is not None else MemoryStore(), clock=trio_clock())
    try:
        async with open_runtime(
            log=log,
            tools=TOOLS,
            check=check,
            limits=limits or CallLimits(),
            validation_timeout=validation_timeout,
        ) as runtime:
            yield runtime
    finally:
        await log.aclose()


def call_events(
    key: CallKey, data: bytes = ARGUMENTS, *, tool: str = "get_weather", parts: int = 2
) -> list[Event]:
    """A whole call: opened, its fragments, its end event (sequences 0..n+1)."""
    size = -(-len(data) // parts)
    pieces = [data[index : index + size] for index in range(0, len(data), size)]
    events: list[Event] = [CallOpened(key=key, tool=tool, sequence=0)]
    for sequence, piece in enumerate(pieces, start=1):
        events.append(
            ArgumentsAppended(
                key=key,
                data=piece,
                offset=(sequence - 1) * size,
                first_sequence=sequence,
                last_sequence=sequence,
            )
        )
    events.append(CallEnded(key=key, terminal=TerminalRef(sequence=len(pieces) + 1)))
    return events


def response_end(key: CallKey, reason: ResponseEndReason = ResponseEndReason.COMPLETED) -> Event:
    return ResponseEnded(response=key.response_ref, reason=reason, terminal=TerminalRef(digest="x"))


async def start(runtime: Runtime, turn: str = "t1") -> TurnRef:
    return await runtime.start_turn(
        tenant="acme", conversation="c1", turn=turn, principal=PRINCIPAL
    )


async def ready_call(runtime: Runtime, key: CallKey, **options: object) -> None:
    await runtime.feed([*call_events(key, **options), response_end(key)])  # type: ignore[arg-type]
    await runtime.settle()


# --- the executor boundary -------------------------------------------------------------------


async def test_a_ready_call_reaches_the_executor_complete_and_immutable() -> None:
    """A dispatch names its key, turn, tenant, principal and tool, with read-only arguments."""
    async with running() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready_call(runtime, key)
        assert runtime.projections.queue.ready() == [key]
        dispatch = await runtime.claim(key, executor="worker")
        assert dispatch.key == key
        assert dispatch.turn == key.turn_ref
        assert dispatch.tenant == "acme"
        assert dispatch.principal == PRINCIPAL
        assert dispatch.tool == "get_weather"
        assert dict(dispatch.arguments) == {"city": "Paris"}
        with pytest.raises(TypeError):
            dispatch.arguments["city"] = "Rome"  # type: ignore[index]
        canonical = b'{"city":"Paris"}'
        assert dispatch.arguments_digest == digest_in(runtime.log, canonical)
        assert runtime.phase(key) is Phase.DISPATCHED


async def test_concurrent_claims_dispatch_a_call_exactly_once() -> None:
    """Of ten claims racing for one ready call, one dispatches and nine are refused."""
    async with running() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready_call(runtime, key)
        dispatched: list[Dispatch] = []
        refused: list[ClaimRefused] = []

        async def claim(index: int) -> None:
            try:
                dispatched.append(await runtime.claim(key, executor=f"worker-{index}"))
            except ClaimRefused as error:
                refused.append(error)

        async with trio.open_nursery() as nursery:
            for index in range(10):
                nursery.start_soon(claim, index)
        assert len(dispatched) == 1
        assert len(refused) == 9
        assert all(error.reason == "call_terminal" for error in refused)


async def test_a_call_that_is_not_validated_cannot_be_claimed() -> None:
    """A claim of a collecting call, or of one validated at its end whose response has not
    ended, is refused as not ready, and the call is not in the queue."""
    async with running() as runtime:
        await start(runtime)
        key = key_of("a")
        events = call_events(key)
        await runtime.feed(events[:-1])
        await runtime.settle()
        with pytest.raises(ClaimRefused, match="not_ready"):
            await runtime.claim(key, executor="worker")
        await runtime.feed(events[-1:])
        await runtime.settle()
        assert runtime.phase(key) is Phase.VALIDATED
        assert runtime.ready_call(key) is None
        with pytest.raises(ClaimRefused, match="not_ready"):
            await runtime.claim(key, executor="worker")
        assert runtime.projections.queue.ready() == []


async def test_outcomes_are_recorded_once_per_claim() -> None:
    """An executor's outcome is recorded; a second report of the same claim is refused."""
    async with running() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready_call(runtime, key)
        seen: list[Dispatch] = []

        async def executor(dispatch: Dispatch) -> None:
            seen.append(dispatch)

        dispatch = await runtime.execute(key, executor, name="worker")
        assert seen == [dispatch]
        with pytest.raises(RefusedError, match="recorded already"):
            await runtime.complete(dispatch)
        await runtime.settle()
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert row.outcome == "completed"
        assert runtime.projections.status.of(key) is StatusCue.DONE


async def test_ready_calls_yields_each_call_once_as_it_becomes_ready() -> None:
    """The ready-call iterator yields a call when it is validated, and never twice."""
    async with running() as runtime:
        await start(runtime)
        first, second = key_of("a"), key_of("b", response="r2")
        seen: list[ReadyCall] = []

        async def watch() -> None:
            async for ready in runtime.ready_calls():
                seen.append(ready)
                if len(seen) == 2:
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await ready_call(runtime, first)
            await ready_call(runtime, second)
        assert [ready.key for ready in seen] == [first, second]
        assert {(ready.tool, ready.principal, ready.tenant) for ready in seen} == {
            ("get_weather", PRINCIPAL, "acme")
        }
        assert seen[0].arguments_digest.startswith("hmac-sha256:")
        dispatch = await runtime.claim(seen[0], executor="worker")
        assert dispatch.arguments_digest == seen[0].arguments_digest


# --- confirmation ----------------------------------------------------------------------------


async def test_a_call_needing_confirmation_waits_for_its_principal() -> None:
    """A confirmation by another principal is refused; the principal's own makes it ready."""
    async with running() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready_call(runtime, key, tool="send_email")
        assert runtime.projections.queue.awaiting() == [key]
        assert runtime.projections.status.of(key) is StatusCue.NEEDS_CONFIRMATION
        with pytest.raises(ClaimRefused, match="not_ready"):
            await runtime.claim(key, executor="worker")
        row = runtime.projections.ledger.row(key)
        assert row is not None
        digest = digest_in(runtime.log, b'{"city":"Paris"}')
        pending = await runtime.pending_confirmation(key)
        assert pending is not None
        assert (pending.tool, pending.principal, pending.arguments_digest) == (
            "send_email",
            PRINCIPAL,
            digest,
        )
        # What the person is shown: the validated arguments themselves, read-only.
        assert dict(pending.arguments) == {"city": "Paris"}
        with pytest.raises(TypeError):
            pending.arguments["city"] = "Oslo"  # type: ignore[index]
        with pytest.raises(ConfirmationRefused, match="wrong_principal"):
            await runtime.confirm(key, principal="user:mallory", arguments_digest=digest)
        with pytest.raises(ConfirmationRefused, match="mismatched_confirmation"):
            await runtime.confirm(key, principal=PRINCIPAL, arguments_digest="sha256:other")
        await runtime.confirm(key, principal=PRINCIPAL, arguments_digest=digest)
        assert await runtime.pending_confirmation(key) is None
        with pytest.raises(ConfirmationRefused, match="duplicate"):
            await runtime.confirm(key, principal=PRINCIPAL, arguments_digest=digest)
        await runtime.settle()
        assert runtime.projections.queue.ready() == [key]
        await runtime.claim(key, executor="worker")


async def test_a_denial_cancels_the_call(autojump_clock: trio.testing.MockClock) -> None:
    """The principal's denial cancels a call awaiting confirmation; nothing runs."""
    async with running() as runtime:
        await start(runtime)
        key = key_of("a")
        await ready_call(runtime, key, tool="send_email")
        await runtime.deny(key, principal=PRINCIPAL)
        await runtime.settle()
        assert runtime.phase(key) is Phase.CANCELLED
        assert runtime.projections.status.of(key) is StatusCue.CANCELLED


async def test_an_unconfirmed_call_expires(autojump_clock: trio.testing.MockClock) -> None:
    """A call left unconfirmed for the confirmation lifetime is cancelled and cannot run."""
    limits = CallLimits(confirmation_lifetime=timedelta(minutes=10))
    async with running(limits=limits) as runtime:
        await start(runtime)
        key = key_of("a")
        await ready_call(runtime, key, tool="send_email")
        await trio.sleep(9 * 60)
        await runtime.settle()
        assert runtime.phase(key) is Phase.VALIDATED
        await trio.sleep(2 * 60)
        await runtime.settle()
        assert runtime.phase(key) is Phase.CANCELLED
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert row.terminal_reason == "confirmation_expired"


# --- time ------------------------------------------------------------------------------------


async def test_an_idle_collecting_call_is_cancelled(autojump_clock: trio.testing.MockClock) -> None:
    """A call that receives nothing for the idle timeout is cancelled; activity defers it; what
    comes for it later is counted, not stored."""
    limits = CallLimits(idle_timeout=timedelta(seconds=60))
    async with running(limits=limits) as runtime:
        await start(runtime)
        key = key_of("a")
        events = call_events(key, parts=3)
        await runtime.feed(events[:2])
        await trio.sleep(50)
        await runtime.feed(events[2:3])
        await trio.sleep(50)
        await runtime.settle()
        assert runtime.phase(key) is Phase.COLLECTING
        await trio.sleep(11)
        await runtime.settle()
        assert runtime.phase(key) is Phase.CANCELLED
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert row.terminal_reason == "idle_timeout"
        await runtime.feed(events[3:])
        await runtime.settle()
        history = runtime.projections.ledger.history(key)
        assert history[-1].event_type == "ingress.events_discarded"
        assert history[-1].detail.endswith("discarded: the call had ended")


async def test_a_validation_that_does_not_answer_in_time_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A check that outlives the validation deadline fails the call as validation_timeout."""

    async def never(request: ValidationRequested) -> ValidationResult:
        await trio.sleep_forever()
        raise AssertionError

    async with running(check=never, validation_timeout=0.1) as runtime:
        await start(runtime)
        key = key_of("a")
        await ready_call(runtime, key)
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert (row.state, row.validation) == ("failed", "validation_timeout")


async def test_a_check_that_raises_fails_the_call_without_its_message() -> None:
    """An exception in the check fails the call as validator_error, naming only its type."""

    async def broken(request: ValidationRequested) -> ValidationResult:
        raise ValueError("secret argument value")

    async with running(check=broken) as runtime:
        await start(runtime)
        key = key_of("a")
        await ready_call(runtime, key)
        [failure] = [
            recorded.event
            for recorded in await runtime.log.read_stream(key.stream)
            if isinstance(recorded.event, CallFailed)
        ]
        assert failure.reason == "validator_error"
        assert "secret" not in failure.detail


async def test_a_check_decides_once_even_across_a_restart() -> None:
    """The check's answer is recorded: reopening the log never asks it again."""
    calls: list[CallKey] = []

    async def counting(request: ValidationRequested) -> ValidationResult:
        calls.append(request.key)
        return ValidationResult()

    store = MemoryStore()
    async with running(store, check=counting) as runtime:
        await start(runtime)
        await ready_call(runtime, key_of("a"))
    async with running(store, check=counting) as runtime:
        await runtime.settle()
    assert calls == [key_of("a")]


# --- turns, limits and controls --------------------------------------------------------------


async def test_turns_are_started_once_and_cancelled_only_by_their_principal() -> None:
    """A turn id cannot be started twice; an unknown turn or another principal is refused."""
    async with running() as runtime:
        turn = await start(runtime)
        with pytest.raises(RefusedError, match="started before"):
            await start(runtime)
        with pytest.raises(RefusedError, match="another principal"):
            await runtime.cancel_turn(turn, principal="user:mallory")
        other = TurnRef(tenant="acme", conversation="c1", turn="t9")
        with pytest.raises(RefusedError, match="unknown"):
            await runtime.cancel_turn(other, principal=PRINCIPAL)


async def test_a_turn_with_a_bad_identity_is_refused_as_such() -> None:
    """An empty or oversized identity part is a RefusedError naming the part, not a ValueError."""
    async with running() as runtime:
        with pytest.raises(RefusedError, match="conversation"):
            await runtime.start_turn(tenant="acme", conversation="", turn="t1", principal=PRINCIPAL)


async def test_a_new_turn_supersedes_the_calls_of_the_previous_one() -> None:
    """Starting a new turn cancels the old turn's calls; their late events are rejected."""
    async with running() as runtime:
        await start(runtime, "t1")
        old = key_of("a", turn="t1")
        events = call_events(old)
        await runtime.feed(events[:2])
        await start(runtime, "t2")
        await runtime.feed(events[2:])
        late = key_of("b", turn="t1")
        await runtime.feed(call_events(late))
        await runtime.settle()
        assert runtime.phase(old) is Phase.CANCELLED
        assert runtime.phase(late) is Phase.ABSENT
        # The fragments, fed one after the other between two appends, are one event.
        assert [entry.event_type for entry in runtime.projections.ledger.history(late)] == [
            "decision.rejected"
        ] * 3


async def test_live_calls_per_turn_are_limited() -> None:
    """A call opened beyond the live-call limit of its turn fails; ended calls free a place."""
    async with running(limits=CallLimits(max_live_per_turn=2)) as runtime:
        await start(runtime)
        first, second, third = key_of("a"), key_of("b"), key_of("c")
        await runtime.feed([CallOpened(key=key, tool="get_weather") for key in (first, second)])
        await runtime.feed([CallOpened(key=third, tool="get_weather")])
        await runtime.settle()
        assert runtime.phase(third) is Phase.FAILED
        row = runtime.projections.ledger.row(third)
        assert row is not None
        assert row.terminal_reason == "limit_exceeded"
        await runtime.cancel_turn(first.turn_ref, principal=PRINCIPAL)
        await start(runtime, "t2")
        fourth = key_of("d", turn="t2", response="r2")
        await runtime.feed([CallOpened(key=fourth, tool="get_weather")])
        await runtime.settle()
        assert runtime.phase(fourth) is Phase.COLLECTING


async def test_an_operator_control_cancels_the_calls_it_concerns() -> None:
    """Disabling a tool cancels the live calls of that tool and no other."""
    async with running() as runtime:
        await start(runtime)
        weather, email = key_of("a"), key_of("b")
        await runtime.feed([CallOpened(key=weather, tool="get_weather")])
        await runtime.feed([CallOpened(key=email, tool="send_email")])
        await runtime.log.append(
            [
                NewEvent(
                    stream="control/global",
                    event=ToolDisabled(tool="get_weather", tenant=None, operator="ops", reason="x"),
                )
            ]
        )
        await runtime.settle()
        assert runtime.phase(weather) is Phase.CANCELLED
        assert runtime.phase(email) is Phase.COLLECTING


async def test_a_response_stream_has_one_feeder() -> None:
    """A response stream appended to from elsewhere makes the next feed a ConflictError."""
    async with running() as runtime:
        await start(runtime)
        key = key_of("a")
        events = call_events(key)
        await runtime.feed(events[:1])
        await runtime.log.append([NewEvent(stream=key.response_ref.stream, event=events[1])])
        with pytest.raises(ConflictError):
            await runtime.feed(events[2:])


# --- restart ---------------------------------------------------------------------------------


async def test_a_restart_ends_what_the_stopped_process_left() -> None:
    """After a restart: assembling calls are connection_lost, ready calls stay ready, a
    dispatched call without outcome is outcome_unknown and is never dispatched again."""
    store = MemoryStore()
    collecting, candidate, ready, dispatched = (key_of(name, response=name) for name in "abcd")
    async with running(store) as runtime:
        await start(runtime)
        await runtime.feed(call_events(collecting)[:2])
        await runtime.feed(call_events(candidate))
        await ready_call(runtime, ready)
        await ready_call(runtime, dispatched)
        await runtime.claim(dispatched, executor="worker")
    async with running(store) as runtime:
        await runtime.settle()
        assert runtime.phase(collecting) is Phase.CANCELLED
        assert runtime.phase(candidate) is Phase.CANCELLED
        for key in (collecting, candidate):
            row = runtime.projections.ledger.row(key)
            assert row is not None
            assert row.terminal_reason == "connection_lost"
        assert runtime.projections.queue.ready() == [ready]
        row = runtime.projections.ledger.row(dispatched)
        assert row is not None
        assert row.outcome == "unknown"
        assert runtime.projections.status.of(dispatched) is StatusCue.UNKNOWN
        with pytest.raises(ClaimRefused, match="call_terminal"):
            await runtime.claim(dispatched, executor="worker")
        await runtime.claim(ready, executor="worker")


@pytest.mark.parametrize("report", ["complete", "fail", "stopped"])
async def test_a_report_after_the_outcome_was_found_unknown_is_refused(report: str) -> None:
    """One outcome per dispatch, across restarts: the executor of a claim made before a restart
    reports after it, once the dispatch was recorded ``outcome_unknown``; the report is refused
    with ``RefusedError`` naming the outcome, nothing is written, the ledger keeps ``unknown``."""
    store = MemoryStore()
    key = key_of("a")
    async with running(store) as runtime:
        await start(runtime)
        await ready_call(runtime, key)
        dispatch = await runtime.claim(key, executor="worker")
    async with running(store) as runtime:
        await runtime.settle()
        head = await runtime.log.head()
        with pytest.raises(RefusedError, match=r"recorded already \(unknown\).* one outcome"):
            await getattr(runtime, report)(dispatch)
        await runtime.settle()
        assert await runtime.log.head() == head
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert row.outcome == "unknown"
        assert runtime.projections.status.of(key) is StatusCue.UNKNOWN


@pytest.mark.parametrize(
    "late", [ExecutionCompleted, ExecutionStopped, ExecutionOutcomeUnknown], ids=lambda t: t.TAG
)
async def test_a_second_outcome_that_reaches_the_log_is_ignored(late: type[Event]) -> None:
    """A second outcome of one dispatch written all the same (a process buried while it still
    ran, reporting late) changes nothing: the first outcome stands in the ledger and the
    status, the history shows the later one ignored, the call does not run again, and a
    restart replays the log to the same."""
    store = MemoryStore()
    key = key_of("a")
    async with running(store) as runtime:
        await start(runtime)
        await ready_call(runtime, key)
        dispatch = await runtime.claim(key, executor="worker")
    async with running(store) as runtime:
        await runtime.settle()
        second = late(key=key, claim_id=dispatch.claim_id)  # type: ignore[call-arg]
        await runtime.log.append([NewEvent(stream=key.request_stream, event=second)])
        await runtime.settle()
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert (row.state, row.outcome) == ("dispatched", "unknown")
        [*_, last] = runtime.projections.ledger.history(key)
        assert last.detail.endswith("ignored: its outcome is unknown already")
        assert runtime.projections.status.of(key) is StatusCue.UNKNOWN
        with pytest.raises(RefusedError, match="recorded already"):
            await runtime.complete(dispatch)
    async with running(store) as runtime:
        await runtime.settle()
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert row.outcome == "unknown"


async def test_a_resumable_stream_survives_a_restart() -> None:
    """A call whose stream was lost resumably goes on after a restart and validates."""
    store = MemoryStore()
    key = key_of("a")
    events = call_events(key)
    async with running(store) as runtime:
        await start(runtime)
        await runtime.feed(events[:2])
        await runtime.feed([StreamLost(response=key.response_ref, resumable=True)])
    async with running(store) as runtime:
        await runtime.feed([*events[2:], response_end(key)])
        await runtime.settle()
        assert runtime.phase(key) is Phase.VALIDATED


async def _append_raw(store: MemoryStore, streams_and_events: Iterable[tuple[str, Event]]) -> None:
    log = MemoryLog(store)
    await log.append([NewEvent(stream=stream, event=event) for stream, event in streams_and_events])
    await log.aclose()


def _turn_started() -> tuple[str, Event]:
    turn = TurnRef(tenant="acme", conversation="c1", turn="t1")
    offered = tuple(tool.offered() for tool in TOOLS)
    return turn.stream, TurnStarted(turn=turn, principal=PRINCIPAL, tools=offered)


async def test_inputs_whose_decisions_were_never_written_are_decided_at_restart() -> None:
    """A log holding ingress with no decisions (the process died first) is decided on open."""
    store = MemoryStore()
    key = key_of("a")
    ingress: Sequence[Event] = [*call_events(key), response_end(key)]
    await _append_raw(
        store, [_turn_started(), *((key.response_ref.stream, event) for event in ingress)]
    )
    async with running(store) as runtime:
        await runtime.settle()
        assert runtime.phase(key) is Phase.VALIDATED
        assert runtime.projections.queue.ready() == [key]


async def test_a_log_that_disagrees_with_the_decider_is_refused() -> None:
    """A recorded decision the decider would not make stops the runtime from opening."""
    store = MemoryStore()
    key = key_of("a")
    forged = CallFailed(key=key, cause=2, reason="too_large", detail="forged")  # type: ignore[arg-type]
    await _append_raw(
        store,
        [
            _turn_started(),
            (key.response_ref.stream, CallOpened(key=key, tool="get_weather", sequence=0)),
            (key.stream, forged),
        ],
    )
    with pytest.raises(ReplayDivergence, match="position 3"):
        async with running(store):
            pass


async def test_the_live_digest_equals_the_digest_of_a_replay() -> None:
    """The projections of a running runtime and of a fresh fold of its log hash the same."""
    async with running() as runtime:
        await start(runtime)
        await ready_call(runtime, key_of("a"))
        await runtime.feed(call_events(key_of("b", response="r2"))[:2])
        await runtime.settle()
        replayed = Projections()
        for recorded in await runtime.log.read(1):
            replayed.apply(recorded)
        assert replayed.digest() == runtime.digest()


class _FailingCallWrites(MemoryLog):
    """A memory log whose writes to call streams fail, as a full disk would."""

    async def _append_records(
        self, records: list[PendingRecord], expected: dict[str, int]
    ) -> list[int]:
        if any(record.stream.startswith("call/") for record in records):
            raise LogError("disk full")
        return await super()._append_records(records, expected)


async def test_an_actor_that_cannot_write_stops_the_runtime_with_its_error() -> None:
    """A storage failure of a call's actor ends the runtime with that LogError, not a group."""
    log = _FailingCallWrites(clock=trio_clock())

    async def feed_one_call() -> None:
        async with open_runtime(log=log, tools=TOOLS) as runtime:
            await start(runtime)
            await runtime.feed(call_events(key_of("a")))
            await trio.sleep_forever()

    with pytest.raises(LogError, match="disk full"):
        await feed_one_call()


async def test_a_claim_whose_dispatch_was_never_written_is_unknown_after_a_restart() -> None:
    """A claim in the log without its answer (the process died first) is dispatched at restart
    and at once recorded as outcome_unknown: no executor ran it, none ever will."""
    store = MemoryStore()
    key = key_of("a")
    async with running(store) as runtime:
        await start(runtime)
        await ready_call(runtime, key)
    claim = ClaimRequested(key=key, claim_id="claim-1", executor="worker")
    await _append_raw(store, [(key.request_stream, claim)])
    async with running(store) as runtime:
        await runtime.settle()
        assert runtime.phase(key) is Phase.DISPATCHED
        row = runtime.projections.ledger.row(key)
        assert row is not None
        assert (row.state, row.outcome) == ("dispatched", "unknown")
        with pytest.raises(ClaimRefused, match="call_terminal"):
            await runtime.claim(key, executor="worker")


async def test_an_event_delivered_twice_is_folded_once() -> None:
    """A subscription that repeats events (at-least-once delivery) decides nothing twice: the
    log it leaves reopens to the same state."""
    store = MemoryStore()
    inner = MemoryLog(store, clock=trio_clock())
    repeating = FaultyLog(inner, seed=3, rates=FaultRates(duplicate_delivery=1.0))
    async with open_runtime(log=repeating, tools=TOOLS) as runtime:
        await start(runtime)
        await ready_call(runtime, key_of("a"))
        dispatch = await runtime.claim(key_of("a"), executor="worker")
        await runtime.complete(dispatch)
        await runtime.settle()
        digest = runtime.digest()
    async with running(store) as runtime:
        await runtime.settle()
        assert runtime.digest() == digest


@pytest.mark.parametrize("name", ["validation_timeout", "lease_time"])
@pytest.mark.parametrize("seconds", [math.nan, math.inf, -math.inf, 0.0, -1.0])
async def test_a_time_option_that_is_not_a_positive_finite_number_is_refused(
    name: str, seconds: float
) -> None:
    """NaN, infinite or non-positive seconds for a runtime's timeout or lease are refused by
    name before anything opens."""
    options: dict[str, float] = {name: seconds}
    with pytest.raises(ConfigurationError, match=f"{name} must be a positive, finite number"):
        async with open_runtime(log="memory://", **options):  # type: ignore[arg-type]
            pass
