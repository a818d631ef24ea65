"""The console over HTTP: every request authenticated, forms guarded, controls through the
runtime's authorizer and audit, ids escaped, and never an argument value on a page."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import AsyncIterator
from datetime import timedelta

import attrs
import pytest
import trio
from console_support import (
    HOSTILE_CALL,
    HOSTILE_RESPONSE,
    OPERATOR,
    OPERATOR_TOKEN,
    SECRET,
    TOOLS,
    TRACEPARENT,
    VIEWER,
    VIEWER_TOKEN,
    client_of,
    finished,
    key,
    opened,
    response_ended,
    start,
)
from starlette.types import Message, Scope

from inert import ArgumentsAppended, PendingConfirmation, Phase, Runtime, open_runtime
from inert.console import CONTENT_SECURITY_POLICY, Console, ConsoleSettings
from inert.console._view import RowFilter
from inert.events import ConfigurationError, TraceContext
from inert.events._identity import key_part
from inert.projections._shown import shown_time

PAGES = ["/", "/waiting", "/overview", "/audit", "/controls", "/static/console.js"]


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None
    return found[1]


async def _runtime_with_calls(runtime: Runtime) -> None:
    await start(runtime)
    await runtime.feed(opened(key("call_1")) + opened(key("call_2")))
    await runtime.feed(opened(key("call_3")) + finished(key("call_3")))
    await runtime.settle()


@pytest.mark.parametrize("path", [*PAGES, "/live", "/calls/x", "/audit/1"])
async def test_every_request_without_a_token_is_refused(path: str) -> None:
    """No token, a wrong token or a wrong cookie: 401, and the security headers still."""
    async with (
        open_runtime(log="memory://", tools=TOOLS) as runtime,
        client_of(runtime.log, token=None) as (client, _),
    ):
        for headers in ({}, {"authorization": "Bearer wrong-token-0123456789"}):
            response = await client.get(path, headers=headers)
            assert response.status_code == 401
            assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        client.cookies.set("inert_console", "0" * 64)
        assert (await client.get(path)).status_code == 401


async def test_the_printed_token_signs_a_browser_in_with_a_cookie() -> None:
    """The token in the address sets an HttpOnly, SameSite=Strict cookie that is not the token,
    and the browser is sent on to the same page without it."""
    async with (
        open_runtime(log="memory://", tools=TOOLS) as runtime,
        client_of(runtime.log, token=None) as (client, _),
    ):
        response = await client.get(f"/waiting?token={OPERATOR_TOKEN}&tenant=acme")
        assert response.status_code == 303
        assert response.headers["location"] == "/waiting?tenant=acme"
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "samesite=strict" in cookie.lower()
        assert OPERATOR_TOKEN not in cookie
        page = await client.get("/waiting")
        assert page.status_code == 200
        assert f"{OPERATOR} (operator)" in page.text
        assert (await client.get("/?token=not-a-token-at-all-0000")).status_code == 401


async def test_a_trusted_proxy_names_the_principal_and_no_one_else_does() -> None:
    """The configured header names the principal from a trusted address only."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        options = {"principal_header": "X-Forwarded-User", "trusted_proxies": {"127.0.0.1"}}
        async with client_of(runtime.log, token=None, **options) as (client, _):
            page = await client.get("/", headers={"x-forwarded-user": "viewer:pat"})
            assert page.status_code == 200
            assert "viewer:pat (read only)" in page.text
        untrusted = {**options, "trusted_proxies": {"10.0.0.1"}}
        async with client_of(runtime.log, token=None, **untrusted) as (client, _):
            response = await client.get("/", headers={"x-forwarded-user": OPERATOR})
            assert response.status_code == 401


def test_a_console_without_a_way_to_authenticate_is_refused() -> None:
    """Settings with no token and no proxy header, or a short token, are a configuration error."""
    with pytest.raises(ConfigurationError, match="tokens or a principal header"):
        ConsoleSettings()
    with pytest.raises(ConfigurationError, match="at least 16 characters"):
        ConsoleSettings(tokens={"short": OPERATOR})
    with pytest.raises(ConfigurationError, match="trace_id"):
        ConsoleSettings(tokens={OPERATOR_TOKEN: OPERATOR}, trace_url="http://jaeger/")


