"""The OpenAI Chat Completions adapter: its protocol rules, every fixture of its provider through a
runtime on SQLite, any split of the wire, the SDK's chunk objects, and the awkward-order suite."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pydantic
import pytest
from adapter_support import FIXTURES, PRINCIPAL, declarations, outcome, run_stream, turn_ref
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionChunk

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    StatusCue,
    StreamLost,
    TerminalRef,
    TextReceived,
    TurnRef,
    open_runtime,
)
from inert.adapters import SSEDecoder, event_digest
from inert.adapters._openai_chat import OpenAIChatAdapter
from inert.testing.contracts import (
    WEATHER,
    AdapterContract,
    End,
    EndResponse,
    Expected,
    Fragment,
    Open,
    Renderer,
    Stream,
)

CHAT = FIXTURES / "openai-chat"
TURN = turn_ref()
CID = "chatcmpl-test"


# --- building chunks -------------------------------------------------------------------------


def chunk(*choices: Mapping[str, object], id: str = CID) -> dict[str, object]:
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-4o",
        "choices": list(choices),
    }


def choice(
    delta: Mapping[str, object] | None = None, *, index: int = 0, finish: str | None = None
) -> dict[str, object]:
    return {"index": index, "delta": dict(delta or {}), "finish_reason": finish}


def tool(
    index: int,
    *,
    id: str | None = None,
    name: str | None = None,
    arguments: str | None = None,
) -> dict[str, object]:
    fragment: dict[str, object] = {"index": index}
    function: dict[str, object] = {}
    if id is not None:
        fragment["id"] = id
        fragment["type"] = "function"
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        fragment["function"] = function
    return fragment


def calls(*fragments: Mapping[str, object], index: int = 0) -> dict[str, object]:
    """A chunk of tool call fragments in one choice."""
    return chunk(choice({"tool_calls": list(fragments)}, index=index))


def finish(reason: str = "tool_calls", *, index: int = 0, id: str = CID) -> dict[str, object]:
    return chunk(choice(index=index, finish=reason), id=id)


def opening(
    index: int = 0, name: str = "get_weather", *, choice_index: int = 0
) -> dict[str, object]:
    return calls(tool(index, id=f"call_{index}", name=name, arguments=""), index=choice_index)


def wire(*payloads: Mapping[str, object] | str) -> bytes:
    """Payloads as SSE data lines; a string is sent as it is (``[DONE]``)."""
    lines = [p if isinstance(p, str) else json.dumps(p) for p in payloads]
    return "".join(f"data: {line}\n\n" for line in lines).encode()


def run(*payloads: Mapping[str, object] | str, close: bool = True) -> list[Event]:
    adapter = OpenAIChatAdapter(TURN)
    events = adapter.feed(wire(*payloads))
    return events + adapter.close() if close else events


def key(item: str = "0", call: str = "call_0", response: str = CID) -> CallKey:
    return CallKey(
        tenant=TURN.tenant,
        conversation=TURN.conversation,
        turn=TURN.turn,
        response=response,
        item=item,
        call=call,
    )


def ref(response: str = CID) -> ResponseRef:
    return ResponseRef(
        tenant=TURN.tenant, conversation=TURN.conversation, turn=TURN.turn, response=response
    )


def ends(events: Sequence[Event]) -> list[tuple[str, ResponseEndReason, str]]:
    return [
        (event.response.response, event.reason, event.detail)
        for event in events
        if isinstance(event, ResponseEnded)
    ]


def done_digest(response: str = CID) -> str:
    return event_digest({"id": response, "data": "[DONE]"})


ARGS = '{"city": "Paris"}'


# --- identities --------------------------------------------------------------------------------


def test_the_first_fragment_opens_the_call_under_the_completion_and_its_index() -> None:
    """Response = chunk id, item = tool call index, call = the first fragment's id, tool = name."""
    assert run(opening(), close=False) == [CallOpened(key=key(), tool="get_weather", sequence=0)]


def test_later_fragments_are_numbered_after_the_opening() -> None:
    """Argument fragments of an index append in arrival order, numbered 1, 2, ... and placed
    at the call's byte offset."""
    events = run(opening(), calls(tool(0, arguments='{"city"')), calls(tool(0, arguments=": 1}")))
    assert events[1:3] == [
        ArgumentsAppended(key=key(), data=b'{"city"', offset=0, first_sequence=1, last_sequence=1),
        ArgumentsAppended(key=key(), data=b": 1}", offset=7, first_sequence=2, last_sequence=2),
    ]


