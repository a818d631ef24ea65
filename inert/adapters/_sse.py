"""Server-sent events off the wire, split anywhere, as the WHATWG event-stream rules read them.

A provider's HTTP body arrives in chunks that split lines, UTF-8 sequences and even a CR LF pair
anywhere; the decoder keeps whatever is unfinished until the next chunk, and every split of a
body gives the events of the whole. The bytes are decoded as the rules decode them: UTF-8, each
maximal run of bytes that is not UTF-8 replaced by one U+FFFD, one byte-order mark dropped at the
start of the body. Lines end with CR LF, LF or CR; ``:`` lines are comments; a blank line
dispatches the event if it has data. An event the body ends before its blank line is discarded,
as the rules say: a payload that may have been cut off is never handed out, and the adapter
reports the stream that ended early as lost.

An event whose ``data`` or ``event`` lines held bytes that are not UTF-8 is handed out
``replaced``: its text is the rules', and the adapter refuses it, so that a replacement
character never stands in arguments for bytes the provider did not send as text. Bytes that are
not UTF-8 elsewhere (a comment, the ``id``, a field the rules ignore) reach no adapter.

An event is refused, and a ``refused`` event handed out in its place, when it grows past
``max_event_size`` characters (its lines with their line ends, comments included; the blank
line that ends it is not counted), as soon as it does. The rest of a refused event is read
past, not kept, up to the blank line that ends it; the events before and after it are handed
out as they are.
"""

from __future__ import annotations

import codecs
import re

from attrs import frozen

_BOM = "\ufeff"
_REPLACEMENT = "\ufffd"
_MARK = "\ud800"
"""Where the decoder met a run of bytes that is not UTF-8: a lone surrogate, which no UTF-8
decodes to, so that a U+FFFD the provider sent is not taken for one."""


def _marked(error: UnicodeError) -> tuple[str, int]:
    """One mark for each run of bytes the ``replace`` handler would make one U+FFFD."""
    assert isinstance(error, UnicodeDecodeError)
    return _MARK, error.end


codecs.register_error("inert.sse.marked", _marked)


@frozen
class ServerSentEvent:
    """One dispatched event: its type (``message`` when none was named), data and id."""

    event: str
    data: str
    id: str | None = None
    refused: str = ""
    """Why the bytes of this event were refused; it has no data then."""
    replaced: bool = False
    """Whether bytes of its ``data`` or ``event`` lines were not UTF-8 (each run of them is one
    U+FFFD in its text)."""


DEFAULT_MAX_EVENT_SIZE = 16 * 1024 * 1024
"""Characters one event may take on the wire (its lines, comments included), by default."""


