"""The Gemini and Vertex AI adapter: whole calls, path-addressed partial arguments, ends, the
captured streams and the awkward-order suite through the Vertex wire format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from adapter_support import FIXTURES, outcome, run_stream, turn_ref
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    StatusCue,
    StreamLost,
    TextReceived,
    TurnRef,
)
from inert.adapters import GeminiAdapter
from inert.testing.contracts import (
    AdapterContract,
    End,
    EndResponse,
    Expected,
    Fragment,
    Open,
    Renderer,
    Stream,
)

DIRECTORY = FIXTURES / "gemini"


def chunk(*parts: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "responseId": "r1", **extra}


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args}}


def opening(name: str) -> dict[str, Any]:
    return {"functionCall": {"name": name, "willContinue": True}}


def partial(path: str, more: bool = True, **value: Any) -> dict[str, Any]:
    return {"functionCall": {"partialArgs": [{"jsonPath": path, **value}], "willContinue": more}}


TERMINATOR: dict[str, Any] = {"functionCall": {}}


def sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)


def adapt(*chunks: dict[str, Any], close: bool = True) -> list[Event]:
    adapter = GeminiAdapter(turn_ref())
    produced = adapter.feed(sse(*chunks))
    return produced + adapter.close() if close else produced


def arguments(events: list[Event]) -> list[bytes]:
    return [e.data for e in events if isinstance(e, ArgumentsAppended)]


def ends(events: list[Event]) -> list[ResponseEndReason]:
    return [e.reason for e in events if isinstance(e, ResponseEnded)]


# --- whole calls -------------------------------------------------------------------------------


def test_whole_calls_are_keyed_by_candidate_and_place_and_end_at_once() -> None:
    """Two whole calls in one chunk are two calls, 0.0 and 0.1, each opened, filled, ended."""
    events = adapt(chunk(call("weather", city="Oslo"), call("weather", city="Rome")), close=False)
    assert [type(e).__name__ for e in events] == [
        "CallOpened",
        "ArgumentsAppended",
        "CallEnded",
    ] * 2
    opened = [e for e in events if isinstance(e, CallOpened)]
    assert [(e.key.response, e.key.item, e.key.call) for e in opened] == [
        ("r1", "0.0", "0.0"),
        ("r1", "0.1", "0.1"),
    ]
    assert arguments(events) == [b'{"city":"Oslo"}', b'{"city":"Rome"}']


def test_a_call_without_args_has_the_empty_object_and_its_id_is_kept() -> None:
    """A no-argument call may omit args; a provider call id, when sent, is the call id."""
    part = {"functionCall": {"name": "read_theme", "id": "fc-9"}}
    events = adapt(chunk(part), close=False)
    assert arguments(events) == [b"{}"]
    assert [e.key.call for e in events if isinstance(e, CallOpened)] == ["fc-9"]


@pytest.mark.parametrize(
    "raw",
    [b'{"city": "Oslo", "city": "Rome"}', b'{"city": NaN}'],
    ids=["duplicate key", "NaN"],
)
def test_a_raw_chunk_with_ambiguous_json_is_a_violation(raw: bytes) -> None:
    """Duplicate keys and NaN in the provider's JSON are refused, never silently resolved."""
    adapter = GeminiAdapter(turn_ref())
    adapter.feed(sse(chunk({"text": "hi"})))
    body = b'data: {"responseId": "r1", "candidates": [{"content": {"parts": [{"functionCall":'
    body += b' {"name": "weather", "args": ' + raw + b"}}]}}]}\n\n"
    assert ends(adapter.feed(body)) == [ResponseEndReason.PROTOCOL_VIOLATION]


# --- Vertex partial arguments ------------------------------------------------------------------


def test_partial_arguments_are_assembled_into_one_object_at_the_terminator() -> None:
    """Strings continue while willContinue says so; the whole object is one fragment at {}."""
    events = adapt(
        chunk(opening("getWeather")),
        chunk(partial("$.location", stringValue="San Fr", willContinue=True)),
        chunk(partial("$.location", stringValue="ancisco", willContinue=True)),
        chunk(partial("$.location", stringValue="")),
        chunk(partial("$.days", numberValue=3)),
        chunk(partial("$['metric']", boolValue=True)),
        chunk(TERMINATOR, finish="STOP"),
    )
    assert arguments(events) == [b'{"location":"San Francisco","days":3,"metric":true}']
    assert ends(events) == [ResponseEndReason.COMPLETED]