def test_the_first_fragment_may_carry_the_whole_call() -> None:
    """Groq sends id, name and all arguments in one fragment: opening then the arguments."""
    events = run(calls(tool(0, id="call_0", name="get_weather", arguments=ARGS)), close=False)
    assert events == [
        CallOpened(key=key(), tool="get_weather", sequence=0),
        ArgumentsAppended(
            key=key(), data=ARGS.encode(), offset=0, first_sequence=1, last_sequence=1
        ),
    ]


def test_empty_id_and_name_on_continuations_are_absent() -> None:
    """Alibaba's ``id: ""`` and Mistral's ``name: ""`` neither reopen nor break the call."""
    events = run(
        opening(),
        calls(tool(0, id="", name="", arguments=ARGS)),
        finish(),
        "[DONE]",
    )
    assert [type(event) for event in events] == [
        CallOpened,
        ArgumentsAppended,
        CallEnded,
        ResponseEnded,
    ]
    assert ends(events) == [(CID, ResponseEndReason.COMPLETED, "tool_calls")]


def test_a_fragment_for_an_index_never_opened_is_a_protocol_violation() -> None:
    """Arguments for an index that no fragment with id and name opened end the completion."""
    events = run(opening(), calls(tool(1, arguments=ARGS)), finish(), "[DONE]")
    assert ends(events) == [
        (
            CID,
            ResponseEndReason.PROTOCOL_VIOLATION,
            "tool call 1: a fragment before its id and name",
        )
    ]


def test_a_first_fragment_without_an_id_is_a_protocol_violation() -> None:
    """A name without an id cannot open a call: the protocol gives both on the first fragment."""
    events = run(calls(tool(0, name="get_weather", arguments="")))
    assert [event.reason for event in events if isinstance(event, ResponseEnded)] == [
        ResponseEndReason.PROTOCOL_VIOLATION
    ]
    assert not any(isinstance(event, CallOpened) for event in events)


def test_an_id_that_changes_on_an_open_index_is_a_protocol_violation() -> None:
    """A reused index with another call id ends the completion; nothing is merged."""
    events = run(opening(), calls(tool(0, id="call_other", arguments=ARGS)), finish(), "[DONE]")
    assert ends(events) == [
        (CID, ResponseEndReason.PROTOCOL_VIOLATION, "tool call 0 changed its id")
    ]
    assert not any(isinstance(event, ArgumentsAppended | CallEnded) for event in events)


def test_a_name_that_changes_on_an_open_index_opens_it_again_as_that_tool() -> None:
    """The call's actor sees the same key opened as another tool (an identity conflict)."""
    events = run(opening(), calls(tool(0, name="send_email", arguments=ARGS)), close=False)
    assert events[:2] == [
        CallOpened(key=key(), tool="get_weather", sequence=0),
        CallOpened(key=key(), tool="send_email", sequence=0),
    ]


def test_calls_of_other_choices_are_keyed_by_choice_and_index() -> None:
    """Choice 0 keeps the bare index; choice 1's index 0 is item ``1.0``: they never collide."""
    events = run(opening(), opening(choice_index=1), close=False)
    assert [event.key.item for event in events if isinstance(event, CallOpened)] == ["0", "1.0"]


def test_an_id_that_cannot_name_a_call_is_a_protocol_violation() -> None:
    """A call id too long for a call key ends the completion instead of raising."""
    events = run(calls(tool(0, id="c" * 600, name="get_weather", arguments="")))
    assert [event.reason for event in events if isinstance(event, ResponseEnded)] == [
        ResponseEndReason.PROTOCOL_VIOLATION
    ]


def test_a_completion_id_that_cannot_name_a_response_passes_nothing_on() -> None:
    """Without a usable chunk id nothing can be attributed: no event at all."""
    assert run(opening(), finish(), "[DONE]") != []
    assert run(*(dict(payload, id="") for payload in (opening(), finish())), "[DONE]") == []


# --- ends --------------------------------------------------------------------------------------


