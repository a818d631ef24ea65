"""Server-sent events off the wire, split anywhere, as the WHATWG event-stream rules read them.

A provider's HTTP body arrives in chunks that split lines, UTF-8 sequences and even a CR LF pair
anywhere; the decoder keeps whatever is unfinished until the next chunk. Lines end with CR LF, LF
or CR; a leading byte-order mark is dropped; ``:`` lines are comments; a blank line dispatches
the event if it has data. At the end of the body an event with data but no blank line after it
is handed out marked ``complete=False``: its payload may have been cut off, and the adapter
decides (a payload that does not parse is then a lost connection, not a protocol error). Bytes
that are not UTF-8 are refused, never replaced: the events before them are handed out, then a
``refused`` event in place of the one they were in (dropped with the rest of that chunk).
"""

from __future__ import annotations

import codecs

from attrs import frozen

_BOM = "\ufeff"
_NOT_UTF8 = "an event whose bytes are not UTF-8"


@frozen
class ServerSentEvent:
    """One dispatched event: its type (``message`` when none was named), data and id."""

    event: str
    data: str
    id: str | None = None
    complete: bool = True
    refused: str = ""
    """Why the bytes of this event were refused; it has no data then."""


class SSEDecoder:
    """Incremental event-stream decoder: ``feed`` chunks as they come, ``close`` at the end."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")()
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
        if not isinstance(chunk, bytes):
            return self._lines(chunk, final=False)
        try:
            text = self._text.decode(chunk)
        except UnicodeDecodeError as error:
            # What came before the bad bytes is whole text: its events stand.
            valid = bytes(error.object[: error.start]).decode("utf-8")
            self._text.reset()
            events = self._lines(valid, final=False)
            self._pending, self._event, self._data = "", "", []
            return [*events, ServerSentEvent(event="", data="", refused=_NOT_UTF8)]
        return self._lines(text, final=False)

    def close(self) -> list[ServerSentEvent]:
        """The end of the body: the last unfinished event, if it has data (``complete=False``)."""
        if self._closed:
            return []
        try:
            text = self._text.decode(b"", final=True)
        except UnicodeDecodeError:
            # The body ended inside a character: the event it was in was cut off.
            self._text.reset()
            text = ""
        events = self._lines(text, final=True)
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
