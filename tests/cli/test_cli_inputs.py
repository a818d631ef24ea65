"""Hostile input to every ``inert`` command: each case exits non-zero (2 for a usage error) with
a short error that names what is wrong, never a traceback, never a hang, never a file left
behind where a command only reads.

The cases run in-process through ``inert.cli.main``; a few run the command in a child process,
where what reaches the terminal is what a person sees. Every command that takes ``--log`` gets
every bad log URL and every bad log file; every text option of every command gets every bad
text; the files ``feed`` reads get their own corpus.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
from locations import TESTS

import inert.cli._common
import inert.cli._main
from inert import Runtime, open_log
from inert.cli import main
from inert.cli._arguments import text_argument
from inert.cli._main import _parser
from inert.events import ProcessHeartbeat, process_stream
from inert.log import NewEvent
from inert.testing._faults import Tear, tear_sqlite_tail

FIXTURES = TESTS / "fixtures" / "provider-streams"
CHAT = FIXTURES / "openai-chat" / "parallel-tool-calls-gpt-4o.sse"
CHAT_TOOLS = [
    {"type": "function", "function": {"name": name}, "x-inert": {"strict": False}}
    for name in ("get_country", "get_product_name", "final_result")
]
PROVIDERS = ["anthropic", "bedrock", "gemini", "openai-chat", "openai-responses"]
MAX_ERROR = 420
"""The longest error line a case may print (``inert: `` and the message)."""

TURN = {"--tenant": "acme", "--conversation": "c3", "--turn": "t3"}
CALL = {**TURN, "--call-id": "call_1", "--principal": "user:alice"}


@pytest.fixture(autouse=True)
def operators(monkeypatch: pytest.MonkeyPatch) -> None:
    """``control`` gets as far as the log: an operator is configured."""
    monkeypatch.setenv("INERT_OPERATORS", "olga")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with a demo log (never written by the tests), a stream and its tools."""
    folder = tmp_path_factory.mktemp("inputs")
    url = f"sqlite:///{folder / 'demo.db'}"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main(["demo", "--log", url]) == 0
    shutil.copy(CHAT, folder / "chat.sse")
    (folder / "tools.json").write_text(json.dumps(CHAT_TOOLS))
    return folder


def base_values(command: str, inputs: Path) -> dict[str, str]:
    """Options (and positionals, in capitals) that make a valid command line but for --log."""
    stream = {"FILE": str(inputs / "chat.sse"), "--provider": "openai-chat"}
    return {
        "ledger": {},
        "replay": {},
        "verify": {},
        "repartition": {"--to": "memory://", "--partitions": "2"},
        "audit": {},
        "controls": {},
        "execute": {},
        "demo": {},
        "cancel-turn": {**TURN, "--principal": "user:alice", "--reason": "changed my mind"},
        "confirm": {**CALL, "--response": "resp_3", "--arguments-digest": "sha256:00"},
        "deny": {**CALL, "--reason": "no"},
        "control": {
            "ACTION": "stop-tenant",
            "TARGET": "acme",
            "--tenant": "acme",
            "--operator": "olga",
            "--reason": "drill",
        },
        "feed": {**stream, "--tools": str(inputs / "tools.json"), **TURN, "--principal": "u"},
        "simulate": {"--plant": "skip_dedup"},
        "console": {
            "--port": "0",
            "--principal": "olga",
            "--principal-header": "X-User",
            "--trusted-proxy": "127.0.0.1",
            "--trace-url": "http://127.0.0.1:16686/trace/{trace_id}",
        },
    }[command]


POSITIONALS = {"control": ["ACTION", "TARGET"], "feed": ["FILE"]}


def command_line(command: str, values: dict[str, str], log: str | None = None) -> list[str]:
    line = [command, *(values[name] for name in POSITIONALS.get(command, []))]
    for name, value in values.items():
        if name.startswith("--"):
            line += [name, value]
    return line if log is None else [*line, "--log", log]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [choices] = [
        action.choices
        for action in _parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ]
    return dict(choices)


LOG_COMMANDS = sorted(
    name
    for name, sub in subcommands().items()
    if any("--log" in action.option_strings for action in sub._actions)
)
CREATING = {"feed", "demo"}
"""The commands that make a new log where there is none."""

