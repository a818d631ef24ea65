"""The person's side of the example servers' tests, alike for the Trio server and its asyncio
twin: starting a chat and reading a turn's server-sent events."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from typing import Any

import anyio
import httpx
from attrs import evolve, frozen
from locations import ROOT

EMAIL = "call_example_email"
WEATHER = "call_example_weather"
WAIT = 10.0
"""Seconds a test waits for the message it expects."""

Message = tuple[str, dict[str, Any]]


class Events:
    """A turn's server-sent events, read as they come (under Trio or asyncio)."""

    def __init__(self, response: httpx.Response) -> None:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        self._lines = response.aiter_lines()
        self.seen: list[Message] = []

    async def next(self) -> Message:
        kind, data = "", ""
        async for line in self._lines:
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
            elif not line and kind:
                message = (kind, json.loads(data))
                self.seen.append(message)
                if kind == "end":
                    # The server closes the stream after its end: read it to its close, so
                    # that no iterator of the client is left half-read.
                    rest = [line async for line in self._lines]
                    assert not any(rest), rest
                return message
        raise AssertionError(f"the event stream ended after {self.seen}")

    async def until(self, wanted: Callable[[Message], bool]) -> Message:
        with anyio.fail_after(WAIT):
            while True:
                message = await self.next()
                if wanted(message):
                    return message

    async def first(self, wanted: Callable[[Message], bool]) -> Message:
        """The first message ``wanted``, among those seen already or, if none, the next one
        (a call is validated at its own end, so its cue may come before what a test waited
        for first)."""
        for message in self.seen:
            if wanted(message):
                return message
        return await self.until(wanted)

    def cues(self, call: str) -> list[str]:
        return [
            data["cue"] for kind, data in self.seen if kind == "status" and data["call"] == call
        ]


def cue(call: str, text: str) -> Callable[[Message], bool]:
    return lambda message: (
        message[0] == "status" and message[1]["call"] == call and message[1]["cue"] == text
    )


def is_end(message: Message) -> bool:
    return message[0] == "end"


async def start(client: httpx.AsyncClient, message: str = "mail bob, weather in Paris") -> str:
    """Start a chat turn; its id."""
    response = await client.post("/chat", json={"message": message})
    assert response.status_code == 202, response.text
    turn: str = response.json()["turn"]
    assert response.json()["events"] == f"/turns/{turn}/events"
    return turn


@frozen
class Documented:
    """A request of docs/example-server.md, as its ``curl`` command sends it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes | None

    def written(self, turn: str, digest: str = "") -> Documented:
        """The request with the turn, and the digest, where the page writes ``TURN`` and
        ``hmac-sha256:...``."""
        body = self.body
        if body is not None:
            body = body.replace(b"hmac-sha256:...", digest.encode())
        return evolve(self, path=self.path.replace("TURN", turn), body=body)

    async def send(self, client: httpx.AsyncClient) -> httpx.Response:
        return await client.request(self.method, self.path, headers=self.headers, content=self.body)


def documented_requests() -> list[Documented]:
    """Every ``curl`` command of docs/example-server.md, in the page's order."""
    page = (ROOT / "docs" / "example-server.md").read_text()
    requests = []
    for block in re.findall(r"```sh\n(.*?)```", page, flags=re.DOTALL):
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command, comments=True)
            if words and words[0] == "curl":
                requests.append(_as_curl_sends(words[1:]))
    return requests


def _as_curl_sends(options: list[str]) -> Documented:
    method, url, body = "", "", None
    headers: dict[str, str] = {}
    given = iter(options)
    for option in given:
        if option == "-X":
            method = next(given)
        elif option == "-H":
            name, _, value = next(given).partition(":")
            headers[name.strip().lower()] = value.strip()
        elif option == "-d":
            body = next(given).encode()
        elif not option.startswith("-"):
            url = option
    assert url.startswith("localhost:8000/"), url
    if body is not None:
        # What curl says of a body given with -d, unless a header says otherwise.
        headers.setdefault("content-type", "application/x-www-form-urlencoded")
    method = method or ("POST" if body is not None else "GET")
    return Documented(method, url.removeprefix("localhost:8000"), headers, body)
