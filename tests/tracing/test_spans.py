"""Spans of a live runtime: a turn, its calls under it with links to the ingress contexts, their
validation, confirmation and dispatch, controls; no argument value anywhere; none on replay."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import trio
import trio.testing
from builders import call_key
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    TraceContext,
    open_runtime,
    trio_clock,
)
from inert.actors._places import unoffered_tool
from inert.events import TurnStarted
from inert.log import MemoryLog, NewEvent
from inert.tracing import read_trace_headers

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
STREAM = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"
SECRET = b'{"to": "secret-address@example.com"}'


def key(call: str) -> CallKey:
    return call_key(call, response=f"resp_{call}", item="fc")


def stream(call: CallKey, tool: str) -> list[Event]:
    return [
        CallOpened(key=call, tool=tool, sequence=0),
        ArgumentsAppended(key=call, data=SECRET, first_sequence=1, last_sequence=1),
        CallEnded(key=call, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=call.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


def provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider, exporter


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [span for span in spans if span.name == name]


async def test_a_turn_with_a_dispatch_and_a_cancellation_as_spans(tmp_path: Path) -> None:
    """One trace continuing the caller's: the turn under the caller's span, each call under the
    turn and linked to its stream's context, validation and dispatch under the dispatched call,
    the cancelled call ended with its reason; the executor gets the call's context; no value."""
    tracer_provider, exporter = provider()
    tools = [ToolDeclaration(name="send"), ToolDeclaration(name="other")]
    url = f"sqlite:///{tmp_path / 'spans.db'}"
    sent, dropped = key("call_1"), key("call_2")
    async with open_runtime(
        log=url, create=True, tools=tools, tracer_provider=tracer_provider
    ) as runtime:
        turn = await runtime.start_turn(
            tenant="acme",
            conversation="c1",
            turn="t1",
            principal="user:alice",
            trace=TraceContext(traceparent=CALLER),
        )
        await runtime.feed(stream(sent, "send"), trace=TraceContext(traceparent=STREAM))
        await runtime.feed(stream(dropped, "other")[:2])
        await runtime.settle()
        dispatch = await runtime.claim(sent, executor="worker-1")
        await runtime.complete(dispatch)
        await runtime.cancel_turn(turn, principal="user:alice")
        await runtime.settle()
    assert dispatch.trace is not None
    spans = exporter.get_finished_spans()
    [turn_span] = named(spans, "inert.turn")
    [call_span] = named(spans, "inert.call send")
    [other_span] = named(spans, "inert.call other")
    assert {span.context.trace_id for span in spans} == {0x4BF92F3577B34DA6A3CE929D0E0E4736}
    assert turn_span.parent is not None
    assert turn_span.parent.span_id == 0x00F067AA0BA902B7
    assert call_span.parent is not None
    assert call_span.parent.span_id == turn_span.context.span_id
    assert [link.context.span_id for link in call_span.links] == [0xB7AD6B7169203331]
    assert call_span.attributes is not None
    assert call_span.attributes["inert.call.state"] == "dispatched"
    assert call_span.attributes["inert.outcome"] == "completed"
    assert call_span.attributes["gen_ai.tool.name"] == "send"
    assert call_span.attributes["inert.bytes"] == len(SECRET)
    assert other_span.attributes is not None
    assert other_span.attributes["inert.terminal_reason"] == "turn_cancelled"
    children = {
        span.name
        for span in spans
        if span.parent and span.parent.span_id == call_span.context.span_id
    }
    assert children == {"inert.validation", "inert.dispatch"}
    assert f"{call_span.context.span_id:016x}" in dispatch.trace.traceparent
    flat = repr([(span.name, dict(span.attributes or {})) for span in spans])
    assert "secret-address" not in flat


async def test_no_span_is_made_while_the_log_is_replayed(tmp_path: Path) -> None:
    """Reopening a runtime on a log replays it without a span; only new events make spans."""
    url = f"sqlite:///{tmp_path / 'replay.db'}"
    tools = [ToolDeclaration(name="send")]
    async with open_runtime(log=url, create=True, tools=tools) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="alice")
        await runtime.feed(stream(key("call_1"), "send"))
        await runtime.settle()
    tracer_provider, exporter = provider()
    async with open_runtime(log=url, tools=tools, tracer_provider=tracer_provider) as runtime:
        await runtime.settle()
    assert exporter.get_finished_spans() == ()