TEXT_OPTIONS = sorted(
    (name, action.option_strings[0] if action.option_strings else str(action.metavar))
    for name, sub in subcommands().items()
    for action in sub._actions
    if action.type is text_argument
)


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """The command's status (argparse's for a usage error), stdout and stderr."""
    capsys.readouterr()
    try:
        status = main(argv)
    except SystemExit as exited:
        status = exited.code if isinstance(exited.code, int) else -1
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def assert_refused(status: int, err: str, *names: str) -> None:
    """Non-zero, no traceback, one short ``inert:`` line (or argparse's usage and error), and
    the error names each of ``names``."""
    assert status in (1, 2), (status, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    if status == 2:
        assert ": error: " in lines[-1], err
    else:
        assert len(lines) == 1, err
        assert lines[0].startswith("inert: "), err
        assert len(lines[0]) <= MAX_ERROR, err
    for name in names:
        assert name.lower() in err.lower(), (name, err)


def test_every_command_with_a_log_is_in_the_corpus() -> None:
    """A new command that takes --log gets a place in the corpus (its valid options here)."""
    for command in LOG_COMMANDS:
        base_values(command, Path())
    assert {"ledger", "feed", "execute", "demo"} <= set(LOG_COMMANDS)
    assert len(TEXT_OPTIONS) >= 20


# --- log URLs ----------------------------------------------------------------------------------

BAD_URLS = [
    ("unknown-scheme", "ftp://host/inert.db", "unknown log URL"),
    ("empty", "", "unknown log URL"),
    ("no-scheme", "inert.db", "unknown log URL"),
    ("broken-ipv6-host", "postgresql://u@[::1/db", "cannot be read"),
    ("broken-ipv6-sqlite", "sqlite://[::1/x.db", "cannot be read"),
    ("sqlite-host", "sqlite://host/x.db", "has a host"),
    ("sqlite-no-file", "sqlite:///", "names no file"),
    ("nul-in-path", "sqlite:///a\x00b.db", "NUL"),
    ("escaped-nul-in-path", "sqlite:///a%00b.db", "NUL"),
    ("poll-nan", "sqlite:///{log}?poll_interval=nan", "poll_interval"),
    ("poll-inf", "sqlite:///{log}?poll_interval=inf", "poll_interval"),
    ("poll-minus-inf", "sqlite:///{log}?poll_interval=-inf", "poll_interval"),
    ("poll-overflow", "sqlite:///{log}?poll_interval=1e400", "poll_interval"),
    ("poll-negative", "sqlite:///{log}?poll_interval=-1", "poll_interval"),
    ("poll-zero", "sqlite:///{log}?poll_interval=0", "poll_interval"),
    ("poll-text", "sqlite:///{log}?poll_interval=soon", "poll_interval"),
    ("batch-negative", "sqlite:///{log}?max_batch_events=-1", "max_batch_events"),
    ("batch-zero", "sqlite:///{log}?max_batch_events=0", "max_batch_events"),
    ("batch-fraction", "sqlite:///{log}?max_batch_events=1.5", "max_batch_events"),
    ("batch-nan", "sqlite:///{log}?max_batch_events=nan", "max_batch_events"),
    ("batch-digits", "sqlite:///{log}?max_batch_events=" + "9" * 5000, "max_batch_events"),
    ("synchronous", "sqlite:///{log}?synchronous=sometimes", "synchronous"),
    ("group-commit", "sqlite:///{log}?group_commit=maybe", "group_commit"),
    ("unknown-option", "sqlite:///{log}?bogus=1", "bogus"),
    ("memory-option", "memory://x?poll_interval=1", "memory logs take no options"),
    ("postgres-poll-nan", "postgresql://u@127.0.0.1:1/db?poll_interval=nan", "poll_interval"),
    ("postgres-batch", "postgresql://u@127.0.0.1:1/db?max_batch_events=-1", "max_batch_events"),
]


@pytest.mark.parametrize("command", LOG_COMMANDS)
@pytest.mark.parametrize(
    ("url", "named"), [case[1:] for case in BAD_URLS], ids=[c[0] for c in BAD_URLS]
)
def test_a_bad_log_url_is_refused_naming_what_is_wrong(
    command: str, url: str, named: str, inputs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Malformed URLs, unknown schemes, NUL, NaN, infinities and bad sizes: one line each."""
    url = url.replace("{log}", str(inputs / "demo.db"))
    status, _, err = run(capsys, command_line(command, base_values(command, inputs), url))
    assert_refused(status, err, named)


# --- log files ---------------------------------------------------------------------------------


def _garbage_after_first_page(path: Path) -> None:
    data = bytearray(path.read_bytes())
    noise = random.Random(0)
    data[4096:] = noise.randbytes(len(data) - 4096)
    path.write_bytes(bytes(data))


def _sqlite_file(path: Path, *pragmas: str) -> None:
    connection = sqlite3.connect(path)
    try:
        for pragma in pragmas:
            connection.execute(pragma)
        connection.execute("CREATE TABLE notes (body TEXT)")
        connection.commit()
    finally:
        connection.close()


def _unopenable(path: Path) -> None:
    path.write_bytes(b"")
    path.chmod(0)
    if os.access(path, os.R_OK):
        # Root reads whatever the mode says: a symbolic link to itself nobody can open.
        path.unlink()
        path.symlink_to(path.name)


def damaged(kind: str, demo: Path, path: Path) -> None:
    """Put a log file of this kind at ``path``."""
    if kind not in ("missing", "missing-folder", "directory", "fifo", "unopenable"):
        shutil.copy(demo, path)
    match kind:
        case "directory":
            path.mkdir()
        case "empty-file":
            path.write_bytes(b"")
        case "text-file":
            path.write_text("not a database\n" * 100)
        case "fifo":
            os.mkfifo(path)
        case "unopenable":
            _unopenable(path)
        case "other-program":
            path.unlink()
            _sqlite_file(path)
        case "other-application-id":
            path.unlink()
            _sqlite_file(path, "PRAGMA application_id = 42")
        case "newer-schema":
            connection = sqlite3.connect(path)
            connection.execute("PRAGMA user_version = 99")
            connection.close()
        case "half-of-it":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        case "zeroed-header":
            path.write_bytes(bytes(100) + path.read_bytes()[100:])
        case "garbage-after-page-one":
            _garbage_after_first_page(path)
        case "torn-payload":
            tear_sqlite_tail(path, Tear.PAYLOAD)
        case "torn-last-page":
            tear_sqlite_tail(path, Tear.LAST_PAGE)
        case "cut-in-last-page":
            tear_sqlite_tail(path, Tear.TRUNCATED)


BAD_FILES = [
    # (kind, what the error names: any of these, the commands that may succeed on it)
    ("missing", ("does not exist",), CREATING),
    ("missing-folder", ("log.db",), set()),
    ("directory", ("is a directory",), set()),
    ("empty-file", ("is empty",), CREATING),
    ("text-file", ("not a database",), set()),
    ("fifo", ("log.db",), set()),
    ("unopenable", ("log.db",), set()),
    ("other-program", ("another program",), set()),
    ("other-application-id", ("another program",), set()),
    ("newer-schema", ("newer inert",), set()),
    ("half-of-it", ("log.db",), set()),
    ("zeroed-header", ("not a database",), set()),
    ("garbage-after-page-one", ("malformed", "verification"), set()),
    ("torn-payload", ("damaged", "verification", "empty log"), set()),
    # The demo reads only the log's head, and refuses a log with events: whether the torn page
    # is the one holding the head depends on how the pages of the demo's log were laid out.
    ("torn-last-page", ("malformed", "verification", "empty log"), set()),
    ("cut-in-last-page", ("cut short",), set()),
]


# Each bad file with each command it concerns: the commands that make a new log where none is
# (``exempt``) are not asked to refuse one.
BAD_FILE_CASES = [
    pytest.param(command, kind, named, id=f"{kind}-{command}")
    for kind, named, exempt in BAD_FILES
    for command in LOG_COMMANDS
    if command not in exempt
]


@pytest.mark.parametrize(("command", "kind", "named"), BAD_FILE_CASES)
def test_a_log_file_that_is_no_good_log_is_refused(
    *,
    command: str,
    kind: str,
    named: tuple[str, ...],
    inputs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A file that is no inert log: one line naming why; a command that only reads makes none."""
    path = tmp_path / ("nowhere/log.db" if kind == "missing-folder" else "log.db")
    damaged(kind, inputs / "demo.db", path)
    argv = command_line(command, base_values(command, inputs), f"sqlite:///{path}")
    status, _, err = run(capsys, argv)
    assert_refused(status, err)
    assert any(name.lower() in err.lower() for name in named), err
    if kind == "missing":
        assert not path.exists()
    elif kind == "empty-file":
        assert path.stat().st_size == 0


# --- text options ------------------------------------------------------------------------------

BAD_TEXT = [
    ("nul", "a\x00b", "control character U+0000"),
    ("escape-sequence", "\x1b[2J", "control character U+001B"),
    ("newline", "a\nb", "control character U+000A"),
    ("delete", "a\x7f", "control character U+007F"),
    ("c1-control", "a\x85", "control character U+0085"),
    ("not-utf8-byte", "\udcff", "not valid UTF-8"),
    ("lone-surrogate", "x\ud800", "not valid UTF-8"),
    ("very-long", "x" * 5000, "the limit is 4096"),
]


@pytest.mark.parametrize(
    ("command", "option"), TEXT_OPTIONS, ids=[f"{c}{o}" for c, o in TEXT_OPTIONS]
)
@pytest.mark.parametrize(
    ("value", "named"), [c[1:] for c in BAD_TEXT], ids=[c[0] for c in BAD_TEXT]
)
def test_a_text_option_takes_only_text(
    *,
    command: str,
    option: str,
    value: str,
    named: str,
    inputs: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Control characters, bytes not UTF-8 and huge values are usage errors naming the option."""
    values = base_values(command, inputs)
    values["TARGET" if option == "RESPONSE|TOOL|TENANT" else option] = value
    log = "memory://" if command in LOG_COMMANDS else None
    status, _, err = run(capsys, command_line(command, values, log))
    assert status == 2
    assert_refused(status, err, option, named)


EMPTY_IDENTITIES = [
    ("cancel-turn", "--tenant", "tenant must not be empty"),
    ("confirm", "--turn", "turn must not be empty"),
    ("deny", "--conversation", "conversation must not be empty"),
    ("feed", "--tenant", "tenant must not be empty"),
    ("feed", "--principal", "principal"),
    ("cancel-turn", "--principal", "principal"),
]


@pytest.mark.parametrize(("command", "option", "named"), EMPTY_IDENTITIES)
def test_an_empty_identity_is_refused(
    *,
    command: str,
    option: str,
    named: str,
    inputs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An empty tenant, conversation, turn or principal is named in one line."""
    log = tmp_path / "log.db"
    shutil.copy(inputs / "demo.db", log)
    values = {**base_values(command, inputs), option: ""}
    status, _, err = run(capsys, command_line(command, values, f"sqlite:///{log}"))
    assert_refused(status, err, named)


COUNTS = ["-1", "0", "nan", "inf", "1e3", "1.5", "", "9" * 30, "9" * 5000]


@pytest.mark.parametrize("option", ["--seeds", "--keys", "--workers"])
@pytest.mark.parametrize("value", COUNTS, ids=lambda value: value[:12] or "empty")
def test_simulate_takes_counts_within_their_bounds(
    option: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A count out of its bounds (a huge one would run for ever) is a usage error naming it."""
    status, _, err = run(capsys, ["simulate", option, value])
    assert status == 2
    assert_refused(status, err, option, "a whole number from 1")


@pytest.mark.parametrize("value", ["nan", "1.5", "", "1" + "0" * 5000])
def test_simulate_takes_a_whole_first_seed(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The first seed is any whole number Python reads; anything else names --seed."""
    status, _, err = run(capsys, ["simulate", "--seed", value])
    assert_refused(status, err, "--seed")


# --- the files feed reads ----------------------------------------------------------------------


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


TOOLS_FILES = [
    ("missing", None, "cannot read"),
    ("directory", "<dir>", "cannot read"),
    ("fifo", "<fifo>", "not a regular file"),
    ("empty", b"", "not a JSON document"),
    ("binary", bytes(range(256)) * 4, "not a JSON document"),
    ("latin-1", b'[{"name": "caf\xe9"}]', "not a JSON document"),
    ("raw-nul", b'[{"name": "a\x00b"}]', "not a JSON document"),
    ("deep-array", _deep(100_000), "nests too deep"),
    ("deep-object", '{"a": ' * 5000 + "1" + "}" * 5000, "nests too deep"),
    ("huge-integer", "[" + "1" * 5000 + "]", "number too long"),
    (
        "huge-integer-in-schema",
        '[{"name": "x", "parameters": {"maxLength": 1' + "0" * 5000 + "}}]",
        "number too long",
    ),
    ("object", '{"name": "x"}', "tool declarations are a JSON list"),
    ("string", '"x"', "tool declarations are a JSON list"),
    ("numbers", "[1, 2]", "is not a JSON object"),
    ("no-name", '[{"parameters": {}}]', "has no name"),
    ("empty-name", '[{"name": ""}]', "has no name"),
    ("numeric-name", '[{"name": 5}]', "has no name"),
    ("lone-surrogate-name", '[{"name": "\\ud800"}]', "lone surrogate"),
    ("parameters-a-list", '[{"name": "x", "parameters": []}]', "parameters is not a JSON object"),
    ("x-inert-a-string", '[{"name": "x", "x-inert": "yes"}]', "x-inert is not a JSON object"),
    ("max-bytes-negative", '[{"name": "x", "x-inert": {"max_bytes": -1}}]', "max_bytes"),
    ("max-bytes-zero", '[{"name": "x", "x-inert": {"max_bytes": 0}}]', "max_bytes"),
    ("max-bytes-nan", '[{"name": "x", "x-inert": {"max_bytes": NaN}}]', "max_bytes"),
    ("max-bytes-infinite", '[{"name": "x", "x-inert": {"max_bytes": Infinity}}]', "max_bytes"),
    ("max-bytes-overflow", '[{"name": "x", "x-inert": {"max_bytes": 1e400}}]', "max_bytes"),
    ("max-bytes-fraction", '[{"name": "x", "x-inert": {"max_bytes": 1.5}}]', "max_bytes"),
    ("max-bytes-true", '[{"name": "x", "x-inert": {"max_bytes": true}}]', "max_bytes"),
    ("strict-a-string", '[{"name": "x", "x-inert": {"strict": "no"}}]', "true or false"),
    ("unknown-setting", '[{"name": "x", "x-inert": {"retries": 3}}]', "unknown x-inert"),
    ("repeated-name", '[{"name": "x"}, {"name": "x"}]', "more than once"),
    ("remote-ref", '[{"name": "x", "parameters": {"$ref": "http://example.com/s"}}]', "tool 'x'"),
    ("open-schema", '[{"name": "x", "parameters": {"type": "object"}}]', "tool 'x'"),
]


def put(path: Path, content: str | bytes | None) -> None:
    if content is None:
        return
    if content == "<dir>":
        path.mkdir()
    elif content == "<fifo>":
        os.mkfifo(path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


@pytest.mark.parametrize(
    ("content", "named"), [c[1:] for c in TOOLS_FILES], ids=[c[0] for c in TOOLS_FILES]
)
def test_a_tools_file_that_is_no_declarations_is_refused(
    content: str | bytes | None,
    named: str,
    inputs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A TOOLS.json that is no declarations: one line naming the file or tool, no log made."""
    tools = tmp_path / "tools.json"
    put(tools, content)
    log = tmp_path / "log.db"
    values = {**base_values("feed", inputs), "--tools": str(tools)}
    status, _, err = run(capsys, command_line("feed", values, f"sqlite:///{log}"))
    assert_refused(status, err, named)
    assert not log.exists()


STREAM_FILES = [
    ("missing", None, "cannot read"),
    ("directory", "<dir>", "cannot read"),
    ("fifo", "<fifo>", "not a regular file"),
    ("not-utf8-lines", b'{"type": "a"}\n{"type": "caf\xe9"}\n', "not UTF-8"),
    ("not-json-line", '{"type": "a"}\n{"type": \n', "line 2 is not JSON"),
    ("repeated-key", '{"type": "a", "type": "b"}\n', "repeats a key"),
    ("deep-line", '{"a": ' + _deep(100_000) + "}\n", "nested deeper"),
    ("huge-number", '{"a": 1' + "0" * 5000 + "}\n", "number longer"),
    ("nan", '{"a": NaN}\n', "NaN"),
    ("array-line", '{"type": "a"}\n[1, 2]\n', "not list"),
]


@pytest.mark.parametrize(
    ("content", "named"), [c[1:] for c in STREAM_FILES], ids=[c[0] for c in STREAM_FILES]
)
def test_a_stream_file_that_cannot_be_read_is_refused(
    content: str | bytes | None,
    named: str,
    inputs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A stream file missing, a pipe, or not strict JSON lines: one line naming what is wrong."""
    stream = tmp_path / "stream.jsonl"
    put(stream, content)
    values = {**base_values("feed", inputs), "FILE": str(stream), "--provider": "openai-responses"}
    status, _, err = run(capsys, command_line("feed", values, "memory://"))
    assert_refused(status, err, named)


NOT_STREAMS = [
    ("empty", b""),
    ("binary", bytes(range(256)) * 40),
    ("blank-lines", b"\n\n   \n"),
    ("text", b"hello, this is no stream\n" * 10),
    ("nul-bytes", bytes(4096)),
    ("sse-comments-only", b": keep-alive\n\n" * 10),
]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("content", [c[1] for c in NOT_STREAMS], ids=[c[0] for c in NOT_STREAMS])
def test_a_file_with_nothing_of_the_protocol_is_no_stream(
    provider: str, content: bytes, inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file with no event of the provider's protocol is an error, not an empty turn."""
    stream = tmp_path / "stream.bin"
    stream.write_bytes(content)
    log = tmp_path / "log.db"
    values = {**base_values("feed", inputs), "FILE": str(stream), "--provider": provider}
    status, _, err = run(capsys, command_line("feed", values, f"sqlite:///{log}"))
    assert_refused(status, err, f"no event of a {provider} stream")

    async def head() -> int:
        async with open_log(f"sqlite:///{log}") as opened:
            return await opened.head()

    if provider == "openai-responses":
        # The file may continue a lost stream: it is judged in the log it would continue.
        assert trio.run(head) == 0
    else:
        assert not log.exists()


def test_a_feed_of_the_log_file_itself_is_no_stream(
    inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SQLite file of a log, given as the stream, is nothing any protocol sends."""
    for provider in PROVIDERS:
        values = {**base_values("feed", inputs), "FILE": str(inputs / "demo.db")}
        values["--provider"] = provider
        status, _, err = run(capsys, command_line("feed", values, "memory://"))
        assert_refused(status, err, "demo.db", "nothing was fed")


def test_spans_to_a_file_that_cannot_be_written_are_refused_before_the_demo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--traces into a folder that does not exist, or onto a folder: one line, nothing run."""
    for traces in (tmp_path / "nowhere" / "spans.json", tmp_path):
        status, out, err = run(capsys, ["demo", "--log", "memory://", "--traces", str(traces)])
        assert_refused(status, err, "spans", str(traces))
        assert out == ""


# --- commands that cannot make progress --------------------------------------------------------


@contextlib.contextmanager
def child(*argv: str) -> Iterator[subprocess.Popen[str]]:
    """A Python child process, stopped by closing its standard input."""
    process = subprocess.Popen(
        [sys.executable, *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield process
    finally:
        try:
            process.communicate(timeout=30)
        finally:
            process.kill()
            process.wait()


def wait_for_line(process: subprocess.Popen[str], line: str) -> None:
    assert process.stdout is not None
    for got in process.stdout:
        if got.strip() == line:
            return
    pytest.fail(
        f"the child ended before {line!r}: {process.stderr.read() if process.stderr else ''}"
    )


RUNTIME_COMMANDS = ["cancel-turn", "confirm", "deny", "execute", "feed"]
"""The commands that open a runtime of their own on the log (``control`` opens none)."""


def test_a_command_beside_a_running_runtime_process_is_refused(
    inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A command refuses to open a runtime beside a named process that runs, until it stops."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    script = TESTS / "peer_process.py"
    with child(str(script), url, "web-1", "1") as peer:
        wait_for_line(peer, "fed-all")
        # A few heartbeats (every 0.25 s) tell its lease time; a lone one counts as 10 s.
        trio.run(trio.sleep, 0.8)
        for command in RUNTIME_COMMANDS:
            status, out, err = run(capsys, command_line(command, base_values(command, inputs), url))
            assert_refused(status, err, "'web-1' is running on this log")
            assert out == ""
    # The peer's lease time is 1 s: after it, the process is taken for stopped.
    trio.run(trio.sleep, 1.5)
    status, _, err = run(capsys, ["execute", "--log", url])
    assert status == 0, err


@pytest.mark.parametrize(("ago", "running"), [(timedelta(0), True), (timedelta(hours=1), False)])
def test_a_heartbeat_stops_a_command_while_its_lease_runs(
    ago: timedelta, running: bool, inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lone heartbeat counts for the default lease time: a fresh one stops a command."""
    log = tmp_path / "log.db"
    shutil.copy(inputs / "demo.db", log)
    url = f"sqlite:///{log}"

    async def beat() -> None:
        async with open_log(url, clock=lambda: datetime.now(UTC) - ago) as opened:
            heartbeat = ProcessHeartbeat(process="web-2")
            await opened.append([NewEvent(stream=process_stream("web-2"), event=heartbeat)])

    trio.run(beat)
    status, out, err = run(capsys, ["execute", "--log", url])
    if running:
        assert_refused(status, err, "'web-2' is running on this log")
    else:
        assert (status, out) == (0, "nothing to execute: no call is ready\n"), err


@pytest.mark.parametrize("command", RUNTIME_COMMANDS)
def test_a_log_that_never_settles_is_given_up_on(
    command: str,
    inputs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command waits WAIT_SECONDS at most for the log to settle, then says so in one line."""
    monkeypatch.setattr(inert.cli._common, "WAIT_SECONDS", 0.25)
    settle = Runtime.settle
    settled: list[Runtime] = []

    async def settle_once(runtime: Runtime) -> None:
        # The runtime settles once while it opens (recovering): the command's waits come after.
        if settled:
            await trio.sleep_forever()
        settled.append(runtime)
        await settle(runtime)

    monkeypatch.setattr(Runtime, "settle", settle_once)
    log = tmp_path / "log.db"
    shutil.copy(inputs / "demo.db", log)
    values = base_values(command, inputs)
    if command == "feed":
        values["--turn"] = "new"
    status, out, err = run(capsys, command_line(command, values, f"sqlite:///{log}"))
    assert_refused(status, err, "gave up waiting for the log to settle after 0.25 s")
    assert out == ""


# --- through a child process: what reaches the terminal -----------------------------------------


def inert_command(*argv: str | bytes, cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "inert", *argv],
        capture_output=True,
        check=False,
        timeout=60,
        cwd=cwd,
        env={**os.environ, "INERT_OPERATORS": "olga"},
    )


def assert_one_line(done: subprocess.CompletedProcess[bytes], status: int, *names: str) -> None:
    err = done.stderr.decode(errors="replace")
    assert done.returncode == status, err
    assert "Traceback" not in err
    assert "Exception ignored" not in err
    lines = err.splitlines()
    if status == 1:
        assert len(lines) == 1, err
    for name in names:
        assert name in err, err


def test_a_read_of_a_missing_log_in_a_child_process_creates_nothing(tmp_path: Path) -> None:
    """The terminal shows one line; no file appears."""
    done = inert_command("ledger", "--log", "sqlite:///inert.db", cwd=tmp_path)
    assert_one_line(done, 1, "no SQLite log at 'inert.db'")
    assert list(tmp_path.iterdir()) == []


def test_arguments_that_are_not_utf8_in_a_child_process(inputs: Path, tmp_path: Path) -> None:
    """Bytes not UTF-8: a usage error in a principal, printed escaped in a file's name."""
    turn = ["--tenant", "acme", "--conversation", "c1", "--turn", "t1"]
    log = f"sqlite:///{inputs / 'demo.db'}"
    done = inert_command("cancel-turn", "--log", log, *turn, "--principal", b"\xff", cwd=tmp_path)
    assert_one_line(done, 2, "--principal: not valid UTF-8")
    stream = tmp_path / os.fsdecode(b"\xff.sse")
    shutil.copy(CHAT, stream)
    tools = str(inputs / "tools.json")
    done = inert_command(
        "feed",
        stream.name,
        "--provider",
        "openai-chat",
        "--tools",
        tools,
        "--log",
        "memory://",
        cwd=tmp_path,
    )
    assert_one_line(done, 0)
    assert b"\\udcff.sse" in done.stdout


def test_a_fifo_for_a_stream_does_not_hang_a_child_process(inputs: Path, tmp_path: Path) -> None:
    """A named pipe nobody writes to is refused at once instead of read for ever."""
    os.mkfifo(tmp_path / "stream")
    tools = str(inputs / "tools.json")
    done = inert_command(
        "feed",
        "stream",
        "--provider",
        "anthropic",
        "--tools",
        tools,
        "--log",
        "memory://",
        cwd=tmp_path,
    )
    assert_one_line(done, 1, "not a regular file")


def test_spans_that_cannot_be_written_leave_no_traceback_at_exit(tmp_path: Path) -> None:
    """The tracer provider's exit handler does not raise again what the command reported."""
    done = inert_command("demo", "--log", "memory://", "--traces", str(tmp_path), cwd=tmp_path)
    assert_one_line(done, 1, "cannot write the spans file")


# --- an operator in an incident: every wrong input, one line saying what to do -----------------


def _no_traceback_one_line(status: int, err: str) -> None:
    """Not "internal error" (70), one ``inert:`` line, no traceback."""
    assert status not in (0, 70), (status, err)
    assert "Traceback" not in err
    assert "internal error" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("inert: "), err


def _unreadable(path: Path) -> None:
    """A file nobody can read: mode 0, or for root (who reads it anyway) a link to itself."""
    path.write_text("{}")
    path.chmod(0)
    if os.access(path, os.R_OK):
        path.unlink()
        path.symlink_to(path.name)


def _newer_log(inputs: Path, path: Path) -> None:
    shutil.copy(inputs / "demo.db", path)
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA user_version = 99")
    connection.close()


WRONG_INPUTS = [
    # (case, command, what to change in the valid command line, what the line names)
    ("missing-log", "ledger", {"--log": "{tmp}/nowhere.db"}, "does not exist"),
    ("missing-log", "control", {"--log": "{tmp}/nowhere.db"}, "does not exist"),
    ("missing-log", "console", {"--log": "{tmp}/nowhere.db"}, "does not exist"),
    ("newer-log", "verify", {"--log": "<newer>"}, "open it with a newer inert"),
    ("newer-log", "execute", {"--log": "<newer>"}, "open it with a newer inert"),
    ("newer-log", "console", {"--log": "<newer>"}, "open it with a newer inert"),
    ("missing-tools", "feed", {"--tools": "{tmp}/nowhere.json"}, "No such file"),
    ("unreadable-tools", "feed", {"--tools": "<unreadable>"}, "cannot read"),
    ("missing-stream", "feed", {"FILE": "{tmp}/nowhere.sse"}, "No such file"),
    ("missing-edit", "confirm", {"--arguments": "{tmp}/nowhere.json"}, "No such file"),
    ("unreadable-edit", "confirm", {"--arguments": "<unreadable>"}, "cannot read"),
    ("missing-confirm-tools", "confirm", {"--tools": "{tmp}/nowhere.json"}, "No such file"),
    ("unknown-turn", "cancel-turn", {"--turn": "t-typo"}, "inert ledger --tenant acme"),
    ("unknown-turn", "confirm", {"--turn": "t-typo"}, "not on this log"),
    ("unknown-turn", "deny", {"--turn": "t-typo"}, "not on this log"),
    ("unknown-call", "confirm", {"--call-id": "typo"}, "inert ledger --turn t3"),
    ("unknown-call", "deny", {"--call-id": "typo"}, "has no call 'typo'"),
    ("unknown-response", "deny", {"--response": "typo"}, "of response 'typo'"),
]


@pytest.mark.parametrize(
    ("command", "change", "named"),
    [case[1:] for case in WRONG_INPUTS],
    ids=[f"{case[0]}-{case[1]}" for case in WRONG_INPUTS],
)
def test_a_wrong_input_is_one_line_saying_what_to_do(
    *,
    command: str,
    change: dict[str, str],
    named: str,
    inputs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A missing log, a newer log, a file that cannot be read, an id not on the log: one line."""
    log = tmp_path / "log.db"
    shutil.copy(inputs / "demo.db", log)
    values = {**base_values(command, inputs), "--log": f"sqlite:///{log}"}
    for name, given in change.items():
        value = given.format(tmp=tmp_path)
        if value == "<newer>":
            _newer_log(inputs, tmp_path / "newer.db")
            value = f"sqlite:///{tmp_path / 'newer.db'}"
        elif value == "<unreadable>":
            _unreadable(tmp_path / "unreadable.json")
            value = str(tmp_path / "unreadable.json")
        elif name == "--log":
            value = f"sqlite:///{value}"
        values[name] = value
    log_url = values.pop("--log")
    status, out, err = run(capsys, command_line(command, values, log_url))
    _no_traceback_one_line(status, err)
    assert named.lower() in err.lower(), err
    assert out == ""


def test_a_busy_console_port_is_one_line_saying_what_to_do(inputs: Path, tmp_path: Path) -> None:
    """``inert console`` on a port another program listens on says so, and to give another."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = inert_command(
            "console", "--log", f"sqlite:///{inputs / 'demo.db'}", "--port", port, cwd=tmp_path
        )
    assert_one_line(done, 1, "address already in use", "give another --port")
    assert done.stderr.decode().startswith("inert: cannot listen on 127.0.0.1:")


def test_an_error_of_the_system_out_of_a_nursery_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An OSError a command did not foresee, inside Trio's groups, names its file and reason."""

    def failing(arguments: argparse.Namespace) -> None:
        async def fail() -> None:
            raise PermissionError(13, "Permission denied", "/srv/inert/spans.json")

        async def both() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fail)
                nursery.start_soon(trio.sleep_forever)

        trio.run(both)

    monkeypatch.setattr(inert.cli._main, "_run", failing)
    status, _, err = run(capsys, ["ledger", "--log", "memory://"])
    _no_traceback_one_line(status, err)
    assert err == (
        "inert: cannot use '/srv/inert/spans.json': Permission denied; check the path and its"
        " permissions\n"
    )


def test_a_bug_inside_a_nursery_is_still_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    """What no input causes is not made a user's error: it leaves main for the bug line."""

    def failing(arguments: argparse.Namespace) -> None:
        raise ExceptionGroup("tasks", [KeyError("bug")])

    monkeypatch.setattr(inert.cli._main, "_run", failing)
    with pytest.raises(ExceptionGroup):
        main(["ledger", "--log", "memory://"])
