"""The ``inert`` command."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from collections.abc import Sequence

import attrs
import trio

from . import __version__
from .events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    InertError,
    NewEvent,
    OfferedTool,
    RecordedEvent,
    Redacted,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    TurnRef,
    TurnStarted,
    open_log,
)


def describe(event: Event | Redacted) -> str:
    """One line naming an event's fields, with argument bytes shown only as their size."""
    if isinstance(event, Redacted):
        return f"<redacted: {event.length} bytes, sha256 {event.digest[:16]}...>"
    parts = []
    for field in attrs.fields(type(event)):
        value = getattr(event, field.name)
        if isinstance(value, bytes):
            shown = f"<{len(value)} bytes>"
        elif isinstance(value, TurnRef | CallKey):
            shown = "/".join(str(part) for part in attrs.astuple(value))
        else:
            shown = str(value)
        parts.append(f"{field.name}={shown}")
    return " ".join(parts)


def _format(recorded: RecordedEvent) -> str:
    return (
        f"{recorded.position:>4}  {recorded.stream:<40}  v{recorded.version:<3}"
        f" {recorded.event_type:<28} {describe(recorded.event)}"
    )


def _demo_events() -> list[NewEvent]:
    conversation = "conv-" + secrets.token_hex(3)
    turn = TurnRef(tenant="acme", conversation=conversation, turn="t1")
    key = CallKey(
        tenant="acme",
        conversation=conversation,
        turn="t1",
        response="resp_1",
        item="fc_1",
        call="call_1",
    )
    response = key.response_ref
    fragments = [b'{"city": ', b'"Par', b'is", "unit', b's": "metric"}']
    events: list[NewEvent] = [
        NewEvent(
            stream=turn.stream,
            event=TurnStarted(
                turn=turn,
                principal="user:alice",
                tools=(OfferedTool(name="get_weather", digest="sha256:demo"),),
            ),
        ),
        NewEvent(stream=response.stream, event=CallOpened(key=key, tool="get_weather", sequence=0)),
    ]
    for sequence, fragment in enumerate(fragments, start=1):
        events.append(
            NewEvent(
                stream=response.stream,
                event=ArgumentsAppended(
                    key=key, data=fragment, first_sequence=sequence, last_sequence=sequence
                ),
            )
        )
    end = len(fragments) + 1
    events.append(
        NewEvent(
            stream=response.stream,
            event=CallEnded(
                key=key, terminal=TerminalRef(sequence=end), final_arguments=b"".join(fragments)
            ),
        )
    )
    events.append(
        NewEvent(
            stream=response.stream,
            event=ResponseEnded(
                response=response,
                reason=ResponseEndReason.COMPLETED,
                terminal=TerminalRef(sequence=end + 1),
            ),
        )
    )
    return events


async def _demo(url: str) -> None:
    events = _demo_events()
    streams = {new.stream for new in events}
    async with open_log(url) as log:
        first, *_ = await log.append(events, expected_versions=dict.fromkeys(streams, 0))
    print(f"appended {len(events)} events of one streamed tool call to {url} and closed it")
    async with open_log(url) as log:
        print("reopened; read back (argument bytes are shown only as sizes):")
        for recorded in await log.read(first):
            print(_format(recorded))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inert",
        description="Streamed LLM tool calls that cannot act before they are finished,"
        " validated and still wanted.",
    )
    parser.add_argument("--version", action="version", version=f"inert {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="append the events of one streamed tool call to a log and read them back"
    )
    demo.add_argument(
        "--log", metavar="URL", help="log URL (default: a new SQLite file in a temporary folder)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = _parser().parse_args(argv)
    try:
        if arguments.command == "demo":
            if arguments.log:
                trio.run(_demo, arguments.log)
            else:
                with tempfile.TemporaryDirectory(prefix="inert-demo-") as folder:
                    trio.run(_demo, "sqlite:///" + os.path.join(folder, "demo.db"))
    except InertError as error:
        print(f"inert: {error}", file=sys.stderr)
        return 1
    return 0


def main_entry() -> None:
    sys.exit(main())
