"""OpenAI Chat Completions streams (and OpenAI-compatible servers) to portable ingress events.

A body is a sequence of ``data:`` chunks ``{"id": "chatcmpl-…", "choices": [{"index", "delta",
"finish_reason"}], …}`` ended by ``data: [DONE]``. It carries one completion; a file that
holds several recorded bodies back to back is read as completions one after the other.

Identities. The response is the chunk ``id``. A tool call is addressed by its choice and its
``index``: the slot is ``"<index>"`` in choice 0 and ``"<choice>.<index>"`` in any other; its call
id and tool name come only with the first fragment of that index. Empty strings count as absent
(Mistral repeats ``name: ""``, Alibaba sends ``id: ""`` on every continuation). A fragment for an
index never opened and without both id and name cannot be attributed, and a call id that
differs from the one the index was opened with breaks the protocol: either ends the completion as
a protocol violation. A different tool name on an open index is reported as the call opened again
as that tool, for its actor to fail as an identity conflict. The deprecated
``delta.function_call`` (one call per choice, no id, no index) takes the slot ``"function_call"``
(``"<choice>.function_call"``).

Ends. No call has an end event of its own: a choice's ``finish_reason`` ends every call of that
choice, and ``data: [DONE]`` ends the completion with what the finish reasons say: ``tool_calls``,
``stop`` and ``function_call`` are a success, ``length`` a truncation, ``content_filter`` a
filtered answer, anything else (or no finish reason at all, or a choice that never finished)
incomplete. Its terminal identity is a digest naming the completion and ``[DONE]`` (that line is
not JSON). The usage chunk (``choices: []``) may come before ``[DONE]``.

Errors after HTTP 200: a payload with a top-level ``error`` object (and Groq's ``event: error``)
ends the open completion with ``error``, the detail being the error's ``code`` or ``type`` only:
never its message or ``failed_generation``, which may quote arguments. A payload that is not a
well-formed chunk ends the open completion as a protocol violation; so does a chunk of another
completion before ``[DONE]``, which then starts its own. What comes under a completion's id after
it ended is ignored; a chunk with a new id starts the next completion, and one whose id cannot
name a response (none, empty, too long) cannot be attributed and is passed on as nothing.

The protocol has no resume: a body that ends before ``[DONE]`` reports its completion lost and not
resumable (its open calls are then cancelled ``connection_lost``). Delta text (``content``,
``refusal``) is counted for the status; reasoning is not.

Decoded chunks come as dicts or ``openai`` SDK objects (``ChatCompletionChunk``); the SDK hides the
``[DONE]`` line, so ``feed_event("[DONE]")`` stands for it. The events of the SDK's
``chat.completions.stream()`` helper are read too: its ``chunk`` events as the chunks they wrap,
and the events it derives from them (``content.delta``, ``tool_calls.function.arguments.delta``
and the like) as nothing, since the chunks carry all of it. A stream whose events were none of
a Chat Completions stream (only those derived ones, or another protocol's) makes ``close``
raise ``ProtocolError``, as every SSE adapter does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeGuard

from attrs import define, field

from ..events import CallKey, Event, ResponseEndReason, TerminalRef, TurnRef
from ._adapter import JSONObject, ProtocolBreak, event_digest, kind_of
from ._calls import ResponseCalls
from ._envelope import read_event_json
from ._sse import DEFAULT_MAX_EVENT_SIZE
from ._sse_adapter import SSEAdapter

_DONE = "[DONE]"

_FINISHED = {
    "tool_calls": ResponseEndReason.COMPLETED,
    "stop": ResponseEndReason.COMPLETED,
    "function_call": ResponseEndReason.COMPLETED,
    "length": ResponseEndReason.LENGTH,
    "content_filter": ResponseEndReason.CONTENT_FILTER,
}

_LEGACY_SLOT = "function_call"

_HELPER_KINDS = frozenset(
    {
        "content.delta",
        "content.done",
        "refusal.delta",
        "refusal.done",
        "tool_calls.function.arguments.delta",
        "tool_calls.function.arguments.done",
        "logprobs.content.delta",
        "logprobs.content.done",
        "logprobs.refusal.delta",
        "logprobs.refusal.done",
    }
)
"""The events the ``openai`` SDK's ``chat.completions.stream()`` helper makes of the chunks,
which it yields too (each wrapped as a ``chunk`` event): the chunks are read, these add nothing.
A stream of these alone is of no protocol: ``close`` raises."""


def _helper_chunk(event: JSONObject) -> JSONObject | None:
    """The chunk a ``chunk`` event of the ``openai`` SDK's ``.stream()`` helper wraps."""
    chunk = event.get("chunk")
    if kind_of(event) == "chunk" and isinstance(chunk, Mapping):
        return chunk
    return None


