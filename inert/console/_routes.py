"""The console's pages, one handler each: what it reads of the view and which page of it.

Every list a page shows is one page long (``Paging``, the console's page size), found without
walking every call where the view keeps it in order (the ledger unfiltered, a stage), and
walked in slices where it does not (a filter, the overview). A field that takes an identity
(a filter, a control's target and tenant) takes it as the pages show it, percent-encoded
(``typed_id``): what an operator copies from a page names the same call, response, tool or
tenant, and text without ``%`` is taken as it is.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from itertools import islice
from typing import Any
from urllib.parse import unquote, urlencode

import trio
from starlette.requests import Request
from starlette.responses import (
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)

from ..events import InertError, OperatorControl, RefusedError
from ..events._identity import key_part
from ..projections import AuditEntry
from ..projections._controls import (
    ACTIONS,
    TENANT_ACTIONS,
    control_event,
    control_of,
    target_of,
)
from ..projections._shown import (
    STATES,
    FilterError,
    RowFilter,
    Stage,
    shown_time,
    stage_named,
    state_named,
    time_named,
)
from ._auth import same_origin
from ._pages import Paging, chart, page_number, paging, render
from ._slices import Slices, page_of
from ._view import ConsoleView, key_of_token

OVERVIEW_WINDOW = timedelta(hours=1)
LIVE_BATCH_SECONDS = 0.2
"""How long the live feed gathers changes before it sends them (a page redraws at most this
often)."""
KEEPALIVE_SECONDS = 15.0
MAX_ID_FIELD = 8192
"""The longest a field naming an identity may be, as the pages show it (an identity of 512
characters, each up to 12 once percent-encoded, fits)."""
MAX_REASON_FIELD = 1000
FILTER_CHOICES = 500
"""The most tenants and tools a filter offers to choose from."""

_ID_FILTERS = ("tenant", "turn", "id", "tool")
_FILTERS = (*_ID_FILTERS, "stage", "state", "since", "until")
_LIVE = (Stage.ASSEMBLING, Stage.WAITING, Stage.READY)
_SECTIONS = (
    ("waiting", "Waiting for a person's confirmation", "waiting for", (Stage.WAITING,)),
    ("ready", "Ready, not yet claimed", "ready for", (Stage.READY,)),
    (
        "running",
        "Running: dispatched, no outcome yet",
        "running for",
        (
            Stage.RUNNING,
            Stage.STOPPING,
        ),
    ),
)
"""The lists of the waiting page: the query parameter of each one's page, its title, what
its age column says, and its stages."""


def typed_id(text: str) -> str:
    """The identity a field names, given as the pages show it (``key_part``'s inverse); text
    whose escapes are no UTF-8 (no page shows such) is taken as it is."""
    try:
        return unquote(text, errors="surrogatepass")
    except UnicodeDecodeError:
        return text


def _view(request: Request) -> ConsoleView:
    view: ConsoleView = request.app.state.console.feed.view
    return view


def _principal(request: Request) -> str:
    principal: str = request.scope["inert.console.principal"]
    return principal


# --- the ledger and a call -----------------------------------------------------------------------


def _row_filter(request: Request) -> RowFilter:
    """The filter the query asks for (``FilterError`` for a stage, state or time that is
    none: never ignored, which would show calls the operator did not ask for)."""
    asked = request.query_params
    ids = {name: typed_id(asked.get(name, "")[:MAX_ID_FIELD]) or None for name in _ID_FILTERS}
    stage, state = asked.get("stage", "").strip(), asked.get("state", "").strip()
    since, until = asked.get("since", "").strip(), asked.get("until", "").strip()
    return RowFilter(
        **ids,
        stage=stage_named(stage) if stage else None,
        state=state_named(state) if state else None,
        since=time_named(since) if since else None,
        until=time_named(until) if until else None,
    )


def _filters_shown(shown: RowFilter) -> dict[str, str]:
    """The filter as the form and the links give it back: ids as the pages show them, times
    in the pages' format."""
    shown_values: dict[str, str] = {}
    for name in _FILTERS:
        value = getattr(shown, name)
        if value is None:
            continue
        if name in _ID_FILTERS:
            shown_values[name] = key_part(value)
        elif name in ("since", "until"):
            shown_values[name] = shown_time(value)
        else:
            shown_values[name] = str(value.value)
    return shown_values


async def ledger(request: Request) -> Response:
    view = _view(request)
    try:
        shown = _row_filter(request)
    except FilterError as error:
        return await render(request, "error.html", {"message": str(error)}, status_code=400)
    size: int = request.app.state.console.settings.page_size
    number = page_number(request)
    offset = (number - 1) * size
    if shown == RowFilter():
        total, found = len(view), view.newest(offset=offset, limit=size)
    else:
        found, total = await page_of(view.newest_first(shown), offset=offset, limit=size)
    calls = view.views(found)
    page = Paging(name="page", number=number, size=size, total=total)
    filters = _filters_shown(shown)
    return await render(
        request,
        "ledger.html",
        {
            "calls": calls,
            "paging": page,
            "filters": filters,
            "live_query": urlencode({**filters, "after": view.sequence, "page": number}),
            "states": STATES,
            "stages": [stage.value for stage in Stage],
            "tenants": view.tenants(FILTER_CHOICES),
            "tools": view.tools(FILTER_CHOICES),
            "page_size": size,
        },
    )


async def call(request: Request) -> Response:
    console = request.app.state.console
    key = key_of_token(request.path_params["token"])
    shown = None if key is None else console.feed.view.call(key)
    if key is None or shown is None:
        return await render(request, "error.html", {"message": "no such call"}, status_code=404)
    view = console.feed.view
    history = view.history(key)
    page = paging(request, len(history))
    steps = [
        (step, view.recorded_at(key, step.position))
        for step in history[page.offset : page.offset + page.size]
    ]
    trace_url = (
        None
        if shown.trace_id is None
        else console.settings.trace_url.format(trace_id=shown.trace_id)
    )
    return await render(
        request,
        "call.html",
        {
            "call": shown,
            "history": steps,
            "paging": page,
            "trace_url": trace_url,
        },
    )


async def waiting(request: Request) -> Response:
    view = _view(request)
    sections = []
    for name, title, since_label, stages in _SECTIONS:
        page = paging(request, view.count_in(*stages), name=name)
        calls = view.views(view.in_stage(*stages, offset=page.offset, limit=page.size))
        sections.append(
            {
                "title": title,
                "since_label": since_label,
                "paging": page,
                "calls": calls,
                "confirmation": Stage.WAITING in stages,
            }
        )
    return await render(
        request, "waiting.html", {"sections": sections, "watched": view.watched_sequence}
    )


async def overview(request: Request) -> Response:
    console = request.app.state.console
    counts: dict[str, Counter[Stage]] = {}
    slices = Slices()
    for tenant, stage in console.feed.view.recent(console.feed.now() - OVERVIEW_WINDOW):
        counts.setdefault(tenant, Counter())[stage] += 1
        await slices.due()
    rows, height, left_out = chart(counts)
    totals = {stage: sum(stages.get(stage, 0) for stages in counts.values()) for stage in Stage}
    tenants = sorted(counts)
    page = paging(request, len(tenants))
    shown = tenants[page.offset : page.offset + page.size]
    return await render(
        request,
        "overview.html",
        {
            "counts": [(tenant, counts[tenant]) for tenant in shown],
            "paging": page,
            "bars": rows,
            "height": height,
            "left_out": left_out,
            "stages": list(Stage),
            "totals": totals,
        },
    )


# --- the audit and the controls -------------------------------------------------------------------


async def audit(request: Request) -> Response:
    view = _view(request)
    entries, refusals = view.partitions.entries(), view.projections.audit.refusals()
    page = paging(request, len(entries) + len(refusals))
    # Both lists are in log order: merged from their ends, the last first.
    newest: Any = heapq.merge(
        reversed(entries), reversed(refusals), key=lambda entry: -entry.position
    )
    shown: list[AuditEntry] = list(islice(newest, page.offset, page.offset + page.size))
    return await render(request, "audit.html", {"entries": shown, "paging": page})


async def audit_entry(request: Request) -> Response:
    console = request.app.state.console
    entry = console.feed.entry(request.path_params["position"])
    if entry is None:
        return await render(request, "error.html", {"message": "no such control"}, status_code=404)
    page = paging(request, len(entry.ended))
    view = console.feed.view
    # A call the ledger forgot is shown as such: ``None`` in its place.
    ended = [view.call(key) for key in entry.ended[page.offset : page.offset + page.size]]
    size = console.settings.page_size
    stopping = [
        (view.call(key), outcome) for key, outcome in islice(entry.asked_to_stop.items(), size)
    ]
    # Live calls it concerns that no runtime has ended: held by it until one opens the log.
    running = await console.feed.runtime_running()
    event = control_of(entry)
    held: list[Any] = []
    held_total = 0
    if not running and event is not None and event.STOPS:
        shown = await console.feed.preview(event)
        held_total = len(shown.ending)
        held = list(view.views([row.key for row in shown.ending[:size]]))
    return await render(
        request,
        "audit_entry.html",
        {
            "entry": entry,
            "ended": ended,
            "paging": page,
            "stopping": stopping,
            "runtime_running": running,
            "held": held,
            "held_total": held_total,
        },
    )


def _field(form: Any, name: str, limit: int) -> str:
    value = form.get(name)
    if not isinstance(value, str):
        return ""
    return value.strip()[:limit]


async def controls(request: Request) -> Response:
    """The controls' form, and a control given; never taking turns with the pages that list
    calls (an emergency stop waits for none of them)."""
    console = request.app.state.console
    principal = _principal(request)
    if request.method == "GET":
        asked = {
            name: typed_id(request.query_params.get(name, "")[:MAX_ID_FIELD])
            for name in ("target", "tenant")
        }
        asked["action"] = request.query_params.get("action", "")
        return await _controls_page(request, asked, None)
    async with request.form(max_files=0, max_fields=16) as form:
        if not same_origin(request) or not console.auth.csrf_ok(principal, form.get("csrf")):
            return await render(
                request,
                "error.html",
                {"message": "this form is not one the console gave you (CSRF check): reload it"},
                status_code=403,
            )
        action = _field(form, "action", MAX_ID_FIELD)
        target = typed_id(_field(form, "target", MAX_ID_FIELD))
        tenant = typed_id(_field(form, "tenant", MAX_ID_FIELD)) or None
        reason = _field(form, "reason", MAX_REASON_FIELD)
        confirmed = _field(form, "confirmed", MAX_ID_FIELD) == "yes"
    asked = {"action": action, "target": target, "tenant": tenant or ""}
    problem = None
    if action not in ACTIONS:
        problem = "choose a control"
    elif not target:
        problem = "name the response, tool or tenant the control is for"
    elif not reason:
        problem = "say why: the reason is written to the audit"
    if problem is not None:
        return await _controls_page(request, asked, problem, reason=reason)
    event = control_event(action, target, tenant=tenant, operator=principal, reason=reason)
    idle = console.feed.without_effect(event)
    if idle is not None:
        return await _controls_page(
            request, asked, f"{idle}: this would change nothing, and was not given", reason=reason
        )
    # A principal who is no operator is refused at once (and audited), asked nothing.
    if event.STOPS and not confirmed and console.settings.is_operator(principal):
        return await _confirm_control(request, event, action, reason)
    try:
        entry = await console.feed.give(event)
    except RefusedError as error:
        return await render(
            request,
            "error.html",
            {"message": f"refused: {error}. The attempt is written to the audit.", "audit": True},
            status_code=403,
        )
    except InertError as error:
        return await render(request, "error.html", {"message": str(error)}, status_code=400)
    base = request.scope.get("root_path", "")
    return RedirectResponse(f"{base}/audit/{entry.position}", status_code=303)


async def _controls_page(
    request: Request, asked: dict[str, str], problem: str | None, *, reason: str = ""
) -> Response:
    """The controls' form, with the controls in force now."""
    return await render(
        request,
        "controls.html",
        {
            "actions": ACTIONS,
            "asked": asked,
            "problem": problem,
            "reason": reason,
            "in_force": request.app.state.console.feed.in_force(),
        },
        status_code=200 if problem is None else 400,
    )


_HEADINGS = {
    "quarantine-response": ("Quarantine of response", "Quarantine response"),
    "disable-tool": ("Disabling of tool", "Disable tool"),
    "stop-tenant": ("Emergency stop of tenant", "Stop tenant"),
}
"""The question a stopping control's confirmation asks and the button that gives it, before
what it names."""


async def _confirm_control(
    request: Request, event: OperatorControl, action: str, reason: str
) -> Response:
    """A stopping control's question: the calls it ends and the running calls it asks to stop
    (the first page of each), whether a runtime runs to act on it, and whether what it names
    was ever seen on the log."""
    feed = request.app.state.console.feed
    size: int = request.app.state.console.settings.page_size
    shown = await feed.preview(event)
    view = _view(request)
    _, target = target_of(event)
    return await render(
        request,
        "confirm.html",
        {
            "action": action,
            "label": ACTIONS[action],
            "heading": _HEADINGS[action][0],
            "button": _HEADINGS[action][1],
            "target": target,
            "tenant": event.tenant if action not in TENANT_ACTIONS else None,
            "reason": reason,
            "total": len(shown.ending),
            "live": view.views([row.key for row in shown.ending[:size]]),
            "stopping_total": len(shown.stopping),
            "stopping": view.views([row.key for row in shown.stopping[:size]]),
            "unseen": feed.never_seen(event),
            "runtime_running": await feed.runtime_running(),
        },
    )


# --- the live feed ------------------------------------------------------------------------------


def _after(request: Request) -> int:
    try:
        return int(request.query_params.get("after", "0"))
    except ValueError:
        return 0


async def live(request: Request) -> Response:
    """Server-sent events: the ledger rows a page shows that changed since it was drawn."""
    console = request.app.state.console
    try:
        shown = _row_filter(request)
    except FilterError as error:
        return PlainTextResponse(f"{error}\n", status_code=400)
    after = _after(request)
    limit = console.settings.page_size

    async def count() -> int:
        view = console.feed.view
        if shown == RowFilter():
            return len(view)
        async with console.drawing:
            return (await page_of(view.newest_first(shown), offset=0, limit=0))[1]

    async def events() -> AsyncIterator[str]:
        sequence = after
        yield f"event: hello\ndata: {json.dumps({'sequence': console.feed.view.sequence})}\n\n"
        while True:
            with trio.move_on_after(KEEPALIVE_SECONDS) as waited:
                await console.feed.changed_after(sequence)
            if waited.cancelled_caught:
                yield ": still here\n\n"
                continue
            await trio.sleep(LIVE_BATCH_SECONDS)
            view = console.feed.view
            now = console.feed.now()
            changed = view.changed_after(sequence, shown, limit=limit)
            sequence = view.sequence
            if changed:
                data = {
                    "sequence": sequence,
                    "position": view.position,
                    "total": await count(),
                    "rows": [call.json(now) for call in changed],
                }
                yield f"event: rows\ndata: {json.dumps(data)}\n\n"

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
    )


async def live_waiting(request: Request) -> Response:
    """Server-sent events for the waiting and running page: ``changed`` whenever a call
    entered or left one of its stages since the page was drawn (the page is then drawn again:
    its lists are in the order calls entered their stages, and paged)."""
    console = request.app.state.console
    after = _after(request)

    async def events() -> AsyncIterator[str]:
        watched = after
        yield f"event: hello\ndata: {json.dumps({'sequence': watched})}\n\n"
        while True:
            with trio.move_on_after(KEEPALIVE_SECONDS) as waited:
                while console.feed.view.watched_sequence <= watched:
                    await console.feed.changed_after(console.feed.view.sequence)
            if waited.cancelled_caught:
                yield ": still here\n\n"
                continue
            await trio.sleep(LIVE_BATCH_SECONDS)
            view = console.feed.view
            watched = view.watched_sequence
            data = {"sequence": watched, "position": view.position}
            yield f"event: changed\ndata: {json.dumps(data)}\n\n"

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
    )
