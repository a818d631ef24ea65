"""The ``inert`` command: its parser, the command each name runs, and one line for every error.

Nothing it prints carries an argument value: calls are shown by key, tool, counts, sizes,
reasons and digests.
"""

from __future__ import annotations

import argparse
import io
import os
import secrets
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import partial
from typing import TypeVar

import trio

from .. import __version__
from ..adapters import PROVIDERS
from ..events import (
    ConfigurationError,
    InertError,
    Phase,
    TurnRef,
)
from ..log._partitions import MAX_PARTITIONS
from ..projections._shown import STATES, FilterError, RowFilter, Stage, stage_named, time_named
from ._arguments import (
    MAX_CONFIRMATION_SECONDS,
    count_argument,
    path_argument,
    seconds_argument,
    text_argument,
)
from ._common import LOG_VARIABLE
from ._console import console_arguments, console_command
from ._demo import demo_command, next_steps
from ._execute import execute_command
from ._feed import FeedRequest, feed_command
from ._operators import (
    CONTROL_WAIT_SECONDS,
    OPERATORS_VARIABLE,
    cancel_turn_command,
    confirm_command,
    control_command,
    controls_command,
    deny_command,
)
from ._read import audit_command, ledger_command, replay_command, verify_command
from ._repartition import repartition_command
from ._simulate import simulate_arguments, simulate_command
from ._streams import read_edit, read_tools
from ._tracing import exported_spans

T = TypeVar("T")


def _confirm_arguments(confirm: argparse.ArgumentParser) -> None:
    confirm.add_argument(
        "--arguments-digest",
        type=text_argument,
        help="the digest of the arguments the person saw (default: the call's own)",
    )
    confirm.add_argument(
        "--arguments",
        metavar="FILE",
        help="confirm these arguments instead (a JSON object, from FILE or - for standard"
        " input): the edit is validated like the model's, against the declaration the turn"
        " offered, which --tools must hold, and only it runs if it passes",
    )
    confirm.add_argument(
        "--tools",
        metavar="TOOLS.json",
        type=path_argument,
        help="the tool declarations the turn offered, in any provider's format: what validates"
        " an edit given with --arguments (needed with it)",
    )
    confirm.add_argument(
        "--expires-in",
        type=count_argument(MAX_CONFIRMATION_SECONDS),
        default=600,
        metavar="SECONDS",
        help="how long the confirmation lets the call be claimed; a claim after that cancels"
        " the call (default: %(default)s)",
    )


def _control_arguments(
    control: argparse.ArgumentParser, log_option: Callable[[argparse.ArgumentParser], None]
) -> None:
    control.add_argument(
        "action",
        choices=[
            "quarantine-response",
            "disable-tool",
            "enable-tool",
            "stop-tenant",
            "resume-tenant",
        ],
    )
    control.add_argument("target", metavar="RESPONSE|TOOL|TENANT", type=text_argument)
    control.add_argument(
        "--tenant", type=text_argument, help="the tenant a quarantine or a tool control is for"
    )
    control.add_argument(
        "--operator", type=text_argument, required=True, help="the operator principal"
    )
    control.add_argument("--reason", type=text_argument, required=True, help="why, for the audit")
    control.add_argument(
        "--dry-run",
        action="store_true",
        help="list the calls it would end and the running calls it would ask to stop; give nothing",
    )
    control.add_argument(
        "--new-target",
        action="store_true",
        help="give it even though nothing on the log names its target yet (a mistyped name"
        " is refused without it)",
    )
    control.add_argument(
        "--wait",
        type=seconds_argument,
        default=CONTROL_WAIT_SECONDS,
        metavar="SECONDS",
        help="how long to wait for the running runtimes' decisions"
        f" (default {CONTROL_WAIT_SECONDS:g})",
    )
    control.add_argument("--json", action="store_true", help="one JSON object")
    log_option(control)


