"""OpenTelemetry spans of turns and calls, made from the log as the runtime folds it live.

A turn span (continuing the caller's W3C context when the turn carried one); under it a span per
call, from its opening to its end (cancelled, failed, or its outcome reported), linked to the
trace contexts of the ingress events that drove it (at most ``max_links``); under the call,
spans for its validation, its wait for confirmation and its dispatch; a span for each operator
control. Times are the times the log recorded. Attributes are identities, tool names, states,
reasons, counts and sizes: never an argument value, never a raw ``tracestate``. A call's span
is named by its tool (``inert.call get_weather``) only where its turn offered that tool; any
other is ``inert.call``, its tool shown by length and digest (the name a model sends is its own
text, of any length).

Spans correlate and nothing else: they are made after the decisions, from the log, and never
while the log is replayed (the runtime feeds this only once it is live). One span is made
before its event: that of a turn started here with no caller's context (``open_turn``), so
that its own context is recorded with the turn. A turn is then one trace across restarts: a
call decided after a restart (by the process that replayed the log) gets its span, marked
resumed, under the context its turn's start recorded: the turn's own span, or the caller's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..actors._places import unoffered_tool
from ..events import (
    CONTROL_TYPES,
    OUTCOME_TYPES,
    ArgumentsAppended,
    CallAwaitingConfirmation,
    CallCancelled,
    CallCollecting,
    CallConfirmed,
    CallDispatched,
    CallEnded,
    CallFailed,
    CallKey,
    CallOpened,
    CallStopRequested,
    CallTerminalCandidate,
    CallValidated,
    EventRejected,
    ExecutionCompleted,
    ExecutionFailed,
    ExecutionOutcomeUnknown,
    ExecutionStopped,
    OperatorControl,
    RecordedEvent,
    TraceContext,
    TurnCancelled,
    TurnRef,
    TurnRetired,
    TurnStarted,
    TurnSuperseded,
)

DEFAULT_MAX_LINKS = 16
_PROPAGATOR = TraceContextTextMapPropagator()


def global_tracer_provider() -> trace.TracerProvider | None:
    """The tracer provider the application set for the process (OpenTelemetry's global one), or
    ``None`` where it set none: the API's stand-in sends spans nowhere, and making them would
    cost every call for nothing."""
    provider = trace.get_tracer_provider()
    return None if isinstance(provider, trace.ProxyTracerProvider) else provider


def current_trace() -> TraceContext | None:
    """The W3C context of the span current where this is called (OpenTelemetry's context), or
    ``None`` outside of any valid span."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    traceparent = carrier.get("traceparent")
    if traceparent is None:
        return None
    return TraceContext(traceparent=traceparent, tracestate=carrier.get("tracestate") or None)


def _ns(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def _remote(context: TraceContext | None) -> SpanContext | None:
    """The caller's span context of a W3C header pair (the parent id only; the tracestate is
    carried by OpenTelemetry's own context, never written as an attribute)."""
    if context is None:
        return None
    carrier = {"traceparent": context.traceparent}
    if context.tracestate:
        carrier["tracestate"] = context.tracestate
    span_context = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return span_context if span_context.is_valid else None


def _context_of(span: Span) -> TraceContext | None:
    """The W3C context of one of our spans (``None`` for a span of no valid context)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    traceparent = carrier.get("traceparent")
    if traceparent is None:
        return None
    return TraceContext(traceparent=traceparent, tracestate=carrier.get("tracestate"))


def _key_attributes(key: CallKey) -> dict[str, str]:
    return {
        "inert.tenant": key.tenant,
        "inert.conversation": key.conversation,
        "inert.turn": key.turn,
        "inert.response": key.response,
        "inert.item": key.item,
        "gen_ai.tool.call.id": key.call,
    }


class CallSpans:
    """Turns and calls as spans, from the recorded events of a live runtime.

    ``offered`` gives the names of the tools a turn offered (empty for a turn not known): a
    call's span is named by its tool only where its turn offered it. Without it no tool is
    known to be offered.
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        max_links: int = DEFAULT_MAX_LINKS,
        offered: Callable[[TurnRef], Collection[str]] | None = None,
        digest_key: Callable[[TurnRef], bytes] | None = None,
    ) -> None:
        self._tracer = tracer
        self._max_links = max_links
        self._offered = offered
        self._digest_key = digest_key
        self._turns: dict[TurnRef, Span] = {}
        # Turns started here whose span was made before their start was recorded.
        self._opening: dict[TurnRef, Span] = {}
        self._calls: dict[CallKey, Span] = {}
        self._phases: dict[CallKey, tuple[str, Span]] = {}
        self._links: dict[CallKey, list[SpanContext]] = {}
        self._controls: dict[int, Span] = {}
        self._trace_problems: dict[TurnRef, str] = {}
        self._affected: dict[int, list[CallKey]] = {}
        # What replay before going live leaves for the calls still open (see ``remember``).
        self._replayed_turns: dict[TurnRef, SpanContext] = {}
        self._replayed_calls: dict[CallKey, str] = {}

    def context_of(self, key: CallKey) -> TraceContext | None:
        """The W3C context of a call's span, for the executor to continue its trace."""
        span = self._calls.get(key)
        return None if span is None else _context_of(span)

    def open_turn(self, turn: TurnRef, at: datetime) -> TraceContext | None:
        """Start the span of a turn about to be started here without a caller's context, and
        give its context, to be recorded with the turn's start: the calls of the turn resumed
        after a restart find the trace there (``None``: the tracer makes no valid span)."""
        span = self._tracer.start_span("inert.turn", start_time=_ns(at))
        context = _context_of(span)
        if context is None:
            span.end(end_time=_ns(at))
            return None
        self._opening[turn] = span
        return context

    def abandon_turn(self, turn: TurnRef, at: datetime) -> None:
        """End the span ``open_turn`` made for a turn whose start was not recorded."""
        span = self._opening.pop(turn, None)
        if span is not None:
            span.set_attribute("inert.turn.ended", "not started")
            span.end(end_time=_ns(at))

    def remember_turn(self, turn: TurnRef, context: TraceContext | None) -> None:
        """Keep the trace a turn started in, for its calls still open when the runtime goes
        live (read from the replayed records, or from the log after a snapshot)."""
        remote = _remote(context)
        if remote is not None:
            self._replayed_turns[turn] = remote

    def remember_call(self, key: CallKey, tool: str) -> None:
        """Keep the tool of a call that may still be open when the runtime goes live."""
        self._replayed_calls[key] = tool

    def remember(self, recorded: RecordedEvent) -> None:
        """Keep, from a record replayed before the runtime is live (no span is made of it),
        what a call still open then needs to get its span when its next decision comes: its
        turn's trace and its tool."""
        event = recorded.event
        match event:
            case TurnStarted(turn=turn):
                self.remember_turn(turn, recorded.trace)
            case TurnRetired(turn=turn):
                self._replayed_turns.pop(turn, None)
                for key in [key for key in self._replayed_calls if key.turn_ref == turn]:
                    del self._replayed_calls[key]
            case CallCollecting(key=key, tool=tool):
                self.remember_call(key, tool)
            case (
                CallCancelled(key=key)
                | CallFailed(key=key)
                | ExecutionCompleted(key=key)
                | ExecutionFailed(key=key)
                | ExecutionStopped(key=key)
                | ExecutionOutcomeUnknown(key=key)
            ):
                self._replayed_calls.pop(key, None)

    def apply(self, recorded: RecordedEvent) -> None:
        """Make, extend or end the spans this recorded event concerns."""
        event, at = recorded.event, _ns(recorded.recorded_at)
        match event:
            case TurnStarted(turn=turn, principal=principal):
                self._start_turn(turn, principal, recorded.trace, at)
            case TurnCancelled(turn=turn) | TurnSuperseded(turn=turn):
                span = self._turns.pop(turn, None)
                if span is not None:
                    span.set_attribute("inert.turn.ended", event.TAG)
                    span.end(end_time=at)
            case TurnRetired(turn=turn):
                self._retired(turn, at)
            case EventRejected(key=key) if key not in self._calls:
                # Links gathered for a call that never opened (a made-up identity, a call of a
                # retired turn) would otherwise wait for good for a span to go to.
                self._links.pop(key, None)
            case CallOpened(key=key) | ArgumentsAppended(key=key) | CallEnded(key=key):
                self._link(key, recorded.trace)
            case CallCollecting(key=key, tool=tool):
                self._start_call(key, tool, at)
            case CallTerminalCandidate(key=key, fragments=fragments, size=size):
                call = self._calls.get(key)
                if call is not None:
                    call.set_attributes({"inert.fragments": fragments, "inert.bytes": size})
                self._phase(key, "inert.validation", at)
            case CallValidated(key=key, needs_confirmation=needs):
                self._end_phase(key, at, "validated")
                if needs:
                    self._phase(key, "inert.confirmation", at)
            case CallAwaitingConfirmation(key=key):
                if key not in self._phases:
                    self._phase(key, "inert.confirmation", at)
            case CallConfirmed(key=key):
                self._end_phase(key, at, "confirmed")
            case CallDispatched(key=key, executor=executor):
                self._end_phase(key, at, "dispatched")
                self._phase(key, "inert.dispatch", at, {"inert.executor": executor})
            case CallCancelled(key=key, reason=reason) | CallFailed(key=key, reason=reason):
                if event.cause in self._controls:
                    self._affected.setdefault(event.cause, []).append(key)
                self._end_phase(key, at, event.TAG)
                self._end_call(key, at, event.TAG.removeprefix("decision."), reason.value)
            case CallStopRequested(key=key, reason=reason):
                call = self._calls.get(key)
                if call is not None:
                    call.add_event(
                        "inert.stop_requested", {"inert.reason": reason.value}, timestamp=at
                    )
            case _ if isinstance(event, OUTCOME_TYPES):
                key = event.key
                self._end_phase(key, at, event.TAG)
                self._end_call(key, at, "dispatched", None, event.TAG.removeprefix("outcome."))
            case _ if isinstance(event, CONTROL_TYPES):
                self._control(event, recorded.position, at)

    def _retired(self, turn: TurnRef, at: int) -> None:
        """A retired turn's span ends (an active turn's lasts until then); nothing of its calls
        is kept. Only calls with an open span or links are held, so the scan stays small."""
        span = self._turns.pop(turn, None)
        if span is not None:
            span.set_attribute("inert.turn.ended", TurnRetired.TAG)
            span.end(end_time=at)
        for key in [key for key in {**self._links, **self._calls} if key.turn_ref == turn]:
            self._end_phase(key, at, "the turn was retired")
            self._end_call(key, at, "retired", None)
        self._trace_problems.pop(turn, None)
        self._replayed_turns.pop(turn, None)
        for key in [key for key in self._replayed_calls if key.turn_ref == turn]:
            del self._replayed_calls[key]

    def note_trace_problem(self, turn: TurnRef, problem: str) -> None:
        """What was wrong with the headers a turn came with: its span will say so."""
        self._trace_problems[turn] = problem

    def end_control(self, position: int, at: datetime) -> None:
        """End the span of the control at ``position``, naming the calls it ended (the runtime
        calls this once the actors have answered the control)."""
        span = self._controls.pop(position, None)
        affected = self._affected.pop(position, [])
        if span is None:
            return
        span.set_attribute("inert.affected_calls", [key.stream for key in affected])
        span.end(end_time=_ns(at))

    def close(self, at: datetime) -> None:
        """End the spans still open when the runtime stops, saying so."""
        moment = _ns(at)
        for position in list(self._controls):
            self.end_control(position, at)
        for key in list(self._phases):
            self._end_phase(key, moment, "open when the runtime stopped")
        for span in [*self._calls.values(), *self._turns.values(), *self._opening.values()]:
            span.set_attribute("inert.open_at_stop", True)
            span.end(end_time=moment)
        self._calls.clear()
        self._turns.clear()
        self._opening.clear()

    def _start_turn(
        self, turn: TurnRef, principal: str, context: TraceContext | None, at: int
    ) -> None:
        remote = _remote(context)
        parent = trace.set_span_in_context(trace.NonRecordingSpan(remote)) if remote else None
        attributes = {
            "inert.tenant": turn.tenant,
            "inert.conversation": turn.conversation,
            "inert.turn": turn.turn,
            "enduser.id": principal,
        }
        problem = self._trace_problems.pop(turn, None)
        if problem is not None:
            attributes["inert.trace.refused"] = problem
        opened = self._opening.pop(turn, None)
        if opened is not None:
            # Its context is the one recorded: it is the turn's span, not a parent of it.
            opened.set_attributes(attributes)
            self._turns[turn] = opened
            return
        self._turns[turn] = self._tracer.start_span(
            "inert.turn", context=parent, start_time=at, attributes=attributes
        )

    def _link(self, key: CallKey, context: TraceContext | None) -> None:
        remote = _remote(context)
        if remote is None:
            return
        call = self._calls.get(key)
        links = self._links.setdefault(key, [])
        if len(links) >= self._max_links or remote in links:
            return
        links.append(remote)
        if call is not None:
            call.add_link(remote)

    def _named(self, key: CallKey, tool: str) -> tuple[str, str]:
        """The name of a call's span and the tool it shows: the tool's name only where the
        call's turn offered it."""
        if self._offered is not None and tool in self._offered(key.turn_ref):
            return f"inert.call {tool}", tool
        key_of_turn = b"" if self._digest_key is None else self._digest_key(key.turn_ref)
        return "inert.call", unoffered_tool(tool, key_of_turn)

    def _start_call(self, key: CallKey, tool: str, at: int) -> None:
        turn = self._turns.get(key.turn_ref)
        parent = trace.set_span_in_context(turn) if turn is not None else None
        name, shown = self._named(key, tool)
        self._calls[key] = self._tracer.start_span(
            name,
            context=parent,
            start_time=at,
            links=[Link(context) for context in self._links.get(key, [])],
            attributes={**_key_attributes(key), "gen_ai.tool.name": shown},
        )

    def _phase(
        self, key: CallKey, name: str, at: int, attributes: dict[str, str] | None = None
    ) -> None:
        call = self._calls.get(key) or self._resumed_call(key, at)
        if call is None:
            return
        self._end_phase(key, at, "superseded by " + name)
        span = self._tracer.start_span(
            name,
            context=trace.set_span_in_context(call),
            start_time=at,
            attributes=attributes or {},
        )
        self._phases[key] = (name, span)

    def _resumed_call(self, key: CallKey, at: int) -> Span | None:
        """The span of a call opened before this runtime went live (by the process before a
        restart), made at its first decision since, in its turn's trace."""
        tool = self._replayed_calls.pop(key, None)
        if tool is None:
            return None
        turn = self._turns.get(key.turn_ref)
        remote = self._replayed_turns.get(key.turn_ref)
        if turn is not None:
            parent = trace.set_span_in_context(turn)
        elif remote is not None:
            parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
        else:
            parent = None
        name, shown = self._named(key, tool)
        span = self._calls[key] = self._tracer.start_span(
            name,
            context=parent,
            start_time=at,
            attributes={
                **_key_attributes(key),
                "gen_ai.tool.name": shown,
                "inert.call.resumed": True,
            },
        )
        return span

    def _end_phase(self, key: CallKey, at: int, result: str) -> None:
        phase = self._phases.pop(key, None)
        if phase is not None:
            _, span = phase
            span.set_attribute("inert.result", result)
            span.end(end_time=at)

    def _end_call(
        self, key: CallKey, at: int, state: str, reason: str | None, outcome: str | None = None
    ) -> None:
        if key not in self._calls:
            # A call whose end is the first decision since a restart: cancelled as its stream
            # was lost, or its outcome reported (unknown, where its executor's process died).
            self._resumed_call(key, at)
        call = self._calls.pop(key, None)
        self._links.pop(key, None)
        if call is None:
            return
        call.set_attribute("inert.call.state", state)
        if reason is not None:
            call.set_attribute("inert.terminal_reason", reason)
        if outcome is not None:
            call.set_attribute("inert.outcome", outcome)
        call.end(end_time=at)

    def _control(
        self,
        event: OperatorControl,
        position: int,
        at: int,
    ) -> None:
        attributes = {
            "inert.control": event.TAG,
            "inert.operator": event.operator,
            "inert.reason": event.reason,
        }
        for name in ("tenant", "tool", "response"):
            value = getattr(event, name, None)
            if isinstance(value, str):
                attributes[f"inert.{name}"] = value
        self._controls[position] = self._tracer.start_span(
            "inert.control", start_time=at, attributes=attributes
        )
