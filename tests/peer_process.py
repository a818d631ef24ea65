"""One runtime process of several sharing a log, for tests/test_peer_processes.py.

``python tests/peer_process.py URL NAME TURNS [EXECUTOR [LEASE_TIME [PROCESSES]]]`` starts TURNS
turns named ``NAME-tN``, each with a ``get_weather`` call fed whole (it becomes ready) and a
``send_email`` call fed only in part (it keeps collecting), and executes every ready call it can
claim, whoever owns its turn. It prints one line per fact the test checks: ``turn T`` once a
turn's start is
acknowledged, ``fed T N`` once N promises of it are (its ingress events but fragments),
``dispatched T TOOL`` when its executor got a call, ``fed-all`` when it is done feeding. It
stops when its standard input closes, saying ``redactions N``: how many times its log redacted.

``EXECUTOR`` is ``none`` for a process that executes nothing, or ``until:PATH`` for one that
completes each call it got only once the file ``PATH`` exists. ``LEASE_TIME`` is the
process's lease time in seconds (``LEASE_TIME``, 1 s, by default).

``PROCESSES`` (not 0) runs the process on a partitioned log (created with 8
partitions) with ``open_partitioned_runtime``: it waits until that many processes are alive and
it folds the partitions assigned to it, then starts each turn in a conversation of its own
partitions (``NAME-tN-K``, the first ``K`` that lands there).
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
    PartitionedRuntime,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    ToolDeclaration,
    open_partitioned_runtime,
    open_runtime,
)
from inert.runtime._assignment import owned_by

TOOLS = [ToolDeclaration(name="get_weather"), ToolDeclaration(name="send_email")]
LEASE_TIME = 1.0
PARTITIONS = 8
AnyRuntime = Runtime | PartitionedRuntime


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


def turn_name(runtime: AnyRuntime, name: str, number: int) -> str:
    """The turn (and conversation) ``number`` of a process: in one of its own partitions on a
    partitioned log."""
    if isinstance(runtime, Runtime):
        return f"{name}-t{number}"
    mine = runtime.partitions_owned()
    return next(
        turn
        for turn in (f"{name}-t{number}-{k}" for k in range(10_000))
        if runtime.partition_of("acme", turn) in mine
    )


async def feed_turns(runtime: AnyRuntime, name: str, turns: int) -> None:
    for number in range(turns):
        turn = turn_name(runtime, name, number)
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


async def complete(runtime: AnyRuntime, dispatch: Dispatch, release: trio.Event) -> None:
    await release.wait()
    await runtime.complete(dispatch)


async def execute(runtime: AnyRuntime, name: str, release: trio.Event) -> None:
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


async def settled(runtime: PartitionedRuntime, processes: int) -> None:
    """Until ``processes`` processes are alive and this one folds what is assigned to it."""
    while not (
        len(runtime.alive()) == processes
        and set(runtime.assignment().values()) == set(runtime.alive())
        and runtime.partitions_owned() == owned_by(runtime.assignment(), runtime.process)
    ):
        with trio.move_on_after(0.05):
            await runtime.changed()


async def main(  # noqa: PLR0917
    url: str, name: str, turns: int, executor: str, lease_time: float, processes: int
) -> None:
    if not processes:
        async with open_runtime(
            log=url, create=True, tools=TOOLS, process=name, lease_time=lease_time
        ) as runtime:
            await serve(runtime, name, turns, executor)
        return
    async with open_partitioned_runtime(
        log=url,
        create=True,
        partitions=PARTITIONS,
        tools=TOOLS,
        process=name,
        lease_time=lease_time,
    ) as partitioned:
        with trio.fail_after(60):
            await settled(partitioned, processes)
        say("settled")
        await serve(partitioned, name, turns, executor)


async def serve(runtime: AnyRuntime, name: str, turns: int, executor: str) -> None:
    async with trio.open_nursery() as nursery:
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
    processes = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), executor, lease_time, processes)
