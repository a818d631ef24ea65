"""The runtime an agent server embeds: the log, the router and actors, and the projections.

``open_runtime`` opens (or takes) a log, rebuilds every call and projection from it, finishes what
a stopped process left undone, and then follows the log. The agent server starts turns, feeds the
portable ingress events of its provider streams, cancels turns and passes confirmations on; an
executor takes ready calls, claims each through its actor, runs it and reports the outcome.

A runtime writes a snapshot of what it rebuilt every ``snapshot_every`` events it folds, and a
restart loads the newest one that its code and configuration made and folds only the events
after it (see ``inert.runtime._snapshotting``).

What a restart finishes, and what processes sharing the log do for each other, is
``inert.runtime._recovery``.
"""

from __future__ import annotations

import json
import secrets
from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import trio
import trio.lowlevel

from ..actors import (
    CallFold,
    CallLimits,
    CallRouter,
    Phase,
    ToolDeclaration,
    ToolRegistry,
    parse_arguments,
)
from ..actors._arguments import ParsedArguments
from ..actors._call import DIGEST_KEY, refused_whatever_comes
from ..actors._fold import ResumedState
from ..actors._places import MAX_IDENTIFIER_LENGTH, is_identifier
from ..adapters import ResumedCall
from ..events import (
    OUTCOME_TYPES,
    CallDispatched,
    CallKey,
    CallStopRequested,
    CallValidated,
    CancelReason,
    ClaimRefused,
    ClaimRequested,
    ConfigurationError,
    ConfirmationDenied,
    ConfirmationGiven,
    ConfirmationRefused,
    ConflictError,
    DiscardReason,
    EditRefused,
    Event,
    EventRejected,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionInputDenied,
    ExecutionInputGiven,
    ExecutionInputRequested,
    ExecutionStopped,
    ExecutionTaskCreated,
    InputRefused,
    OperatorControl,
    ProcessLeft,
    RecordedEvent,
    RefusedError,
    RequestRefused,
    RequestTimedOut,
    ResponseQuarantined,
    ResponseRef,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TraceContext,
    TurnCancelled,
    TurnLeased,
    TurnRef,
    TurnStarted,
)
from ..log import NO_STREAM, Log, NewEvent, new_event_id
from ..projections import DEFAULT_LEDGER_HORIZON, Ledger, Projections
from ..tracing import CallSpans, IncomingTrace, current_trace
from ._boundary import (
    Dispatch,
    Executor,
    OperatorAuthorizer,
    PendingConfirmation,
    ReadyCall,
    StopSignal,
    execute_with,
)
from ._controls import give_control
from ._ingress import DEFAULT_MAX_PENDING_BYTES, Held, Ingress
from ._input import (
    Ask,
    InputAnswer,
    PendingInput,
    ask_of,
    digested,
    refuse_second_ask,
    task_id_checked,
)
from ._peers import DEFAULT_LEASE_TIME, Peers
from ._requests import Requests
from ._retention import DEFAULT_RETENTION, Retention, RetentionPlan
from ._snapshot import (
    DEFAULT_SNAPSHOT_EVERY,
    SNAPSHOT_KEY,
    Binding,
    Configuration,
    RuntimeState,
    stamp,
)
from ._snapshotting import Snapshots
from ._validations import KeptValidations


def trio_clock() -> Callable[[], datetime]:
    """A log clock that reads wall-clock time as it advances with Trio's clock.

    ``open_runtime`` opens a log named by URL with it, so that the deadlines the runtime sleeps
    for (in Trio's time) and the times the log records agree, also under a ``MockClock``. Give
    it to a log you open yourself for the same reason. Call it inside ``trio.run``. It reads
    the wall clock once: a jump of the machine's clock afterwards does not move it. A
    PostgreSQL log keeps the server's time instead, and only advances its reading of it by
    this clock between two measurements.
    """
    # The clock object, not trio.current_time(): a log may read the time in a worker thread.
    clock = trio.lowlevel.current_clock()
    wall = datetime.now(UTC)
    origin = clock.current_time()
    return lambda: wall + timedelta(seconds=clock.current_time() - origin)


_SWEEP_REPORTED_AT_LEAST = 1024

REDACTIONS_PER_TRANSACTION = 256
"""The most redactions due at once that the log makes in one transaction: each holds its rows
(and the snapshots' payloads) locked until the transaction commits."""


def _edit_text(key: CallKey, arguments: Mapping[str, Any] | bytes) -> bytes:
    """A principal's edit of a call's arguments as the JSON text the log records."""
    if isinstance(arguments, bytes):
        return arguments
    try:
        return json.dumps(arguments, allow_nan=False, ensure_ascii=False).encode()
    except (TypeError, ValueError) as error:
        raise ConfirmationRefused(
            key.stream, "malformed_arguments", f"the edit is not JSON: {type(error).__name__}"
        ) from None


DEFAULT_REQUEST_TIMEOUT = 3 * DEFAULT_LEASE_TIME
"""Seconds a request of the runtime to an actor may wait for its answer: long enough for the
turn of a silent process to be taken over and answered here."""


DEFAULT_CONFIRMATION_VALIDITY = timedelta(minutes=10)
"""How long a confirmation lets its call be claimed, unless ``confirm`` is told otherwise."""


