"""What the fold holds beside the calls: the turns and operator controls as of a log position
(``Scope``), the turn each provider response belongs to (``ResponseTurns``), and the index of
the live calls (``LiveIndex``) that routes a turn, response, tenant or operator event to exactly
the calls it concerns.

Pure: no trio, no storage.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

import attrs
from attrs import define

from ..events import (
    ByTurn,
    CallKey,
    CancelReason,
    Event,
    ResponseQuarantined,
    ResponseRef,
    TenantResumed,
    TenantStopped,
    ToolDisabled,
    ToolEnabled,
    TurnCancelled,
    TurnRef,
    TurnStarted,
    TurnSuperseded,
)
from ._call import TurnStatus, TurnView


@define
class _Turn:
    view: TurnView


class Scope:
    """The turns and operator controls as of a log position."""

    def __init__(self) -> None:
        self._turns: dict[TurnRef, _Turn] = {}
        self._latest: dict[tuple[str, str], TurnRef] = {}
        self._quarantined: set[tuple[str | None, str]] = set()
        self._disabled: set[tuple[str | None, str]] = set()
        self._stopped: set[str] = set()

    def apply(self, event: Event) -> None:
        match event:
            case TurnStarted(turn=turn, principal=principal, tools=tools, rules=rules):
                if turn in self._turns:
                    return
                conversation = (turn.tenant, turn.conversation)
                previous = self._latest.get(conversation)
                if previous is not None:
                    self._set_status(previous, TurnStatus.SUPERSEDED)
                self._latest[conversation] = turn
                offered = {tool.name: tool for tool in tools}
                self._turns[turn] = _Turn(TurnView(principal=principal, tools=offered, rules=rules))
            case TurnSuperseded(turn=turn):
                self._set_status(turn, TurnStatus.SUPERSEDED)
            case TurnCancelled(turn=turn, principal=principal):
                known = self._turns.get(turn)
                # Only the person the turn belongs to (through the agent server) cancels it.
                if known is not None and known.view.principal == principal:
                    self._set_status(turn, TurnStatus.CANCELLED)
            case ResponseQuarantined(response=response, tenant=tenant):
                self._quarantined.add((tenant, response))
            case ToolDisabled(tool=tool, tenant=tenant):
                self._disabled.add((tenant, tool))
            case ToolEnabled(tool=tool, tenant=tenant):
                self._disabled.discard((tenant, tool))
            case TenantStopped(tenant=tenant):
                self._stopped.add(tenant)
            case TenantResumed(tenant=tenant):
                self._stopped.discard(tenant)

    def retire(self, turn: TurnRef) -> None:
        """Forget the turn: from here on it is unknown."""
        del self._turns[turn]
        conversation = (turn.tenant, turn.conversation)
        if self._latest.get(conversation) == turn:
            del self._latest[conversation]

    def _set_status(self, turn: TurnRef, status: TurnStatus) -> None:
        known = self._turns.get(turn)
        if known is not None and known.view.status is TurnStatus.ACTIVE:
            known.view = attrs.evolve(known.view, status=status)

    def turn(self, turn: TurnRef) -> TurnView | None:
        known = self._turns.get(turn)
        return None if known is None else known.view

    def blocked(self, key: CallKey, tool: str) -> CancelReason | None:
        """The operator control that forbids this call now, if any (the widest first)."""
        if key.tenant in self._stopped:
            return CancelReason.TENANT_STOPPED
        quarantined = self._quarantined
        if (None, key.response) in quarantined or (key.tenant, key.response) in quarantined:
            return CancelReason.RESPONSE_QUARANTINED
        if tool and ((None, tool) in self._disabled or (key.tenant, tool) in self._disabled):
            return CancelReason.TOOL_DISABLED
        return None


UNKNOWN_TURN_RESPONSES_KEPT = 65_536
"""Responses first seen under a turn not started (yet) whose turn is remembered: the oldest
is forgotten past this many, so that made-up turns cannot grow the fold without bound."""


class ResponseTurns:
    """The turn each provider response belongs to: the turn of the first event of its response
    stream.

    A response's stream is named by tenant and response id alone, so a response id that shows
    up under another turn (a proxy or a provider replaying an old response into a new turn)
    lands on the stream of the first. A call opened there is judged by where its response
    belongs (``elsewhere``). A response is forgotten with its turn's retirement (or, first seen
    under a turn not started then, once ``UNKNOWN_TURN_RESPONSES_KEPT`` newer ones were): a
    stream that has events and no known turn is then one whose turn is unknown here, and a call
    opened on it belongs elsewhere too.
    """

    def __init__(self) -> None:
        self._first: dict[str, ResponseRef] = {}
        self._of_turn: ByTurn[ResponseRef] = ByTurn()
        self._of_unknown_turns: OrderedDict[ResponseRef, None] = OrderedDict()
        self._over_limit: dict[ResponseRef, CallKey] = {}

    def note(self, stream: str, version: int, response: ResponseRef, *, known: bool) -> None:
        """An ingress event of ``response`` at ``version`` of ``stream``; ``known``: its turn
        is started."""
        if version != 1 or stream != response.stream or stream in self._first:
            return
        self._first[stream] = response
        self._of_turn.add(response)
        if not known:
            unknown = self._of_unknown_turns
            unknown[response] = None
            if len(unknown) > UNKNOWN_TURN_RESPONSES_KEPT:
                oldest, _ = unknown.popitem(last=False)
                self._forget(oldest)

    def elsewhere(self, response: ResponseRef, version: int | None) -> str:
        """Where a call opened at ``version`` of ``response``'s stream belongs to another turn,
        that turn (or that it is unknown here); ``""`` where the response is its own turn's."""
        first = self._first.get(response.stream)
        if first is None:
            if version is None or version <= 1:
                return ""
            return "a turn unknown here (its stream had events before this turn used it)"
        if first == response:
            return ""
        return f"turn {first.turn_ref.stream!r}"

    def passed_limit(self, key: CallKey) -> None:
        """The call ``key``, of a turn judged by rules 3 or later, failed a limit on live calls:
        its response opens no call any more."""
        response = key.response_ref
        if self._first.get(response.stream) == response:
            self._over_limit.setdefault(response, key)

    def over_limit(self, response: ResponseRef) -> CallKey | None:
        """The call whose failure closed the response to new calls (``passed_limit``), if one
        did."""
        return self._over_limit.get(response)

    def retire(self, turn: TurnRef) -> None:
        """Forget the responses of a retired turn."""
        for response in self._of_turn.take(turn):
            del self._first[response.stream]
            self._of_unknown_turns.pop(response, None)
            self._over_limit.pop(response, None)

    def _forget(self, response: ResponseRef) -> None:
        del self._first[response.stream]
        self._of_turn.remove(response)
        self._over_limit.pop(response, None)