async def test_every_page_has_a_strict_content_security_policy() -> None:
    """Own script and styles only, nothing inline, no frames, no caching; no inline script or
    style on any page."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log) as (client, _):
            for path in PAGES:
                response = await client.get(path)
                assert response.status_code == 200, path
                policy = response.headers["content-security-policy"]
                assert "default-src 'self'" in policy
                assert "unsafe-inline" not in policy
                assert response.headers["x-frame-options"] == "DENY"
                assert response.headers["cache-control"] == "no-store"
                if path != "/static/console.js":
                    assert "<script>" not in response.text
                    assert " style=" not in response.text
                    assert not re.search(r"<[^>]+\son[a-z]+=", response.text)


async def test_a_form_without_its_token_or_from_elsewhere_is_refused() -> None:
    """A control posted with a wrong CSRF token, or from another origin, is refused (403) and
    nothing is written to the log."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log) as (client, _):
            head = await runtime.log.head()
            csrf = _csrf((await client.get("/controls")).text)
            form = {"action": "stop-tenant", "target": "acme", "reason": "x", "confirmed": "yes"}
            wrong = await client.post("/controls", data={**form, "csrf": "0" * 64})
            assert wrong.status_code == 403
            elsewhere = await client.post(
                "/controls",
                data={**form, "csrf": csrf},
                headers={"origin": "http://evil.example"},
            )
            assert elsewhere.status_code == 403
            # The viewer's token is no good for the operator's forms either.
            viewer = await client.post(
                "/controls",
                data={**form, "csrf": csrf},
                headers={"authorization": f"Bearer {VIEWER_TOKEN}"},
            )
            assert viewer.status_code == 403
            assert await runtime.log.head() == head
            assert runtime.phase(key("call_1")) is Phase.COLLECTING