class Runtime:
    """The embedding API. Open one with [`open_runtime`][inert.open_runtime]."""

    def __init__(
        self,
        log: Log,
        registry: ToolRegistry,
        limits: CallLimits,
        *,
        ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON,
        retention: Retention = DEFAULT_RETENTION,
        process: str | None = None,
        lease_time: float = DEFAULT_LEASE_TIME,
        held_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        snapshot_every: int | None = DEFAULT_SNAPSHOT_EVERY,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        **router_options: Any,
    ) -> None:
        self.log = log
        self.request_timeout = request_timeout
        self.tools = registry
        self.limits = limits
        self.process = process
        self.peers = None if process is None else Peers(process, timedelta(seconds=lease_time))
        self.projections = Projections(ledger_horizon=ledger_horizon)
        self._fold = CallFold(limits, process=process, digest_key=log.key(DIGEST_KEY))
        self._router = CallRouter(
            log, self._fold, registry.start_validation, listener=self._fan_out, **router_options
        )
        self._requests = Requests()
        self._ingress = Ingress(log, max_pending_bytes=held_bytes, refused=self._refusal)
        # Claims whose outcome was reported, with their call, until the fold forgets the call
        # (a report of a forgotten call is refused as one that was never dispatched).
        self._reported: dict[str, CallKey] = {}
        self._sweep_reported_at = _SWEEP_REPORTED_AT_LEAST
        # The stop signals of the claims this runtime made, until the stop is requested or an
        # outcome is in the log.
        self._stops: dict[str, StopSignal] = {}
        self._validations = KeptValidations()
        # The requests for input the executors of this runtime wait on, by call, and the task
        # each call's run is where its executor noted one.
        self._asks: dict[CallKey, Ask] = {}
        self._tasks: dict[str, str] = {}
        self._horizon = ledger_horizon
        self.spans: CallSpans | None = None
        self._live = False
        self.operators: OperatorAuthorizer = frozenset[str]().__contains__
        self._changed = trio.Event()
        self._retention = RetentionPlan(retention)
        self._retention_due = trio.Event()
        self._redacting = False
        self._snapshots = Snapshots(
            log,
            every=snapshot_every,
            stamp=stamp(
                Configuration(
                    limits=limits,
                    ledger_horizon=ledger_horizon,
                    retention=retention,
                    process=process,
                    lease_time=lease_time,
                )
            ),
            name=process or "",
            state=self._state_at,
        )
        self._heartbeats = log
        """The log the processes beat in: this runtime's own, or its process's control
        partition for a runtime of one partition."""
        self._beats_here = True
        """Whether this runtime's process beats in its own log (a runtime of one partition
        leaves that to its process, which beats in the control partition)."""
        self.restored_from: int | None = None
        """The position of the snapshot this runtime started from (``None``: the whole log)."""
        self._last_folded = (0, "")
        self._departed = trio.Event()
        """Set when a process of the log says it left: its turns are taken over at once."""

    @property
    def snapshot_refusal(self) -> str | None:
        """Why the snapshot found at the start was not used (the log was replayed from the
        start instead), if one was found and refused."""
        return self._snapshots.refusal

    # --- views ---

    @property
    def ledger(self) -> Ledger:
        """The assembly ledger: per call key its latest row and its history."""
        return self.projections.ledger

    def digest(self) -> str:
        """The state digest of the projections (the same as a replay of the log gives)."""
        return self.projections.digest()

    def phase(self, key: CallKey) -> Phase:
        """Where one call is in its lifecycle (``ABSENT`` for a call the runtime does not hold)."""
        state = self._fold.state(key)
        return Phase.ABSENT if state is None else state.phase

    # --- the log, as the router hears it ---

    def _hear_peer(self, recorded: RecordedEvent, live: bool) -> None:
        """What a record says of the processes sharing the log (the runtime has peers)."""
        assert self.peers is not None
        self.peers.heard(recorded, live)
        if live and isinstance(recorded.event, ProcessLeft):
            self._departed.set()

    def _fan_out(self, recorded: RecordedEvent) -> None:
        """Hand a record the fold has folded to every consumer of the runtime, in this order:
        the projections first (the others read them), the change announced once all is done."""
        self._last_folded = (recorded.position, recorded.event_id)
        self.projections.apply(recorded)
        if self.peers is not None:
            self._hear_peer(recorded, self._live)
        self._plan_retention(recorded)
        if self.spans is not None:
            if self._live:
                self.spans.apply(recorded)
            else:
                self.spans.remember(recorded)
        self._requests.heard(recorded, self._fold)
        if self._live:
            # Kept from what is heard live alone: a restart finds the same (nothing) whether it
            # replays the log or restores a snapshot, and claims behave alike after either.
            self._keep_validation(recorded.event)
        if self._stops:
            self._signal_stop(recorded.event)
        self._announce_change()
        if self._live:
            self._snapshots.heard(recorded.position)

    def _keep_validation(self, event: object) -> None:
        key = getattr(event, "key", None)
        if not isinstance(key, CallKey):
            return
        state = self._fold.state(key)
        self._validations.heard(
            event,
            None if state is None else state.phase,
            isinstance(event, CallDispatched) and event.claim_id in self._stops,
        )

    def _signal_stop(self, event: object) -> None:
        """Tell the executor of a claim made here that its call is to stop, once the request
        is in the log; forget the claim's signal once its outcome is."""
        if isinstance(event, CallStopRequested):
            stop = self._stops.pop(event.claim_id, None)
            if stop is not None:
                stop.request(event.reason)
        elif isinstance(event, OUTCOME_TYPES):
            self._stops.pop(event.claim_id, None)
            self._tasks.pop(event.claim_id, None)

    def _plan_retention(self, recorded: RecordedEvent) -> None:
        self._retention.heard(recorded, self._fold)
        event = recorded.event
        if isinstance(event, TurnLeased) and event.owner == self.process:
            self._retention.gained(event.turn)
        if self._retention.pending:
            self._retention_due.set()

    def _announce_change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _refusal(self, key: CallKey) -> tuple[DiscardReason, CallKey] | None:
        """Why the decider could only refuse whatever is fed for the call now, if it could, and
        the call its count goes to (the call itself where it ended, else the call that closed
        its response). The ingress counts such events instead of storing them."""
        closed_by = self._fold.over_limit(key.response_ref)
        reason = refused_whatever_comes(self._fold.records.get(key), closed_by is not None)
        if reason is None:
            return None
        if reason is DiscardReason.CALL_ENDED or closed_by is None:
            return reason, key
        return reason, closed_by

    async def _caught_up(self) -> None:
        """Until the fold has seen everything in the log now."""
        head = await self.log.head()
        with trio.move_on_after(self.request_timeout):
            await self._router.wait_for(head)
            return
        raise RequestTimedOut(
            f"catching up with the log (position {head})",
            self.request_timeout,
            f"the runtime has folded the log up to position {self._fold.position} only",
        )

    async def _request(
        self, event: ClaimRequested | ConfirmationGiven | ConfirmationDenied
    ) -> list[Event]:
        """Append a request to a call's actor and wait until its answer is in the log, or
        until ``request_timeout`` has passed (``RequestTimedOut``)."""
        key = event.key
        event_id = new_event_id()
        request = self._requests.open(event_id)
        try:
            await self.log.append(
                [NewEvent(stream=key.request_stream, event=event, event_id=event_id)]
            )
            with trio.move_on_after(self.request_timeout):
                await request.done.wait()
                return request.answer
        finally:
            self._requests.close(event_id, request)
        owner = self.turn_owner(key.turn_ref)
        why = (
            f"the turn is leased by process {owner!r}, whose actor has not answered"
            if owner is not None and owner != self.process
            else "the call's actor has not answered (the runtime is overloaded or stopping)"
        )
        raise RequestTimedOut(
            f"the {event.TAG} of {key.stream!r} (event {event_id})", self.request_timeout, why
        )

    # --- turns ---

    async def start_turn(
        self,
        *,
        tenant: str,
        conversation: str,
        turn: str,
        principal: str,
        tools: Iterable[str | ToolDeclaration] | None = None,
        trace: TraceContext | IncomingTrace | None = None,
    ) -> TurnRef:
        """Start a turn for an authenticated principal, offering these tools (default: all).

        A new turn supersedes the previous turn of the conversation: its calls are cancelled.
        ``trace`` continues the caller's trace (without it, the trace of the OpenTelemetry span
        current here, if any); given as what ``read_trace_headers`` made of the caller's
        headers, a refused header starts a new trace and the turn's span says why. The log
        records the context with the turn's start (with no caller's, that of the turn's own
        span, where spans are made), and the calls of the turn resumed after a restart
        continue its trace from there.
        """
        try:
            ref = TurnRef(tenant=tenant, conversation=conversation, turn=turn)
        except ValueError as error:
            raise RefusedError(f"not a turn identity: {error}") from None
        if trace is None:
            # As OpenTelemetry's libraries do: a turn started inside a span continues its trace.
            trace = current_trace()
        if isinstance(trace, IncomingTrace):
            if trace.problem is not None and self.spans is not None:
                self.spans.note_trace_problem(ref, trace.problem)
            trace = trace.context
        if not principal:
            raise RefusedError("a turn needs the principal that started it")
        offered = []
        for tool in self.tools.names() if tools is None else tools:
            declaration = self.tools.latest(tool) if isinstance(tool, str) else tool
            offered.append(self.tools.register(declaration))
        event = TurnStarted(turn=ref, principal=principal, tools=tuple(offered))
        spans = self.spans if trace is None else None
        if spans is not None:
            # The turn's own span, made now so that the log records its context: after a
            # restart, the turn's calls continue its trace from there.
            trace = spans.open_turn(ref, self.log.now())
        started = [NewEvent(stream=ref.stream, event=event, trace=trace)]
        expected = {ref.stream: NO_STREAM}
        if self.process is not None:
            lease = TurnLeased(turn=ref, owner=self.process)
            started.append(NewEvent(stream=ref.lease_stream, event=lease))
            expected[ref.lease_stream] = NO_STREAM
        appended = False
        try:
            await self.log.append(started, expected)
            appended = True
        except ConflictError:
            raise RefusedError(f"turn {ref.stream!r} was started before") from None
        finally:
            if spans is not None and not appended:
                spans.abandon_turn(ref, self.log.now())
        await self._caught_up()
        return ref

    async def cancel_turn(self, turn: TurnRef, *, principal: str, reason: str = "") -> None:
        """Cancel a turn for its principal: none of its calls not yet dispatched will run."""
        await self._caught_up()
        view = self._fold.scope.turn(turn)
        if view is None:
            raise RefusedError(f"turn {turn.stream!r} is unknown")
        if view.principal != principal:
            raise RefusedError(f"turn {turn.stream!r} belongs to another principal")
        cancelled = TurnCancelled(turn=turn, principal=principal, reason=reason)
        await self.log.append([NewEvent(stream=turn.stream, event=cancelled)])

    # --- ingress ---

    async def feed(self, events: Sequence[Event], *, trace: TraceContext | None = None) -> None:
        """Feed portable ingress events of provider streams, in the order they came.

        Fragments (``ArgumentsAppended``) are held for the next append of the log and this
        returns without waiting for it: they are transport data, and the fragments of one call
        that arrive between two appends are written as one event (where they carry offsets).
        A feed of fragments only never blocks: it is a checkpoint now and then (every 64th),
        or when more is held than the ingress's bound, until the writer has made room. Every
        other event is a promise: this returns once it is durable, after the fragments its
        response stream holds.
        Each response stream has one feeder: appends are fenced by the stream's version, and a
        stream fed from elsewhere meanwhile is a ``ConflictError``.
        """
        # The path of every delta, so the ingress's own steps are taken here, without a
        # coroutine of its own between.
        ingress = self._ingress
        held = ingress.hold(events, trace)
        if held is Held.HELD:
            return
        if held is Held.YIELD:
            await trio.lowlevel.checkpoint()
        elif held is Held.FULL:
            await ingress.room()
        else:
            await ingress.append(events, trace)

    # --- confirmation ---

    # --- operator controls ---

    async def quarantine_response(
        self, response: str, *, operator: str, reason: str, tenant: str | None = None
    ) -> int:
        """Stop every call of a provider response not yet dispatched, now and whatever of it
        arrives later (a reconnecting adapter included); its position in the log."""
        event = ResponseQuarantined(
            response=response, tenant=tenant, operator=operator, reason=reason
        )
        return await self._control(event)

    async def disable_tool(
        self, tool: str, *, operator: str, reason: str, tenant: str | None = None
    ) -> int:
        """Stop every call of a tool (everywhere, or for one tenant) until it is enabled."""
        event = ToolDisabled(tool=tool, tenant=tenant, operator=operator, reason=reason)
        return await self._control(event)

    async def enable_tool(
        self, tool: str, *, operator: str, reason: str, tenant: str | None = None
    ) -> int:
        """Let new calls of a tool run again; the calls the disabling ended stay ended."""
        event = ToolEnabled(tool=tool, tenant=tenant, operator=operator, reason=reason)
        return await self._control(event)

    async def stop_tenant(self, tenant: str, *, operator: str, reason: str) -> int:
        """Emergency stop: every call of the tenant not yet dispatched ends, inertly."""
        event = TenantStopped(tenant=tenant, operator=operator, reason=reason)
        return await self._control(event)

    async def resume_tenant(self, tenant: str, *, operator: str, reason: str) -> int:
        """Let the tenant's new turns run calls again; stopped calls stay ended."""
        event = TenantResumed(tenant=tenant, operator=operator, reason=reason)
        return await self._control(event)

    async def _control(self, event: OperatorControl) -> int:
        position = await give_control(self.log, event, self.operators)
        await self._caught_up()
        if self.spans is not None:
            # The control's span names the calls it ended: they are known once the actors
            # have answered it.
            await self.settle()
            self.spans.end_control(position, self.log.now())
        return position

    def turn_owner(self, turn: TurnRef) -> str | None:
        """The process that decides for the turn's calls, where processes share the log."""
        lease = self._fold.lease(turn)
        return None if lease is None else lease[0]

    def turn_principal(self, turn: TurnRef) -> str | None:
        """The principal a started turn belongs to; None for a turn never started."""
        view = self._fold.scope.turn(turn)
        return None if view is None else view.principal

    def resumable_streams(self, turn: TurnRef) -> dict[ResponseRef, int | None]:
        """The responses of ``turn`` whose stream was lost and can still be resumed, each with
        the last provider sequence number the log holds all of (``StreamLost.last_sequence``:
        a loss is written after every fragment fed before it, and a restart records the loss
        of a resumed stream at the sequence it was resumed after)."""
        return self._fold.resumable_streams(turn)

    def resumable_calls(self, response: ResponseRef) -> list[ResumedCall]:
        """The calls of ``response`` a resumed stream takes up: opened, not terminal, each with
        the sequence and byte offset its adapter gives next (``ResponseCalls.restore``), as
        they were when the stream was lost."""
        point = self._fold.resume_point(response)
        calls = []
        for state in self._fold.live_calls_of(response):
            if point is None:
                at = ResumedState(
                    next_sequence=state.next_sequence,
                    offset=state.end,
                    ended=state.phase is not Phase.COLLECTING,
                )
            elif state.key in point.calls:
                # As the stream was when it was lost: the continuation sends again what came
                # after, and what the log holds of that is a duplicate.
                at = point.calls[state.key]
            else:
                # Opened after the stream was lost: the continuation opens it again.
                continue
            calls.append(
                ResumedCall(
                    slot=state.key.item,
                    key=state.key,
                    tool=state.tool,
                    next_sequence=at.next_sequence,
                    offset=at.offset,
                    ended=at.ended,
                )
            )
        return calls

    async def confirm(
        self,
        key: CallKey,
        *,
        principal: str,
        arguments_digest: str,
        expires_in: timedelta = DEFAULT_CONFIRMATION_VALIDITY,
        arguments: Mapping[str, Any] | bytes | None = None,
    ) -> datetime:
        """Confirm one call for its principal, for exactly the arguments with this digest; the
        confirmation is single use and expires after ``expires_in`` (10 minutes): a claim from
        then on cancels the call (``confirmation_expired``) instead of dispatching it. Returns
        when the confirmation expires, by the log's clock.

        ``arguments`` (a mapping, or JSON text) edits the arguments the digest names: the edit
        is parsed and validated once, like the model's arguments, and only it can run if it
        passes; ``ConfirmationRefused`` (``malformed_arguments``, ``schema_invalid``, ...)
        otherwise, and the call still waits for a confirmation."""
        edit = None if arguments is None else _edit_text(key, arguments)
        await self._caught_up()
        state = self._fold.state(key)
        tool_digest = state.tool_digest if state is not None else ""
        event = ConfirmationGiven(
            key=key,
            principal=principal,
            tool_digest=tool_digest,
            arguments_digest=arguments_digest,
            nonce=secrets.token_hex(16),
            expires_at=self.log.now() + expires_in,
            arguments=edit,
        )
        answer = await self._request(event)
        self._raise_if_rejected(key, answer, ConfirmationRefused)
        return event.expires_at

    async def pending_confirmation(self, key: CallKey) -> PendingConfirmation | None:
        """What a call waiting for confirmation asks of its principal, or ``None``."""
        await self._caught_up()
        state = self._fold.state(key)
        view = self._fold.scope.turn(key.turn_ref)
        if state is None or view is None or not state.awaiting_confirmation:
            return None
        assert state.confirmation_expires is not None
        _, arguments = await self._validated(key, kept=self._validations.peek(key))
        return PendingConfirmation(
            key=key,
            principal=view.principal,
            tool=state.tool,
            tool_digest=state.tool_digest,
            arguments=arguments,
            arguments_digest=state.arguments_digest,
            expires_at=state.confirmation_expires,
        )

    async def _validated(
        self, key: CallKey, *, kept: CallValidated | None
    ) -> tuple[CallValidated, Mapping[str, Any]]:
        """The call's validation (the one ``kept`` from the fold's reading, or else read back
        from the log) and its arguments, parsed again."""
        decision = kept
        if decision is None:
            validated = [
                recorded.event
                for recorded in await self.log.read_stream(key.stream)
                if isinstance(recorded.event, CallValidated)
            ]
            assert validated
            decision = validated[-1]
        parsed = parse_arguments(decision.arguments, self.limits.arguments)
        assert isinstance(parsed, ParsedArguments)
        return decision, parsed.value

    async def deny(self, key: CallKey, *, principal: str, reason: str = "") -> None:
        """Refuse one call for its principal: it is cancelled and never runs."""
        answer = await self._request(
            ConfirmationDenied(key=key, principal=principal, reason=reason)
        )
        self._raise_if_rejected(key, answer, ConfirmationRefused)

    @staticmethod
    def _raise_if_rejected(key: CallKey, answer: list[Event], error: type[RequestRefused]) -> None:
        for event in answer:
            if isinstance(event, EventRejected | EditRefused):
                raise error(key.stream, event.reason.value, event.detail)

    # --- the executor boundary ---

    def ready_calls(self) -> ReadyCalls:
        """The calls that may be claimed, as they become ready."""
        return ReadyCalls(lambda: (self,), lambda: self._changed)

    def _offered_tools(self, turn: TurnRef) -> Collection[str]:
        """The names of the tools the turn offered, as the runtime knows it now (none for a
        turn it does not know)."""
        view = self._fold.scope.turn(turn)
        return () if view is None else view.tools

    def _digest_key_of(self, turn: TurnRef) -> bytes:
        """The key the digests of the turn's calls are keyed by (empty under rules before 10)."""
        return self._fold._digest_key(self._fold.scope.turn(turn))

    def ready_call(self, key: CallKey) -> ReadyCall | None:
        """The call as an executor may claim it (the digest of the arguments that would run
        included), or ``None`` while it is not ready."""
        state = self._fold.state(key)
        view = self._fold.scope.turn(key.turn_ref)
        if state is None or view is None or not self._fold.ready(key):
            return None
        return ReadyCall(
            key=key,
            turn=key.turn_ref,
            tenant=key.tenant,
            principal=view.principal,
            tool=state.tool,
            arguments_digest=state.arguments_digest,
        )

    async def claim(self, call: CallKey | ReadyCall, *, executor: str) -> Dispatch:
        """Claim a ready call through its actor; ``ClaimRefused`` unless it is dispatched.

        The dispatch is durable in the log when this returns.
        """
        key = call.key if isinstance(call, ReadyCall) else call
        claim_id = new_event_id()
        # Registered before the claim is in the log: a stop may be requested as soon as the
        # dispatch is.
        stop = self._stops[claim_id] = StopSignal()
        try:
            answer = await self._request(
                ClaimRequested(key=key, claim_id=claim_id, executor=executor, process=self.process)
            )
            dispatched = [event for event in answer if isinstance(event, CallDispatched)]
            if not dispatched:
                self._raise_if_rejected(key, answer, ClaimRefused)
                raise ClaimRefused(key.stream, "no_answer", "the claim was not answered")
        except BaseException:
            self._stops.pop(claim_id, None)
            raise
        decision, arguments = await self._validated(key, kept=self._validations.take(key))
        view = self._fold.scope.turn(key.turn_ref)
        assert view is not None
        return Dispatch(
            key=key,
            turn=key.turn_ref,
            tenant=key.tenant,
            principal=view.principal,
            tool=decision.tool,
            tool_digest=decision.tool_digest,
            arguments=arguments,
            arguments_digest=decision.arguments_digest,
            claim_id=claim_id,
            executor=executor,
            trace=None if self.spans is None else self.spans.context_of(key),
            stop=stop,
        )

    async def complete(self, dispatch: Dispatch) -> None:
        """Record that the executor ran the call to completion.

        A dispatch has one outcome: ``complete``, ``fail`` and ``stopped`` raise
        ``RefusedError``, recording nothing, for a dispatch whose outcome is recorded already,
        by a report or as unknown (a runtime restarted while the call ran)."""
        await self._report(
            dispatch, ExecutionCompleted(key=dispatch.key, claim_id=dispatch.claim_id)
        )

    async def fail(self, dispatch: Dispatch, error: str = "") -> None:
        """Record that the executor's run of the call failed: ``error`` is empty or an
        identifier (an ASCII letter or ``_``, then letters, digits and ``_ . : -``, at most 64
        characters; an exception type's name, say), recorded as it is. Anything else is refused
        with a ``ConfigurationError`` before anything is recorded: an error's message may hold
        argument values, which the log never keeps."""
        if error and not is_identifier(error):
            raise ConfigurationError(
                "the error given to fail() is an identifier (an ASCII letter or _, then letters,"
                f" digits and _ . : -, at most {MAX_IDENTIFIER_LENGTH} characters), not a text"
                f" of {len(error)} characters: the log keeps no values; nothing was recorded"
            )
        await self._report(
            dispatch, ExecutionFailed(key=dispatch.key, claim_id=dispatch.claim_id, error=error)
        )

    async def stopped(self, dispatch: Dispatch) -> None:
        """Record that the executor stopped the call's run, as its stop signal asked."""
        await self._report(dispatch, ExecutionStopped(key=dispatch.key, claim_id=dispatch.claim_id))

    async def wait_for_stop(self, dispatch: Dispatch) -> CancelReason:
        """Until the executor of this dispatch is asked to stop; why it is (the same as
        ``await dispatch.stop.wait()``, for callers of another event loop)."""
        return await dispatch.stop.wait()

    # --- the executor's notes ---

    async def note_task(self, dispatch: Dispatch, task_id: str) -> None:
        """Record that the executor's run of the call is a task on the server that runs it,
        known there by ``task_id`` (the server's handle: 1 to 256 printable ASCII characters
        without spaces, ``ConfigurationError`` otherwise): the ledger shows it, and after a
        restart it names the task whose outcome is unknown. ``RefusedError`` for a dispatch
        whose outcome is recorded."""
        task_checked = task_id_checked(task_id)
        self._check_running(dispatch)
        self._tasks[dispatch.claim_id] = task_checked
        event = ExecutionTaskCreated(
            key=dispatch.key, claim_id=dispatch.claim_id, task_id=task_checked
        )
        await self.log.append([NewEvent(stream=dispatch.key.request_stream, event=event)])

    async def ask_for_input(
        self, dispatch: Dispatch, request: Mapping[str, Any], *, expires_in: timedelta
    ) -> InputAnswer | None:
        """Ask the running call's principal for input (a JSON object: the server's request,
        shown to the person, never logged) and wait for the answer; ``None`` once
        ``expires_in`` has passed unanswered. The log records that the call asks (the
        request's keyed digest and size, and when the request expires), and the answer as
        ``give_input`` or ``deny_input`` records it. Cancel the wait to withdraw the request.

        One request at a time per call (``RefusedError`` for a second, and for a dispatch
        whose outcome is recorded); the answer is taken by this runtime only, the one whose
        executor holds the claim."""
        key = dispatch.key
        self._check_running(dispatch)
        refuse_second_ask(self._asks, key)
        request_digest, size = digested(
            request, self._digest_key_of(key.turn_ref), "the request for input"
        )
        expires_at = self.log.now() + expires_in
        pending = PendingInput(
            key=key,
            principal=dispatch.principal,
            tool=dispatch.tool,
            task_id=self._tasks.get(dispatch.claim_id),
            request=request,
            request_digest=request_digest,
            expires_at=expires_at,
        )
        event = ExecutionInputRequested(
            key=key,
            claim_id=dispatch.claim_id,
            request_digest=request_digest,
            size=size,
            expires_at=expires_at,
        )
        ask = self._asks[key] = Ask(pending, dispatch.claim_id)
        try:
            await self.log.append([NewEvent(stream=key.request_stream, event=event)])
            ask.written.set()
            with trio.move_on_after(max(expires_in.total_seconds(), 0)):
                return await ask.wait()
            return None
        finally:
            ask.withdraw()
            if self._asks.get(key) is ask:
                del self._asks[key]

    async def pending_input(self, key: CallKey) -> PendingInput | None:
        """What a running call asks its principal for, where an executor of this runtime
        waits on it, or ``None``: pending from before its request is in the log (a loop over
        ``changes`` sees it come) until it is answered, expires or is withdrawn."""
        ask = self._asks.get(key)
        return None if ask is None or ask.taken else ask.pending

    async def give_input(
        self, key: CallKey, *, principal: str, request_digest: str, value: Any
    ) -> None:
        """Answer a running call's request for input for its principal, for exactly the
        request with this digest, with ``value`` (a JSON value, handed to the executor and
        never logged: the log records its keyed digest and size). ``InputRefused`` for an
        answer that does not bind, and nothing is recorded."""
        await self._answer(key, principal, request_digest, given=True, value=value)

    async def deny_input(self, key: CallKey, *, principal: str, request_digest: str) -> None:
        """Refuse a running call's request for input for its principal: its executor ends the
        run (an MCP task is cancelled). ``InputRefused`` as for ``give_input``."""
        await self._answer(key, principal, request_digest, given=False, value=None)

    async def _answer(
        self, key: CallKey, principal: str, request_digest: str, *, given: bool, value: Any
    ) -> None:
        ask = ask_of(self._asks, key)
        ask.check(key, principal, request_digest, self.log.now())
        event: Event
        if given:
            input_digest, size = digested(value, self._digest_key_of(key.turn_ref), "the input")
            event = ExecutionInputGiven(
                key=key,
                claim_id=ask.claim_id,
                principal=principal,
                request_digest=request_digest,
                input_digest=input_digest,
                size=size,
            )
        else:
            event = ExecutionInputDenied(
                key=key, claim_id=ask.claim_id, principal=principal, request_digest=request_digest
            )
        # Taken before the write: an answer given meanwhile is refused, not recorded second.
        ask.taken = True
        try:
            # Recorded after the request it answers, never before.
            await ask.written.wait()
            if ask.withdrawn:
                raise InputRefused(key.stream, "not_awaiting_input", "the request was withdrawn")
            await self.log.append([NewEvent(stream=key.request_stream, event=event)])
        except BaseException:
            ask.taken = False
            raise
        ask.give(InputAnswer(principal=principal, given=given, value=value))

    def _check_dispatched(self, dispatch: Dispatch) -> None:
        state = self._fold.state(dispatch.key)
        if (
            state is None
            or state.phase is not Phase.DISPATCHED
            or state.claim_id != dispatch.claim_id
        ):
            raise RefusedError(f"{dispatch.key.stream!r} was not dispatched to this claim")

    def _check_running(self, dispatch: Dispatch) -> None:
        """Refuse a note of a dispatch that is not this claim's, or whose outcome is in."""
        self._check_dispatched(dispatch)
        if self._fold.has_outcome(dispatch.key) or dispatch.claim_id in self._reported:
            raise RefusedError(
                f"the outcome of claim {dispatch.claim_id!r} of {dispatch.key.stream!r} is"
                " recorded already: its run has ended; nothing was recorded"
            )

    async def _report(self, dispatch: Dispatch, event: Event) -> None:
        self._check_dispatched(dispatch)
        # The fold knows the outcomes in the log (another process's reports, those found
        # unknown at a restart); this process's own reports may not be folded yet.
        folded = self._fold.has_outcome(dispatch.key)
        if folded or dispatch.claim_id in self._reported:
            row = self.projections.ledger.row(dispatch.key) if folded else None
            shown = f" ({row.outcome})" if row is not None and row.outcome is not None else ""
            raise RefusedError(
                f"the outcome of claim {dispatch.claim_id!r} of {dispatch.key.stream!r} is"
                f" recorded already{shown}: a dispatch has one outcome, the first recorded"
                " (an outcome unknown since a restart included); nothing was recorded"
            )
        self._reported[dispatch.claim_id] = dispatch.key
        self._stops.pop(dispatch.claim_id, None)
        self._tasks.pop(dispatch.claim_id, None)
        if len(self._reported) > self._sweep_reported_at:
            records = self._fold.records
            self._reported = {claim: key for claim, key in self._reported.items() if key in records}
            self._sweep_reported_at = max(2 * len(self._reported), _SWEEP_REPORTED_AT_LEAST)
        await self.log.append([NewEvent(stream=dispatch.key.request_stream, event=event)])

    async def execute(
        self, call: CallKey | ReadyCall, executor: Executor, *, name: str
    ) -> Dispatch:
        """Claim a call, run ``executor`` on it and record its outcome."""
        return await execute_with(self, call, executor, name=name)

    # --- quiet ---

    def changes(self) -> Changes:
        """The log position the runtime's views are at, each time it has moved since the last
        one given: a loop over it sees every change, however long each turn of it takes."""
        return Changes(self)

    async def settle(self) -> None:
        """Wait until everything fed is in the log, everything in the log is folded, every
        actor has done its work, and the redactions and the snapshot due by then are written."""
        while True:
            await self._ingress.drain()
            head = await self.log.head()
            await self._router.wait_for(head)
            await self._router.wait_until_idle()
            await self._retained()
            await self._snapshots.written()
            if await self.log.head() == head and not self._router.busy and self._ingress.idle:
                return

    async def _retain(self) -> None:
        """Redact what retention says is due, as the log's fold makes it due."""
        while True:
            await self._retention_due.wait()
            self._retention_due = trio.Event()
            self._redacting = True
            await self._redact_due()
            self._redacting = False
            self._changed.set()
            self._changed = trio.Event()

    async def _redact_caught_up(self) -> None:
        """Make the redactions found due by the replay before anything else runs.

        A restart from a snapshot finds due again what the stopped process made after taking
        it (the snapshot cannot know), which a replay from the start does not: made while the
        runtime serves, those redactions would interleave otherwise with what it does, and the
        two restarts would write different logs.
        """
        self._retention_due = trio.Event()
        await self._redact_due()

    async def _redact_due(self) -> None:
        # The turns' owners alone redact (each process folds the same plan): where processes
        # share the log, a call's payloads are redacted once, not once per process.
        due = self._retention.take(self._fold.owns)
        for start in range(0, len(due), REDACTIONS_PER_TRANSACTION):
            batch = due[start : start + REDACTIONS_PER_TRANSACTION]
            await self.log.redact_many(batch)
            for stream, version, _, keys in batch:
                self._retention.made(stream, version, keys)

    async def _retained(self) -> None:
        """Until no redaction is due or running."""
        while self._redacting or self._retention.pending:
            changed = self._changed
            await changed.wait()

    # --- snapshots ---

    async def _restore(self) -> None:
        """Start from the newest usable snapshot of this runtime, if there is one."""
        state = await self._snapshots.load()
        if state is None:
            return
        self._fold = state.fold
        # The log's own key: the snapshot was bound to this log, and keeps the key it gave.
        self._fold.digest_key = self.log.key(DIGEST_KEY)
        self.projections = state.projections
        self._retention = state.retention
        if self._retention.pending:
            # Redactions due when the snapshot was taken, perhaps never made: made now (again).
            self._retention_due.set()
        self.peers = state.peers
        self._router.start_at(state.fold, state.position)
        self.restored_from = state.position
        if self.spans is not None:
            await self._remember_open_calls()

    async def _remember_open_calls(self) -> None:
        """What the spans of calls still open need, which the replay skipped by starting from a
        snapshot: each call's tool, and the trace its turn started in (read from the log)."""
        assert self.spans is not None
        turns: set[TurnRef] = set()
        for key in self._fold.live_keys():
            slot = self._fold.state(key)
            assert slot is not None
            self.spans.remember_call(key, slot.tool)
            turns.add(key.turn_ref)
        for turn in turns:
            started = [
                recorded
                for recorded in await self.log.read_stream(turn.stream)
                if isinstance(recorded.event, TurnStarted)
            ]
            if started:
                self.spans.remember_turn(turn, started[0].trace)

    def _state_at(self, position: int) -> tuple[RuntimeState, Binding]:
        state = RuntimeState(
            position=position,
            fold=self._fold,
            projections=self.projections,
            retention=self._retention,
            peers=self.peers,
        )
        last = self._last_folded
        if last[0] != position:
            raise AssertionError(f"a snapshot at {position}, the last event folded is {last[0]}")
        return state, Binding(
            log=self.log.identity,
            position=position,
            event_id=last[1],
            key=self.log.key(SNAPSHOT_KEY),
        )