def test_array_paths_build_lists_in_order() -> None:
    """``$.ops[0].x`` then ``$.ops[1].x`` make a list of two objects."""
    events = adapt(
        chunk(opening("writeItems")),
        chunk(partial("$.ops[0].price", numberValue=0.5)),
        chunk(partial("$.ops[1].price", numberValue=0.3)),
        chunk(partial("$.ops[1].note", nullValue=None, more=False)),
    )
    assert arguments(events) == [b'{"ops":[{"price":0.5},{"price":0.3,"note":null}]}']


@pytest.mark.parametrize(
    ("closing", "name"),
    [
        (chunk(partial("$.a", stringValue="x", more=False)), "a part that does not continue"),
        (chunk(opening("next_tool")), "the next call's opening"),
        (chunk({"text": ""}, finish="STOP"), "finishReason without a terminator"),
    ],
    ids=["no willContinue", "next opening", "finish reason"],
)
def test_an_open_call_ends_without_its_terminator(closing: dict[str, Any], name: str) -> None:
    """The terminator can be missing: the call still ends, once, with what was assembled."""
    events = adapt(chunk(opening("tool")), chunk(partial("$.b", stringValue="y")), closing)
    ended = [e for e in events if isinstance(e, CallEnded)]
    assert ended[0].key.item == "0.0", name
    assert arguments(events)[0].startswith(b'{"b":"y"')


@pytest.mark.parametrize(
    "bad",
    [
        partial("$.a", stringValue=1),
        partial("a.b", stringValue="x"),
        partial("$.a[2]", stringValue="x"),
        partial("$", stringValue="x"),
    ],
    ids=["wrong value type", "not a path", "skipped index", "whole arguments"],
)
def test_a_partial_argument_that_cannot_be_placed_is_a_violation(bad: dict[str, Any]) -> None:
    """Values of the wrong type and paths that are not plain, skip or replace are refused."""
    events = adapt(chunk(opening("tool")), chunk(bad), close=False)
    assert ends(events) == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_a_value_set_twice_is_a_violation() -> None:
    """Two values for one path (a duplicate key in disguise) are refused, not overwritten."""
    events = adapt(
        chunk(opening("tool")),
        chunk(partial("$.city", stringValue="Oslo")),
        chunk(partial("$.city", stringValue="Rome")),
        close=False,
    )
    assert ends(events) == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_partial_arguments_without_an_open_call_are_a_violation() -> None:
    """Fragments carry no call identity: without an open call they belong to nothing."""
    assert ends(adapt(chunk(partial("$.a", stringValue="x")), close=False)) == [
        ResponseEndReason.PROTOCOL_VIOLATION
    ]


def test_the_assembled_arguments_are_bounded() -> None:
    """Past ``max_argument_bytes`` the assembly stops: the response ends as a violation."""
    adapter = GeminiAdapter(turn_ref(), max_argument_bytes=64)
    events = adapter.feed(sse(chunk(opening("tool")), chunk(partial("$.a", stringValue="x" * 100))))
    assert ends(events) == [ResponseEndReason.PROTOCOL_VIOLATION]


# --- ends --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("finish", "reason"),
    [
        ("STOP", ResponseEndReason.COMPLETED),
        ("MAX_TOKENS", ResponseEndReason.LENGTH),
        ("SAFETY", ResponseEndReason.CONTENT_FILTER),
        ("RECITATION", ResponseEndReason.CONTENT_FILTER),
        ("MALFORMED_FUNCTION_CALL", ResponseEndReason.PROTOCOL_VIOLATION),
        ("OTHER", ResponseEndReason.INCOMPLETE),
    ],
)
def test_each_finish_reason_ends_the_response_as_it_means(
    finish: str, reason: ResponseEndReason
) -> None:
    """STOP is the only successful end, for tool calls too."""
    assert ends(adapt(chunk(call("t"), finish=finish))) == [reason]