async def test_an_operator_stops_a_tenant_after_confirming_and_sees_what_it_ended() -> None:
    """The emergency stop asks first, then goes through the runtime's actors: the page it
    leads to names the control, its reason and the calls it ended; the audit page lists it."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log) as (client, _):
            csrf = _csrf((await client.get("/controls")).text)
            form = {
                "csrf": csrf,
                "action": "stop-tenant",
                "target": "acme",
                "reason": "incident 42",
            }
            asked = await client.post("/controls", data=form)
            assert asked.status_code == 200
            assert "Emergency stop of tenant" in asked.text
            assert "3 calls are live now" in asked.text
            assert runtime.phase(key("call_1")) is Phase.COLLECTING
            given = await client.post("/controls", data={**form, "confirmed": "yes"})
            assert given.status_code == 303
            entry = await client.get(given.headers["location"])
            assert "incident 42" in entry.text
            assert "Calls it ended (3)" in entry.text
            assert entry.text.count("tenant_stopped") >= 1
            audit = await client.get("/audit")
            assert "incident 42" in audit.text
        for call in ("call_1", "call_2", "call_3"):
            assert runtime.phase(key(call)) is Phase.CANCELLED
        [control] = runtime.projections.audit.entries()
        assert (control.operator, control.reason) == (OPERATOR, "incident 42")


async def test_a_control_by_someone_not_an_operator_is_refused_and_audited() -> None:
    """The viewer's control is refused through the runtime's authorizer: nothing stops, and the
    audit (the log's) shows the attempt, marked refused."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log, token=VIEWER_TOKEN) as (client, _):
            page = (await client.get("/controls")).text
            assert "are no operator here" in page
            form = {
                "csrf": _csrf(page),
                "action": "disable-tool",
                "target": "get_weather",
                "reason": "curious",
            }
            refused = await client.post("/controls", data=form)
            assert refused.status_code == 403
            assert "is not an operator" in refused.text
            await runtime.settle()
            audit = await client.get("/audit")
            assert "✗ refused" in audit.text
            assert VIEWER in audit.text
        assert runtime.phase(key("call_1")) is Phase.COLLECTING
        [refusal] = runtime.projections.audit.refusals()
        assert (refusal.operator, refusal.control, refusal.scope) == (
            VIEWER,
            "operator.tool_disabled",
            {"tool": "get_weather", "tenant": None},
        )


async def test_a_control_needs_a_reason_and_a_target() -> None:
    """An empty reason or target is sent back with the problem named; nothing is written."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log) as (client, _):
            csrf = _csrf((await client.get("/controls")).text)
            head = await runtime.log.head()
            for form, problem in [
                ({"action": "stop-tenant", "target": "acme", "reason": " "}, "say why"),
                ({"action": "stop-tenant", "target": "", "reason": "x"}, "name the response"),
                ({"action": "explode", "target": "acme", "reason": "x"}, "choose a control"),
            ]:
                response = await client.post("/controls", data={**form, "csrf": csrf})
                assert response.status_code == 400
                assert problem in response.text
            assert await runtime.log.head() == head


async def test_hostile_provider_ids_are_shown_as_text() -> None:
    """A call id and a response id that are markup read as ``inert ledger`` shows them
    (percent-encoded) on the ledger, the call's page and the live feed's JSON, never as markup;
    the call's link carries them as one URL-safe word."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await start(runtime)
        hostile = key(HOSTILE_CALL, response=HOSTILE_RESPONSE)
        await runtime.feed(opened(hostile))
        await runtime.settle()
        async with client_of(runtime.log) as (client, console):
            ledger = (await client.get("/")).text
            assert HOSTILE_CALL not in ledger
            assert "%3Cscript%3Ealert%28%22x%22%29%3C%2Fscript%3E" in ledger
            link = re.search(r'href="(/calls/[A-Za-z0-9_-]+)"', ledger)
            assert link is not None
            page = (await client.get(link[1])).text
            assert HOSTILE_CALL not in page
            assert HOSTILE_RESPONSE not in page
            assert "%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert%281%29%3E" in page
            assert (await client.get("/calls/not-a-key")).status_code == 404
            [call] = console.feed.view.changed_after(0, RowFilter(), limit=10)
            assert call.json(console.feed.now())["call"] == key_part(HOSTILE_CALL)


async def test_no_argument_value_reaches_any_page() -> None:
    """Calls in every stage, with the marker in their arguments: no page, call page, audit
    entry or live row holds it."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await _runtime_with_calls(runtime)
        mail, done = key("mail", response="resp_2"), key("done", response="resp_2")
        await runtime.feed(opened(mail, tool="send_email") + finished(mail))
        await runtime.feed(opened(done) + finished(done) + response_ended(done))
        await runtime.settle()
        async for ready in runtime.ready_calls():
            dispatch = await runtime.claim(ready, executor="worker")
            assert SECRET in str(dict(dispatch.arguments))
            break
        async with client_of(runtime.log) as (client, console):
            csrf = _csrf((await client.get("/controls")).text)
            form = {"csrf": csrf, "action": "quarantine-response", "target": "resp_1"}
            asked = {**form, "reason": "r", "tenant": "acme"}
            question = await client.post("/controls", data=asked)
            assert SECRET not in question.text
            given = await client.post("/controls", data={**asked, "confirmed": "yes"})
            pages = [*PAGES, given.headers["location"]]
            ledger = (await client.get("/")).text
            pages += re.findall(r'href="(/calls/[A-Za-z0-9_-]+)"', ledger)
            assert len(pages) > len(PAGES) + 3
            for path in pages:
                response = await client.get(path)
                assert response.status_code == 200, path
                assert SECRET not in response.text, path
            view = console.feed.view
            rows = view.changed_after(0, RowFilter(), limit=100)
            assert SECRET not in str([row.json(console.feed.now()) for row in rows])


async def test_a_call_links_to_its_trace() -> None:
    """The turn's W3C trace id links to the configured trace UI, Jaeger's pattern by default."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await runtime.start_turn(
            tenant="acme",
            conversation="c1",
            turn="t1",
            principal="user:alice",
            trace=TraceContext(traceparent=TRACEPARENT),
        )
        await runtime.feed(opened(key()))
        await runtime.settle()
        async with client_of(runtime.log) as (client, _):
            ledger = (await client.get("/")).text
            link = re.search(r'href="(/calls/[A-Za-z0-9_-]+)"', ledger)
            assert link is not None
            page = (await client.get(link[1])).text
            assert 'href="http://127.0.0.1:16686/trace/4bf92f3577b34da6a3ce929d0e0e4736"' in page
        options = {"trace_url": "https://traces.example/t/{trace_id}?x=1"}
        async with client_of(runtime.log, **options) as (client, _):
            page = (await client.get(link[1])).text
            assert "https://traces.example/t/4bf92f3577b34da6a3ce929d0e0e4736?x=1" in page