@pytest.mark.parametrize("from_snapshot", [False, True], ids=["replayed", "from-a-snapshot"])
async def test_a_call_dispatched_after_a_restart_gets_its_spans_in_its_turn_s_trace(
    tmp_path: Path, from_snapshot: bool
) -> None:
    """A call validated before a restart and claimed after it gets a call span (marked
    resumed) and its dispatch span, in the trace its turn started in, and the executor gets
    the call's context, whether the restart replays the log or loads a snapshot."""
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    every = 5 if from_snapshot else None
    tools = [ToolDeclaration(name="send")]
    sent = key("call_1")
    async with open_runtime(log=url, create=True, tools=tools, snapshot_every=every) as runtime:
        await runtime.start_turn(
            tenant="acme",
            conversation="c1",
            turn="t1",
            principal="user:alice",
            trace=TraceContext(traceparent=CALLER),
        )
        await runtime.feed(stream(sent, "send"))
        await runtime.settle()
    tracer_provider, exporter = provider()
    async with open_runtime(
        log=url, tools=tools, tracer_provider=tracer_provider, snapshot_every=every
    ) as runtime:
        assert (runtime.restored_from is not None) == from_snapshot
        dispatch = await runtime.claim(sent, executor="worker-1")
        await runtime.complete(dispatch)
        await runtime.settle()
    spans = exporter.get_finished_spans()
    [call_span] = named(spans, "inert.call send")
    [dispatch_span] = named(spans, "inert.dispatch")
    assert call_span.attributes is not None
    assert call_span.attributes["inert.call.resumed"] is True
    assert call_span.attributes["inert.outcome"] == "completed"
    assert {span.context.trace_id for span in spans} == {0x4BF92F3577B34DA6A3CE929D0E0E4736}
    assert dispatch_span.parent is not None
    assert dispatch_span.parent.span_id == call_span.context.span_id
    assert dispatch.trace is not None
    assert f"{call_span.context.span_id:016x}" in dispatch.trace.traceparent


@pytest.mark.parametrize("from_snapshot", [False, True], ids=["replayed", "from-a-snapshot"])
async def test_a_turn_started_without_a_caller_is_one_trace_across_a_restart(
    tmp_path: Path, from_snapshot: bool
) -> None:
    """A turn started with no caller's context records its own span's context; after a restart
    its calls, the one dispatched and the one its lost stream cancels, get their spans under
    that turn span, in its trace, whether the restart replays the log or loads a snapshot."""
    url = f"sqlite:///{tmp_path / 'restart.db'}"
    every = 5 if from_snapshot else None
    tools = [ToolDeclaration(name="send")]
    sent, lost = key("call_1"), call_key("call_2", response="resp_lost", item="fc")
    before, exported_before = provider()
    async with open_runtime(
        log=url, create=True, tools=tools, tracer_provider=before, snapshot_every=every
    ) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="alice")
        await runtime.feed(stream(sent, "send"))
        await runtime.feed(stream(lost, "send")[:2])
        await runtime.settle()
        [started] = [
            recorded
            for recorded in await runtime.log.read_stream(sent.turn_ref.stream)
            if isinstance(recorded.event, TurnStarted)
        ]
    [turn_span] = named(exported_before.get_finished_spans(), "inert.turn")
    assert turn_span.parent is None
    assert started.trace is not None
    assert started.trace.traceparent.startswith(
        f"00-{turn_span.context.trace_id:032x}-{turn_span.context.span_id:016x}-"
    )
    after, exported_after = provider()
    async with open_runtime(
        log=url, tools=tools, tracer_provider=after, snapshot_every=every
    ) as runtime:
        assert (runtime.restored_from is not None) == from_snapshot
        dispatch = await runtime.claim(sent, executor="worker-1")
        await runtime.complete(dispatch)
        await runtime.settle()
    spans = exported_after.get_finished_spans()
    assert named(spans, "inert.turn") == []
    resumed = named(spans, "inert.call send")
    assert len(resumed) == 2
    for call_span in resumed:
        assert call_span.attributes is not None
        assert call_span.attributes["inert.call.resumed"] is True
        assert call_span.context.trace_id == turn_span.context.trace_id
        assert call_span.parent is not None
        assert call_span.parent.span_id == turn_span.context.span_id
    reasons = {span.attributes["inert.call.state"] for span in resumed if span.attributes}
    assert reasons == {"dispatched", "cancelled"}
    assert {span.context.trace_id for span in spans} == {turn_span.context.trace_id}


async def test_a_turn_refused_as_started_before_ends_the_span_made_for_it() -> None:
    """A second start of the same turn is refused; the span made for it ends saying so, and the
    turn's own span is the first start's."""
    tracer_provider, exporter = provider()
    async with open_runtime(
        log="memory://", tools=[ToolDeclaration(name="send")], tracer_provider=tracer_provider
    ) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="alice")
        with pytest.raises(RefusedError, match="was started before"):
            await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="alice")
    turns = named(exporter.get_finished_spans(), "inert.turn")
    ended = sorted(str((span.attributes or {}).get("inert.turn.ended")) for span in turns)
    assert ended == ["None", "not started"]


