"""The validations a claim needs, kept from the fold's reading of the log.

A claim hands its executor the validated arguments, which the fold does not hold (it keeps their
digest). Reading the call's stream back for them costs a query of the log for every call; the
runtime keeps instead each ``CallValidated`` the fold reads once it is live, while its call may
still be claimed here, within a budget of argument bytes. Beyond the budget, or for a call
validated before a restart (whether the restart replays the log or restores a snapshot, so that
both behave alike), the claim reads the log as before: what is kept is the event the log holds,
so both ways give the claim the same arguments.
"""

from __future__ import annotations

from ..events import OUTCOME_TYPES, CallDispatched, CallKey, CallValidated, Phase

KEPT_ARGUMENT_BYTES = 16 * 1024 * 1024
"""The most argument bytes a runtime keeps for claims to come (the rest are read back)."""

_OVER = frozenset({Phase.CANCELLED, Phase.FAILED})


class KeptValidations:
    """The last validation the fold read of each call that may still be claimed here."""

    def __init__(self, budget: int = KEPT_ARGUMENT_BYTES) -> None:
        self._budget = budget
        self._bytes = 0
        self._kept: dict[CallKey, CallValidated] = {}

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def bytes(self) -> int:
        """The argument bytes kept now."""
        return self._bytes

    def heard(self, event: object, phase: Phase | None, claimed_here: bool) -> None:
        """Follow one event the fold has folded: ``phase`` is its call's phase after it
        (``None`` for a call the fold forgot), ``claimed_here`` whether a dispatch is of a claim
        made in this process."""
        if isinstance(event, CallValidated):
            # An edit's validation replaces the one before: the last is the one that runs.
            self.forget(event.key)
            if self._bytes + len(event.arguments) <= self._budget:
                self._kept[event.key] = event
                self._bytes += len(event.arguments)
            return
        key = getattr(event, "key", None)
        if not isinstance(key, CallKey) or key not in self._kept:
            return
        if (
            phase is None
            or phase in _OVER
            or isinstance(event, OUTCOME_TYPES)
            or (isinstance(event, CallDispatched) and not claimed_here)
        ):
            self.forget(key)

    def take(self, key: CallKey) -> CallValidated | None:
        """The call's validation for its claim, forgotten here (``None`` where not kept)."""
        kept = self._kept.pop(key, None)
        if kept is not None:
            self._bytes -= len(kept.arguments)
        return kept

    def peek(self, key: CallKey) -> CallValidated | None:
        """The call's validation, kept for its claim (``None`` where not kept)."""
        return self._kept.get(key)

    def forget(self, key: CallKey) -> None:
        """Keep nothing more of the call."""
        self.take(key)