def _ledger_arguments(ledger: argparse.ArgumentParser) -> None:
    ledger.add_argument("--json", action="store_true", help="one JSON object per line")
    ledger.add_argument(
        "--history", action="store_true", help="also each key's transitions, rejections included"
    )
    ledger.add_argument(
        "--wide", action="store_true", help="every id whole (a table cuts long ids short)"
    )
    ledger.add_argument("--tenant", type=text_argument, help="only the calls of this tenant")
    ledger.add_argument("--turn", type=text_argument, help="only the calls of turns of this id")
    ledger.add_argument(
        "--id",
        type=text_argument,
        help="only the calls this id names: their conversation, turn, response, item or call",
    )
    ledger.add_argument(
        "--stage",
        type=_filter_argument(stage_named),
        metavar="STAGE",
        help=f"only the calls in this stage, as the console words it ({', '.join(Stage)})",
    )
    ledger.add_argument("--state", choices=STATES, help="only the calls in this state")
    ledger.add_argument("--tool", type=text_argument, help="only the calls of this tool")
    ledger.add_argument(
        "--since",
        type=_filter_argument(time_named),
        metavar="TIME",
        help="only the calls last changed at or after this time (ISO 8601; UTC unless it says)",
    )
    ledger.add_argument(
        "--until",
        type=_filter_argument(time_named),
        metavar="TIME",
        help="only the calls first seen at or before this time (ISO 8601; UTC unless it says)",
    )
    ledger.add_argument(
        "--follow",
        action="store_true",
        help="then print each row again as it changes, until interrupted",
    )


def _filter_argument(named: Callable[[str], T]) -> Callable[[str], T]:
    """An option's type that reads a filter's value (a usage error naming the valid ones for
    one that is none)."""

    def argument(text: str) -> T:
        try:
            return named(text)
        except FilterError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return argument


def _feed_arguments(feed: argparse.ArgumentParser) -> None:
    feed.add_argument("file", metavar="FILE", type=path_argument, help="the stream")
    feed.add_argument("--provider", required=True, choices=sorted(PROVIDERS))
    feed.add_argument(
        "--tools",
        metavar="TOOLS.json",
        type=path_argument,
        required=True,
        help="the tool declarations offered, in any provider's format",
    )
    feed.add_argument("--tenant", type=text_argument, default="default", help="the turn's tenant")
    feed.add_argument(
        "--conversation", type=text_argument, default="default", help="the turn's conversation"
    )
    feed.add_argument(
        "--turn", type=text_argument, default="1", help="the turn the stream is fed to"
    )
    feed.add_argument(
        "--principal", type=text_argument, default="cli", help="the principal the turn belongs to"
    )
    feed.add_argument(
        "--execute",
        action="store_true",
        help="run every ready call of the turn that needs no confirmation with an executor"
        " that only records that it ran",
    )
    feed.add_argument("--json", action="store_true", help="the turn's ledger rows, one per line")
    feed.add_argument("--traceparent", help="the caller's W3C traceparent, continued by the turn")
    feed.add_argument("--tracestate", help="the caller's W3C tracestate")


def _demo_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument(
        "--log",
        metavar="URL",
        help="an empty log, kept for the commands the demo ends with (default: a new SQLite"
        " file in a temporary folder, deleted at the end)",
    )
    demo.add_argument(
        "--wide",
        action="store_true",
        help="the ledger with every column, about 190 characters wide (without it: 100 at most)",
    )
    demo.add_argument(
        "--traces",
        metavar="FILE",
        type=path_argument,
        help="write the demo's spans there as OTLP JSON (without it: OTLP/HTTP to the"
        " OTEL_EXPORTER_OTLP_ENDPOINT, when set)",
    )


def _repartition_arguments(repartition: argparse.ArgumentParser) -> None:
    repartition.add_argument(
        "--to",
        metavar="URL",
        required=True,
        help="the log to copy into: empty, or made here (a PostgreSQL schema, or an SQLite file"
        " for one partition)",
    )
    repartition.add_argument(
        "--partitions",
        type=count_argument(MAX_PARTITIONS),
        required=True,
        metavar="N",
        help="how many partitions of calls the copy has (1: one partition, as SQLite logs have)",
    )


