"""Operator controls: an emergency stop, a quarantine, a disabled tool win over every call not yet
dispatched, are refused to anyone but an operator, survive a restart, and are audited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from adapter_support import FIXTURES
from builders import call_key

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    ConfirmationRefused,
    Event,
    Phase,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    StatusCue,
    TerminalRef,
    ToolDeclaration,
    TurnRef,
    ValidationResult,
    open_runtime,
)
from inert.actors import ValidationRequested
from inert.adapters import AnthropicAdapter

OPERATOR = "operator:olga"
PRINCIPAL = "user:alice"
TOOLS = [
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
]


def key(
    turn: str = "t1", tenant: str = "acme", call: str = "call_1", response: str = "resp_1"
) -> CallKey:
    return call_key(call, turn=turn, tenant=tenant, response=response)


def opened(call: CallKey, tool: str = "get_weather") -> list[Event]:
    return [
        CallOpened(key=call, tool=tool, sequence=0),
        ArgumentsAppended(key=call, data=b'{"city": "Oslo"}', first_sequence=1, last_sequence=1),
    ]


def finished(call: CallKey) -> list[Event]:
    return [
        CallEnded(key=call, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=call.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


async def start(runtime: Runtime, turn: str = "t1", tenant: str = "acme") -> TurnRef:
    return await runtime.start_turn(
        tenant=tenant, conversation="c1", turn=turn, principal=PRINCIPAL
    )


async def never_runs(runtime: Runtime, call: CallKey) -> None:
    """No executor can receive the call: it is offered to none, and a claim is refused."""
    assert call not in runtime.projections.queue.ready()
    with pytest.raises(ClaimRefused):
        await runtime.claim(call, executor="worker")


async def test_an_emergency_stop_while_collecting_ends_the_call_truthfully() -> None:
    """Stopped while its fragments arrive: cancelled tenant_stopped, the person told an operator
    stopped it and nothing was done, and its late end event cannot revive it."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await start(runtime)
        await runtime.feed(opened(key()))
        await runtime.stop_tenant("acme", operator=OPERATOR, reason="incident 42")
        await runtime.feed(finished(key()))
        await runtime.settle()
        row = runtime.projections.ledger.row(key())
        assert row is not None
        assert (row.state, row.terminal_reason) == ("cancelled", "tenant_stopped")
        assert runtime.projections.status.of(key()) is StatusCue.STOPPED
        await never_runs(runtime, key())


async def test_an_emergency_stop_while_the_validator_runs_wins() -> None:
    """The stop arrives while the call's validation is still running: the answer, when it
    comes, changes nothing, and the call never runs."""
    gate, started = trio.Event(), trio.Event()

    async def slow_check(_: ValidationRequested) -> ValidationResult:
        started.set()
        await gate.wait()
        return ValidationResult()

    async with open_runtime(
        log="memory://", tools=TOOLS, check=slow_check, operators=[OPERATOR]
    ) as runtime:
        await start(runtime)
        await runtime.feed(opened(key()) + finished(key()))
        await started.wait()
        assert runtime.phase(key()) is Phase.TERMINAL_CANDIDATE
        await runtime.stop_tenant("acme", operator=OPERATOR, reason="incident 42")
        gate.set()
        await runtime.settle()
        assert runtime.phase(key()) is Phase.CANCELLED
        assert runtime.projections.status.of(key()) is StatusCue.STOPPED
        await never_runs(runtime, key())


