"""A child process for the crash test: appends until it is killed, printing each acknowledgement.

Usage: python crash_appender.py PATH RUN. Every event's id is ``RUN-TASK-N`` and its argument bytes
are derived from the id, so that the parent can check what it reads back.
"""

from __future__ import annotations

import hashlib
import sys

import trio

from inert import ArgumentsAppended, CallKey
from inert.log import NewEvent, SQLiteLog

TASKS = 8


def payload_of(event_id: str) -> bytes:
    return hashlib.sha256(event_id.encode()).digest() * 4


def event_of(event_id: str, task: int) -> NewEvent:
    key = CallKey(
        tenant="crash", conversation="c", turn="t", response="r", item=str(task), call="x"
    )
    return NewEvent(
        stream=f"task-{task}",
        event_id=event_id,
        event=ArgumentsAppended(key=key, data=payload_of(event_id)),
    )


async def main(path: str, run: str) -> None:
    async with SQLiteLog.open(path) as log:

        async def appender(task: int) -> None:
            for number in range(1_000_000):
                batch = [
                    event_of(f"{run}-{task}-{number}-{i}", task) for i in range(1 + number % 3)
                ]
                await log.append(batch)
                sys.stdout.write("".join(f"{new.event_id}\n" for new in batch))
                sys.stdout.flush()

        async with trio.open_nursery() as nursery:
            for task in range(TASKS):
                nursery.start_soon(appender, task)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2])
