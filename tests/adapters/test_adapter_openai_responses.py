"""The OpenAI Responses adapter: its protocol rules, every captured stream through a runtime on
SQLite, arbitrary splits of the wire, the ``openai`` SDK's event objects, the awkward-order
suite rendered as Responses SSE, and background-mode resumption across a restart."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pydantic
import pytest
import trio
from adapter_support import (
    CONVERSATION,
    FIXTURES,
    PRINCIPAL,
    TENANT,
    StreamRun,
    declarations,
    outcome,
    run_stream,
    turn_ref,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from locations import TESTS
from openai.types.responses import ResponseStreamEvent

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallOpened,
    Dispatch,
    Event,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    Runtime,
    ServerToolCalled,
    StatusCue,
    StreamLost,
    StreamResumed,
    TerminalRef,
    TextReceived,
    TurnRef,
    open_runtime,
)
from inert.adapters import ResumedCall
from inert.adapters._openai_responses import OpenAIResponsesAdapter
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

RESPONSES = FIXTURES / "openai-responses"
TURN = turn_ref()
E = TypeVar("E", bound=Event)
Payload = dict[str, Any]


def _adapter(turn: TurnRef = TURN, *, resumable: bool = False) -> OpenAIResponsesAdapter:
    return OpenAIResponsesAdapter(turn, resumable=resumable)


def _feed(events: Sequence[Payload], *, resumable: bool = False, close: bool = True) -> list[Event]:
    adapter = _adapter(resumable=resumable)
    produced: list[Event] = []
    for event in events:
        produced += adapter.feed_event(event)
    if close:
        produced += adapter.close()
    return produced


def _of(events: Sequence[Event], kind: type[E]) -> list[E]:
    return [event for event in events if isinstance(event, kind)]


def _ends(events: Sequence[Event]) -> list[tuple[ResponseEndReason, str]]:
    return [(event.reason, event.detail) for event in _of(events, ResponseEnded)]


def _assembled(events: Sequence[Event]) -> bytes:
    return b"".join(event.data for event in _of(events, ArgumentsAppended))


def _sse(events: Sequence[Payload]) -> bytes:
    return "".join(
        f"event: {event.get('type')}\ndata: {json.dumps(event)}\n\n" for event in events
    ).encode()


class Wire:
    """Writes the events of one Responses stream, numbering them as the API does."""

    def __init__(self, response: str = "resp_1", *, numbered: bool = True) -> None:
        self.response = response
        self.sequence = 0
        self.numbered = numbered

    def event(self, kind: str, **fields: object) -> Payload:
        event: Payload = {"type": kind, **fields}
        if self.numbered:
            event["sequence_number"] = self.sequence
            self.sequence += 1
        return event

    def lifecycle(self, kind: str, status: str = "in_progress", **fields: object) -> Payload:
        body: Payload = {"id": self.response, "object": "response", "status": status, **fields}
        return self.event(kind, response=body)

    def created(self) -> Payload:
        return self.lifecycle("response.created")

    def completed(self) -> Payload:
        return self.lifecycle("response.completed", "completed")

    def function(
        self, index: int = 0, item: str = "fc_1", call: str = "call_1", name: str = "get_weather"
    ) -> Payload:
        added = {"type": "function_call", "id": item, "call_id": call, "name": name}
        return self.event(
            "response.output_item.added",
            output_index=index,
            item={**added, "arguments": "", "status": "in_progress"},
        )

    def delta(self, text: str, index: int = 0, item: str = "fc_1") -> Payload:
        return self.event(
            "response.function_call_arguments.delta", item_id=item, output_index=index, delta=text
        )

    def arguments(self, arguments: str, index: int = 0, item: str = "fc_1") -> Payload:
        return self.event(
            "response.function_call_arguments.done",
            item_id=item,
            output_index=index,
            arguments=arguments,
        )

    def function_done(
        self,
        arguments: str,
        index: int = 0,
        *,
        item: str = "fc_1",
        call: str = "call_1",
        name: str = "get_weather",
        status: str = "completed",
    ) -> Payload:
        done = {"type": "function_call", "id": item, "call_id": call, "name": name}
        return self.event(
            "response.output_item.done",
            output_index=index,
            item={**done, "arguments": arguments, "status": status},
        )

    def call(
        self, arguments: str, index: int = 0, item: str = "fc_1", call: str = "call_1"
    ) -> list[Payload]:
        """A whole function call: added, the arguments in two deltas, done twice."""
        half = len(arguments) // 2
        return [
            self.function(index, item, call),
            self.delta(arguments[:half], index, item),
            self.delta(arguments[half:], index, item),
            self.arguments(arguments, index, item),
            self.function_done(arguments, index, item=item, call=call),
        ]

    def custom(self, index: int = 0, item: str = "ctc_1", name: str = "write_sql") -> Payload:
        added = {"type": "custom_tool_call", "id": item, "call_id": "call_c", "name": name}
        return self.event("response.output_item.added", output_index=index, item=added)

    def custom_delta(self, text: str, index: int = 0, item: str = "ctc_1") -> Payload:
        return self.event(
            "response.custom_tool_call_input.delta", item_id=item, output_index=index, delta=text
        )

    def custom_done(self, text: str, index: int = 0, item: str = "ctc_1") -> Payload:
        done = {"type": "custom_tool_call", "id": item, "call_id": "call_c", "name": "write_sql"}
        return self.event(
            "response.output_item.done",
            output_index=index,
            item={**done, "input": text, "status": "completed"},
        )

    def item(self, index: int, item: Payload, *, done: bool = False) -> Payload:
        kind = "response.output_item.done" if done else "response.output_item.added"
        return self.event(kind, output_index=index, item=item)

    def text(self, text: str, index: int = 0, item: str = "msg_1") -> Payload:
        return self.event(
            "response.output_text.delta",
            item_id=item,
            output_index=index,
            content_index=0,
            delta=text,
        )


WEATHER = '{"city": "Paris"}'


# --- function calls --------------------------------------------------------------------------


def test_function_call_opens_appends_and_ends_with_the_final_arguments() -> None:
    """A function call opens with its item id, call id and tool, appends the delta bytes and
    ends with the provider's whole arguments."""
    wire = Wire()
    events = _feed([wire.created(), *wire.call(WEATHER), wire.completed()])
    [opened] = _of(events, CallOpened)
    assert (opened.key.response, opened.key.item, opened.key.call) == ("resp_1", "fc_1", "call_1")
    assert opened.tool == "get_weather"
    assert _assembled(events) == WEATHER.encode()
    [ended] = _of(events, CallEnded)
    assert ended.final_arguments == WEATHER.encode()


def test_completed_response_is_identified_by_its_sequence_number() -> None:
    """``response.completed`` ends the response ``completed``, its terminal named by its
    sequence number."""
    wire = Wire()
    events = _feed([wire.created(), *wire.call(WEATHER), wire.completed()])
    [end] = _of(events, ResponseEnded)
    assert end.reason is ResponseEndReason.COMPLETED
    assert end.terminal == TerminalRef(sequence=6)


def test_item_done_repeating_the_arguments_adds_no_end() -> None:
    """``output_item.done`` after ``function_call_arguments.done`` with the same arguments
    emits no second end."""
    wire = Wire()
    events = _feed([wire.created(), *wire.call(WEATHER)], close=False)
    assert len(_of(events, CallEnded)) == 1