async def test_the_ledger_filters_and_pages() -> None:
    """Filters by tenant, turn, state and tool keep only their calls; pages hold page_size
    calls, the one changed last first."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await _runtime_with_calls(runtime)
        await start(runtime, tenant="other")
        await runtime.feed(opened(key("call_9", tenant="other")))
        await runtime.settle()
        async with client_of(runtime.log, page_size=2) as (client, _):
            first = (await client.get("/")).text
            shown = '<span id="range-first">1</span> to <span id="range-last">2</span>'
            assert f'calls {shown} of <span id="total">4</span>' in first
            assert "call_9" in first
            second = (await client.get("/?page=2")).text
            assert '<span id="range-first">3</span> to <span id="range-last">4</span>' in second
            assert "call_9" not in (await client.get("/?tenant=acme")).text
            collecting = (await client.get("/?state=collecting&page_size=9")).text
            assert "call_1" in collecting or "call_2" in collecting
            assert "call_3" not in collecting
            of_tool = (await client.get("/?tenant=acme&turn=t1&tool=get_weather")).text
            assert 'of <span id="total">3</span>' in of_tool


async def test_the_overview_and_the_waiting_page() -> None:
    """The overview charts the last hour's calls per tenant by stage (SVG, labels escaped as
    ids are); the waiting page lists calls waiting for a person, ready and running, with their
    ages."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await runtime.start_turn(
            tenant="<b>t</b>", conversation="c1", turn="t1", principal="user:alice"
        )
        odd = key("call_1", tenant="<b>t</b>")
        await runtime.feed(opened(odd, tool="send_email") + finished(odd) + response_ended(odd))
        await runtime.settle()
        async with client_of(runtime.log) as (client, _):
            overview = (await client.get("/overview")).text
            assert "<svg" in overview
            assert "%3Cb%3Et%3C%2Fb%3E" in overview
            assert "<b>t</b>" not in overview
            waiting = (await client.get("/waiting")).text
            assert "Waiting for a person's confirmation (1)" in html.unescape(waiting)
            assert "data-first=" in waiting