@pytest.mark.parametrize("rules", [7, 8])
async def test_a_tool_the_turn_did_not_offer_never_names_a_span(rules: int) -> None:
    """A call of a name the turn did not offer (under any rules) gets a span named
    ``inert.call``, its tool shown by length and digest; an offered tool names its span."""
    tracer_provider, exporter = provider()
    made_up = "CANARY-TOOL " * 50
    send = ToolDeclaration(name="send")
    log = MemoryLog(clock=trio_clock())
    turn = key("call_1").turn_ref
    started = TurnStarted(turn=turn, principal="alice", tools=(send.offered(),), rules=rules)
    await log.append([NewEvent(stream=turn.stream, event=started)])
    async with open_runtime(log=log, tools=[send], tracer_provider=tracer_provider) as runtime:
        await runtime.feed(stream(key("call_1"), made_up) + stream(key("call_2"), "send"))
        await runtime.settle()
    spans = exporter.get_finished_spans()
    assert all("CANARY" not in span.name for span in spans)
    assert all("CANARY" not in str(span.attributes) for span in spans)
    [unoffered] = named(spans, "inert.call")
    assert unoffered.attributes is not None
    assert unoffered.attributes["gen_ai.tool.name"] == unoffered_tool(made_up)
    assert unoffered.attributes["inert.terminal_reason"] == "unknown_tool"
    assert len(named(spans, "inert.call send")) == 1


async def test_a_control_span_names_its_operator_and_the_calls_it_ended() -> None:
    """An emergency stop is a span of its own, with the operator, the reason and the streams of
    the calls it ended; those calls' spans end with the stop's reason."""
    tracer_provider, exporter = provider()
    tools = [ToolDeclaration(name="send")]
    async with open_runtime(
        log="memory://", tools=tools, tracer_provider=tracer_provider, operators=["op:olga"]
    ) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="alice")
        await runtime.feed(stream(key("call_1"), "send")[:2])
        await runtime.stop_tenant("acme", operator="op:olga", reason="incident 7")
    spans = exporter.get_finished_spans()
    [control] = named(spans, "inert.control")
    assert control.attributes is not None
    assert control.attributes["inert.operator"] == "op:olga"
    assert control.attributes["inert.reason"] == "incident 7"
    assert list(control.attributes["inert.affected_calls"]) == [key("call_1").stream]  # type: ignore[arg-type]
    [call] = named(spans, "inert.call send")
    assert call.attributes is not None
    assert call.attributes["inert.terminal_reason"] == "tenant_stopped"


async def test_a_refused_header_starts_a_new_trace_that_says_why() -> None:
    """A turn started with headers the reader refused is the root of a new trace, and its span
    records what was wrong (never the header itself)."""
    tracer_provider, exporter = provider()
    async with open_runtime(
        log="memory://", tools=[ToolDeclaration(name="send")], tracer_provider=tracer_provider
    ) as runtime:
        await runtime.start_turn(
            tenant="acme",
            conversation="c1",
            turn="t1",
            principal="alice",
            trace=read_trace_headers("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        )
    [turn] = named(exporter.get_finished_spans(), "inert.turn")
    assert turn.parent is None
    assert turn.attributes is not None
    assert turn.attributes["inert.trace.refused"] == "traceparent refused: version ff is invalid"


async def test_a_retired_turn_ends_its_span_and_made_up_calls_keep_no_links(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An active turn's span ends when the turn is retired, and links fed for calls that never
    open (made-up identities) are dropped once those calls are rejected."""
    tracer_provider, exporter = provider()
    tools = [ToolDeclaration(name="send")]
    log = MemoryLog(clock=trio_clock())
    async with open_runtime(
        log=log, tools=tools, tracer_provider=tracer_provider, ledger_horizon=timedelta(hours=1)
    ) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="user:a")
        spans = runtime.spans
        assert spans is not None
        for index in range(20):
            made_up = CallKey(
                tenant="acme",
                conversation="c9",
                turn=f"never-{index}",
                response="r",
                item="fc",
                call="c",
            )
            await runtime.feed(
                [CallOpened(key=made_up, tool="send", sequence=0)],
                trace=TraceContext(traceparent=STREAM),
            )
        await runtime.settle()
        assert spans._links == {}
        await trio.sleep(2 * 3600)
        await runtime.settle()
        assert spans._turns == {}
        [turn] = named(exporter.get_finished_spans(), "inert.turn")
        assert turn.attributes is not None
        assert turn.attributes["inert.turn.ended"] == "process.turn_retired"