def test_item_done_with_other_arguments_ends_the_call_again_differently() -> None:
    """An ``output_item.done`` whose arguments differ from the ended call's final arguments
    makes a second, different end (its actor fails the call)."""
    wire = Wire()
    events = _feed(
        [
            wire.created(),
            wire.function(),
            wire.delta(WEATHER),
            wire.arguments(WEATHER),
            wire.function_done('{"city": "Oslo"}'),
        ],
        close=False,
    )
    first, second = _of(events, CallEnded)
    assert first.final_arguments == WEATHER.encode()
    assert second.final_arguments == b'{"city": "Oslo"}'
    assert first.terminal != second.terminal


def test_item_done_ends_a_call_that_had_no_arguments_done() -> None:
    """Without ``function_call_arguments.done``, ``output_item.done`` ends the call."""
    wire = Wire()
    events = _feed(
        [wire.created(), wire.function(), wire.delta(WEATHER), wire.function_done(WEATHER)],
        close=False,
    )
    assert [end.final_arguments for end in _of(events, CallEnded)] == [WEATHER.encode()]


def test_call_item_not_completed_in_a_completed_response_is_a_protocol_violation() -> None:
    """A call item done with status ``incomplete`` in a response that completes ends the
    response as a protocol violation."""
    wire = Wire()
    events = _feed(
        [
            wire.created(),
            wire.function(),
            wire.delta(WEATHER),
            wire.function_done(WEATHER, status="incomplete"),
            wire.completed(),
        ]
    )
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_namespaced_function_is_named_with_its_namespace() -> None:
    """A call of a namespaced function is the tool ``<namespace>.<name>``."""
    wire = Wire()
    created, added = wire.created(), wire.function()
    added["item"]["namespace"] = "crm"
    [opened] = _of(_feed([created, added], close=False), CallOpened)
    assert opened.tool == "crm.get_weather"


def test_tool_name_changed_at_item_done_reopens_the_call_as_that_tool() -> None:
    """An ``output_item.done`` naming another tool reports the call opened again as that tool
    (its actor fails it as an identity conflict)."""
    wire = Wire()
    events = _feed(
        [
            wire.created(),
            wire.function(),
            wire.delta(WEATHER),
            wire.function_done(WEATHER, name="send_email"),
        ],
        close=False,
    )
    assert [opened.tool for opened in _of(events, CallOpened)] == ["get_weather", "send_email"]


def test_call_id_changed_at_item_done_is_a_protocol_violation() -> None:
    """An ``output_item.done`` with another ``call_id`` for the item ends the response as a
    protocol violation, before any end of the call."""
    wire = Wire()
    events = _feed(
        [wire.created(), wire.function(), wire.function_done(WEATHER, call="call_2")],
        close=False,
    )
    assert _of(events, CallEnded) == []
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_missing_call_id_is_a_protocol_violation() -> None:
    """A function call item without ``call_id`` ends the response as a protocol violation."""
    wire = Wire()
    created, added = wire.created(), wire.function()
    del added["item"]["call_id"]
    events = _feed([created, added], close=False)
    assert _of(events, CallOpened) == []
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_same_call_id_in_two_responses_gives_two_call_keys() -> None:
    """A call id reused in the next response (``call_0``) is another call: the keys differ
    by response."""
    first, second = Wire("resp_a"), Wire("resp_b")
    events = _feed(
        [
            first.created(),
            *first.call("{}", item="fc_a", call="call_0"),
            first.completed(),
            second.created(),
            *second.call("{}", item="fc_b", call="call_0"),
            second.completed(),
        ]
    )
    keys = [opened.key for opened in _of(events, CallOpened)]
    assert [(key.response, key.call) for key in keys] == [
        ("resp_a", "call_0"),
        ("resp_b", "call_0"),
    ]


# --- identities: positions and rotating ids ---------------------------------------------------


def test_rotating_item_id_on_a_call_is_a_protocol_violation() -> None:
    """A delta naming another item id at the call's output index (an id that rotates) ends the
    response as a protocol violation and appends nothing."""
    wire = Wire()
    events = _feed(
        [wire.created(), wire.function(), wire.delta(WEATHER, item="fc_rotated")], close=False
    )
    assert _of(events, ArgumentsAppended) == []
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_call_named_at_another_output_index_is_a_protocol_violation() -> None:
    """A delta naming the call's item id at another output index ends the response as a
    protocol violation."""
    wire = Wire()
    events = _feed(
        [wire.created(), wire.function(index=0), wire.delta(WEATHER, index=1)], close=False
    )
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_rotating_item_id_on_text_changes_nothing() -> None:
    """Events of a message item whose id rotates (GitHub Copilot) are text as usual: no call,
    no violation."""
    wire = Wire()
    message = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    events = _feed(
        [
            wire.created(),
            wire.item(0, message),
            wire.text("Hi", item="msg_2"),
            wire.text(" there", item="msg_3"),
            wire.item(0, {**message, "id": "msg_4", "status": "completed"}, done=True),
            wire.completed(),
        ]
    )
    assert [event.characters for event in _of(events, TextReceived)] == [2, 6]
    assert _ends(events) == [(ResponseEndReason.COMPLETED, "")]


def test_rotating_response_id_without_calls_changes_nothing() -> None:
    """Lifecycle events naming other response ids end a response without calls as usual."""
    wire = Wire("capture-1")
    events = [wire.created()]
    wire.response = "capture-2"
    events.append(wire.lifecycle("response.in_progress"))
    wire.response = "capture-3"
    events.append(wire.completed())
    ended = _of(_feed(events), ResponseEnded)
    assert [(end.response.response, end.reason) for end in ended] == [
        ("capture-1", ResponseEndReason.COMPLETED)
    ]


def test_rotating_response_id_with_calls_is_a_protocol_violation() -> None:
    """A terminal naming another response id ends a response with calls as a protocol
    violation."""
    wire = Wire()
    events = [wire.created(), *wire.call(WEATHER)]
    wire.response = "resp_other"
    events.append(wire.completed())
    assert [reason for reason, _ in _ends(_feed(events))] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_function_input_for_an_item_that_is_no_function_call_is_a_protocol_violation() -> None:
    """Function call arguments addressed to a message item end the response as a protocol
    violation."""
    wire = Wire()
    message = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    events = _feed([wire.created(), wire.item(0, message), wire.delta("{}", item="msg_1")])
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_call_position_done_as_another_item_is_a_protocol_violation() -> None:
    """An ``output_item.done`` of a message at a function call's output index ends the
    response as a protocol violation."""
    wire = Wire()
    message = {"type": "message", "id": "msg_1", "role": "assistant", "content": []}
    events = _feed([wire.created(), wire.function(), wire.item(0, message, done=True)])
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_response_id_that_cannot_name_a_response_is_ignored() -> None:
    """A response whose id cannot be an identity (too long) is not passed on at all."""
    wire = Wire("r" * 600)
    assert _feed([wire.created(), *wire.call(WEATHER), wire.completed()]) == []


# --- custom tool calls -----------------------------------------------------------------------


def test_custom_tool_input_is_carried_as_an_input_object() -> None:
    """A custom call's free text streams as the JSON object ``{"input": text}``: the escaped
    deltas assemble to exactly the final arguments."""
    pieces = ['SELECT "a"\n', "FROM t\\", " WHERE x = 'é' \u2028 \x01", "🙂"]
    text = "".join(pieces)
    wire = Wire()
    events = _feed(
        [
            wire.created(),
            wire.custom(),
            *(wire.custom_delta(piece) for piece in pieces),
            wire.event(
                "response.custom_tool_call_input.done", item_id="ctc_1", output_index=0, input=text
            ),
            wire.custom_done(text),
            wire.completed(),
        ]
    )
    [ended] = _of(events, CallEnded)
    final = json.dumps({"input": text}, ensure_ascii=False, separators=(",", ":")).encode()
    assert ended.final_arguments == final
    assert _assembled(events) == final
    assert json.loads(final) == {"input": text}


