"""The agent behind the HTTP routes: turns, the provider stream, the executor, the status cues.

Everything runs on the one Trio loop Hypercorn serves on, beside the inert runtime: a chat
starts a turn and a task that streams the provider's response through inert's adapter into the
runtime; one executor task claims each call inert declares ready and runs its tool; one watcher
follows the log and turns what the status projection says about each call into messages for
the turn's server-sent events. The person's confirm and stop requests go to the runtime, which
alone decides what may run. What does not depend on the loop is :mod:`._turns`'s, shared with
the asyncio twin.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import trio
from attrs import define, field

from inert import Event, ProtocolError, Runtime, open_runtime

from ._providers import Provider, ProviderError
from ._tools import TOOLS, Toolbox
from ._turns import AgentCore, TurnSession

READ_TIMEOUT = 120.0
"""Seconds the provider may stay silent mid-stream; inert cancels a call idle for 60 anyway."""
MAX_ERROR_SHOWN = 300
"""Bytes of a provider's error body shown to the person."""


@define(kw_only=True)
class Agent(AgentCore[Runtime]):
    """The example agent on Trio: streams each turn's response and runs each ready call in its
    nursery."""

    http: httpx.AsyncClient
    nursery: trio.Nursery = field(repr=False)

    async def chat(
        self, message: str, *, principal: str, conversation: str | None = None
    ) -> TurnSession:
        """Start a turn and stream the provider's answer to ``message`` into it."""
        session = await self._begin(principal=principal, conversation=conversation)
        scope = trio.CancelScope()
        session.stop_stream = scope.cancel
        self.nursery.start_soon(self._stream, session, scope, message)
        return session

    async def _stream(self, session: TurnSession, scope: trio.CancelScope, message: str) -> None:
        provider = self.provider
        adapter = provider.adapter(session.ref)
        with scope:
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
                        await self._feed(adapter.feed(chunk))
            except ProtocolError as refused:
                # Nothing more of this stream can be read: what came before it still counts.
                await self._feed(list(refused.events))
                session.say("error", {"error": f"{provider.name}: {refused}"})
            except httpx.HTTPError as error:
                failure = ProviderError(
                    f"the stream from {provider.name} broke: {type(error).__name__}"
                )
                session.say("error", {"error": str(failure)})
            except ProviderError as error:
                session.say("error", {"error": str(error)})
            # However the body ended, the adapter says what that means for the calls in it.
            await self._feed(adapter.close())
        await self._streamed(session)

    async def _feed(self, events: list[Event]) -> None:
        if events:
            await self.feed(events)

    async def execute_ready_calls(self) -> None:
        """Claim and run every call inert declares ready, each at most once."""
        async for ready in self.runtime.ready_calls():
            self.nursery.start_soon(self._run, ready, self._running(ready))


@asynccontextmanager
async def open_agent(
    provider: Provider, *, log: str = "memory://", toolbox: Toolbox | None = None
) -> AsyncIterator[Agent]:
    """An agent on a new runtime over ``log``, its executor and watcher running."""
    async with (
        open_runtime(log=log, create=True, tools=TOOLS) as runtime,
        httpx.AsyncClient(timeout=httpx.Timeout(30.0, read=READ_TIMEOUT)) as http,
        trio.open_nursery() as nursery,
    ):
        agent = Agent(
            runtime=runtime,
            provider=provider,
            toolbox=toolbox or Toolbox(),
            http=http,
            nursery=nursery,
        )
        nursery.start_soon(agent.execute_ready_calls)
        nursery.start_soon(agent.watch)
        yield agent
        nursery.cancel_scope.cancel()
