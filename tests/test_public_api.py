"""The public API: what ``import inert`` hands out is a decision, pinned here."""

from __future__ import annotations

import inspect

import inert
import inert.events
import inert.log

# A change to this list is a change to the API every embedder sees: make it here on purpose.
PUBLIC = [
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

PLUMBING = ["CONVERTER", "DEFAULT_CODEC", "Codec", "MemoryStore", "NewEvent", "NO_STREAM"]


def test_the_public_api_is_the_pinned_one() -> None:
    """``inert.__all__`` is exactly the pinned list, and every name in it is importable."""
    assert sorted(inert.__all__) == sorted(PUBLIC)
    assert all(hasattr(inert, name) for name in PUBLIC)


def test_plumbing_stays_in_its_subpackage() -> None:
    """The codec's and the log's plumbing is not handed out by ``inert`` but by its subpackage."""
    for name in PLUMBING:
        assert not hasattr(inert, name), name
        assert hasattr(inert.events, name) or hasattr(inert.log, name), name


def test_functions_and_errors_name_the_package_as_their_home() -> None:
    """Tracebacks and documentation show ``inert.ClaimRefused``, where users import it from."""
    for name in PUBLIC:
        value = getattr(inert, name)
        if inspect.isfunction(value) or (isinstance(value, type) and issubclass(value, Exception)):
            assert value.__module__ == "inert", name


def test_the_materializer_is_there_on_first_use() -> None:
    """The PostgreSQL ledger materializer is reachable from ``inert`` without being in
    ``__all__``, so that ``import inert`` works without psycopg."""
    assert "materialize_ledger" not in inert.__all__
    assert callable(inert.materialize_ledger)