async def test_an_emergency_stop_while_awaiting_confirmation_wins_and_resume_starts_afresh() -> (
    None
):
    """Stopped while it waits for the person: a confirmation after the stop is refused; once the
    tenant is resumed, a new turn's call (a fresh identity) runs, the stopped one stays ended."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await start(runtime)
        await runtime.feed(opened(key(), "send_email") + finished(key()))
        await runtime.settle()
        pending = await runtime.pending_confirmation(key())
        assert pending is not None
        await runtime.stop_tenant("acme", operator=OPERATOR, reason="incident 42")
        with pytest.raises(ConfirmationRefused):
            await runtime.confirm(
                key(), principal=PRINCIPAL, arguments_digest=pending.arguments_digest
            )
        await runtime.resume_tenant("acme", operator=OPERATOR, reason="incident 42 closed")
        await runtime.settle()
        assert runtime.phase(key()) is Phase.CANCELLED
        await never_runs(runtime, key())
        await start(runtime, "t2")
        fresh = key("t2", response="resp_2")
        assert fresh != key()
        await runtime.feed(opened(fresh) + finished(fresh))
        await runtime.settle()
        assert (await runtime.claim(fresh, executor="worker")).key == fresh


async def test_a_quarantine_survives_a_restart_and_a_reconnecting_adapter(tmp_path: Path) -> None:
    """A quarantined response stays quarantined after a restart: the adapter feeding the same
    stream again (a reconnect) revives nothing, and no executor receives its call."""
    url = f"sqlite:///{tmp_path / 'quarantine.db'}"
    body = (FIXTURES / "anthropic" / "text-then-tool-use.sse").read_bytes()
    tools = [ToolDeclaration(name="get_weather")]
    async with open_runtime(log=url, create=True, tools=tools, operators=[OPERATOR]) as runtime:
        turn = await start(runtime)
        first_half = body[: body.index(b"content_block_stop", body.index(b"tool_use"))]
        adapter = AnthropicAdapter(turn)
        events = adapter.feed(first_half)
        await runtime.feed(events)
        [call] = {event.key for event in events if isinstance(event, CallOpened)}
        await runtime.quarantine_response(
            call.response, tenant="acme", operator=OPERATOR, reason="prompt injection suspected"
        )
        await runtime.settle()
    async with open_runtime(log=url, tools=tools, operators=[OPERATOR]) as runtime:
        again = AnthropicAdapter(turn)
        await runtime.feed(again.feed(body) + again.close())
        await runtime.settle()
        row = runtime.projections.ledger.row(call)
        assert row is not None
        assert (row.state, row.terminal_reason) == ("cancelled", "response_quarantined")
        await never_runs(runtime, call)


async def test_a_disabled_tool_stops_its_calls_and_enabling_it_revives_none() -> None:
    """Disabling a tool ends its calls in flight; enabling it lets new calls run, not old ones."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await start(runtime)
        await runtime.feed(opened(key()))
        await runtime.disable_tool("get_weather", operator=OPERATOR, reason="vendor outage")
        await runtime.enable_tool("get_weather", operator=OPERATOR, reason="vendor back")
        await runtime.feed(finished(key()))
        second = key(call="call_2", response="resp_2")
        await runtime.feed(opened(second) + finished(second))
        await runtime.settle()
        assert runtime.phase(key()) is Phase.CANCELLED
        assert runtime.phase(second) is Phase.VALIDATED


@pytest.mark.parametrize(
    ("operator", "reason", "message"),
    [
        (PRINCIPAL, "stop", "is not an operator"),
        ("", "stop", "is not an operator"),
        (OPERATOR, "", "needs a reason"),
    ],
    ids=["a tenant's principal", "nobody", "no reason"],
)
async def test_controls_need_an_operator_and_a_reason(
    operator: str, reason: str, message: str
) -> None:
    """A tenant's principal cannot act as an operator, and its attempt is kept among the audit's
    refusals; an operator must say why."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await start(runtime)
        await runtime.feed(opened(key()))
        with pytest.raises(RefusedError, match=message):
            await runtime.stop_tenant("acme", operator=operator, reason=reason)
        await runtime.settle()
        audit = runtime.projections.audit
        assert audit.entries() == []
        refused = [(entry.operator, entry.reason, entry.scope) for entry in audit.refusals()]
        assert refused == ([] if operator == OPERATOR else [(operator, reason, {"tenant": "acme"})])
        assert runtime.phase(key()) is Phase.COLLECTING


async def test_without_operators_configured_every_control_is_refused() -> None:
    """The operator role is granted, never assumed: a runtime with none refuses every control."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        with pytest.raises(RefusedError, match="is not an operator"):
            await runtime.stop_tenant("acme", operator=OPERATOR, reason="incident")


async def test_the_audit_names_each_control_and_the_calls_it_ended() -> None:
    """Each control with its operator, reason, scope and time, and the keys of the calls it
    ended; nothing of their arguments."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await start(runtime)
        await start(runtime, tenant="other")
        await runtime.feed(opened(key()) + opened(key(call="call_2")))
        await runtime.feed(opened(key(tenant="other")))
        await runtime.stop_tenant("acme", operator=OPERATOR, reason="incident 42")
        await runtime.settle()
        [entry] = runtime.projections.audit.entries()
        assert (entry.control, entry.operator, entry.reason, entry.scope) == (
            "operator.tenant_stopped",
            OPERATOR,
            "incident 42",
            {"tenant": "acme"},
        )
        assert sorted(entry.ended, key=str) == sorted([key(), key(call="call_2")], key=str)
        assert runtime.phase(key(tenant="other")) is Phase.COLLECTING
        assert "Oslo" not in json.dumps(runtime.projections.audit.snapshot())
