"""The command helps its user: a default log from ``INERT_LOG``, a demo that keeps its log and
says what to run on it, every default visible in ``--help``, JSON from every command, a ledger
that filters, shortens and follows, progress on a terminal, and a sample of tool declarations
that feeds a captured stream."""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
from functools import partial
from pathlib import Path

import pytest
import trio
from builders import call_key
from locations import ROOT, TESTS
from rich.console import Console

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallOpened,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
)
from inert.cli import _common, _read, main
from inert.cli._common import LOG_VARIABLE, Progress
from inert.cli._main import _parser
from inert.cli._read import ledger_command
from inert.cli._tables import paint_state

ANTHROPIC = TESTS / "fixtures" / "provider-streams" / "anthropic" / "text-then-tool-use.sse"


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def a_terminal() -> tuple[Console, io.StringIO]:
    """A console Rich takes for a terminal, and what is drawn on it (without colours)."""
    drawn = io.StringIO()
    return Console(file=drawn, force_terminal=True, width=120, color_system=None), drawn


ERASED = "\x1b[2K"
"""What ends a transient progress bar: the line it was on, erased."""


def stderr_a_terminal(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """Standard error as the commands see it made a terminal (the captured one is not); what
    is drawn on it."""
    console, drawn = a_terminal()
    monkeypatch.setattr(_common, "_stderr_console", lambda: console)
    return drawn


@pytest.fixture
def demo_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The URL of a log the demo wrote (what it printed read and dropped)."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert run(capsys, ["demo", "--log", url])[0] == 0
    return url


def test_the_demo_keeps_its_log_and_says_what_to_run_on_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inert demo --log URL`` ends with the commands that inspect its log, the console first,
    and they work, with the log named once in ``INERT_LOG``."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    status, out, err = run(capsys, ["demo", "--log", url])
    assert status == 0, err
    steps = [line.split("#")[0].strip() for line in out.splitlines() if line.startswith("  inert ")]
    assert steps == [
        f"inert console --log {url}",
        f"inert ledger --log {url} --history",
        f"inert replay --log {url}",
        f"inert verify --log {url}",
        f"inert audit --log {url}",
    ]
    monkeypatch.setenv(LOG_VARIABLE, url)
    status, out, err = run(capsys, ["replay"])
    assert status == 0, err
    assert "every decision found in the log was made again" in out
    status, out, err = run(capsys, ["verify", "--json"])
    assert status == 0, err
    assert json.loads(out)["problems"] == []


def test_without_inert_log_a_command_asks_for_its_log(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``INERT_LOG`` unset, a command given no ``--log`` is a usage error naming it."""
    monkeypatch.delenv(LOG_VARIABLE, raising=False)
    with pytest.raises(SystemExit) as exited:
        main(["ledger"])
    assert exited.value.code == 2
    assert "--log" in capsys.readouterr().err


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [commands] = [
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    ]
    return dict(commands.choices)


def test_every_default_is_shown_in_the_help(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each option of each command that has a default says it in ``--help``."""
    monkeypatch.delenv(LOG_VARIABLE, raising=False)
    for name, sub in _subparsers(_parser()).items():
        text = " ".join(sub.format_help().split())
        for action in sub._actions:
            default = action.default
            if not action.option_strings or default in (None, False, argparse.SUPPRESS):
                continue
            assert action.help, f"{name} {action.option_strings[0]} has no help"
            shown = str(default) if "default" not in action.help else ""
            assert "default" in text, name
            assert shown in text, f"{name} {action.option_strings[0]}: {default!r} not shown"


def test_the_sample_tool_declarations_feed_a_captured_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``examples/tools/TOOLS.json`` declares the tool of a captured Anthropic stream: fed with
    it, the call is validated and runs once."""
    tools = ROOT / "examples" / "tools" / "TOOLS.json"
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    argv = ["feed", str(ANTHROPIC), "--provider", "anthropic", "--tools", str(tools)]
    status, out, err = run(capsys, [*argv, "--log", url, "--execute", "--json"])
    assert status == 0, err
    [row] = [json.loads(line) for line in out.splitlines()]
    assert (row["tool"], row["state"], row["outcome"]) == ("get_weather", "dispatched", "completed")


def test_a_stream_fed_as_another_provider_names_the_one_it_reads_as(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Anthropic stream fed with ``--provider openai-chat`` feeds nothing, exits 1, creates
    no log and says which ``--provider`` reads it."""
    tools = ROOT / "examples" / "tools" / "TOOLS.json"
    log = tmp_path / "feed.db"
    argv = ["feed", str(ANTHROPIC), "--provider", "openai-chat", "--tools", str(tools)]
    status, _, err = run(capsys, [*argv, "--log", f"sqlite:///{log}"])
    assert status == 1
    assert "nothing was fed (it reads as --provider anthropic)" in err
    assert not log.exists()


RESPONSES = TESTS / "fixtures" / "provider-streams" / "openai-responses"


def test_the_ledger_shows_only_the_calls_asked_for(
    demo_log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--state``, ``--turn``, ``--tool`` and ``--tenant`` keep only the calls they name, in
    the table and in JSON alike."""
    url = demo_log

    def rows(*options: str) -> list[dict[str, object]]:
        status, out, err = run(capsys, ["ledger", "--log", url, "--json", *options])
        assert status == 0, err
        return [json.loads(line) for line in out.splitlines()]

    assert {row["state"] for row in rows("--state", "dispatched")} == {"dispatched"}
    assert len(rows("--state", "dispatched")) == 5
    assert [row["terminal_reason"] for row in rows("--turn", "t4")] == ["connection_lost"]
    assert {row["tool"] for row in rows("--tool", "send_email")} == {"send_email"}
    assert rows("--tenant", "someone-else") == []
    status, out, _ = run(capsys, ["ledger", "--log", url, "--tenant", "someone-else"])
    assert (status, out) == (0, "(no calls)\n")


def test_a_narrow_ledger_cuts_long_ids_and_wide_shows_them_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Provider ids past 12 characters are cut to a prefix that tells them apart, and the
    legend says so; ``--wide`` and ``--json`` show them whole."""
    url = f"sqlite:///{tmp_path / 'feed.db'}"
    stream = RESPONSES / "two-function-calls-gpt-4o.sse"
    tools = ROOT / "examples" / "tools" / "TOOLS.json"
    argv = ["feed", str(stream), "--provider", "openai-responses", "--tools", str(tools)]
    assert run(capsys, [*argv, "--log", url])[0] == 0
    _, narrow, _ = run(capsys, ["ledger", "--log", url])
    _, wide, _ = run(capsys, ["ledger", "--log", url, "--wide"])
    _, as_json, _ = run(capsys, ["ledger", "--log", url, "--json"])
    calls = [json.loads(line)["call"] for line in as_json.splitlines()]
    assert len(calls) == 2
    assert all(len(call) > 12 for call in calls)
    assert "--wide shows them whole" in narrow.splitlines()[0]
    shown = [line.split()[0] for line in narrow.splitlines()[2:]]
    assert len(set(shown)) == 2
    assert all("…" in cell and len(cell) < 60 for cell in shown)
    assert all(call in wide for call in calls)
    assert all(call not in narrow for call in calls)


def test_every_command_speaks_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command but the demo (a narration) and the console (a server) takes ``--json``."""
    monkeypatch.delenv(LOG_VARIABLE, raising=False)
    for name, sub in _subparsers(_parser()).items():
        options = {option for action in sub._actions for option in action.option_strings}
        assert ("--json" in options) == (name not in ("demo", "console")), name


def test_the_commands_of_people_answer_in_json(
    demo_log: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cancel-turn``, ``control`` and ``deny`` with ``--json`` print one object each: what
    they did, keys whole."""
    url = demo_log
    monkeypatch.setenv("INERT_OPERATORS", "ops")
    control_argv = ["control", "stop-tenant", "acme", "--operator", "ops", "--reason", "drill"]
    status, out, err = run(capsys, [*control_argv, "--log", url, "--json"])
    assert status == 0, err
    control = json.loads(out)
    assert (control["action"], control["target"], control["ended"]) == ("stop-tenant", "acme", [])
    turn = ["--tenant", "acme", "--conversation", "c1", "--turn", "t1"]
    status, out, err = run(
        capsys, ["cancel-turn", *turn, "--principal", "user:alice", "--log", url, "--json"]
    )
    assert status == 0, err
    cancelled = json.loads(out)
    assert (cancelled["calls"], cancelled["ended_before"], cancelled["cancelled"]) == (2, 2, [])


@pytest.mark.parametrize("command", ["replay", "verify", "ledger"])
def test_a_long_read_shows_how_far_it_is_on_a_terminal(
    command: str,
    demo_log: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal, reading a log draws a bar of how many of its events are read, and takes
    it off at the end; elsewhere it says nothing."""
    url = demo_log
    status, _, err = run(capsys, [command, "--log", url])
    assert (status, err) == (0, "")
    drawn = stderr_a_terminal(monkeypatch)
    status, out, err = run(capsys, [command, "--log", url])
    assert (status, err) == (0, "")
    assert re.search(rf"{command} ━+ 122 of 122 100%", drawn.getvalue())
    assert drawn.getvalue().endswith(ERASED)
    assert "\x1b" not in out


def test_the_simulator_shows_its_seeds_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``inert simulate`` on a terminal draws a bar of the seeds done."""
    terminal = stderr_a_terminal(monkeypatch)
    status, _, err = run(capsys, ["simulate", "--seeds", "1", "--keys", "4"])
    assert status == 0, err
    assert re.search(r"simulate: seeds ━+ 1 of 1 100%", terminal.getvalue())
    assert terminal.getvalue().endswith(ERASED)


def test_progress_shows_nothing_where_standard_error_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``Progress`` draws nothing on standard error that is not a terminal, nor on a console
    that is not one."""
    progress = Progress("verify", 10)
    progress.advance(5)
    progress.finish()
    assert not progress.shown
    assert capsys.readouterr().err == ""
    drawn = io.StringIO()
    progress = Progress("verify", 10, console=Console(file=drawn))
    progress.advance(5)
    progress.finish()
    assert not progress.shown
    assert drawn.getvalue() == ""


def test_progress_on_a_terminal_draws_a_bar_and_takes_it_off() -> None:
    """On a terminal, ``Progress`` with a total draws its description, a bar, the count done of
    the total and the share, and erases them when finished."""
    console, drawn = a_terminal()
    progress = Progress("verify", 2000, console=console)
    assert progress.shown
    progress.advance(500)
    progress.finish()
    assert re.search(r"verify ━+ +500 of 2000 +25%", drawn.getvalue())
    assert drawn.getvalue().endswith(ERASED)


def test_progress_without_a_total_counts_by_a_spinner() -> None:
    """On a terminal, ``Progress`` without a total draws a spinner, its description and the
    count done, and erases them when finished."""
    console, drawn = a_terminal()
    progress = Progress("feed", console=console)
    progress.advance(1234)
    progress.finish()
    assert re.search(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] feed 1,234", drawn.getvalue())
    assert drawn.getvalue().endswith(ERASED)


async def test_following_the_ledger_prints_each_row_as_it_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ledger --follow`` prints the ledger, then each row again as the events of another
    process change it, until it is stopped."""
    url = f"sqlite:///{tmp_path / 'follow.db'}"
    tools = [ToolDeclaration(name="get_weather", parameters={"type": "object"}, strict=False)]
    async with open_runtime(log=url, create=True, tools=tools) as runtime:
        turn = await runtime.start_turn(
            tenant="acme", conversation="c1", turn="t1", principal="user:alice"
        )
        key = call_key(turn=turn.turn)
        await runtime.feed(
            [
                CallOpened(key=key, tool="get_weather", sequence=0),
                ArgumentsAppended(key=key, data=b"{}", offset=0, first_sequence=1, last_sequence=1),
            ]
        )
        await runtime.settle()
        states: list[object] = []

        async def read_until(state: str) -> None:
            with trio.fail_after(10):
                while state not in states:
                    await trio.sleep(0.05)
                    out = capsys.readouterr().out
                    states.extend(json.loads(line)["state"] for line in out.splitlines())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                partial(ledger_command, url, as_json=True, history=False, follow=True)
            )
            # The ledger as it stands first, then what changes.
            await read_until("collecting")
            await runtime.feed(
                [
                    CallEnded(key=key, terminal=TerminalRef(sequence=2)),
                    ResponseEnded(
                        response=key.response_ref,
                        reason=ResponseEndReason.COMPLETED,
                        terminal=TerminalRef(sequence=3),
                    ),
                ]
            )
            await read_until("validated")
            nursery.cancel_scope.cancel()
    assert states == ["collecting", "terminal_candidate", "validated"]


def test_the_ledger_table_shows_when_each_call_last_changed(
    demo_log: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The table's last column is the log's time (ISO 8601 in UTC, to the second) of each
    call's last event; the JSON rows keep the ledger's columns alone."""
    url = demo_log
    _, table, _ = run(capsys, ["ledger", "--log", url])
    lines = table.splitlines()
    assert lines[1].endswith("changed")
    assert all(re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", line) for line in lines[2:])
    _, as_json, _ = run(capsys, ["ledger", "--log", url, "--json"])
    assert all("changed" not in json.loads(line) for line in as_json.splitlines())


def test_the_ledger_shows_states_in_colour_on_a_terminal_only(
    demo_log: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal the states have their colours (dispatched green, failed red, cancelled
    yellow); with ``NO_COLOR`` set, or to a pipe, the table is plain text."""
    url = demo_log
    _, plain, _ = run(capsys, ["ledger", "--log", url])
    assert "\x1b[" not in plain
    monkeypatch.setattr(_read, "in_colour", lambda: True)
    _, coloured, _ = run(capsys, ["ledger", "--log", url])
    assert "\x1b[32mdispatched" in coloured
    assert "\x1b[31mfailed" in coloured
    assert "\x1b[33mcancelled" in coloured
    assert re.sub(r"\x1b\[\d*m", "", coloured) == plain
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert _common.in_colour()
    monkeypatch.setenv("NO_COLOR", "1")
    assert not _common.in_colour()


@pytest.mark.parametrize(
    ("state", "colour"),
    [
        ("dispatched", 32),
        ("validated", 36),
        ("terminal_candidate", 36),
        ("cancelled", 33),
        ("failed", 31),
    ],
)
def test_each_state_has_its_terminal_colour(state: str, colour: int) -> None:
    """The state column paints each state in its own standard colour of the terminal, padding
    included; other states and other columns stay plain."""
    padded = state.ljust(20)
    assert paint_state(2, state, padded) == f"\x1b[{colour}m{padded}\x1b[0m"
    assert paint_state(1, state, padded) == padded
    assert paint_state(2, "collecting", "collecting  ") == "collecting  "


def test_a_feed_shows_how_far_it_is_on_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal, ``inert feed`` draws a bar of the events it fed."""
    terminal = stderr_a_terminal(monkeypatch)
    tools = ROOT / "examples" / "tools" / "TOOLS.json"
    argv = ["feed", str(ANTHROPIC), "--provider", "anthropic", "--tools", str(tools)]
    status, _, err = run(capsys, [*argv, "--log", f"sqlite:///{tmp_path / 'feed.db'}"])
    assert status == 0, err
    assert re.search(r"feed ━+ (\d+) of \1 100%", terminal.getvalue())
    assert terminal.getvalue().endswith(ERASED)
