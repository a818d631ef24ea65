"""What the console's tests share: calls streamed into a runtime with a marker in their
arguments, provider ids that try to become markup, and a console to talk to."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    ToolDeclaration,
)
from inert.console import Console, ConsoleSettings
from inert.log import Log

SECRET = "MARKER-7f3c-never-on-a-page"
"""Part of every argument value the tests stream: no response of the console may hold it."""

OPERATOR = "operator:olga"
VIEWER = "viewer:vic"
OPERATOR_TOKEN = "olga-token-0123456789abcdef"
VIEWER_TOKEN = "vic-token-0123456789abcdef"
HOSTILE_CALL = '<script>alert("x")</script>'
HOSTILE_RESPONSE = '"><img src=x onerror=alert(1)>'
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

TOOLS = [
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
]


def settings(**options: object) -> ConsoleSettings:
    """A console's settings: olga an operator, vic not; both with a token."""
    defaults: dict[str, object] = {
        "tokens": {OPERATOR_TOKEN: OPERATOR, VIEWER_TOKEN: VIEWER},
        "operators": [OPERATOR],
        "control_wait": 5.0,
    }
    return ConsoleSettings(**(defaults | options))  # type: ignore[arg-type]


def key(
    call: str = "call_1", *, tenant: str = "acme", turn: str = "t1", response: str = "resp_1"
) -> CallKey:
    return CallKey(
        tenant=tenant, conversation="c1", turn=turn, response=response, item=call, call=call
    )


def opened(call: CallKey, tool: str = "get_weather") -> list[Event]:
    """A call opened with a first fragment of its arguments (the marker among them)."""
    data = f'{{"city": "{SECRET}'.encode()
    return [
        CallOpened(key=call, tool=tool, sequence=0),
        ArgumentsAppended(key=call, data=data, offset=0, first_sequence=1, last_sequence=1),
    ]


def response_ended(call: CallKey) -> list[Event]:
    """The end of the call's response: its calls may run from here on."""
    return [
        ResponseEnded(
            response=call.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=9),
        )
    ]


def finished(call: CallKey) -> list[Event]:
    """The rest of the call's arguments and its end event."""
    rest = b'"}'
    offset = len(f'{{"city": "{SECRET}'.encode())
    return [
        ArgumentsAppended(key=call, data=rest, offset=offset, first_sequence=2, last_sequence=2),
        CallEnded(key=call, terminal=TerminalRef(sequence=3)),
    ]


async def start(runtime: Runtime, *, tenant: str = "acme", turn: str = "t1") -> None:
    await runtime.start_turn(tenant=tenant, conversation="c1", turn=turn, principal="user:alice")


@asynccontextmanager
async def client_of(
    log: Log, token: str | None = OPERATOR_TOKEN, **options: object
) -> AsyncIterator[tuple[httpx.AsyncClient, Console]]:
    """An HTTP client of a console running on ``log`` in this Trio run (the ASGI app
    called directly, as a host that mounts it runs it), sending ``token`` where given."""
    console = Console(log, settings(**options))
    headers = {} if token is None else {"authorization": f"Bearer {token}"}
    transport = httpx.ASGITransport(app=console.app, client=("127.0.0.1", 50000))
    async with (
        console.running(),
        httpx.AsyncClient(
            transport=transport, base_url="http://console.test", headers=headers
        ) as client,
    ):
        yield client, console
