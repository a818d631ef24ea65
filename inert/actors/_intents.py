"""One action per intent (rule 12 of ``inert.actors._decider``): the calls dispatched for each
intent, and the claims that wait for the decisions of earlier ones.

An intent is a tool name and a canonical arguments digest, within a turn or within a
conversation. The fold notes a dispatch here when it reads it back from the log, for a call of a
tool that asks for one action per intent; a claim of such a tool looks up the calls dispatched
for its intent in its tool's scope. Claims addressed to calls of turns that offer such a tool
are queued per conversation in log order: one is decided only when every earlier one has its
first decision read back, so that the dispatches it looks up are the same live and on replay,
whether the earlier calls decided again or took their decisions as recorded.

Everything is kept per turn and let go with the turn's retirement: a conversation remembers the
dispatches of the turns the runtime still knows.

Pure: no trio, no storage.
"""

from __future__ import annotations

from collections import OrderedDict

from ..events import ByTurn, CallKey, IntentScope, TurnRef
from ._call import TurnView

Intent = tuple[str, str, str, str, str]
"""Tenant, conversation, turn (empty for the whole conversation), tool name, arguments digest."""


def asks_for_intents(turn: TurnView | None) -> bool:
    """Whether the turn's claims queue for their conversation's intents: it is known, judged by
    rules 6 or later, and offers a tool that runs one action per intent."""
    return (
        turn is not None
        and turn.rules >= 6
        and any(tool.one_action_per_intent is not None for tool in turn.tools.values())
    )


def scope_of(turn: TurnView | None, tool: str) -> IntentScope | None:
    """Where the tool, as the turn offered it, runs one action per intent (None: it does not,
    or the turn's rules are older than rule 12)."""
    if turn is None or turn.rules < 6:
        return None
    offered = turn.tools.get(tool)
    return None if offered is None else offered.one_action_per_intent


def intent_of(key: CallKey, scope: IntentScope, tool: str, digest: str) -> Intent:
    turn = key.turn if scope is IntentScope.TURN else ""
    return (key.tenant, key.conversation, turn, tool, digest)


class Intents:
    """The dispatches of each intent, and the claims waiting in each conversation."""

    def __init__(self) -> None:
        # The calls dispatched for an intent, in the order their dispatches were read back.
        self._dispatched: dict[Intent, dict[CallKey, None]] = {}
        # The intents each dispatched call was noted under, filed by turn for its retirement.
        self._noted: dict[CallKey, tuple[Intent, Intent]] = {}
        self._noted_in: ByTurn[CallKey] = ByTurn()
        # Claims whose first decision is not read back yet, per conversation, in log order: the
        # call and the position of its claim. Ordered by a list of their own, so that the first
        # is found at once however many left before it.
        self._claims: dict[tuple[str, str], OrderedDict[CallKey, int]] = {}

    def __len__(self) -> int:
        """The calls held here: dispatched ones remembered, and claims in a queue."""
        return len(self._noted) + sum(len(claims) for claims in self._claims.values())

    # --- dispatches ---

    def dispatched(self, key: CallKey, tool: str, digest: str) -> None:
        """Note the dispatch of a call of a tool that asks for one action per intent, under its
        turn's intent and its conversation's."""
        if key in self._noted:
            return
        intents = (
            intent_of(key, IntentScope.TURN, tool, digest),
            intent_of(key, IntentScope.CONVERSATION, tool, digest),
        )
        for intent in intents:
            self._dispatched.setdefault(intent, {})[key] = None
        self._noted[key] = intents
        self._noted_in.add(key)

    def earlier(self, intent: Intent) -> CallKey | None:
        """The call dispatched last for the intent, if one is remembered."""
        calls = self._dispatched.get(intent)
        return None if not calls else next(reversed(calls))

    # --- claims ---

    def claimed(self, key: CallKey, position: int) -> None:
        """Queue a claim at ``position`` behind the earlier claims of its conversation (a call
        with a claim queued already keeps its place)."""
        claims = self._claims.setdefault((key.tenant, key.conversation), OrderedDict())
        claims.setdefault(key, position)

    def waits(self, key: CallKey) -> bool:
        """Whether an earlier claim of the call's conversation has no decision read back yet."""
        claims = self._claims.get((key.tenant, key.conversation))
        return claims is not None and key in claims and next(iter(claims)) != key

    def read_back(self, key: CallKey, cause: int) -> CallKey | None:
        """A decision of the call caused at ``cause`` was read back: its claim queued at or
        before it leaves the queue. The call now first in the queue, if that changed."""
        conversation = (key.tenant, key.conversation)
        claims = self._claims.get(conversation)
        if claims is None or claims.get(key, cause + 1) > cause:
            return None
        return self._leave(conversation, claims, [key])

    def _leave(
        self, conversation: tuple[str, str], claims: OrderedDict[CallKey, int], keys: list[CallKey]
    ) -> CallKey | None:
        first = next(iter(claims))
        for key in keys:
            del claims[key]
        if not claims:
            del self._claims[conversation]
            return None
        now_first = next(iter(claims))
        return now_first if now_first != first else None

    # --- retirement ---

    def retire(self, turn: TurnRef) -> CallKey | None:
        """Forget the dispatches and the claims of a retired turn's calls; the call now first in
        its conversation's queue, if that changed."""
        for key in self._noted_in.take(turn):
            for intent in self._noted.pop(key):
                calls = self._dispatched[intent]
                del calls[key]
                if not calls:
                    del self._dispatched[intent]
        conversation = (turn.tenant, turn.conversation)
        claims = self._claims.get(conversation)
        if claims is None:
            return None
        gone = [key for key in claims if key.turn == turn.turn]
        return self._leave(conversation, claims, gone) if gone else None
