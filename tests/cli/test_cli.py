"""The ``inert`` command: demo, ledger, replay, execute and cancel-turn, run in-process."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio
from builders import digest_in_log

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    __version__,
    open_log,
    open_runtime,
)
from inert.cli import main
from inert.events import CallCancelled, CancelReason
from inert.log import NewEvent

LEDGER_FIELDS = [
    "tenant",
    "conversation",
    "turn",
    "response",
    "item",
    "call",
    "tool",
    "state",
    "fragments",
    "bytes",
    "terminal_event",
    "terminal_reason",
    "parse",
    "validation",
    "dispatch",
    "outcome",
]
KEY_FIELDS = LEDGER_FIELDS[:6]

DEMO_VALUES = [
    "Reykjavik",
    "Ouagadougou",
    "Valparaiso",
    "Antananarivo",
    "bob@example.com",
    "Quarterly",
    "Revenue",
    "/home/alice",
    "dave@example.com",
    "Invoice",
]
"""Argument values the demo streams: none may be printed."""

KEY = CallKey(
    tenant="acme", conversation="c1", turn="t1", response="resp_1", item="fc_1", call="call_1"
)
ARGUMENTS = b'{"city": "Valparaiso", "units": "metric"}'
CANONICAL = b'{"city":"Valparaiso","units":"metric"}'
WEATHER = ToolDeclaration(name="get_weather")


def sqlite_url(tmp_path: Path, name: str = "inert.db") -> str:
    return f"sqlite:///{tmp_path / name}"


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """Run the command in-process; its status, stdout and stderr."""
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A log the demo ran on (read only by the tests that use it) and what the demo printed."""
    url = sqlite_url(tmp_path_factory.mktemp("demo"), "demo.db")
    # A module's fixture cannot use capsys: the demo's output is caught by hand, once.
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["demo", "--log", url])
    assert status == 0, err.getvalue()
    return url, out.getvalue()


async def one_ready_call(url: str, *, unknown_turn: bool = False) -> None:
    """A log with one validated call of get_weather; optionally a call of a turn never started."""
    async with open_runtime(log=url, create=True, tools=[WEATHER]) as runtime:
        await runtime.start_turn(
            tenant="acme", conversation="c1", turn="t1", principal="user:alice"
        )
        await runtime.feed(
            [
                CallOpened(key=KEY, tool="get_weather", sequence=0),
                ArgumentsAppended(key=KEY, data=ARGUMENTS[:12], first_sequence=1, last_sequence=1),
                ArgumentsAppended(key=KEY, data=ARGUMENTS[12:], first_sequence=2, last_sequence=2),
                CallEnded(key=KEY, terminal=TerminalRef(sequence=3)),
                ResponseEnded(
                    response=KEY.response_ref,
                    reason=ResponseEndReason.COMPLETED,
                    terminal=TerminalRef(sequence=4),
                ),
            ]
        )
        if unknown_turn:
            stray = CallKey(
                tenant="acme", conversation="c9", turn="t0", response="r9", item="i", call="c"
            )
            await runtime.feed([CallOpened(key=stray, tool="get_weather", sequence=0)])
        await runtime.settle()
        assert runtime.projections.queue.ready() == [KEY]


def empty_log(url: str) -> None:
    """Create the log: the commands that read refuse a file that does not exist."""

    async def create() -> None:
        async with open_log(url):
            pass

    trio.run(create)


def ledger_rows(capsys: pytest.CaptureFixture[str], url: str) -> list[dict[str, object]]:
    status, output, error = run(capsys, ["ledger", "--log", url, "--json"])
    assert status == 0, error
    return [json.loads(line) for line in output.splitlines()]


# --- demo ------------------------------------------------------------------------------------


def digest_line(output: str) -> str:
    """The state digest a demo printed."""
    return next(line for line in output.splitlines() if line.startswith("digest sha256:"))


