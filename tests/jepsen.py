"""Seeded fault runs: runtime processes in network namespaces of their own, on a partitioned
PostgreSQL log, through faults of their links, kills and failovers; then the whole log checked.

One run (``run_once``): a log of ``PARTITIONS`` partitions in a schema of its own on a cluster
made for the runs (``ha_support``: a single cluster, or a synchronously replicated pair where
the run may fail over), listening on the links of the namespaces; ``PROCESSES`` runtime
processes (tests/jepsen_process.py), each in a namespace of its own (tests/netns_support.py),
run a seeded workload for ``seconds`` while the seed's schedule of faults
(tests/jepsen_faults.py) is inflicted and healed; then every link is healed, the processes
settle and stop, and the log is read whole through a new connection and checked against their
journals (tests/jepsen_check.py).

A run names its seed, its fault schedule and the command that runs it again:
``python tests/jepsen.py --seed N [--kinds cut,kill,...] [--failover] [--plant NAME]``.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

import trio
from attrs import frozen
from ha_support import DATABASE, ReplicatedPair, replicated_pair, single_cluster
from jepsen_check import Cut, check_run, read_journal
from jepsen_faults import FAULT_KINDS, PROCESS_KINDS, Fault, make_schedule
from jepsen_process import LEASE_TIME
from netns_support import NETWORK, Namespace, namespaces

from inert import open_log
from inert.events import RecordedEvent
from inert.testing import Violation

PROCESSES = 3
PARTITIONS = 8
SECONDS = 12.0
"""Seconds of workload under faults, in a run."""
DRAIN = 2.5 * LEASE_TIME
"""Seconds the processes run on after every fault healed, before they settle: a process killed
last is found dead and buried meanwhile."""
SETTLE_TIMEOUT = 45.0
STOP_TIMEOUT = 30.0
PROCESS = Path(__file__).with_name("jepsen_process.py")
ROOT = Path(__file__).parent.parent


@frozen(kw_only=True)
class RunResult:
    """What one run did and found."""

    seed: int
    schedule: tuple[Fault, ...]
    violations: tuple[Violation, ...]
    steps: int
    appends: int
    dispatches: int
    reopened: int
    """Times a process's runtime stopped (its log unreachable) and it opened it again."""
    leases_lost: int
    """Partitions where a process cut off lost the turns it held, by lease, while cut off."""
    stalled: int
    """Partitions where it kept them, nobody writing there while it was cut off."""
    seconds: float
    command: str

    @property
    def ok(self) -> bool:
        return not self.violations

    def report(self) -> str:
        faults = "; ".join(fault.line() for fault in self.schedule)
        lines = [
            f"seed {self.seed}: {'ok' if self.ok else 'FAILED'} in {self.seconds:.1f}s,"
            f" {self.steps} events checked, {self.appends} appends acknowledged,"
            f" {self.dispatches} dispatches, {self.reopened} runtimes reopened,"
            f" turns lost by lease in {self.leases_lost} partitions, {self.stalled} stalled;"
            f" faults: {faults}",
            f"  run again: {self.command}",
        ]
        lines += [f"  {violation.line()}" for violation in self.violations[:20]]
        return "\n".join(lines)


