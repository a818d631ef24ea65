"""What happens to the processes of a cluster simulation, and the operator controls given.

Made once per seed, before anything runs, from the seed alone (as ``_workload``'s plan): when
processes join, leave, are killed or pause, and which controls are given when. Pure: no trio,
no storage.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from attrs import frozen

from ..events import (
    OperatorControl,
    ResponseQuarantined,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
)
from ._workload import TENANTS, Control

PER_CONVERSATION = 5
"""Call keys per conversation: many conversations, spread over every partition."""


@frozen(kw_only=True)
class Membership:
    """A change of who runs, at a virtual time: ``join`` (a new process), ``leave`` (a process
    stops its executor and closes its runtime), ``kill`` (a process's tasks are cancelled where
    they are), ``stall`` (a process's heartbeats are held back for longer than the lease time
    while it runs on: the others take its partitions and turns over, and it decides on)."""

    at: float
    action: str


@frozen(kw_only=True)
class ClusterPlan:
    """What happens to the processes of a seed, and the operator controls given (the plan's
    and more)."""

    changes: tuple[Membership, ...]
    controls: tuple[Control, ...]


def make_cluster_plan(
    seed: int, controls: Sequence[Control], responses: Sequence[str], tools: Sequence[str]
) -> ClusterPlan:
    """The seed's changes of processes and its controls: the same for the same arguments."""
    rng = random.Random(f"{seed}/cluster")
    changes = [
        Membership(
            at=rng.uniform(1, 30),
            action=rng.choices(("kill", "join", "leave", "stall"), weights=(4, 4, 2, 3))[0],
        )
        for _ in range(rng.randint(1, 5))
    ]
    more = list(controls)
    if rng.random() < 0.5:
        at, tool, tenant = rng.uniform(1, 20), rng.choice(tools), rng.choice((*TENANTS, None))
        more.append(Control(at=at, action="disable", target=tool, tenant=tenant))
        more.append(
            Control(at=at + rng.uniform(0.5, 4), action="enable", target=tool, tenant=tenant)
        )
    if responses and rng.random() < 0.4:
        more.append(
            Control(
                at=rng.uniform(1, 20),
                action="quarantine",
                target=rng.choice(responses),
                tenant=rng.choice((*TENANTS, None)),
            )
        )
    if rng.random() < 0.2:
        at, tenant = rng.uniform(1, 20), rng.choice(TENANTS)
        more.append(Control(at=at, action="stop", target=tenant, tenant=tenant))
        more.append(
            Control(at=at + rng.uniform(0.5, 3), action="resume", target=tenant, tenant=tenant)
        )
    return ClusterPlan(
        changes=tuple(sorted(changes, key=lambda change: change.at)),
        controls=tuple(sorted(more, key=lambda control: control.at)),
    )


def control_event(control: Control, operator: str) -> OperatorControl:
    """The operator control event a planned control gives, given by ``operator``."""
    reason = "simulated incident"
    match control.action:
        case "quarantine":
            return ResponseQuarantined(
                response=control.target, tenant=control.tenant, operator=operator, reason=reason
            )
        case "disable":
            return ToolDisabled(
                tool=control.target, tenant=control.tenant, operator=operator, reason=reason
            )
        case "enable":
            return ToolEnabled(
                tool=control.target, tenant=control.tenant, operator=operator, reason=reason
            )
        case "stop":
            return TenantStopped(tenant=control.target, operator=operator, reason=reason)
    return TenantResumed(tenant=control.target, operator=operator, reason=reason)