def test_demo_narrates_each_step_and_ends_with_the_ledger_and_digest(
    demo: tuple[str, str],
) -> None:
    """The demo prints a line per step, the executed calls, a ledger table and the digest, each
    explained, then (on a log it keeps) what to run on it, the console first."""
    _, output = demo
    lines = output.splitlines()
    kept = next(i for i, line in enumerate(lines) if line.startswith("the demo's log stays at"))
    assert lines[kept + 1].strip().startswith("inert console --log ")
    lines = lines[:kept]
    steps = (
        "turn t1:",
        "turn t2:",
        "turn t3:",
        "turn t4:",
        "restart:",
        "turn t5:",
        "turn t6:",
        "turn t7:",
        "turn t8:",
    )
    for step in steps:
        assert any(line.startswith(step) for line in lines), step
    # A step's sentence may be wrapped over lines.
    prose = " ".join(output.split())
    assert "interleaved" in prose
    assert "bug" not in prose
    assert "duplicate_key" in prose
    assert "wrong_principal" in prose
    assert "connection_lost" in prose
    assert "turn_cancelled" in prose
    assert "confirmation_expired" in prose
    assert "asked to stop and stops" in prose
    assert "  c7/t7/resp_7/fc_1/call_1  get_weather   dispatched" in output
    assert "a claim of fc_2 is refused: fc_2 is cancelled (duplicate_of)" in prose
    assert "rejected (duplicate)" in prose
    assert "refused (call_terminal)" in prose
    assert sum(line.lstrip().startswith("executed ") for line in lines) == 3
    header = next(line for line in lines if line.lstrip().startswith("call "))
    assert header.split() == ["call", "tool", "state", "bytes", "reason", "outcome"]
    assert "  c1/t1/resp_1/fc_1/call_1  get_weather   dispatched" in output
    assert "reason: why a call ended without running" in prose
    digest = next(line for line in lines if line.startswith("digest "))
    assert re.fullmatch(r"digest sha256:[0-9a-f]{64}", digest)
    assert "the state digest: one hash of every call's state" in prose
    assert max(len(line) for line in lines) <= 100


