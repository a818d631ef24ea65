"""Trace context headers are untrusted input: parsed strictly, never raised on, never ordering."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    TraceContext,
    open_runtime,
)
from inert.log import MemoryLog, MemoryStore
from inert.testing.contracts import TickingClock
from inert.tracing import IncomingTrace, read_trace_headers

VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_a_valid_version_00_header_is_kept_as_it_came() -> None:
    """The exact version 00 form is continued, opaque."""
    assert read_trace_headers(VALID, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE") == IncomingTrace(
        TraceContext(traceparent=VALID, tracestate="rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
    )


def test_no_header_starts_a_new_trace_without_a_problem() -> None:
    """Absent headers are no problem: there is simply nothing to continue."""
    assert read_trace_headers(None) == IncomingTrace(None)


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "exact form"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "exact form"),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "all-zero trace id"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "all-zero parent id"),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7", "version this reader"),
        ("4bf92f3577b34da6a3ce929d0e0e4736", "version this reader"),
        ("", "version this reader"),
        ("00-" + "a" * 600, "longer than any version"),
    ],
    ids=[
        "upper case",
        "fields after version 00",
        "zero trace id",
        "zero parent id",
        "version ff",
        "short future version",
        "a bare id",
        "empty",
        "oversized",
    ],
)
def test_an_invalid_traceparent_starts_a_new_trace_and_says_why(header: str, problem: str) -> None:
    """A refused header is no context and a recorded problem, not an exception."""
    result = read_trace_headers(header, "rojo=1")
    assert result.context is None
    assert result.problem is not None
    assert problem in result.problem


def test_a_future_version_is_read_for_its_known_fields() -> None:
    """A higher version with more fields after the flags is continued, as the spec asks."""
    future = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes-next"
    assert read_trace_headers(future).context == TraceContext(traceparent=future)


@pytest.mark.parametrize(
    "tracestate",
    [
        "no equals sign",
        "UPPER=1",
        "a=1,a=2",
        "a=" + "v" * 300,
        ",".join(f"k{n}=v" for n in range(33)),
    ],
    ids=["no equals", "upper-case key", "repeated key", "value too long", "33 members"],
)
def test_a_tracestate_outside_the_grammar_is_dropped_whole(tracestate: str) -> None:
    """The trace continues without the state, and the drop is recorded."""
    result = read_trace_headers(VALID, tracestate)
    assert result.context == TraceContext(traceparent=VALID)
    assert result.problem is not None
    assert result.problem.startswith("tracestate dropped")


def test_an_oversized_tracestate_loses_its_long_members_first() -> None:
    """Past 512 bytes, members over 128 characters go first, then members from the end."""
    long = "big=" + "x" * 200
    members = [f"k{n}=" + "v" * 40 for n in range(11)]
    result = read_trace_headers(VALID, ",".join([members[0], long, *members[1:]]))
    assert result.context is not None
    assert result.context.tracestate is not None
    kept = result.context.tracestate.split(",")
    assert long not in kept
    assert len(result.context.tracestate) <= 512
    assert kept == members[: len(kept)]
    assert result.problem == "tracestate trimmed to 512 bytes"


@settings(max_examples=1000, deadline=None)
@given(traceparent=st.none() | st.text() | st.binary(), tracestate=st.none() | st.text())
def test_no_header_value_raises(traceparent: object, tracestate: object) -> None:
    """A thousand malformed, random or hostile values: each is kept, trimmed or refused."""
    result = read_trace_headers(traceparent, tracestate)
    assert isinstance(result, IncomingTrace)
    if result.context is not None:
        assert result.context.traceparent == traceparent


KEY = CallKey(
    tenant="acme", conversation="c1", turn="t1", response="resp_1", item="fc_1", call="call_1"
)
EVENTS = [
    CallOpened(key=KEY, tool="get_weather", sequence=0),
    ArgumentsAppended(key=KEY, data=b'{"city": "Oslo"}', first_sequence=1, last_sequence=1),
    CallEnded(key=KEY, terminal=TerminalRef(sequence=2)),
    ResponseEnded(
        response=KEY.response_ref,
        reason=ResponseEndReason.COMPLETED,
        terminal=TerminalRef(sequence=3),
    ),
]


async def decisions_under(headers: list[tuple[object, object]]) -> tuple[str, object]:
    """Feed the same events, each under its own headers; the digest and the call's phase.
    The log's clock starts at the same instant in every run: the digest names the time until
    which the call is ready, and every run's log has the same secret: the digest names the
    arguments digest, keyed by the log."""
    log = MemoryLog(MemoryStore(secret=b"s" * 32), clock=TickingClock())
    async with open_runtime(log=log, tools=[ToolDeclaration(name="get_weather")]) as runtime:
        await runtime.start_turn(tenant="acme", conversation="c1", turn="t1", principal="alice")
        for event, (traceparent, tracestate) in zip(EVENTS, headers, strict=True):
            trace = read_trace_headers(traceparent, tracestate).context
            await runtime.feed([event], trace=trace)
            # Settled after each event, so that the log's order, which the digest names, is the
            # same in every run: Trio schedules the actors in no fixed order.
            await runtime.settle()
        return runtime.digest(), runtime.phase(KEY)


hostile = st.sampled_from(
    [None, VALID, "00-" + "f" * 52, "ff-" + "0" * 52, "\x00" * 55, "x" * 5000]
)


@settings(max_examples=30, deadline=None)
@given(
    headers=st.lists(
        st.tuples(hostile | st.text(max_size=60), st.none() | st.text(max_size=80)),
        min_size=4,
        max_size=4,
    )
)
async def test_trace_headers_never_change_a_decision(headers: list[tuple[object, object]]) -> None:
    """The same stream under absent, valid, random, forged, oversized or hostile headers gives
    the same decisions and the same state digest: trace context never orders anything."""
    without = await decisions_under([(None, None)] * 4)
    assert await decisions_under(headers) == without