class Changes:
    """An async iterator over the positions the runtime's views move to (see ``changes``)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._given = 0

    def __aiter__(self) -> Changes:
        return self

    async def __anext__(self) -> int:
        runtime = self._runtime
        while runtime._fold.position <= self._given:
            await runtime._changed.wait()
        self._given = runtime._fold.position
        return self._given


class ReadyCalls:
    """An async iterator over the calls that may be claimed, each time one becomes ready,
    waiting for new ones: of one runtime, or of the cores of a process's partitions. Each wake
    asks every queue only for what it admitted since (``DispatchQueue.ready_after``), so a
    queue of many calls claimed but not yet dispatched costs nothing to look past. Not an
    async generator: an executor that stops iterating leaves nothing unfinished for Trio to
    warn of."""

    def __init__(self, cores: Callable[[], Iterable[Runtime]], changed: Callable[[], trio.Event]):
        self._cores = cores
        self._changed = changed
        self._marks: dict[Runtime, int] = {}
        self._fresh: deque[tuple[Runtime, CallKey]] = deque()

    def __aiter__(self) -> ReadyCalls:
        return self

    async def __anext__(self) -> ReadyCall:
        fresh = self._fresh
        while True:
            changed = self._changed()
            if not fresh:
                self._look()
            while fresh:
                core, key = fresh.popleft()
                ready = core.ready_call(key)
                if ready is not None:
                    return ready
            await changed.wait()

    def _look(self) -> None:
        marks: dict[Runtime, int] = {}
        for core in self._cores():
            queue = core.projections.queue
            mark = self._marks.get(core, 0)
            if queue.admitted > mark:
                self._fresh.extend((core, key) for key in queue.ready_after(mark))
            marks[core] = queue.admitted
        # Cores this process no longer runs are forgotten with their marks.
        self._marks = marks
