"""The console's ASGI application: its routes, and the guards every request passes.

Each request is authenticated first (``Authenticator``); every response carries a strict content
security policy (the console's own script and styles only, nothing inline, no frames); every form
carries its principal's CSRF token and is refused from another origin. Controls go through the
runtime's ``give_control`` with the runtime's operator authorizer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import trio
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..events import InertError, Phase, RefusedError
from ..log import Log, open_log
from ._auth import COOKIE, Authenticator, same_origin
from ._feed import ACTIONS, LiveFeed, control_event
from ._pages import chart, render
from ._settings import ConsoleSettings
from ._view import RowFilter, Stage, key_of_token

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none';"
    " object-src 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}

OVERVIEW_WINDOW = timedelta(hours=1)
LIVE_BATCH_SECONDS = 0.2
"""How long the live feed gathers changes before it sends them (a page redraws at most this
often)."""
KEEPALIVE_SECONDS = 15.0
MAX_FORM_FIELD = 1000


class Console:
    """A console over one log: its view (kept live while ``running``) and its application.

    ``app`` is the ASGI application; ``console_app`` gives one that runs the console for its own
    lifespan. A host that mounts ``app`` inside its own server keeps the console running for its
    lifespan instead: ``async with console.running(): ...``.
    """

    def __init__(self, log: str | Log, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.auth = Authenticator(settings)
        self._log = log
        self._feed: LiveFeed | None = None
        self.app: ASGIApp = _guarded(self._starlette(), self.auth)

    @property
    def feed(self) -> LiveFeed:
        if self._feed is None:
            raise InertError("the console is not running: enter console.running() first")
        return self._feed

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Console]:
        """Open the log (which must exist), fold it, and follow it until the block ends."""
        async with _opened(self._log) as log, trio.open_nursery() as nursery:
            feed = LiveFeed(log, self.settings)
            await nursery.start(feed.follow)
            self._feed = feed
            try:
                yield self
            finally:
                self._feed = None
                nursery.cancel_scope.cancel()

    def _starlette(self) -> Starlette:
        @asynccontextmanager
        async def lifespan(app: Starlette) -> AsyncIterator[None]:
            # A console already running (its host's, or the command's) is not started again.
            if self._feed is not None:
                yield
                return
            async with self.running():
                yield

        app = Starlette(
            routes=[
                Route("/", _ledger),
                Route("/calls/{token}", _call),
                Route("/waiting", _waiting),
                Route("/overview", _overview),
                Route("/audit", _audit),
                Route("/audit/{position:int}", _audit_entry),
                Route("/controls", _controls, methods=["GET", "POST"]),
                Route("/live", _live),
                Mount("/static", StaticFiles(packages=[("inert.console", "static")])),
            ],
            lifespan=lifespan,
        )
        app.state.console = self
        return app


@asynccontextmanager
async def _opened(log: str | Log) -> AsyncIterator[Log]:
    if isinstance(log, Log):
        yield log
        return
    async with open_log(log, create=False) as opened:
        yield opened


def console_app(log: str | Log, settings: ConsoleSettings) -> ASGIApp:
    """An ASGI application showing one log (a URL, or a log opened already) and giving
    operator controls on it, running for the application's lifespan."""
    return Console(log, settings).app


# --- guards ------------------------------------------------------------------------------------


