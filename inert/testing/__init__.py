"""inert.testing: the deterministic simulator, its invariant checker and planted bugs.

``simulate(seed)`` drives the real runtime through a seeded plan of awkward event orders and
checks the contract's invariants (I1-I12) over the log it wrote; run your own tool declarations
and business check through it with ``simulate(seed, tools=[SimulatedTool(...)], check=...)``,
or name them for ``inert simulate --tools module:attribute`` (a ``ToolSuite`` or a list of
tools, ``load_suite``).
``simulate_cluster(seed, processes=K, partitions=P)`` runs the plan against ``K`` runtime
processes sharing a log of ``P`` partitions, killed, leaving and joining on the way.
``check_log`` checks any settled log, ``check_partitioned_log`` a partitioned one;
``planted(name)`` plants one of ``PLANTS`` for a block.
``FaultyLog`` wraps any log and injects seeded storage faults into its appends and deliveries.
``SkewedClock`` is a clock off true (ahead, behind, fast, slow, jumping) for a log in a test's
process; ``ClockSkew`` and ``FaketimeControl`` put a real child process's clock off true with
libfaketime.
"""

from ._checker import (
    InvariantChecker,
    Observation,
    PartitionedCheck,
    Violation,
    check_log,
    check_partitioned_log,
    strict_json_object,
)
from ._clocks import (
    ClockSkew,
    FaketimeControl,
    SkewedClock,
    faketime_unavailable,
    libfaketime,
)
from ._cluster_simulator import ClusterResult, simulate_cluster, simulate_cluster_many
from ._faults import (
    Fault,
    FaultRates,
    FaultyLog,
    InjectedFault,
    Injection,
    Stored,
    Tear,
    tear_memory_tail,
    tear_sqlite_tail,
)
from ._plants import PLANTS, UnknownPlant, plant_description, planted
from ._simulator import (
    RETENTIONS,
    SimulationFailed,
    SimulationResult,
    demo_check,
    log_hash,
    seeded_scheduling,
    simulate,
    simulate_many,
)
from ._suite import ToolSuite, load_suite
from ._workload import DEMO_TOOLS, SIMULATION_LIMITS, SimulatedTool

__all__ = [
    "DEMO_TOOLS",
    "PLANTS",
    "RETENTIONS",
    "SIMULATION_LIMITS",
    "ClockSkew",
    "ClusterResult",
    "FaketimeControl",
    "Fault",
    "FaultRates",
    "FaultyLog",
    "InjectedFault",
    "Injection",
    "InvariantChecker",
    "Observation",
    "PartitionedCheck",
    "SimulatedTool",
    "SimulationFailed",
    "SimulationResult",
    "SkewedClock",
    "Stored",
    "Tear",
    "ToolSuite",
    "UnknownPlant",
    "Violation",
    "check_log",
    "check_partitioned_log",
    "demo_check",
    "faketime_unavailable",
    "libfaketime",
    "load_suite",
    "log_hash",
    "plant_description",
    "planted",
    "seeded_scheduling",
    "simulate",
    "simulate_cluster",
    "simulate_cluster_many",
    "simulate_many",
    "strict_json_object",
    "tear_memory_tail",
    "tear_sqlite_tail",
]