def test_a_finish_reason_ends_every_open_call_of_its_choice_only() -> None:
    """Choice 0's finish_reason ends its calls, in opening order; choice 1's stay open."""
    events = run(
        opening(0),
        opening(1),
        opening(0, choice_index=1),
        calls(tool(0, arguments="{}"), tool(1, arguments="{}")),
        finish(index=0),
        close=False,
    )
    assert [event.key.item for event in events if isinstance(event, CallEnded)] == ["0", "1"]


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("tool_calls", ResponseEndReason.COMPLETED),
        ("stop", ResponseEndReason.COMPLETED),
        ("function_call", ResponseEndReason.COMPLETED),
        ("length", ResponseEndReason.LENGTH),
        ("content_filter", ResponseEndReason.CONTENT_FILTER),
        ("insufficient_system_resource", ResponseEndReason.INCOMPLETE),
    ],
)
def test_done_ends_the_completion_as_its_finish_reason_says(
    reason: str, expected: ResponseEndReason
) -> None:
    """[DONE] ends the completion: success only for tool_calls/stop/function_call."""
    events = run(opening(), finish(reason), "[DONE]")
    assert ends(events) == [(CID, expected, reason)]
    assert events[-1] == ResponseEnded(
        response=ref(), reason=expected, terminal=TerminalRef(digest=done_digest()), detail=reason
    )


def test_done_without_a_finish_reason_is_incomplete() -> None:
    """A completion that reaches [DONE] with no finish_reason did not finish its calls."""
    events = run(opening(), calls(tool(0, arguments=ARGS)), "[DONE]")
    assert ends(events) == [(CID, ResponseEndReason.INCOMPLETE, "no finish_reason")]
    assert not any(isinstance(event, CallEnded) for event in events)


def test_several_choices_complete_only_if_every_choice_finished_successfully() -> None:
    """A completion is as good as its worst choice: one truncated choice makes it LENGTH."""
    good = run(opening(), opening(choice_index=1), finish(), finish(index=1), "[DONE]")
    assert ends(good) == [(CID, ResponseEndReason.COMPLETED, "tool_calls,tool_calls")]
    cut = run(opening(), opening(choice_index=1), finish(), finish("length", index=1), "[DONE]")
    assert ends(cut) == [(CID, ResponseEndReason.LENGTH, "tool_calls,length")]


def test_a_choice_that_never_finished_makes_the_completion_incomplete() -> None:
    """Choice 1 seen without a finish_reason: its calls were never ended, so nothing completed."""
    events = run(opening(), opening(choice_index=1), finish(), "[DONE]")
    assert ends(events) == [(CID, ResponseEndReason.INCOMPLETE, "tool_calls,none")]