def test_custom_tool_call_without_deltas_ends_with_its_final_arguments_alone() -> None:
    """A custom call that streamed no input is ended by its final arguments, with no
    fragments."""
    wire = Wire()
    events = _feed([wire.created(), wire.custom(), wire.custom_done("ls -la")], close=False)
    assert _of(events, ArgumentsAppended) == []
    [ended] = _of(events, CallEnded)
    assert ended.final_arguments == b'{"input":"ls -la"}'


def test_custom_input_for_a_function_call_is_a_protocol_violation() -> None:
    """Custom tool input addressed to a function call item ends the response as a protocol
    violation."""
    wire = Wire()
    events = _feed([wire.created(), wire.function(), wire.custom_delta("x", item="fc_1")])
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


# --- server tools, unsupported items, text ---------------------------------------------------


@pytest.mark.parametrize(
    ("item", "tool"),
    [
        ({"type": "mcp_call", "id": "mcp_1", "name": "create_short_url"}, "create_short_url"),
        ({"type": "web_search_call", "id": "ws_1"}, "web_search_call"),
        ({"type": "code_interpreter_call", "id": "ci_1"}, "code_interpreter_call"),
        ({"type": "file_search_call", "id": "fs_1"}, "file_search_call"),
        ({"type": "image_generation_call", "id": "ig_1"}, "image_generation_call"),
        ({"type": "shell_call", "id": "sh_1", "call_id": "call_s"}, "shell_call"),
        ({"type": "local_shell_call", "id": "ls_1", "call_id": "call_l"}, "local_shell_call"),
    ],
)
def test_hosted_tool_is_recorded_as_a_server_tool(item: Payload, tool: str) -> None:
    """A hosted tool item is recorded as the provider's own tool (its name, else its type),
    never opened as a call; its input deltas are ignored."""
    wire = Wire()
    identity = item["id"]
    events = _feed(
        [
            wire.created(),
            wire.item(0, item),
            wire.event(
                "response.mcp_call_arguments.delta", item_id=identity, output_index=0, delta="{}"
            ),
            wire.item(0, {**item, "status": "completed"}, done=True),
            wire.completed(),
        ]
    )
    [server] = _of(events, ServerToolCalled)
    assert (server.key.item, server.key.call, server.tool) == (identity, identity, tool)
    assert _of(events, CallOpened) == []
    assert _of(events, ArgumentsAppended) == []


def test_computer_call_is_not_supported_and_ignored() -> None:
    """A ``computer_call`` item emits nothing: it can never be dispatched."""
    wire = Wire()
    item = {"type": "computer_call", "id": "cu_1", "call_id": "call_cu", "action": {}}
    events = _feed(
        [wire.created(), wire.item(0, item), wire.item(0, item, done=True), wire.completed()]
    )
    assert [type(event) for event in events] == [ResponseEnded]


def test_text_and_refusal_deltas_count_characters_and_reasoning_does_not() -> None:
    """Output text and refusal deltas count their characters for the status; reasoning
    deltas count nothing."""
    wire = Wire()
    events = _feed(
        [
            wire.created(),
            wire.text("héllo"),
            wire.event(
                "response.refusal.delta",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                delta="no",
            ),
            wire.event(
                "response.reasoning_summary_text.delta",
                item_id="rs_1",
                output_index=1,
                summary_index=0,
                delta="thinking",
            ),
            wire.completed(),
        ]
    )
    assert [event.characters for event in _of(events, TextReceived)] == [5, 2]


# --- ends ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("max_output_tokens", ResponseEndReason.LENGTH),
        ("content_filter", ResponseEndReason.CONTENT_FILTER),
        ("something_new", ResponseEndReason.INCOMPLETE),
    ],
)
def test_incomplete_response_ends_with_its_reason(reason: str, expected: ResponseEndReason) -> None:
    """``response.incomplete`` ends the response by its ``incomplete_details.reason``."""
    wire = Wire()
    opening = [wire.created(), wire.function(), wire.delta('{"ci')]
    incomplete = wire.lifecycle(
        "response.incomplete", "incomplete", incomplete_details={"reason": reason}
    )
    events = _feed([*opening, incomplete])
    assert _ends(events) == [(expected, reason)]


def test_failed_response_ends_error_with_its_code_only() -> None:
    """``response.failed`` ends the response ``error`` with the error code as the detail,
    never its message."""
    wire = Wire()
    created = wire.created()
    failed = wire.lifecycle(
        "response.failed",
        "failed",
        error={"code": "server_error", "message": "secret argument value"},
    )
    assert _ends(_feed([created, failed])) == [(ResponseEndReason.ERROR, "server_error")]


@pytest.mark.parametrize(
    ("kind", "status"),
    [("response.cancelled", "cancelled"), ("response.failed", "cancelled")],
)
def test_cancelled_response_ends_cancelled(kind: str, status: str) -> None:
    """A cancelled background response ends ``cancelled``."""
    wire = Wire()
    events = _feed([wire.created(), wire.lifecycle(kind, status)])
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.CANCELLED]


@pytest.mark.parametrize(
    "error",
    [
        {"code": "server_error", "message": "the value was 42", "param": None},
        {"error": {"type": "server_error", "code": "server_error", "message": "42", "param": None}},
    ],
    ids=["flat", "nested"],
)
def test_error_event_ends_the_response_error_with_its_code(error: Payload) -> None:
    """An ``error`` event, flat (SDK) or nested (wire), ends the open response ``error`` at
    once with its code as the detail."""
    wire = Wire()
    events = _feed([wire.created(), wire.function(), wire.event("error", **error)])
    assert _ends(events) == [(ResponseEndReason.ERROR, "server_error")]


def test_response_failed_after_an_error_event_repeats_an_end() -> None:
    """The ``response.failed`` after an ``error`` event repeats an end with its own terminal
    (the actors ignore it)."""
    wire = Wire()
    created = wire.created()
    error = wire.event("error", error={"type": "x", "code": "insufficient_quota", "message": "m"})
    failed = wire.lifecycle("response.failed", "failed", error={"code": "insufficient_quota"})
    ended = _of(_feed([created, error, failed]), ResponseEnded)
    assert [end.terminal.sequence for end in ended] == [1, 2]
    assert {end.reason for end in ended} == {ResponseEndReason.ERROR}


def test_error_before_any_response_emits_nothing() -> None:
    """An ``error`` event before any response opened emits nothing and does not fail."""
    assert _feed([{"type": "error", "code": "bad", "message": "m", "sequence_number": 0}]) == []


def test_terminal_without_sequence_number_is_identified_by_digest() -> None:
    """A terminal without ``sequence_number`` is named by a digest of the event."""
    wire = Wire(numbered=False)
    [end] = _of(_feed([wire.created(), wire.completed()]), ResponseEnded)
    assert end.terminal.sequence is None
    assert end.terminal.digest


def test_events_after_the_terminal_are_ignored() -> None:
    """Item events after the response's terminal event emit nothing."""
    wire = Wire()
    events = _feed([wire.created(), wire.completed(), *wire.call(WEATHER)])
    assert [type(event) for event in events] == [ResponseEnded]


