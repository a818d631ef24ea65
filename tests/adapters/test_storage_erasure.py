"""What retention erases leaves the storage: no byte of a call's arguments in any file of an
SQLite log, nor in any page of a PostgreSQL log's tables, once its calls ended and the log
erased what their redaction freed.

Canaries go in values, in names, nested, and spelt with JSON escapes, through every provider's
adapter and through every way a call ends: it runs and completes, runs and is stopped, fails its
parse or its schema, is cancelled with its turn, is denied, is confirmed with an edit, or expires
ready unclaimed. Then every file (SQLite: the database, its write-ahead log) or every page of
every relation of the log's schema (PostgreSQL, read through ``pageinspect``: tables, their
TOAST tables and indexes) is searched for them. On PostgreSQL the payloads are sealed from the
moment they are written, so no page holds them in the clear even before retention; and the keys
that sealed them are gone from every page of the table of keys once erased.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
from postgres_support import connect, fresh_schema, log_url
from test_adapter_anthropic import AnthropicRenderer
from test_adapter_bedrock import BedrockRenderer
from test_adapter_gemini import GeminiRenderer
from test_adapter_openai_chat import ChatRenderer
from test_adapter_openai_responses import ResponsesRenderer

from inert import (
    CallKey,
    CallLimits,
    CallOpened,
    ConfirmationRefused,
    Runtime,
    ToolDeclaration,
    TurnRef,
    open_runtime,
)
from inert.runtime._retention import DEFAULT_RETENTION, KEEP_EVERYTHING, Retention
from inert.testing.contracts import PortableRenderer, Renderer
from inert.testing.contracts._awkward import End, EndResponse, Fragment, Open, Stream

PRINCIPAL = "user:alice"
CANARIES = (b"CANARY", b"ANARY-ESC", b"\\u0043")
"""What the arguments carry (``\\u0043`` spells ``C`` in a JSON string): no storage may."""

ANY = {"type": "object"}
STRICT = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 4}},
    "required": ["name"],
    "additionalProperties": False,
}
TOOLS = [
    ToolDeclaration(name="anything", parameters=ANY, strict=False),
    ToolDeclaration(name="strict", parameters=STRICT),
    ToolDeclaration(name="send", parameters=ANY, strict=False, needs_confirmation=True),
]


def _arguments(n: int) -> bytes:
    """Arguments with canaries in a value, a name, nested, and escaped."""
    value = {
        "name": f"CANARY-VAL-{n}",
        f"CANARY-KEY-{n}": {"nested": [f"CANARY-NESTED-{n}", {f"CANARY-DEEP-{n}": 1}]},
    }
    return json.dumps(value).encode()[:-1] + f', "esc": "\\u0043ANARY-ESC-{n}"}}'.encode()


RENDERERS: dict[str, type[Any]] = {
    "portable": PortableRenderer,
    "openai-responses": ResponsesRenderer,
    "openai-chat": ChatRenderer,
    "anthropic": AnthropicRenderer,
    "bedrock": BedrockRenderer,
    "gemini": GeminiRenderer,
}


class Turn:
    """One turn of the conversation, its calls fed through renderers of provider streams."""

    def __init__(self, runtime: Runtime, turn: TurnRef) -> None:
        self.runtime = runtime
        self.stream = Stream(turn=turn)
        self.renderers: dict[str, Renderer] = {}

    async def call(
        self, label: str, tool: str, data: bytes, *, provider: str = "portable"
    ) -> CallKey:
        """A call of its own response, streamed in three fragments and ended well."""
        renderer = self.renderers.setdefault(label, RENDERERS[provider]())
        response = f"resp_{label}"
        steps: list[Open | Fragment | End | EndResponse] = [
            Open(call=label, tool=tool, response=response)
        ]
        third = -(-len(data) // 3)
        steps += [
            Fragment(call=label, data=data[at : at + third]) for at in range(0, len(data), third)
        ]
        steps += [End(call=label), EndResponse(response=response)]
        opened: list[CallKey] = []
        for step in steps:
            events = renderer.render(step, self.stream)
            opened += [event.key for event in events if isinstance(event, CallOpened)]
            await self.runtime.feed(events)
        await self.runtime.settle()
        [key] = opened
        return key

    async def open_only(self, label: str, data: bytes) -> CallKey:
        """A call still collecting: opened, part of its arguments in."""
        renderer = self.renderers.setdefault(label, PortableRenderer())
        response = f"resp_{label}"
        for step in (
            Open(call=label, tool="anything", response=response),
            Fragment(call=label, data=data[:20]),
        ):
            await self.runtime.feed(renderer.render(step, self.stream))
        await self.runtime.settle()
        return self.stream.keys[label]


async def _every_ending(url: str, retention: Retention = DEFAULT_RETENTION) -> None:
    limits = CallLimits(ready_lifetime=timedelta(seconds=0.5))
    async with open_runtime(
        log=url, create=True, tools=TOOLS, limits=limits, snapshot_every=25, retention=retention
    ) as runtime:
        first = await runtime.start_turn(
            tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL
        )
        turn = Turn(runtime, first)
        n = iter(range(1000))
        for provider in RENDERERS:
            key = await turn.call(provider, "anything", _arguments(next(n)), provider=provider)
            dispatch = await runtime.claim(key, executor="worker")
            await runtime.complete(dispatch)
        await turn.call("parse", "anything", b'{"CANARY-KEY-P": "\\u0000CANARY-VAL-P"}')
        await turn.call("schema", "strict", _arguments(next(n)))
        denied = await turn.call("denied", "send", _arguments(next(n)))
        await runtime.deny(denied, principal=PRINCIPAL)
        edited = await turn.call("edited", "send", _arguments(next(n)))
        pending = await runtime.pending_confirmation(edited)
        assert pending is not None
        with pytest.raises(ConfirmationRefused):
            await runtime.confirm(
                edited,
                principal=PRINCIPAL,
                arguments_digest=pending.arguments_digest,
                arguments=b'{"CANARY-KEY-R": "\\u0000"}',
            )
        await runtime.confirm(
            edited,
            principal=PRINCIPAL,
            arguments_digest=pending.arguments_digest,
            arguments={"CANARY-KEY-E": "CANARY-VAL-E"},
        )
        await runtime.settle()
        await runtime.complete(await runtime.claim(edited, executor="worker"))
        expired = await turn.call("expired", "anything", _arguments(next(n)))
        running = await turn.call("running", "anything", _arguments(next(n)))
        stopped = await runtime.claim(running, executor="worker")
        await turn.open_only("collecting", _arguments(next(n)))
        await trio.sleep(0.6)
        await runtime.settle()
        await runtime.cancel_turn(first, principal=PRINCIPAL, reason="done")
        assert await runtime.wait_for_stop(stopped)
        await runtime.stopped(stopped)
        await runtime.settle()
        states = {row.key: row.state for row in runtime.projections.ledger.rows()}
        assert states[expired] == "cancelled"
        assert set(states.values()) <= {"dispatched", "cancelled", "failed"}
    # A restart: retention made again whatever was due, a snapshot written, then erased.
    async with open_runtime(
        log=url, tools=TOOLS, limits=limits, snapshot_every=1, retention=retention
    ) as runtime:
        await runtime.settle()
        assert await runtime.log.erased()


def _one(connection: Any, sql: str, *parameters: object) -> Any:
    """The one value a query answers."""
    [(value,)] = connection.execute(sql, parameters).fetchall()
    return value


def _found(data: bytes) -> list[bytes]:
    return [canary for canary in CANARIES if canary in data]


def test_no_byte_of_the_arguments_stays_in_an_sqlite_logs_files(tmp_path: Path) -> None:
    """After every way a call ends and retention, neither the database file nor its
    write-ahead log holds a canary (nor a file beside them)."""
    path = tmp_path / "log.db"
    trio.run(_every_ending, f"sqlite:///{path}")
    files = {file.name: file.read_bytes() for file in tmp_path.glob("log.db*")}
    assert "log.db" in files
    assert {name: _found(data) for name, data in files.items() if _found(data)} == {}


def test_the_search_finds_the_canaries_where_nothing_was_redacted(tmp_path: Path) -> None:
    """The same calls with retention off: the database holds every canary, so the search above
    would see one left behind."""
    path = tmp_path / "log.db"
    trio.run(_every_ending, f"sqlite:///{path}", KEEP_EVERYTHING)
    assert _found(path.read_bytes()) == list(CANARIES)


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as name:
        yield name


def _pages(schema: str) -> dict[str, bytes]:
    """Every page of every relation of the schema (tables, their TOAST tables and indexes),
    as the server stores them."""
    pages: dict[str, bytes] = {}
    with connect() as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        relations = connection.execute(
            "SELECT c.oid::regclass::text, c.relkind FROM pg_class AS c"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = %s"
            " UNION SELECT t.oid::regclass::text, t.relkind FROM pg_class AS c"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " JOIN pg_class AS t ON t.oid = c.reltoastrelid WHERE n.nspname = %s"
            " UNION SELECT i.oid::regclass::text, i.relkind FROM pg_class AS c"
            " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
            " JOIN pg_class AS t ON t.oid = c.reltoastrelid"
            " JOIN pg_index AS x ON x.indrelid = t.oid JOIN pg_class AS i ON i.oid = x.indexrelid"
            " WHERE n.nspname = %s",
            (schema, schema, schema),
        ).fetchall()
        for name, kind in relations:
            if kind not in ("r", "t", "i"):
                continue
            blocks = _one(
                connection,
                "SELECT pg_relation_size(%s::regclass) / current_setting('block_size')::int",
                name,
            )
            pages[name] = b"".join(
                bytes(_one(connection, "SELECT get_raw_page(%s, %s)", name, block))
                for block in range(blocks)
            )
    return pages


async def _keys(schema: str) -> list[bytes]:
    with connect() as connection:
        return [
            bytes(key) for (key,) in connection.execute(f"SELECT key FROM {schema}.payload_keys")
        ]


def test_no_byte_of_the_arguments_is_in_any_page_of_a_postgresql_log(schema: str) -> None:
    """After every way a call ends and retention, no page of any relation of the log's schema
    holds a canary, in a live row or a dead one; the keys that sealed the payloads are in no
    page either, once the log has erased them."""
    trio.run(_every_ending, log_url(schema))
    pages = _pages(schema)
    assert f"{schema}.events" in pages
    assert {name: _found(data) for name, data in pages.items() if _found(data)} == {}
    with connect() as connection:
        left = _one(connection, f"SELECT count(*) FROM {schema}.payload_keys")
    assert left == 0


def test_a_postgresql_log_holds_argument_bytes_sealed_from_the_start(schema: str) -> None:
    """Before any redaction, the pages hold no canary in the clear: the payloads are sealed as
    they are written; a redaction destroys their keys, and the erasure leaves no page of the
    table of keys with one of them."""
    url = log_url(schema)

    async def run() -> list[bytes]:
        async with open_runtime(log=url, create=True, tools=TOOLS) as runtime:
            turn = Turn(
                runtime,
                await runtime.start_turn(
                    tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL
                ),
            )
            key = await turn.call("a", "anything", _arguments(1))
            assert {
                name: _found(data) for name, data in _pages(schema).items() if _found(data)
            } == {}
            with connect() as connection:
                sealing = [
                    bytes(k)
                    for (k,) in connection.execute(f"SELECT key FROM {schema}.payload_keys")
                ]
            assert sealing
            await runtime.complete(await runtime.claim(key, executor="worker"))
            await runtime.settle()
            assert await runtime.log.erased()
            return sealing

    sealing = trio.run(run)
    keys_table = _pages(schema)[f"{schema}.payload_keys"]
    assert [key for key in sealing if key in keys_table] == []
