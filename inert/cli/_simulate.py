"""``inert simulate``: the deterministic simulator and its invariant checker, from the command
line, with the demo tools or the user's own (``--tools module:attribute`` or a TOOLS.json)."""

from __future__ import annotations

import argparse
import json
import sys

from ..testing import (
    PLANTS,
    RETENTIONS,
    ClusterResult,
    SimulationFailed,
    SimulationResult,
    plant_description,
    simulate_cluster_many,
    simulate_many,
)
from ..testing._cluster_simulator import MAX_PROCESSES
from ._arguments import MAX_KEYS, MAX_SEEDS, MAX_WORKERS, count_argument, text_argument
from ._common import Progress

DEFAULT_PROCESSES = 3
DEFAULT_PARTITIONS = 4
MAX_PARTITIONS = 64


def simulate_command(arguments: argparse.Namespace) -> None:
    if arguments.list_plants:
        for name in PLANTS:
            print(f"{name}: {plant_description(name)}")
        return
    if arguments.plant is not None:
        plant_description(arguments.plant)
    cluster = arguments.processes is not None or arguments.partitions is not None
    progress = Progress("simulate: seeds", arguments.seeds)
    seeds = range(arguments.seed, arguments.seed + arguments.seeds)
    results: list[SimulationResult] | list[ClusterResult]
    try:
        if cluster:
            results = simulate_cluster_many(
                seeds,
                keys=arguments.keys,
                processes=arguments.processes or DEFAULT_PROCESSES,
                partitions=arguments.partitions or DEFAULT_PARTITIONS,
                plant=arguments.plant,
                retention=arguments.retention,
                workers=arguments.workers,
                progress=progress.advance,
                suite=arguments.tools,
            )
        else:
            results = simulate_many(
                seeds,
                keys=arguments.keys,
                plant=arguments.plant,
                retention=arguments.retention,
                workers=arguments.workers,
                progress=progress.advance,
                suite=arguments.tools,
            )
    finally:
        progress.finish()
    for result in results:
        if arguments.json:
            print(
                json.dumps(
                    {
                        "seed": result.seed,
                        "keys": result.keys,
                        "plant": result.plant,
                        "retention": result.retention,
                        "steps": result.steps,
                        "actions": result.actions,
                        "restarts": result.restarts,
                        "states": result.states,
                        "log_hash": result.log_hash,
                        "violations": [
                            {
                                "invariant": violation.invariant,
                                "key": violation.key,
                                "position": violation.position,
                                "detail": violation.detail,
                            }
                            for violation in result.violations
                        ],
                        "command": result.command,
                        "tools": result.suite,
                        **_cluster_fields(result),
                    },
                    sort_keys=True,
                )
            )
            continue
        for violation in result.violations:
            print(f"seed {result.seed}: {violation.line()}")
        if result.violations:
            print(f"seed {result.seed}: replay it with: {result.command}")
    steps = sum(result.steps for result in results)
    found = sum(len(result.violations) for result in results)
    tools = f", tools from {arguments.tools}" if arguments.tools else ""
    if cluster:
        tools += (
            f", {arguments.processes or DEFAULT_PROCESSES} processes on"
            f" {arguments.partitions or DEFAULT_PARTITIONS} partitions"
        )
    summary = (
        f"{len(results)} seeds run twice, {arguments.keys} call keys each{tools}:"
        f" {steps:,} steps checked, {found} violations"
    )
    print(summary, file=sys.stderr if arguments.json else sys.stdout)
    failed = [result for result in results if result.violations]
    if failed:
        raise SimulationFailed(
            f"{found} violations in {len(failed)} of {len(results)} seeds; replay the first"
            f" with: {failed[0].command}"
        )


def _cluster_fields(result: SimulationResult | ClusterResult) -> dict[str, object]:
    if not isinstance(result, ClusterResult):
        return {}
    return {
        "processes": result.processes,
        "partitions": result.partitions,
        "kills": result.kills,
        "stalls": result.stalls,
        "joins": result.joins,
        "leaves": result.leaves,
        "leases_moved": result.leases_moved,
        "unknown_outcomes": result.unknown_outcomes,
    }


def simulate_arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--tools",
        metavar="MODULE:ATTRIBUTE|TOOLS.json",
        type=text_argument,
        help="your own tools instead of the demo's: a ToolSuite or a list of tools"
        " (ToolDeclaration, SimulatedTool or function values) in a module importable from the"
        " current folder, or a TOOLS.json file as feed reads it",
    )
    sub.add_argument(
        "--seeds", type=count_argument(MAX_SEEDS), default=1, help="how many seeds (default 1)"
    )
    sub.add_argument("--seed", type=int, default=0, help="the first seed (default 0)")
    sub.add_argument(
        "--keys",
        type=count_argument(MAX_KEYS),
        default=200,
        help="concurrent call keys per seed (default 200)",
    )
    sub.add_argument(
        "--plant", metavar="NAME", type=text_argument, help="plant a bug (see --list-plants)"
    )
    sub.add_argument("--list-plants", action="store_true", help="list the bugs that can be planted")
    sub.add_argument(
        "--retention",
        choices=sorted(RETENTIONS),
        default="default",
        help="the runtime's retention policy (default: the runtime's own)",
    )
    sub.add_argument(
        "--workers",
        type=count_argument(MAX_WORKERS),
        default=1,
        help="processes running seeds (default 1)",
    )
    sub.add_argument(
        "--processes",
        type=count_argument(MAX_PROCESSES),
        help=f"run the runtime as this many processes on one partitioned log, killed, leaving"
        f" and joining on the way (default {DEFAULT_PROCESSES} when --partitions is given)",
    )
    sub.add_argument(
        "--partitions",
        type=count_argument(MAX_PARTITIONS),
        help="the partitions of calls of that log, 2 at least (default"
        f" {DEFAULT_PARTITIONS} when --processes is given)",
    )
    sub.add_argument("--json", action="store_true", help="one JSON object per seed")
