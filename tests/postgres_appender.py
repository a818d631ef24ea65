"""A child process for the PostgreSQL multi-writer test: appends on a word from its parent.

Usage: python postgres_appender.py URL RUN BATCHES. Opens the log, prints ``ready``, waits for a
line on stdin, then appends BATCHES batches from each of its tasks and prints ``done``. Each
batch holds one event of the task's own stream (appended at its expected version) and one of
the stream every process shares (no expected version); ids are ``RUN-TASK-N-I``.
"""

from __future__ import annotations

import sys

import trio

from inert import ArgumentsAppended, CallKey, open_log
from inert.log import NewEvent

TASKS = 4
SHARED_STREAM = "shared"


def event(stream: str, event_id: str) -> NewEvent:
    key = CallKey(tenant="pg", conversation="c", turn="t", response="r", item=stream, call="x")
    return NewEvent(
        stream=stream,
        event_id=event_id,
        event=ArgumentsAppended(key=key, data=event_id.encode()),
    )


async def main(url: str, run: str, batches: int) -> None:
    async with open_log(url) as log:
        print("ready", flush=True)
        await trio.to_thread.run_sync(sys.stdin.readline)

        async def appender(task: int) -> None:
            stream = f"{run}-{task}"
            for number in range(batches):
                await log.append(
                    [
                        event(stream, f"{run}-{task}-{number}-0"),
                        event(SHARED_STREAM, f"{run}-{task}-{number}-1"),
                    ],
                    {stream: number},
                )

        async with trio.open_nursery() as nursery:
            for task in range(TASKS):
                nursery.start_soon(appender, task)
    print("done", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
