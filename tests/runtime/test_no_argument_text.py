"""No text of the arguments anywhere but the arguments: canaries in names and values, through
every refusal of the parser, the schema, business validators and edits at confirmation, and
every surface they could reach (the ledger and its history, the CLI, exceptions, spans, the
console's call pages, every row of the log and of its snapshots once retention has run)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio
from bad_inputs import CANARY, CANARY_CASES, HOSTILE_KEYS
from console_support import client_of
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    CallUnderValidation,
    ConfigurationError,
    ConfirmationRefused,
    Dispatch,
    FieldProblem,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    ToolDeclaration,
    declarations_from_json,
    open_runtime,
)
from inert.actors import ArgumentProblem
from inert.actors._places import MAX_DETAIL_LENGTH
from inert.cli import main
from inert.console._view import key_token
from inert.events import CallFailed, EditRefused, EventRejected, ExecutionFailed

RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
        "headers": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 4}},
        "labels": {
            "type": "object",
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
        },
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
        "mode": {"enum": ["a", "b"]},
    },
    "required": ["name"],
    "additionalProperties": False,
    "$defs": {
        "item": {
            "type": "object",
            "properties": {"sku": {"type": "string", "format": "uuid"}},
            "required": ["sku"],
            "additionalProperties": {"type": "integer"},
        }
    },
}
TOOLS_JSON = [
    {"name": "record", "input_schema": RECORD_SCHEMA},
    {"name": "anything", "input_schema": {"type": "object"}, "x-inert": {"strict": False}},
    {"name": "send", "input_schema": RECORD_SCHEMA, "x-inert": {"confirm": True}},
]
PRINCIPAL = "user:alice"
TURN = ("acme", "c1", "t1")


def _pointer(path: list[str]) -> str:
    return "".join("/" + step.replace("~", "~0").replace("/", "~1") for step in path)


def _paths(value: object, path: list[str]) -> list[list[str]]:
    """The path of every name and index of a JSON value."""
    if isinstance(value, dict):
        return [
            p
            for name, inner in value.items()
            for p in [[*path, name], *_paths(inner, [*path, name])]
        ]
    if isinstance(value, list | tuple):
        return [p for index, inner in enumerate(value) for p in _paths(inner, [*path, str(index)])]
    return []


async def _names_every_place(call: CallUnderValidation) -> None:
    """A validator that reports a problem at every place of the arguments, by their own
    names, and one at a place that is not there."""
    places = [*_paths(json.loads(json.dumps(call.arguments, default=dict)), []), ["CANARY-KEY-9"]]
    raise ExceptionGroup(
        "every place", [FieldProblem(_pointer(path), "looked_at") for path in places]
    )


async def _value_as_kind(call: CallUnderValidation) -> None:
    """A validator that tries to record a value as a problem's kind."""
    raise FieldProblem("/headers", f"was {call.arguments.get('headers')}")


async def _value_in_message(call: CallUnderValidation) -> None:
    raise ValueError(f"cannot take {dict(call.arguments)}")


def _declarations() -> list[ToolDeclaration]:
    declarations = declarations_from_json(TOOLS_JSON)
    extra = [
        ToolDeclaration(name="kind", strict=False, validator=_value_as_kind),
        ToolDeclaration(name="raises", strict=False, validator=_value_in_message),
        ToolDeclaration(name="places", parameters=RECORD_SCHEMA, validator=_names_every_place),
    ]
    return declarations + extra


def _schema_failures() -> list[dict[str, Any]]:
    """Arguments of ``record`` that break its schema at canary names and values."""
    nested = {
        "name": "CANARY-VAL-30",
        "headers": {"Authorization: Bearer sk-CANARY-KEY-30": "CANARY-VAL-31", "CANARY-KEY-31": 5},
        "labels": {"CANARY-KEY-32": 1, "x-CANARY-KEY-33": "CANARY-VAL-33"},
        "items": [{"sku": "CANARY-VAL-34", "CANARY-KEY-34": "CANARY-VAL-35"}, {"CANARY-KEY-35": 1}],
        "mode": "CANARY-VAL-36",
        "CANARY-KEY-36": "CANARY-VAL-37",
    }
    hostile = [
        {"name": "ok", hostile: "CANARY-VAL-38", "headers": {hostile: 1}}
        for hostile in HOSTILE_KEYS
    ]
    return [nested, {"headers": {"CANARY-KEY-39": "CANARY-VAL-39"}}, *hostile]


