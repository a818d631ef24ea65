"""Server-sent events off the wire, split anywhere, as the WHATWG event-stream rules read them.

A provider's HTTP body arrives in chunks that split lines, UTF-8 sequences and even a CR LF pair
anywhere; the decoder keeps whatever is unfinished until the next chunk. Lines end with CR LF, LF
or CR; a leading byte-order mark is dropped; ``:`` lines are comments; a blank line dispatches
the event if it has data. At the end of the body an event with data but no blank line after it
is handed out marked ``complete=False``: its payload may have been cut off, and the adapter
decides (a payload that does not parse is then a lost connection, not a protocol error).
"""

from __future__ import annotations

import codecs

from attrs import frozen

_BOM = "\ufeff"


@frozen
class ServerSentEvent:
    """One dispatched event: its type (``message`` when none was named), data and id."""

    event: str
    data: str
    id: str | None = None
    complete: bool = True


class SSEDecoder:
    """Incremental event-stream decoder: ``feed`` chunks as they come, ``close`` at the end."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._closed = False

    def feed(self, chunk: bytes | str) -> list[ServerSentEvent]:
        """The events completed by ``chunk``."""
        if self._closed:
            raise ValueError("the event stream was closed")
        text = self._text.decode(chunk) if isinstance(chunk, bytes) else chunk
        return self._lines(text, final=False)

    def close(self) -> list[ServerSentEvent]:
        """The end of the body: the last unfinished event, if it has data (``complete=False``)."""
        if self._closed:
            return []
        events = self._lines(self._text.decode(b"", final=True), final=True)
        self._closed = True
        if self._data:
            events.append(self._dispatch(complete=False))
        return events

    def _lines(self, text: str, *, final: bool) -> list[ServerSentEvent]:
        text = self._pending + text
        if not self._started and text:
            if _BOM.startswith(text[:1]) and len(text) < len(_BOM):
                self._pending = text
                return []
            self._started = True
            if text.startswith(_BOM):
                text = text[len(_BOM) :]
        events: list[ServerSentEvent] = []
        start = 0
        length = len(text)
        while start < length:
            newline = text.find("\n", start)
            carriage = text.find("\r", start, newline if newline >= 0 else length)
            if carriage >= 0:
                end = carriage
                if carriage + 1 == length and not final:
                    break  # the LF of a CR LF may be in the next chunk
                after = carriage + 2 if text.startswith("\n", carriage + 1) else carriage + 1
            elif newline >= 0:
                end, after = newline, newline + 1
            else:
                break
            line = text[start:end]
            start = after
            event = self._line(line)
            if event is not None:
                events.append(event)
        rest = text[start:]
        if final and rest:
            self._line(rest)
            rest = ""
        self._pending = rest
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            return self._dispatch(complete=True)
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None

    def _dispatch(self, *, complete: bool) -> ServerSentEvent:
        event = ServerSentEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._id,
            complete=complete,
        )
        self._event = ""
        self._data = []
        return event
