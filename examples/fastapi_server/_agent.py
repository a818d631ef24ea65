"""The agent behind the FastAPI routes, on asyncio: the Trio example's agent, the loop aside.

inert's Trio runtime runs as a guest of the asyncio loop (``open_asyncio_runtime``), and the
agent talks to it through the asyncio facade, whose operations are the runtime's own. A chat
starts a turn and an asyncio task that streams the provider's answer, through its official SDK,
into the runtime with ``feed_stream``; one executor task hands each call inert declares ready
to ``execute``, which claims it, runs its tool and records the outcome; one watcher turns the
status projection into the turn's server-sent messages. The turns, the person's requests and
the cues are the Trio example's (``examples.agent_server.AgentCore``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from attrs import define, field

from examples.agent_server import TOOLS, AgentCore, Provider, Toolbox, TurnSession
from inert import AsyncioRuntime, feed_stream, open_asyncio_runtime

from ._sdk import SDK_ERRORS, Ask, failure, sdk_client


@define(kw_only=True)
class Agent(AgentCore[AsyncioRuntime]):
    """The example agent on asyncio: each turn's stream and each ready call run as a task of
    ``tasks``."""

    ask: Ask
    tasks: asyncio.TaskGroup = field(repr=False)
    _running_tasks: set[asyncio.Task[None]] = field(factory=set, init=False, repr=False)

    async def chat(
        self, message: str, *, principal: str, conversation: str | None = None
    ) -> TurnSession:
        """Start a turn and stream the provider's answer to ``message`` into it."""
        session = await self._begin(principal=principal, conversation=conversation)
        # The task takes its first step before any other request is read: it is inside its
        # try when a stop cancels it.
        session.stop_stream = self.spawn(self._stream(session, message)).cancel
        return session

    async def _stream(self, session: TurnSession, message: str) -> None:
        try:
            stream = await self.ask(message)
            # The agent feeds the runtime: it names each call for the routes first.
            adapter = self.provider.adapter(session.ref)
            await feed_stream(self, stream, adapter=adapter).run()
        except SDK_ERRORS as error:
            session.say("error", {"error": str(failure(self.provider, error))})
        finally:
            await self._streamed(session)

    async def execute_ready_calls(self) -> None:
        """Claim and run every call inert declares ready, each at most once."""
        async for ready in self.runtime.ready_calls():
            self.spawn(self._run(ready, self._running(ready)))

    def spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``work`` as a task of the agent, which ``stop`` cancels."""
        task = self.tasks.create_task(work)
        self._running_tasks.add(task)
        task.add_done_callback(self._running_tasks.discard)
        return task

    def stop(self) -> None:
        """Cancel every task of the agent: its streams, its executor and its watcher."""
        for task in self._running_tasks:
            task.cancel()


@asynccontextmanager
async def open_agent(
    provider: Provider, *, log: str = "memory://", toolbox: Toolbox | None = None
) -> AsyncIterator[Agent]:
    """An agent on a new runtime over ``log``, its executor and watcher running until the block
    ends."""
    async with (
        open_asyncio_runtime(log=log, create=True, tools=TOOLS) as runtime,
        sdk_client(provider, TOOLS) as ask,
        asyncio.TaskGroup() as tasks,
    ):
        agent = Agent(
            runtime=runtime,
            provider=provider,
            toolbox=toolbox or Toolbox(),
            ask=ask,
            tasks=tasks,
        )
        agent.spawn(agent.execute_ready_calls())
        agent.spawn(agent.watch())
        yield agent
        agent.stop()