def test_a_blocked_prompt_and_an_error_end_the_response() -> None:
    """promptFeedback.blockReason filters the response; an error object ends it with its status."""
    blocked = adapt({"responseId": "r1", "promptFeedback": {"blockReason": "SAFETY"}})
    assert ends(blocked) == [ResponseEndReason.CONTENT_FILTER]
    adapter = GeminiAdapter(turn_ref())
    events = adapter.feed(
        sse(chunk(opening("t")), {"error": {"code": 503, "status": "UNAVAILABLE"}})
    )
    [ended] = [e for e in events if isinstance(e, ResponseEnded)]
    assert (ended.reason, ended.detail) == (ResponseEndReason.ERROR, "UNAVAILABLE")


def test_a_body_that_ends_before_its_finish_reason_loses_the_response() -> None:
    """No resume: an early end is a lost connection."""
    lost = adapt(chunk(opening("t")))[-1]
    assert isinstance(lost, StreamLost)
    assert not lost.resumable


def test_a_changed_response_id_fails_the_unfinished_response() -> None:
    """Chunks of one stream share a responseId; another one mid-response is a violation."""
    other = {**chunk(call("t")), "responseId": "r2"}
    events = adapt(chunk(opening("t")), other, close=False)
    violated = [e for e in events if isinstance(e, ResponseEnded)]
    assert [(e.response.response, e.reason) for e in violated] == [
        ("r1", ResponseEndReason.PROTOCOL_VIOLATION)
    ]


def test_without_a_response_id_the_given_name_is_used_or_asked_for() -> None:
    """A stream without responseId is named by the agent server, or refused."""
    bare = {"candidates": [{"content": {"parts": [call("t")]}}]}
    events = GeminiAdapter(turn_ref(), response="named").feed_event(bare)
    assert {e.key.response for e in events if isinstance(e, CallOpened)} == {"named"}
    with pytest.raises(ValueError, match="responseId"):
        GeminiAdapter(turn_ref()).feed_event(bare)


def test_text_counts_and_thoughts_do_not() -> None:
    """Text parts count for the status; thought parts are not for the person."""
    events = adapt(chunk({"text": "hello"}, {"text": "thinking", "thought": True}), close=False)
    assert [e.characters for e in events if isinstance(e, TextReceived)] == [5]


# --- the captured streams ----------------------------------------------------------------------

DISPATCHED = ("dispatched", None, "dispatched")
EXPECTED: dict[str, tuple[list[str], dict[str, tuple[object, object, object]]]] = {
    "gemini-two-whole-function-calls.sse": (
        ["weather"],
        {"9zN1acDXGvaFz7IPxOOaiAU/0.0": DISPATCHED, "9zN1acDXGvaFz7IPxOOaiAU/0.1": DISPATCHED},
    ),
    # One whole no-argument call, then three partial calls, each closed by an empty functionCall.
    "vertex-partial-args-four-calls.jsonl": (
        ["read_theme", "read_screen"],
        {f"_vr4aYiWEJnYodAPkujX0QM/0.{n}": DISPATCHED for n in range(4)},
    ),
    # The terminator never comes: the call ends at its part without willContinue.
    "vertex-partial-args-missing-terminal.jsonl": (
        ["writeItems"],
        {"3noMaojQL_2s6tkPiO26qQ4/0.0": DISPATCHED},
    ),
    "vertex-partial-args-single-call.jsonl": (
        ["getWeather"],
        {"dqHOab6xGLzWodAPkPuViA4/0.0": DISPATCHED, "dqHOab6xGLzWodAPkPuViA4/0.1": DISPATCHED},
    ),
}
ARGUMENTS = {
    "9zN1acDXGvaFz7IPxOOaiAU/0.0": {"city": "San Francisco"},
    "3noMaojQL_2s6tkPiO26qQ4/0.0": {
        "operations": [
            {
                "action": "add",
                "description": "Fresh red apple",
                "itemid": "apple_001",
                "price": 0.5,
            },
            {
                "action": "add",
                "description": "Ripe yellow banana",
                "itemid": "banana_001",
                "price": 0.3,
            },
        ]
    },
    "dqHOab6xGLzWodAPkPuViA4/0.1": {"location": "San Francisco"},
}


def source(path: Path) -> dict[str, Any]:
    if path.suffix == ".sse":
        return {"chunks": [path.read_bytes()]}
    return {"events": [json.loads(line) for line in path.read_text().splitlines() if line]}


