"""``inert feed``: a recorded provider stream into a turn, from a file, once whatever happens."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import trio
from adapter_support import FIXTURES

from inert import RecordedEvent, open_log
from inert.cli import main


async def read_all(url: str) -> list[RecordedEvent]:
    async with open_log(url) as log:
        return await log.read(1)


CHAT = FIXTURES / "openai-chat" / "parallel-tool-calls-gpt-4o.sse"
RESPONSES = FIXTURES / "openai-responses" / "two-function-calls-gpt-4o.sse"
# Any object passes: these tests are about feeding; x-inert strict false says it is meant.
ANY_OBJECT = {"type": "object"}
STRICT_OFF = {"x-inert": {"strict": False}}
CHAT_TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": ANY_OBJECT}, **STRICT_OFF}
    for name in ("get_country", "get_product_name", "final_result")
]
RESPONSES_TOOLS = [
    {"type": "function", "name": name, "parameters": ANY_OBJECT, **STRICT_OFF}
    for name in ("search", "weather")
]


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def tools_file(tmp_path: Path, declarations: Sequence[Mapping[str, object]]) -> Path:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(declarations))
    return path


def feed(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    stream: Path,
    provider: str,
    declarations: Sequence[Mapping[str, object]],
    *extra: str,
) -> list[dict[str, object]]:
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    argv = ["feed", str(stream), "--provider", provider, "--log", url, "--json", *extra]
    status, out, err = run(capsys, [*argv, "--tools", str(tools_file(tmp_path, declarations))])
    assert status == 0, err
    return [json.loads(line) for line in out.splitlines()]


def states(rows: list[dict[str, object]]) -> dict[str, tuple[object, object, object]]:
    return {
        f"{row['response']}/{row['item']}": (row["state"], row["dispatch"], row["outcome"])
        for row in rows
    }


def test_feed_with_execute_runs_every_ready_call_once_and_prints_the_turn_s_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The calls of the offered tools run once; a call of a tool not offered fails, exit 0."""
    rows = feed(capsys, tmp_path, CHAT, "openai-chat", CHAT_TOOLS, "--execute")
    outcomes = sorted(states(rows).values(), key=str)
    assert outcomes == sorted(
        [("dispatched", "dispatched", "completed")] * 3 + [("failed", "reject", None)], key=str
    )
    assert {row["turn"] for row in rows} == {"1"}
    assert all(set(row) >= {"tenant", "conversation", "terminal_reason"} for row in rows)


def test_feeding_the_same_stream_again_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reconnect that replays the whole stream into the same turn: no new call, no second run."""
    first = feed(capsys, tmp_path, CHAT, "openai-chat", CHAT_TOOLS, "--execute")
    again = feed(capsys, tmp_path, CHAT, "openai-chat", CHAT_TOOLS, "--execute")
    assert again == first


def test_a_cut_responses_stream_waits_and_its_continuation_resumes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Responses file that ends early leaves its call collecting; the continuation (the events
    after the last sequence seen) completes both calls, each run once."""
    events = [event for event in RESPONSES.read_bytes().split(b"\n\n") if event.strip()]
    cut, rest = tmp_path / "cut.sse", tmp_path / "rest.sse"
    cut.write_bytes(b"\n\n".join(events[:10]) + b"\n\n")
    rest.write_bytes(b"\n\n".join(events[10:]) + b"\n\n")
    before = feed(capsys, tmp_path, cut, "openai-responses", RESPONSES_TOOLS, "--execute")
    assert [row["state"] for row in before] == ["collecting"]
    after = feed(capsys, tmp_path, rest, "openai-responses", RESPONSES_TOOLS, "--execute")
    assert sorted(states(after).values()) == [("dispatched", "dispatched", "completed")] * 2
    again = feed(capsys, tmp_path, RESPONSES, "openai-responses", RESPONSES_TOOLS, "--execute")
    assert again == after


