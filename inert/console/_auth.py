"""Who is asking: the token's principal or the trusted proxy's, and the CSRF token of each form.

A token is shown to the person once, in the URL the console prints; the first request with it
sets a cookie (HttpOnly, SameSite=Strict) holding a keyed digest of it, never the token, and is
sent on without the token in its address. A form carries a token derived from the principal
and the console's secret; a form posted without it, or from another origin, is refused.
"""

from __future__ import annotations

import hashlib
import hmac

from starlette.requests import HTTPConnection

from ._settings import ConsoleSettings

COOKIE = "inert_console"


class Authenticator:
    """The principal of a request, and the CSRF token of a principal's forms."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self._settings = settings
        self._secret = settings.secret
        self._by_token = dict(settings.tokens)
        self._by_cookie = {self.cookie_of(token): p for token, p in settings.tokens.items()}

    def _mac(self, purpose: str, text: str) -> str:
        message = f"{purpose}\0{text}".encode("utf-8", "surrogatepass")
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def cookie_of(self, token: str) -> str:
        """The cookie a token's holder is given in its place."""
        return self._mac("session", token)

    def principal_of_token(self, token: str) -> str | None:
        for known, principal in self._by_token.items():
            if hmac.compare_digest(known.encode(), token.encode("utf-8", "replace")):
                return principal
        return None

    def principal(self, connection: HTTPConnection) -> str | None:
        """Who sent the request, or ``None`` where nothing authenticates it."""
        settings = self._settings
        header = settings.principal_header
        if header is not None:
            client = connection.client
            named = connection.headers.get(header)
            if named and client is not None and client.host in settings.trusted_proxies:
                return named
        authorization = connection.headers.get("authorization", "")
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() == "bearer" and credentials:
            return self.principal_of_token(credentials.strip())
        cookie = connection.cookies.get(COOKIE)
        if cookie:
            for known, principal in self._by_cookie.items():
                if hmac.compare_digest(known.encode(), cookie.encode("utf-8", "replace")):
                    return principal
        return None

    def csrf_token(self, principal: str) -> str:
        """The token every form of this principal carries."""
        return self._mac("csrf", principal)

    def csrf_ok(self, principal: str, token: object) -> bool:
        return isinstance(token, str) and hmac.compare_digest(
            self.csrf_token(principal).encode(), token.encode("utf-8", "replace")
        )


def same_origin(connection: HTTPConnection) -> bool:
    """Whether a browser's ``Origin`` (where it sends one) is this console's own."""
    origin = connection.headers.get("origin")
    if origin is None:
        return True
    host = connection.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")