def test_new_response_while_one_is_open_is_a_protocol_violation() -> None:
    """A ``response.created`` of another response while one is open ends the open one as a
    protocol violation, and the new one is read as usual."""
    first, second = Wire("resp_a"), Wire("resp_b")
    events = _feed(
        [
            first.created(),
            first.function(),
            second.created(),
            *second.call("{}"),
            second.completed(),
        ]
    )
    ended = _of(events, ResponseEnded)
    assert [(end.response.response, end.reason) for end in ended] == [
        ("resp_a", ResponseEndReason.PROTOCOL_VIOLATION),
        ("resp_b", ResponseEndReason.COMPLETED),
    ]


def test_in_progress_opens_a_response_when_nothing_opened_one() -> None:
    """A body that starts with ``response.in_progress`` (or ``queued``) opens that response."""
    wire = Wire()
    events = _feed(
        [wire.lifecycle("response.queued", "queued"), *wire.call("{}"), wire.completed()]
    )
    assert [opened.key.response for opened in _of(events, CallOpened)] == ["resp_1"]


def test_close_before_the_terminal_reports_the_response_lost() -> None:
    """A body that ends before the terminal reports the response lost, not resumable."""
    wire = Wire()
    [lost] = _of(_feed([wire.created(), wire.function(), wire.delta("{")]), StreamLost)
    assert (lost.resumable, lost.last_sequence) == (False, 2)


def test_close_before_the_terminal_in_background_mode_is_resumable() -> None:
    """In background mode a body cut before the terminal is lost and resumable, with the last
    sequence number seen."""
    wire = Wire()
    events = _feed([wire.created(), wire.function(), wire.delta("{")], resumable=True)
    [lost] = _of(events, StreamLost)
    assert (lost.resumable, lost.last_sequence) == (True, 2)


# --- ordering --------------------------------------------------------------------------------


def test_replayed_sequence_numbers_are_ignored() -> None:
    """An event numbered at or below the highest number seen is a replay: nothing is emitted."""
    wire = Wire()
    created, added, delta = wire.created(), wire.function(), wire.delta(WEATHER)
    adapter = _adapter()
    first = [event for payload in (created, added, delta) for event in adapter.feed_event(payload)]
    assert len(first) == 2
    assert adapter.feed_event(added) == []
    assert adapter.feed_event(delta) == []
    assert adapter.feed_event({**delta, "delta": "other"}) == []


def test_sequence_gap_ends_the_response_as_a_protocol_violation() -> None:
    """A sequence number that skips one means events were lost: the response ends as a
    protocol violation and the event is not passed on."""
    wire = Wire()
    created, added = wire.created(), wire.function()
    wire.sequence += 1
    events = _feed([created, added, wire.delta(WEATHER)], close=False)
    assert _of(events, ArgumentsAppended) == []
    [end] = _of(events, ResponseEnded)
    assert end.reason is ResponseEndReason.PROTOCOL_VIOLATION
    assert "sequence gap" in end.detail


def test_events_without_sequence_numbers_are_taken_in_arrival_order() -> None:
    """Events without ``sequence_number`` are read in the order they arrive, repeats
    included."""
    wire = Wire(numbered=False)
    delta = wire.delta('{"a":')
    events = _feed([wire.created(), wire.function(), delta, delta], close=False)
    assert _assembled(events) == b'{"a":{"a":'


# --- malformed data --------------------------------------------------------------------------


def test_unparseable_data_mid_stream_is_a_protocol_violation() -> None:
    """A data line that is not JSON in the middle of a stream ends the response as a protocol
    violation."""
    wire = Wire()
    adapter = _adapter()
    events = adapter.feed(_sse([wire.created(), wire.function()]) + b"data: {not json\n\n")
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_payload_cut_off_at_close_is_a_lost_connection() -> None:
    """An undecodable last event cut off by the end of the body is a lost connection, not a
    violation."""
    wire = Wire()
    adapter = _adapter()
    events = adapter.feed(_sse([wire.created(), wire.function()]) + b'data: {"type": "resp')
    events += adapter.close()
    assert _ends(events) == []
    assert len(_of(events, StreamLost)) == 1


def test_event_without_type_is_a_protocol_violation() -> None:
    """A JSON object without ``type`` ends the open response as a protocol violation."""
    wire = Wire()
    events = _feed([wire.created(), {"sequence_number": 1}], close=False)
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_done_line_is_ignored() -> None:
    """A ``data: [DONE]`` line (OpenAI-compatible servers) is not an event."""
    wire = Wire()
    adapter = _adapter()
    events = adapter.feed(_sse([wire.created(), wire.completed()]) + b"data: [DONE]\n\n")
    assert [type(event) for event in events + adapter.close()] == [ResponseEnded]


# --- the API ---------------------------------------------------------------------------------


def test_feed_after_close_is_refused() -> None:
    """Feeding a closed adapter raises ``ValueError``."""
    adapter = _adapter()
    adapter.close()
    with pytest.raises(ValueError, match="closed"):
        adapter.feed(b"data: {}\n\n")
    with pytest.raises(ValueError, match="closed"):
        adapter.feed_event({"type": "error"})


def test_feed_event_of_something_that_is_no_object_is_refused() -> None:
    """``feed_event`` of a value that is no JSON object or SDK event raises ``TypeError``."""
    with pytest.raises(TypeError, match="JSON object"):
        _adapter().feed_event(["response.created"])


def test_feed_of_something_that_is_no_chunk_is_refused() -> None:
    """``feed`` of a value that is neither bytes nor text raises ``TypeError``."""
    with pytest.raises(TypeError, match="bytes or str"):
        _adapter().feed(42)  # type: ignore[arg-type]


def test_same_stream_twice_gives_equal_events() -> None:
    """The events are a function of the stream: the same stream gives equal events again."""
    body = (RESPONSES / "two-function-calls-gpt-4o.sse").read_bytes()
    runs = []
    for _ in range(2):
        adapter = _adapter()
        runs.append(adapter.feed(body) + adapter.close())
    assert runs[0] == runs[1]


# --- resumption (unit) -----------------------------------------------------------------------


def _cut(resumable: bool = True) -> tuple[list[Event], list[Payload]]:
    """A call cut after its second delta, and the rest of its stream."""
    wire = Wire()
    head = [wire.created(), wire.function(), wire.delta('{"city"'), wire.delta(': "Pa')]
    tail = [wire.delta('ris"}'), wire.arguments(WEATHER), wire.function_done(WEATHER)]
    tail.append(wire.completed())
    return _feed(head, resumable=resumable), [*head, *tail]


def _resumed_calls(events: Sequence[Event]) -> list[ResumedCall]:
    [opened] = _of(events, CallOpened)
    appended = _of(events, ArgumentsAppended)
    return [
        ResumedCall(slot="fc_1", key=opened.key, tool=opened.tool, next_sequence=len(appended) + 1)
    ]


def test_resume_continues_the_open_call_after_the_cursor() -> None:
    """A resumed adapter takes up the open call, skips the events up to the cursor and
    continues the call's numbering."""
    head, stream = _cut()
    adapter = _adapter()
    resumed = adapter.resume("resp_1", after_sequence=3, calls=_resumed_calls(head))
    assert resumed == [StreamResumed(response=_of(head, StreamLost)[0].response, after_sequence=3)]
    events = [event for payload in stream for event in adapter.feed_event(payload)]
    assert _assembled(head) + _assembled(events) == WEATHER.encode()
    assert [event.first_sequence for event in _of(events, ArgumentsAppended)] == [3]
    [ended] = _of(events, CallEnded)
    assert ended.terminal == TerminalRef(sequence=4)
    assert _ends(events) == [(ResponseEndReason.COMPLETED, "")]