def _partition_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--partition",
        type=int,
        metavar="N",
        help="this partition of a partitioned log alone (0: its control partition); by default"
        " every partition, each on its own, and the digest over all of them",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inert",
        formatter_class=_HelpWithDefaults,
        description="Streamed LLM tool calls that cannot act before they are finished,"
        " validated and still wanted.",
        epilog=(
            "Log URLs: memory://, memory://NAME, sqlite:///relative.db, sqlite:////abs.db,"
            " postgresql://USER@HOST:PORT/DATABASE?schema=NAME"
        ),
    )
    parser.add_argument("--version", action="version", version=f"inert {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            formatter_class=_HelpWithDefaults,
        )

    default_log = os.environ.get(LOG_VARIABLE) or None

    def log_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--log",
            metavar="URL",
            default=default_log,
            required=default_log is None,
            help=f"the log URL (default: ${LOG_VARIABLE}"
            + (f", now {default_log!r})" if default_log else ", not set)"),
        )

    def log_command(name: str, help_text: str, json_help: str) -> argparse.ArgumentParser:
        sub = command(name, help_text)
        log_option(sub)
        sub.add_argument("--json", action="store_true", help=json_help)
        return sub

    ledger = command("ledger", "print the assembly ledger of a log: one line per call key")
    log_option(ledger)
    _ledger_arguments(ledger)

    _partition_option(
        log_command(
            "replay",
            "rebuild every call and projection from a log; print counts and the digest",
            "one JSON object",
        )
    )
    _partition_option(
        log_command(
            "verify",
            "check a log whole: the storage's own checks, every row's position and checksum, a"
            " replay of every decision; exits non-zero and lists what is wrong if anything is",
            "one JSON object",
        )
    )

    _repartition_arguments(
        log_command(
            "repartition",
            "copy a log no process writes into an empty log of another number of partitions,"
            " then verify both and compare their ledgers call for call; exits non-zero if any"
            " of it fails",
            "one JSON object",
        )
    )

    cancel = command(
        "cancel-turn",
        "cancel a turn for its principal (opens a runtime on the log, as a restart does)",
    )

    def turn_options(sub: argparse.ArgumentParser) -> None:
        log_option(sub)
        sub.add_argument("--tenant", type=text_argument, required=True)
        sub.add_argument("--conversation", type=text_argument, required=True)
        sub.add_argument("--turn", type=text_argument, required=True)

    turn_options(cancel)
    cancel.add_argument(
        "--principal", type=text_argument, required=True, help="the principal the turn belongs to"
    )
    cancel.add_argument("--reason", type=text_argument, default="", help="why (no argument values)")
    cancel.add_argument("--json", action="store_true", help="one JSON object")

    def call_options(sub: argparse.ArgumentParser) -> None:
        turn_options(sub)
        sub.add_argument(
            "--call-id", type=text_argument, required=True, help="the provider's call id"
        )
        sub.add_argument(
            "--response",
            type=text_argument,
            help="the provider response, where the turn reuses the call id",
        )
        sub.add_argument(
            "--principal",
            type=text_argument,
            required=True,
            help="the principal the turn belongs to",
        )
        sub.add_argument("--json", action="store_true", help="one JSON object")

    confirm = command(
        "confirm",
        "confirm a call waiting for its principal's confirmation (opens a runtime on the log)",
    )
    call_options(confirm)
    _confirm_arguments(confirm)
    deny = command("deny", "refuse a call for its principal: it is cancelled and never runs")
    call_options(deny)
    deny.add_argument("--reason", type=text_argument, default="", help="why (no argument values)")

    log_command(
        "audit", "every operator control, and the calls each ended", "one JSON object per control"
    )

    control = command(
        "control",
        "give an operator control beside the runtimes running on the log, and report what"
        f" they decided ({OPERATORS_VARIABLE} names the operators)",
    )
    _control_arguments(control, log_option)
    log_command(
        "controls",
        "the controls in force now: who gave each, when and why",
        "one JSON object per control",
    )

    console_arguments(
        command(
            "console",
            "serve the operator console over a log: the live ledger, waiting and running calls,"
            f" controls and the audit, in a browser ({OPERATORS_VARIABLE} names the operators)",
        ),
        log_option,
    )

    log_command(
        "execute",
        "claim every ready call once with an executor that only records that it ran"
        " (opens a runtime on the log, as a restart does)",
        "one JSON object per line",
    )

    feed = command(
        "feed",
        "feed a recorded provider stream (SSE text, JSON lines or raw wire bytes) into a turn",
    )
    _feed_arguments(feed)
    log_option(feed)

    _demo_arguments(
        command("demo", "stream tool calls of several turns through a runtime, with a restart")
    )
    simulate_arguments(
        command(
            "simulate",
            "drive a runtime through seeded awkward event orders, each seed twice, and check"
            " every invariant of the contract after every step",
        )
    )
    return parser


