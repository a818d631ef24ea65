"""Identities filed under their turn: what a retired turn lets go.

A turn's retirement (``TurnRetired``) makes the fold forget the turn's calls, and each projection
forget the turn's calls that are not live in its view. Finding them by scanning every call held
would make each retirement cost the whole state, and a long-running runtime retires turns all
the time; so each holder files an identity under its turn when it first holds something of it
(never per event), and a retirement costs the identities of its own turn. Turns are filed by
their three names as a tuple: a call's ``turn_ref`` would build and validate a ``TurnRef`` for
every new key of a replay.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, Protocol, TypeVar

from ._identity import TurnRef


class _OfTurn(Hashable, Protocol):
    """An identity within a turn: a call key or a response reference."""

    @property
    def tenant(self) -> str: ...

    @property
    def conversation(self) -> str: ...

    @property
    def turn(self) -> str: ...


Identity = TypeVar("Identity", bound=_OfTurn)


class ByTurn(Generic[Identity]):
    """Identities filed under their turn, each turn's in the order they were filed."""

    __slots__ = ("_turns",)

    def __init__(self) -> None:
        self._turns: dict[tuple[str, str, str], dict[Identity, None]] = {}

    def __len__(self) -> int:
        """The number of turns with an identity filed."""
        return len(self._turns)

    def add(self, identity: Identity) -> None:
        """File an identity not filed yet under its turn."""
        turn = (identity.tenant, identity.conversation, identity.turn)
        filed = self._turns.get(turn)
        if filed is None:
            self._turns[turn] = {identity: None}
        else:
            filed[identity] = None

    def remove(self, identity: Identity) -> None:
        """Take one filed identity out (its turn goes with its last one)."""
        turn = (identity.tenant, identity.conversation, identity.turn)
        filed = self._turns[turn]
        del filed[identity]
        if not filed:
            del self._turns[turn]

    def filed(self, turn: TurnRef) -> Iterable[Identity]:
        """The identities filed under the turn, in the order they were filed (left filed)."""
        return self._turns.get((turn.tenant, turn.conversation, turn.turn), ())

    def take(self, turn: TurnRef) -> Iterable[Identity]:
        """Take every identity of the turn out, in the order they were filed; the caller files
        again those it keeps."""
        return self._turns.pop((turn.tenant, turn.conversation, turn.turn), ())
