"""Signing in with the printed token sends the browser on to a page of the console itself,
whatever path the address held: never to another host (an open redirect, and a sign-in another
site could make on a person's behalf)."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import pytest
import trio
from console_support import OPERATOR_TOKEN, TOOLS, serve, settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from starlette.types import Message, Scope

from inert import open_runtime
from inert.console import Console
from inert.console._app import local_path

ORIGIN = "http://console.test"

LOCAL = re.compile(r"/(?![/\\])[A-Za-z0-9_.~%/-]*(\?[A-Za-z0-9_.~%+=&-]*)?")
"""A ``Location`` that can only be a path of this console: one ``/`` first and no second, and
nothing a browser reads as a scheme, a host, a backslash or a character it drops."""

HOSTILE_PATHS = [
    "//evil.example/",
    "///evil.example/",
    "////evil.example",
    "/\\evil.example/",
    "\\\\evil.example/",
    "/\\/evil.example",
    "\\/evil.example",
    "/\\\\evil.example",
    "//\\evil.example",
    "/%2f%2fevil.example",
    "/%2F%2Fevil.example",
    "/%5c%5cevil.example",
    "/%5C/evil.example",
    "/%252f%252fevil.example",
    "/%25252f/evil.example",
    "/\t/evil.example",
    "/\n/evil.example",
    "/\r\n/evil.example",
    "/\t\\evil.example",
    "/ /evil.example",
    "/\x00/evil.example",
    "/\x0b/evil.example",
    "/\x0c/evil.example",
    "/%09/evil.example",
    "/%0a/evil.example",
    "https://evil.example/",
    "/https://evil.example/",
    "https:evil.example",
    "HTTPS://EVIL.EXAMPLE",
    "//EVIL.example",
    "javascript:alert(1)",
    "/javascript:alert(1)",
    "JaVaScRiPt:alert(document.cookie)",
    "java\tscript:alert(1)",
    "data:text/html,<script>alert(1)</script>",
    "/..//evil.example",
    "/./..//evil.example",
    "/.//evil.example",
    "\u3000//evil.example",
    "/\uff0f\uff0fevil.example",
    "/\u2215\u2215evil.example",
    "/\u202e//evil.example",
    "/\ud800/evil.example",
    "",
]
"""Paths as a server hands them to the application (decoded): every spelling of two slashes
and backslashes, with the characters browsers drop or read alike, schemes and double
encodings."""

RAW_TARGETS = [
    "//evil.example/",
    "///evil.example/",
    "/%2f%2fevil.example/",
    "/%2F%2Fevil.example/",
    "/%2f/evil.example/",
    "/%5c%5cevil.example/",
    "/%5C%5Cevil.example/",
    "/%5c/evil.example/",
    "/%09/evil.example/",
    "/%0a/evil.example/",
    "/%0d%0a/evil.example/",
    "/%252f%252fevil.example/",
    "/\\evil.example/",
    "/\\\\evil.example/",
    "//evil.example/%2e%2e",
    "/./%2f/evil.example",
    "/%2e%2e/%2f/evil.example",
    "https://evil.example/",
    "http://console.test//evil.example/",
]
"""Request targets as they go over the wire, for the server to decode first."""


def assert_local(location: str) -> None:
    assert LOCAL.fullmatch(location), location
    # As a browser reads it: tabs and newlines dropped, backslashes taken for slashes.
    read = re.sub(r"[\t\n\r]", "", location).replace("\\", "/")
    resolved = urlsplit(urljoin(f"{ORIGIN}/some/page", read))
    assert (resolved.scheme, resolved.netloc) == ("http", "console.test"), location


async def _location(
    console: Console, path: str, *, root_path: str = "", query: str | None = None
) -> str:
    """The ``Location`` the console answers a request for ``path`` with the token with."""
    query = f"token={OPERATOR_TOKEN}" if query is None else query
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("utf-8", "surrogatepass"),
        "root_path": root_path,
        "query_string": query.encode("utf-8", "surrogatepass"),
        "headers": [(b"host", b"console.test")],
        "client": ("127.0.0.1", 50000),
        "server": ("console.test", 80),
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await console.app(scope, receive, send)
    start = sent[0]
    assert start["status"] == 303, (path, start["status"])
    headers = dict(start["headers"])
    assert b"set-cookie" in headers
    location: bytes = headers[b"location"]
    return location.decode("latin-1")


@pytest.mark.parametrize("path", HOSTILE_PATHS)
async def test_a_hostile_path_never_leads_elsewhere(path: str) -> None:
    """Every spelling of a second slash or a backslash, a scheme, a dropped character or a
    double encoding in the path signs in and leads to a path of the console (mounted or
    not)."""
    console = Console("memory://", settings())
    for root_path in ("", "/console"):
        location = await _location(console, root_path + path, root_path=root_path)
        assert_local(location)
        assert location.startswith(root_path or "/")


async def test_the_address_keeps_its_page_and_query_without_the_token() -> None:
    """An ordinary path comes back as it was, mounted or not (and as servers that give the
    mount's prefix only in ``root_path`` call it), its query without the token."""
    console = Console("memory://", settings())
    query = f"tenant=acme&token={OPERATOR_TOKEN}&state=collecting"
    cases = [
        ("/waiting", "", "/waiting?tenant=acme&state=collecting"),
        ("/", "", "/?tenant=acme&state=collecting"),
        ("/console/waiting", "/console", "/console/waiting?tenant=acme&state=collecting"),
        ("/waiting", "/console", "/console/waiting?tenant=acme&state=collecting"),
        ("/calls/WyJhIl0", "", "/calls/WyJhIl0?tenant=acme&state=collecting"),
    ]
    for path, root_path, expected in cases:
        assert await _location(console, path, root_path=root_path, query=query) == expected
    hostile = f"next=//evil.example&token={OPERATOR_TOKEN}"
    location = await _location(console, "/", query=hostile)
    assert location == "/?next=%2F%2Fevil.example"
    assert_local(location)


_PIECES = st.sampled_from(
    [
        "/",
        "//",
        "\\",
        "%2f",
        "%5c",
        "%252f",
        "%",
        "\t",
        "\n",
        "\r",
        " ",
        ":",
        ".",
        "..",
        "@",
        "?",
        "#",
        "evil.example",
        "https:",
        "javascript:",
        "\u202e",
        "\u3000",
        "\uff0f",
    ]
)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    path=st.one_of(
        st.text(),
        st.lists(_PIECES | st.text(max_size=3), max_size=12).map("".join),
    ),
    root_path=st.sampled_from(["", "/console", "/a/b"]),
    query=st.text(max_size=20),
)
def test_any_path_leads_to_a_path_of_the_console(path: str, root_path: str, query: str) -> None:
    """For any path, mounted or not, with any query beside the token, the ``Location`` starts
    with exactly one ``/`` not followed by ``/`` or ``\\`` and resolves to this console."""
    console = Console("memory://", settings())
    kept = "&".join(f"q={part}" for part in query.split("&") if "token" not in part)
    encoded = "&".join(filter(None, [kept, f"token={OPERATOR_TOKEN}"]))

    async def check() -> None:
        assert_local(await _location(console, path, root_path=root_path, query=encoded))

    trio.run(check)
    assert_local(local_path(path))


