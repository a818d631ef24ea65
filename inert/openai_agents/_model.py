"""The agent's model, its streamed responses fed into the runtime as the SDK reads them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, ModelSettings
from agents.items import TResponseStreamEvent

from ..adapters import OpenAIResponsesAdapter
from ..events import CallKey, CallOpened, ConfigurationError, Event, TurnRef
from ..runtime import AsyncioRuntime, feed_stream


class Calls:
    """The calls of one turn the model's streams opened, by their call id: the SDK hands a tool
    the call id of the model's item, and inert names the call by its whole key."""

    def __init__(self) -> None:
        self._keys: dict[str, CallKey] = {}

    def heard(self, events: list[Event]) -> list[Event]:
        for event in events:
            if isinstance(event, CallOpened):
                # A later response that reuses a call id is the one the SDK is about to run.
                self._keys[event.key.call] = event.key
        return events

    def key(self, call_id: str) -> CallKey | None:
        return self._keys.get(call_id)


class _Recording:
    """The Responses adapter of one model call, noting the calls it opens."""

    def __init__(self, adapter: OpenAIResponsesAdapter, calls: Calls) -> None:
        self.turn = adapter.turn
        self._adapter = adapter
        self._calls = calls

    def feed(self, chunk: bytes | str) -> list[Event]:
        return self._calls.heard(self._adapter.feed(chunk))

    def feed_event(self, event: object) -> list[Event]:
        return self._calls.heard(self._adapter.feed_event(event))

    def close(self) -> list[Event]:
        return self._calls.heard(self._adapter.close())


class FedModel(Model):
    """An agent's model whose every streamed response is fed into the runtime, event by event,
    before the SDK reads the event: the SDK then runs the calls inert made ready, and no other."""

    def __init__(self, model: Model, runtime: AsyncioRuntime, turn: TurnRef, calls: Calls) -> None:
        self.model = model
        self._runtime = runtime
        self._turn = turn
        self._calls = calls

    def get_default_model_settings(self) -> ModelSettings | None:
        return self.model.get_default_model_settings()

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        raise ConfigurationError(
            "an agent of an inert turn answers through its stream: run it with"
            " Runner.run_streamed, which inert reads as it comes"
        )

    async def stream_response(
        self, *args: Any, **kwargs: Any
    ) -> AsyncIterator[TResponseStreamEvent]:
        adapter = _Recording(OpenAIResponsesAdapter(self._turn), self._calls)
        stream = self.model.stream_response(*args, **kwargs)
        async with feed_stream(self._runtime, stream, adapter=adapter) as events:
            async for event in events:
                yield event

    async def close(self) -> None:
        await self.model.close()
