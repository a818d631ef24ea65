"""A snapshot as a log stores it beside its events: opaque state, split from the payloads.

A log keeps one snapshot per name (a runtime alone writes under ``""``; processes sharing a log
each write under their own name). What the state means is the runtime's business
(``inert.runtime._snapshot``); the log only keeps it, whole or not at all, and keeps one promise
about argument payloads: **redaction is final**. A snapshot's payloads are stored apart, each under
the stream whose events it holds bytes of, from a first version on, and each holds bytes of one
call's events: the call of the event at its first version. Redacting a stream up to a version
deletes the payloads stored under it from that version or before; redacting only some calls'
events of it (``redact(..., keys=...)``) deletes only those calls' payloads (and those whose
first event no longer says its call). A snapshot written after a redaction stores no payload whose
call's events, from its first version on, include a redacted one (counting a redacted event
that no longer says its call as everyone's). The log never holds a payload in a snapshot that
it no longer holds in its events.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from attrs import field, frozen

from ..events._identity import CallKey


@frozen(kw_only=True)
class SnapshotPayload:
    """Argument bytes a snapshot holds, stored apart from its state."""

    part: str
    """What the bytes are, unique within the snapshot (the state names it)."""
    stream: str
    """The stream whose events the bytes come from."""
    first_version: int
    """The first version of ``stream`` whose bytes it may hold, the version of the first event
    of the call whose bytes it holds: redacting the stream up to this version or after, or
    that call's events of it, deletes it."""
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
    is keyed by its log (``hmac-sha256:``); ``sha256:`` (see
    [`state_digest`][inert.projections.state_digest]) otherwise. A payload is whole or deleted,
    so it is not part of it."""

    def intact(self) -> bool:
        """Whether the state is what was written, for an unkeyed ``sha256:`` digest."""
        return self.digest == state_digest(self.state)


def state_digest(state: bytes) -> str:
    """The digest a snapshot of this state carries."""
    return "sha256:" + hashlib.sha256(state).hexdigest()


def payload_streams(snapshot: StoredSnapshot) -> set[str]:
    """The streams a snapshot's payloads are stored under."""
    return {payload.stream for payload in snapshot.payloads}


@frozen
class StreamRedactions:
    """What a stream's redacted events say, as the payloads stored under it are judged: the
    version of each and the call it names (``None``: it no longer says), and the call of the
    event at each version a payload starts from (``None``: none, or it no longer says)."""

    redacted: Sequence[tuple[int, CallKey | None]]
    calls_at: Mapping[int, CallKey | None]

    @property
    def highest(self) -> int:
        return max((version for version, _ in self.redacted), default=0)

    def takes(self, first_version: int) -> bool:
        """Whether a payload stored from this version may hold bytes of a redacted event."""
        owner = self.calls_at.get(first_version)
        return any(
            version >= first_version and (owner is None or call is None or call == owner)
            for version, call in self.redacted
        )


def kept_payloads(
    snapshot: StoredSnapshot, redacted: Mapping[str, StreamRedactions]
) -> Iterator[tuple[int, SnapshotPayload]]:
    """The payloads of a snapshot (each with its ordinal, its index as written) that hold no
    redacted event, given what the redacted events of each stream say: one at a time, so that
    a backend writes them without holding them all at once."""
    return (
        (ordinal, payload)
        for ordinal, payload in enumerate(snapshot.payloads)
        if (judged := redacted.get(payload.stream)) is None
        or not judged.takes(payload.first_version)
    )


def redaction_takes(
    first_version: int,
    up_to_version: int,
    keys: frozenset[CallKey] | None,
    owner: CallKey | None,
) -> bool:
    """Whether a redaction of a stream up to ``up_to_version`` (of those calls' events only,
    where given) deletes a payload stored under it from ``first_version``, whose first event
    is of the call ``owner`` (``None``: none, or it no longer says)."""
    return first_version <= up_to_version and (keys is None or owner is None or owner in keys)


def judged_versions(snapshot: StoredSnapshot, highest: Mapping[str, int]) -> dict[str, list[int]]:
    """Per stream with redacted events (their highest version in ``highest``), the first
    versions of its payloads that the redaction may reach: the versions whose event's call a
    backend must read to judge them."""
    found: dict[str, set[int]] = {}
    for payload in snapshot.payloads:
        if payload.first_version <= highest.get(payload.stream, 0):
            found.setdefault(payload.stream, set()).add(payload.first_version)
    return {stream: sorted(versions) for stream, versions in found.items()}


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