@define
class _Completion:
    """One completion of the body, and what its chunks have bound so far."""

    id: str
    calls: ResponseCalls
    bound: dict[str, tuple[str | None, str]] = field(factory=dict)
    """slot -> (call id, tool) from the fragment that opened it."""
    slots: dict[int, list[str]] = field(factory=dict)
    """choice -> its slots, in opening order."""
    finished: dict[int, str] = field(factory=dict)
    """choice -> its finish reason, for every choice seen (``""`` until it finishes)."""

    def outcome(self) -> tuple[ResponseEndReason, str]:
        """How ``[DONE]`` ends the completion: a success only if every choice seen finished
        successfully; otherwise as the first choice (by index) that did not."""
        reasons = [self.finished[choice] for choice in sorted(self.finished)]
        if not any(reasons):
            return ResponseEndReason.INCOMPLETE, "no finish_reason"
        detail = ",".join(reason or "none" for reason in reasons)
        for reason in reasons:
            ended = _FINISHED.get(reason, ResponseEndReason.INCOMPLETE)
            if ended is not ResponseEndReason.COMPLETED:
                return ended, detail
        return ResponseEndReason.COMPLETED, detail


class OpenAIChatAdapter(SSEAdapter):
    """One Chat Completions HTTP body of a turn, turned into portable ingress events."""

    PROTOCOL = "Chat Completions"

    def __init__(self, turn: TurnRef, *, max_event_size: int = DEFAULT_MAX_EVENT_SIZE) -> None:
        super().__init__(max_event_size=max_event_size)
        self.turn = turn
        self._completion: _Completion | None = None

    def feed_event(self, event: object) -> list[Event]:
        """One decoded chunk: a dict or an SDK ``ChatCompletionChunk``; ``"[DONE]"`` for the end."""
        if isinstance(event, str):
            self._check_open()
            if event.strip() != _DONE:
                raise TypeError("the only text event of a Chat Completions stream is '[DONE]'")
            return self._done()
        return super().feed_event(event)

    def _unfinished(self) -> list[Event]:
        """A completion that did not reach ``[DONE]`` is lost (no resume)."""
        if self._completion is None:
            return []
        return self._completion.calls.lost(resumable=False)

    # --- payloads ------------------------------------------------------------------------------

    def _of_protocol(self, event: JSONObject) -> bool:
        return "choices" in event or "error" in event or _helper_chunk(event) is not None

    _SPECIAL_KINDS = frozenset({"error"})

    def _not_json(self, kind: str, data: str) -> list[Event] | None:
        if kind == "error":
            self._read_one = True
            # An error event ends the completion whatever its data holds.
            try:
                payload: object = read_event_json(data)
            except ValueError:
                payload = None
            if not isinstance(payload, Mapping):
                payload = {"event": kind, "data": data}
            return self._error(payload)
        if data[:1] != "{" and data.strip() == _DONE:
            return self._done()
        return None

    def _latest(self) -> ResponseCalls | None:
        return None if self._completion is None else self._completion.calls

    def _handle(self, payload: JSONObject) -> list[Event]:
        chunk = _helper_chunk(payload)
        if chunk is not None:
            return self._handle(chunk)
        if kind_of(payload) in _HELPER_KINDS:
            return []
        # openai-python raises for any payload with a truthy top-level "error".
        if payload.get("error"):
            return self._error(payload)
        return self._chunk(payload)

    def _handle_fast(self, payload: JSONObject) -> list[Event]:
        # A chunk of the open completion whose one choice, not finished, carries one fragment
        # of arguments for a tool call bound already, and nothing else the reference reads:
        # what the reference would do, without its many lookups. Every other chunk, and this
        # one met in any other state, is read by the reference.
        completion = self._completion
        choices = payload.get("choices")
        if (
            completion is None
            or completion.calls.ended
            or payload.get("id") != completion.id
            or type(choices) is not list
            or len(choices) != 1
            or "type" in payload
            or payload.get("error")
        ):
            return self._handle(payload)
        choice = choices[0]
        if type(choice) is not dict:
            return self._handle(payload)
        index = choice.get("index")
        delta = choice.get("delta")
        if (
            type(index) is not int
            or completion.finished.get(index) != ""
            or type(delta) is not dict
            or choice.get("finish_reason") is not None
            or delta.get("content") is not None
            or delta.get("refusal") is not None
            or delta.get("function_call") is not None
        ):
            return self._handle(payload)
        tool_calls = delta.get("tool_calls")
        if type(tool_calls) is not list or len(tool_calls) != 1:
            return self._handle(payload)
        fragment = tool_calls[0]
        if type(fragment) is not dict:
            return self._handle(payload)
        position = fragment.get("index")
        function = fragment.get("function")
        if type(position) is not int or position < 0 or type(function) is not dict:
            return self._handle(payload)
        slot = str(position) if index == 0 else f"{index}.{position}"
        arguments = function.get("arguments")
        if (
            slot not in completion.bound
            or fragment.get("id") not in (None, "")
            or function.get("name") not in (None, "")
            or (arguments is not None and type(arguments) is not str)
        ):
            return self._handle(payload)
        if not arguments:
            return []
        return completion.calls.append_next(slot, arguments.encode("utf-8", "surrogatepass"))

    def _error(self, payload: JSONObject) -> list[Event]:
        completion = self._open_completion()
        if completion is None:
            return []
        detail = "error"
        error = payload.get("error")
        if isinstance(error, Mapping):
            for name in ("code", "type"):
                value = error.get(name)
                if isinstance(value, str | int) and not isinstance(value, bool) and value != "":
                    detail = str(value)
                    break
        terminal = TerminalRef(digest=event_digest(payload))
        return completion.calls.end_response(ResponseEndReason.ERROR, terminal, detail)

    def _done(self) -> list[Event]:
        completion = self._open_completion()
        if completion is None:
            return []
        reason, detail = completion.outcome()
        terminal = TerminalRef(digest=event_digest({"id": completion.id, "data": _DONE}))
        return completion.calls.end_response(reason, terminal, detail)

    def _open_completion(self) -> _Completion | None:
        completion = self._completion
        if completion is None or completion.calls.ended:
            return None
        return completion

    # --- chunks --------------------------------------------------------------------------------

    def _chunk(self, chunk: JSONObject) -> list[Event]:
        events: list[Event] = []
        identity = chunk.get("id")
        completion = self._completion
        if completion is None or identity != completion.id:
            if completion is not None and not completion.calls.ended:
                events += completion.calls.violate("a chunk of another completion before [DONE]")
            completion = self._start(identity)
            if completion is None:
                return events
        elif completion.calls.ended:
            return events
        try:
            choices = chunk.get("choices")
            if not isinstance(choices, list):
                raise ProtocolBreak("a chunk without a list of choices")
            for choice in choices:
                self._choice(completion, choice, events)
        except ProtocolBreak as problem:
            events += completion.calls.violate(str(problem))
        return events

    def _start(self, identity: object) -> _Completion | None:
        """The next completion of the body; None when its id cannot name a response (nothing of
        it can then be attributed, so none of it is passed on)."""
        if not isinstance(identity, str) or not identity:
            return None
        try:
            calls = ResponseCalls(self.turn, identity)
        except ValueError:
            return None
        self._completion = _Completion(id=identity, calls=calls)
        return self._completion

    def _choice(self, completion: _Completion, choice: object, events: list[Event]) -> None:
        if not isinstance(choice, Mapping):
            raise ProtocolBreak("a choice that is not an object")
        index = choice.get("index")
        if not _is_index(index):
            raise ProtocolBreak("a choice without an index")
        completion.finished.setdefault(index, "")
        delta = choice.get("delta")
        if delta is None:
            delta = {}
        elif not isinstance(delta, Mapping):
            raise ProtocolBreak(f"choice {index}: a delta that is not an object")
        for kind in ("content", "refusal"):
            text = delta.get(kind)
            if isinstance(text, str):
                events += completion.calls.text(len(text))
        tool_calls = delta.get("tool_calls")
        if tool_calls is not None:
            if not isinstance(tool_calls, list):
                raise ProtocolBreak(f"choice {index}: tool_calls that are not a list")
            for fragment in tool_calls:
                self._tool_call(completion, index, fragment, events)
        legacy = delta.get("function_call")
        if legacy is not None:
            slot = _slot(index, _LEGACY_SLOT)
            name, arguments = _function(legacy, slot)
            self._fragment(
                completion,
                events,
                choice=index,
                slot=slot,
                call=None,
                name=name,
                arguments=arguments,
            )
        reason = choice.get("finish_reason")
        if reason is not None:
            if not isinstance(reason, str):
                raise ProtocolBreak(f"choice {index}: a finish_reason that is not a string")
            self._finish(completion, index, reason, events)

    def _tool_call(
        self, completion: _Completion, choice: int, fragment: object, events: list[Event]
    ) -> None:
        if not isinstance(fragment, Mapping):
            raise ProtocolBreak(f"choice {choice}: a tool call that is not an object")
        index = fragment.get("index")
        if not _is_index(index):
            raise ProtocolBreak(f"choice {choice}: a tool call without an index")
        slot = _slot(choice, str(index))
        call = _present(fragment.get("id"), f"tool call {slot}: an id")
        if call is not None and not _names_a_call(completion.calls, slot, call):
            raise ProtocolBreak(f"tool call {slot}: an id that cannot name a call")
        name, arguments = _function(fragment.get("function"), slot)
        if slot not in completion.bound and (call is None or name is None):
            raise ProtocolBreak(f"tool call {slot}: a fragment before its id and name")
        self._fragment(
            completion, events, choice=choice, slot=slot, call=call, name=name, arguments=arguments
        )

    def _fragment(
        self,
        completion: _Completion,
        events: list[Event],
        *,
        choice: int,
        slot: str,
        call: str | None,
        name: str | None,
        arguments: str,
    ) -> None:
        calls = completion.calls
        if completion.finished[choice]:
            raise ProtocolBreak(f"tool call {slot} after its choice finished")
        bound = completion.bound.get(slot)
        if bound is None:
            if name is None:
                raise ProtocolBreak(f"{slot}: a fragment before its name")
            completion.bound[slot] = (call, name)
            completion.slots.setdefault(choice, []).append(slot)
            events += calls.open(slot, call=call, tool=name)
        else:
            opened_as, tool = bound
            if call is not None and call != opened_as:
                raise ProtocolBreak(f"tool call {slot} changed its id")
            if name is not None and name != tool:
                events += calls.open(slot, call=opened_as, tool=name)
        if arguments:
            # Lone surrogates from JSON escapes stay invalid UTF-8: the strict parser rejects them.
            events += calls.append(slot, arguments.encode("utf-8", "surrogatepass"))

    def _finish(
        self, completion: _Completion, choice: int, reason: str, events: list[Event]
    ) -> None:
        previous = completion.finished[choice]
        if previous:
            if previous != reason:
                raise ProtocolBreak(f"choice {choice} finished twice, differently")
            return
        if not reason:
            raise ProtocolBreak(f"choice {choice}: an empty finish_reason")
        completion.finished[choice] = reason
        for slot in completion.slots.get(choice, []):
            if completion.calls.is_open(slot):
                events += completion.calls.end(slot)


def _is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _slot(choice: int, item: str) -> str:
    return item if choice == 0 else f"{choice}.{item}"


def _present(value: object, what: str) -> str | None:
    """A string field, with an empty string read as absent."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ProtocolBreak(f"{what} that is not a string")
    return value


def _function(function: object, slot: str) -> tuple[str | None, str]:
    """The tool name (None when absent) and the arguments fragment of a function object."""
    if function is None:
        return None, ""
    if not isinstance(function, Mapping):
        raise ProtocolBreak(f"tool call {slot}: a function that is not an object")
    name = _present(function.get("name"), f"tool call {slot}: a name")
    arguments = function.get("arguments")
    if arguments is None:
        return name, ""
    if not isinstance(arguments, str):
        raise ProtocolBreak(f"tool call {slot}: arguments that are not a string")
    return name, arguments


def _names_a_call(calls: ResponseCalls, slot: str, call: str) -> bool:
    """Whether ``call`` is a valid call identity (not too long, valid Unicode)."""
    ref = calls.ref
    try:
        CallKey(
            tenant=ref.tenant,
            conversation=ref.conversation,
            turn=ref.turn,
            response=ref.response,
            item=slot,
            call=call,
        )
    except ValueError:
        return False
    return True
