"""inert.testing: the deterministic simulator, its invariant checker and planted bugs.

``simulate(seed)`` drives the real runtime through a seeded plan of awkward event orders and
checks the contract's invariants (I1-I12) over the log it wrote; run your own tool declarations
and business check through it with ``simulate(seed, tools=[SimulatedTool(...)], check=...)``,
or name them for ``inert simulate --tools module:attribute`` (a ``ToolSuite`` or a list of
tools, ``load_suite``).
``check_log`` checks any settled log; ``planted(name)`` plants one of ``PLANTS`` for a block.
``FaultyLog`` wraps any log and injects seeded storage faults into its appends and deliveries.
"""

from ._checker import InvariantChecker, Observation, Violation, check_log, strict_json_object
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
    "Fault",
    "FaultRates",
    "FaultyLog",
    "InjectedFault",
    "Injection",
    "InvariantChecker",
    "Observation",
    "SimulatedTool",
    "SimulationFailed",
    "SimulationResult",
    "Stored",
    "Tear",
    "ToolSuite",
    "UnknownPlant",
    "Violation",
    "check_log",
    "demo_check",
    "load_suite",
    "log_hash",
    "plant_description",
    "planted",
    "seeded_scheduling",
    "simulate",
    "simulate_many",
    "strict_json_object",
    "tear_memory_tail",
    "tear_sqlite_tail",
]