def _turn_option(arguments: argparse.Namespace) -> TurnRef:
    try:
        return TurnRef(
            tenant=arguments.tenant, conversation=arguments.conversation, turn=arguments.turn
        )
    except ValueError as error:
        raise ConfigurationError(f"the turn's identity: {error}") from None


def _run(arguments: argparse.Namespace) -> None:
    match arguments.command:
        case "ledger":
            shown_rows = RowFilter(
                tenant=arguments.tenant,
                turn=arguments.turn,
                id=arguments.id,
                stage=arguments.stage,
                state=None if arguments.state is None else Phase(arguments.state),
                tool=arguments.tool,
                since=arguments.since,
                until=arguments.until,
            )
            trio.run(
                partial(
                    ledger_command,
                    arguments.log,
                    as_json=arguments.json,
                    history=arguments.history,
                    wide=arguments.wide,
                    shown_rows=shown_rows,
                    follow=arguments.follow,
                )
            )
        case "replay":
            trio.run(
                partial(
                    replay_command,
                    arguments.log,
                    as_json=arguments.json,
                    partition=arguments.partition,
                )
            )
        case "verify":
            trio.run(
                partial(
                    verify_command,
                    arguments.log,
                    as_json=arguments.json,
                    partition=arguments.partition,
                )
            )
        case "repartition":
            trio.run(
                partial(
                    repartition_command,
                    arguments.log,
                    arguments.to,
                    partitions=arguments.partitions,
                    as_json=arguments.json,
                )
            )
        case "cancel-turn":
            turn = _turn_option(arguments)
            trio.run(
                partial(
                    cancel_turn_command,
                    arguments.log,
                    turn,
                    principal=arguments.principal,
                    reason=arguments.reason,
                    as_json=arguments.json,
                )
            )
        case "execute":
            trio.run(partial(execute_command, arguments.log, as_json=arguments.json))
        case "audit":
            trio.run(partial(audit_command, arguments.log, as_json=arguments.json))
        case "console":
            trio.run(console_command, arguments.log, arguments)
        case "control":
            trio.run(
                partial(
                    control_command,
                    arguments.log,
                    arguments.action,
                    arguments.target,
                    tenant=arguments.tenant,
                    operator=arguments.operator,
                    reason=arguments.reason,
                    as_json=arguments.json,
                    dry_run=arguments.dry_run,
                    new_target=arguments.new_target,
                    wait=arguments.wait,
                )
            )
        case "controls":
            trio.run(partial(controls_command, arguments.log, as_json=arguments.json))
        case "confirm":
            trio.run(
                partial(
                    confirm_command,
                    arguments.log,
                    _turn_option(arguments),
                    call_id=arguments.call_id,
                    response=arguments.response,
                    principal=arguments.principal,
                    arguments_digest=arguments.arguments_digest,
                    expires_in=timedelta(seconds=arguments.expires_in),
                    edit=None if arguments.arguments is None else read_edit(arguments.arguments),
                    tools=None if arguments.tools is None else read_tools(arguments.tools),
                    as_json=arguments.json,
                )
            )
        case "deny":
            trio.run(
                partial(
                    deny_command,
                    arguments.log,
                    _turn_option(arguments),
                    call_id=arguments.call_id,
                    response=arguments.response,
                    principal=arguments.principal,
                    reason=arguments.reason,
                    as_json=arguments.json,
                )
            )
        case "feed":
            request = FeedRequest(
                log=arguments.log,
                stream=arguments.file,
                provider=arguments.provider,
                tools=arguments.tools,
                turn=_turn_option(arguments),
                principal=arguments.principal,
                execute=arguments.execute,
                as_json=arguments.json,
                traceparent=arguments.traceparent,
                tracestate=arguments.tracestate,
            )
            trio.run(feed_command, request)
        case "simulate":
            simulate_command(arguments)
        case "demo":
            with exported_spans(arguments.traces) as provider:
                if arguments.log is not None:
                    # A fresh memory log would be lost at the restart: give it a name.
                    url = arguments.log
                    if url == "memory://":
                        url = "memory://inert-demo-" + secrets.token_hex(4)
                    trio.run(partial(demo_command, url, provider, wide=arguments.wide))
                    if not url.startswith("memory://"):
                        print("\n".join(next_steps(url)))
                else:
                    with tempfile.TemporaryDirectory(prefix="inert-demo-") as folder:
                        url = "sqlite:///" + os.path.join(folder, "demo.db")
                        trio.run(partial(demo_command, url, provider, wide=arguments.wide))
                    print(
                        "its log was temporary, and is gone: inert demo --log sqlite:///demo.db"
                        " keeps it, to look into"
                    )


