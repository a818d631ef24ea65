"""One runtime process of a fault run (tests/jepsen.py), on a partitioned PostgreSQL log.

``python tests/jepsen_process.py URL NAME SEED JOURNAL [PLANT]`` opens
``open_partitioned_runtime`` on the log ``URL`` as process ``NAME`` and runs a seeded workload
through it: turns started in its own partitions, each with a call that needs no confirmation
and often one that does (confirmed or not, its confirmation valid for a few seconds at most),
some turns cancelled, tools disabled and enabled again by an operator; an executor claims every
ready call of its partitions and completes, fails, stops or keeps it (never reports); a probe
claims calls again at random (most claims refused). If its runtime stops (its log lost, the
server unreachable), it opens it again under the same name: it rejoins.

It prints ``ready`` once its runtime is open. It writes a journal (``JOURNAL``, JSON lines,
each with the time it was written) of what it was told: every append its log
acknowledged (partition, positions, event ids, types) and every dispatch its executors
received. The run checks the log against it.

Its standard input commands it: ``quiesce NAMES`` (comma-separated) stops the workload and waits
until exactly those processes are alive and it folds its share of the partitions (it journals
and prints ``settled``), ``drain`` (once every process has settled) waits until its partitions'
runtimes have answered everything in the log (it prints ``drained``), ``stop`` (or the end of
input) closes the runtime cleanly.

``PLANT`` names a bug planted in this process (``jepsen_plants``), for the harness to catch.
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import trio
from jepsen_plants import plant_in_process

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Dispatch,
    Event,
    InertError,
    LogError,
    PartitionedRuntime,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    TurnRef,
    open_partitioned_runtime,
)
from inert.events import ToolDisabled, ToolEnabled
from inert.log._log import Log
from inert.runtime._assignment import owned_by

TENANT = "acme"
OPERATOR = "operator:jepsen"
LEASE_TIME = 2.0
"""Seconds a process may be silent before its partitions and turns are taken over."""
SETTLE_TIMEOUT = 30.0
TOOLS = [
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
]


class Journal:
    """The journal of one process: a JSON object a line, flushed at once (a killed process
    keeps every line written before it died)."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = path.open("a", encoding="utf-8")

    def write(self, **entry: Any) -> None:
        self._file.write(json.dumps({"t": round(time.time(), 3), **entry}) + "\n")
        self._file.flush()


def journal_appends(journal: Journal) -> None:
    """Every append a log of this process acknowledges goes to the journal, once it returned."""
    append = Log.append

    async def journaled(self: Log, events: Any, expected_versions: Any = None) -> list[int]:
        # What was asked, before the append waits: a caller's list may change meanwhile.
        events = list(events)
        positions = await append(self, events, expected_versions)
        journal.write(
            kind="append",
            partition=getattr(self, "number", 0),
            positions=positions,
            event_ids=[new.event_id for new in events],
            types=[new.event.TAG for new in events],
        )
        return positions

    Log.append = journaled  # type: ignore[method-assign]


