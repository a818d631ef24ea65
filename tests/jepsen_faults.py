"""The faults of a fault run (tests/jepsen.py): a registry of kinds, and a seeded schedule.

A schedule is made from the seed alone, before anything runs: which faults, on which process
(or the server), when and for how long. A kind says how to plan its detail (``plan``), how to
inflict it (``apply``) and how to end it (``heal``), given the run (``Target``): the
namespaces of the processes, their processes, the replicated pair where the run has one. A new
kind (a clock that jumps, say) is one more ``FaultKind`` registered in ``FAULT_KINDS``.

Every schedule begins with a ``cut`` of one process for three and a half to four and a half
lease times (as the run's length allows): the others must take its partitions and turns over
by lease while it is away, and it must rejoin.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Protocol

from attrs import frozen
from jepsen_process import LEASE_TIME

SERVER = "server"
"""The target of a fault of the server itself (a failover)."""


class Target(Protocol):
    """What a fault acts on: the run under way."""

    def namespace(self, label: str) -> object: ...

    def kill(self, label: str) -> None: ...

    def restart(self, label: str) -> None: ...

    def fail_over(self) -> None: ...


@frozen(kw_only=True)
class Fault:
    """One fault: ``kind`` inflicted on ``target`` at ``at`` seconds into the run, healed
    ``duration`` seconds later (a killed process is started again then, under a new name)."""

    at: float
    kind: str
    target: str
    duration: float
    detail: str = ""

    def line(self) -> str:
        detail = f" {self.detail}" if self.detail else ""
        return f"{self.at:.2f}s {self.kind}{detail} {self.target} for {self.duration:.2f}s"


@frozen(kw_only=True)
class FaultKind:
    """A kind of fault: its detail planned from the seed, how it is inflicted and healed.
    ``server``: it targets the server (and needs a replicated pair), not a process."""

    name: str
    plan: Callable[[random.Random], str]
    apply: Callable[[Target, Fault], None]
    heal: Callable[[Target, Fault], None]
    server: bool = False
    longest: float = 2 * LEASE_TIME


def _link(method: str, *arguments: Callable[[str], object]) -> Callable[[Target, Fault], None]:
    def act(run: Target, fault: Fault) -> None:
        space = run.namespace(fault.target)
        getattr(space, method)(*(make(fault.detail) for make in arguments))

    return act


def _heal_link(run: Target, fault: Fault) -> None:
    space = run.namespace(fault.target)
    space.heal()  # type: ignore[attr-defined]


def _nothing(_: random.Random) -> str:
    return ""


FAULT_KINDS: dict[str, FaultKind] = {}


def register(kind: FaultKind) -> FaultKind:
    """Add a kind of fault to the registry (a schedule draws from the kinds it is given)."""
    FAULT_KINDS[kind.name] = kind
    return kind


register(FaultKind(name="cut", plan=_nothing, apply=_link("cut"), heal=_heal_link))
register(
    FaultKind(
        name="one_way",
        plan=lambda rng: rng.choice(("out", "in")),
        apply=_link("one_way", str),
        heal=_heal_link,
    )
)
register(
    FaultKind(
        name="lossy",
        plan=lambda rng: f"{rng.uniform(0.1, 0.5):.2f}",
        apply=_link("lossy", float),
        heal=_heal_link,
    )
)
register(
    FaultKind(
        name="slow",
        plan=lambda rng: str(rng.choice((16, 32, 64))),
        apply=_link("slow", int),
        heal=_heal_link,
    )
)
register(
    FaultKind(
        name="kill",
        plan=_nothing,
        apply=lambda run, fault: run.kill(fault.target),
        heal=lambda run, fault: run.restart(fault.target),
    )
)
register(
    FaultKind(
        name="failover",
        plan=_nothing,
        apply=lambda run, _: run.fail_over(),
        heal=lambda run, fault: None,
        server=True,
        longest=0.0,
    )
)

LINK_KINDS = ("cut", "one_way", "lossy", "slow")
PROCESS_KINDS = (*LINK_KINDS, "kill")


def make_schedule(
    seed: int, labels: Sequence[str], seconds: float, kinds: Sequence[str]
) -> tuple[Fault, ...]:
    """The faults of a seed's run of ``seconds`` on the processes ``labels``, drawn from
    ``kinds``: a long cut, a failover where ``kinds`` has it, then up to four faults of the
    processes; faults of one target never overlap.
    The same for the same arguments."""
    rng = random.Random(f"{seed}/faults")
    busy = dict.fromkeys([*labels, SERVER], 0.0)
    at = rng.uniform(0.5, max(0.5, seconds - 4.5 * LEASE_TIME))
    first = Fault(
        at=at,
        kind="cut",
        target=rng.choice(labels),
        duration=min(rng.uniform(3.5, 4.5) * LEASE_TIME, seconds - at - 0.2),
    )
    faults = [first]
    busy[first.target] = first.at + first.duration
    if "failover" in kinds:
        # A run that may fail over does, once, at a random moment.
        faults.append(
            Fault(at=rng.uniform(1, seconds - 1), kind="failover", target=SERVER, duration=0.0)
        )
        busy[SERVER] = seconds
    for _ in range(rng.randint(1, 4)):
        kind = FAULT_KINDS[rng.choice(kinds)]
        target = SERVER if kind.server else rng.choice(labels)
        if kind.server:
            continue
        duration = rng.uniform(0.3, kind.longest) if kind.longest else 0.0
        at = max(rng.uniform(0.3, seconds - 1), busy[target] + 0.3)
        if at + duration > seconds:
            continue
        faults.append(
            Fault(at=at, kind=kind.name, target=target, duration=duration, detail=kind.plan(rng))
        )
        busy[target] = at + duration
    return tuple(sorted(faults, key=lambda fault: fault.at))
