"""What an operator reads is what the bytes are: ids holding format, bidirectional, control or
other invisible characters read on every page, in every field that shows one, in the live feed
and in the controls' previews as ``inert ledger`` shows them (one function, ``key_part``), and
free text (reasons, principals) has those characters escaped the same way."""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
import trio
from console_support import (
    OPERATOR,
    OPERATOR_TOKEN,
    client_of,
    finished,
    opened,
    response_ended,
)
from hypothesis import given
from hypothesis import strategies as st
from starlette.types import Message, Scope

from inert import CallKey, Runtime, ToolDeclaration, open_runtime
from inert.cli import _tables as tables
from inert.cli import main
from inert.console import Console
from inert.console._pages import _ENVIRONMENT
from inert.console._routes import MAX_ID_FIELD, typed_id
from inert.events._identity import MAX_IDENTITY_LENGTH, key_part, shown_text

FORMAT = [
    chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "Cf"
]
"""Every character of Unicode's category Cf (format): bidirectional overrides and isolates,
zero-width joiners and spaces, the byte order mark, tags, invisible operators..."""

OTHER_HIDDEN = [
    *(chr(code) for code in [*range(0x20), *range(0x7F, 0xA0)]),  # Cc
    "\u2028",  # Zl
    "\u2029",  # Zp
    *(chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "Zs"),
    "\u034f",  # combining grapheme joiner (Mn)
    "\ufe0f",  # variation selector (Mn)
    "\U000e0100",  # variation selector supplement (Mn)
    "\u115f",  # Hangul fillers (Lo): letters that draw nothing
    "\u1160",
    "\u3164",
    "\uffa0",
    "\u2800",  # braille blank (So)
    "\ue000",  # private use (Co)
    "\ufffe",  # noncharacters (Cn)
    "\U0010ffff",
]
"""Other characters that draw nothing, or something else than themselves."""

HIDDEN = FORMAT + OTHER_HIDDEN

ID_FIELDS = ("tenant", "conversation", "turn", "response", "item", "call", "tool")


def ids_of(character: str) -> dict[str, str]:
    """Every identity of one call, each holding ``character`` between letters."""
    return {
        "tenant": f"ten{character}ant",
        "conversation": f"c{character}onv",
        "turn": f"t{character}urn",
        "response": f"resp{character}onse",
        "item": f"it{character}em",
        "call": f"call_{character}gnp.exe",
        "tool": f"to{character}ol",
    }


def key_of(ids: dict[str, str]) -> CallKey:
    return CallKey(**{name: ids[name] for name in ID_FIELDS if name != "tool"})


def assert_reads_as_bytes(page: str, ids: Iterable[str] = ()) -> None:
    """No character of the page hides or reorders (a newline apart; a hidden field's value,
    which is sent back and never drawn, holds a reason as written), and each id reads as
    ``key_part`` shows it."""
    page = re.sub(r'(<input type="hidden" name="reason" value=")[^"]*"', r'\1"', page)
    hidden = sorted({f"U+{ord(c):04X}" for c in page if not c.isprintable() and c != "\n"})
    assert not hidden, hidden
    for identity in ids:
        assert key_part(identity) in page, identity


def test_the_console_shows_ids_with_the_function_the_command_line_does() -> None:
    """The pages' filter for ids is the function ``inert ledger`` shows them with, and
    ``typed_id`` undoes it for any text (a lone surrogate included)."""
    assert _ENVIRONMENT.filters["id"] is key_part
    assert tables.key_part is key_part  # type: ignore[attr-defined]
    assert key_part("call_\u202egnp.exe") == "call_%E2%80%AEgnp.exe"
    assert key_part("\ud800") == "%ED%A0%80"


@given(st.text(alphabet=st.characters(codec=None, categories=None)))
def test_an_id_read_from_a_page_names_it_again(identity: str) -> None:
    """Whatever an id holds, its escaped form holds only ``[A-Za-z0-9_.~%-]``, and a field
    given that form names the same id."""
    shown = key_part(identity)
    assert re.fullmatch(r"[A-Za-z0-9_.~%-]*", shown)
    assert typed_id(shown) == identity


@given(st.text())
def test_free_text_keeps_what_reads_and_escapes_what_hides(text: str) -> None:
    """Free text keeps every printable character as it is and shows each other one as
    ``key_part`` does."""
    shown = shown_text(text)
    assert shown.isprintable()
    expected = "".join(c if c.isprintable() else key_part(c) for c in text)
    assert shown == expected


async def _feed_hidden_ids(runtime: Runtime) -> list[dict[str, str]]:
    """One call per hidden character, each of its ids holding it: waiting for a person where
    its tool needs confirmation (every other one), ready otherwise."""
    every = []
    for character in HIDDEN:
        ids = ids_of(character)
        await runtime.start_turn(
            tenant=ids["tenant"],
            conversation=ids["conversation"],
            turn=ids["turn"],
            principal="user:alice",
            tools=[ids["tool"]],
        )
        call = key_of(ids)
        await runtime.feed(opened(call, tool=ids["tool"]) + finished(call) + response_ended(call))
        every.append(ids)
    await runtime.settle()
    return every