async def test_the_console_follows_appends_of_another_writer() -> None:
    """A call opened after the console started shows up without a restart."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await start(runtime)
        async with client_of(runtime.log) as (client, console):
            sequence = console.feed.view.sequence
            await runtime.feed(opened(key("late")))
            with trio.fail_after(5):
                await console.feed.changed_after(sequence)
            assert "late" in (await client.get("/")).text


async def test_what_a_browser_can_send_is_never_answered_with_a_server_error() -> None:
    """A call's word of deeply nested JSON, a word of no JSON, escapes that are no UTF-8 and
    nonsense paging: 400 or 404 with a page, or the page itself, never 500."""
    deep = base64.urlsafe_b64encode(b"[" * 20_000).decode().rstrip("=")
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log) as (client, _):
            for path in (f"/calls/{deep}", "/calls/" + "_" * 5000, "/calls/%FF%FE"):
                response = await client.get(path)
                assert response.status_code == 404, path
                assert "no such call" in response.text
            for path in (
                "/?tenant=%25FF%25FE&turn=%25ED%25A0",
                "/?page=-3&after=x",
                "/waiting?waiting=1e9&ready=nan",
                "/audit?page=99999999999999999999999",
            ):
                assert (await client.get(path)).status_code < 500, path


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [
        ("https://t.example/{trace_id}/{0}", r"holds \{0\}, but only \{trace_id\}"),
        ("https://t.example/{trace_id}/{unknown}", r"holds \{unknown\}"),
        ("https://t.example/{trace_id}/{trace_id!r}", r"holds \{trace_id!r\}"),
        ("https://t.example/{trace_id}/{", "Single '{'"),
        ("https://t.example/{trace_id}}", "Single '}'"),
        ("https://t.example/{{trace_id}}", r"must hold \{trace_id\}"),
    ],
)
def test_a_trace_url_that_cannot_be_filled_in_is_refused_at_start(
    pattern: str, problem: str
) -> None:
    """A pattern ``str.format`` cannot fill with the trace id alone is a one-line
    configuration error when the settings are made, not a failing page per traced call."""
    with pytest.raises(ConfigurationError, match=problem) as refused:
        ConsoleSettings(tokens={OPERATOR_TOKEN: OPERATOR}, trace_url=pattern)
    assert "\n" not in str(refused.value)
    literal = "https://t.example/{{x}}/{trace_id}"
    assert ConsoleSettings(tokens={OPERATOR_TOKEN: OPERATOR}, trace_url=literal).trace_url


async def test_the_ledger_searches_by_any_id_stage_and_time() -> None:
    """One id finds the calls it names whichever identity it is (conversation, turn,
    response, item, call); the stage filter takes the words the pages show; a time range keeps
    the calls seen in it; the ledger shows each call's conversation."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await _runtime_with_calls(runtime)
        await runtime.start_turn(tenant="acme", conversation="c2", turn="t2", principal="p")
        mail = key("mail", turn="t2", response="resp_2")
        mail = attrs.evolve(mail, conversation="c2")
        await runtime.feed(opened(mail, tool="send_email") + finished(mail) + response_ended(mail))
        await runtime.settle()
        async with client_of(runtime.log) as (client, console):
            everything = (await client.get("/")).text
            assert '<td data-col="conversation" class="id">c2</td>' in everything
            for found, calls in [
                ("c2", {"mail"}),
                ("t1", {"call_1", "call_2", "call_3"}),
                ("resp_2", {"mail"}),
                ("call_3", {"call_3"}),
                ("nothing", set()),
            ]:
                page = (await client.get("/", params={"id": found})).text
                assert set(re.findall(r'class="id">(call_\d|mail)</a>', page)) == calls, found
            waiting = (await client.get("/?stage=waiting")).text
            assert set(re.findall(r'class="id">(call_\d|mail)</a>', waiting)) == {"mail"}
            assert "<option selected>waiting</option>" in waiting
            assembling = (await client.get("/?stage=assembling")).text
            assert 'of <span id="total">3</span>' in assembling
            view = console.feed.view.call(mail)
            assert view is not None
            at = view.first_seen
            later = at + timedelta(hours=1)
            for query, total in [
                ({"since": shown_time(later)}, 0),
                ({"until": shown_time(at - timedelta(hours=1))}, 0),
                ({"since": shown_time(at - timedelta(hours=1)), "until": shown_time(later)}, 4),
                ({"since": (at - timedelta(hours=1)).date().isoformat()}, 4),
            ]:
                page = (await client.get("/", params=query)).text
                assert f'of <span id="total">{total}</span>' in page, query


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("state=waiting", "no state is called 'waiting'; the states are: collecting"),
        ("stage=collecting", "no stage is called 'collecting'; the stages are: assembling"),
        ("since=yesterday", "'yesterday' is no time: give ISO 8601"),
    ],
)
async def test_a_filter_that_names_nothing_is_answered_not_ignored(query: str, said: str) -> None:
    """An unknown stage, state or time is a 400 naming the valid ones, on the ledger and on
    the live feed: never ignored, which would show every call."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log) as (client, _):
            page = await client.get(f"/?{query}")
            assert page.status_code == 400
            assert said in html.unescape(page.text)
            live = await client.get(f"/live?{query}")
            assert live.status_code == 400
            assert said in live.text


async def test_the_waiting_page_names_whose_confirmation_and_until_when() -> None:
    """A call waiting for a confirmation shows its conversation, the principal of its turn and
    its confirmation's expiry, on the waiting page and on its own page, in ISO 8601 UTC."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await start(runtime)
        mail = key("mail")
        await runtime.feed(opened(mail, tool="send_email") + finished(mail) + response_ended(mail))
        await runtime.settle()
        [pending] = [call async for call in _pending(runtime)]
        expires = shown_time(pending.expires_at)
        async with client_of(runtime.log) as (client, console):
            view = console.feed.view.call(mail)
            assert view is not None
            assert (view.principal, view.confirmation_expires) == ("user:alice", pending.expires_at)
            waiting = (await client.get("/waiting")).text
            assert '<td class="id principal">user:alice</td>' in waiting
            assert f'<time datetime="{expires}">{expires}</time>' in waiting
            assert '<td class="id">c1</td>' in waiting
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", expires)
            page = (await client.get(f"/calls/{view.token}")).text
            assert 'awaits the confirmation of</dt><dd class="id">user:alice' in page
            assert expires in page