def test_a_cut_stream_of_a_protocol_without_resume_cancels_its_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Chat Completions file that ends before [DONE] is a dropped connection."""
    body = CHAT.read_bytes()
    cut = tmp_path / "cut.sse"
    cut.write_bytes(body[: body.index(b'finish_reason":"tool_calls')])
    rows = feed(capsys, tmp_path, cut, "openai-chat", CHAT_TOOLS, "--execute")
    assert {(row["state"], row["terminal_reason"]) for row in rows} == {
        ("cancelled", "connection_lost")
    }


def test_json_lines_are_detected_and_read_as_decoded_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file of one JSON event per line is fed as decoded events, not as SSE."""
    lines = FIXTURES / "openai-responses" / "custom-tool-call-input-delta.jsonl"
    rows = feed(capsys, tmp_path, lines, "openai-responses", [{"name": "write_sql"}], "--execute")
    assert [(row["tool"], row["state"]) for row in rows] == [("write_sql", "dispatched")]


@pytest.mark.parametrize(
    ("problem", "message"),
    [
        ("missing stream", "cannot read"),
        ("tools not JSON", "is not a JSON document"),
        ("tools not a list", "tool declarations are a JSON list"),
        ("stream lines not JSON", "line 2 is not JSON"),
        (
            "a stream line that repeats a key",
            "line 2 is not JSON (an event whose JSON repeats a key",
        ),
        ("a stream line nested too deep", "line 2 is not JSON (an event nested deeper than 64"),
        ("tools nested too deep", "nests too deep to be read"),
    ],
)
def test_unreadable_input_exits_non_zero_with_what_is_wrong(
    problem: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file that cannot be read as what it should be is an error that says why, not a crash."""
    stream, tools = CHAT, tools_file(tmp_path, CHAT_TOOLS)
    if problem == "missing stream":
        stream = tmp_path / "missing.sse"
    elif problem == "tools not JSON":
        tools.write_text("[{")
    elif problem == "tools not a list":
        tools.write_text("{}")
    elif problem == "tools nested too deep":
        tools.write_text("[" * 100_000 + "]" * 100_000)
    else:
        second = {
            "stream lines not JSON": '{"type": ',
            "a stream line that repeats a key": '{"type": "a", "type": "b"}',
            "a stream line nested too deep": '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}",
        }[problem]
        stream = tmp_path / "broken.jsonl"
        stream.write_text('{"type": "response.created"}\n' + second + "\n")
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    status, _, err = run(
        capsys,
        ["feed", str(stream), "--provider", "openai-chat", "--tools", str(tools), "--log", url],
    )
    assert status != 0
    assert message in err
    assert "Traceback" not in err


def test_an_unknown_provider_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--provider`` takes only the providers inert has an adapter for."""
    with pytest.raises(SystemExit) as exited:
        main(["feed", str(CHAT), "--provider", "nope", "--tools", "t.json", "--log", "memory://"])
    assert exited.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_feeding_another_principal_s_turn_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A turn started for one principal cannot be fed in the name of another."""
    feed(capsys, tmp_path, CHAT, "openai-chat", CHAT_TOOLS)
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    tools = tools_file(tmp_path, CHAT_TOOLS)
    status, _, err = run(
        capsys,
        [
            *("feed", str(CHAT), "--provider", "openai-chat", "--tools", str(tools)),
            *("--log", url, "--principal", "mallory"),
        ],
    )
    assert status == 1
    assert "belongs to another principal" in err


def test_the_table_output_names_the_stream_and_the_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --json the command prints a summary line, the ledger table and what it ran."""
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    tools = tools_file(tmp_path, CHAT_TOOLS)
    status, out, _ = run(
        capsys,
        [
            *("feed", str(CHAT), "--provider", "openai-chat", "--tools", str(tools)),
            *("--log", url, "--execute"),
        ],
    )
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"fed 72 events from {CHAT.name} (openai-chat) into turn")
    assert lines[0].endswith(": 4 calls")
    assert sum(line.startswith("executed") for line in lines) == 3


