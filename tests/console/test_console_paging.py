"""Every console page is bounded: each list is one page long, however many calls, tenants,
controls or transitions there are; and a heavy page never holds the controls back."""

from __future__ import annotations

import html
import re

import pytest
import trio
import trio.lowlevel
from console_support import (
    OPERATOR,
    TOOLS,
    VIEWER_TOKEN,
    client_of,
    finished,
    key,
    opened,
    response_ended,
    start,
)

from inert import ArgumentsAppended, CallKey, Runtime, open_runtime
from inert.console._view import RowFilter, Stage

PAGE = 4


def _rows(page: str) -> list[int]:
    """The body rows of each table of a page."""
    return [body.count("<tr") for body in re.findall(r"<tbody>(.*?)</tbody>", page, re.S)]


def _counts(page: str) -> list[str]:
    """What each list's pager says: ``calls 5 to 8 of 12``."""
    return re.findall(r'<p class="count pager">([^<]*?)(?: ·|\n|</p>)', page)


async def _waiting_calls(runtime: Runtime, count: int, *, tenant: str, tool: str) -> None:
    """``count`` calls of one tenant that end well: waiting for a person where ``tool`` needs
    confirmation, ready otherwise (a turn of its own conversation for each 50)."""
    for first in range(0, count, 50):
        conversation = f"{tool}-{first}"
        await runtime.start_turn(
            tenant=tenant, conversation=conversation, turn="t1", principal="user:alice"
        )
        events = []
        for index in range(first, min(first + 50, count)):
            call = CallKey(
                tenant=tenant,
                conversation=conversation,
                turn="t1",
                response=f"r-{conversation}",
                item=f"{tool}_{index}",
                call=f"{tool}_{index}",
            )
            events += opened(call, tool=tool) + finished(call)
        await runtime.feed(events + response_ended(call))
    await runtime.settle()


async def test_the_waiting_page_lists_one_page_of_each_stage() -> None:
    """Waiting, ready and running each show one page (the one in its stage longest first) with
    their own page numbers and counts."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await _waiting_calls(runtime, 11, tenant="acme", tool="send_email")
        await _waiting_calls(runtime, 6, tenant="acme", tool="get_weather")
        claimed = 0
        async for ready in runtime.ready_calls():
            await runtime.claim(ready, executor="worker")
            claimed += 1
            if claimed == 2:
                break
        await runtime.settle()
        async with client_of(runtime.log, page_size=PAGE) as (client, _):
            first = html.unescape((await client.get("/waiting")).text)
            assert "Waiting for a person's confirmation (11)" in first
            assert "Ready, not yet claimed (4)" in first
            assert "Running: dispatched, no outcome yet (2)" in first
            assert _counts(first) == [
                "calls 1 to 4 of 11",
                "calls 1 to 4 of 4",
                "calls 1 to 2 of 2",
            ]
            assert _rows(first) == [4, 4, 2]
            pages = [
                html.unescape((await client.get(f"/waiting?waiting={number}&ready=1")).text)
                for number in (1, 2, 3)
            ]
            waiting = [re.findall(r">(send_email_\d+)<", page) for page in pages]
            assert [len(calls) for calls in waiting] == [4, 4, 3]
            assert sorted(call for calls in waiting for call in calls) == sorted(
                f"send_email_{n}" for n in range(11)
            )
            assert _counts(pages[2])[0] == "calls 9 to 11 of 11"
            assert 'href="?waiting=2"' in (await client.get("/waiting")).text
            asked = (await client.get("/waiting?waiting=3&ready=1")).text
            assert 'href="?waiting=2&amp;ready=1"' in asked
            beyond = (await client.get("/waiting?waiting=99")).text
            assert "page 99 is past the last page, 3 (11 calls)" in beyond
            assert 'href="?waiting=3">the last page' in beyond


async def test_every_list_of_every_page_is_one_page_long() -> None:
    """With many calls, tenants, controls and rejected events, the ledger, the waiting page,
    the overview, the audit, a control's page, a call's history and the emergency stop's
    question each draw at most one page of rows per list, and say how many there are."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        for tenant in range(9):
            await _waiting_calls(runtime, 6, tenant=f"tenant-{tenant}", tool="get_weather")
        await start(runtime, tenant="noisy")
        noisy = key("noisy", tenant="noisy")
        await runtime.feed(opened(noisy))
        duplicate = ArgumentsAppended(
            key=noisy, data=b"{", offset=0, first_sequence=1, last_sequence=1
        )
        for _ in range(9):
            await runtime.feed([duplicate])
        await runtime.settle()
        async with client_of(runtime.log, page_size=PAGE) as (client, _):
            viewer = {"authorization": f"Bearer {VIEWER_TOKEN}"}
            csrf = re.findall(
                r'name="csrf" value="([0-9a-f]+)"',
                (await client.get("/controls", headers=viewer)).text,
            )[0]
            for attempt in range(9):
                form = {"csrf": csrf, "action": "stop-tenant", "target": "tenant-0"}
                await client.post(
                    "/controls",
                    data={**form, "reason": f"try {attempt}", "confirmed": "yes"},
                    headers=viewer,
                )
            csrf = re.findall(
                r'name="csrf" value="([0-9a-f]+)"', (await client.get("/controls")).text
            )[0]
            form = {"csrf": csrf, "action": "stop-tenant", "target": "tenant-1", "reason": "r"}
            question = (await client.post("/controls", data=form)).text
            assert "6 calls are live now" in question
            assert "the first 4 of 6" in question
            # Beside them, the running calls it would ask to stop: none.
            assert _rows(question) == [PAGE, 1]
            given = await client.post("/controls", data={**form, "confirmed": "yes"})
            entry = (await client.get(given.headers["location"])).text
            assert "Calls it ended (6)" in entry
            assert _rows(entry) == [PAGE, 1]
            assert _counts(entry) == ["calls 1 to 4 of 6"]
            audit = (await client.get("/audit")).text
            assert _rows(audit) == [PAGE]
            assert _counts(audit) == ["controls 1 to 4 of 10"]
            assert "try 8" in audit
            assert "try 5" not in audit
            assert "try 0" in (await client.get("/audit?page=3")).text
            overview = (await client.get("/overview")).text
            assert _counts(overview) == ["tenants 1 to 4 of 10"]
            assert _rows(overview) == [PAGE]
            ledger = (await client.get("/")).text
            assert _rows(ledger) == [PAGE]
            assert 'of <span id="total">55</span>' in ledger
            waiting = (await client.get("/waiting")).text
            assert all(rows <= PAGE for rows in _rows(waiting))
            links = re.findall(
                r'href="(/calls/[A-Za-z0-9_-]+)"', (await client.get("/?tenant=noisy")).text
            )
            history = (await client.get(links[0])).text
            assert _rows(history) == [PAGE]
            [said] = _counts(history)
            assert re.fullmatch(r"transitions 1 to 4 of (1[0-9])", said), said