async def _pending(runtime: Runtime) -> AsyncIterator[PendingConfirmation]:
    for call in runtime.projections.ledger.rows():
        pending = await runtime.pending_confirmation(call.key)
        if pending is not None:
            yield pending


async def test_a_calls_history_says_when_each_transition_happened() -> None:
    """Each transition of a call's page carries the log's time of its record, in ISO 8601
    UTC; the ledger's snapshot (and so the state digest) holds no time."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log) as (client, console):
            view = console.feed.view.call(key("call_3"))
            assert view is not None
            page = (await client.get(f"/calls/{view.token}")).text
            rows = re.findall(r'<tr><td class="num">@(\d+)</td><td>(.*?)</td>', page)
            assert len(rows) >= 3
            recorded = {r.position: r.recorded_at for r in await runtime.log.read(1)}
            for position, cell in rows:
                moment = shown_time(recorded[int(position)])
                assert cell == f'<time datetime="{moment}">{moment}</time>', position
            snapshot = json.dumps(runtime.projections.ledger.snapshot())
            assert shown_time(recorded[int(rows[0][0])])[:10] not in snapshot


async def test_the_waiting_page_is_told_when_calls_enter_or_leave_its_stages() -> None:
    """The waiting page's feed says ``changed`` when a call starts waiting, and not for a
    fragment of a call that is assembling."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        await _runtime_with_calls(runtime)
        async with client_of(runtime.log) as (_, console):
            view = console.feed.view
            watched = view.watched_sequence
            sequence = view.sequence
            more = ArgumentsAppended(
                key=key("call_1"), data=b"x", offset=100, first_sequence=5, last_sequence=5
            )
            await runtime.feed([more])
            await runtime.settle()
            with trio.fail_after(5):
                await console.feed.changed_after(sequence)
            assert view.watched_sequence == watched
            mail = key("mail")
            await runtime.feed(
                opened(mail, tool="send_email") + finished(mail) + response_ended(mail)
            )
            await runtime.settle()
            with trio.fail_after(5):
                while view.watched_sequence == watched:
                    await console.feed.changed_after(view.sequence)
            events = await _waiting_events(console, f"/live/waiting?after={watched}")
            assert events[0] == "hello"
            assert events[1] == "changed"


async def _waiting_events(console: Console, path: str) -> list[str]:
    """The names of the first two events the waiting page's feed sends at ``path``."""
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
    names: list[str] = []

    async def receive() -> Message:
        await trio.sleep_forever()
        raise AssertionError

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def send(message: Message) -> None:
                nonlocal body
                chunk = message.get("body", b"")
                assert isinstance(chunk, bytes)
                body += chunk
                names[:] = re.findall(r"^event: (\w+)$", body.decode(), re.MULTILINE)
                if len(names) >= 2:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(console.app, scope, receive, send)
    return names
