"""inert: streamed LLM tool calls that cannot act before they are finished, validated and
still wanted.

Everything public is re-exported here; the modules behind it are private.
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from . import events as _events
from . import log as _log
from .actors import (
    DEFAULT_LIMITS,
    ArgumentLimits,
    BusinessValidator,
    CallLimits,
    CallUnderValidation,
    FieldProblem,
    IllegalTransition,
    PermissionPolicy,
    Phase,
    ReplayDivergence,
    ToolDeclaration,
    ValidationRequested,
    ValidationResult,
    declaration_from_function,
    declarations_from_json,
)
from .events import *  # noqa: F403
from .log import *  # noqa: F403
from .projections import DispatchQueue, Ledger, LedgerRow, Projections, Status, StatusCue
from .runtime import (
    AsyncioRuntime,
    CollectorSettings,
    Dispatch,
    Executor,
    OperatorAuthorizer,
    PendingConfirmation,
    ReadyCall,
    Retention,
    Runtime,
    open_asyncio_runtime,
    open_runtime,
    trio_clock,
)

try:
    __version__ = version("inert")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = [  # noqa: PLE0604
    *_events.__all__,
    *_log.__all__,
    "PermissionPolicy",
    "FieldProblem",
    "CallUnderValidation",
    "BusinessValidator",
    "DEFAULT_LIMITS",
    "ArgumentLimits",
    "AsyncioRuntime",
    "CallLimits",
    "CollectorSettings",
    "Dispatch",
    "DispatchQueue",
    "Executor",
    "OperatorAuthorizer",
    "IllegalTransition",
    "Ledger",
    "LedgerRow",
    "PendingConfirmation",
    "Phase",
    "Projections",
    "ReadyCall",
    "ReplayDivergence",
    "Retention",
    "Runtime",
    "Status",
    "StatusCue",
    "ToolDeclaration",
    "ValidationRequested",
    "ValidationResult",
    "__version__",
    "declaration_from_function",
    "declarations_from_json",
    "open_asyncio_runtime",
    "open_runtime",
    "trio_clock",
]

if TYPE_CHECKING:
    from .runtime import LedgerMaterializer as LedgerMaterializer
    from .runtime import materialize_ledger as materialize_ledger

_NEEDS_PSYCOPG = frozenset({"LedgerMaterializer", "materialize_ledger"})


def __getattr__(name: str) -> object:
    """The PostgreSQL materializer on first use: psycopg is an optional dependency (the
    ``postgresql`` extra), so that ``import inert`` works without it (and, like
    ``PostgresLog``, it stays out of ``__all__`` so that a star import does too)."""
    if name in _NEEDS_PSYCOPG:
        from . import runtime  # noqa: PLC0415

        return getattr(runtime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