class _HelpWithDefaults(argparse.HelpFormatter):
    """Shows an option's default where it has one worth saying (not a flag's off, not none) and
    its help does not say it already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "default" in text
            or default is None
            or default is False
            or default == argparse.SUPPRESS
        ):
            return text
        return f"{text} (default: %(default)s)"


MAX_MESSAGE = 400
"""The most characters of an error message printed."""


def _one_line(error: BaseException) -> str:
    """An error's message on one line of bounded length: a driver's message may span lines,
    and a value quoted in one may be long."""
    text = " ".join(str(error).split())
    if len(text) > MAX_MESSAGE:
        left_out = len(text) - MAX_MESSAGE + 40
        text = f"{text[: MAX_MESSAGE - 120]} [{left_out} characters left out] {text[-80:]}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``inert`` command; its exit status."""
    arguments = _parser().parse_args(argv)
    try:
        _run(arguments)
    except (InertError, OSError, BaseExceptionGroup) as error:
        failures = _failures(error)
        if failures is None:
            raise
        for failure in failures:
            print(f"inert: {_said(failure)}", file=sys.stderr)
        return 1
    return 0


def _failures(error: BaseException) -> list[InertError | OSError] | None:
    """The errors an input caused, out of the groups of the Trio nurseries they crossed (the
    cancellations they caused left out); ``None`` where anything else is among them (a bug),
    or the reader of standard output went away (``main_entry`` stops quietly then)."""
    if isinstance(error, BaseExceptionGroup):
        found: list[InertError | OSError] = []
        for inner in error.exceptions:
            if isinstance(inner, trio.Cancelled):
                continue
            failures = _failures(inner)
            if failures is None:
                return None
            found.extend(failures)
        return found or None
    if isinstance(error, InertError) or (
        isinstance(error, OSError) and not isinstance(error, BrokenPipeError)
    ):
        return [error]
    return None


def _said(error: InertError | OSError) -> str:
    """An error's line: an ``InertError`` says what to do itself; an error of the system is
    named with its file, where it has one."""
    if isinstance(error, InertError):
        return _one_line(error)
    reason = error.strerror or _one_line(error)
    name = error.filename
    if name is None:
        return (
            f"the system refused: {reason}; check what the command uses (files, ports,"
            " connections) and try again"
        )
    shown = os.fsdecode(name) if isinstance(name, str | bytes) else str(name)
    return f"cannot use {shown!r}: {reason}; check the path and its permissions"


def main_entry() -> None:
    for stream in (sys.stdout, sys.stderr):
        # A file name that is not UTF-8 is printed escaped, not a UnicodeEncodeError.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``inert ledger | head``): stop quietly, as other tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = 1
    except KeyboardInterrupt:
        print("inert: interrupted", file=sys.stderr)
        status = 130
    except Exception as error:
        # Every failure an input can cause is an InertError; anything else is a bug, said in
        # one line rather than a traceback.
        print(
            f"inert: internal error, a bug of inert ({type(error).__name__}: {_one_line(error)})",
            file=sys.stderr,
        )
        status = 70
    sys.exit(status)
