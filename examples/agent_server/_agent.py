"""The agent behind the HTTP routes: turns, the provider stream, the executor, the status cues.

Everything runs on the one Trio loop Hypercorn serves on, beside the inert runtime: a chat
starts a turn and a task that streams the provider's response through inert's adapter into the
runtime; one executor task claims each call inert declares ready and runs its tool; one watcher
follows the log and turns what the status projection says about each call into messages for
the turn's server-sent events. The person's confirm and stop requests go to the runtime, which
alone decides what may run.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from attrs import define, field

from inert import (
    CallKey,
    CallOpened,
    ClaimRefused,
    Event,
    InertError,
    ReadyCall,
    Runtime,
    StatusCue,
    ToolDeclaration,
    TurnRef,
    open_runtime,
)

from ._providers import Provider, ProviderError
from ._tools import TOOLS, Toolbox

TENANT = "demo"
EXECUTOR = "example-agent-server"
READ_TIMEOUT = 120.0
"""Seconds the provider may stay silent mid-stream; inert cancels a call idle for 60 anyway."""
MAX_ERROR_SHOWN = 300
"""Bytes of a provider's error body shown to the person."""
MAX_SESSIONS = 1_000
"""Turns whose messages the server keeps; the oldest finished ones are dropped past it."""

FINAL_CUES = frozenset(
    {
        StatusCue.DONE,
        StatusCue.ACTION_FAILED,
        StatusCue.UNKNOWN,
        StatusCue.CANCELLED,
        StatusCue.STOPPED,
        StatusCue.FAILED,
    }
)
"""Cues after which nothing more happens to a call."""


class Refusal(InertError):
    """A request the server refuses; ``status`` is the HTTP status that says why."""

    status = 400


class Forbidden(Refusal):
    status = 403


class NotFound(Refusal):
    status = 404


class Conflict(Refusal):
    status = 409


class TooLarge(Refusal):
    status = 413


