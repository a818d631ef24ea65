"""A snapshot as a log stores it beside its events: opaque state, split from the payloads.

A log keeps one snapshot per name (a runtime alone writes under ``""``; processes sharing a log
each write under their own name). What the state means is the runtime's business
(:mod:`inert.runtime._snapshot`); the log only keeps it, whole or not at all, and keeps one promise
about argument payloads: **redaction is final**. A snapshot's payloads are stored apart, each under
the stream whose events it holds bytes of, from a first version on; redacting a stream up to a
version deletes the payloads stored under it from that version or before, and a snapshot written
after a redaction stores no payload whose versions hold a redacted event. The log never holds a
payload in a snapshot that it no longer holds in its events.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from attrs import field, frozen


@frozen(kw_only=True)
class SnapshotPayload:
    """Argument bytes a snapshot holds, stored apart from its state."""

    part: str
    """What the bytes are, unique within the snapshot (the state names it)."""
    stream: str
    """The stream whose events the bytes come from."""
    first_version: int
    """The first version of ``stream`` whose bytes it may hold: redacting the stream up to this
    version or after deletes it."""
    data: bytes


@frozen(kw_only=True)
class StoredSnapshot:
    """One snapshot: the state at a log position, under a name, with its stamp and payloads."""

    name: str
    """Who wrote it: a process's name, or ``""`` for a runtime alone on its log."""
    position: int
    """The log position the state is at (every event up to it folded, none after)."""
    stamp: str
    """The code and configuration the state was made by: only the same stamp may load it."""
    state: bytes
    payloads: Sequence[SnapshotPayload] = ()
    """In the order written; read, a tuple (one written may be any sequence)."""
    digest: str = field(default="")
    """A digest of the state, to tell a damaged or changed snapshot, kept as given: a runtime's
    is keyed by its log (``hmac-sha256:``); ``sha256:`` (see :func:`state_digest`) otherwise. A
    payload is whole or deleted, so it is not part of it."""

    def intact(self) -> bool:
        """Whether the state is what was written, for an unkeyed ``sha256:`` digest."""
        return self.digest == state_digest(self.state)


def state_digest(state: bytes) -> str:
    """The digest a snapshot of this state carries."""
    return "sha256:" + hashlib.sha256(state).hexdigest()


def payload_streams(snapshot: StoredSnapshot) -> set[str]:
    """The streams a snapshot's payloads are stored under."""
    return {payload.stream for payload in snapshot.payloads}


def kept_payloads(
    snapshot: StoredSnapshot, redacted: Mapping[str, int]
) -> Iterator[tuple[int, SnapshotPayload]]:
    """The payloads of a snapshot (each with its ordinal, its index as written) that hold no
    redacted event, given the highest redacted version of each stream: one at a time, so that
    a backend writes them without holding them all at once."""
    return (
        (ordinal, payload)
        for ordinal, payload in enumerate(snapshot.payloads)
        if redacted.get(payload.stream, 0) < payload.first_version
    )


def snapshot_from_rows(name: str, rows: Sequence[Sequence[Any]]) -> StoredSnapshot | None:
    """The snapshot a database backend reads in one statement: a row ``(0, position, stamp,
    digest, 0, state)``, then a row ``(1, ordinal, part, stream, first_version, data)`` per
    payload in ordinal order; None without rows."""
    if not rows:
        return None
    (_, position, stamp, digest, _, state), *payloads = rows
    return StoredSnapshot(
        name=name,
        position=position,
        stamp=stamp,
        state=bytes(state),
        digest=digest,
        payloads=tuple(
            SnapshotPayload(part=part, stream=stream, first_version=first, data=bytes(data))
            for _, _, part, stream, first, data in payloads
        ),
    )
