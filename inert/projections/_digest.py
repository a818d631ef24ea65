"""The state digest: one hash that proves two folds of a log reached the same state.

Replaying the same log must give the same state, byte for byte. Each projection therefore
describes its state as plain JSON (strings, integers, booleans, null, lists, objects, in an order
fixed by the log), and the digest hashes the canonical encoding of those descriptions. Nothing in
a snapshot depends on the process, the clock or the hash seed, so two processes, or one process
before and after a restart, can compare a single string.
"""

from __future__ import annotations

import hashlib
import json
from typing import Protocol, TypeAlias

from ..events import CallKey, RecordedEvent, ResponseRef

JSON: TypeAlias = str | int | bool | list["JSON"] | dict[str, "JSON"] | None
"""A value a snapshot may hold (no floats: their text is not one canonical form)."""

Snapshot: TypeAlias = dict[str, JSON]
"""What a projection's ``snapshot()`` returns."""


class Projection(Protocol):
    """A pure fold of the log: applied in position order, described by a JSON snapshot."""

    @property
    def position(self) -> int:
        """The position of the last record applied (0 before any)."""
        ...

    def apply(self, recorded: RecordedEvent) -> None:
        """Fold one recorded event into the state."""
        ...

    def snapshot(self) -> Snapshot:
        """The state as canonical JSON values, in a deterministic order."""
        ...


def key_json(key: CallKey) -> Snapshot:
    """A call key as a JSON object of its six identities."""
    return {
        "tenant": key.tenant,
        "conversation": key.conversation,
        "turn": key.turn,
        "response": key.response,
        "item": key.item,
        "call": key.call,
    }


def response_json(response: ResponseRef) -> Snapshot:
    """A response reference as a JSON object of its four identities."""
    return {
        "tenant": response.tenant,
        "conversation": response.conversation,
        "turn": response.turn,
        "response": response.response,
    }


def digest_json(value: JSON) -> bytes:
    """The one encoding of a JSON value that the digest hashes."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def state_digest(*projections: Projection) -> str:
    """``sha256:`` and the hex digest of the projections' snapshots, keyed by class name."""
    snapshots: dict[str, JSON] = {}
    for projection in projections:
        name = type(projection).__name__
        # Two projections of one class would overwrite each other and the digest would prove
        # the state of only one of them.
        if name in snapshots:
            raise ValueError(f"two projections named {name} cannot share one digest")
        snapshots[name] = projection.snapshot()
    return "sha256:" + hashlib.sha256(digest_json(snapshots)).hexdigest()