@define
class TurnSession:
    """One turn as the server follows it: its calls and the messages for its event stream."""

    ref: TurnRef
    principal: str
    calls: dict[str, CallKey] = field(factory=dict)
    """The calls by the name the routes use: the provider's call id (suffixed if it repeats)."""
    handles: dict[CallKey, tuple[str, str]] = field(factory=dict)
    """Each call's name in the routes and its tool."""
    cues: dict[CallKey, StatusCue] = field(factory=dict)
    messages: list[tuple[str, dict[str, Any]]] = field(factory=list)
    streaming: bool = True
    running: int = 0
    ended: bool = False
    scope: trio.CancelScope = field(factory=trio.CancelScope)
    _grown: trio.Event = field(factory=trio.Event, init=False)

    @property
    def id(self) -> str:
        return self.ref.turn

    def say(self, kind: str, data: dict[str, Any]) -> None:
        self.messages.append((kind, data))
        self._grown.set()
        self._grown = trio.Event()

    async def follow(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Every message of the turn, from the first, until its ``end``."""
        sent = 0
        while True:
            while sent < len(self.messages):
                message = self.messages[sent]
                sent += 1
                yield message
                if message[0] == "end":
                    return
            await self._grown.wait()

    def key(self, call: str) -> CallKey:
        key = self.calls.get(call)
        if key is None:
            raise NotFound(f"turn {self.id!r} has no call {call!r} (yet)")
        return key

    def opened(self, key: CallKey, tool: str) -> None:
        if key in self.handles:
            return
        handle = key.call
        while handle in self.calls:
            handle += "~"
        self.calls[handle] = key
        self.handles[key] = (handle, tool)


@define
class Agent:
    """The example agent: a runtime, a provider, the demo tools, and the turns it follows."""

    runtime: Runtime
    provider: Provider
    http: httpx.AsyncClient
    nursery: trio.Nursery
    toolbox: Toolbox = field(factory=Toolbox)
    tools: Sequence[ToolDeclaration] = TOOLS
    sessions: dict[str, TurnSession] = field(factory=dict)
    _publishing: trio.Lock = field(factory=trio.Lock, init=False)

    # --- the person's requests ---

    async def chat(
        self, message: str, *, principal: str, conversation: str | None = None
    ) -> TurnSession:
        """Start a turn and stream the provider's answer to ``message`` into it."""
        turn = "turn-" + secrets.token_hex(8)
        # A new turn supersedes the last one of its conversation: a person names only their own.
        ref = await self.runtime.start_turn(
            tenant=TENANT,
            conversation=f"{principal}/{conversation or turn}",
            turn=turn,
            principal=principal,
        )
        for earlier in self.sessions.values():
            if earlier.ref.conversation == ref.conversation:
                # Superseded: inert refuses whatever more its stream brings, so stop reading it.
                earlier.scope.cancel()
        session = self.sessions[turn] = TurnSession(ref=ref, principal=principal)
        self._forget_old_sessions()
        session.say("turn", {"turn": turn, "provider": self.provider.name})
        self.nursery.start_soon(self._stream, session, message)
        return session

    def session(self, turn: str, principal: str) -> TurnSession:
        session = self.sessions.get(turn)
        if session is None:
            raise NotFound(f"no turn {turn!r}")
        if session.principal != principal:
            raise Forbidden(f"turn {turn!r} belongs to another user")
        return session

    async def confirm(self, session: TurnSession, call: str, digest: str | None) -> str:
        """Confirm a call waiting for its person, for the arguments with ``digest`` (default:
        those it waits with); the digest confirmed."""
        key = session.key(call)
        pending = await self.runtime.pending_confirmation(key)
        if pending is None:
            cue = self.runtime.projections.status.of(key)
            shown = "unknown" if cue is None else cue.value
            raise Conflict(f"call {call!r} is not waiting for confirmation (it is {shown!r})")
        digest = digest or pending.arguments_digest
        await self.runtime.confirm(key, principal=session.principal, arguments_digest=digest)
        return digest

    async def stop_call(self, session: TurnSession, call: str) -> None:
        """Refuse one call, in whatever state before it runs: it never runs."""
        key = session.key(call)
        await self.runtime.deny(key, principal=session.principal, reason="stopped by the user")

    async def stop_turn(self, session: TurnSession) -> None:
        """Cancel the turn (none of its calls not yet running will run) and stop its stream."""
        await self.runtime.cancel_turn(
            session.ref, principal=session.principal, reason="stopped by the user"
        )
        session.scope.cancel()

    # --- the provider stream ---

    async def _stream(self, session: TurnSession, message: str) -> None:
        provider = self.provider
        adapter = provider.adapter(session.ref)
        with session.scope:
            try:
                async with self.http.stream(
                    "POST",
                    provider.url,
                    headers=dict(provider.headers),
                    json=provider.request(message, self.tools),
                ) as response:
                    if response.status_code != 200:
                        said = (await response.aread())[:MAX_ERROR_SHOWN]
                        raise ProviderError(
                            f"{provider.name} answered HTTP {response.status_code}, not a"
                            f" stream: {said.decode('utf-8', 'replace')}"
                        )
                    async for chunk in response.aiter_bytes():
                        await self._feed(session, adapter.feed(chunk))
            except httpx.HTTPError as error:
                failure = ProviderError(
                    f"the stream from {provider.name} broke: {type(error).__name__}"
                )
                session.say("error", {"error": str(failure)})
            except ProviderError as error:
                session.say("error", {"error": str(error)})
            # However the body ended, the adapter says what that means for the calls in it.
            await self._feed(session, adapter.close())
        session.streaming = False
        await self._publish()

    async def _feed(self, session: TurnSession, events: list[Event]) -> None:
        if not events:
            return
        # Named before inert has them, so that the executor and the watcher always find them
        # (a stop that overtakes its call's opening is refused by inert: nothing is lost).
        for event in events:
            if isinstance(event, CallOpened):
                session.opened(event.key, event.tool)
        await self.runtime.feed(events)

    # --- the executor ---

    async def execute_ready_calls(self) -> None:
        """Claim and run every call inert declares ready, each at most once."""
        async for ready in self.runtime.ready_calls():
            session = self.sessions.get(ready.turn.turn)
            if session is not None:
                session.running += 1
            self.nursery.start_soon(self._run, ready, session)

    async def _run(self, ready: ReadyCall, session: TurnSession | None) -> None:
        try:
            try:
                dispatch = await self.runtime.claim(ready, executor=EXECUTOR)
            except ClaimRefused:
                # Stopped between becoming ready and the claim: it must not run.
                return
            # The person reads "running" before the result.
            await self.runtime.settle()
            await self._publish()
            handle = ready.key.call if session is None else session.handles[ready.key][0]
            try:
                result = self.toolbox.run(dispatch)
            except Exception as error:
                await self.runtime.fail(dispatch, type(error).__name__)
                if session is not None:
                    session.say("error", {"call": handle, "error": type(error).__name__})
                return
            if session is not None:
                session.say("result", {"call": handle, "tool": dispatch.tool, "result": result})
            await self.runtime.complete(dispatch)
        finally:
            if session is not None:
                session.running -= 1
                await self._publish()

    # --- what the person sees ---

    async def watch(self) -> None:
        """Each time the runtime's views move on, publish the cues that changed."""
        async for _ in self.runtime.changes():
            await self._publish()

    async def _publish(self) -> None:
        async with self._publishing:
            for session in list(self.sessions.values()):
                if not session.ended:
                    await self._publish_turn(session)

    async def _publish_turn(self, session: TurnSession) -> None:
        runtime = self.runtime
        for key, (handle, tool) in list(session.handles.items()):
            cue = runtime.projections.status.of(key)
            if cue is None or cue == session.cues.get(key):
                continue
            session.cues[key] = cue
            data: dict[str, Any] = {"call": handle, "tool": tool, "cue": cue.value}
            if cue is StatusCue.NEEDS_CONFIRMATION:
                pending = await runtime.pending_confirmation(key)
                if pending is not None:
                    data["arguments_digest"] = pending.arguments_digest
                    data["expires_at"] = pending.expires_at.isoformat()
            row = runtime.projections.ledger.row(key)
            if cue in FINAL_CUES and row is not None and row.terminal_reason:
                data["reason"] = row.terminal_reason
            session.say("status", data)
        if (
            not session.streaming
            and not session.running
            and len(session.cues) == len(session.handles)
            and all(cue in FINAL_CUES for cue in session.cues.values())
        ):
            session.ended = True
            calls = {session.handles[key][0]: cue.value for key, cue in session.cues.items()}
            session.say("end", {"turn": session.id, "calls": calls})

    def _forget_old_sessions(self) -> None:
        ended = [turn for turn, session in self.sessions.items() if session.ended]
        for turn in ended[: max(0, len(self.sessions) - MAX_SESSIONS)]:
            del self.sessions[turn]


@asynccontextmanager
async def open_agent(
    provider: Provider, *, log: str = "memory://", toolbox: Toolbox | None = None
) -> AsyncIterator[Agent]:
    """An agent on a new runtime over ``log``, its executor and watcher running."""
    async with (
        open_runtime(log=log, tools=TOOLS) as runtime,
        httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=READ_TIMEOUT)) as http,
        trio.open_nursery() as nursery,
    ):
        agent = Agent(runtime, provider, http, nursery, toolbox or Toolbox())
        nursery.start_soon(agent.execute_ready_calls)
        nursery.start_soon(agent.watch)
        yield agent
        nursery.cancel_scope.cancel()
