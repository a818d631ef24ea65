"""What the ledger shows of a call: its row, in the seed's columns, and its transitions.

Both are frozen values made when the ledger is read; neither holds an argument value, only
counts, sizes, digests and reasons.
"""

from __future__ import annotations

from typing import Literal

import attrs
from attrs import frozen

from ..events import CallKey, Phase, TerminalRef
from ._digest import Snapshot

Dispatch = Literal["inert", "await_confirmation", "await_response", "ready", "dispatched", "reject"]
Outcome = Literal["completed", "failed", "stopped", "unknown", "stop_requested"]
"""What became of a dispatched call's run; ``stop_requested`` until the executor reports, once
it was asked to stop while running."""


@frozen(kw_only=True)
class LedgerRow:
    """The latest state of one call, in the seed's columns; never an argument value."""

    tenant: str
    conversation: str
    turn: str
    response: str
    item: str
    call: str
    tool: str
    state: Phase
    fragments: int
    bytes: int
    terminal_event: str | None = None
    terminal_reason: str | None = None
    parse: str | None = None
    validation: str | None = None
    dispatch: Dispatch = "inert"
    outcome: Outcome | None = None

    @classmethod
    def opened(cls, key: CallKey, *, tool: str, fragments: int, size: int) -> LedgerRow:
        """The row of a call that has just appeared in the ledger."""
        return cls(
            tenant=key.tenant,
            conversation=key.conversation,
            turn=key.turn,
            response=key.response,
            item=key.item,
            call=key.call,
            tool=tool,
            state=Phase.COLLECTING,
            fragments=fragments,
            bytes=size,
        )

    @property
    def running(self) -> bool:
        """Dispatched, and its executor has not reported how the run ended (it may have been
        asked to stop)."""
        return self.state is Phase.DISPATCHED and self.outcome in (None, "stop_requested")

    @property
    def key(self) -> CallKey:
        """The call key the row belongs to."""
        return CallKey(
            tenant=self.tenant,
            conversation=self.conversation,
            turn=self.turn,
            response=self.response,
            item=self.item,
            call=self.call,
        )

    def to_json(self) -> Snapshot:
        """The row as a JSON object, in column order."""
        return attrs.asdict(self)


@frozen(kw_only=True)
class Transition:
    """One recorded step in a call's history: what was decided or reported, and why."""

    position: int
    event_type: str
    state: Phase | None
    detail: str

    def to_json(self) -> Snapshot:
        """The transition as a JSON object."""
        return attrs.asdict(self)


def terminal_label(terminal: TerminalRef) -> str:
    """How the ledger names a provider terminal event: by sequence where there is one."""
    if terminal.sequence is not None:
        return f"sequence {terminal.sequence}"
    return f"digest {terminal.digest}"