# --- calls -----------------------------------------------------------------------------------


Members = dict[CallKey, None]
"""Keys in the order they were added (a dict, so that iteration never depends on hashing)."""


class LiveIndex:
    """The live calls: all of them in the order they became live, by turn, and the turns with
    live calls by conversation; counts per tenant (for its limit) and per provider response id
    of a tenant (a response's ingress stream, which no turn bounds).

    Every group an event addresses is found from these: a response's calls among its turn's
    (a turn holds at most ``max_live_per_turn``), and the calls a rare operator control
    concerns (a response id in any turn, a tool, a tenant) by one pass over the live calls.
    Each group keeps the order in which its calls became live.
    """

    def __init__(self) -> None:
        self.live: Members = {}
        self.by_turn: dict[TurnRef, Members] = {}
        self.turns: dict[tuple[str, str], dict[TurnRef, None]] = {}
        self.in_tenant: dict[str, int] = {}
        # By the name of the stream (the response's own string: no key object per response).
        self.in_response_stream: dict[str, int] = {}

    def add(self, key: CallKey) -> None:
        self.live[key] = None
        turn = key.turn_ref
        members = self.by_turn.get(turn)
        if members is None:
            members = self.by_turn[turn] = {}
            self.turns.setdefault((key.tenant, key.conversation), {})[turn] = None
        members[key] = None
        count(self.in_tenant, key.tenant, 1)
        count(self.in_response_stream, key.response_ref.stream, 1)

    def remove(self, key: CallKey) -> None:
        del self.live[key]
        turn = key.turn_ref
        members = self.by_turn[turn]
        del members[key]
        if not members:
            del self.by_turn[turn]
            conversation = (key.tenant, key.conversation)
            turns = self.turns[conversation]
            del turns[turn]
            if not turns:
                del self.turns[conversation]
        count(self.in_tenant, key.tenant, -1)
        count(self.in_response_stream, key.response_ref.stream, -1)

    def of_turn(self, turn: TurnRef) -> list[CallKey]:
        return list(self.by_turn.get(turn, ()))

    def of_response(self, response: ResponseRef) -> list[CallKey]:
        wanted = response.response
        return [key for key in self.by_turn.get(response.turn_ref, ()) if key.response == wanted]

    def of_conversation_but(self, turn: TurnRef) -> list[CallKey]:
        """The live calls of the turn's conversation in its other turns."""
        others = [
            other for other in self.turns.get((turn.tenant, turn.conversation), ()) if other != turn
        ]
        if len(others) == 1:
            return list(self.by_turn[others[0]])
        # Calls of several turns, in the order they became live across them.
        wanted = set(others)
        return [key for key in self.live if key.turn_ref in wanted] if wanted else []

    def responses(self) -> dict[ResponseRef, None]:
        """The responses with live calls, in the order their first live call became live."""
        return {key.response_ref: None for key in self.live}


G = TypeVar("G")


def count(counts: dict[G, int], group: G, change: int) -> None:
    left = counts.get(group, 0) + change
    if left:
        counts[group] = left
    else:
        del counts[group]