async def test_a_served_console_decodes_no_target_into_another_host() -> None:
    """Through Hypercorn, every request target spelling a second slash or a backslash (raw or
    percent-encoded, twice encoded, absolute) is answered with a path of the console, or
    refused as no request."""
    async with open_runtime(log="memory://", tools=TOOLS) as runtime:
        console = Console(runtime.log, settings())
        async with console.running(), trio.open_nursery() as nursery:
            url = await nursery.start(serve, console.app)
            host, port = urlsplit(url).hostname, urlsplit(url).port
            assert host is not None
            assert port is not None
            for target in RAW_TARGETS:
                stream = await trio.open_tcp_stream(host, port)
                async with stream:
                    request = (
                        f"GET {target}?token={OPERATOR_TOKEN} HTTP/1.1\r\n"
                        f"Host: {host}:{port}\r\nConnection: close\r\n\r\n"
                    )
                    await stream.send_all(request.encode("latin-1"))
                    answer = b""
                    with trio.fail_after(5):
                        while chunk := await stream.receive_some():
                            answer += chunk
                head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1")
                status = int(head.split(" ", 2)[1])
                if status == 400:
                    continue
                assert status == 303, (target, head)
                [location] = re.findall(r"(?im)^location: ([^\r\n]*)", head)
                assert_local(location)
            nursery.cancel_scope.cancel()
