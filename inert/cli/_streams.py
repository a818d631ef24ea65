"""Reading a recorded provider stream for ``inert feed``: its format, its adapter, its tools.

A stream file is either the raw body as it came off the wire (SSE text; for Bedrock the binary
event-stream framing) or JSON lines (one decoded provider event per line), told apart by its
first character that is not white space: ``{`` starts JSON lines. Nothing here touches a log.
"""

from __future__ import annotations

import hashlib
import json
import stat
import sys
from pathlib import Path

from attrs import frozen

from ..actors import ToolDeclaration, ToolRegistry, declarations_from_json
from ..adapters._envelope import read_event_json
from ..events import ConfigurationError, InertError


class UnreadableInput(InertError):
    """A stream or tools file that cannot be read as what it claims to be."""


@frozen
class StreamFile:
    """A stream file's content: raw wire bytes, or the decoded events of its JSON lines."""

    raw: bytes | None
    events: tuple[object, ...]
    digest: str


def _read_file(path: Path) -> bytes:
    """A file's bytes; only a regular file's, since a pipe or a device may never end."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise UnreadableInput(
                f"cannot read {path}: not a regular file (a pipe or a device), which might never"
                " end; give a recorded file"
            )
        return path.read_bytes()
    except OSError as error:
        raise UnreadableInput(f"cannot read {path}: {error.strerror}") from None


def read_edit(source: str) -> bytes:
    """The arguments a person confirms instead of the model's: a file's bytes, or standard
    input's for ``-``."""
    if source == "-":
        return sys.stdin.buffer.read()
    return _read_file(Path(source))


def read_stream(path: Path) -> StreamFile:
    """Read a stream file, detecting raw wire bytes or JSON lines."""
    content = _read_file(path)
    digest = hashlib.sha256(content).hexdigest()
    start = content.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
    if start != b"{":
        return StreamFile(raw=content, events=(), digest=digest)
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UnreadableInput(f"{path} is not UTF-8: byte {error.start}") from None
    events: list[object] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            # As strictly as an adapter reads the wire: a repeated key is not guessed at.
            events.append(read_event_json(line))
        except json.JSONDecodeError as error:
            raise UnreadableInput(
                f"{path} line {number} is not JSON ({error.msg}, column {error.colno})"
            ) from None
    return StreamFile(raw=None, events=tuple(events), digest=digest)


def read_tools(path: Path) -> list[ToolDeclaration]:
    """Tool declarations from a TOOLS.json file in any provider's format."""
    content = _read_file(path)
    try:
        document = json.loads(content.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UnreadableInput(f"{path} is not a JSON document: {error}") from None
    except ValueError:
        # The one other ValueError json raises: an integer past Python's digit limit.
        raise UnreadableInput(f"{path} holds a number too long to be read") from None
    except RecursionError:
        raise UnreadableInput(f"{path} nests too deep to be read") from None
    try:
        declarations = declarations_from_json(document)
        # Registered once here, so that a schema inert cannot use is named with its file and
        # refused before a log is opened (or created) for it.
        ToolRegistry(declarations)
    except ConfigurationError as error:
        raise UnreadableInput(f"{path}: {error}") from None
    return declarations


def stream_name(provider: str, stream: StreamFile) -> str:
    """The response id of a stream whose protocol names none: derived from the file's content,
    so that feeding the same file again names the same response."""
    return f"{provider}-{stream.digest[:16]}"
