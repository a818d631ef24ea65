"""OpenAI Responses streams to portable ingress events, with background-mode resumption.

A body is a sequence of SSE events (``event: <type>`` and ``data: {"type": "<type>", ...}``; the
type is read from the data). A response opens with ``response.created`` (``response.in_progress``
or ``response.queued`` when nothing opened it) and ends with its terminal event. A file holding
several recorded bodies back to back is read as responses one after the other.

Identities. The response is ``response.id`` from the event that opened it. An output item is
bound to its ``output_index`` by ``response.output_item.added``; a call's slot is the item's
``id`` (``fc_...``, ``ctc_...``), its call id the item's ``call_id``, its tool the item's ``name``
(``<namespace>.<name>`` when the item names a namespace, so that a namespaced tool can never be
taken for a top-level one of the same name). Every event about a call names its item by
``item_id`` and ``output_index``; one whose id is not the id of the item at that position (ids
that rotate, as GitHub Copilot's endpoint does), a ``call_id`` that changes, or a call event for
an item that is not that kind of call ends the response as a protocol violation. Items that are
no calls (messages, reasoning) carry nothing that could act, so a rotating id on them changes
nothing; likewise a lifecycle or terminal event that names another response id is a protocol
violation only for a response that has calls. A tool name that changes is reported as the call
opened again as that tool, for its actor to fail as an identity conflict.

Function calls. ``output_item.added`` opens the call; each
``response.function_call_arguments.delta`` appends its UTF-8 bytes;
``response.function_call_arguments.done`` ends it with its ``arguments`` as the provider's
final arguments. ``output_item.done`` ends a call not ended yet with the item's ``arguments``,
and ends an ended one again only when its arguments differ from the final arguments it ended
with (a second, different end: its actor fails the call). A response that completes while one
of its call items was done with a status other than ``completed`` breaks the protocol.

Custom tool calls (``custom_tool_call``) take free text, not JSON. Their input is carried as the
JSON object ``{"input": "<text>"}``, so that the executor receives the text whole and unaltered
under ``input``: the first non-empty ``response.custom_tool_call_input.delta`` is preceded by the
fragment ``{"input":"``, each delta is appended as its JSON string escape without the quotes
(``json.dumps(delta, ensure_ascii=False)[1:-1]``: escaping is per character, so the pieces
escape to the escape of the whole), and ``"}`` closes it before the end; the final arguments are
``{"input":"<escaped text>"}`` (no spaces) from ``response.custom_tool_call_input.done``'s
``input`` or the ``output_item.done`` item's ``input``. A call that streamed no delta is ended
by its final arguments alone.

Server tools (``mcp_call``, ``code_interpreter_call``, ``web_search_call``,
``file_search_call``, ``image_generation_call``, ``shell_call``, ``local_shell_call``) are
recorded as the provider's own tools (the item's ``name`` or, without one, its type), never as
calls, and their input deltas are ignored. ``computer_call`` (and every other item type) is not
supported: it is ignored, so that nothing of it can ever be dispatched.

Ends. ``response.completed`` is the only success. ``response.incomplete`` ends ``length`` for
``max_output_tokens``, ``content_filter`` for ``content_filter``, ``incomplete`` otherwise;
``response.failed`` ends ``error`` with the error code as detail; ``response.cancelled``, and
any terminal whose response has status ``cancelled``, ends ``cancelled``. An ``error`` event
(the SDK's flat ``{code, message, param}`` or the nested ``{error: {type, code, message,
param}}`` seen on the wire, or a payload without a type that carries a top-level ``error``)
ends the open response ``error`` at once, with its code (or type)
as detail and never its message; the ``response.failed`` that follows repeats an end that the
actors ignore. An ``error`` before any response emits nothing. A terminal is identified by its
``sequence_number``, or by a digest of the event where it has none.

Ordering. ``sequence_number`` counts a response's events from 0. An event numbered at or below
the highest number seen is a replayed delivery and is ignored; one that skips a number means
events were lost, and the response ends as a protocol violation (``sequence gap``). Events
without numbers are taken in arrival order. Events after a response's terminal are ignored,
except further terminal events.

Errors in the data. A payload that is not a JSON object, an event without a type or missing a
field the protocol requires, or a new ``response.created`` while a response is still open, ends
the open response as a protocol violation. A payload cut off by the end of the body is a lost
connection instead. Events that no response can own (before any response opened, or of a
response whose id cannot name one) are ignored, and so is a ``data: [DONE]`` line (some
OpenAI-compatible servers end the body with one).

Resumption. With ``resumable=True`` (background mode) a body that ends before the response's
terminal reports the stream lost and resumable, with the last sequence number seen: its calls
keep collecting. ``resume`` makes a fresh adapter the continuation of that response
(``GET /v1/responses/{id}?stream=true&starting_after=N``), possibly in another process: it takes
up the calls the log knows as open (``Runtime.resumable_calls``), treats every event numbered up
to ``N`` as seen, and attributes the continuation's events to the resumed response even without
a ``response.created``. A resumed adapter is in background mode whatever it was created with.

Text for the person (``response.output_text.delta``, ``response.refusal.delta``) is counted for
the status; reasoning is not. Decoded events come as dicts or ``openai`` SDK event objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from attrs import define, field

from ..events import Event, ResponseEndReason, TerminalRef, TurnRef
from ._adapter import JSONObject, ProtocolBreak, event_digest, kind_of
from ._calls import ResponseCalls, ResumedCall
from ._sse import DEFAULT_MAX_EVENT_SIZE
from ._sse_adapter import SSEAdapter

_FUNCTION = "function_call"
_CUSTOM = "custom_tool_call"
_CALL_KINDS = frozenset({_FUNCTION, _CUSTOM})
_SERVER_KINDS = frozenset(
    {
        "mcp_call",
        "code_interpreter_call",
        "web_search_call",
        "file_search_call",
        "image_generation_call",
        "shell_call",
        "local_shell_call",
    }
)

_OPENERS = frozenset({"response.created", "response.in_progress", "response.queued"})
_TERMINALS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "response.cancelled"}
)
_TEXT = frozenset({"response.output_text.delta", "response.refusal.delta"})
_INCOMPLETE = {
    "max_output_tokens": ResponseEndReason.LENGTH,
    "content_filter": ResponseEndReason.CONTENT_FILTER,
}

_CUSTOM_OPEN = b'{"input":"'
_CUSTOM_CLOSE = b'"}'
_DONE = "[DONE]"


@define
class _Item:
    """An output item of a response, as far as its calls need it."""

    id: str
    kind: str | None
    """The item type; None for a call taken up by ``resume`` until an event says which."""
    index: int | None
    call: str | None = None
    tool: str | None = None
    status: str | None = None
    """The status its ``output_item.done`` gave it."""
    final: bytes | None = None
    """The final arguments the call was ended with (unknown for a resumed call)."""
    input_started: bool = False
    """A custom call's ``{"input":"`` was appended."""


