"""Feeding a provider stream through an adapter into a runtime on SQLite, for adapter tests.

``run_stream`` starts a turn offering the given tools, feeds the stream (raw wire bytes in chunks,
or decoded events one by one) through a fresh adapter, closes it, lets the actors settle, runs
every ready call with a recording executor, and returns the ledger rows of the turn keyed by
``"<response>/<item>"``, with the calls the executor received.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from attrs import define, field

from inert import Dispatch, Event, Runtime, ToolDeclaration, TurnRef, open_runtime
from inert.adapters import PROVIDERS, StreamAdapter

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "provider-streams"
TENANT = "acme"
CONVERSATION = "conv-1"
TURN = "t1"
PRINCIPAL = "user:alice"

AdapterFactory = Callable[[TurnRef], StreamAdapter]

ANY_OBJECT = {"type": "object"}
"""A schema that takes any object: these tests are about streams, not schemas. Registered with
``strict=False``, since it lets any property through on purpose."""


@define
class StreamRun:
    """What feeding one stream produced."""

    rows: dict[str, Mapping[str, object]] = field(factory=dict)
    events: list[Event] = field(factory=list)
    executed: dict[str, Dispatch] = field(factory=dict)


def declarations(names: Iterable[str]) -> list[ToolDeclaration]:
    return [ToolDeclaration(name=name, parameters=ANY_OBJECT, strict=False) for name in names]


def turn_ref(turn: str = TURN) -> TurnRef:
    return TurnRef(tenant=TENANT, conversation=CONVERSATION, turn=turn)


def provider_adapter(
    provider: str, turn: TurnRef | None = None, *, resumable: bool = False
) -> StreamAdapter:
    """The registered adapter of a provider for a turn of these tests; a stream whose protocol
    names no response of its own is named ``req-1``."""
    factory = PROVIDERS[provider]
    return factory(turn or turn_ref(), response="req-1", resumable=resumable)


async def feed_stream(
    runtime: Runtime,
    adapter: StreamAdapter,
    *,
    chunks: Sequence[bytes | str] = (),
    events: Sequence[object] = (),
    close: bool = True,
) -> list[Event]:
    """Feed raw chunks, then decoded events, then (unless told not to) the end of the body."""
    produced: list[Event] = []
    for chunk in chunks:
        produced += adapter.feed(chunk)
    for event in events:
        produced += adapter.feed_event(event)
    if close:
        produced += adapter.close()
    if produced:
        await runtime.feed(produced)
    return produced


async def run_stream(
    factory: AdapterFactory,
    tmp_path: Path,
    *,
    tools: Iterable[str],
    chunks: Sequence[bytes | str] = (),
    events: Sequence[object] = (),
    execute: bool = True,
) -> StreamRun:
    """Feed one stream through a fresh adapter into a fresh runtime; gather the outcome."""
    names = list(tools)
    run = StreamRun()
    url = f"sqlite:///{tmp_path / 'adapter.db'}"
    async with open_runtime(log=url, create=True, tools=declarations(names)) as runtime:
        turn = await runtime.start_turn(
            tenant=TENANT, conversation=CONVERSATION, turn=TURN, principal=PRINCIPAL, tools=names
        )
        run.events = await feed_stream(runtime, factory(turn), chunks=chunks, events=events)
        await runtime.settle()
        if execute:

            async def record(dispatch: Dispatch) -> None:
                label = f"{dispatch.key.response}/{dispatch.key.item}"
                assert label not in run.executed, f"{label} executed twice"
                run.executed[label] = dispatch

            for key in list(runtime.projections.queue.ready()):
                await runtime.execute(key, record, name="adapter-test")
            await runtime.settle()
        for row in runtime.projections.ledger.rows():
            if row.key.turn_ref == turn:
                run.rows[f"{row.key.response}/{row.key.item}"] = row.to_json()
    return run


def outcome(row: Mapping[str, object]) -> tuple[object, object, object]:
    """The (state, terminal_reason, dispatch) of a ledger row: what fixture tests pin down."""
    return row["state"], row["terminal_reason"], row["dispatch"]


def recorded_body(path: Path, interaction: int = 0) -> bytes:
    """One recorded HTTP body of a fixture file (files of several separate them with
    ``: interaction N`` comment lines), its last event closed by a blank line as on the wire."""
    content = path.read_bytes()
    marker = b": interaction "
    if marker in content:
        content = content.split(marker)[1 + interaction].split(b"\n", 1)[1]
    return content.rstrip(b"\r\n") + b"\n\n"