def test_demo_shows_every_column_of_the_ledger_with_wide(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--wide`` shows the ledger's every column, as ``inert ledger`` does, with the words of
    the wide table (``terminal event``, a ``dispatch`` of ``reject``) explained under it."""
    assert main(["demo", "--log", "memory://", "--wide"]) == 0
    output = capsys.readouterr().out
    header = next(line for line in output.splitlines() if line.lstrip().startswith("call "))
    assert len(header) > 100
    assert "terminal event" in header
    assert "dispatch" in header
    prose = " ".join(output.split())
    assert "or reject: it will never be dispatched" in prose
    assert "terminal event: the provider's event that ended the call's arguments" in prose


def test_demo_prints_no_argument_value(demo: tuple[str, str]) -> None:
    """Nothing the demo prints holds a value of the arguments it streamed: only sizes, digests."""
    _, output = demo
    for value in DEMO_VALUES:
        assert value not in output


def test_demo_refuses_a_log_that_is_not_empty(
    demo: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo will not write its turns into a log that holds events already."""
    url, _ = demo
    status, output, error = run(capsys, ["demo", "--log", url])
    assert status == 1
    assert output == ""
    assert error.startswith("inert: the demo needs an empty log")


def test_demo_runs_on_a_fresh_memory_log(capsys: pytest.CaptureFixture[str]) -> None:
    """memory:// works for the demo: its restart reopens the same in-process log."""
    assert main(["demo", "--log", "memory://"]) == 0
    output = capsys.readouterr().out
    assert "rebuilt 5 calls" in output
    assert digest_line(output)


def test_demo_runs_as_a_console_script_on_a_temporary_log() -> None:
    """The console entry point runs the demo on a temporary SQLite log and exits with 0."""
    done = subprocess.run(
        [sys.executable, "-c", "from inert.cli import main_entry; main_entry()", "demo"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "sqlite:///" in done.stdout.splitlines()[0]
    assert digest_line(done.stdout)
    assert done.stdout.splitlines()[-1].startswith("its log was temporary, and is gone")


# --- ledger ----------------------------------------------------------------------------------


def test_ledger_json_has_exactly_the_ledger_columns_and_the_demo_states(
    demo: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``ledger --json`` prints one object per call, with the ledger's columns and no more."""
    url, _ = demo
    rows = ledger_rows(capsys, url)
    for row in rows:
        assert list(row) == LEDGER_FIELDS
    found = {
        (row["conversation"], row["item"]): (row["state"], row["terminal_reason"], row["outcome"])
        for row in rows
    }
    assert found == {
        ("c1", "fc_1"): ("dispatched", None, "completed"),
        ("c1", "fc_2"): ("dispatched", None, "completed"),
        ("c2", "fc_1"): ("failed", "malformed_arguments", None),
        ("c3", "fc_1"): ("dispatched", None, "completed"),
        ("c4", "fc_1"): ("cancelled", "connection_lost", None),
        ("c5", "fc_1"): ("cancelled", "turn_cancelled", None),
        ("c6", "fc_1"): ("cancelled", "confirmation_expired", None),
        ("c7", "fc_1"): ("dispatched", None, "stopped"),
        ("c8", "fc_1"): ("dispatched", None, "completed"),
        ("c8", "fc_2"): ("cancelled", "duplicate_of", None),
    }
    failed = next(row for row in rows if row["conversation"] == "c2")
    assert failed["parse"] == "duplicate_key"
    email = next(row for row in rows if row["conversation"] == "c3")
    assert email["validation"] == "ok, needs confirmation"


def test_ledger_table_has_a_header_and_one_aligned_line_per_call(
    demo: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --json the ledger is a table: a legend, a header, a line per call, aligned."""
    url, _ = demo
    status, output, _ = run(capsys, ["ledger", "--log", url])
    assert status == 0
    lines = output.splitlines()
    assert lines[0] == "tenant acme; calls shown as conversation/turn/response/item/call"
    assert lines[1].split()[:3] == ["call", "tool", "state"]
    assert len(lines) == 2 + 10
    column = lines[1].index("state")
    assert all(
        line[column:].split()[0] in {"dispatched", "failed", "cancelled"} for line in lines[2:]
    )
    for value in DEMO_VALUES:
        assert value not in output


def test_ledger_history_lists_each_calls_transitions(
    demo: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--history adds each key's transitions, each with the log's time of its record (ISO
    8601 UTC): indented in the table, a list in JSON."""
    url, _ = demo
    status, output, _ = run(capsys, ["ledger", "--log", url, "--history"])
    assert status == 0
    indented = [line.split() for line in output.splitlines() if line.startswith("      ")]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", words[1]) for words in indented)
    assert any(words[2] == "decision.collecting" for words in indented)
    assert any(words[2:4] == ["decision.rejected", "validated"] for words in indented)
    assert any(words[2] == "outcome.completed" for words in indented)

    status, output, _ = run(capsys, ["ledger", "--log", url, "--json", "--history"])
    assert status == 0
    entries = [json.loads(line) for line in output.splitlines()]
    assert all(list(entry) == [*LEDGER_FIELDS, "history"] for entry in entries)
    first = entries[0]
    kinds = [step["event_type"] for step in first["history"]]
    assert kinds == [
        "decision.collecting",
        "decision.terminal_candidate",
        "decision.validated",
        "decision.ready",
        "decision.rejected",
        "decision.dispatched",
        "outcome.completed",
        "decision.rejected",
    ]
    assert first["history"][3]["detail"].startswith("ready until ")
    assert all(step["recorded_at"].endswith("Z") for step in first["history"])
    assert "duplicate" in first["history"][4]["detail"]
    assert "call_terminal" in first["history"][7]["detail"]
    repeated = next(entry for entry in entries if entry["item"] == "fc_2" and entry["turn"] == "t8")
    assert repeated["history"][-2]["detail"] == "duplicate_of call/acme/c8/t8/resp_8/fc_1/call_1"


def test_ledger_history_includes_keys_that_only_have_rejections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key whose every event was rejected has no row, but --history lists it."""
    url = sqlite_url(tmp_path)
    trio.run(partial(one_ready_call, url, unknown_turn=True))
    assert [row["turn"] for row in ledger_rows(capsys, url)] == ["t1"]

    status, output, _ = run(capsys, ["ledger", "--log", url, "--json", "--history"])
    assert status == 0
    entries = [json.loads(line) for line in output.splitlines()]
    stray = entries[-1]
    assert (stray["conversation"], stray["turn"], stray["state"]) == ("c9", "t0", None)
    assert "unknown_turn" in stray["history"][0]["detail"]

    status, output, _ = run(capsys, ["ledger", "--log", url, "--history"])
    assert status == 0
    assert "c9/t0/r9/i/c" in output
    assert "(no call: only rejected events)" in output


def test_ledger_of_an_empty_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty log has no calls: the table says so and --json prints nothing."""
    url = sqlite_url(tmp_path)
    empty_log(url)
    assert main(["ledger", "--log", url]) == 0
    assert capsys.readouterr().out == "(no calls)\n"
    assert main(["ledger", "--log", url, "--json"]) == 0
    assert capsys.readouterr().out == ""


# --- replay ----------------------------------------------------------------------------------


def test_replay_gives_the_digest_the_demo_ended_with(
    demo: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Rebuilding everything from the log gives the state digest the live runtime printed."""
    url, output = demo
    live = digest_line(output)
    status, replayed, error = run(capsys, ["replay", "--log", url])
    assert status == 0, error
    lines = replayed.splitlines()
    assert lines[-1] == live
    assert "calls       10" in lines
    assert "ready       0" in lines
    # The late fragments and end event of turn t5 are counted, not stored; turn t6's late claim
    # and turn t7's claim of the repeated email are rejected.
    assert "rejections  5" in lines


def test_replay_json(demo: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """``replay --json`` prints one object: counts per state, ready, rejections and digest."""
    url, output = demo
    status, replayed, _ = run(capsys, ["replay", "--log", url, "--json"])
    assert status == 0
    summary = json.loads(replayed)
    assert summary["calls"] == 10
    assert summary["states"] == {"dispatched": 5, "cancelled": 4, "failed": 1}
    assert summary["ready"] == 0
    assert summary["rejections"] == 5
    assert summary["events"] > 0
    assert "digest " + summary["digest"] == digest_line(output)


def test_replay_reports_a_decision_the_decider_would_not_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A decision in the log that replay does not make again is a divergence: exit 1, stderr."""
    url = sqlite_url(tmp_path)
    trio.run(one_ready_call, url)

    async def forge() -> None:
        async with open_log(url) as log:
            forged = CallCancelled(key=KEY, cause=1, reason=CancelReason.TURN_CANCELLED)
            await log.append([NewEvent(stream=KEY.stream, event=forged)])

    trio.run(forge)
    status, output, error = run(capsys, ["replay", "--log", url])
    assert status == 1
    assert output == ""
    assert error.startswith("inert: replay diverged at position")
    assert "Traceback" not in error


# --- execute ---------------------------------------------------------------------------------


def test_execute_claims_a_ready_call_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """execute runs a ready call once and prints its argument digest, never its arguments."""
    url = sqlite_url(tmp_path)
    trio.run(one_ready_call, url)
    digest = trio.run(digest_in_log, url, CANONICAL)

    status, output, error = run(capsys, ["execute", "--log", url])
    assert status == 0, error
    lines = output.splitlines()
    assert "ran once" in lines[0]
    assert lines[1].split() == [
        "executed",
        "t1/resp_1/fc_1/call_1",
        "get_weather",
        "arguments",
        digest,
    ]
    assert "Valparaiso" not in output

    status, output, _ = run(capsys, ["execute", "--log", url])
    assert status == 0
    assert output == "nothing to execute: no call is ready\n"
    [row] = ledger_rows(capsys, url)
    assert (row["state"], row["outcome"]) == ("dispatched", "completed")


def test_execute_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``execute --json`` prints per call its key, tool, argument digest and claim id."""
    url = sqlite_url(tmp_path)
    trio.run(one_ready_call, url)
    status, output, _ = run(capsys, ["execute", "--log", url, "--json"])
    assert status == 0
    [line] = output.splitlines()
    entry = json.loads(line)
    assert list(entry) == [*KEY_FIELDS, "tool", "arguments_digest", "claim_id"]
    assert entry["call"] == "call_1"
    assert entry["arguments_digest"] == trio.run(digest_in_log, url, CANONICAL)
    assert "Valparaiso" not in output
    status, output, _ = run(capsys, ["execute", "--log", url, "--json"])
    assert (status, output) == (0, "")


# --- cancel-turn -----------------------------------------------------------------------------


def test_cancel_turn_is_refused_to_another_principal_and_done_for_the_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the turn's principal cancels it; then its ready call is cancelled and never runs."""
    url = sqlite_url(tmp_path)
    trio.run(one_ready_call, url)
    turn = ["--tenant", "acme", "--conversation", "c1", "--turn", "t1"]

    status, output, error = run(
        capsys, ["cancel-turn", "--log", url, *turn, "--principal", "user:bob"]
    )
    assert status == 1
    assert output == ""
    assert error == "inert: turn 'turn/acme/c1/t1' belongs to another principal\n"
    assert ledger_rows(capsys, url)[0]["state"] == "validated"

    status, output, error = run(
        capsys,
        ["cancel-turn", "--log", url, *turn, "--principal", "user:alice", "--reason", "oops"],
    )
    assert status == 0, error
    assert output.startswith("turn acme/c1/t1 cancelled for user:alice: 1 call of its 1 cancelled")
    [row] = ledger_rows(capsys, url)
    assert (row["state"], row["terminal_reason"]) == ("cancelled", "turn_cancelled")
    assert run(capsys, ["execute", "--log", url])[1] == "nothing to execute: no call is ready\n"


def test_cancel_turn_of_an_unknown_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Cancelling a turn the log does not know exits with 1 and names the turn."""
    url = sqlite_url(tmp_path)
    empty_log(url)
    turn = ["--tenant", "acme", "--conversation", "c1", "--turn", "t9"]
    status, _, error = run(capsys, ["cancel-turn", "--log", url, *turn, "--principal", "user:a"])
    assert status == 1
    assert error == (
        "inert: turn 'turn/acme/c1/t9' is not on this log: check --tenant, --conversation and"
        " --turn (inert ledger --tenant acme lists the calls of its turns)\n"
    )


# --- errors and version ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["demo"],
        ["ledger"],
        ["replay"],
        ["execute"],
        ["cancel-turn", "--tenant", "a", "--conversation", "c", "--turn", "t", "--principal", "p"],
    ],
)
def test_a_bad_log_url_is_reported_without_a_traceback(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An invalid --log URL prints one line naming the problem and exits with status 1."""
    assert main([*command, "--log", "nowhere://x"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("inert: unknown log URL")
    assert "Traceback" not in captured.err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the installed version."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"inert {__version__}"


def _calls(output: str) -> list[str]:
    """The keys a ledger table shows, one per line after its legend and header."""
    return [line.split()[0] for line in output.splitlines()[2:]]


def test_ledger_searches_by_any_id_stage_and_time(
    demo: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--id keeps the calls it names whichever identity it is; --stage takes the words the
    console shows; --since and --until keep the calls seen in the range (ISO 8601, UTC where
    no offset is given)."""
    url, _ = demo
    for option, calls in [
        (["--id", "c2"], ["c2/t2/resp_2/fc_1/call_1"]),
        (["--id", "resp_3"], ["c3/t3/resp_3/fc_1/call_1"]),
        (["--id", "fc_2"], ["c1/t1/resp_1/fc_2/call_2", "c8/t8/resp_8/fc_2/call_2"]),
        (["--stage", "cancelled", "--id", "t4"], ["c4/t4/resp_4/fc_1/call_1"]),
    ]:
        status, output, _ = run(capsys, ["ledger", "--log", url, *option])
        assert status == 0
        shown = _calls(output)
        assert len(shown) == len(calls), option
        assert all(whole.endswith(part) for whole, part in zip(calls, shown, strict=True))
    _, every, _ = run(capsys, ["ledger", "--log", url])
    _, completed, _ = run(capsys, ["ledger", "--log", url, "--stage", "completed"])
    assert 0 < len(_calls(completed)) < len(_calls(every))
    assert all(" completed " in line for line in completed.splitlines()[2:])
    for option, count in [
        (["--since", "2000-01-01"], len(_calls(every))),
        (["--since", "2999-01-01T00:00:00Z"], 0),
        (["--until", "2000-01-01T00:00:00+02:00"], 0),
    ]:
        status, output, _ = run(capsys, ["ledger", "--log", url, *option])
        assert status == 0
        assert (len(_calls(output)) if count else output) == (count or "(no calls)\n"), option


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--stage", "queued"], "no stage is called 'queued'; the stages are: assembling, waiting"),
        (["--state", "waiting"], "invalid choice: 'waiting'"),
        (["--since", "yesterday"], "'yesterday' is no time: give ISO 8601"),
    ],
)
def test_ledger_answers_a_filter_that_names_nothing(
    demo: tuple[str, str], capsys: pytest.CaptureFixture[str], option: list[str], said: str
) -> None:
    """An unknown stage, state or time is a usage error that lists the valid ones: never
    ignored, which would print every call."""
    url, _ = demo
    with pytest.raises(SystemExit) as exited:
        main(["ledger", "--log", url, *option])
    assert exited.value.code == 2
    output, err = capsys.readouterr()
    assert output == ""
    assert said in err