@define
class _Response:
    """One response of the body and what its events have bound so far."""

    id: str
    calls: ResponseCalls
    highest: int = -1
    """The highest sequence number seen."""
    items: dict[str, _Item] = field(factory=dict)
    at: dict[int, _Item] = field(factory=dict)
    """output_index -> the item bound there."""


class OpenAIResponsesAdapter(SSEAdapter):
    """One OpenAI Responses HTTP body of a turn, turned into portable ingress events.

    ``resumable``: the response runs in background mode, so a body that ends before its terminal
    event can be continued later (see ``resume``) and its calls keep collecting meanwhile.
    """

    PROTOCOL = "OpenAI Responses"

    def __init__(
        self,
        turn: TurnRef,
        *,
        resumable: bool = False,
        max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
    ) -> None:
        super().__init__(max_event_size=max_event_size)
        self.turn = turn
        self._resumable = resumable
        self._response: _Response | None = None

    def _unfinished(self) -> list[Event]:
        """A response without its terminal event is lost (resumable in background mode, with
        the last sequence number seen)."""
        response = self._response
        if response is None:
            return []
        last = response.highest if response.highest >= 0 else None
        return response.calls.lost(resumable=self._resumable, last_sequence=last)

    def resume(
        self, response_id: str, *, after_sequence: int, calls: list[ResumedCall]
    ) -> list[Event]:
        """Make this adapter the continuation of a background response after
        ``after_sequence``, taking up ``calls`` (``Runtime.resumable_calls``): before any
        event is fed. Returns the ``StreamResumed`` event."""
        self._check_open()
        if self._fed:
            raise ValueError("resume() starts a continuation: call it before feeding any event")
        if isinstance(after_sequence, bool) or not isinstance(after_sequence, int):
            raise TypeError("after_sequence must be an int")
        if after_sequence < 0:
            raise ValueError("after_sequence must not be negative")
        tracker = ResponseCalls(self.turn, response_id)
        for call in calls:
            if call.key.response_ref != tracker.ref:
                raise ValueError(f"call {call.slot!r} belongs to another response or turn")
        tracker.restore(calls)
        response = _Response(id=response_id, calls=tracker, highest=after_sequence)
        for call in calls:
            response.items[call.slot] = _Item(
                id=call.slot,
                kind=None,
                index=None,
                call=call.key.call,
                tool=call.tool,
                # The opening is sequence 0: anything after it was an appended fragment.
                input_started=call.next_sequence > 1,
            )
        self._response = response
        self._fed = True
        # A response that was resumed once runs in background mode: it can be resumed again.
        self._resumable = True
        return tracker.resumed(after_sequence)

    # --- payloads ------------------------------------------------------------------------------

    def _of_protocol(self, event: JSONObject) -> bool:
        kind = kind_of(event)
        return (kind is not None and kind.startswith("response.")) or kind == "error"

    def _not_json(self, kind: str, data: str) -> list[Event] | None:
        # OpenAI-compatible servers may end the body like Chat Completions: nothing to read.
        return [] if data[:1] != "{" and data.strip() == _DONE else None

    def _handle(self, payload: JSONObject) -> list[Event]:
        kind = payload.get("type")
        if kind is None and payload.get("error"):
            kind = "error"
        if not isinstance(kind, str):
            return self._violate("an event without a type")
        events: list[Event] = []
        try:
            response = self._owner(kind, payload, events)
            if response is None:
                return events
            if not self._in_order(response, payload, events):
                return events
            if response.calls.ended:
                if kind in _TERMINALS:
                    self._terminal(response, kind, payload, events)
                return events
            self._event(response, kind, payload, events)
        except ProtocolBreak as problem:
            events += self._violate(str(problem))
        return events

    def _handle_fast(self, payload: JSONObject) -> list[Event]:
        # A function call's delta, next in its response's order, for the function call item
        # bound at its output: what the reference would do, without its many lookups. Every
        # other event, and this one met in any other state, is read by the reference.
        if payload.get("type") != "response.function_call_arguments.delta":
            return self._handle(payload)
        response = self._response
        if response is None or response.calls.ended:
            return self._handle(payload)
        numbered = "sequence_number" in payload
        sequence: Any = payload.get("sequence_number")
        index = payload.get("output_index")
        delta = payload.get("delta")
        item = response.at.get(index) if type(index) is int else None
        if (
            item is None
            or item.kind != _FUNCTION
            or item.id != payload.get("item_id")
            or type(delta) is not str
            or (numbered and (type(sequence) is not int or sequence != response.highest + 1))
        ):
            return self._handle(payload)
        if numbered:
            response.highest = sequence
        if not delta:
            return []
        return response.calls.append_next(item.id, _utf8(delta))

    def _latest(self) -> ResponseCalls | None:
        return None if self._response is None else self._response.calls

    def _owner(self, kind: str, payload: JSONObject, events: list[Event]) -> _Response | None:
        """The response an event belongs to, opening a new one where the event does."""
        current = self._response
        if kind not in _OPENERS:
            return current
        identity = _response_id(payload)
        if current is not None and identity == current.id:
            return current
        if kind != "response.created" and current is not None and not current.calls.ended:
            # Another id on a lifecycle event of the open response: judged with its other events.
            return current
        if current is not None and not current.calls.ended:
            events += current.calls.violate("a new response began before this one ended")
        try:
            calls = ResponseCalls(self.turn, identity)
        except ValueError:
            # An id that cannot name a response: nothing that follows can be attributed.
            self._response = None
            return None
        self._response = _Response(id=identity, calls=calls)
        return self._response

    def _in_order(self, response: _Response, payload: JSONObject, events: list[Event]) -> bool:
        """Whether the event is new to the response (a replay is not; a gap breaks it)."""
        if "sequence_number" not in payload:
            return True
        sequence = payload["sequence_number"]
        if not _is_index(sequence):
            raise ProtocolBreak("a sequence_number that is not a non-negative integer")
        if sequence <= response.highest:
            return False
        expected = response.highest + 1
        response.highest = sequence
        if sequence > expected and not response.calls.ended:
            events += response.calls.violate(f"sequence gap: {expected} expected, {sequence} came")
            return False
        return True

    def _event(
        self, response: _Response, kind: str, payload: JSONObject, events: list[Event]
    ) -> None:
        calls = response.calls
        match kind:
            case "response.output_item.added":
                self._item_added(response, payload, events)
            case "response.output_item.done":
                self._item_done(response, payload, events)
            case "response.function_call_arguments.delta":
                item = self._call_item(response, payload, _FUNCTION)
                delta = _string(payload, "delta", kind)
                if delta:
                    events += calls.append(item.id, _utf8(delta))
            case "response.function_call_arguments.done":
                item = self._call_item(response, payload, _FUNCTION)
                self._end_function(response, item, _string(payload, "arguments", kind), events)
            case "response.custom_tool_call_input.delta":
                item = self._call_item(response, payload, _CUSTOM)
                delta = _string(payload, "delta", kind)
                if delta:
                    if not item.input_started:
                        item.input_started = True
                        events += calls.append(item.id, _CUSTOM_OPEN)
                    events += calls.append(item.id, _escaped(delta))
            case "response.custom_tool_call_input.done":
                item = self._call_item(response, payload, _CUSTOM)
                self._end_custom(response, item, _string(payload, "input", kind), events)
            case "error":
                self._error(response, payload, events)
            case _ if kind in _TERMINALS:
                self._terminal(response, kind, payload, events)
            case _ if kind in _OPENERS:
                self._names_response(response, payload, events)
            case _ if kind in _TEXT:
                events += calls.text(len(_string(payload, "delta", kind)))

    # --- items ---------------------------------------------------------------------------------

    def _item_added(self, response: _Response, payload: JSONObject, events: list[Event]) -> None:
        index = _index(payload)
        added = _item_object(payload)
        kind = str(added.get("type"))
        identity = added.get("id")
        bound = response.at.get(index)
        if kind not in _CALL_KINDS and kind not in _SERVER_KINDS:
            if bound is not None and _is_call(bound) and bound.id != identity:
                raise ProtocolBreak(f"output {index} added again as another item")
            if isinstance(identity, str):
                response.at[index] = _Item(id=identity, kind=kind, index=index)
            return
        if not isinstance(identity, str) or not identity:
            raise ProtocolBreak(f"a {kind} item at output {index} without an id")
        if bound is not None and bound.id != identity and (_is_call(bound) or kind in _CALL_KINDS):
            raise ProtocolBreak(f"output {index} added again as another item")
        known = response.items.get(identity)
        if known is not None and known.index not in (None, index):
            raise ProtocolBreak(f"item {_shown(identity)} added at a second output")
        calls = response.calls
        if kind in _SERVER_KINDS:
            name = added.get("name")
            tool = name if isinstance(name, str) and name else kind
            events += _naming(lambda: calls.server_tool(identity, call=identity, tool=tool))
            item = _Item(id=identity, kind=kind, index=index)
        else:
            call = _string(added, "call_id", kind)
            tool = _tool_name(_string(added, "name", kind), added.get("namespace"))
            if known is not None and (known.call != call or known.kind not in (None, kind)):
                raise ProtocolBreak(f"item {_shown(identity)} added again as another call")
            events += _naming(lambda: calls.open(identity, call=call, tool=tool))
            item = known or _Item(id=identity, kind=kind, index=index, call=call, tool=tool)
            item.kind, item.index = kind, index
        response.items[identity] = item
        response.at[index] = item

    def _item_done(self, response: _Response, payload: JSONObject, events: list[Event]) -> None:
        index = _index(payload)
        done = _item_object(payload)
        kind = kind_of(done)
        identity = done.get("id")
        bound = response.at.get(index)
        if kind not in _CALL_KINDS:
            if bound is not None and _is_call(bound):
                raise ProtocolBreak(f"output {index} done as another item")
            return
        if not isinstance(identity, str) or not identity:
            raise ProtocolBreak(f"a {kind} item done at output {index} without an id")
        item = self._resolve(response, identity, index, str(kind))
        call = _string(done, "call_id", str(kind))
        if call != item.call:
            raise ProtocolBreak(f"item {_shown(identity)} done with another call id")
        tool = _tool_name(_string(done, "name", str(kind)), done.get("namespace"))
        self._same_tool(response, item, tool, events)
        status = done.get("status")
        if status is not None:
            if not isinstance(status, str):
                raise ProtocolBreak(
                    f"item {_shown(identity)} done with a status that is not a string"
                )
            item.status = status
        if kind == _FUNCTION:
            self._end_function(response, item, _string(done, "arguments", str(kind)), events)
        else:
            self._end_custom(response, item, _string(done, "input", str(kind)), events)

    def _call_item(self, response: _Response, payload: JSONObject, kind: str) -> _Item:
        identity = payload.get("item_id")
        if not isinstance(identity, str) or not identity:
            raise ProtocolBreak(f"{kind} input without an item_id")
        return self._resolve(response, identity, _index(payload), kind)

    def _resolve(self, response: _Response, identity: str, index: int, kind: str) -> _Item:
        """The call item an event names by ``item_id`` at ``output_index``; it must be the item
        bound there, and of the kind the event is about."""
        bound = response.at.get(index)
        if bound is None:
            item = response.items.get(identity)
            if item is None:
                raise ProtocolBreak(f"item {_shown(identity)} was never added")
            if item.index is not None:
                raise ProtocolBreak(f"item {_shown(identity)} named at output {index}")
            # A call taken up by resume: its first event tells where it is.
            item.index = index
            response.at[index] = item
            bound = item
        if bound.id != identity:
            raise ProtocolBreak(f"output {index} named as item {_shown(identity)}")
        if bound.kind is None:
            bound.kind = kind
        if bound.kind != kind:
            raise ProtocolBreak(f"{kind} input for item {_shown(identity)}, a {_shown(bound.kind)}")
        return bound

    def _same_tool(self, response: _Response, item: _Item, tool: str, events: list[Event]) -> None:
        if tool != item.tool:
            # The call opened again as another tool: its actor fails it as an identity conflict.
            events += response.calls.open(item.id, call=item.call, tool=tool)

    def _end_function(
        self, response: _Response, item: _Item, arguments: str, events: list[Event]
    ) -> None:
        self._end(response, item, _utf8(arguments), events)

    def _end_custom(self, response: _Response, item: _Item, text: str, events: list[Event]) -> None:
        final = _CUSTOM_OPEN + _escaped(text) + _CUSTOM_CLOSE
        if response.calls.is_open(item.id) and item.input_started:
            events += response.calls.append(item.id, _CUSTOM_CLOSE)
        self._end(response, item, final, events)

    def _end(self, response: _Response, item: _Item, final: bytes, events: list[Event]) -> None:
        calls = response.calls
        if calls.is_open(item.id):
            item.final = final
            events += calls.end(item.id, final=final)
        elif item.final is not None and item.final != final:
            # The provider ends the call again with other arguments: a second, different end.
            events += calls.end(item.id, final=final)

    # --- responses -----------------------------------------------------------------------------

    def _names_response(
        self, response: _Response, payload: JSONObject, events: list[Event]
    ) -> bool:
        """Whether a lifecycle event names its response; another id ends a response that has
        calls (nothing can act in one that has none)."""
        if _response_id(payload) == response.id or not response.items:
            return True
        events += response.calls.violate("an event of the response named another response")
        return False

    def _terminal(
        self, response: _Response, kind: str, payload: JSONObject, events: list[Event]
    ) -> None:
        body = _response_object(payload)
        if not response.calls.ended and not self._names_response(response, payload, events):
            return
        status = body.get("status")
        detail = ""
        if kind == "response.cancelled" or status == "cancelled":
            reason = ResponseEndReason.CANCELLED
        elif kind == "response.completed":
            if status not in (None, "completed"):
                raise ProtocolBreak("response.completed for a response that did not complete")
            for item in response.items.values():
                if _is_call(item) and item.status not in (None, "completed"):
                    raise ProtocolBreak(
                        f"item {_shown(item.id)} not completed in a completed response"
                    )
            reason = ResponseEndReason.COMPLETED
        elif kind == "response.incomplete":
            details = body.get("incomplete_details")
            detail = _code(details.get("reason")) if isinstance(details, Mapping) else ""
            reason = _INCOMPLETE.get(detail, ResponseEndReason.INCOMPLETE)
        else:
            reason = ResponseEndReason.ERROR
            error = body.get("error")
            if isinstance(error, Mapping):
                detail = _code(error.get("code")) or _code(error.get("type"))
        events += response.calls.end_response(reason, _terminal_ref(payload), detail)

    def _error(self, response: _Response, payload: JSONObject, events: list[Event]) -> None:
        error = payload.get("error")
        source = error if isinstance(error, Mapping) else payload
        detail = _code(source.get("code")) or _code(source.get("type")) or "error"
        events += response.calls.end_response(
            ResponseEndReason.ERROR, _terminal_ref(payload), detail
        )