def test_resume_without_response_created_attributes_events_to_the_resumed_response() -> None:
    """A continuation that starts after ``response.created`` belongs to the resumed response."""
    head, stream = _cut()
    adapter = _adapter()
    adapter.resume("resp_1", after_sequence=3, calls=_resumed_calls(head))
    events = [event for payload in stream[4:] for event in adapter.feed_event(payload)]
    assert {event.key.response for event in _of(events, CallEnded)} == {"resp_1"}


def test_resumed_stream_that_skips_events_is_a_protocol_violation() -> None:
    """A continuation that starts beyond the cursor lost events: a sequence gap."""
    head, stream = _cut()
    adapter = _adapter()
    adapter.resume("resp_1", after_sequence=3, calls=_resumed_calls(head))
    events = [event for payload in stream[5:] for event in adapter.feed_event(payload)]
    assert [reason for reason, _ in _ends(events)] == [ResponseEndReason.PROTOCOL_VIOLATION]


def test_resumed_custom_call_is_closed_as_an_input_object() -> None:
    """A custom call cut mid-input and resumed gets its closing fragment: the assembled bytes
    equal the final ``{"input": text}``."""
    wire = Wire()
    head = [wire.created(), wire.custom(), wire.custom_delta('say "hi')]
    tail = [wire.custom_delta('"\n'), wire.custom_done('say "hi"\n'), wire.completed()]
    before = _feed(head, resumable=True)
    [opened] = _of(before, CallOpened)
    calls = [ResumedCall(slot="ctc_1", key=opened.key, tool=opened.tool, next_sequence=3)]
    adapter = _adapter()
    adapter.resume("resp_1", after_sequence=2, calls=calls)
    after = [event for payload in tail for event in adapter.feed_event(payload)]
    [ended] = _of(after, CallEnded)
    assert _assembled(before) + _assembled(after) == ended.final_arguments
    assert json.loads(ended.final_arguments or b"") == {"input": 'say "hi"\n'}


def test_resume_after_feeding_is_refused() -> None:
    """``resume`` on an adapter that was fed already raises ``ValueError``."""
    adapter = _adapter()
    adapter.feed(b"")
    with pytest.raises(ValueError, match="before feeding"):
        adapter.resume("resp_1", after_sequence=0, calls=[])


def test_resume_with_calls_of_another_response_is_refused() -> None:
    """``resume`` with calls of another response raises ``ValueError``."""
    head, _ = _cut()
    with pytest.raises(ValueError, match="another response"):
        _adapter().resume("resp_2", after_sequence=3, calls=_resumed_calls(head))


# --- the fixtures through a runtime ----------------------------------------------------------

MANTLE_1 = "resp_yqqp3b5eoaaatwfitarja6yi42umok5glfymrqxbh4wwznmisz2q"
MANTLE_2 = "resp_3irkem3mb4qjb6cw3bfrozqwtev62iuhg5ygpmhx2j775j2hft5q"
GPT4O = "resp_6859a4b21f84819bba8036beab6d54360be65637a2186412"
GPT4O_SEARCH = "fc_6859a4b31d4c819b8b8d2e13e220b1f80be65637a2186412"
GPT4O_WEATHER = "fc_6859a4b36d40819b9ff3cade253cd3770be65637a2186412"
CODEX_CALLS = [
    "resp_01830d662ab3856501693c321345c88190b0de00f3b9975691/"
    "fc_01830d662ab3856501693c32151234819091cfca267e98cc5f",
    "resp_01830d662ab3856501693c3215903881909b710d150ff65014/"
    "fc_01830d662ab3856501693c32165be4819098c08f205f8932ef",
    "resp_01830d662ab3856501693c3216bef88190bf0e034cff24137b/"
    "fc_01830d662ab3856501693c32173d5081908f2121e1c3ff2901",
]
MCP = "resp_04a97b4fce127879006949a87ab0cc8195b3175edc260d6a88"
MCP_CALL = "mcp_04a97b4fce127879006949a87c14248195ac23dfe0854c03d3"

DISPATCHED = ("dispatched", None, "dispatched")
CANCELLED_LOST = ("cancelled", "connection_lost", "reject")


@pytest.fixture(scope="module")
def parallel_wrapper() -> list[Payload]:
    """The parallel-wrapper fixture's events, its two truncated lines repaired.

    Its ``response.created`` and ``response.completed`` lines each lack the closing brace of
    the event object (as copied from vercel/ai): one ``}`` appended makes each parse."""
    events = []
    for line in (RESPONSES / "multi-tool-use-parallel-wrapper.jsonl").read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append(json.loads(line + "}"))
    return events


def _lines(name: str) -> list[str]:
    return [line for line in (RESPONSES / name).read_text().splitlines() if line.strip()]


def _decoded(name: str) -> list[Payload]:
    return [json.loads(line) for line in _lines(name)]


# file -> (tools offered, {"<response>/<item>": (state, terminal_reason, dispatch)},
#          {"<response>/<item>": arguments the executor received})
FIXTURE_OUTCOMES: dict[
    str, tuple[tuple[str, ...], dict[str, tuple[object, ...]], dict[str, Any]]
] = {
    "two-function-calls-gpt-4o.sse": (
        ("search", "weather"),
        {f"{GPT4O}/{GPT4O_SEARCH}": DISPATCHED, f"{GPT4O}/{GPT4O_WEATHER}": DISPATCHED},
        {
            f"{GPT4O}/{GPT4O_SEARCH}": {"query": "Detroit Tigers game time October 6, 2023"},
            f"{GPT4O}/{GPT4O_WEATHER}": {"city": "Detroit"},
        },
    ),
    # Three recorded bodies, fed whole: each opens with response.created and numbers its
    # events from 0 again, so they read as three responses; call_0 and call_1 are keyed apart
    # by response and item. The third response is text only.
    "bedrock-mantle-reused-call-ids.sse": (
        ("first_tool", "second_tool"),
        {
            f"{MANTLE_1}/fc_8189b908df5d54828dd1a219b8f647cb": DISPATCHED,
            f"{MANTLE_2}/fc_90eeebebbc0858fb8cfcf850d451caf8": DISPATCHED,
        },
        {
            f"{MANTLE_1}/fc_8189b908df5d54828dd1a219b8f647cb": {},
            f"{MANTLE_2}/fc_90eeebebbc0858fb8cfcf850d451caf8": {},
        },
    ),
    # Four responses back to back (the fourth is the text answer): each call is its own.
    "reasoning-then-function-call-three-responses.jsonl": (
        ("calculator",),
        {label: DISPATCHED for label in CODEX_CALLS},
        {
            CODEX_CALLS[0]: {"a": 12, "b": 7, "op": "add"},
            CODEX_CALLS[1]: {"a": 19, "b": 3, "op": "multiply"},
            CODEX_CALLS[2]: {"a": 57, "b": 10, "op": "multiply"},
        },
    ),
    # The free-text input reaches the executor whole under "input".
    "custom-tool-call-input-delta.jsonl": (
        ("write_sql",),
        {"resp_custom_tool_test_001/ct_abc123def456": DISPATCHED},
        {
            "resp_custom_tool_test_001/ct_abc123def456": {
                "input": "SELECT * FROM users WHERE age > 25"
            }
        },
    ),
    # Hosted MCP ran at OpenAI: on record, cancelled as it opens, even with its name offered.
    "mcp-call-arguments-after-approval.jsonl": (
        ("create_short_url",),
        {f"{MCP}/{MCP_CALL}": ("cancelled", "server_executed", "reject")},
        {},
    ),
    # Errors before any item: nothing to record.
    "error-event-then-response-failed.jsonl": ((), {}, {}),
    "response-failed-only-rate-limit.jsonl": ((), {}, {}),
    # Only reasoning and text, whose ids rotate: no call.
    "github-copilot-item-id-rotation.jsonl": ((), {}, {}),
    # As stored, its response.created line does not parse: no response is ever named, so
    # nothing of it can be attributed and nothing is recorded.
    "multi-tool-use-parallel-wrapper.jsonl": (("weather", "cityAttractions"), {}, {}),
}