class SSEDecoder:
    """Incremental event-stream decoder: ``feed`` chunks as they come, ``close`` at the end.

    Buffering and line splitting are linear in what arrives: a line not ended yet is kept as its
    pieces, and each character is searched for a line ending once. An event that grows past
    ``max_event_size`` characters is refused as soon as it does (a ``refused`` event in its
    place); the rest of it is read past, not kept, up to the blank line that ends it.
    """

    def __init__(self, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        if max_event_size < 1:
            raise ValueError(f"max_event_size must be at least 1, not {max_event_size}")
        self._max = max_event_size
        # Marks rather than a strict decoder's errors, caught and decoded again from the bad
        # bytes: each error copies the rest of the chunk, quadratic in a chunk of bad bytes.
        self._text = codecs.getincrementaldecoder("utf-8")(errors="inert.sse.marked")
        self._pieces: list[str] = []
        self._piece_size = 0
        self._size = 0
        self._refusing = False
        self._after_cr = False
        self._started = False
        self._line_replaced = False
        self._replaced = False
        self._event = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._closed = False

    def feed(self, chunk: bytes | str) -> list[ServerSentEvent]:
        """The events completed by ``chunk``."""
        if self._closed:
            raise ValueError("the event stream was closed")
        # The incremental decoder holds an unfinished sequence until the bytes that end or
        # break it: each run of bad bytes is the same, however the body was split.
        text = chunk if isinstance(chunk, str) else self._text.decode(chunk)
        return self._decoded(text)

    def feed_fast(self, chunk: bytes | str) -> list[ServerSentEvent] | list[tuple[str, str]]:
        """``feed``, faster where it can be: a chunk of whole events of ``event`` and ``data``
        lines alone, ended by LF, is read at once, its events handed out as (type, data) pairs;
        any other chunk gives what ``feed`` gives."""
        if self._closed:
            raise ValueError("the event stream was closed")
        if isinstance(chunk, str):
            text = chunk
        elif self._text.buffer:
            text = self._text.decode(chunk)
        else:
            # With nothing held back, bytes that are all UTF-8 decode as the incremental
            # decoder would decode them, and it is left holding nothing, as it would be.
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError:
                text = self._text.decode(chunk)
        if (
            self._size == 0
            and self._started
            and not self._pieces
            and not self._after_cr
            and not self._refusing
            and not self._line_replaced
            and len(text) <= self._max
            and "\r" not in text
            and _MARK not in text
        ):
            # Most chunks are one event of at most one ``event`` line and one ``data`` line.
            one = _ONE_EVENT.fullmatch(text)
            if one is not None:
                kind, data = one.groups()
                return [(kind or "message", data)]
            if _WHOLE_EVENTS.fullmatch(text) is not None:
                return _whole_events(text)
        return self._decoded(text)

    def _decoded(self, text: str) -> list[ServerSentEvent]:
        if _MARK not in text:
            return self._lines(text)
        pieces = text.split(_MARK)
        events = self._lines(pieces[0])
        for piece in pieces[1:]:
            # The replacement the rules make, on the line it is in.
            self._line_replaced = True
            events += self._lines(_REPLACEMENT)
            events += self._lines(piece)
        return events

    def close(self) -> None:
        """The end of the body: an event it did not end with a blank line is discarded, and so
        is a line it did not end."""
        self._closed = True

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
        # The next LF and the next CR at or after ``start`` (``length`` for none): each is
        # searched for again only once the line splitting has passed it, so that text with
        # only one kind of line ending is not searched to its end for the other at every line.
        newline = _find(text, "\n", start, length)
        carriage = _find(text, "\r", start, length)
        while start < length:
            if newline < start:
                newline = _find(text, "\n", start, length)
            if carriage < start:
                carriage = _find(text, "\r", start, length)
            if carriage < newline:
                end = carriage
                if carriage + 1 == length:
                    after, self._after_cr = length, True
                else:
                    after = carriage + 2 if newline == carriage + 1 else carriage + 1
            elif newline < length:
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
        replaced, self._line_replaced = self._line_replaced, False
        if self._refusing:
            if size == 0:
                # The blank line that ends the refused event.
                self._refusing = False
                self._forget_event()
            return None
        if size == 0:
            # The blank line ends the event: it is no part of its size, and a refusal here
            # would read past the next event as the rest of this one.
            return self._line(line, replaced=False)
        self._size += size + 1
        if self._size > self._max:
            return self._refuse(f"an event longer than {self._max} characters")
        return self._line(line, replaced=replaced)

    def _refuse(self, why: str) -> ServerSentEvent:
        self._forget_event()
        self._pieces = []
        self._refusing = True
        return ServerSentEvent(event="", data="", refused=why)

    def _forget_event(self) -> None:
        self._event = ""
        self._data = []
        self._size = 0
        self._replaced = False

    def _line(self, line: str, *, replaced: bool) -> ServerSentEvent | None:
        if not line:
            if not self._data:
                self._forget_event()
                return None
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        else:
            if name == "id" and "\0" not in value:
                self._id = value
            # No adapter reads the id, nor a field the rules ignore: bytes there reach nothing.
            return None
        self._replaced = self._replaced or replaced
        return None

    def _dispatch(self) -> ServerSentEvent:
        event = ServerSentEvent(
            event=self._event or "message",
            data="\n".join(self._data),
            id=self._id,
            replaced=self._replaced,
        )
        self._forget_event()
        return event


_ONE_EVENT = re.compile(r"(?:event: ?([^\n]*)\n)?data: ?([^\n]*)\n\n")
"""One whole event of an optional ``event`` line and a ``data`` line ended by LF: its type and
its data, one leading space taken from each value as the rules take it."""
_WHOLE_EVENTS = re.compile(r"(?:(?:(?:event|data):[^\n]*\n)+\n)+")
"""Whole events of ``event`` and ``data`` lines ended by LF: read by ``_whole_events``."""


def _whole_events(text: str) -> list[tuple[str, str]]:
    """The events of text that ``_WHOLE_EVENTS`` matches, as the rules read them: no line is
    blank but the one that ends each event, so that each event is the text between two LF LF;
    an event of ``event`` lines alone dispatches nothing."""
    events: list[tuple[str, str]] = []
    for block in text[:-2].split("\n\n"):
        kind = ""
        data: list[str] = []
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if name == "data":
                data.append(value)
            else:
                kind = value
        if data:
            events.append((kind or "message", "\n".join(data)))
    return events


def _find(text: str, character: str, start: int, length: int) -> int:
    """Where ``character`` is next in ``text`` from ``start``; ``length`` where it is not."""
    found = text.find(character, start)
    return length if found < 0 else found
