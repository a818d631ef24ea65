"""The runtime an agent server embeds: the log, the router and actors and the projections at
work together, under Trio or as a guest of asyncio, with what keeps it going (ingress,
recovery, processes sharing a log, retention, retirement, snapshots)."""

from typing import TYPE_CHECKING

from ._asyncio import AsyncioRuntime, open_asyncio_runtime
from ._boundary import (
    Dispatch,
    Executor,
    OperatorAuthorizer,
    PendingConfirmation,
    ReadyCall,
    StopSignal,
)
from ._collector import CollectorSettings
from ._input import InputAnswer, PendingInput
from ._open import open_partitioned_runtime, open_runtime
from ._partitioned import PartitionedRuntime
from ._retention import Retention
from ._runtime import Runtime, trio_clock
from ._sdk_streams import StreamFeed, feed_stream

__all__ = [
    "AsyncioRuntime",
    "CollectorSettings",
    "Dispatch",
    "Executor",
    "InputAnswer",
    "OperatorAuthorizer",
    "PartitionedRuntime",
    "PendingConfirmation",
    "PendingInput",
    "ReadyCall",
    "Retention",
    "Runtime",
    "StopSignal",
    "StreamFeed",
    "feed_stream",
    "open_asyncio_runtime",
    "open_partitioned_runtime",
    "open_runtime",
    "trio_clock",
]

if TYPE_CHECKING:
    from ._materialize import LedgerMaterializer as LedgerMaterializer
    from ._materialize import materialize_ledger as materialize_ledger

_NEEDS_PSYCOPG = frozenset({"LedgerMaterializer", "materialize_ledger"})


def __getattr__(name: str) -> object:
    """The PostgreSQL materializer on first use: psycopg is an optional dependency (the
    ``postgresql`` extra), so that ``import inert`` works without it."""
    if name in _NEEDS_PSYCOPG:
        from . import _materialize  # noqa: PLC0415

        return getattr(_materialize, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
