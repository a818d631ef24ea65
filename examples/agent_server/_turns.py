"""What an example agent does whatever loop it runs on: the turns it follows for their people,
the person's requests, running a ready call's tool, and the status cues.

The Trio example (:mod:`._agent`) and its asyncio twin (``examples.fastapi_server``) each add
how they stream the provider's response into the runtime and where their tasks run; the rest
is here, over either runtime, the Trio ``Runtime`` or the ``AsyncioRuntime`` facade, which
share their operations. It waits with AnyIO, which runs on both loops.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import anyio
from attrs import define, field

from inert import (
    AsyncioRuntime,
    CallKey,
    CallOpened,
    ClaimRefused,
    Dispatch,
    Event,
    InertError,
    ReadyCall,
    Runtime,
    StatusCue,
    ToolDeclaration,
    TraceContext,
    TurnRef,
)
from inert.events import CancelReason

from ._providers import Provider
from ._tools import TOOLS, Toolbox

TENANT = "demo"
EXECUTOR = "example-agent-server"
MAX_SESSIONS = 1_000
"""Turns whose messages the server keeps; the oldest finished ones are dropped past it."""

FINAL_CUES = frozenset(
    {
        StatusCue.DONE,
        StatusCue.ACTION_FAILED,
        StatusCue.UNKNOWN,
        StatusCue.CANCELLED,
        StatusCue.DUPLICATE,
        StatusCue.STOPPED,
        StatusCue.RUN_STOPPED,
        StatusCue.FAILED,
    }
)
"""Cues after which nothing more happens to a call."""

STOPPED_BY_USER = "stopped_by_user"
REASONS = {CancelReason.CONFIRMATION_DENIED.value: STOPPED_BY_USER}
"""The reasons a cue gives in this server's words where inert's would mislead: inert records a
person's refusal of one call as a denied confirmation, and here the person's stop is the only
way to refuse one, whether the call waited for a confirmation or still streamed."""

R = TypeVar("R", Runtime, AsyncioRuntime)


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


def _shown(value: Any) -> Any:
    """Validated arguments (read-only mappings and tuples) as the JSON they came as."""
    if isinstance(value, Mapping):
        return {name: _shown(item) for name, item in value.items()}
    if isinstance(value, tuple):
        return [_shown(item) for item in value]
    return value


def _nothing_to_stop() -> None:
    """A turn's stream before its agent has started reading it."""


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
    stop_stream: Callable[[], object] = _nothing_to_stop
    """Stops reading the provider's stream: the agent sets it when it starts reading."""
    _grown: anyio.Event = field(factory=anyio.Event, init=False)

    @property
    def id(self) -> str:
        return self.ref.turn

    def say(self, kind: str, data: dict[str, Any]) -> None:
        self.messages.append((kind, data))
        self._grown.set()
        self._grown = anyio.Event()

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

    async def server_sent(self) -> AsyncIterator[bytes]:
        """Every message of the turn as a server-sent event, until its ``end``."""
        async for kind, data in self.follow():
            yield f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

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