def _tools() -> list[ToolDeclaration]:
    return [
        ToolDeclaration(name=ids_of(character)["tool"], needs_confirmation=index % 2 == 0)
        for index, character in enumerate(HIDDEN)
    ]


@asynccontextmanager
async def _console_of_hidden_ids() -> AsyncIterator[
    tuple[Runtime, httpx.AsyncClient, Console, list[dict[str, str]]]
]:
    async with open_runtime(log="memory://", tools=_tools(), operators=[OPERATOR]) as runtime:
        every = await _feed_hidden_ids(runtime)
        async with client_of(runtime.log, page_size=1000) as (client, console):
            yield runtime, client, console, every


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None
    return found[1]


@pytest.mark.slow(seconds=4)
async def test_hidden_characters_in_every_id_read_escaped_on_every_page() -> None:
    """Every Cf character, and the other characters that hide, in each of a call's ids: the
    ledger, a filter by one, the waiting page, the overview and each call's page show every id
    escaped and no such character anywhere."""
    async with _console_of_hidden_ids() as (_, client, _, every):
        ledger = (await client.get("/")).text
        waiting = (await client.get("/waiting")).text
        overview = (await client.get("/overview")).text
        for page in (ledger, waiting):
            assert_reads_as_bytes(
                page, [ids[name] for ids in every for name in ("tenant", "turn", "call", "tool")]
            )
        assert_reads_as_bytes(overview, [ids["tenant"] for ids in every])
        links = re.findall(r'href="(/calls/[A-Za-z0-9_-]+)"', ledger)
        assert len(links) == len(HIDDEN)
        for link in links:
            page = (await client.get(link)).text
            [ids] = [ids for ids in every if key_part(ids["call"]) in page]
            assert_reads_as_bytes(page, ids.values())
            # The controls it links to are asked for the ids as the page shows them.
            for name in ("response", "tool", "tenant"):
                assert f"target={quote(key_part(ids[name]), safe='')}" in page
        for ids in every[:: max(len(every) // 20, 1)]:
            shown = key_part(ids["tenant"])
            filtered = (await client.get("/", params={"tenant": shown})).text
            assert_reads_as_bytes(filtered, [ids["call"]])
            assert f'name="tenant" list="tenants" value="{shown}"' in filtered
            assert 'of <span id="total">1</span>' in filtered


@pytest.mark.slow(seconds=4)
async def test_hidden_characters_read_escaped_in_the_controls_and_the_audit() -> None:
    """The controls' form filled from a call's page, each control's question and the
    audit (its list and each entry) show the response, tool and tenant escaped, a reason's
    hidden characters too; the control reaches the id the page showed."""
    async with _console_of_hidden_ids() as (runtime, client, _, every):
        csrf = _csrf((await client.get("/controls")).text)
        actions = ["quarantine-response", "disable-tool", "stop-tenant"]
        for index, ids in enumerate(every):
            action = actions[index % 3]
            target = {"quarantine-response": "response", "disable-tool": "tool"}.get(
                action, "tenant"
            )
            shown = {name: key_part(ids[name]) for name in ID_FIELDS}
            asked = await client.get(
                "/controls",
                params={"action": action, "target": shown[target], "tenant": shown["tenant"]},
            )
            assert_reads_as_bytes(asked.text, [ids[target], ids["tenant"]])
            assert f'id="target" class="id" required maxlength="8192" value="{shown[target]}"' in (
                asked.text
            )
            # A link made with the id itself (not as pages show it) is shown escaped too.
            raw = await client.get("/controls", params={"action": action, "target": ids[target]})
            assert_reads_as_bytes(raw.text, [ids[target]])
            form = {
                "csrf": csrf,
                "action": action,
                "target": shown[target],
                "tenant": shown["tenant"] if target != "tenant" else "",
                "reason": f"incident {ids['call']}",
            }
            question = await client.post("/controls", data=form)
            assert question.status_code == 200
            assert_reads_as_bytes(question.text, [ids["tenant"], ids["call"], ids["tool"]])
            assert "1 call is live now" in question.text
            assert f'name="target" value="{shown[target]}"' in question.text
            form["confirmed"] = "yes"
            given = await client.post("/controls", data=form)
            assert given.status_code == 303, given.text
            entry = (await client.get(given.headers["location"])).text
            assert_reads_as_bytes(entry, [ids[target]])
            assert shown_text(form["reason"]) in entry
            assert "Calls it ended (1)" in entry
        audit = (await client.get("/audit")).text
        scopes = [ids["response"] for ids in every[0::3]] + [ids["tool"] for ids in every[1::3]]
        assert_reads_as_bytes(audit, [*scopes, *(ids["tenant"] for ids in every)])
        entries = runtime.projections.audit.entries()
        assert [entry.ended for entry in entries] == [[key_of(ids)] for ids in every]


async def _live_rows(console: Console, path: str) -> list[dict[str, object]]:
    """The rows of the first ``rows`` event the live feed sends at ``path``."""
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path.split("?", maxsplit=1)[0],
        "raw_path": path.split("?", maxsplit=1)[0].encode(),
        "root_path": "",
        "query_string": path.partition("?")[2].encode(),
        "headers": [
            (b"host", b"console.test"),
            (b"authorization", f"Bearer {OPERATOR_TOKEN}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("console.test", 80),
    }
    body = b""
    rows: list[dict[str, object]] = []

    async def receive() -> Message:
        await trio.sleep_forever()
        raise AssertionError

    async with trio.open_nursery() as nursery:

        async def send(message: Message) -> None:
            nonlocal body
            chunk = message.get("body", b"")
            assert isinstance(chunk, bytes)
            body += chunk
            found = re.search(rb"event: rows\ndata: (.*)\n\n", body)
            if found is not None:
                rows.extend(json.loads(found[1])["rows"])
                nursery.cancel_scope.cancel()

        nursery.start_soon(console.app, scope, receive, send)
    return rows


@pytest.mark.slow(seconds=3)
async def test_hidden_characters_read_escaped_in_the_live_feed() -> None:
    """The live feed's rows (set as text by the page's script) carry every id as the pages
    show it, with no hidden character once the JSON is read."""
    async with _console_of_hidden_ids() as (_, _, console, every):
        with trio.fail_after(10):
            rows = await _live_rows(console, "/live?after=0")
        assert len(rows) == len(HIDDEN)
        by_call = {row["call"]: row for row in rows}
        for ids in every:
            row = by_call[key_part(ids["call"])]
            for name in ID_FIELDS:
                assert row[name] == key_part(ids[name])
            for value in row.values():
                assert str(value).isprintable(), value
        shown = key_part(every[5]["tenant"])
        with trio.fail_after(10):
            [row] = await _live_rows(console, f"/live?after=0&tenant={quote(shown)}")
        assert row["tenant"] == shown


async def test_a_principal_with_hidden_characters_reads_escaped() -> None:
    """A principal a proxy names with a soft hyphen and a C1 control reads escaped on every
    page it is shown on, the audit's refusal included."""
    async with open_runtime(log="memory://", tools=_tools()[:2], operators=[OPERATOR]) as runtime:
        options = {"principal_header": "X-Forwarded-User", "trusted_proxies": {"127.0.0.1"}}
        async with client_of(runtime.log, token=None, **options) as (client, _):
            named = {b"x-forwarded-user": b"vic\xad\x85tor"}
            page = (await client.get("/controls", headers=named)).text
            assert_reads_as_bytes(page)
            assert "vic%C2%AD%C2%85tor (read only)" in page
            form = {"csrf": _csrf(page), "action": "stop-tenant", "target": "acme"}
            refused = await client.post(
                "/controls",
                data={**form, "reason": "why\u202e not", "confirmed": "yes"},
                headers=named,
            )
            assert refused.status_code == 403
            await runtime.settle()
            audit = (await client.get("/audit", headers=named)).text
            assert_reads_as_bytes(audit)
            assert "vic%C2%AD%C2%85tor" in audit
            assert "why%E2%80%AE not" in audit


async def test_the_command_line_shows_an_id_as_the_console_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``inert ledger`` and the console's ledger show the same call id, with U+202E in it,
    the same way."""
    log = f"sqlite:///{tmp_path / 'escaped.db'}"
    ids = ids_of("\u202e")
    async with open_runtime(log=log, create=True, tools=_tools()) as runtime:
        await runtime.start_turn(
            tenant=ids["tenant"],
            conversation=ids["conversation"],
            turn=ids["turn"],
            principal="user:alice",
        )
        await runtime.feed(opened(key_of(ids), tool=ids["tool"]))
        await runtime.settle()
        async with client_of(runtime.log) as (client, _):
            ledger = (await client.get("/")).text
    assert await trio.to_thread.run_sync(main, ["ledger", "--log", log, "--wide"]) == 0
    printed = capsys.readouterr().out
    for name in ("tenant", "turn", "call"):
        assert key_part(ids[name]) in printed
        assert key_part(ids[name]) in ledger
    assert "call_%E2%80%AEgnp.exe" in printed


def test_an_id_as_long_as_allowed_fits_a_field() -> None:
    """The longest id, of the widest characters, still fits a control's field once escaped."""
    assert len(key_part("\U0010ffff" * MAX_IDENTITY_LENGTH)) <= MAX_ID_FIELD
