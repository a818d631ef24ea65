"""A local HTTP/1.1 server, on Trio, that answers every request with a recorded stream body.

For the tests that run the official SDK clients: the SDK sends its real request, and the server
answers ``200`` with ``text/event-stream`` and the recorded body in chunks of ``chunk_size``
bytes (chunked transfer encoding), so that the SDK's own stream parsing and event models see
what they would see from the provider.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import trio
from attrs import define, field

MAX_HEAD = 64 * 1024


@define
class Request:
    """What the server received: the request line's method and path, and the body."""

    method: str
    path: str
    body: bytes


@define
class ReplayServer:
    """Answers requests with ``body_for(path)``; records the requests."""

    body_for: Callable[[str], bytes]
    chunk_size: int = 97
    requests: list[Request] = field(factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _serve(self, stream: trio.SocketStream) -> None:
        async with stream:
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = await stream.receive_some(MAX_HEAD)
                if not chunk or len(received) > MAX_HEAD:
                    return
                received += chunk
            head, _, body = received.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            while len(body) < length:
                chunk = await stream.receive_some(MAX_HEAD)
                if not chunk:
                    return
                body += chunk
            self.requests.append(Request(method=method, path=path, body=body))
            payload = self.body_for(path)
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            )
            for start in range(0, len(payload), self.chunk_size):
                piece = payload[start : start + self.chunk_size]
                await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece))
            await stream.send_all(b"0\r\n\r\n")


@asynccontextmanager
async def replay_server(
    body_for: Callable[[str], bytes], *, chunk_size: int = 97
) -> AsyncIterator[ReplayServer]:
    """A running server on a free port of 127.0.0.1, stopped when the block ends."""
    server = ReplayServer(body_for=body_for, chunk_size=chunk_size)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, server._serve, 0, host="127.0.0.1"))
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()


@contextmanager
def threaded_replay_server(
    body: bytes, *, fresh_id: bytes | None = None, cut_after: int | None = None
) -> Iterator[str]:
    """The same answer from a server on its own thread, for clients outside Trio (asyncio's);
    its base URL. With ``fresh_id``, each answer gets that response id made unique, as a
    provider's are (the same id in two turns is a replayed response, which never acts). With
    ``cut_after``, the connection drops after that many bytes of a body announced whole."""
    answers = itertools.count(1)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            answer = body
            if fresh_id is not None:
                answer = body.replace(fresh_id, fresh_id + b"%d" % next(answers))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer[:cut_after])

        def log_message(self, *_: object) -> None:
            """Quiet: tests read what the client made of the body."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