@define(kw_only=True)
class AgentCore(Generic[R]):
    """An example agent on either loop: a runtime, a provider, the demo tools, and the turns it
    follows. Its loop's agent starts each turn's stream and runs the tasks."""

    runtime: R
    provider: Provider
    toolbox: Toolbox = field(factory=Toolbox)
    tools: Sequence[ToolDeclaration] = TOOLS
    sessions: dict[str, TurnSession] = field(factory=dict)
    _publishing: anyio.Lock = field(factory=anyio.Lock, init=False)

    # --- the person's requests ---

    async def _begin(self, *, principal: str, conversation: str | None) -> TurnSession:
        """Start a turn and follow it; its agent then streams the provider's answer into it."""
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
                earlier.stop_stream()
        session = self.sessions[turn] = TurnSession(ref=ref, principal=principal)
        self._forget_old_sessions()
        session.say("turn", {"turn": turn, "provider": self.provider.name})
        return session

    def session(self, turn: str, principal: str) -> TurnSession:
        session = self.sessions.get(turn)
        if session is None:
            raise NotFound(f"no turn {turn!r}")
        if session.principal != principal:
            raise Forbidden(f"turn {turn!r} belongs to another user")
        return session

    async def confirm(
        self,
        session: TurnSession,
        call: str,
        digest: str | None,
        arguments: Mapping[str, Any] | None = None,
    ) -> str:
        """Confirm a call waiting for its person, for the arguments with ``digest`` (default:
        those it waits with), or for the person's edit of them (``arguments``, validated as the
        model's were); the digest of the arguments confirmed, which are the ones that run."""
        key = session.key(call)
        pending = await self.runtime.pending_confirmation(key)
        if pending is None:
            cue = self.runtime.projections.status.of(key)
            shown = "unknown" if cue is None else cue.value
            raise Conflict(f"call {call!r} is not waiting for confirmation (it is {shown!r})")
        digest = digest or pending.arguments_digest
        await self.runtime.confirm(
            key, principal=session.principal, arguments_digest=digest, arguments=arguments
        )
        ready = self.runtime.ready_call(key)
        return digest if ready is None else ready.arguments_digest

    async def stop_call(self, session: TurnSession, call: str) -> None:
        """Refuse one call, in whatever state before it runs: it never runs."""
        key = session.key(call)
        await self.runtime.deny(key, principal=session.principal, reason="stopped by the user")

    async def stop_turn(self, session: TurnSession) -> None:
        """Cancel the turn (none of its calls not yet running will run) and stop its stream."""
        await self.runtime.cancel_turn(
            session.ref, principal=session.principal, reason="stopped by the user"
        )
        session.stop_stream()

    # --- the provider stream ---

    async def feed(self, events: Sequence[Event], *, trace: TraceContext | None = None) -> None:
        """The runtime's ``feed``, each call it opens named in its turn's session first."""
        # Named before inert has them, so that the executor and the watcher always find them
        # (a stop that overtakes its call's opening is refused by inert: nothing is lost).
        for event in events:
            if isinstance(event, CallOpened):
                session = self.sessions.get(event.key.turn)
                if session is not None:
                    session.opened(event.key, event.tool)
        await self.runtime.feed(events, trace=trace)

    async def _streamed(self, session: TurnSession) -> None:
        """The turn's stream is over, however it ended."""
        session.streaming = False
        await self._publish()

    # --- the executor ---

    def _running(self, ready: ReadyCall) -> TurnSession | None:
        """The session of a call about to run, which counts it until it is over."""
        session = self.sessions.get(ready.turn.turn)
        if session is not None:
            session.running += 1
        return session

    async def _run(self, ready: ReadyCall, session: TurnSession | None) -> None:
        """Claim a ready call, run its tool and record its outcome, through the runtime."""
        handle = ready.key.call if session is None else session.handles[ready.key][0]
        try:
            tool = partial(self._tool, session, handle)
            await self.runtime.execute(ready, tool, name=EXECUTOR)
        except ClaimRefused:
            # Stopped between becoming ready and the claim: it did not run.
            pass
        except Exception as error:
            # The runtime recorded the failure by the error's type alone; the person sees that.
            if session is not None:
                session.say("error", {"call": handle, "error": type(error).__name__})
        finally:
            if session is not None:
                session.running -= 1
                await self._publish()

    async def _tool(self, session: TurnSession | None, handle: str, dispatch: Dispatch) -> None:
        # The person reads "running" before the result.
        await self.runtime.settle()
        await self._publish()
        result = self.toolbox.run(dispatch)
        if session is not None:
            session.say("result", {"call": handle, "tool": dispatch.tool, "result": result})

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
                    # The person confirms what they read: these arguments, by this digest.
                    data["arguments"] = _shown(pending.arguments)
                    data["arguments_digest"] = pending.arguments_digest
                    data["expires_at"] = pending.expires_at.isoformat()
            row = runtime.projections.ledger.row(key)
            if cue in FINAL_CUES and row is not None and row.terminal_reason:
                data["reason"] = REASONS.get(row.terminal_reason, row.terminal_reason)
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