def test_every_captured_stream_has_its_expected_outcome_written_down() -> None:
    """No capture of this provider goes untested."""
    assert sorted(path.name for path in DIRECTORY.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_a_captured_stream_ends_every_call_as_expected(name: str, tmp_path: Path) -> None:
    """Fed into a runtime on SQLite, each call ends as written down, runs once, and gets the
    arguments the stream spelt."""
    tools, expected = EXPECTED[name]
    run = await run_stream(GeminiAdapter, tmp_path, tools=tools, **source(DIRECTORY / name))
    assert {label: outcome(row) for label, row in run.rows.items()} == expected
    assert sorted(run.executed) == sorted(expected)
    for label, dispatch in run.executed.items():
        if label in ARGUMENTS:
            assert json.loads(json.dumps(dispatch.arguments, default=_plain)) == ARGUMENTS[label]


def _plain(value: object) -> object:
    return dict(value) if hasattr(value, "keys") else list(value)  # type: ignore[call-overload]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_decoded_chunks_and_their_sse_text_adapt_alike(name: str) -> None:
    """The chunks as dicts and as SSE text give the same events."""
    path = DIRECTORY / name
    if path.suffix == ".sse":
        reader = GeminiAdapter(turn_ref())
        raw = reader.feed(path.read_bytes()) + reader.close()
        objects = [
            json.loads(line[5:])
            for line in path.read_text().splitlines()
            if line.startswith("data:")
        ]
    else:
        objects = source(path)["events"]
        reader = GeminiAdapter(turn_ref())
        raw = reader.feed(sse(*objects)) + reader.close()
    decoded = GeminiAdapter(turn_ref())
    assert [e for o in objects for e in decoded.feed_event(o)] + decoded.close() == raw


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_any_split_of_a_captured_body_gives_the_same_events(data: st.DataObject) -> None:
    """The raw SSE body cut anywhere gives the events of the whole."""
    body = (DIRECTORY / "gemini-two-whole-function-calls.sse").read_bytes()
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=40)))
    adapter = GeminiAdapter(turn_ref())
    events: list[Event] = []
    for begin, finish in zip([0, *cuts], [*cuts, len(body)], strict=True):
        events += adapter.feed(body[begin:finish])
    whole = GeminiAdapter(turn_ref())
    assert events + adapter.close() == whole.feed(body) + whole.close()


# --- the awkward-order suite -------------------------------------------------------------------


def _leaves(value: Any, path: str) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        return [leaf for key, inner in value.items() for leaf in _leaves(inner, f"{path}.{key}")]
    if isinstance(value, list):
        return [leaf for i, inner in enumerate(value) for leaf in _leaves(inner, f"{path}[{i}]")]
    if isinstance(value, bool):
        return [{"jsonPath": path, "boolValue": value}]
    if isinstance(value, str):
        return [{"jsonPath": path, "stringValue": value}]
    if value is None:
        return [{"jsonPath": path, "nullValue": None}]
    return [{"jsonPath": path, "numberValue": value}]


def _strict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise ValueError("duplicate key")
    return dict(pairs)