class _Run:
    """The processes of one run and what happens to them (the ``Target`` of its faults)."""

    def __init__(  # noqa: PLR0917
        self,
        spaces: dict[str, Namespace],
        url_of: dict[str, str],
        seed: int,
        journals: Path,
        plant: str | None,
        pair: ReplicatedPair | None,
    ) -> None:
        self.spaces = spaces
        self.url_of = url_of
        self.seed = seed
        self.journals = journals
        self.plant = plant
        self.pair = pair
        self.live: dict[str, tuple[str, subprocess.Popen[str]]] = {}
        self.departed: list[str] = []
        self.gone: list[tuple[str, subprocess.Popen[str]]] = []
        self._said: dict[str, list[str]] = {}
        self.exits: dict[str, int] = {}
        self.restarts = dict.fromkeys(spaces, 0)
        self.cut_since: dict[str, float] = {}
        self.cuts: list[Cut] = []
        self._errors: list[IO[str]] = []

    def namespace(self, label: str) -> Namespace:
        return self.spaces[label]

    def start(self, label: str) -> None:
        number = self.restarts[label]
        name = label if not number else f"{label}r{number}"
        errors = (self.journals / f"{name}.stderr").open("w")
        self._errors.append(errors)
        command = [
            sys.executable,
            str(PROCESS),
            self.url_of[label],
            name,
            str(self.seed),
            str(self.journals / f"{name}.jsonl"),
            *([self.plant] if self.plant else []),
        ]
        # The processes run this checkout's inert, as the run does.
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        process = subprocess.Popen(
            self.spaces[label].command(*command),
            env={**os.environ, "PYTHONPATH": path},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        self.live[label] = (name, process)

    def kill(self, label: str) -> None:
        name, process = self.live.pop(label)
        process.kill()
        process.wait()
        self.gone.append((name, process))
        self.departed.append(name)

    def restart(self, label: str) -> None:
        self.restarts[label] += 1
        self.start(label)

    def fail_over(self) -> None:
        assert self.pair is not None
        self.pair.fail_over("SELECT 0")

    def apply(self, fault: Fault) -> None:
        if fault.kind == "cut":
            self.cut_since[fault.target] = time.time()
        FAULT_KINDS[fault.kind].apply(self, fault)

    def heal(self, fault: Fault) -> None:
        FAULT_KINDS[fault.kind].heal(self, fault)
        began = self.cut_since.pop(fault.target, None)
        if began is not None and fault.target in self.live:
            self.cuts.append(
                Cut(process=self.live[fault.target][0], began=began, healed=time.time())
            )

    def tell(self, line: str) -> None:
        for _, process in self.live.values():
            try:
                assert process.stdin is not None
                process.stdin.write(line + "\n")
                process.stdin.flush()
            except (BrokenPipeError, ValueError):
                continue

    def hear(self, word: str) -> None:
        """Until every live process said ``word`` (each says it once it has, or gives up)."""
        deadline = time.monotonic() + SETTLE_TIMEOUT
        for name, process in self.live.values():
            assert process.stdout is not None
            said = self._said.setdefault(name, [])
            while word not in said and time.monotonic() < deadline:
                # Unbuffered, and never past the deadline: a process that hangs says nothing.
                ready, _, _ = select.select([process.stdout], [], [], 0.2)
                if ready:
                    chunk = os.read(process.stdout.fileno(), 4096).decode()
                    if not chunk:
                        break
                    said.extend(chunk.split())

    def settle_and_stop(self) -> None:
        names = sorted(name for name, _ in self.live.values())
        self.tell(f"quiesce {','.join(names)}")
        self.hear("settled")
        self.tell("drain")
        self.hear("drained")
        self.tell("stop")
        for name, process in self.live.values():
            try:
                self.exits[name] = process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                self.exits[name] = process.wait()

    def close(self) -> None:
        for _, process in [*self.live.values(), *self.gone]:
            if process.poll() is None:
                process.kill()
                process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
        for errors in self._errors:
            errors.close()


def _timeline(schedule: Sequence[Fault]) -> list[tuple[float, int, Fault]]:
    """When each fault is inflicted (0) and healed (1), in order."""
    moments = [(fault.at, 0, fault) for fault in schedule]
    moments += [(fault.at + fault.duration, 1, fault) for fault in schedule]
    return sorted(moments, key=lambda moment: (moment[0], moment[1]))


async def _read_whole(url: str) -> dict[int, list[RecordedEvent]]:
    async with open_log(url, create=False) as log:
        records = {0: await log.read()}
        for number in log.call_partitions():
            records[number] = await log.partition(number).read()
    return records


async def _create(url: str) -> None:
    async with open_log(url, create=True, partitions=PARTITIONS):
        pass


@contextmanager
def server(*, failover: bool) -> Iterator[tuple[ReplicatedPair | None, list[int]]]:
    """The cluster a run's log lives on: a synchronously replicated pair for a run that may
    fail over, else a single cluster; and its ports (the primary's first)."""
    trusted = str(NETWORK)
    if failover:
        with replicated_pair(synchronous=True, trusted=trusted) as pair:
            yield pair, [pair.primary_port, pair.standby_port]
    else:
        with single_cluster(trusted=trusted) as port:
            yield None, [port]


def _url(host: str, ports: Sequence[str | int], schema: str) -> str:
    hosts = ",".join(f"{host}:{port}" for port in ports)
    return (
        f"postgresql://postgres@{hosts}/{DATABASE}?schema={schema}"
        "&target_session_attrs=read-write&connect_timeout=3"
    )


def _dump(records: dict[int, list[RecordedEvent]], path: Path) -> None:
    """The log, a line an event, beside the journals of a failed run."""
    with path.open("w") as out:
        for number, rows in sorted(records.items()):
            for recorded in rows:
                out.write(
                    f"{number} {recorded.position} {recorded.recorded_at.time()}"
                    f" {recorded.stream} {recorded.event!r}\n"
                )


def rerun_command(
    seed: int, kinds: Sequence[str], failover: bool, plant: str | None, seconds: float
) -> str:
    named = ",".join(kind for kind in kinds if kind != "failover")
    command = f"python tests/jepsen.py --seed {seed} --kinds {named} --seconds {seconds:g}"
    if failover:
        command += " --failover"
    if plant:
        command += f" --plant {plant}"
    return command


def run_once(
    seed: int,
    *,
    kinds: Sequence[str] = PROCESS_KINDS,
    failover: bool = False,
    plant: str | None = None,
    seconds: float = SECONDS,
    ports: Sequence[int] | None = None,
    pair: ReplicatedPair | None = None,
    schedule: Sequence[Fault] | None = None,
) -> RunResult:
    """One seeded run on the cluster at ``ports`` (made for it where none is given), checked."""
    kinds = [*kinds, "failover"] if failover and "failover" not in kinds else list(kinds)
    if ports is None:
        with server(failover=failover) as (made, made_ports):
            return run_once(
                seed,
                kinds=kinds,
                failover=failover,
                plant=plant,
                seconds=seconds,
                ports=made_ports,
                pair=made,
                schedule=schedule,
            )
    labels = [f"p{number}" for number in range(1, PROCESSES + 1)]
    if schedule is None:
        schedule = make_schedule(seed, labels, seconds, kinds)
    started = time.monotonic()
    schema = f"inert_jepsen_{uuid.uuid4().hex[:12]}"
    trio.run(_create, _url("127.0.0.1", ports, schema))
    journals = Path(tempfile.mkdtemp(prefix="inert-jepsen-"))
    with ExitStack() as stack:
        spaces = stack.enter_context(namespaces(labels, seed=seed))
        run = _Run(
            spaces,
            {label: _url(space.host, ports, schema) for label, space in spaces.items()},
            seed,
            journals,
            plant,
            pair,
        )
        stack.callback(run.close)
        for label in labels:
            run.start(label)
        # Starting a process takes seconds on a busy machine: the faults begin once all run.
        run.hear("ready")
        began = time.monotonic()
        for moment, healing, fault in _timeline(schedule):
            time.sleep(max(0.0, began + moment - time.monotonic()))
            (run.heal if healing else run.apply)(fault)
        time.sleep(max(0.0, began + seconds - time.monotonic()) + DRAIN)
        run.settle_and_stop()
    records = trio.run(_read_whole, _url("127.0.0.1", ports, schema))
    journal = {path.stem: read_journal(path) for path in sorted(journals.glob("*.jsonl"))}
    violations, steps, leases = check_run(
        records,
        journal,
        departed=run.departed,
        final=sorted(run.exits),
        cuts=run.cuts,
    )
    for name, code in sorted(run.exits.items()):
        if code != 0:
            errors = (journals / f"{name}.stderr").read_text()[-800:]
            violations.append(
                Violation(invariant="crash", key="", detail=f"{name} exited {code}: {errors}")
            )
    if not violations:
        shutil.rmtree(journals, ignore_errors=True)
    else:
        _dump(records, journals / "log.txt")
        violations.append(
            Violation(invariant="journals", key="", detail=f"kept in {journals}, schema {schema}")
        )
    entries = [entry for entries in journal.values() for entry in entries]
    return RunResult(
        seed=seed,
        schedule=tuple(schedule),
        violations=tuple(violations),
        steps=steps,
        appends=sum(entry["kind"] == "append" for entry in entries),
        dispatches=sum(entry["kind"] == "dispatch" for entry in entries),
        reopened=sum(entry["kind"] == "stopped" for entry in entries),
        leases_lost=leases.lost,
        stalled=leases.stalled,
        seconds=time.monotonic() - started,
        command=rerun_command(seed, kinds, failover, plant, seconds),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--kinds", default=",".join(PROCESS_KINDS))
    parser.add_argument("--failover", action="store_true")
    parser.add_argument("--plant")
    parser.add_argument("--seconds", type=float, default=SECONDS)
    arguments = parser.parse_args()
    result = run_once(
        arguments.seed,
        kinds=[kind for kind in arguments.kinds.split(",") if kind != "failover"],
        failover=arguments.failover,
        plant=arguments.plant,
        seconds=arguments.seconds,
    )
    print(result.report())
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
