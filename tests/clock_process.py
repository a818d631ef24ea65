"""One runtime process of several on a partitioned log, for tests/runtime/test_clock_processes.py,
meant to run under a clock put off true (``inert.testing.ClockSkew``).

``python tests/clock_process.py URL NAME PROCESSES TURNS`` waits until ``PROCESSES`` processes
are alive and it folds what is assigned to it, then starts ``TURNS`` turns in its own
partitions, each with a ``send_email`` call that needs a confirmation, confirms each for one
second, claims the even ones at once and the odd ones three seconds later. It prints one line
per fact the test checks: ``settled``, ``dispatched T``, ``refused T REASON``, ``done``, and
``owns N`` each time the number of partitions it folds changes. It stops when its standard input
closes.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import trio
from peer_process import call_events, say, settled, turn_name, wait_for_stdin_to_close

from inert import (
    CallKey,
    ClaimRefused,
    PartitionedRuntime,
    ToolDeclaration,
    open_partitioned_runtime,
)

TOOLS = [ToolDeclaration(name="send_email", needs_confirmation=True)]
PARTITIONS = 8
LEASE_TIME = 1.0
CONFIRMED_FOR = timedelta(seconds=1)
LATE = 3.0
"""Seconds a late claim waits after its confirmation: long past it, at any rate tried."""


async def confirm_and_claim(runtime: PartitionedRuntime, name: str, number: int) -> None:
    turn = turn_name(runtime, name, number)
    await runtime.start_turn(tenant="acme", conversation=turn, turn=turn, principal="user:alice")
    key = CallKey(
        tenant="acme", conversation=turn, turn=turn, response=f"{turn}-r", item="i", call="email"
    )
    await runtime.feed(call_events(key, "send_email", b'{"to": "bob"}', whole=True))
    pending = None
    while pending is None:
        await runtime.settle()
        pending = await runtime.core(runtime.partition_of("acme", turn)).pending_confirmation(key)
    await runtime.confirm(
        key,
        principal="user:alice",
        arguments_digest=pending.arguments_digest,
        expires_in=CONFIRMED_FOR,
    )
    if number % 2:
        await trio.sleep(LATE)
    try:
        dispatch = await runtime.claim(key, executor=name)
    except ClaimRefused as refused:
        say(f"refused {turn} {refused.reason}")
        return
    say(f"dispatched {turn}")
    await runtime.complete(dispatch)


async def report_ownership(runtime: PartitionedRuntime) -> None:
    owned = -1
    while True:
        if len(runtime.partitions_owned()) != owned:
            owned = len(runtime.partitions_owned())
            say(f"owns {owned}")
        with trio.move_on_after(0.1):
            await runtime.changed()


async def main(url: str, name: str, processes: int, turns: int) -> None:
    async with open_partitioned_runtime(
        log=url,
        create=True,
        partitions=PARTITIONS,
        tools=TOOLS,
        process=name,
        lease_time=LEASE_TIME,
    ) as runtime:
        with trio.fail_after(60):
            await settled(runtime, processes)
        say("settled")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(report_ownership, runtime)
            async with trio.open_nursery() as calls:
                for number in range(turns):
                    calls.start_soon(confirm_and_claim, runtime, name, number)
            say("done")
            await wait_for_stdin_to_close()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
