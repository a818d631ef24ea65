"""The calls of one provider response, as every adapter tracks them.

``ResponseCalls`` owns the identities of the calls of one response, so that no adapter can merge
or guess them: a provider item key ("slot": an item id, a block index, a part position) is bound
to its call id and tool when the call opens, and a protocol that later names a different call
or tool for the same slot has broken its own rules. The call then fails (a different tool: the
actor sees the call opened again as another tool) or the whole response is ended as a protocol
violation (a different call id on a slot), and nothing more of that response is passed on.

It also numbers each call's events consecutively (opening 0, each fragment the next, the end
event the next), whatever the provider numbers, and places each fragment at the call's byte
offset (the bytes of the call's fragments before it), so that the actor can tell a duplicate
delivery from new data and a lost fragment from none. Numbers and offsets are a function of the
stream alone: the same stream fed twice produces the same events, which the actors then reject
as duplicates.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import attrs
from attrs import define

from ..events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    ServerToolCalled,
    StreamLost,
    StreamResumed,
    TerminalRef,
    TextReceived,
    TurnRef,
)


@define
class _Call:
    key: CallKey
    tool: str
    next_sequence: int
    offset: int = 0
    server: bool = False
    end: CallEnded | None = None
    final: bytes | None = None


@define
class ResumedCall:
    """A call a stream left collecting, as the log knows it: for an adapter that resumes."""

    slot: str
    key: CallKey
    tool: str
    next_sequence: int
    offset: int = 0
    """The byte offset its next fragment takes: one past the furthest byte the log holds."""
    ended: bool = False
    """Its own end event arrived (the end's sequence is the last one it has seen)."""


class ResponseCalls:
    """The calls of one provider response, with their identities held stable."""

    def __init__(self, turn: TurnRef, response: str) -> None:
        self.ref = ResponseRef(
            tenant=turn.tenant, conversation=turn.conversation, turn=turn.turn, response=response
        )
        self._calls: dict[str, _Call] = {}
        self.ended = False
        self.broken = False

    def restore(self, calls: list[ResumedCall]) -> None:
        """Take up calls an earlier stream of this response left open (a resumed stream)."""
        for call in calls:
            restored = _Call(
                key=call.key, tool=call.tool, next_sequence=call.next_sequence, offset=call.offset
            )
            if call.ended:
                restored.end = CallEnded(
                    key=call.key, terminal=TerminalRef(sequence=call.next_sequence - 1)
                )
            self._calls[call.slot] = restored

    def slots(self) -> list[str]:
        return list(self._calls)

    def is_open(self, slot: str) -> bool:
        call = self._calls.get(slot)
        return call is not None and not call.server and call.end is None

    def knows(self, slot: str) -> bool:
        return slot in self._calls

    def key_of(self, slot: str) -> CallKey:
        """The key bound to ``slot`` when its call opened (``KeyError`` for a slot never seen)."""
        return self._calls[slot].key

    def tool(self, slot: str) -> str | None:
        call = self._calls.get(slot)
        return None if call is None else call.tool

    def open(self, slot: str, *, call: str | None, tool: str) -> list[Event]:
        """The provider opened a call of ``tool`` at ``slot`` (``call``: its id, if it has one)."""
        if self.broken:
            return []
        known = self._calls.get(slot)
        key = self._key(slot, call)
        if key is None:
            return self.violate("an item or call id that cannot name a call")
        if known is None:
            self._calls[slot] = _Call(key=key, tool=tool, next_sequence=1)
            return [CallOpened(key=key, tool=tool, sequence=0)]
        if known.key != key or known.server:
            return self.violate(f"item {slot!r} opened again as another call")
        # The same opening again is a duplicate delivery, another tool an identity conflict:
        # the call's actor judges both.
        return [CallOpened(key=key, tool=tool, sequence=0)]

    def server_tool(self, slot: str, *, call: str | None, tool: str) -> list[Event]:
        """The provider ran a tool of its own at ``slot``: on record, never dispatchable."""
        if self.broken:
            return []
        known = self._calls.get(slot)
        key = self._key(slot, call)
        if key is None:
            return self.violate("an item or call id that cannot name a call")
        if known is None:
            self._calls[slot] = _Call(key=key, tool=tool, next_sequence=1, server=True)
        elif known.key != key or not known.server:
            return self.violate(f"item {slot!r} opened again as a server tool")
        return [ServerToolCalled(key=key, tool=tool)]

    def append(self, slot: str, data: bytes) -> list[Event]:
        """A fragment of the arguments of the call at ``slot``."""
        if self.broken:
            return []
        known = self._calls.get(slot)
        if known is None:
            return self.violate(f"arguments for item {slot!r}, which was never opened")
        if known.server or not data:
            return []
        sequence, offset = known.next_sequence, known.offset
        known.next_sequence += 1
        known.offset += len(data)
        return [
            ArgumentsAppended(
                key=known.key,
                data=data,
                offset=offset,
                first_sequence=sequence,
                last_sequence=sequence,
            )
        ]

    def append_next(self, slot: str, data: bytes) -> list[Event]:
        """``append`` of a fragment of a call opened by this stream, at the cost of the event
        alone: the hot path of every adapter."""
        known = self._calls.get(slot)
        if known is None or known.server or not data or self.broken:
            return self.append(slot, data)
        sequence, offset = known.next_sequence, known.offset
        if type(sequence) is not int or type(offset) is not int or sequence < 0 or offset < 0:
            # Numbers a resumed stream was given: the event's own checks judge them.
            return self.append(slot, data)
        known.next_sequence = sequence + 1
        known.offset = offset + len(data)
        return [_appended(known.key, data, offset, sequence)]

    def end(self, slot: str, final: bytes | None = None) -> list[Event]:
        """The call at ``slot`` ended (``final``: the whole arguments, where the provider sends
        them). Ending it again with the same or no final arguments repeats the same end event."""
        if self.broken:
            return []
        known = self._calls.get(slot)
        if known is None:
            return self.violate(f"end of item {slot!r}, which was never opened")
        if known.server:
            return []
        if known.end is not None and (final is None or final == known.final):
            return [known.end]
        sequence = known.next_sequence
        known.next_sequence += 1
        ended = CallEnded(
            key=known.key, terminal=TerminalRef(sequence=sequence), final_arguments=final
        )
        if known.end is None:
            known.end, known.final = ended, final
        return [ended]

    def end_response(
        self, reason: ResponseEndReason, terminal: TerminalRef, detail: str = ""
    ) -> list[Event]:
        """The response ended; its calls not ended by then fail in their actors."""
        if self.broken:
            return []
        self.ended = True
        return [ResponseEnded(response=self.ref, reason=reason, terminal=terminal, detail=detail)]

    def violate(self, detail: str) -> list[Event]:
        """The provider broke its protocol: every call of the response not yet dispatched fails,
        and nothing more of the response is passed on."""
        if self.broken:
            return []
        self.broken = self.ended = True
        digest = hashlib.sha256(detail.encode("utf-8", "surrogatepass")).hexdigest()
        return [
            ResponseEnded(
                response=self.ref,
                reason=ResponseEndReason.PROTOCOL_VIOLATION,
                terminal=TerminalRef(digest=digest),
                detail=detail,
            )
        ]

    def lost(self, *, resumable: bool, last_sequence: int | None = None) -> list[Event]:
        """The connection dropped before the response ended."""
        if self.ended:
            return []
        return [StreamLost(response=self.ref, resumable=resumable, last_sequence=last_sequence)]

    def resumed(self, after_sequence: int | None) -> list[Event]:
        """A new connection continues the response after ``after_sequence``."""
        return [StreamResumed(response=self.ref, after_sequence=after_sequence)]

    def text(self, characters: int) -> list[Event]:
        """Text for the person: counted for the status, never part of a call."""
        if self.broken or characters <= 0:
            return []
        return [TextReceived(response=self.ref, characters=characters)]

    def _key(self, slot: str, call: str | None) -> CallKey | None:
        """The key of a call, or None where the provider's ids cannot make one (empty, too
        long, not Unicode): a call nobody could address again."""
        ref = self.ref
        try:
            return CallKey(
                tenant=ref.tenant,
                conversation=ref.conversation,
                turn=ref.turn,
                response=ref.response,
                item=slot,
                call=call or slot,
            )
        except (TypeError, ValueError):
            return None


def _appended_maker() -> Callable[[CallKey, bytes, int, int], ArgumentsAppended]:
    """A function that makes the ``ArgumentsAppended`` of one fragment, equal to the one its
    ``__init__`` makes, without the checks of numbers the caller knows to be non-negative
    integers: one is made for every delta of every stream."""
    names = tuple(field.name for field in attrs.fields(ArgumentsAppended))
    if names != ("key", "data", "offset", "first_sequence", "last_sequence", "fragments"):
        raise AssertionError(f"the fields of ArgumentsAppended changed: {names}")
    key_, data_, offset_, first_, last_, fragments_ = (
        getattr(ArgumentsAppended, name).__set__ for name in names
    )
    new = object.__new__

    def make(key: CallKey, data: bytes, offset: int, sequence: int) -> ArgumentsAppended:
        appended = new(ArgumentsAppended)
        key_(appended, key)
        data_(appended, data)
        offset_(appended, offset)
        first_(appended, sequence)
        last_(appended, sequence)
        fragments_(appended, 1)
        return appended

    return make


_appended = _appended_maker()