def _naming(make: Callable[[], list[Event]]) -> list[Event]:
    """Events naming a call, or a protocol violation when its ids cannot name one."""
    try:
        return make()
    except ValueError:
        raise ProtocolBreak("an item id or call id that cannot name a call") from None


def _shown(name: str | None) -> str:
    """A provider identity for a detail, cut short: details are read by people."""
    if name is None:
        return "None"
    return repr(name if len(name) <= 80 else f"{name[:77]}...")


def _is_index(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_call(item: _Item) -> bool:
    return item.kind in _CALL_KINDS or item.call is not None


def _index(payload: JSONObject) -> int:
    index = payload.get("output_index")
    if not _is_index(index):
        raise ProtocolBreak(f"{payload.get('type')} without an output_index")
    assert isinstance(index, int)
    return index


def _item_object(payload: JSONObject) -> JSONObject:
    item = payload.get("item")
    if not isinstance(item, Mapping):
        raise ProtocolBreak(f"{payload.get('type')} without an item")
    return item


def _response_object(payload: JSONObject) -> JSONObject:
    body = payload.get("response")
    if not isinstance(body, Mapping):
        raise ProtocolBreak(f"{payload.get('type')} without a response")
    return body


def _response_id(payload: JSONObject) -> str:
    identity = _response_object(payload).get("id")
    if not isinstance(identity, str):
        raise ProtocolBreak(f"{payload.get('type')} without a response id")
    return identity


def _string(payload: JSONObject, name: str, what: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str):
        raise ProtocolBreak(f"{what} without a string {name}")
    return value


def _tool_name(name: str, namespace: object) -> str:
    if not name:
        raise ProtocolBreak("a call without a tool name")
    if isinstance(namespace, str) and namespace:
        return f"{namespace}.{name}"
    return name


def _code(value: object) -> str:
    """An error code or reason fit for a detail: a short identifier, never a message."""
    if isinstance(value, str) and 0 < len(value) <= 100:
        return value
    return ""


def _utf8(text: str) -> bytes:
    # Lone surrogates from JSON escapes stay invalid UTF-8: the strict parser rejects them.
    return text.encode("utf-8", "surrogatepass")


def _escaped(text: str) -> bytes:
    return _utf8(json.dumps(text, ensure_ascii=False)[1:-1])


def _terminal_ref(payload: JSONObject) -> TerminalRef:
    sequence = payload.get("sequence_number")
    if _is_index(sequence):
        assert isinstance(sequence, int)
        return TerminalRef(sequence=sequence)
    return TerminalRef(digest=event_digest(payload))