async def test_a_call_its_responses_end_made_ready_is_listed_ready() -> None:
    """A call validated at its own end is assembling until its response ends well, which is
    no event of its own: the waiting page then lists it ready and the live feed sends it."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await start(runtime)
        call = key("late")
        await runtime.feed(opened(call) + finished(call))
        await runtime.settle()
        async with client_of(runtime.log) as (client, console):
            view = console.feed.view
            assert view.count_in(Stage.ASSEMBLING) == 1
            sequence = view.sequence
            await runtime.feed(response_ended(call))
            await runtime.settle()
            with trio.fail_after(5):
                await console.feed.changed_after(sequence)
            assert view.count_in(Stage.ASSEMBLING) == 0
            [changed] = view.changed_after(sequence, RowFilter(), limit=10)
            assert changed.stage is Stage.READY
            waiting = html.unescape((await client.get("/waiting")).text)
            assert "Ready, not yet claimed (1)" in waiting
            assert ">late<" in waiting


@pytest.mark.slow(seconds=4)
async def test_the_controls_answer_while_heavy_pages_are_drawn() -> None:
    """Eight requests of a waiting page of 1,000 calls at once: the controls page answers
    while the first of them is still being drawn (they take turns, in slices), not after
    them all."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        for tenant in range(20):
            await _waiting_calls(runtime, 50, tenant=f"tenant-{tenant}", tool="send_email")
        async with client_of(runtime.log, page_size=1000) as (client, console):
            assert console.feed.view.count_in(Stage.WAITING) == 1000
            done: list[str] = []

            async def ask(path: str) -> None:
                response = await client.get(path)
                assert response.status_code == 200
                done.append(path)

            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(ask, "/waiting")
                # Until they are being drawn: a page drawn whole would hold this task until
                # every one of them was done.
                await trio.sleep(0.01)
                await ask("/controls")
                heavy_before = len(done) - 1
            assert done[heavy_before] == "/controls"
            assert heavy_before <= 1, done
            assert len(done) == 9


async def test_a_page_after_the_last_says_so() -> None:
    """Asked for a page past the end (or a number too large to count to), every paged page
    says which page was asked for, which is the last and how many there are, and links to the
    last; a number that is none asks for the first."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await _waiting_calls(runtime, 3, tenant="acme", tool="get_weather")
        async with client_of(runtime.log, page_size=PAGE) as (client, _):
            ledger = (await client.get("/?page=99")).text
            assert "page 99 is past the last page, 1" in ledger
            assert 'of <span id="total">3</span>' not in ledger
            assert "calls 9801" not in ledger
            assert 'href="?page=1">the last page' in ledger
            huge = "9" * 40
            assert "is past the last page, 1" in (await client.get(f"/?page={huge}")).text
            for path in ("/?page=-3", "/?page=x"):
                response = await client.get(path)
                assert response.status_code == 200, path
                assert 'of <span id="total">3</span>' in response.text
            for path, said in [
                (f"/overview?page={huge}", "past the last page, 1 (1 tenants)"),
                ("/audit?page=7", "page 7 is past the last page, 1 (0 controls)"),
                ("/waiting?running=5", "page 5 is past the last page, 1 (0 calls)"),
            ]:
                page = html.unescape((await client.get(path)).text)
                assert said in page, path
            link = re.search(r'href="(/calls/[A-Za-z0-9_-]+)"', ledger)
            assert link is None
            first = (await client.get("/")).text
            link = re.search(r'href="(/calls/[A-Za-z0-9_-]+)"', first)
            assert link is not None
            history = (await client.get(f"{link[1]}?page=50")).text
            assert "page 50 is past the last page, 1" in history
