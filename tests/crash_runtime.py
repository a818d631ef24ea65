"""A child process for the runtime kill test: runs turns until it is killed, printing each step.

Usage: python crash_runtime.py PATH RUN. On an SQLite log (``synchronous=FULL``) it first runs
the calls a killed predecessor left ready, then starts turns forever, each with one plain call
and one that needs confirmation, in ``WORKERS`` conversations at once. It prints
``claimed TURN CALL CONVERSATION`` once a claim returned (the dispatch is durable), then runs
the call, and prints ``done TURN CALL CONVERSATION`` once the outcome is recorded.
"""

from __future__ import annotations

import sys
from contextlib import suppress

import trio
from fault_scenarios import OPERATOR, PRINCIPAL, TOOLS, call_events, digest_of, key_of

from inert import CallKey, ClaimRefused, ConfirmationRefused, Runtime, open_runtime, trio_clock
from inert.log import SQLiteLog

WORKERS = 4


def say(what: str, key: CallKey) -> None:
    sys.stdout.write(f"{what} {key.turn} {key.call} {key.conversation}\n")
    sys.stdout.flush()


async def execute(runtime: Runtime, key: CallKey) -> None:
    with suppress(ClaimRefused):
        dispatch = await runtime.claim(key, executor="child")
        say("claimed", dispatch.key)
        await runtime.complete(dispatch)
        say("done", dispatch.key)


async def worker(runtime: Runtime, run: str, number: int) -> None:
    conversation = f"{run}-w{number}"
    for turn_number in range(1_000_000):
        turn = f"{run}-{number}-{turn_number}"
        await runtime.start_turn(
            tenant="acme", conversation=conversation, turn=turn, principal=PRINCIPAL
        )
        plain = key_of("plain", turn=turn, conversation=conversation)
        confirmed = key_of("confirm", turn=turn, conversation=conversation)
        await runtime.feed([*call_events(plain), *call_events(confirmed, tool="send_email")])
        await runtime.settle()
        await execute(runtime, plain)
        with suppress(ConfirmationRefused):
            await runtime.confirm(
                confirmed, principal=PRINCIPAL, arguments_digest=digest_of(runtime)
            )
        await runtime.settle()
        await execute(runtime, confirmed)


async def main(path: str, run: str) -> None:
    async with (
        SQLiteLog.open(path, synchronous="FULL", clock=trio_clock()) as log,
        open_runtime(log=log, tools=TOOLS, operators=[OPERATOR]) as runtime,
    ):
        await runtime.settle()
        for key in runtime.projections.queue.ready():
            await execute(runtime, key)
        async with trio.open_nursery() as nursery:
            for number in range(WORKERS):
                nursery.start_soon(worker, runtime, run, number)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
