"""pydantic-ai's part events as inert's ingress events (``ModelStreamAdapter``): calls end
with their response, names settle before a call opens, a rename in flight is a new opening the
actor refuses, arguments given as objects are fed whole, and a later attempt at a step replaces
the earlier response."""

from __future__ import annotations

from pydantic_ai.messages import (
    ModelResponseOrigin,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    ToolCallPart,
    ToolCallPartDelta,
)

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallOpened,
    ResponseEnded,
    ResponseEndReason,
    TurnRef,
)
from inert.pydantic_ai import ModelStreamAdapter

TURN = TurnRef(tenant="acme", conversation="c1", turn="t1")


def start(
    index: int, name: str, call: str, args: str | dict[str, object] | None = None
) -> PartStartEvent:
    return PartStartEvent(index=index, part=ToolCallPart(name, args, call))


def delta(
    index: int, args: str | dict[str, object] | None = None, name: str | None = None
) -> PartDeltaEvent:
    return PartDeltaEvent(
        index=index, delta=ToolCallPartDelta(tool_name_delta=name, args_delta=args)
    )


def test_a_call_opens_with_its_first_arguments_and_ends_with_its_response() -> None:
    """A call opens when its first argument bytes arrive, its fragments keep coming after
    pydantic-ai's ``PartEndEvent`` (sent when the next part starts), and it ends only when the
    response's stream ends, before the response's own end."""
    adapter = ModelStreamAdapter(TURN)
    fed = []
    for event in (
        start(0, "get_weather", "a"),
        start(1, "get_weather", "b"),
        PartEndEvent(index=0, part=ToolCallPart("get_weather", None, "a")),
        delta(0, '{"city": '),
        delta(1, '{"city": "Oslo"}'),
        delta(0, '"Paris"}'),
    ):
        fed += adapter.feed_event(event, response="r1")
    assert [type(event) for event in fed] == [
        CallOpened,
        ArgumentsAppended,
        CallOpened,
        ArgumentsAppended,
        ArgumentsAppended,
    ]
    assert adapter.streaming("r1")
    ended = adapter.end("r1", ResponseEndReason.COMPLETED)
    assert [type(event) for event in ended] == [CallEnded, CallEnded, ResponseEnded]
    assert not adapter.streaming("r1")
    assert adapter.keys["a"].call == "a"
    assert adapter.keys["a"].response == "r1"
    assert adapter.feed_event(delta(0, "}"), response="r1") == []


def test_a_name_in_fragments_settles_before_the_call_opens() -> None:
    """A tool name streamed in pieces before any argument opens one call under the whole name."""
    adapter = ModelStreamAdapter(TURN)
    fed = adapter.feed_event(start(0, "get_", "a"), response="r1")
    fed += adapter.feed_event(delta(0, name="weather"), response="r1")
    fed += adapter.feed_event(delta(0, '{"city": "Paris"}'), response="r1")
    opened = [event for event in fed if isinstance(event, CallOpened)]
    assert [event.tool for event in opened] == ["get_weather"]


def test_a_rename_in_flight_opens_the_call_again_as_another_tool() -> None:
    """A name that changes after the arguments began is an opening as another tool, which the
    call's actor refuses (the call fails)."""
    adapter = ModelStreamAdapter(TURN)
    fed = adapter.feed_event(start(0, "get_weather", "a", '{"city": '), response="r1")
    fed += adapter.feed_event(delta(0, name="_now"), response="r1")
    opened = [event.tool for event in fed if isinstance(event, CallOpened)]
    assert opened == ["get_weather", "get_weather_now"]
    assert len({event.key for event in fed if isinstance(event, CallOpened)}) == 1


def test_arguments_given_as_an_object_are_fed_whole_with_the_end() -> None:
    """Arguments pydantic-ai merges as objects are not fragments: the call's end carries them."""
    adapter = ModelStreamAdapter(TURN)
    fed = adapter.feed_event(start(0, "get_weather", "a", {"city": "Paris"}), response="r1")
    fed += adapter.feed_event(delta(0, {"unit": "c"}), response="r1")
    assert fed == []
    ended = adapter.end("r1", ResponseEndReason.COMPLETED)
    assert isinstance(ended[0], CallOpened)
    assert isinstance(ended[1], CallEnded)
    assert ended[1].final_arguments == b'{"city":"Paris","unit":"c"}'


def test_mixed_or_restarted_parts_break_the_response() -> None:
    """Text arguments then an object, or a part started again as another call, end the
    response as a protocol violation: inert cannot take back what it was fed."""
    for second in (delta(0, {"city": "Oslo"}), start(0, "send_email", "z")):
        adapter = ModelStreamAdapter(TURN)
        adapter.feed_event(start(0, "get_weather", "a", '{"city": "Paris"}'), response="r1")
        [violation] = adapter.feed_event(second, response="r1")
        assert isinstance(violation, ResponseEnded)
        assert violation.reason is ResponseEndReason.PROTOCOL_VIOLATION


def test_text_is_counted_and_never_a_call() -> None:
    """A text part counts its characters for the status and opens nothing."""
    adapter = ModelStreamAdapter(TURN)
    fed = adapter.feed_event(PartStartEvent(index=0, part=TextPart("hello")), response="r1")
    assert [type(event).__name__ for event in fed] == ["TextReceived"]


def test_a_later_attempt_at_a_step_replaces_the_earlier_response() -> None:
    """Events of a second attempt at the same step end the first attempt's response
    ``cancelled`` (its calls never dispatch); the first attempt's late events are dropped."""
    adapter = ModelStreamAdapter(TURN)
    first = ModelResponseOrigin(run_id="run", run_step=1, attempt=1)
    second = ModelResponseOrigin(run_id="run", run_step=1, attempt=2)
    opened = start(0, "get_weather", "a", '{"city": "Paris"}')
    opened.origin = first
    adapter.feed_event(opened, response="ignored")
    retried = start(0, "get_weather", "a", '{"city": "Oslo"}')
    retried.origin = second
    fed = adapter.feed_event(retried, response="ignored")
    ended = [event for event in fed if isinstance(event, ResponseEnded)]
    assert [(event.response.response, event.reason) for event in ended] == [
        ("run:1:1", ResponseEndReason.CANCELLED)
    ]
    late = delta(0, "}")
    late.origin = first
    assert adapter.feed_event(late, response="ignored") == []
    assert adapter.keys["a"].response == "run:1:2"


def test_an_output_tool_s_call_is_not_fed() -> None:
    """A call of a tool named in ``outputs`` opens nothing and ends nothing."""
    adapter = ModelStreamAdapter(TURN)
    adapter.outputs.add("final_result")
    fed = adapter.feed_event(start(0, "final_result", "o", '{"name": '), response="r1")
    fed += adapter.feed_event(delta(0, '"Paris"}'), response="r1")
    assert fed == []
    assert [type(event) for event in adapter.end("r1", ResponseEndReason.COMPLETED)] == [
        ResponseEnded
    ]
