"""What the console's tests share: calls streamed into a runtime with a marker in their
arguments, provider ids that try to become markup, and a console to talk to."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import cast

import httpx
import trio
from hypercorn.config import Config
from hypercorn.trio import serve as hypercorn_serve
from hypercorn.typing import Framework
from starlette.types import ASGIApp

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    Phase,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
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


async def serve(
    app: ASGIApp, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``app`` with Hypercorn's Trio worker on a free port of 127.0.0.1 until cancelled;
    starts with its base URL."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 0.5
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(hypercorn_serve, cast(Framework, app), config)
        )
        task_status.started(binds[0])


class ConsoleLab:
    """A runtime on an SQLite log and a console served over the same log (opened by its URL,
    as a console beside a runtime process opens it), in a Trio run of their own thread, for a
    test that drives a browser from its own thread."""

    def __init__(self, folder: Path) -> None:
        self.log_url = f"sqlite:///{folder / 'console.db'}"
        self.url = ""
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="console-lab", daemon=True)
        self._runtime: Runtime | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None

    def __enter__(self) -> ConsoleLab:
        self._thread.start()
        if not self._ready.wait(30) or self._failed is not None:
            raise RuntimeError("the console lab did not start") from self._failed
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        assert self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(30)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as error:
            self._failed = error
            self._ready.set()

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with open_runtime(
            log=self.log_url, create=True, tools=TOOLS, operators=[OPERATOR]
        ) as runtime:
            self._runtime = runtime
            console = Console(self.log_url, settings())
            async with console.running(), trio.open_nursery() as nursery:
                self.url = await nursery.start(serve, console.app)
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

    def feed(self, events: list[Event], *, start_turn: tuple[str, str] | None = None) -> None:
        """Feed the runtime (starting the turn of ``(tenant, turn)`` first, where given)."""
        runtime, token = self._runtime, self._token
        assert runtime is not None
        assert token is not None

        async def feeding() -> None:
            if start_turn is not None:
                await start(runtime, tenant=start_turn[0], turn=start_turn[1])
            await runtime.feed(events)
            await runtime.settle()

        trio.from_thread.run(feeding, trio_token=token)

    def phase(self, call: CallKey) -> Phase:
        assert self._runtime is not None
        return self._runtime.phase(call)
