"""``inert feed``: a recorded provider stream fed into a turn through its adapter."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
from attrs import frozen

from ..adapters import PROVIDERS, OpenAIResponsesAdapter, ProtocolError, StreamAdapter
from ..events import CallOpened, Event, RefusedError, ResponseEnded, TurnRef
from ..events._identity import key_part
from ..runtime import Runtime
from ..tracing import IncomingTrace, read_trace_headers
from ._common import Progress, runtime_on, settle_within
from ._execute import Recorder, execute_ready, execution_lines
from ._operators import turn_rows
from ._streams import StreamFile, UnreadableInput, read_stream, read_tools, stream_name
from ._tables import LEDGER_HEADER, Keys, ledger_cells, text_table

# --- feed ------------------------------------------------------------------------------------

FEED_BATCH = 512
"""Events appended to the log at a time while feeding a stream file."""


@frozen(kw_only=True)
class FeedRequest:
    log: str
    stream: Path
    provider: str
    tools: Path
    turn: TurnRef
    principal: str
    execute: bool
    as_json: bool
    traceparent: str | None = None
    tracestate: str | None = None


async def _open_turn(
    runtime: Runtime, request: FeedRequest, tools: Sequence[str], trace: IncomingTrace
) -> None:
    """Start the turn, or join it when an earlier feed started it (a reconnect)."""
    principal = runtime.turn_principal(request.turn)
    if principal is None:
        await runtime.start_turn(
            tenant=request.turn.tenant,
            conversation=request.turn.conversation,
            turn=request.turn.turn,
            principal=request.principal,
            tools=tools,
            trace=trace,
        )
    elif principal != request.principal:
        raise RefusedError(f"turn {request.turn.stream!r} belongs to another principal")


def _adapt(runtime: Runtime, request: FeedRequest, stream: StreamFile) -> list[Event]:
    """The stream file through its provider's adapter; a resumable stream of the turn that an
    earlier feed lost is resumed first, so that the file continues it."""
    adapter = _adapter(request, stream)
    events: list[Event] = []
    lost = {
        response: last
        for response, last in runtime.resumable_streams(request.turn).items()
        if last is not None
    }
    if lost and isinstance(adapter, OpenAIResponsesAdapter):
        if len(lost) > 1:
            names = ", ".join(sorted(response.response for response in lost))
            raise UnreadableInput(
                f"the turn has {len(lost)} lost streams ({names}): a continuation file cannot"
                " say which one it continues"
            )
        [(response, last)] = lost.items()
        events += adapter.resume(
            response.response, after_sequence=last, calls=runtime.resumable_calls(response)
        )
    return events + _read_all(adapter, request, stream)


def _adapter(request: FeedRequest, stream: StreamFile) -> StreamAdapter:
    # A stream that ends early leaves its calls collecting for a continuation where its
    # protocol can continue one (OpenAI Responses in background mode).
    factory = PROVIDERS[request.provider]
    return factory(request.turn, response=stream_name(request.provider, stream), resumable=True)


def _no_stream(request: FeedRequest, stream: StreamFile, why: str = "") -> UnreadableInput:
    # A wrong file or a wrong --provider: a turn started for it would stay empty.
    likely = _reads_as(request, stream)
    hint = "is --provider right?" if likely is None else f"it reads as --provider {likely}"
    said = f" ({why})" if why else ""
    return UnreadableInput(
        f"{request.stream} holds no event of a {request.provider} stream{said}: nothing was fed"
        f" ({hint})"
    )


class _NothingRead(UnreadableInput):
    """The adapter refused the stream before it read any event of it."""


def _read_all(adapter: StreamAdapter, request: FeedRequest, stream: StreamFile) -> list[Event]:
    """What the adapter makes of the whole stream file; a file of which it reads nothing is
    no stream of the provider's."""
    try:
        read = _read_through(adapter, request, stream)
    except _NothingRead as refused:
        raise _no_stream(request, stream, str(refused)) from None
    if not read:
        raise _no_stream(request, stream)
    return read


def _reads_as(request: FeedRequest, stream: StreamFile) -> str | None:
    """The first other provider whose adapter reads a call or a response's end in the file."""
    for provider in sorted(PROVIDERS):
        if provider == request.provider:
            continue
        other = attrs.evolve(request, provider=provider)
        try:
            events = _read_through(_adapter(other, stream), other, stream)
        except UnreadableInput:
            continue
        if any(isinstance(event, CallOpened | ResponseEnded) for event in events):
            return provider
    return None


def _read_through(adapter: StreamAdapter, request: FeedRequest, stream: StreamFile) -> list[Event]:
    """What the adapter makes of the stream file's content, to its end."""
    events: list[Event] = []
    try:
        if stream.raw is not None:
            events += adapter.feed(stream.raw)
        for event in stream.events:
            events += adapter.feed_event(event)
        events += adapter.close()
    except ProtocolError as refused:
        if not events and not refused.events:
            raise _NothingRead(refused.detail) from None
        raise UnreadableInput(
            f"{request.stream} is not a {request.provider} stream past its first events:"
            f" {refused}; nothing was fed"
        ) from None
    except (TypeError, ValueError) as error:
        raise UnreadableInput(
            f"{request.stream} is not a {request.provider} stream: {error}"
        ) from None
    return events


async def feed_command(request: FeedRequest) -> None:
    stream = read_stream(request.stream)
    declarations = read_tools(request.tools)
    # Before a log is opened (or created). A Responses file may continue a stream the log
    # holds as lost, which only its resumed adapter reads: it is judged once resumed.
    adapter = _adapter(request, stream)
    if not isinstance(adapter, OpenAIResponsesAdapter):
        _read_all(adapter, request, stream)
    # Feeding starts the turn: the log is created if need be.
    async with runtime_on(
        request.log, turn=request.turn, create=True, tools=declarations
    ) as runtime:
        await settle_within(runtime)
        events = _adapt(runtime, request, stream)
        incoming = read_trace_headers(request.traceparent, request.tracestate)
        if incoming.problem is not None:
            print(f"inert: {incoming.problem}; the stream starts a new trace", file=sys.stderr)
        trace = incoming.context
        names = [declaration.name for declaration in declarations]
        await _open_turn(runtime, request, names, incoming)
        progress = Progress("feed", len(events))
        try:
            for start in range(0, len(events), FEED_BATCH):
                await runtime.feed(events[start : start + FEED_BATCH], trace=trace)
                progress.advance(min(start + FEED_BATCH, len(events)))
        finally:
            progress.finish()
        await settle_within(runtime)
        results = (
            await execute_ready(runtime, Recorder(), turn=request.turn) if request.execute else []
        )
        rows = list(turn_rows(runtime, request.turn).values())
    if request.as_json:
        for row in rows:
            print(json.dumps(row.to_json(), ensure_ascii=False))
        return
    turn = request.turn
    print(
        f"fed {len(events)} events from {request.stream.name} ({request.provider}) into turn"
        f" {key_part(turn.tenant)}/{key_part(turn.conversation)}/{key_part(turn.turn)}:"
        f" {len(rows)} {'call' if len(rows) == 1 else 'calls'}"
    )
    if rows:
        shown = Keys(row.key for row in rows)
        table = text_table(LEDGER_HEADER, [ledger_cells(shown, row) for row in rows], {3, 4})
        for line in [shown.legend(), *table]:
            print(line)
    for line in execution_lines(results, Keys(row.key for row in rows)):
        print(line)
