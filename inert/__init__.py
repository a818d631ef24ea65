"""inert: streamed LLM tool calls that cannot act before they are finished, validated and
still wanted.

What an agent server embedding inert needs is here: the runtime, turns and call keys, tool
declarations and their validation, the events a provider adapter emits, the views of the calls,
the log's contract and the errors. The rest lives in its subpackage: the whole event vocabulary
in ``inert.events``, the log backends in ``inert.log``, provider adapters in ``inert.adapters``,
the call state machine in ``inert.actors``, the projections in ``inert.projections``, tracing in
``inert.tracing`` and the reliability harness in ``inert.testing``.
"""

import inspect
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

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
    ValidationResult,
    declaration_from_function,
    declarations_from_json,
)
from .adapters import ProtocolError
from .events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    CodecError,
    ConfigurationError,
    ConfirmationRefused,
    ConflictError,
    DuplicateEventError,
    Event,
    InertError,
    InputRefused,
    IntentScope,
    LogDamaged,
    LogError,
    LogNotFound,
    NotOwner,
    RecordedEvent,
    RefusedError,
    RequestRefused,
    RequestTimedOut,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    RuntimeClosed,
    ServerToolCalled,
    StreamLost,
    StreamResumed,
    TerminalRef,
    TextReceived,
    TraceContext,
    TurnRef,
)
from .log import Log, open_log
from .projections import DispatchQueue, Ledger, LedgerRow, Status, StatusCue
from .runtime import (
    AsyncioRuntime,
    CollectorSettings,
    Dispatch,
    Executor,
    InputAnswer,
    OperatorAuthorizer,
    PartitionedRuntime,
    PendingConfirmation,
    PendingInput,
    ReadyCall,
    Retention,
    Runtime,
    StopSignal,
    StreamFeed,
    feed_stream,
    open_asyncio_runtime,
    open_partitioned_runtime,
    open_runtime,
    trio_clock,
)

try:
    __version__ = version("inert")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0"

__all__ = [
    "DEFAULT_LIMITS",
    "ArgumentLimits",
    "ArgumentsAppended",
    "AsyncioRuntime",
    "BusinessValidator",
    "CallEnded",
    "CallKey",
    "CallLimits",
    "CallOpened",
    "CallUnderValidation",
    "ClaimRefused",
    "CodecError",
    "CollectorSettings",
    "ConfigurationError",
    "ConfirmationRefused",
    "ConflictError",
    "Dispatch",
    "DispatchQueue",
    "DuplicateEventError",
    "Event",
    "Executor",
    "FieldProblem",
    "IllegalTransition",
    "InertError",
    "InputAnswer",
    "InputRefused",
    "IntentScope",
    "Ledger",
    "LedgerRow",
    "Log",
    "LogDamaged",
    "LogError",
    "LogNotFound",
    "NotOwner",
    "OperatorAuthorizer",
    "PartitionedRuntime",
    "PendingConfirmation",
    "PendingInput",
    "PermissionPolicy",
    "Phase",
    "ProtocolError",
    "ReadyCall",
    "RecordedEvent",
    "RefusedError",
    "ReplayDivergence",
    "RequestRefused",
    "RequestTimedOut",
    "ResponseEndReason",
    "ResponseEnded",
    "ResponseRef",
    "Retention",
    "Runtime",
    "RuntimeClosed",
    "ServerToolCalled",
    "Status",
    "StatusCue",
    "StopSignal",
    "StreamFeed",
    "StreamLost",
    "StreamResumed",
    "TerminalRef",
    "TextReceived",
    "ToolDeclaration",
    "TraceContext",
    "TurnRef",
    "ValidationResult",
    "__version__",
    "declaration_from_function",
    "declarations_from_json",
    "feed_stream",
    "open_asyncio_runtime",
    "open_log",
    "open_partitioned_runtime",
    "open_runtime",
    "trio_clock",
]


def _fix_up_module_metadata() -> None:
    """Name this package as the home of the functions and errors it hands out, as trio does:
    tracebacks and documentation then show ``inert.ClaimRefused``, where users import it from.

    Classes that hold state keep the module that defines them: attrs and cattrs resolve their
    annotations in it, and a snapshot's stamp names them by it.
    """
    for name in __all__:
        value = globals()[name]
        handed_out = inspect.isfunction(value) or (
            isinstance(value, type) and issubclass(value, Exception)
        )
        if handed_out and value.__module__.startswith(f"{__name__}."):
            value.__module__ = __name__


_fix_up_module_metadata()

if TYPE_CHECKING:
    from .runtime import LedgerMaterializer as LedgerMaterializer
    from .runtime import materialize_ledger as materialize_ledger

_NEEDS_PSYCOPG = frozenset({"LedgerMaterializer", "materialize_ledger"})


def __getattr__(name: str) -> object:
    """The PostgreSQL materializer on first use: psycopg is an optional dependency (the
    ``postgresql`` extra), so that ``import inert`` works without it (and it stays out of
    ``__all__`` so that a star import does too)."""
    if name in _NEEDS_PSYCOPG:
        from . import runtime  # noqa: PLC0415

        return getattr(runtime, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
