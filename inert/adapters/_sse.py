"""Server-sent events off the wire, split anywhere, as the WHATWG event-stream rules read them.

A provider's HTTP body arrives in chunks that split lines, UTF-8 sequences and even a CR LF pair
anywhere; the decoder keeps whatever is unfinished until the next chunk. Lines end with CR LF, LF
or CR; a leading byte-order mark is dropped; ``:`` lines are comments; a blank line dispatches
the event if it has data. At the end of the body an event with data but no blank line after it
is handed out marked ``complete=False``: its payload may have been cut off, and the adapter
decides (a payload that does not parse is then a lost connection, not a protocol error).

An event is refused, and a ``refused`` event handed out in its place, when it grows past
``max_event_size`` characters (its lines with their line ends, comments included; the blank
line that ends it is not counted), as soon as it does, or when its bytes are not UTF-8 (never
replaced), at the first bad byte. The rest of a refused event is read past, not kept, up to the
blank line that ends it; the events before and after it are handed out as they are.
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


DEFAULT_MAX_EVENT_SIZE = 16 * 1024 * 1024
"""Characters one event may take on the wire (its lines, comments included), by default."""


class SSEDecoder:
    """Incremental event-stream decoder: ``feed`` chunks as they come, ``close`` at the end.

    Buffering is linear in what arrives: a line not ended yet is kept as its pieces, and only
    new text is searched for line endings. An event that grows past ``max_event_size``
    characters, or holds bytes that are not UTF-8, is refused as soon as it does (a ``refused``
    event in its place); the rest of it is read past, not kept, up to the blank line that ends
    it.
    """

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        if max_event_size < 1:
            raise ValueError(f"max_event_size must be at least 1, not {max_event_size}")
        self._max = max_event_size
        self._text = codecs.getincrementaldecoder("utf-8")()
        self._pieces: list[str] = []
        self._piece_size = 0
        self._size = 0
        self._refusing = False
        self._after_cr = False
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
            return self._lines(chunk)
        events: list[ServerSentEvent] = []
        while True:
            try:
                return events + self._lines(self._text.decode(chunk))
            except UnicodeDecodeError as error:
                # What came before the bad bytes is whole text: its events stand. The bad
                # bytes belong to the event they are in, which is refused; what follows them
                # is read on, past the rest of that event.
                events += self._lines(bytes(error.object[: error.start]).decode("utf-8"))
                self._text.reset()
                events += self._bad_bytes()
                chunk = bytes(error.object[error.end :])

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
        events = self._lines(text)
        if self._pieces or self._piece_size:
            event = self._line_ended("")
            if event is not None:
                events.append(event)
        self._closed = True
        if self._data and not self._refusing:
            events.append(self._dispatch(complete=False))
        return events

    def _lines(self, text: str) -> list[ServerSentEvent]:
        if not self._started and text:
            self._started = True
            if text.startswith(_BOM):
                text = text[len(_BOM) :]
        events: list[ServerSentEvent] = []
        start = 0
        if self._after_cr and text:
            # The LF of a CR LF split between two chunks.
            self._after_cr = False
            if text.startswith("\n"):
                start = 1
        length = len(text)
        while start < length:
            newline = text.find("\n", start)
            carriage = text.find("\r", start, newline if newline >= 0 else length)
            if carriage >= 0:
                end = carriage
                if carriage + 1 == length:
                    after, self._after_cr = length, True
                else:
                    after = carriage + 2 if text[carriage + 1] == "\n" else carriage + 1
            elif newline >= 0:
                end, after = newline, newline + 1
            else:
                break
            event = self._line_ended(text[start:end])
            start = after
            if event is not None:
                events.append(event)
        if start < length:
            rest = text[start:]
            self._piece_size += len(rest)
            if not self._refusing:
                self._pieces.append(rest)
                if self._size + self._piece_size > self._max:
                    events.append(self._refuse(f"an event longer than {self._max} characters"))
        return events

    def _line_ended(self, last: str) -> ServerSentEvent | None:
        """The line whose last piece is ``last`` ended."""
        size = self._piece_size + len(last)
        line = "".join([*self._pieces, last]) if self._pieces else last
        self._pieces = []
        self._piece_size = 0
        if self._refusing:
            if size == 0:
                # The blank line that ends the refused event.
                self._refusing = False
                self._forget_event()
            return None
        if size == 0:
            # The blank line ends the event: it is no part of its size, and a refusal here
            # would read past the next event as the rest of this one.
            return self._line(line)
        self._size += size + 1
        if self._size > self._max:
            return self._refuse(f"an event longer than {self._max} characters")
        return self._line(line)

    def _bad_bytes(self) -> list[ServerSentEvent]:
        """Bytes that are not UTF-8 arrived on the line being read."""
        self._started = True
        self._after_cr = False
        # They are part of the line: it is not the blank line that would end the event.
        self._piece_size += 1
        if self._refusing:
            return []
        return [self._refuse(_NOT_UTF8)]

    def _refuse(self, why: str) -> ServerSentEvent:
        self._forget_event()
        self._pieces = []
        self._refusing = True
        return ServerSentEvent(event="", data="", refused=why)

    def _forget_event(self) -> None:
        self._event = ""
        self._data = []
        self._size = 0

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            if not self._data:
                self._forget_event()
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
        self._forget_event()
        return event
