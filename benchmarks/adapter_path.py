"""The adapter path: a provider's stream, chunk by chunk, through an adapter, beside its floors.

Run with ``python -m benchmarks.adapter_path [--calls N] [--deltas D] [--runs R]
[--end-to-end-runs R] [--provider NAME ...] [--case alone|end-to-end ...] [--json] [--dir DIR]``.

Each provider (OpenAI Responses, Chat Completions, Anthropic Messages) gets ``--calls`` streams
in its own wire format, built before the clock: one response per call, each with one tool call
whose arguments stream in ``--deltas`` deltas of 4 bytes, then the call's and the response's
successful end, every SSE event its own chunk (as a provider flushes them, one token at a time).
Runs of the cases are interleaved and the median of the runs is reported.

1. ``alone``: a fresh adapter per stream, ``feed`` of every chunk, then ``close``; the events it
   makes are counted and dropped. Floor, in the same run: the least any reader of the same
   chunks does: join each chunk to what is held, split whole events at the blank line, take
   each ``data`` line and ``json.loads`` it (``[DONE]`` aside). Target: the adapter at least
   half the floor's rate. Beside them, the adapter's reference path (``_FAST = False``: the
   reading the fast path replaced, which the tests keep as its oracle), for what it gained.
2. ``end-to-end``: the same streams fed through the adapter into a runtime on a fresh SQLite
   file (WAL, ``synchronous=FULL``): one Trio task per stream feeds the events of each chunk as
   they come (one ``runtime.feed`` per chunk that made any), then those of ``close``. The turns
   are started before the clock; timed from the first chunk until ``settle()`` has returned,
   and every call is then checked to be validated with all its fragments counted. Floor, in the same
   run: Python's ``sqlite3`` inserting one prebuilt row per delta in transactions of 1,024 rows
   (``benchmarks.call_actors``' floor). Target: at least a quarter of the floor's rate.

Rates are deltas (argument fragments) per second. A case that cannot complete raises; a target
missed is reported and the run exits 1, so that ``make bench`` names this benchmark.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from benchmarks.adapters import anthropic_stream, chat_stream, responses_stream
from benchmarks.append_throughput import machine_facts
from benchmarks.call_actors import (
    CALLS_PER_TURN,
    PRINCIPAL,
    TENANT,
    Timed,
    limits_for,
    run_interleaved,
    sqlite_floor_case,
    sqlite_url,
)
from inert import ArgumentsAppended, Phase, ToolDeclaration, TurnRef, open_runtime
from inert.adapters import (
    AnthropicAdapter,
    OpenAIChatAdapter,
    OpenAIResponsesAdapter,
    StreamAdapter,
)
from inert.adapters._sse_adapter import SSEAdapter

DEFAULT_CALLS = 100
DEFAULT_DELTAS = 200
DELTA_BYTES = 4
DEFAULT_RUNS = 7
DEFAULT_END_TO_END_RUNS = 3
TARGET_ALONE_VS_FLOOR = 0.5
TARGET_END_TO_END_VS_FLOOR = 0.25
CASES = ("alone", "end-to-end")

TOOL = ToolDeclaration(
    name="lookup",
    parameters={
        "type": "object",
        "properties": {"call": {"type": "integer"}, "text": {"type": "string"}},
        "required": ["call", "text"],
        "additionalProperties": False,
    },
)
"""The tool the streams call (``benchmarks.adapters``' streams call ``lookup``)."""


@dataclass
class Provider:
    name: str
    make: Callable[[TurnRef], StreamAdapter]
    reference: Callable[[TurnRef], StreamAdapter]
    """The adapter reading by its reference path."""
    streams: list[list[bytes]]
    """Each call's stream, one chunk per SSE event."""
    deltas: int
    """Argument deltas in all the streams."""


def turn_of(index: int) -> TurnRef:
    """Ten calls to a turn, each turn in its own conversation, as ``benchmarks.call_actors``."""
    return TurnRef(tenant=TENANT, conversation=f"conversation-{index // CALLS_PER_TURN}", turn="t")


def events_of(body: bytes) -> list[bytes]:
    """A body's SSE events, each its own chunk."""
    return [event + b"\n\n" for event in body.split(b"\n\n") if event]


def build_providers(calls: int, deltas: int, names: Sequence[str]) -> list[Provider]:
    size = deltas * DELTA_BYTES
    builders: dict[str, tuple[Callable[..., tuple[bytes, int]], type[SSEAdapter]]] = {
        "openai-responses": (responses_stream, OpenAIResponsesAdapter),
        "openai-chat": (chat_stream, OpenAIChatAdapter),
        "anthropic": (anthropic_stream, AnthropicAdapter),
    }
    providers = []
    for name in names:
        build, make = builders[name]
        streams = [
            events_of(build(1, size, DELTA_BYTES, response_id=f"response-{index}")[0])
            for index in range(calls)
        ]
        reference = type(f"Reference{make.__name__}", (make,), {"_FAST": False})
        provider = Provider(name=name, make=make, reference=reference, streams=streams, deltas=0)
        provider.deltas = count_deltas(provider)
        providers.append(provider)
    return providers


def count_deltas(provider: Provider) -> int:
    """The fragments the adapter makes of the streams (a warm-up run that also checks them)."""
    counted = 0
    for index, chunks in enumerate(provider.streams):
        adapter = provider.make(turn_of(index))
        events = [event for chunk in chunks for event in adapter.feed(chunk)] + adapter.close()
        counted += sum(isinstance(event, ArgumentsAppended) for event in events)
    if counted == 0:
        raise RuntimeError(f"{provider.name}: the adapter made no fragment")
    return counted


# --- 1. the adapter alone ----------------------------------------------------------------------


def adapter_alone(provider: Provider, *, reference: bool = False) -> Callable[[Path], float]:
    def run(_: Path) -> float:
        streams = provider.streams
        make = provider.reference if reference else provider.make
        turns = [turn_of(index) for index in range(len(streams))]
        made = 0
        start = time.perf_counter()
        for turn, chunks in zip(turns, streams, strict=True):
            adapter = make(turn)
            for chunk in chunks:
                made += len(adapter.feed(chunk))
            made += len(adapter.close())
        elapsed = time.perf_counter() - start
        if made < provider.deltas:
            raise RuntimeError(f"{provider.name}: {made} events made, fewer than its deltas")
        return elapsed

    return run


def split_and_parse_floor(provider: Provider) -> Callable[[Path], float]:
    """The least a reader of the chunks does: whole events split off, each data line parsed."""

    def run(_: Path) -> float:
        parsed = 0
        loads = json.loads
        start = time.perf_counter()
        for chunks in provider.streams:
            held = b""
            for chunk in chunks:
                held += chunk
                events = held.split(b"\n\n")
                held = events.pop()
                for event in events:
                    for line in event.split(b"\n"):
                        if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                            loads(line[5:])
                            parsed += 1
        elapsed = time.perf_counter() - start
        if parsed < provider.deltas:
            raise RuntimeError(f"{provider.name} floor: {parsed} events parsed")
        return elapsed

    return run


# --- 2. end to end -------------------------------------------------------------------------------


async def _end_to_end(url: str, provider: Provider) -> float:
    calls = len(provider.streams)
    per_call = provider.deltas // calls
    limits = limits_for(calls, fragments_per_call=per_call, size=per_call * DELTA_BYTES)
    turns = [turn_of(index) for index in range(calls)]
    async with open_runtime(log=url, create=True, tools=[TOOL], limits=limits) as runtime:
        for turn in dict.fromkeys(turns):
            await runtime.start_turn(
                tenant=turn.tenant,
                conversation=turn.conversation,
                turn=turn.turn,
                principal=PRINCIPAL,
            )
        keys: list[Any] = []

        async def stream(turn: TurnRef, chunks: list[bytes]) -> None:
            adapter = provider.make(turn)
            for chunk in chunks:
                events = adapter.feed(chunk)
                if events:
                    await runtime.feed(events)
            events = adapter.close()
            if events:
                await runtime.feed(events)
            keys.extend(adapter_keys(adapter))

        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for turn, chunks in zip(turns, provider.streams, strict=True):
                nursery.start_soon(stream, turn, chunks)
        await runtime.settle()
        elapsed = time.perf_counter() - start
        counted = 0
        for key in keys:
            row = runtime.ledger.row(key)
            if runtime.phase(key) is not Phase.VALIDATED or row is None:
                raise RuntimeError(f"{provider.name}: call {key} is {runtime.phase(key).value}")
            counted += row.fragments
        if len(keys) != calls or counted != provider.deltas:
            raise RuntimeError(
                f"{provider.name}: {len(keys)} calls with {counted} fragments counted,"
                f" {calls} with {provider.deltas} fed"
            )
    return elapsed


def adapter_keys(adapter: StreamAdapter) -> list[Any]:
    """The keys of the calls an adapter's one response opened."""
    latest = adapter._latest()  # type: ignore[attr-defined]
    return [latest.key_of(slot) for slot in latest.slots()]


def end_to_end(provider: Provider) -> Callable[[Path], float]:
    def run(path: Path) -> float:
        return trio.run(_end_to_end, sqlite_url(path), provider)

    return run


# --- running -------------------------------------------------------------------------------------


def measure(arguments: argparse.Namespace, directory: Path) -> dict[str, Any]:
    providers = build_providers(arguments.calls, arguments.deltas, arguments.provider)
    document: dict[str, Any] = {
        "arguments": {key: value for key, value in vars(arguments).items() if key != "dir"},
        "machine": machine_facts(directory),
        "results": {},
    }
    if "alone" in arguments.case:
        alone: list[tuple[Provider, Timed, Timed, Timed]] = [
            (
                provider,
                Timed(
                    f"{provider.name}-alone",
                    f"{provider.name} adapter alone",
                    provider.deltas,
                    adapter_alone(provider),
                ),
                Timed(
                    f"{provider.name}-split",
                    f"{provider.name} split + json.loads floor",
                    provider.deltas,
                    split_and_parse_floor(provider),
                ),
                Timed(
                    f"{provider.name}-reference",
                    f"{provider.name} reference path alone",
                    provider.deltas,
                    adapter_alone(provider, reference=True),
                ),
            )
            for provider in providers
        ]
        run_interleaved(
            [case for _, *cases in alone for case in cases], arguments.runs, directory, "alone"
        )
        for provider, adapter, floor, old in alone:
            ratio = adapter.median_rate / floor.median_rate
            document["results"].setdefault(provider.name, {})["alone"] = {
                "chunks": sum(len(chunks) for chunks in provider.streams),
                "deltas": provider.deltas,
                "adapter_deltas_per_s": adapter.median_rate,
                "floor_deltas_per_s": floor.median_rate,
                "reference_deltas_per_s": old.median_rate,
                "reference_ratio": old.median_rate / floor.median_rate,
                "adapter_us_per_chunk": 1e6
                * statistics.median(adapter.seconds)
                / sum(len(chunks) for chunks in provider.streams),
                "ratio": ratio,
                "target": TARGET_ALONE_VS_FLOOR,
                "met": ratio >= TARGET_ALONE_VS_FLOOR,
            }
    if "end-to-end" in arguments.case:
        paths: list[tuple[Provider, Timed, Timed]] = [
            (
                provider,
                Timed(
                    f"{provider.name}-e2e",
                    f"{provider.name} end to end, SQLite FULL",
                    provider.deltas,
                    end_to_end(provider),
                ),
                Timed(
                    f"{provider.name}-sqlite3",
                    f"{provider.name} sqlite3 floor",
                    provider.deltas,
                    floor_of(provider),
                ),
            )
            for provider in providers
        ]
        run_interleaved(
            [case for _, *pair in paths for case in pair],
            arguments.end_to_end_runs,
            directory,
            "end to end",
        )
        for provider, runtime_case, floor in paths:
            ratio = runtime_case.median_rate / floor.median_rate
            document["results"].setdefault(provider.name, {})["end_to_end"] = {
                "deltas": provider.deltas,
                "runtime_deltas_per_s": runtime_case.median_rate,
                "floor_rows_per_s": floor.median_rate,
                "ratio": ratio,
                "target": TARGET_END_TO_END_VS_FLOOR,
                "met": ratio >= TARGET_END_TO_END_VS_FLOOR,
            }
    document["targets_missed"] = [
        f"{provider}.{case}"
        for provider, cases in document["results"].items()
        for case, result in cases.items()
        if not result["met"]
    ]
    return document


def floor_of(provider: Provider) -> Callable[[Path], float]:
    calls = len(provider.streams)
    return sqlite_floor_case(calls, provider.deltas // calls)


def report(document: dict[str, Any]) -> str:
    arguments = document["arguments"]
    lines = [
        f"The adapter path: {arguments['calls']} calls x {arguments['deltas']} deltas of"
        f" {DELTA_BYTES} bytes, one SSE event a chunk, median of the runs"
        f" ({arguments['runs']} alone, {arguments['end_to_end_runs']} end to end)",
        "",
        "| provider | case | inert deltas/s | floor | floor/s | ratio | target |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for provider, cases in document["results"].items():
        alone = cases.get("alone")
        if alone is not None:
            lines.append(
                f"| {provider} | adapter alone ({alone['adapter_us_per_chunk']:.1f} us/chunk)"
                f" | {alone['adapter_deltas_per_s']:,.0f} | split + json.loads"
                f" | {alone['floor_deltas_per_s']:,.0f} | {alone['ratio']:.2f}x"
                f" | >= {alone['target']}x {'met' if alone['met'] else 'NOT met'} |"
            )
            lines.append(
                f"| {provider} | reference path alone | {alone['reference_deltas_per_s']:,.0f}"
                f" | split + json.loads | {alone['floor_deltas_per_s']:,.0f}"
                f" | {alone['reference_ratio']:.2f}x | (the path the fast one replaced) |"
            )
        path = cases.get("end_to_end")
        if path is not None:
            lines.append(
                f"| {provider} | end to end, SQLite FULL | {path['runtime_deltas_per_s']:,.0f}"
                f" | sqlite3, 1,024 rows a transaction | {path['floor_rows_per_s']:,.0f}"
                f" | {path['ratio']:.2f}x | >= {path['target']}x"
                f" {'met' if path['met'] else 'NOT met'} |"
            )
    missed = document["targets_missed"]
    lines += ["", f"targets NOT met: {', '.join(missed)}" if missed else "every target met"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--deltas", type=int, default=DEFAULT_DELTAS)
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS)
    parser.add_argument("--end-to-end-runs", type=int, default=DEFAULT_END_TO_END_RUNS)
    parser.add_argument(
        "--provider",
        action="append",
        choices=("openai-responses", "openai-chat", "anthropic"),
    )
    parser.add_argument("--case", action="append", choices=CASES)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dir", type=Path, default=None)
    arguments = parser.parse_args(argv)
    arguments.provider = arguments.provider or ["openai-responses", "openai-chat", "anthropic"]
    arguments.case = arguments.case or list(CASES)
    with tempfile.TemporaryDirectory(dir=arguments.dir) as directory:
        document = measure(arguments, Path(directory))
    print(json.dumps(document, indent=2) if arguments.json else report(document))
    return 1 if document["targets_missed"] else 0


if __name__ == "__main__":
    sys.exit(main())