def _guarded(app: ASGIApp, auth: Authenticator) -> ASGIApp:
    """``app`` behind authentication, with the security headers on every response."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        connection = HTTPConnection(scope)
        token = connection.query_params.get("token")
        if token is not None:
            response = _sign_in(connection, auth, token)
        else:
            principal = auth.principal(connection)
            if principal is not None:
                scope["inert.console.principal"] = principal
                await app(scope, receive, send_with_headers)
                return
            response = PlainTextResponse(
                "not signed in: open the address the console printed when it started (with its"
                " token), or come through the proxy that names you\n",
                status_code=401,
                headers={"www-authenticate": 'Bearer realm="inert console"'},
            )
        await response(scope, receive, send_with_headers)

    return guarded


def _sign_in(connection: HTTPConnection, auth: Authenticator, token: str) -> Response:
    """The first request with a token: the cookie in its place, and the address without it."""
    if auth.principal_of_token(token) is None:
        return PlainTextResponse("this token opens nothing here\n", status_code=401)
    kept = [(name, value) for name, value in connection.query_params.multi_items()]
    query = urlencode([(name, value) for name, value in kept if name != "token"])
    target = connection.scope.get("root_path", "") + connection.url.path
    response = RedirectResponse(target + (f"?{query}" if query else ""), status_code=303)
    response.set_cookie(COOKIE, auth.cookie_of(token), httponly=True, samesite="strict", path="/")
    return response


def _console(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def _principal(request: Request) -> str:
    principal: str = request.scope["inert.console.principal"]
    return principal


# --- the ledger and a call -----------------------------------------------------------------------

_FILTERS = ("tenant", "turn", "state", "tool")
_STATES = [phase.value for phase in Phase if phase is not Phase.ABSENT]


def _row_filter(request: Request) -> RowFilter:
    values = {name: request.query_params.get(name) or None for name in _FILTERS}
    if values["state"] not in (None, *_STATES):
        values["state"] = None
    return RowFilter(**values)


async def _ledger(request: Request) -> Response:
    console = _console(request)
    view = console.feed.view
    shown = _row_filter(request)
    size = console.settings.page_size
    try:
        page = max(int(request.query_params.get("page", "1")), 1)
    except ValueError:
        page = 1
    calls, total = view.page(shown, offset=(page - 1) * size, limit=size)
    filters = {name: getattr(shown, name) for name in _FILTERS if getattr(shown, name)}
    return render(
        request,
        "ledger.html",
        {
            "calls": calls,
            "total": total,
            "page": page,
            "pages": max((total + size - 1) // size, 1),
            "first": (page - 1) * size + 1,
            "filters": filters,
            "query": lambda **changes: urlencode({**filters, **changes}),
            "live_query": urlencode({**filters, "after": view.sequence, "page": page}),
            "states": _STATES,
            "tenants": view.values("tenant")[:500],
            "tools": view.values("tool")[:500],
            "page_size": size,
        },
    )


async def _call(request: Request) -> Response:
    console = _console(request)
    key = key_of_token(request.path_params["token"])
    shown = None if key is None else console.feed.view.call(key)
    if key is None or shown is None:
        return render(request, "error.html", {"message": "no such call"}, status_code=404)
    history = console.feed.view.projections.ledger.history(key)
    trace_url = (
        None
        if shown.trace_id is None
        else console.settings.trace_url.format(trace_id=shown.trace_id)
    )
    return render(request, "call.html", {"call": shown, "history": history, "trace_url": trace_url})


async def _waiting(request: Request) -> Response:
    view = _console(request).feed.view
    return render(
        request,
        "waiting.html",
        {
            "waiting": view.in_stage(Stage.WAITING),
            "ready": view.in_stage(Stage.READY),
            "running": [*view.in_stage(Stage.RUNNING), *view.in_stage(Stage.STOPPING)],
        },
    )


async def _overview(request: Request) -> Response:
    console = _console(request)
    counts = console.feed.view.overview(console.feed.now(), window=OVERVIEW_WINDOW)
    rows, height, left_out = chart(counts)
    totals = {stage: sum(stages.get(stage, 0) for stages in counts.values()) for stage in Stage}
    return render(
        request,
        "overview.html",
        {
            "counts": sorted(counts.items()),
            "bars": rows,
            "height": height,
            "left_out": left_out,
            "stages": list(Stage),
            "totals": totals,
        },
    )


# --- the audit and the controls -------------------------------------------------------------------


async def _audit(request: Request) -> Response:
    audit = _console(request).feed.view.projections.audit
    entries = sorted(audit.entries() + audit.refusals(), key=lambda entry: -entry.position)
    return render(request, "audit.html", {"entries": entries})


async def _audit_entry(request: Request) -> Response:
    console = _console(request)
    entry = console.feed.entry(request.path_params["position"])
    if entry is None:
        return render(request, "error.html", {"message": "no such control"}, status_code=404)
    ended = [console.feed.view.call(key) for key in entry.ended]
    return render(request, "audit_entry.html", {"entry": entry, "ended": ended})


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    if not isinstance(value, str):
        return ""
    return value.strip()[:MAX_FORM_FIELD]


async def _controls(request: Request) -> Response:
    console = _console(request)
    principal = _principal(request)
    if request.method == "GET":
        asked = {
            name: request.query_params.get(name, "") for name in ("action", "target", "tenant")
        }
        return render(
            request, "controls.html", {"actions": ACTIONS, "asked": asked, "problem": None}
        )
    async with request.form(max_files=0, max_fields=16) as form:
        if not same_origin(request) or not console.auth.csrf_ok(principal, form.get("csrf")):
            return render(
                request,
                "error.html",
                {"message": "this form is not one the console gave you (CSRF check): reload it"},
                status_code=403,
            )
        action, target = _field(form, "action"), _field(form, "target")
        tenant, reason = _field(form, "tenant") or None, _field(form, "reason")
        confirmed = _field(form, "confirmed") == "yes"
    asked = {"action": action, "target": target, "tenant": tenant or ""}
    problem = None
    if action not in ACTIONS:
        problem = "choose a control"
    elif not target:
        problem = "name the response, tool or tenant the control is for"
    elif not reason:
        problem = "say why: the reason is written to the audit"
    if problem is not None:
        return render(
            request,
            "controls.html",
            {"actions": ACTIONS, "asked": asked, "problem": problem, "reason": reason},
            status_code=400,
        )
    if action == "stop-tenant" and not confirmed:
        view = console.feed.view
        live = [
            call
            for stage in (Stage.ASSEMBLING, Stage.WAITING, Stage.READY)
            for call in view.in_stage(stage)
            if call.key.tenant == target
        ]
        return render(request, "confirm.html", {"target": target, "reason": reason, "live": live})
    try:
        event = control_event(
            action,
            target,
            tenant=None if action in ("stop-tenant", "resume-tenant") else tenant,
            operator=principal,
            reason=reason,
        )
        entry = await console.feed.give(event)
    except RefusedError as error:
        return render(
            request,
            "error.html",
            {"message": f"refused: {error}. The attempt is written to the audit.", "audit": True},
            status_code=403,
        )
    except (InertError, ValueError) as error:
        return render(request, "error.html", {"message": str(error)}, status_code=400)
    base = request.scope.get("root_path", "")
    return RedirectResponse(f"{base}/audit/{entry.position}", status_code=303)


# --- the live feed ------------------------------------------------------------------------------


async def _live(request: Request) -> Response:
    """Server-sent events: the ledger rows a page shows that changed since it was drawn."""
    console = _console(request)
    shown = _row_filter(request)
    try:
        after = int(request.query_params.get("after", "0"))
    except ValueError:
        after = 0
    limit = console.settings.page_size

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
                    "total": view.count(shown),
                    "rows": [call.json(now) for call in changed],
                }
                yield f"event: rows\ndata: {json.dumps(data)}\n\n"

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"x-accel-buffering": "no"}
    )