def test_an_anthropic_stream_is_fed_and_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Anthropic body and declarations with input_schema: its tool call runs once."""
    stream = FIXTURES / "anthropic" / "text-then-tool-use.sse"
    declarations = [{"name": "get_weather", "input_schema": ANY_OBJECT, **STRICT_OFF}]
    rows = feed(capsys, tmp_path, stream, "anthropic", declarations, "--execute")
    assert [(row["tool"], row["state"], row["outcome"]) for row in rows] == [
        ("get_weather", "dispatched", "completed")
    ]


def test_a_bedrock_stream_of_json_lines_is_fed_under_a_response_named_by_its_content(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ConverseStream names no message: the command names it after the file's digest, so that
    feeding the file again names the same response and changes nothing."""
    stream = FIXTURES / "bedrock" / "converse-stream-text-then-two-tool-uses.jsonl"
    declarations = [{"toolSpec": {"name": "weather", "inputSchema": {"json": {}}}}]
    rows = feed(capsys, tmp_path, stream, "bedrock", declarations, "--execute")
    assert [(row["item"], row["state"]) for row in rows] == [
        ("1", "dispatched"),
        ("2", "dispatched"),
    ]
    assert {str(row["response"]).startswith("bedrock-") for row in rows} == {True}
    assert feed(capsys, tmp_path, stream, "bedrock", declarations, "--execute") == rows


def test_a_vertex_stream_is_fed_and_its_assembled_calls_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Vertex partial arguments in JSON lines, with Gemini functionDeclarations: both calls run."""
    stream = FIXTURES / "gemini" / "vertex-partial-args-single-call.jsonl"
    declarations = [{"functionDeclarations": [{"name": "getWeather", "parameters": {}}]}]
    rows = feed(capsys, tmp_path, stream, "gemini", declarations, "--execute")
    assert [(row["item"], row["outcome"]) for row in rows] == [
        ("0.0", "completed"),
        ("0.1", "completed"),
    ]


def test_the_caller_s_trace_context_is_stored_beside_the_turn_and_its_events(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--traceparent and --tracestate continue the caller's trace: the turn and every event fed
    carry them, opaque; a refused header is reported and starts a new trace."""
    traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    feed(
        capsys,
        tmp_path,
        CHAT,
        "openai-chat",
        CHAT_TOOLS,
        "--traceparent",
        traceparent,
        "--tracestate",
        "rojo=00f067aa0ba902b7",
    )
    recorded = trio.run(read_all, f"sqlite:///{tmp_path / 'feed.db'}")
    fed = [event for event in recorded if event.event_type.startswith("ingress.")]
    assert fed
    assert {(event.trace.traceparent, event.trace.tracestate) for event in fed if event.trace} == {
        (traceparent, "rojo=00f067aa0ba902b7")
    }
    assert all(event.trace is not None for event in fed)
    url = f"sqlite:///{tmp_path / 'other.db'}"
    tools = tools_file(tmp_path, CHAT_TOOLS)
    argv = ["feed", str(CHAT), "--provider", "openai-chat", "--tools", str(tools), "--log", url]
    status, _, err = run(capsys, [*argv, "--traceparent", "not-a-traceparent"])
    assert status == 0
    assert "traceparent refused" in err


def test_a_stream_the_adapter_refuses_part_way_feeds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded stream whose event after the completion's end is refused (bytes that are not
    UTF-8, with no response open to end) is one error naming the refusal; nothing is fed, and
    the log is not even created."""
    stream = tmp_path / "refused.sse"
    stream.write_bytes(CHAT.read_bytes() + b"data: \xff\n\n")
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    tools = str(tools_file(tmp_path, CHAT_TOOLS))
    argv = ["feed", str(stream), "--provider", "openai-chat", "--log", url, "--tools", tools]
    status, _, err = run(capsys, argv)
    assert status == 1
    assert "past its first events" in err
    assert "not UTF-8" in err
    assert "nothing was fed" in err
    assert not (tmp_path / "feed.db").exists()