def call_events(key: CallKey, tool: str, data: bytes) -> list[Event]:
    """The events of a whole call alone in its response."""
    middle = len(data) // 2
    return [
        CallOpened(key=key, tool=tool, sequence=0),
        ArgumentsAppended(key=key, data=data[:middle], offset=0, first_sequence=1, last_sequence=1),
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


def key_in(turn: TurnRef, tool: str) -> CallKey:
    return CallKey(
        tenant=turn.tenant,
        conversation=turn.conversation,
        turn=turn.turn,
        response=f"{turn.turn}-{tool}",
        item=tool,
        call=tool,
    )


class Workload:
    """What one process does through its runtime, seeded, across its runtime's reopenings."""

    def __init__(self, name: str, seed: int, journal: Journal) -> None:
        self.name = name
        self.journal = journal
        self.rng = random.Random(f"{seed}/{name}")
        self.turns = 0
        self.fed: list[CallKey] = []
        self.quiescing = trio.Event()
        self.draining = trio.Event()
        self.stopping = trio.Event()
        self.expected: list[str] = []

    # --- feeding ---

    async def feed(self, runtime: PartitionedRuntime) -> None:
        while not self.quiescing.is_set():
            await trio.sleep(self.rng.uniform(0.05, 0.25))
            mine = runtime.partitions_owned()
            if not mine:
                continue
            self.turns += 1
            name = next(
                conversation
                for conversation in (f"{self.name}-t{self.turns}-{k}" for k in range(10_000))
                if runtime.partition_of(TENANT, conversation) in mine
            )
            try:
                await self.turn(runtime, TurnRef(tenant=TENANT, conversation=name, turn=name))
            except (LogError, trio.Cancelled):
                raise
            except InertError as refused:
                # Not this process's partition any more, a request no process answered in
                # time: the agent server would report it and go on.
                self.journal.write(kind="refused", error=f"{type(refused).__name__}: {refused}")

    async def turn(self, runtime: PartitionedRuntime, turn: TurnRef) -> None:
        rng = self.rng
        await runtime.start_turn(
            tenant=turn.tenant, conversation=turn.conversation, turn=turn.turn, principal="user:a"
        )
        weather = key_in(turn, "get_weather")
        events = call_events(weather, "get_weather", b'{"city": "Paris"}')
        email = key_in(turn, "send_email") if rng.random() < 0.5 else None
        if email is not None:
            events += call_events(email, "send_email", b'{"to": "bob@example.com"}')
        await runtime.feed(events)
        self.fed.append(weather)
        if email is not None:
            self.fed.append(email)
            if rng.random() < 0.6:
                await self.confirm(runtime, email, timedelta(seconds=rng.uniform(0.3, 4)))
        roll = rng.random()
        if roll < 0.12:
            await runtime.cancel_turn(turn, principal="user:a", reason="changed my mind")
        elif roll < 0.16:
            control: Any = ToolDisabled(
                tool="get_weather", tenant=TENANT, operator=OPERATOR, reason="incident"
            )
            await runtime.give_control(control)
            await trio.sleep(rng.uniform(0.1, 1))
            control = ToolEnabled(
                tool="get_weather", tenant=TENANT, operator=OPERATOR, reason="resolved"
            )
            await runtime.give_control(control)

    async def confirm(self, runtime: PartitionedRuntime, key: CallKey, valid: timedelta) -> None:
        core = runtime.core(runtime.partition_of(key.tenant, key.conversation))
        for _ in range(20):
            pending = await core.pending_confirmation(key)
            if pending is not None:
                await runtime.confirm(
                    key,
                    principal=pending.principal,
                    arguments_digest=pending.arguments_digest,
                    expires_in=valid,
                )
                return
            await trio.sleep(0.05)

    # --- executing ---

    async def execute(self, runtime: PartitionedRuntime) -> None:
        async with trio.open_nursery() as running:
            async for ready in runtime.ready_calls():
                dispatch = await self.claim(runtime, ready.key, f"{self.name}/executor")
                if dispatch is not None:
                    running.start_soon(self.run, runtime, dispatch)

    async def probe(self, runtime: PartitionedRuntime) -> None:
        while not self.quiescing.is_set():
            await trio.sleep(self.rng.uniform(0.2, 0.8))
            if self.fed:
                key = self.rng.choice(self.fed[-40:])
                await self.claim(runtime, key, f"{self.name}/probe")

    async def claim(
        self, runtime: PartitionedRuntime, key: CallKey, executor: str
    ) -> Dispatch | None:
        try:
            dispatch = await runtime.claim(key, executor=executor)
        except (LogError, trio.Cancelled):
            raise
        except InertError:
            # Refused (dispatched already, not ready, not this process's partition), or not
            # answered in time.
            return None
        self.journal.write(
            kind="dispatch",
            partition=runtime.partition_of(key.tenant, key.conversation),
            key=[key.tenant, key.conversation, key.turn, key.response, key.item, key.call],
            claim_id=dispatch.claim_id,
            tool=dispatch.tool,
            arguments_digest=dispatch.arguments_digest,
            principal=dispatch.principal,
            turn=[dispatch.turn.tenant, dispatch.turn.conversation, dispatch.turn.turn],
            tenant=dispatch.tenant,
        )
        return dispatch

    async def run(self, runtime: PartitionedRuntime, dispatch: Dispatch) -> None:
        roll = self.rng.random()
        if roll < 0.15:
            # The executor took the call and never says how it went.
            return
        try:
            if roll < 0.3:
                with dispatch.stop.scope() as running:
                    await trio.sleep(self.rng.uniform(0, 2))
                if running.cancelled_caught:
                    await runtime.stopped(dispatch)
                    return
            await trio.sleep(self.rng.uniform(0, 0.3))
            if roll < 0.85:
                await runtime.complete(dispatch)
            else:
                await runtime.fail(dispatch, "RuntimeError")
        except (LogError, trio.Cancelled):
            raise
        except InertError as refused:
            # A report the process can no longer make (taken for dead meanwhile: the outcome
            # is unknown), as a crash's would be lost.
            self.journal.write(kind="report_refused", error=f"{type(refused).__name__}")

    # --- the process's life ---

    async def work(self, runtime: PartitionedRuntime) -> None:
        """Feed, execute and probe until the run quiesces."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.feed, runtime)
            nursery.start_soon(self.execute, runtime)
            nursery.start_soon(self.probe, runtime)
            await self.quiescing.wait()
            nursery.cancel_scope.cancel()

    def rejoined(self, runtime: PartitionedRuntime, expected: list[str]) -> bool:
        """Whether exactly the expected processes are alive, as this one sees them, and it
        folds every partition assigned to it (and perhaps more: a partition is handed on only
        once its calls this process leases are over, and an executor may keep one forever)."""
        assignment = runtime.assignment()
        return (
            runtime.alive() == expected
            and set(assignment.values()) == set(expected)
            and set(owned_by(assignment, self.name)) <= set(runtime.partitions_owned())
        )

    async def settle(self, runtime: PartitionedRuntime) -> None:
        await self.quiescing.wait()
        expected = sorted(self.expected)
        with trio.move_on_after(SETTLE_TIMEOUT):
            while not self.rejoined(runtime, expected):
                with trio.move_on_after(0.1):
                    await runtime.changed()
        self.journal.write(
            kind="settled",
            ok=self.rejoined(runtime, expected),
            alive=runtime.alive(),
            expected=expected,
            owned=runtime.partitions_owned(),
        )
        print("settled", flush=True)
        # Every process has stopped its workload: what is in the log now is all there is to
        # answer.
        await self.draining.wait()
        with trio.move_on_after(SETTLE_TIMEOUT):
            await runtime.settle()
        print("drained", flush=True)

    async def serve(self, url: str) -> None:
        """Run the workload, opening the runtime again whenever it stops, until told to stop."""
        opened = 0
        while not self.stopping.is_set():
            opened += 1
            self.journal.write(kind="open", number=opened)
            try:
                async with open_partitioned_runtime(
                    log=url,
                    process=self.name,
                    tools=TOOLS,
                    operators=[OPERATOR],
                    lease_time=LEASE_TIME,
                ) as runtime:
                    if opened == 1:
                        print("ready", flush=True)
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self.work, runtime)
                        nursery.start_soon(self.settle, runtime)
                        await self.stopping.wait()
                        nursery.cancel_scope.cancel()
                self.journal.write(kind="left")
            except Exception as error:
                # Whatever stopped it, it opens its runtime again: it rejoins.
                self.journal.write(
                    kind="stopped", error=describe(error)[:800], inert=all_inert(error)
                )
                await trio.sleep(0.5)


def all_inert(error: BaseException) -> bool:
    """Whether every error inside is inert's own (a runtime stops with nothing else)."""
    if isinstance(error, BaseExceptionGroup):
        return all(all_inert(inner) for inner in error.exceptions)
    return isinstance(error, InertError)


def describe(error: BaseException) -> str:
    """The errors inside a group (a nursery's), not the group; where one is not inert's own, the
    place it was raised."""
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(describe(inner) for inner in error.exceptions)
    where = ""
    if not isinstance(error, InertError) and error.__traceback__ is not None:
        frames = traceback.extract_tb(error.__traceback__)[-5:]
        where = " (at " + ", ".join(f"{Path(f.filename).name}:{f.lineno}" for f in frames) + ")"
    return f"{type(error).__name__}: {error}{where}"


async def commands(workload: Workload) -> None:
    """Read the commands of standard input (in a thread: it blocks)."""
    while True:
        line = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
        word, _, rest = line.strip().partition(" ")
        if word == "quiesce":
            workload.expected = rest.split(",")
            workload.quiescing.set()
        elif word == "drain":
            workload.draining.set()
        elif word == "stop" or not line:
            workload.stopping.set()
            return


async def main(url: str, name: str, seed: int, journal_path: str, plant: str | None) -> None:
    journal = Journal(Path(journal_path))
    journal_appends(journal)
    workload = Workload(name, seed, journal)
    with plant_in_process(plant):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(commands, workload)
            await workload.serve(url)
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(
        main,
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        sys.argv[4],
        sys.argv[5] if len(sys.argv) > 5 else None,
    )