_WIRE_ONLY = ("multi-tool-use-parallel-wrapper.jsonl",)
"""Fixtures with lines that do not decode: fed as raw SSE events only."""


def test_every_fixture_has_an_expected_outcome() -> None:
    """Every OpenAI Responses fixture file is pinned down here."""
    names = {path.name for path in RESPONSES.iterdir()}
    assert names == set(FIXTURE_OUTCOMES) == set(RESPONSE_ENDS)


def _wire_chunks(name: str) -> list[bytes]:
    """A fixture as raw wire bytes: the SSE file, or each JSON line as an SSE event."""
    if name.endswith(".sse"):
        return [(RESPONSES / name).read_bytes()]
    return [f"data: {line}\n\n".encode() for line in _lines(name)]


def _plain(value: object) -> object:
    """Parsed arguments (read-only mappings and sequences) as plain JSON values."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _check(
    run: StreamRun, expected: Mapping[str, tuple[object, ...]], executed: Mapping[str, Any]
) -> None:
    assert {label: outcome(row) for label, row in run.rows.items()} == expected
    assert {
        label: _plain(dispatch.arguments) for label, dispatch in run.executed.items()
    } == executed


@pytest.mark.parametrize("name", sorted(FIXTURE_OUTCOMES))
async def test_fixture_outcome(name: str, tmp_path: Path) -> None:
    """Each fixture fed through the adapter into a runtime ends with exactly the outcome
    written down for every call in it, and the executor receives exactly the calls expected."""
    tools, expected, executed = FIXTURE_OUTCOMES[name]
    if name.endswith(".sse") or name in _WIRE_ONLY:
        run = await run_stream(_adapter, tmp_path, tools=tools, chunks=_wire_chunks(name))
    else:
        run = await run_stream(_adapter, tmp_path, tools=tools, events=_decoded(name))
    _check(run, expected, executed)


COMPLETED = ResponseEndReason.COMPLETED
ERROR = ResponseEndReason.ERROR

# file -> how each response in it ends: (response, reason, detail), in order.
RESPONSE_ENDS: dict[str, list[tuple[str, ResponseEndReason, str]]] = {
    "two-function-calls-gpt-4o.sse": [(GPT4O, COMPLETED, "")],
    "bedrock-mantle-reused-call-ids.sse": [
        (MANTLE_1, COMPLETED, ""),
        (MANTLE_2, COMPLETED, ""),
        ("resp_xk6l63oaoqbapz5kikx3sm3ptssqjxa6tqvccjoh7iyb73tl5mja", COMPLETED, ""),
    ],
    "reasoning-then-function-call-three-responses.jsonl": [
        *((label.split("/")[0], COMPLETED, "") for label in CODEX_CALLS),
        ("resp_01830d662ab3856501693c3217ba4c8190a3ddf6c839d4f12a", COMPLETED, ""),
    ],
    "custom-tool-call-input-delta.jsonl": [("resp_custom_tool_test_001", COMPLETED, "")],
    "mcp-call-arguments-after-approval.jsonl": [(MCP, COMPLETED, "")],
    # The error event ends the response; response.failed repeats an end the actors ignore.
    "error-event-then-response-failed.jsonl": [
        ("resp_05500b38c2cd9bfc00691c7c9d222481a3b595421266dab424", ERROR, "insufficient_quota"),
        ("resp_05500b38c2cd9bfc00691c7c9d222481a3b595421266dab424", ERROR, "insufficient_quota"),
    ],
    "response-failed-only-rate-limit.jsonl": [
        ("resp_test_failed_001", ERROR, "rate_limit_exceeded")
    ],
    # Its response and item ids rotate on every event; with no call, the response is the one
    # response.created named and it completes.
    "github-copilot-item-id-rotation.jsonl": [("capture-id-1", COMPLETED, "")],
    "multi-tool-use-parallel-wrapper.jsonl": [],
}


@pytest.mark.parametrize("name", sorted(RESPONSE_ENDS))
def test_fixture_response_ends(name: str) -> None:
    """Each fixture's responses end as written down (reason and detail), and no stream is
    reported lost."""
    adapter = _adapter()
    events: list[Event] = []
    for chunk in _wire_chunks(name):
        events += adapter.feed(chunk)
    events += adapter.close()
    ends = [(end.response.response, end.reason, end.detail) for end in _of(events, ResponseEnded)]
    assert ends == RESPONSE_ENDS[name]
    assert _of(events, StreamLost) == []


async def test_leaked_parallel_wrapper_is_not_offered_so_it_fails(
    parallel_wrapper: list[Payload], tmp_path: Path
) -> None:
    """The repaired parallel-wrapper stream opens one call of the tool ``parallel``; the turn
    offered ``weather`` and ``cityAttractions``, so it fails as an unknown tool (the adapter
    never unwraps it)."""
    run = await run_stream(
        _adapter, tmp_path, tools=("weather", "cityAttractions"), events=parallel_wrapper
    )
    _check(run, {"resp_parallel/fc_parallel": ("failed", "unknown_tool", "reject")}, {})


async def test_leaked_parallel_wrapper_offered_runs_as_the_wrapper(
    parallel_wrapper: list[Payload], tmp_path: Path
) -> None:
    """A turn that offers ``parallel`` gets the wrapper's arguments as they are, once."""
    run = await run_stream(_adapter, tmp_path, tools=("parallel",), events=parallel_wrapper)
    wrapped = json.loads(parallel_wrapper[3]["arguments"])
    _check(run, {"resp_parallel/fc_parallel": DISPATCHED}, {"resp_parallel/fc_parallel": wrapped})


def test_concatenated_bodies_read_as_their_bodies_one_by_one() -> None:
    """Feeding the three recorded Mantle bodies whole gives the events of feeding each body to
    a fresh adapter."""
    body = (RESPONSES / "bedrock-mantle-reused-call-ids.sse").read_text()
    parts = body.split(": interaction ")[1:]
    assert len(parts) == 3
    separately: list[Event] = []
    for part in parts:
        adapter = _adapter()
        separately += adapter.feed(": interaction " + part) + adapter.close()
    adapter = _adapter()
    assert adapter.feed(body) + adapter.close() == separately


# --- splits, SSE text and SDK objects --------------------------------------------------------


def _whole(chunks: Sequence[bytes]) -> bytes:
    return b"".join(chunks)


