"""Where a call is in its life: the one name the decider, the fold, the ledger and the status
share for it (the rules that move a call between phases are in ``inert.actors._decider``)."""

from __future__ import annotations

import enum


class Phase(enum.StrEnum):
    """Where a call is in its life; ``absent`` until it opens, and the last three terminal."""

    ABSENT = "absent"
    COLLECTING = "collecting"
    TERMINAL_CANDIDATE = "terminal_candidate"
    VALIDATED = "validated"
    DISPATCHED = "dispatched"
    CANCELLED = "cancelled"
    FAILED = "failed"


TERMINAL_PHASES = frozenset({Phase.DISPATCHED, Phase.CANCELLED, Phase.FAILED})
