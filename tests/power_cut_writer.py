"""A child process for the power-loss test: appends through the power-cut VFS until it is killed.

Usage: python power_cut_writer.py SHIM PATH SYNCHRONOUS RUN. SHIM is the compiled
``powercut_vfs.c``. Each acknowledged event is printed as ``ack POSITION EVENT_ID`` once its
append returned; the VFS prints its own lines (``#sync wal``, ...) to the same stdout, so that
the parent reads both in the order they happened. Every event's id is ``RUN-TASK-N-I`` and its
content is derived from the id, so that the parent can check whatever it reads back.
"""

from __future__ import annotations

import ctypes
import hashlib
import sqlite3
import sys
from typing import Literal, cast

import trio

from inert import ArgumentsAppended, CallKey
from inert.log import NewEvent, SQLiteLog

Synchronous = Literal["FULL", "NORMAL"]

TASKS = 4
PAYLOAD_REPEATS = 24
"""Argument bytes per event, in SHA-256 digests: large enough that SQLite's automatic
checkpoint (every 1,000 WAL pages) comes after a few hundred appends, so that cuts land in it."""


def payload_of(event_id: str) -> bytes:
    return hashlib.sha256(event_id.encode()).digest() * PAYLOAD_REPEATS


def event_of(event_id: str) -> NewEvent:
    task = event_id.split("-")[1]
    key = CallKey(tenant="power", conversation="c", turn="t", response="r", item=task, call="x")
    return NewEvent(
        stream=f"task-{task}",
        event_id=event_id,
        event=ArgumentsAppended(key=key, data=payload_of(event_id)),
    )


def load_shim(path: str) -> ctypes.CDLL:
    # sqlite3 is imported above, so libsqlite3 is loaded already and the shim binds to the same
    # copy, whose default VFS the stdlib's connections then use.
    shim = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    code = shim.powercut_register(sys.stdout.fileno())
    if code != 0:
        raise SystemExit(f"powercut_register failed with SQLite code {code}")
    return shim


async def main(shim_path: str, path: str, synchronous: Synchronous, run: str) -> None:
    shim = load_shim(shim_path)
    async with SQLiteLog.open(path, synchronous=synchronous) as log:
        if shim.powercut_tracked_opens() == 0:
            raise SystemExit(
                f"the power-cut VFS did not see the log open (SQLite {sqlite3.sqlite_version}):"
                " Python's sqlite3 uses another copy of libsqlite3"
            )

        async def appender(task: int) -> None:
            for number in range(1_000_000):
                batch = [event_of(f"{run}-{task}-{number}-{i}") for i in range(1 + number % 3)]
                positions = await log.append(batch)
                sys.stdout.write(
                    "".join(
                        f"ack {position} {new.event_id}\n"
                        for position, new in zip(positions, batch, strict=True)
                    )
                )
                sys.stdout.flush()

        async with trio.open_nursery() as nursery:
            for task in range(TASKS):
                nursery.start_soon(appender, task)


if __name__ == "__main__":
    shim_path, path, synchronous, run = sys.argv[1:]
    trio.run(main, shim_path, path, cast(Synchronous, synchronous), run)
