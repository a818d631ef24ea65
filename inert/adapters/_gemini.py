"""Google Gemini and Vertex AI ``streamGenerateContent`` streams to portable ingress events.

A response is named by the chunks' ``responseId`` (or, where a stream carries none, by the name
the agent server gives the adapter). Function calls carry no id in practice: a call is named by
its candidate and its place among that candidate's calls (``"<candidate>.<n>"``), and by
``functionCall.id`` as its call id when the provider sends one.

Two shapes of call:

- Gemini API: a ``functionCall`` part arrives whole, ``name`` and ``args``. Its arguments are
  the ``args`` object written as compact JSON, in one fragment, and the call ends at once.
- Vertex AI with ``streamFunctionCallArguments``: ``{name, willContinue: true}`` opens the one
  call that is open at a time; the parts after it carry ``partialArgs``, values addressed by
  JSON paths (``$.a.b``, ``$.a[0]``, ``$['a']``), strings continued across parts while
  ``willContinue`` says so. They are values, not text: the adapter assembles them into the
  arguments object (bounded by ``max_argument_bytes``) and passes the whole object, as one
  fragment, when the call ends: at an empty ``functionCall: {}``, at a part whose call does
  not continue, at the next call's opening, or at the candidate's ``finishReason`` when the
  terminator never came.

The response ends at ``finishReason`` (once every candidate seen has one): ``STOP`` is the only
successful end, for tool calls too. ``MAX_TOKENS`` is length, the safety family content
filtering, ``MALFORMED_FUNCTION_CALL`` a protocol violation (the model's call was unusable and
no call was sent), anything else incomplete; ``promptFeedback.blockReason`` filters the whole
response, and an ``error`` object in the stream ends it with its status.

Rules this adapter keeps: provider JSON is read strictly (a duplicate key or ``NaN`` in a raw
chunk is a protocol violation, never a silent choice), a partial argument without an open call,
a path that is not one of the forms above or that contradicts what was assembled, and a
``responseId`` that changes mid-response, end the response as a protocol violation. Text parts
count for the status; ``thought`` parts do not. There is no resume: a body that ends before
``finishReason`` loses its response.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..events import Event, ResponseEndReason, TerminalRef, TurnRef
from ._adapter import JSONObject, ProtocolBreak, event_digest
from ._calls import ResponseCalls
from ._sse import DEFAULT_MAX_EVENT_SIZE
from ._sse_adapter import SSEAdapter

_FILTERED = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
)
_PATH_STEP = re.compile(
    r"""\.(?P<name>[^.\[\]]+)|\[(?P<index>\d+)\]|\[(?P<quote>['"])(?P<key>.*?)(?P=quote)\]"""
)
DEFAULT_MAX_ARGUMENT_BYTES = 1 << 20


def _path(path: object) -> list[str | int]:
    if not isinstance(path, str) or not path.startswith("$"):
        raise ProtocolBreak("a partial argument without a JSON path")
    steps: list[str | int] = []
    position = 1
    while position < len(path):
        match = _PATH_STEP.match(path, position)
        if match is None:
            raise ProtocolBreak("a partial argument whose JSON path is not a plain path")
        if match["index"] is not None:
            steps.append(int(match["index"]))
        else:
            steps.append(match["name"] if match["name"] is not None else match["key"])
        position = match.end()
    if not steps:
        raise ProtocolBreak("a partial argument that replaces the whole arguments")
    return steps


class _PartialCall:
    """A Vertex call being assembled from path-addressed values."""

    def __init__(self, slot: str, limit: int) -> None:
        self.slot = slot
        self.arguments: dict[str, Any] = {}
        self.continuing: tuple[str | int, ...] | None = None
        self.size = 2
        self.limit = limit

    def add(self, partial: object) -> None:
        if not isinstance(partial, dict):
            raise ProtocolBreak("a partial argument that is not an object")
        steps = _path(partial.get("jsonPath"))
        values = [key for key in ("stringValue", "numberValue", "boolValue") if key in partial]
        if "nullValue" in partial:
            values.append("nullValue")
        if len(values) != 1:
            raise ProtocolBreak("a partial argument without exactly one value")
        kind = values[0]
        value: Any = None if kind == "nullValue" else partial[kind]
        if kind == "stringValue" and not isinstance(value, str):
            raise ProtocolBreak("a string partial argument that is not a string")
        if kind == "numberValue" and (type(value) not in (int, float) or not math.isfinite(value)):
            raise ProtocolBreak("a number partial argument that is not a finite number")
        if kind == "boolValue" and not isinstance(value, bool):
            raise ProtocolBreak("a boolean partial argument that is not true or false")
        self.size += len(json.dumps(steps)) + len(json.dumps(value))
        if self.size > self.limit:
            raise ProtocolBreak(f"arguments larger than {self.limit} bytes while assembled")
        container: Any = self.arguments
        for step, following in zip(steps, [*steps[1:], None], strict=True):
            if following is None:
                self._set(container, step, value, tuple(steps), kind == "stringValue")
            else:
                container = self._child(container, step, [] if isinstance(following, int) else {})
        self.continuing = tuple(steps) if partial.get("willContinue") is True else None

    def _child(self, container: Any, step: str | int, empty: Any) -> Any:
        if isinstance(step, int):
            if not isinstance(container, list) or step > len(container):
                raise ProtocolBreak("a partial argument whose path skips or contradicts")
            if step == len(container):
                container.append(empty)
            child = container[step]
        else:
            if not isinstance(container, dict):
                raise ProtocolBreak("a partial argument whose path contradicts the arguments")
            child = container.setdefault(step, empty)
        if type(child) is not type(empty):
            raise ProtocolBreak("a partial argument whose path contradicts the arguments")
        return child

    def _set(
        self, container: Any, step: str | int, value: Any, path: tuple[str | int, ...], text: bool
    ) -> None:
        continued = text and self.continuing == path
        if isinstance(step, int):
            if not isinstance(container, list) or step > len(container):
                raise ProtocolBreak("a partial argument whose path skips or contradicts")
            if step == len(container):
                container.append(value)
                return
            if not continued:
                raise ProtocolBreak("a partial argument that sets a value set before")
            container[step] += value
            return
        if not isinstance(container, dict):
            raise ProtocolBreak("a partial argument whose path contradicts the arguments")
        if step in container and not continued:
            raise ProtocolBreak("a partial argument that sets a value set before")
        container[step] = container[step] + value if continued else value

    def encoded(self) -> bytes:
        return json.dumps(
            self.arguments, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8", "surrogatepass")


_GEMINI_FIELDS = frozenset(
    {"candidates", "promptFeedback", "responseId", "usageMetadata", "modelVersion", "error"}
)
"""The fields a chunk of the protocol has one of, at least."""


class _Candidate:
    def __init__(self) -> None:
        self.calls = 0
        self.finish: str | None = None


class GeminiAdapter(SSEAdapter):
    """One ``streamGenerateContent`` stream of one turn (``response``: its name where the
    chunks carry no ``responseId``)."""

    PROTOCOL = "Gemini"

    def __init__(
        self,
        turn: TurnRef,
        *,
        response: str | None = None,
        max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
        max_event_size: int = DEFAULT_MAX_EVENT_SIZE,
    ) -> None:
        super().__init__(max_event_size=max_event_size)
        self.turn = turn
        self.response = response
        self.max_argument_bytes = max_argument_bytes
        self._calls: ResponseCalls | None = None
        self._candidates: dict[int, _Candidate] = {}
        self._partial: _PartialCall | None = None

    def _unfinished(self) -> list[Event]:
        """A response without its finishReason is lost (no resume)."""
        if self._calls is not None and not self._calls.ended:
            return self._calls.lost(resumable=False)
        return []

    def _of_protocol(self, event: JSONObject) -> bool:
        return not _GEMINI_FIELDS.isdisjoint(event)

    def _handle(self, chunk: JSONObject) -> list[Event]:
        try:
            return self._chunk(chunk)
        except ProtocolBreak as problem:
            return self._violate(str(problem))

    def _chunk(self, chunk: JSONObject) -> list[Event]:
        error = chunk.get("error")
        if isinstance(error, dict):
            return self._error(chunk, error)
        events = self._response(chunk)
        calls = self._calls
        assert calls is not None
        if calls.ended:
            return events
        feedback = chunk.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            return events + self._end(
                ResponseEndReason.CONTENT_FILTER, chunk, str(feedback["blockReason"])
            )
        candidates = chunk.get("candidates", [])
        if not isinstance(candidates, list):
            raise ProtocolBreak("a chunk whose candidates are not a list")
        for candidate in candidates:
            events += self._candidate(calls, candidate, chunk)
        return events

    def _response(self, chunk: JSONObject) -> list[Event]:
        identity = chunk.get("responseId")
        name = identity if isinstance(identity, str) and identity else self.response
        if name is None:
            raise ValueError(
                "the stream carries no responseId: give the adapter the response's name"
            )
        current = self._calls
        if current is not None and current.ref.response == name:
            return []
        events: list[Event] = []
        if current is not None and not current.ended:
            events += current.violate("the responseId changed before the response finished")
        try:
            self._calls = ResponseCalls(self.turn, name)
        except ValueError:
            self._calls = None
            raise ProtocolBreak("a responseId that cannot name a response") from None
        self._candidates = {}
        self._partial = None
        return events

    def _candidate(self, calls: ResponseCalls, candidate: object, chunk: JSONObject) -> list[Event]:
        if not isinstance(candidate, dict):
            raise ProtocolBreak("a candidate that is not an object")
        index = candidate.get("index", 0)
        if type(index) is not int or index < 0:
            raise ProtocolBreak("a candidate whose index is not a count")
        state = self._candidates.setdefault(index, _Candidate())
        events: list[Event] = []
        content = candidate.get("content") or {}
        parts = content.get("parts") or [] if isinstance(content, dict) else None
        if not isinstance(parts, list):
            raise ProtocolBreak("a candidate whose parts are not a list")
        for part in parts:
            if not isinstance(part, dict):
                raise ProtocolBreak("a part that is not an object")
            if "functionCall" in part:
                events += self._function_call(calls, index, state, part["functionCall"])
            elif isinstance(part.get("text"), str) and not part.get("thought"):
                events += calls.text(len(part["text"]))
        finish = candidate.get("finishReason")
        if isinstance(finish, str) and finish and state.finish is None:
            state.finish = finish
            events += self._finish_partial(calls)
            if all(seen.finish is not None for seen in self._candidates.values()):
                events += self._end_candidates(chunk)
        return events

    def _function_call(
        self, calls: ResponseCalls, index: int, state: _Candidate, call: object
    ) -> list[Event]:
        if not isinstance(call, dict):
            raise ProtocolBreak("a functionCall that is not an object")
        name, partials = call.get("name"), call.get("partialArgs")
        events: list[Event] = []
        if name is not None:
            if not isinstance(name, str) or not name:
                raise ProtocolBreak("a functionCall whose name is empty")
            events += self._finish_partial(calls)
            slot = f"{index}.{state.calls}"
            state.calls += 1
            identity = call.get("id")
            events += calls.open(
                slot, call=identity if isinstance(identity, str) and identity else None, tool=name
            )
            if call.get("willContinue") is True:
                self._partial = _PartialCall(slot, self.max_argument_bytes)
                return events
            arguments = call.get("args", {})
            if not isinstance(arguments, dict):
                raise ProtocolBreak(f"function call {slot} whose args are not an object")
            encoded = json.dumps(
                arguments, separators=(",", ":"), ensure_ascii=False, allow_nan=False
            ).encode("utf-8", "surrogatepass")
            if len(encoded) > self.max_argument_bytes:
                raise ProtocolBreak(f"arguments larger than {self.max_argument_bytes} bytes")
            return events + calls.append(slot, encoded) + calls.end(slot)
        if partials is not None:
            partial = self._partial
            if partial is None:
                raise ProtocolBreak("partial arguments without an open call")
            if not isinstance(partials, list):
                raise ProtocolBreak("partialArgs that are not a list")
            for value in partials:
                partial.add(value)
            if call.get("willContinue") is not True:
                events += self._finish_partial(calls)
            return events
        # An empty functionCall ends the open call; without one it has nothing to end.
        return self._finish_partial(calls)

    def _finish_partial(self, calls: ResponseCalls) -> list[Event]:
        partial, self._partial = self._partial, None
        if partial is None:
            return []
        return calls.append(partial.slot, partial.encoded()) + calls.end(partial.slot)

    def _end_candidates(self, chunk: JSONObject) -> list[Event]:
        reasons = [self._candidates[index].finish or "" for index in sorted(self._candidates)]
        failed = [reason for reason in reasons if reason != "STOP"]
        if not failed:
            return self._end(ResponseEndReason.COMPLETED, chunk, "STOP")
        first = failed[0]
        if first == "MAX_TOKENS":
            reason = ResponseEndReason.LENGTH
        elif first in _FILTERED:
            reason = ResponseEndReason.CONTENT_FILTER
        elif first == "MALFORMED_FUNCTION_CALL":
            reason = ResponseEndReason.PROTOCOL_VIOLATION
        else:
            reason = ResponseEndReason.INCOMPLETE
        return self._end(reason, chunk, ",".join(reasons))

    def _end(self, reason: ResponseEndReason, chunk: JSONObject, detail: str) -> list[Event]:
        calls = self._calls
        assert calls is not None
        return calls.end_response(reason, TerminalRef(digest=event_digest(dict(chunk))), detail)

    def _error(self, chunk: JSONObject, error: JSONObject) -> list[Event]:
        calls = self._calls
        if calls is None or calls.ended:
            return []
        status = error.get("status") or error.get("code") or "error"
        return calls.end_response(
            ResponseEndReason.ERROR, TerminalRef(digest=event_digest(dict(chunk))), str(status)
        )

    def _latest(self) -> ResponseCalls | None:
        return self._calls

    def _violate(self, detail: str) -> list[Event]:
        ended = super()._violate(detail)
        if ended:
            self._partial = None
        return ended