def test_the_usage_chunk_before_done_is_fine() -> None:
    """``choices: []`` with usage totals between finish_reason and [DONE] changes nothing."""
    usage = dict(chunk(), usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
    assert run(opening(), finish(), usage, "[DONE]") == run(opening(), finish(), "[DONE]")


def test_a_fragment_after_its_choice_finished_is_a_protocol_violation() -> None:
    """Once finish_reason ended the choice's calls, more of them cannot be data."""
    events = run(opening(), finish(), calls(tool(0, arguments=ARGS)), "[DONE]")
    assert ends(events) == [
        (CID, ResponseEndReason.PROTOCOL_VIOLATION, "tool call 0 after its choice finished")
    ]


def test_a_repeated_finish_reason_is_one_end() -> None:
    """The same finish_reason again ends nothing twice; a different one breaks the protocol."""
    assert run(opening(), finish(), finish(), "[DONE]") == run(opening(), finish(), "[DONE]")
    events = run(opening(), finish(), finish("length"), "[DONE]")
    assert ends(events)[0][1] is ResponseEndReason.PROTOCOL_VIOLATION


def test_the_body_ending_before_done_loses_the_completion_without_resume() -> None:
    """No [DONE]: the completion is lost and not resumable, whether or not it finished."""
    expected = StreamLost(response=ref(), resumable=False)
    assert run(opening(), calls(tool(0, arguments=ARGS)))[-1] == expected
    assert run(opening(), finish())[-1] == expected


def test_closing_after_done_reports_nothing_lost() -> None:
    """A completion that reached [DONE] ended: close() adds nothing."""
    adapter = OpenAIChatAdapter(TURN)
    adapter.feed(wire(opening(), finish(), "[DONE]"))
    assert adapter.close() == []


def test_a_last_event_cut_off_mid_payload_is_a_lost_connection() -> None:
    """An unfinished, undecodable last data line at close() is the connection going away."""
    adapter = OpenAIChatAdapter(TURN)
    events = adapter.feed(wire(opening()) + b'data: {"id": "chatcmpl-te')
    events += adapter.close()
    assert events[-1] == StreamLost(response=ref(), resumable=False)
    assert not ends(events)


@pytest.mark.parametrize("ending", [b"", b"\n", b"\r\n", b"\r"])
def test_done_without_its_blank_line_is_a_lost_connection(ending: bytes) -> None:
    """A body that ends after ``data: [DONE]`` without the blank line that ends the event ended
    early (the event-stream rules discard the event): the completion is lost, nothing acts."""
    adapter = OpenAIChatAdapter(TURN)
    events = adapter.feed(wire(opening(), finish()) + b"data: [DONE]" + ending)
    events += adapter.close()
    assert ends(events) == []
    assert events[-1] == StreamLost(response=ref(), resumable=False)


# --- errors and broken payloads ----------------------------------------------------------------

GROQ_ERROR = {
    "error": {
        "message": "parameters for tool get_weather did not match: 'secret-value'",
        "type": "invalid_request_error",
        "code": "tool_use_failed",
        "failed_generation": '{"name": "get_weather", "arguments": {"city": "secret-value"}}',
    }
}


def test_an_error_payload_after_the_200_ends_the_completion_with_its_code() -> None:
    """A data payload with an ``error`` object ends the open completion ERROR, detail = code."""
    events = run(opening(), GROQ_ERROR)
    error = events[-1]
    assert error == ResponseEnded(
        response=ref(),
        reason=ResponseEndReason.ERROR,
        terminal=TerminalRef(digest=event_digest(GROQ_ERROR)),
        detail="tool_use_failed",
    )
    assert "secret-value" not in repr(events)


def test_groq_s_error_event_ends_the_completion_the_same_way() -> None:
    """``event: error`` carries the same object: the same end, never failed_generation."""
    adapter = OpenAIChatAdapter(TURN)
    events = adapter.feed(
        wire(opening()) + b"event: error\ndata: " + json.dumps(GROQ_ERROR).encode()
    )
    events += adapter.feed(b"\n\n") + adapter.close()
    assert events == run(opening(), GROQ_ERROR)


def test_an_error_without_a_code_names_its_type_or_just_error() -> None:
    """The detail falls back to the error's type, then to ``error``; never its message."""
    typed = {"error": {"type": "server_error", "message": "boom"}}
    assert ends(run(opening(), typed)) == [(CID, ResponseEndReason.ERROR, "server_error")]
    bare = {"error": {"message": "boom"}}
    assert ends(run(opening(), bare)) == [(CID, ResponseEndReason.ERROR, "error")]


def test_an_error_before_any_chunk_emits_nothing() -> None:
    """With no completion open there is no response to end."""
    assert run(GROQ_ERROR) == []


def test_a_data_line_that_is_not_json_is_a_protocol_violation() -> None:
    """Malformed JSON in the middle of the stream ends the completion, never raises."""
    adapter = OpenAIChatAdapter(TURN)
    events = adapter.feed(wire(opening()) + b"data: {not json\n\n" + wire(finish(), "[DONE]"))
    assert ends(events) == [
        (CID, ResponseEndReason.PROTOCOL_VIOLATION, "an event whose data is not JSON")
    ]


def test_a_chunk_without_choices_is_a_protocol_violation() -> None:
    """``choices`` is required: a chunk without it ends the completion."""
    broken = chunk()
    del broken["choices"]
    events = run(opening(), broken, finish(), "[DONE]")
    assert ends(events) == [
        (CID, ResponseEndReason.PROTOCOL_VIOLATION, "a chunk without a list of choices")
    ]


def test_another_completion_before_done_breaks_the_open_one_and_starts_its_own() -> None:
    """A chunk of a new id while one is open: that one is a violation, the new one goes on."""
    events = run(opening(), opening(name="send_email") | {"id": "chatcmpl-2"}, close=False)
    assert events == [
        CallOpened(key=key(), tool="get_weather", sequence=0),
        events[1],
        CallOpened(key=key(response="chatcmpl-2"), tool="send_email", sequence=0),
    ]
    assert ends(events[1:2]) == [
        (CID, ResponseEndReason.PROTOCOL_VIOLATION, "a chunk of another completion before [DONE]")
    ]


def test_a_new_id_after_the_end_starts_the_next_completion() -> None:
    """Several recorded bodies back to back: each ended completion is followed by the next."""
    second = [payload | {"id": "chatcmpl-2"} for payload in (opening(), finish())]
    events = run(opening(), finish(), "[DONE]", *second, "[DONE]")
    assert ends(events) == [
        (CID, ResponseEndReason.COMPLETED, "tool_calls"),
        ("chatcmpl-2", ResponseEndReason.COMPLETED, "tool_calls"),
    ]


def test_chunks_of_an_ended_completion_are_ignored() -> None:
    """After [DONE], or an error, the completion has nothing more to say under its id."""
    after_done = run(opening(), finish(), "[DONE]", calls(tool(1, id="c", name="x")), "[DONE]")
    assert after_done == run(opening(), finish(), "[DONE]")
    after_error = run(opening(), GROQ_ERROR, calls(tool(0, arguments=ARGS)), finish(), "[DONE]")
    assert after_error == run(opening(), GROQ_ERROR)


# --- text, legacy calls, the API ---------------------------------------------------------------


def test_content_and_refusal_count_as_text_and_reasoning_does_not() -> None:
    """Text is counted for the status only, never part of a call."""
    events = run(
        chunk(choice({"content": "Hello"})),
        chunk(choice({"refusal": "No."})),
        chunk(choice({"reasoning": "thinking", "reasoning_content": "more"})),
        chunk(choice({"content": ""})),
        close=False,
    )
    assert events == [
        TextReceived(response=ref(), characters=5),
        TextReceived(response=ref(), characters=3),
    ]


def test_a_deprecated_function_call_is_one_call_of_its_choice() -> None:
    """``delta.function_call`` opens the slot ``function_call`` (no id), ends at finish_reason."""
    legacy = key(item="function_call", call="function_call")
    events = run(
        chunk(choice({"function_call": {"name": "get_weather", "arguments": ""}})),
        chunk(choice({"function_call": {"arguments": ARGS}})),
        finish("function_call"),
        "[DONE]",
    )
    assert events == [
        CallOpened(key=legacy, tool="get_weather", sequence=0),
        ArgumentsAppended(
            key=legacy, data=ARGS.encode(), offset=0, first_sequence=1, last_sequence=1
        ),
        CallEnded(key=legacy, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=ref(),
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(digest=done_digest()),
            detail="function_call",
        ),
    ]


def test_decoded_chunks_and_the_done_string_give_the_wire_s_events() -> None:
    """feed_event takes the JSON objects, and ``"[DONE]"`` for the line the SDK hides."""
    payloads = (opening(), calls(tool(0, arguments=ARGS)), finish(), "[DONE]")
    adapter = OpenAIChatAdapter(TURN)
    events = [event for payload in payloads for event in adapter.feed_event(payload)]
    assert events + adapter.close() == run(*payloads)


def test_misuse_of_the_api_raises() -> None:
    """A non-object event, text other than [DONE], or a chunk after close() is refused."""
    adapter = OpenAIChatAdapter(TURN)
    with pytest.raises(TypeError):
        adapter.feed_event(["not", "an", "object"])
    with pytest.raises(TypeError, match="DONE"):
        adapter.feed_event('{"id": "x"}')
    adapter.close()
    with pytest.raises(ValueError, match="closed"):
        adapter.feed(b"data: [DONE]\n\n")
    with pytest.raises(ValueError, match="closed"):
        adapter.feed_event("[DONE]")


def test_the_same_stream_gives_equal_events_every_time() -> None:
    """Events are a function of the stream alone, so a replay is recognised as duplicates."""
    payloads = (opening(), calls(tool(0, arguments=ARGS)), GROQ_ERROR)
    assert run(*payloads) == run(*payloads)


# --- fixtures through a runtime on SQLite ------------------------------------------------------
#
# The .sse files hold several recorded HTTP bodies (``: interaction N`` comments). Each body is one
# completion, and each ends with its terminal ([DONE], or Groq's error event) before the next
# starts, so one adapter reads the whole file exactly as fresh adapters read the bodies one by
# one (test_a_file_of_several_bodies_reads_as_its_bodies_one_by_one): they are fed whole.


def _bodies(path: Path) -> list[bytes]:
    parts = path.read_bytes().split(b": interaction ")[1:]
    return [part.split(b"\n", 1)[1] for part in parts]


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _as_wire(objects: Sequence[Mapping[str, object]], done: bool) -> bytes:
    return wire(*objects, *(["[DONE]"] if done else []))


DISPATCHED = ("dispatched", None, "dispatched")


async def test_parallel_tool_calls_fixture(tmp_path: Path) -> None:
    """gpt-4o: two parallel calls, then one call in many fragments, then a long one: all run."""
    result = await run_stream(
        OpenAIChatAdapter,
        tmp_path,
        tools=["get_country", "get_product_name", "get_weather", "final_result"],
        chunks=[(CHAT / "parallel-tool-calls-gpt-4o.sse").read_bytes()],
    )
    expected = {
        "chatcmpl-C2QD1kGWsTW5OWiqAtOSFEAOfPfQH/0": DISPATCHED,
        "chatcmpl-C2QD1kGWsTW5OWiqAtOSFEAOfPfQH/1": DISPATCHED,
        "chatcmpl-C2QD2NQfRbWW5ww5we2oDjS1mgHtK/0": DISPATCHED,
        "chatcmpl-C2QD4vblfNcSDeoXmULJR4umoKNqY/0": DISPATCHED,
    }
    assert {label: outcome(row) for label, row in result.rows.items()} == expected
    assert sorted(result.executed) == sorted(expected)
    assert {label: d.key.call for label, d in result.executed.items()} == {
        "chatcmpl-C2QD1kGWsTW5OWiqAtOSFEAOfPfQH/0": "call_q2UyBRP7eXNTzAoR8lEhjc9Z",
        "chatcmpl-C2QD1kGWsTW5OWiqAtOSFEAOfPfQH/1": "call_b51ijcpFkDiTQG1bQzsrmtW5",
        "chatcmpl-C2QD2NQfRbWW5ww5we2oDjS1mgHtK/0": "call_LwxJUB9KppVyogRRLQsamRJv",
        "chatcmpl-C2QD4vblfNcSDeoXmULJR4umoKNqY/0": "call_CCGIWaMeYWmxOQ91orkmTvzn",
    }
    weather = result.executed["chatcmpl-C2QD2NQfRbWW5ww5we2oDjS1mgHtK/0"]
    assert dict(weather.arguments) == {"city": "Mexico City"}


async def test_groq_midstream_error_fixture(tmp_path: Path) -> None:
    """Groq: body 0 ends with ``event: error`` (no call was open: nothing to fail), body 1's
    whole call in one chunk runs, body 2 is text only."""
    result = await run_stream(
        OpenAIChatAdapter,
        tmp_path,
        tools=["get_something_by_name"],
        chunks=[(CHAT / "groq-midstream-error-tool-use-failed.sse").read_bytes()],
    )
    expected = {"chatcmpl-e35442a8-12c0-4fb4-8be4-0e51727ce7b7/0": DISPATCHED}
    assert {label: outcome(row) for label, row in result.rows.items()} == expected
    assert sorted(result.executed) == sorted(expected)
    assert ends(result.events) == [
        (
            "chatcmpl-4f39f3af-3267-4ac1-a0cf-6aa7451877dc",
            ResponseEndReason.ERROR,
            "tool_use_failed",
        ),
        (
            "chatcmpl-e35442a8-12c0-4fb4-8be4-0e51727ce7b7",
            ResponseEndReason.COMPLETED,
            "tool_calls",
        ),
        ("chatcmpl-935610b8-ec6a-4b1d-8a58-84b34ab0590e", ResponseEndReason.COMPLETED, "stop"),
    ]
    # The rejected generation quotes the model's arguments: none of it may reach an event.
    assert "invalid_param" not in repr(result.events)


# The .jsonl files are vercel/ai ``chunks.txt`` captures: the data payloads only. vercel/ai's test
# server serves them followed by ``data: [DONE]``, which the capture format leaves out. As
# recorded (no [DONE]) the body was cut: its call is cancelled connection_lost. As served
# (``"[DONE]"`` fed after the chunks) the completion ends tool_calls and the call runs.
JSONL_EXPECTED = {
    ("mistral-repeated-empty-name.jsonl", False): {
        "735e434874a24f68a2390b3cab149242/0": ("cancelled", "connection_lost", "reject")
    },
    ("mistral-repeated-empty-name.jsonl", True): {"735e434874a24f68a2390b3cab149242/0": DISPATCHED},
    ("alibaba-empty-id-continuations.jsonl", False): {
        "chatcmpl-8e243c57-23b3-9db2-a02e-e3c53929c368/0": (
            "cancelled",
            "connection_lost",
            "reject",
        )
    },
    ("alibaba-empty-id-continuations.jsonl", True): {
        "chatcmpl-8e243c57-23b3-9db2-a02e-e3c53929c368/0": DISPATCHED
    },
}
JSONL_TOOLS = {
    "mistral-repeated-empty-name.jsonl": ("webSearchTool", {"query": "current Berlin weather"}),
    "alibaba-empty-id-continuations.jsonl": ("weather", {"location": "San Francisco"}),
}


@pytest.mark.parametrize(
    ("name", "done"), list(JSONL_EXPECTED), ids=[f"{n}-done={d}" for n, d in JSONL_EXPECTED]
)
async def test_jsonl_fixture(name: str, done: bool, tmp_path: Path) -> None:
    """Mistral's repeated ``name: ""`` and Alibaba's ``id: ""``: one call each, not reopened."""
    tool_name, arguments = JSONL_TOOLS[name]
    events: list[object] = [*_lines(CHAT / name), *(["[DONE]"] if done else [])]
    result = await run_stream(OpenAIChatAdapter, tmp_path, tools=[tool_name], events=events)
    expected = JSONL_EXPECTED[name, done]
    assert {label: outcome(row) for label, row in result.rows.items()} == expected
    assert sorted(result.executed) == sorted(
        label for label, row in expected.items() if row == DISPATCHED
    )
    for dispatch in result.executed.values():
        assert dispatch.tool == tool_name
        assert dict(dispatch.arguments) == arguments


async def test_a_fragment_missing_at_finish_reason_is_a_gap(tmp_path: Path) -> None:
    """The adapter numbers every fragment: one lost before the finish_reason fails the call."""
    fragments = (calls(tool(0, arguments=part)) for part in ('{"a"', ": 1", "}"))
    events = run(opening(), *fragments, finish(), "[DONE]")
    lost = [event for event in events if isinstance(event, ArgumentsAppended)][1]
    url = f"sqlite:///{tmp_path / 'gap.db'}"
    async with open_runtime(log=url, create=True, tools=declarations(["get_weather"])) as runtime:
        await runtime.start_turn(
            tenant=TURN.tenant,
            conversation=TURN.conversation,
            turn=TURN.turn,
            principal=PRINCIPAL,
            tools=["get_weather"],
        )
        await runtime.feed([event for event in events if event != lost])
        await runtime.settle()
        row = runtime.projections.ledger.row(key())
        assert row is not None
        assert outcome(row.to_json()) == ("failed", "sequence_gap", "reject")


@pytest.mark.parametrize(
    "name", ["parallel-tool-calls-gpt-4o.sse", "groq-midstream-error-tool-use-failed.sse"]
)
def test_a_file_of_several_bodies_reads_as_its_bodies_one_by_one(name: str) -> None:
    """Fed whole or body by body to fresh adapters, a recorded file gives the same events."""
    whole = OpenAIChatAdapter(TURN)
    together = whole.feed((CHAT / name).read_bytes()) + whole.close()
    apart: list[Event] = []
    for body in _bodies(CHAT / name):
        adapter = OpenAIChatAdapter(TURN)
        apart += adapter.feed(body) + adapter.close()
    assert len(_bodies(CHAT / name)) == 3
    assert together == apart


# --- any split of the wire; decoded objects; SDK objects -------------------------------------


def _wire_of(path: Path) -> bytes:
    if path.suffix == ".sse":
        return path.read_bytes()
    return _as_wire(_lines(path), done=True)


WIRES = {path.name: _wire_of(path) for path in sorted(CHAT.iterdir())}


def _whole(body: bytes) -> list[Event]:
    adapter = OpenAIChatAdapter(TURN)
    return adapter.feed(body) + adapter.close()


@pytest.mark.parametrize("name", sorted(WIRES))
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_any_split_of_the_wire_gives_the_same_events(name: str, data: st.DataObject) -> None:
    """Chunks cut at any byte offset (inside lines, UTF-8 sequences, CR LF) change nothing."""
    body = WIRES[name]
    cuts = sorted(data.draw(st.sets(st.integers(0, len(body)), max_size=40), label="cuts"))
    adapter = OpenAIChatAdapter(TURN)
    events: list[Event] = []
    for start, end in zip([0, *cuts], [*cuts, len(body)], strict=True):
        events += adapter.feed(body[start:end])
    assert events + adapter.close() == _whole(body)


def _payloads(body: bytes) -> list[object]:
    """The decoded events of a body, as an agent server holding decoded JSON has them."""
    return [
        event.data if event.data == "[DONE]" else json.loads(event.data)
        for event in SSEDecoder().feed(body)
    ]


def _fed(objects: Sequence[object]) -> list[Event]:
    adapter = OpenAIChatAdapter(TURN)
    return [event for obj in objects for event in adapter.feed_event(obj)] + adapter.close()


def _decoded(path: Path, *, done: bool = True) -> tuple[list[object], bytes]:
    """A fixture as decoded objects, and as the SSE body that carries them."""
    if path.suffix == ".sse":
        return _payloads(path.read_bytes()), path.read_bytes()
    objects = _lines(path)
    return [*objects, *(["[DONE]"] if done else [])], _as_wire(objects, done=done)


DECODED = [
    *((path.name, True) for path in sorted(CHAT.glob("*.sse"))),
    *((path.name, done) for path in sorted(CHAT.glob("*.jsonl")) for done in (True, False)),
]


@pytest.mark.parametrize(("name", "done"), DECODED, ids=[f"{n}-done={d}" for n, d in DECODED])
def test_decoded_objects_give_the_wire_s_events(name: str, done: bool) -> None:
    """A fixture's JSON objects (and "[DONE]") via feed_event equal the same as SSE bytes."""
    objects, body = _decoded(CHAT / name, done=done)
    assert _fed(objects) == _whole(body)


def _sdk(obj: object) -> object:
    """The SDK's ``ChatCompletionChunk`` for a chunk; error payloads are no chunk: kept as is."""
    if not isinstance(obj, dict) or "error" in obj:
        return obj
    return ChatCompletionChunk.model_validate(obj)


@pytest.mark.parametrize("name", sorted(WIRES))
def test_sdk_chunk_objects_give_the_same_events_as_the_dicts(name: str) -> None:
    """``openai.types.chat.ChatCompletionChunk`` objects fed with feed_event change nothing."""
    objects, _ = _decoded(CHAT / name)
    converted = [_sdk(obj) for obj in objects]
    assert any(isinstance(obj, ChatCompletionChunk) for obj in converted)
    assert _fed(converted) == _fed(objects)


def test_the_sdk_refuses_the_error_payload_as_a_chunk() -> None:
    """Groq's error object is no ChatCompletionChunk: an SDK user sees an APIError instead."""
    with pytest.raises(pydantic.ValidationError):
        ChatCompletionChunk.model_validate(GROQ_ERROR)


# --- the awkward-order suite -------------------------------------------------------------------

_FINISH_REASONS = {
    ResponseEndReason.COMPLETED: "tool_calls",
    ResponseEndReason.LENGTH: "length",
    ResponseEndReason.CONTENT_FILTER: "content_filter",
}


class ChatRenderer:
    """Renders each step as Chat Completions wire bytes and parses them with the adapter.

    One adapter per turn, created with the turn's first opening; each call keeps the adapter and
    tool call index of the response that opened it, so that old fragments that arrive after a
    new turn go to their own completion. ``End`` puts nothing on the wire: Chat Completions has no
    per-call end, a call ends at its choice's finish_reason, which ``EndResponse`` sends (with the
    finish reason for the step's end reason) followed by ``data: [DONE]``.
    """

    def __init__(self) -> None:
        self.adapters: dict[TurnRef, OpenAIChatAdapter] = {}
        self.responses: dict[str, OpenAIChatAdapter] = {}
        self.calls: dict[str, tuple[str, int]] = {}

    def render(self, step: Open | Fragment | End | EndResponse, stream: Stream) -> list[Event]:
        if isinstance(step, End):
            return []
        if isinstance(step, Open):
            adapter = self.adapters.setdefault(stream.turn, OpenAIChatAdapter(stream.turn))
            self.responses.setdefault(step.response, adapter)
            index = sum(1 for response, _ in self.calls.values() if response == step.response)
            self.calls[step.call] = (step.response, index)
            fragment = tool(index, id=f"call_{step.call}", name=step.tool, arguments="")
            body = wire(calls(fragment) | {"id": step.response})
            return adapter.feed(body)
        if isinstance(step, Fragment):
            response, index = self.calls[step.call]
            body = wire(calls(tool(index, arguments=step.data.decode())) | {"id": response})
            return self.responses[response].feed(body)
        reason = _FINISH_REASONS[step.reason]
        body = wire(finish(reason, id=step.response), "[DONE]")
        return self.responses[step.response].feed(body)


OVERRIDES: dict[str, dict[str, Expected]] = {
    # Chat Completions has no end event per call: the call ends at its choice's finish_reason,
    # which comes with EndResponse, after the late fragment was delivered. The adapter still
    # numbered that fragment (the harness only held its event back), so it fills the gap before
    # the call ends and the arguments are whole: the call runs. A gap that is still open when the
    # finish_reason arrives fails the call (test_a_fragment_missing_at_finish_reason_is_a_gap).
    "terminal before a missing fragment": {
        "a": Expected(
            state="dispatched", cue=StatusCue.DONE, executed=True, arguments=json.loads(WEATHER)
        )
    },
}


class TestAwkwardOrders(AdapterContract):
    """Every awkward order, worded as Chat Completions bytes, ends as the portable suite expects."""

    OVERRIDES = OVERRIDES

    @pytest.fixture
    def renderer(self) -> Renderer:
        return ChatRenderer()