class GeminiRenderer:
    """Renders each step as Vertex AI partial-argument chunks and parses them with the adapter.

    Vertex has one open call at a time and its fragments carry no call identity, so steps of
    several calls cannot interleave on its wire: a call goes on the wire when it is the first
    of its response still waiting, as the opening ``{name, willContinue}``; its argument bytes
    are held (Vertex sends values, not text) and sent at its end as the values they spell, one
    partial argument per value, then the terminator. Bytes that spell no JSON object (a lost
    fragment, NaN, a duplicate key) are sent as the provider would have to: a chunk whose JSON
    is not JSON, which the adapter refuses.
    """

    def __init__(self) -> None:
        self.adapters: dict[str, GeminiAdapter] = {}
        self.order: dict[str, list[str]] = {}
        self.calls: dict[str, dict[str, Any]] = {}
        self.opened: dict[str, int] = {}

    def render(self, step: Open | Fragment | End | EndResponse, stream: Stream) -> list[Event]:
        if isinstance(step, Open):
            self.adapters.setdefault(step.response, GeminiAdapter(stream.turn))
            self.order.setdefault(step.response, []).append(step.call)
            self.calls[step.call] = {
                "response": step.response,
                "tool": step.tool,
                "text": b"",
                "ended": False,
                "on_wire": False,
            }
            return self._flush(step.response, stream)
        if isinstance(step, EndResponse):
            adapter = self.adapters[step.response]
            finish = {ResponseEndReason.COMPLETED: "STOP"}.get(step.reason, "MAX_TOKENS")
            body = {"candidates": [{"content": {"parts": []}, "finishReason": finish}]}
            return adapter.feed(self._sse(step.response, body))
        state = self.calls[step.call]
        if isinstance(step, Fragment):
            if not step.lost:
                state["text"] += step.data
            return []
        state["ended"] = True
        return self._flush(state["response"], stream)

    def _sse(self, response: str, body: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps({**body, "responseId": response}).encode() + b"\n\n"

    def _flush(self, response: str, stream: Stream) -> list[Event]:
        adapter, events = self.adapters[response], []
        waiting = self.order[response]
        while waiting:
            label = waiting[0]
            state = self.calls[label]
            if not state["on_wire"]:
                state["on_wire"] = True
                events += adapter.feed(self._sse(response, chunk(opening(state["tool"]))))
                number = self.opened[response] = self.opened.get(response, -1) + 1
                stream.keys[label] = CallKey(
                    tenant=stream.turn.tenant,
                    conversation=stream.turn.conversation,
                    turn=adapter.turn.turn,
                    response=response,
                    item=f"0.{number}",
                    call=f"0.{number}",
                )
            if not state["ended"]:
                break
            events += adapter.feed(self._values(response, state["text"]))
            waiting.pop(0)
        return events

    def _values(self, response: str, text: bytes) -> bytes:
        try:
            value = json.loads(text, object_pairs_hook=_strict, parse_constant=_refuse)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raw = b'data: {"responseId": "' + response.encode() + b'", "candidates": [{"content":'
            return raw + b' {"parts": [{"functionCall": {"args": ' + text + b"}}]}}]}\n\n"
        parts = [
            {"functionCall": {"partialArgs": [leaf], "willContinue": True}}
            for leaf in _leaves(value, "$")
        ]
        return b"".join(self._sse(response, chunk(part)) for part in [*parts, TERMINATOR])


def _refuse(name: str) -> Any:
    raise ValueError(name)


def _violation() -> Expected:
    return Expected(state="failed", reason="protocol_violation", cue=StatusCue.FAILED)


OVERRIDES: dict[str, dict[str, Expected]] = {
    # Vertex sends values, not text: arguments missing a fragment, or holding NaN or a repeated
    # key, cannot be sent as values, and the chunk that would have to carry them is no JSON. The
    # adapter refuses it and ends the response as a protocol violation; the portable suite sees
    # the gap or the bad bytes at the call's own end instead.
    "terminal before a missing fragment": {"a": _violation()},
    # And a Vertex response has one call open at a time: b would open after a ended, but a's
    # chunk ended the response first, so b never reached inert.
    "malformed JSON": {"a": _violation(), "b": Expected(state="absent", cue=None)},
}


class TestAwkwardOrders(AdapterContract):
    """Every awkward order, worded as Vertex chunks, ends as the portable suite expects."""

    OVERRIDES = OVERRIDES

    @pytest.fixture
    def renderer(self) -> Renderer:
        return GeminiRenderer()


def test_the_renderer_speaks_for_one_turn_per_adapter() -> None:
    """Each response gets its own adapter, on the turn it was opened in."""
    renderer = GeminiRenderer()
    stream = Stream(turn=TurnRef(tenant="acme", conversation="conv-1", turn="t1"))
    events = renderer.render(Open("a", "get_weather"), stream)
    assert [type(e).__name__ for e in events] == ["CallOpened"]
    assert stream.keys["a"].turn == "t1"


def test_a_response_id_that_cannot_name_a_response_opens_nothing() -> None:
    """A responseId too long to be an identity is refused without raising out of the adapter."""
    adapter = GeminiAdapter(turn_ref())
    assert adapter.feed_event({**chunk(call("t")), "responseId": "r" * 600}) == []
