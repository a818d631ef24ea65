"""Partitions: where a conversation's events live, and the log of one partition.

A log has ``P`` partitions of calls, chosen when it is created. With ``P = 1`` (every SQLite
and memory log unless asked, and every log written before partitions existed) partition 0 holds
everything, as a log always did. With ``P > 1``, partitions 1 to ``P`` hold the calls, and
partition 0, the control partition, holds what every partition must see (operator controls,
the processes' heartbeats and their leases of partitions).

A conversation's partition is ``1 + h mod P``, where ``h`` is the first eight bytes, big-endian,
of the SHA-256 of ``len(tenant):tenant/conversation`` (UTF-8): stable across processes, machines
and versions, and written in the log's metadata by name (``PARTITION_HASH``), so that a log made
with another rule is never read with this one. A turn, its responses, its calls and everything
addressed to them are appended to their conversation's partition.

Each partition is a log of its own under the contract of :class:`~inert.log.Log`: its own
gap-free positions from 1, its own streams and versions, its own head and snapshots. No lock,
sequence or row is shared by two partitions on the append path; nothing orders the events of
two partitions.
"""

from __future__ import annotations

import hashlib

from ..events._errors import ConfigurationError
from ..events._partitioning import CONTROL_COPY, CONTROL_PARTITION

__all__ = ["CONTROL_COPY", "CONTROL_PARTITION"]

PARTITION_HASH = "sha256-tenant-conversation-v1"
"""The name of the rule above, as a log's metadata records it."""


MAX_PARTITIONS = 4096
"""The most partitions of calls a log may have."""


def check_partitions(partitions: int) -> int:
    """``partitions`` if a log may have that many partitions of calls; a clear error if not."""
    if isinstance(partitions, bool) or not isinstance(partitions, int):
        raise ConfigurationError(f"partitions must be a whole number, not {partitions!r}")
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ConfigurationError(f"partitions must be from 1 to {MAX_PARTITIONS}, not {partitions}")
    return partitions


def partition_of(tenant: str, conversation: str, partitions: int) -> int:
    """The partition of a conversation in a log of ``partitions`` partitions of calls."""
    if partitions == 1:
        return CONTROL_PARTITION
    named = f"{len(tenant)}:{tenant}/{conversation}".encode()
    return 1 + int.from_bytes(hashlib.sha256(named).digest()[:8], "big") % partitions


def call_partitions(partitions: int) -> range:
    """The numbers of the partitions that hold calls."""
    return range(CONTROL_PARTITION, 1) if partitions == 1 else range(1, partitions + 1)
