"""The console's ASGI application: its routes, and the guards every request passes.

Each request is authenticated first (``Authenticator``); every response carries a strict content
security policy (the console's own script and styles only, nothing inline, no frames); every form
carries its principal's CSRF token and is refused from another origin. Controls go through the
runtime's ``give_control`` with the runtime's operator authorizer. Signing in with a token
sends the browser on to a path of the console itself, whatever the address asked for.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from urllib.parse import quote, urlencode

import trio
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..events import InertError
from ..log import Log, open_log
from . import _routes
from ._auth import COOKIE, Authenticator
from ._feed import LiveFeed
from ._settings import ConsoleSettings

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


class Console:
    """A console over one log: its view (kept live while ``running``) and its application.

    ``app`` is the ASGI application; ``console_app`` gives one that runs the console for its own
    lifespan. A host that mounts ``app`` inside its own server keeps the console running for its
    lifespan instead: ``async with console.running(): ...``.
    """

    def __init__(self, log: str | Log, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.auth = Authenticator(settings)
        self.drawing = trio.Lock()
        """Held by a page that lists calls while it finds and draws them: such pages take
        turns, and a request that does not list calls (the controls) waits for a slice of one
        of them at most, however many are asked for at once."""
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
                Route("/", _in_turn(_routes.ledger)),
                Route("/calls/{token}", _in_turn(_routes.call)),
                Route("/waiting", _in_turn(_routes.waiting)),
                Route("/overview", _in_turn(_routes.overview)),
                Route("/audit", _in_turn(_routes.audit)),
                Route("/audit/{position:int}", _in_turn(_routes.audit_entry)),
                Route("/controls", _routes.controls, methods=["GET", "POST"]),
                Route("/live", _routes.live),
                Route("/live/waiting", _routes.live_waiting),
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
    target = local_path(_asked_path(connection.scope))
    response = RedirectResponse(target + (f"?{query}" if query else ""), status_code=303)
    response.set_cookie(COOKIE, auth.cookie_of(token), httponly=True, samesite="strict", path="/")
    return response


def _asked_path(scope: Scope) -> str:
    """The whole path asked for, the prefix the console is mounted at included (a server
    gives it in ``path`` or, as older ones do, only in ``root_path``)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path if path.startswith(root) else root + path


def local_path(path: str) -> str:
    """A path as a redirect's ``Location`` that can only lead to a page of this console.

    Every character but ASCII letters, digits, ``_.-~`` and ``/`` is percent-encoded, so no
    backslash, tab, newline (which browsers drop from an address), colon or percent sign
    reaches the browser as itself; and the path starts with exactly one ``/``, since
    ``//host`` (or ``/\\host``, which browsers read alike) names another site.
    """
    return "/" + quote(path, safe="/", errors="surrogatepass").lstrip("/")


def _in_turn(
    page: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A page that lists calls, finding and drawing them in its turn (``Console.drawing``)."""

    async def in_turn(request: Request) -> Response:
        console: Console = request.app.state.console
        async with console.drawing:
            return await page(request)

    return in_turn