def _valid() -> dict[str, Any]:
    """Arguments ``record``'s schema takes, with canaries where it takes any text."""
    return {
        "name": "abc",
        "headers": {"Authorization: Bearer sk-CANARY-KEY-40": "CANA"},
        "labels": {"x-CANARY-KEY-41": 1},
        "items": [{"sku": "3f2c1d7e-0000-4000-8000-000000000000", "CANARY-KEY-42": 7}],
    }


def _call(index: int) -> CallKey:
    tenant, conversation, turn = TURN
    return CallKey(
        tenant=tenant,
        conversation=conversation,
        turn=turn,
        response=f"resp_{index}",
        item=f"item_{index}",
        call=f"call_{index}",
    )


def _events(key: CallKey, tool: str, data: bytes) -> list[Any]:
    return [
        CallOpened(key=key, tool=tool, sequence=0),
        ArgumentsAppended(key=key, data=data, offset=0, first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


def _calls() -> list[tuple[str, bytes]]:
    """Every call the model makes: (tool, argument bytes)."""
    calls = [("anything", case.data) for case in CANARY_CASES]
    calls += [("record", case.data) for case in CANARY_CASES[:6]]
    calls += [("record", json.dumps(arguments).encode()) for arguments in _schema_failures()]
    calls += [("kind", b'{"headers": "CANARY-VAL-50"}'), ("raises", b'{"CANARY-KEY-51": 1}')]
    calls += [("places", json.dumps(_valid()).encode())]
    calls += [("places", json.dumps(arguments).encode()) for arguments in _schema_failures()[:2]]
    return calls


def _edits() -> list[bytes | dict[str, Any]]:
    """The person's edits of the call waiting for confirmation, each refused."""
    edits: list[bytes | dict[str, Any]] = [case.data for case in CANARY_CASES]
    edits += _schema_failures()
    return edits


class Seen:
    """Everything the run showed, to look for canaries in."""

    def __init__(self) -> None:
        self.texts: dict[str, list[str]] = {}
        self.details: list[str] = []

    def add(self, surface: str, text: str) -> None:
        self.texts.setdefault(surface, []).append(text)

    def leaks(self) -> dict[str, list[str]]:
        return {
            surface: [text[:300] for text in texts if CANARY in text]
            for surface, texts in self.texts.items()
            if any(CANARY in text for text in texts)
        }


async def _model_and_person(url: str, exporter: InMemorySpanExporter, seen: Seen) -> CallKey:
    """Feed every call; refuse every edit of the one waiting for confirmation."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    limits = CallLimits(max_live_per_turn=1000)
    tenant, conversation, turn = TURN
    async with open_runtime(
        log=url,
        create=True,
        tools=_declarations(),
        limits=limits,
        tracer_provider=provider,
        snapshot_every=50,
    ) as runtime:
        await runtime.start_turn(
            tenant=tenant, conversation=conversation, turn=turn, principal=PRINCIPAL
        )
        calls = _calls()
        for index, (tool, data) in enumerate(calls):
            await runtime.feed(_events(_call(index), tool, data))
        waiting = _call(len(calls))
        await runtime.feed(_events(waiting, "send", json.dumps(_valid()).encode()))
        await runtime.settle()
        for index, (tool, _) in enumerate(calls):
            row = runtime.projections.ledger.row(_call(index))
            assert row is not None, (index, tool)
            assert row.state == "failed", row
        shown = await runtime.pending_confirmation(waiting)
        assert shown is not None
        for edit in _edits():
            with pytest.raises(ConfirmationRefused) as refused:
                await runtime.confirm(
                    waiting,
                    principal=PRINCIPAL,
                    arguments_digest=shown.arguments_digest,
                    arguments=edit,
                )
            seen.add("exceptions", f"{refused.value} {refused.value!r} {refused.value.args}")
        await runtime.settle()
    return waiting


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str], seen: Seen) -> int:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    seen.add("cli", captured.out + captured.err)
    return status


def _cli_calls(
    url: str, tmp_path: Path, waiting: CallKey, capsys: pytest.CaptureFixture[str], seen: Seen
) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(TOOLS_JSON))
    identity = [
        *("--log", url, "--tenant", waiting.tenant, "--conversation", waiting.conversation),
        *("--turn", waiting.turn, "--call-id", waiting.call, "--principal", PRINCIPAL),
    ]
    for index, edit in enumerate(
        [CANARY_CASES[0].data, json.dumps(_schema_failures()[0]).encode()]
    ):
        file = tmp_path / f"edit-{index}.json"
        file.write_bytes(edit)
        command = ["confirm", *identity, "--arguments", str(file), "--tools", str(tools)]
        assert _cli(command, capsys, seen) == 1
        assert _cli([*command, "--json"], capsys, seen) == 1
    assert _cli(["deny", *identity, "--reason", "no"], capsys, seen) == 0
    for history in (["--history"], ["--json", "--history"]):
        assert _cli(["ledger", "--log", url, *history], capsys, seen) == 0


async def _afterwards(url: str, calls: int, exporter: InMemorySpanExporter, seen: Seen) -> None:
    """A restart (retention runs, a snapshot is written) and the console over its log."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with open_runtime(
        log=url, tools=_declarations(), tracer_provider=provider, snapshot_every=1
    ) as runtime:
        await runtime.settle()
        for recorded in await runtime.log.read(0):
            event = recorded.event
            if isinstance(event, CallFailed | EditRefused | EventRejected):
                seen.details.append(event.detail)
        async with client_of(runtime.log) as (client, _):
            for path in ["/", "/overview", "/waiting", "/audit"]:
                seen.add("console", (await client.get(path)).text)
            for index in range(calls + 1):
                page = await client.get(f"/calls/{key_token(_call(index))}")
                assert page.status_code == 200
                seen.add("console", page.text)


def _rows(path: Path, seen: Seen) -> None:
    """Every value of every row of every table of the log's database."""
    with sqlite3.connect(path) as connection:
        tables = [
            name
            for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
        assert {"events", "snapshots", "snapshot_payloads"} <= set(tables)
        assert connection.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 1
        for table in tables:
            for row in connection.execute(f"SELECT * FROM {table}"):
                for value in row:
                    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
                    seen.add(f"rows of {table}", text)


def test_the_canaries_go_through_every_refusal_of_the_parse() -> None:
    """Every problem the strict parse can find has a case with canaries in its names."""
    assert {case.code for case in CANARY_CASES} == {problem.value for problem in ArgumentProblem}


@pytest.mark.slow(seconds=5)
def test_no_canary_of_the_arguments_reaches_any_surface(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Calls and edits with canaries in names and values, refused in every way, leave no
    canary in any detail, exception, CLI output, span, console page or row of the log."""
    database = tmp_path / "canary.db"
    url = f"sqlite:///{database}"
    exporter = InMemorySpanExporter()
    seen = Seen()
    waiting = trio.run(_model_and_person, url, exporter, seen)
    _cli_calls(url, tmp_path, waiting, capsys, seen)
    trio.run(_afterwards, url, len(_calls()), exporter, seen)
    _rows(database, seen)
    for span in exporter.get_finished_spans():
        seen.add("spans", json.dumps(span.to_json()))
    assert set(seen.texts) >= {"exceptions", "cli", "console", "spans", "rows of events"}
    assert seen.leaks() == {}
    assert max(map(len, seen.details)) <= MAX_DETAIL_LENGTH
    assert any("<key #" in detail for detail in seen.details)


async def _dispatched(runtime: Runtime, call: str) -> Dispatch:
    key = _call(int(call))
    await runtime.feed(_events(key, "anything", b'{"CANARY-KEY-60": "CANARY-VAL-60"}'))
    await runtime.settle()
    return await runtime.claim(key, executor="worker")


async def _errors(runtime: Runtime) -> list[str]:
    return [
        recorded.event.error
        for recorded in await runtime.log.read(0)
        if isinstance(recorded.event, ExecutionFailed)
    ]


async def test_fail_records_an_identifier_and_refuses_a_message() -> None:
    """The error an executor reports is an identifier, recorded as it is; a message (which may
    quote the arguments) is refused before anything is recorded, and the executor may report
    again; an exception whose type's name is no identifier of the log's (70 characters) is
    recorded as ``Exception``."""
    long_named = type("Failure" * 10, (Exception,), {})

    async def breaks(dispatch: Dispatch) -> None:
        raise long_named(dict(dispatch.arguments))

    tenant, conversation, turn = TURN
    async with open_runtime(log="memory://", tools=_declarations()) as runtime:
        await runtime.start_turn(
            tenant=tenant, conversation=conversation, turn=turn, principal=PRINCIPAL
        )
        dispatch = await _dispatched(runtime, "1")
        for message in [f"cannot take {dict(dispatch.arguments)}", "a" * 65, "naïve"]:
            with pytest.raises(ConfigurationError, match="identifier") as refused:
                await runtime.fail(dispatch, message)
            assert CANARY not in str(refused.value)
        assert await _errors(runtime) == []
        await runtime.fail(dispatch, "lookup.unavailable")
        await runtime.feed(_events(_call(2), "anything", b"{}"))
        await runtime.settle()
        with pytest.raises(long_named):
            await runtime.execute(_call(2), breaks, name="worker")
        await runtime.settle()
        assert await _errors(runtime) == ["lookup.unavailable", "Exception"]
