"""Contract suites for those who extend inert, to subclass in a test module: the tests a log
backend keeps (``LogContract``), and the two a provider adapter keeps: the awkward-order suite
(``AdapterContract``, with the scenarios, their steps and the portable renderer) and the
event-limit contract (``EventLimitContract``, with the wire it needs and the shapes of an
over-limit SSE event). They need pytest and pytest-trio, which ``import inert`` does not."""

from ._adapter import AdapterContract
from ._awkward import (
    SCENARIOS,
    TOOLS,
    WEATHER,
    CancelTurn,
    End,
    EndResponse,
    Expected,
    Fragment,
    GatedCheck,
    HoldValidation,
    Late,
    NewTurn,
    Open,
    OpenRuntime,
    Outcome,
    PortableRenderer,
    ReleaseValidation,
    Renderer,
    Repeat,
    Scenario,
    Stream,
    assert_outcome,
    run_scenario,
    runtimes_on,
    sqlite_runtimes,
)
from ._limits import EventLimitContract, LimitWire, Oversized, sse_fitting, sse_oversized
from ._log import LogContract, OpenLog, TickingClock

__all__ = [
    "SCENARIOS",
    "TOOLS",
    "WEATHER",
    "AdapterContract",
    "CancelTurn",
    "End",
    "EndResponse",
    "EventLimitContract",
    "Expected",
    "Fragment",
    "GatedCheck",
    "HoldValidation",
    "Late",
    "LimitWire",
    "LogContract",
    "NewTurn",
    "Open",
    "OpenLog",
    "OpenRuntime",
    "Outcome",
    "Oversized",
    "PortableRenderer",
    "ReleaseValidation",
    "Renderer",
    "Repeat",
    "Scenario",
    "Stream",
    "TickingClock",
    "assert_outcome",
    "run_scenario",
    "runtimes_on",
    "sqlite_runtimes",
    "sse_fitting",
    "sse_oversized",
]