@settings(max_examples=25, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize("name", sorted(FIXTURE_OUTCOMES))
def test_any_split_of_the_wire_gives_the_same_events(name: str, data: st.DataObject) -> None:
    """The raw wire split into chunks at arbitrary points gives the events of the whole."""
    body = _whole(_wire_chunks(name))
    cuts = sorted(data.draw(st.sets(st.integers(1, len(body) - 1), max_size=40), label="cuts"))
    adapter = _adapter()
    whole = adapter.feed(body) + adapter.close()
    adapter = _adapter()
    split: list[Event] = []
    for start, stop in zip([0, *cuts], [*cuts, len(body)], strict=True):
        split += adapter.feed(body[start:stop])
    assert split + adapter.close() == whole


@pytest.mark.parametrize("name", sorted(set(FIXTURE_OUTCOMES) - set(_WIRE_ONLY)))
def test_decoded_events_equal_the_same_events_as_sse_text(name: str) -> None:
    """Feeding a fixture's events as decoded dicts gives the events of feeding it as SSE."""
    adapter = _adapter()
    as_text = adapter.feed(_whole(_wire_chunks(name))) + adapter.close()
    assert _feed(_events_of(name)) == as_text


def test_repaired_parallel_wrapper_as_dicts_equals_it_as_sse_text(
    parallel_wrapper: list[Payload],
) -> None:
    """The repaired parallel-wrapper events give the same events as dicts and as SSE text."""
    adapter = _adapter()
    as_text = adapter.feed(_sse(parallel_wrapper)) + adapter.close()
    assert _feed(parallel_wrapper) == as_text
    assert len(_of(as_text, CallEnded)) == 1


_SDK_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


def _events_of(name: str) -> list[Payload]:
    if name.endswith(".jsonl"):
        return _decoded(name)
    return [
        json.loads(line.removeprefix("data: "))
        for line in (RESPONSES / name).read_text().splitlines()
        if line.startswith("data: ")
    ]


@pytest.mark.parametrize("name", sorted(set(FIXTURE_OUTCOMES) - set(_WIRE_ONLY)))
def test_sdk_event_objects_give_the_same_events_as_dicts(name: str) -> None:
    """Each event the ``openai`` SDK's models accept, fed as the SDK object, gives the same
    events as the dicts (events the SDK rejects, e.g. the nested ``error`` or events without
    ``sequence_number``, are fed as dicts)."""
    payloads = _events_of(name)
    adapter = _adapter()
    accepted = 0
    produced: list[Event] = []
    for payload in payloads:
        try:
            event: object = _SDK_EVENT.validate_python(payload)
        except pydantic.ValidationError:
            event = payload
        else:
            accepted += 1
        produced += adapter.feed_event(event)
    produced += adapter.close()
    assert produced == _feed(payloads)
    if all("sequence_number" in payload for payload in payloads):
        assert accepted > 0


# --- the awkward-order suite -----------------------------------------------------------------


class ResponsesRenderer:
    """Renders each awkward step as OpenAI Responses SSE and reads it back through an adapter
    per turn. A lost fragment consumes its sequence number but never reaches the adapter: on
    this wire a lost event is a sequence gap, which the adapter sees itself."""

    def __init__(self) -> None:
        self.adapters: dict[TurnRef, OpenAIResponsesAdapter] = {}
        self.wires: dict[str, Wire] = {}
        self.owner: dict[str, OpenAIResponsesAdapter] = {}
        self.outputs: dict[str, int] = {}
        self.calls: dict[str, tuple[str, int, str, bytearray]] = {}

    def render(self, step: Open | Fragment | End | EndResponse, stream: Stream) -> list[Event]:
        match step:
            case Open(call=label, tool=tool, response=response):
                payloads = self._open_response(response, stream.turn)
                wire = self.wires[response]
                index = self.outputs[response] = self.outputs.get(response, -1) + 1
                self.calls[label] = (response, index, tool, bytearray())
                payloads.append(wire.function(index, f"fc_{label}", f"call_{label}", tool))
                return self._read(response, payloads)
            case Fragment(call=label, data=data, lost=lost):
                response, index, _, sent = self.calls[label]
                sent += data
                delta = self.wires[response].delta(data.decode(), index, f"fc_{label}")
                return [] if lost else self._read(response, [delta])
            case End(call=label, final=final):
                response, index, tool, sent = self.calls[label]
                wire = self.wires[response]
                arguments = (final if final is not None else bytes(sent)).decode()
                item, call = f"fc_{label}", f"call_{label}"
                payloads = [
                    wire.arguments(arguments, index, item),
                    wire.function_done(arguments, index, item=item, call=call, name=tool),
                ]
                return self._read(response, payloads)
            case EndResponse(response=response, reason=reason):
                return self._read(response, [self._terminal(self.wires[response], reason)])
        raise AssertionError(step)  # pragma: no cover

    def _open_response(self, response: str, turn: TurnRef) -> list[Payload]:
        if response in self.wires:
            return []
        adapter = self.adapters.setdefault(turn, _adapter(turn))
        self.owner[response] = adapter
        wire = self.wires[response] = Wire(response)
        return [wire.created(), wire.lifecycle("response.in_progress")]

    def _read(self, response: str, payloads: list[Payload]) -> list[Event]:
        adapter = self.owner[response]
        body = _sse(payloads)
        events: list[Event] = []
        for start in range(0, len(body), 7):
            events += adapter.feed(body[start : start + 7])
        return events

    @staticmethod
    def _terminal(wire: Wire, reason: ResponseEndReason) -> Payload:
        match reason:
            case ResponseEndReason.COMPLETED:
                return wire.completed()
            case ResponseEndReason.LENGTH | ResponseEndReason.CONTENT_FILTER:
                details = {"reason": "max_output_tokens"}
                if reason is ResponseEndReason.CONTENT_FILTER:
                    details = {"reason": "content_filter"}
                return wire.lifecycle(
                    "response.incomplete", "incomplete", incomplete_details=details
                )
            case ResponseEndReason.CANCELLED:
                return wire.lifecycle("response.cancelled", "cancelled")
        return wire.lifecycle("response.failed", "failed", error={"code": "server_error"})


# A lost delta is a gap in the response's sequence numbers: the adapter ends the whole
# response as a protocol violation at the next event, before the call's end could show the
# actor a gap of its own.
OVERRIDES: dict[str, dict[str, Expected]] = {
    "terminal before a missing fragment": {
        "a": Expected(state="failed", reason="protocol_violation", cue=StatusCue.FAILED)
    }
}


class TestAwkwardOrders(AdapterContract):
    """Every awkward order, worded as the Responses wire, ends as the portable suite expects."""

    OVERRIDES = OVERRIDES

    @pytest.fixture
    def renderer(self) -> Renderer:
        return ResponsesRenderer()


# --- background mode: a cut stream resumed in a new process -----------------------------------

GPT4O_FILE = "two-function-calls-gpt-4o.sse"
CUT_AFTER = 23
"""The weather call (output 1) has had three of its five deltas by then; search has ended."""


def _sse_events(name: str) -> Iterator[tuple[int, bytes]]:
    """The fixture's SSE events with their sequence numbers, each as its raw bytes."""
    for block in (RESPONSES / name).read_bytes().split(b"\n\n"):
        if block.strip():
            data = next(line for line in block.splitlines() if line.startswith(b"data: "))
            yield json.loads(data[6:])["sequence_number"], block + b"\n\n"


def _until(last: int) -> bytes:
    return b"".join(raw for sequence, raw in _sse_events(GPT4O_FILE) if sequence <= last)


def _after(first: int) -> bytes:
    return b"".join(raw for sequence, raw in _sse_events(GPT4O_FILE) if sequence >= first)


@asynccontextmanager
async def _runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    async with open_runtime(
        log=url, create=True, tools=declarations(["search", "weather"])
    ) as runtime:
        yield runtime


async def _first_connection(tmp_path: Path, *, resumable: bool) -> dict[str, tuple[object, ...]]:
    async with _runtime(tmp_path) as runtime:
        turn = await runtime.start_turn(
            tenant=TENANT,
            conversation=CONVERSATION,
            turn="t1",
            principal=PRINCIPAL,
            tools=["search", "weather"],
        )
        adapter = _adapter(turn, resumable=resumable)
        await runtime.feed(adapter.feed(_until(CUT_AFTER)) + adapter.close())
        await runtime.settle()
        return _outcomes(runtime)


def _outcomes(runtime: Runtime) -> dict[str, tuple[object, ...]]:
    return {
        row.item: outcome(row.to_json())
        for row in runtime.projections.ledger.rows()
        if row.response == GPT4O
    }


async def _continue(tmp_path: Path, continuation: bytes) -> tuple[dict[str, Any], list[str]]:
    """In a new runtime on the same log: resume the cut response and feed the continuation."""
    executed: list[str] = []
    async with _runtime(tmp_path) as runtime:
        turn = turn_ref()
        streams = runtime.resumable_streams(turn)
        response = ResponseRef(tenant=TENANT, conversation=CONVERSATION, turn="t1", response=GPT4O)
        assert streams == {response: CUT_AFTER}
        adapter = _adapter(turn)
        events = adapter.resume(
            GPT4O, after_sequence=CUT_AFTER, calls=runtime.resumable_calls(response)
        )
        events += adapter.feed(continuation) + adapter.close()
        await runtime.feed(events)
        await runtime.settle()

        async def record(dispatch: Dispatch) -> None:
            executed.append(dispatch.key.item)

        for key in list(runtime.projections.queue.ready()):
            await runtime.execute(key, record, name="resume-test")
        await runtime.settle()
        return _outcomes(runtime), executed


async def test_cut_background_stream_leaves_its_calls_waiting(tmp_path: Path) -> None:
    """A background stream cut before its terminal leaves its calls waiting: the ended one
    validated and waiting for its response, the one mid-arguments collecting."""
    before = await _first_connection(tmp_path, resumable=True)
    assert before == {
        GPT4O_SEARCH: ("validated", None, "await_response"),
        GPT4O_WEATHER: ("collecting", None, "inert"),
    }


async def test_cut_stream_without_background_mode_cancels_its_calls(tmp_path: Path) -> None:
    """A cut stream that cannot be resumed cancels its calls ``connection_lost``."""
    before = await _first_connection(tmp_path, resumable=False)
    assert before == {GPT4O_SEARCH: CANCELLED_LOST, GPT4O_WEATHER: CANCELLED_LOST}


async def test_resumed_stream_dispatches_the_collecting_call_exactly_once(tmp_path: Path) -> None:
    """A new process resumes the cut response from ``resumable_calls`` and the continuation
    after the last sequence seen: both calls are dispatched, each exactly once."""
    await _first_connection(tmp_path, resumable=True)
    after, executed = await _continue(tmp_path, _after(CUT_AFTER + 1))
    assert after == {GPT4O_SEARCH: DISPATCHED, GPT4O_WEATHER: DISPATCHED}
    assert sorted(executed) == sorted([GPT4O_SEARCH, GPT4O_WEATHER])


async def test_resumed_stream_replaying_seen_events_ignores_them(tmp_path: Path) -> None:
    """A continuation that replays the events already seen (from ``response.created`` on)
    ends the same: the replayed events are ignored."""
    await _first_connection(tmp_path, resumable=True)
    after, executed = await _continue(tmp_path, _after(0))
    assert after == {GPT4O_SEARCH: DISPATCHED, GPT4O_WEATHER: DISPATCHED}
    assert sorted(executed) == sorted([GPT4O_SEARCH, GPT4O_WEATHER])


async def _resumed_and_killed(tmp_path: Path, *written: str) -> int:
    """A child process resumes the cut stream, feeds the continuation's argument deltas and is
    killed before they are written (or after, given ``"written"``); how many it fed."""
    url = f"sqlite:///{tmp_path / 'resume.db'}"
    child = await trio.run_process(
        [sys.executable, str(TESTS / "resume_killed.py"), url, *written],
        capture_stdout=True,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child
    [line] = child.stdout.decode().splitlines()
    return int(line.split()[1])


async def test_a_crash_after_fragments_were_fed_loses_them_and_the_resumption_sends_them_again(
    tmp_path: Path,
) -> None:
    """Fragments of a resumed background stream fed and not yet written when the process is
    killed are lost with it: a restart keeps the stream resumable after the sequence the log
    holds all of, with its calls as they were then; the continuation from there sends the
    lost bytes again, and each call runs once with its whole arguments."""
    await _first_connection(tmp_path, resumable=True)
    fed = await _resumed_and_killed(tmp_path)
    assert fed == 2
    async with _runtime(tmp_path) as runtime:
        records = await runtime.log.read()
        resumed = max(
            record.position for record in records if isinstance(record.event, StreamResumed)
        )
        assert not any(
            isinstance(record.kept, ArgumentsAppended) and record.position > resumed
            for record in records
        ), "the killed process wrote the fragments it held"
        response = ResponseRef(tenant=TENANT, conversation=CONVERSATION, turn="t1", response=GPT4O)
        assert runtime.resumable_streams(turn_ref()) == {response: CUT_AFTER}
        calls = {call.slot: call for call in runtime.resumable_calls(response)}
        assert (calls[GPT4O_WEATHER].next_sequence, calls[GPT4O_WEATHER].ended) == (4, False)
        assert calls[GPT4O_SEARCH].ended
    after, executed = await _continue(tmp_path, _after(CUT_AFTER + 1))
    assert after == {GPT4O_SEARCH: DISPATCHED, GPT4O_WEATHER: DISPATCHED}
    assert sorted(executed) == sorted([GPT4O_SEARCH, GPT4O_WEATHER])


async def test_a_crash_after_fragments_were_written_resumes_them_as_duplicates(
    tmp_path: Path,
) -> None:
    """Fragments a resumed stream wrote before its process was killed are sent again by the
    next continuation (it resumes where the log holds everything): they are duplicates, and
    each call runs once with its whole arguments."""
    await _first_connection(tmp_path, resumable=True)
    assert await _resumed_and_killed(tmp_path, "written") == 2
    after, executed = await _continue(tmp_path, _after(CUT_AFTER + 1))
    assert after == {GPT4O_SEARCH: DISPATCHED, GPT4O_WEATHER: DISPATCHED}
    assert sorted(executed) == sorted([GPT4O_SEARCH, GPT4O_WEATHER])


async def test_same_stream_fed_twice_into_a_turn_changes_nothing(tmp_path: Path) -> None:
    """The same body fed again through a fresh adapter (a reconnect that replays it) adds no
    call and dispatches nothing a second time."""
    body = (RESPONSES / GPT4O_FILE).read_bytes()
    executed: list[str] = []

    async def record(dispatch: Dispatch) -> None:
        executed.append(dispatch.key.item)

    async with _runtime(tmp_path) as runtime:
        turn = await runtime.start_turn(
            tenant=TENANT,
            conversation=CONVERSATION,
            turn="t1",
            principal=PRINCIPAL,
            tools=["search", "weather"],
        )
        for _ in range(2):
            adapter = _adapter(turn)
            await runtime.feed(adapter.feed(body) + adapter.close())
            await runtime.settle()
            for key in list(runtime.projections.queue.ready()):
                await runtime.execute(key, record, name="replay-test")
            await runtime.settle()
        assert _outcomes(runtime) == {GPT4O_SEARCH: DISPATCHED, GPT4O_WEATHER: DISPATCHED}
    assert sorted(executed) == sorted([GPT4O_SEARCH, GPT4O_WEATHER])
