"""One runtime process of several sharing a log, for tests/test_peer_processes.py.

``python tests/peer_process.py URL NAME TURNS [EXECUTOR [LEASE_TIME]]`` starts TURNS turns named
``NAME-tN``, each with a ``get_weather`` call fed whole (it becomes ready) and a ``send_email``
call fed only in part (it keeps collecting), and executes every ready call it can claim, whoever
owns its turn. It prints one line per fact the test checks: ``turn T`` once a turn's start is
acknowledged, ``fed T N`` once N promises of it are (its ingress events but fragments),
``dispatched T TOOL`` when its executor got a call, ``fed-all`` when it is done feeding. It
stops when its standard input closes, saying ``redactions N``: how many times its log redacted.

``EXECUTOR`` is ``none`` for a process that executes nothing, or ``until:PATH`` for one that
completes each call it got only once the file ``PATH`` exists. ``LEASE_TIME`` is the
process's lease time in seconds (``LEASE_TIME``, 1 s, by default).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import trio

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    Dispatch,
    Event,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
)

TOOLS = [ToolDeclaration(name="get_weather"), ToolDeclaration(name="send_email")]
LEASE_TIME = 1.0


def say(line: str) -> None:
    print(line, flush=True)


def call(turn: str, tool: str, data: bytes, *, whole: bool) -> list[Event]:
    """A call of its own response: whole (its response ends), or cut after one fragment."""
    key = CallKey(
        tenant="acme", conversation=turn, turn=turn, response=f"{turn}-{tool}", item=tool, call=tool
    )
    return call_events(key, tool, data, whole=whole)


def call_events(key: CallKey, tool: str, data: bytes, *, whole: bool) -> list[Event]:
    """The events of a call alone in its response: whole (its response ends), or cut after
    one fragment."""
    middle = len(data) // 2
    events: list[Event] = [
        CallOpened(key=key, tool=tool, sequence=0),
        ArgumentsAppended(key=key, data=data[:middle], offset=0, first_sequence=1, last_sequence=1),
    ]
    if whole:
        events += [
            ArgumentsAppended(
                key=key, data=data[middle:], offset=middle, first_sequence=2, last_sequence=2
            ),
            CallEnded(key=key, terminal=TerminalRef(sequence=3)),
            ResponseEnded(
                response=key.response_ref,
                reason=ResponseEndReason.COMPLETED,
                terminal=TerminalRef(sequence=4),
            ),
        ]
    return events


async def feed_turns(runtime: Runtime, name: str, turns: int) -> None:
    for number in range(turns):
        turn = f"{name}-t{number}"
        await runtime.start_turn(
            tenant="acme", conversation=turn, turn=turn, principal="user:alice"
        )
        say(f"turn {turn}")
        # The email call never ends: it is still collecting when the test stops it, so
        # whatever stops it (an operator's control, a lost stream) is seen on a live call.
        events = [
            *call(turn, "send_email", b'{"to": "bob@example.com"}', whole=False),
            *call(turn, "get_weather", b'{"city": "Paris"}', whole=True),
        ]
        await runtime.feed(events)
        # What the feed acknowledged: its promises (fragments are not, see inert.runtime._ingress).
        promises = [event for event in events if not isinstance(event, ArgumentsAppended)]
        say(f"fed {turn} {len(promises)}")
        await trio.sleep(0.05)
    say("fed-all")


def wait_for_file(path: Path) -> None:
    while not path.exists():
        time.sleep(0.02)


async def release_when_found(path: Path, release: trio.Event) -> None:
    await trio.to_thread.run_sync(wait_for_file, path, abandon_on_cancel=True)
    release.set()


async def complete(runtime: Runtime, dispatch: Dispatch, release: trio.Event) -> None:
    await release.wait()
    await runtime.complete(dispatch)


async def execute(runtime: Runtime, name: str, release: trio.Event) -> None:
    async with trio.open_nursery() as nursery:
        async for ready in runtime.ready_calls():
            try:
                dispatch = await runtime.claim(ready, executor=name)
            except ClaimRefused:
                continue
            say(f"dispatched {dispatch.key.turn} {dispatch.key.call}")
            nursery.start_soon(complete, runtime, dispatch, release)


async def wait_for_stdin_to_close() -> None:
    await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)


async def main(url: str, name: str, turns: int, executor: str, lease_time: float) -> None:
    async with (
        open_runtime(
            log=url, create=True, tools=TOOLS, process=name, lease_time=lease_time
        ) as runtime,
        trio.open_nursery() as nursery,
    ):
        release = trio.Event()
        if executor.startswith("until:"):
            nursery.start_soon(release_when_found, Path(executor.removeprefix("until:")), release)
        else:
            release.set()
        if executor != "none":
            nursery.start_soon(execute, runtime, name, release)
        await feed_turns(runtime, name, turns)
        await wait_for_stdin_to_close()
        nursery.cancel_scope.cancel()
        say(f"redactions {runtime.log.redactions_made}")


if __name__ == "__main__":
    executor = sys.argv[4] if len(sys.argv) > 4 else "all"
    lease_time = float(sys.argv[5]) if len(sys.argv) > 5 else LEASE_TIME
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), executor, lease_time)
