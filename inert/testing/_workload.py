"""What a simulation feeds: tools with example arguments, and a seeded plan of awkward orders.

A plan is made once per seed, before anything runs, from ``random.Random(seed)`` alone: the
conversations (each with its tenant and principal), their turns and responses, the calls of
each response and the order in which their events reach the runtime, with the flaws real
provider streams and agent servers have (interleaving, duplicates, drops, fragments out of
order, late events, reconnects, responses that end badly or never, malformed arguments, calls
of tools the turn did not offer or of another tenant), and the person's answers to
confirmations. Pure: no trio, no storage.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from datetime import timedelta

from attrs import field, frozen

from ..actors import (
    ArgumentLimits,
    CallLimits,
    ToolDeclaration,
)
from ..events import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    IntentScope,
    ResponseEnded,
    ResponseEndReason,
    ResponseRef,
    StreamLost,
    StreamResumed,
    TerminalRef,
    TextReceived,
    TurnRef,
)


def _examples(examples: Iterable[bytes]) -> tuple[bytes, ...]:
    return tuple(examples)


@frozen(kw_only=True)
class SimulatedTool:
    """A tool declaration and argument payloads a model might stream for it (valid ones: the
    plan derives the malformed variants itself)."""

    declaration: ToolDeclaration
    examples: tuple[bytes, ...] = field(converter=_examples)

    def __attrs_post_init__(self) -> None:
        if not self.examples:
            raise ValueError(f"tool {self.declaration.name!r} needs at least one example")


_STRING = {"type": "string"}

DEMO_TOOLS: tuple[SimulatedTool, ...] = (
    SimulatedTool(
        declaration=ToolDeclaration(
            name="get_weather",
            one_action_per_intent=IntentScope.TURN,
            parameters={
                "type": "object",
                "properties": {
                    "city": _STRING,
                    "days": {"type": "number"},
                    "unit": {"enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        ),
        examples=(
            b'{"city": "Paris", "days": 3}',
            b'{"city": "Oslo", "unit": "celsius", "days": 1.5}',
            '{"city": "T\u014dky\u014d", "days": 7}'.encode(),
            b'{"city": "Atlantis", "days": 2}',
        ),
    ),
    SimulatedTool(
        declaration=ToolDeclaration(
            name="send_email",
            needs_confirmation=True,
            one_action_per_intent=IntentScope.CONVERSATION,
            parameters={
                "type": "object",
                "properties": {"to": _STRING, "body": _STRING, "priority": {"type": "integer"}},
                "required": ["to", "body"],
                "additionalProperties": False,
            },
        ),
        examples=(
            b'{"to": "bob@example.com", "body": "hi", "priority": 1}',
            b'{"to": "carol@example.org", "body": "lunch at 12?", "priority": 2}',
        ),
    ),
    SimulatedTool(
        declaration=ToolDeclaration(
            name="lookup_order",
            max_bytes=96,
            parameters={
                "type": "object",
                "properties": {"order": {"type": "integer"}, "note": _STRING},
                "required": ["order"],
                "additionalProperties": False,
            },
        ),
        examples=(
            b'{"order": 1234, "note": "gift"}',
            b'{"order": 77}',
            b'{"order": 5, "note": "' + b"long " * 24 + b'"}',
        ),
    ),
)
"""The simulator's own tools: one that runs each intent once per turn, one that needs confirmation
and runs each intent once per conversation, one with a size allowance (one of its examples
breaks it)."""


SIMULATION_LIMITS = CallLimits(
    arguments=ArgumentLimits(max_bytes=2048),
    idle_timeout=timedelta(seconds=30),
    confirmation_lifetime=timedelta(seconds=20),
    ready_lifetime=timedelta(seconds=1.5),
    max_live_per_turn=4,
)
"""Limits small enough that a simulation reaches them: 2 KiB of arguments, 30 s of idleness,
20 s to confirm, 1.5 s to claim a ready call (a busy executor claims up to 2 s late), 4 calls
alive in a turn (a response that passes it opens no call any more)."""

VALIDATION_TIMEOUT = 0.1


# --- the plan ----------------------------------------------------------------------------------


@frozen
class Feed:
    """Feed these ingress events in one call, after a pause (virtual seconds)."""

    events: tuple[Event, ...]
    pause: float = 0.0


@frozen
class StartTurn:
    turn: TurnRef
    tools: tuple[str, ...] | None = None


@frozen
class CancelTurn:
    turn: TurnRef


@frozen
class Confirmations:
    """The person answers the calls of a response that wait for a confirmation, each with a
    choice: ``fresh``, ``brief`` (valid for a second), ``stale``, ``wrong_digest``,
    ``wrong_principal``, ``deny``, ``twice``, ``late``, ``ignore``."""

    answers: tuple[tuple[CallKey, str], ...]


Action = Feed | StartTurn | CancelTurn | Confirmations


@frozen(kw_only=True)
class Conversation:
    tenant: str
    name: str
    principal: str
    start: float
    actions: tuple[Action, ...]
    keys: tuple[CallKey, ...]


@frozen(kw_only=True)
class Control:
    """An operator control at a virtual time: ``quarantine``, ``disable``, ``enable``,
    ``stop``, ``resume``; ``target`` is a response id, a tool or a tenant."""

    at: float
    action: str
    target: str
    tenant: str | None


@frozen(kw_only=True)
class Plan:
    conversations: tuple[Conversation, ...]
    controls: tuple[Control, ...]
    restart_at: float | None
    graceful_restart: bool

    @property
    def keys(self) -> list[CallKey]:
        return [key for conversation in self.conversations for key in conversation.keys]


TENANTS = ("acme", "globex")
CALLS_PER_CONVERSATION = 20
MALFORMED = (
    "nan",
    "infinity",
    "truncated",
    "duplicate_key",
    "not_object",
    "oversize",
    "utf8",
    "extra_property",
)
PERSON_CHOICES = (
    ("fresh", 45),
    ("brief", 10),
    ("stale", 8),
    ("wrong_digest", 8),
    ("wrong_principal", 6),
    ("deny", 8),
    ("twice", 6),
    ("late", 4),
    ("ignore", 5),
    ("edit", 6),
    ("bad_edit", 3),
)
_NUMBER = re.compile(rb'(":\s*)(-?\d+(?:\.\d+)?)')


def malformed(example: bytes, kind: str, limit: int) -> bytes:
    """A malformed variant of a valid payload."""
    match kind:
        case "nan" | "infinity":
            constant = b"NaN" if kind == "nan" else b"-Infinity"
            changed, count = _NUMBER.subn(rb"\g<1>" + constant, example, count=1)
            return changed if count else b'{"n": ' + constant + b", " + example[1:]
        case "truncated":
            return example[: max(1, len(example) - 3)]
        case "duplicate_key":
            first = example.split(b",", 1)[0].lstrip(b"{")
            return b"{" + first + b", " + example[1:]
        case "not_object":
            return b"[" + example + b"]"
        case "extra_property":
            return example[:-1].rstrip() + b', "sudo": true}'
        case "oversize":
            return b'{"pad": "' + b"a" * (limit + 16) + b'"}'
    return example[:-2] + b'\xff"}'


def _split(rng: random.Random, data: bytes) -> list[bytes]:
    pieces = rng.choice((1, 1, 2, 2, 3, 4))
    if len(data) < 2 or pieces == 1:
        return [data]
    cuts = sorted(rng.sample(range(1, len(data)), min(pieces - 1, len(data) - 1)))
    return [data[start:end] for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def _weighted(rng: random.Random, choices: Sequence[tuple[str, int]]) -> str:
    return rng.choices([name for name, _ in choices], [weight for _, weight in choices])[0]


class _Planner:
    def __init__(
        self,
        seed: int,
        keys: int,
        tools: Sequence[SimulatedTool],
        limits: CallLimits,
        per_conversation: int = CALLS_PER_CONVERSATION,
    ):
        self.per_conversation = per_conversation
        self.rng = random.Random(seed)
        self.keys = keys
        self.tools = tools
        self.limits = limits
        self.made = 0

    def plan(self) -> Plan:
        rng = self.rng
        count = max(1, -(-self.keys // self.per_conversation))
        conversations = []
        for index in range(count):
            share = self.keys // count + (1 if index < self.keys % count else 0)
            conversations.append(self._conversation(index, share))
        controls: list[Control] = []
        responses = [key.response for conversation in conversations for key in conversation.keys]
        if responses and rng.random() < 0.3:
            controls.append(
                Control(
                    at=rng.uniform(1, 15),
                    action="quarantine",
                    target=rng.choice(responses),
                    tenant=rng.choice(TENANTS),
                )
            )
        if rng.random() < 0.2:
            at, tool = rng.uniform(1, 15), rng.choice(self.tools).declaration.name
            tenant = rng.choice((*TENANTS, None))
            controls.append(Control(at=at, action="disable", target=tool, tenant=tenant))
            controls.append(
                Control(at=at + rng.uniform(0.5, 4), action="enable", target=tool, tenant=tenant)
            )
        if rng.random() < 0.1:
            at, tenant = rng.uniform(1, 15), rng.choice(TENANTS)
            controls.append(Control(at=at, action="stop", target=tenant, tenant=tenant))
            controls.append(
                Control(at=at + rng.uniform(0.5, 3), action="resume", target=tenant, tenant=tenant)
            )
        controls.sort(key=lambda control: control.at)
        restart_at = rng.uniform(1, 12) if rng.random() < 0.5 else None
        return Plan(
            conversations=tuple(conversations),
            controls=tuple(controls),
            restart_at=restart_at,
            graceful_restart=rng.random() < 0.5,
        )

    def _conversation(self, index: int, calls: int) -> Conversation:
        rng = self.rng
        tenant = TENANTS[index % len(TENANTS)]
        name = f"conv-{index}"
        actions: list[Action] = []
        keys: list[CallKey] = []
        carried: list[Action] = []
        number = 0
        while calls > 0 or carried:
            number += 1
            turn = TurnRef(tenant=tenant, conversation=name, turn=f"t{number}")
            in_turn = min(calls, rng.randint(1, 12))
            calls -= in_turn
            offered = None
            if rng.random() < 0.1:
                # A turn that offers fewer tools than are registered: calls of the others fail.
                offered = tuple(tool.declaration.name for tool in self.tools[:-1]) or None
            own: list[Action] = []
            responses = 1 if in_turn < 4 or rng.random() < 0.7 else 2
            for part in range(responses):
                share = in_turn // responses + (1 if part < in_turn % responses else 0)
                if share:
                    # A provider's response ids are unique: one reused in another turn is a
                    # replayed response, which never acts (``response_of_another_turn``). A few
                    # turns get one, as a proxy replaying the previous turn's response would.
                    replayed = number > 1 and rng.random() < 0.03
                    response_id = f"resp-{name}-{number - 1 if replayed else number}-{part}"
                    own.extend(self._response(turn, response_id, share, keys))
            if own and rng.random() < 0.05:
                own.insert(rng.randrange(len(own) + 1), CancelTurn(turn))
            later: list[Action] = []
            if calls > 0 and len(own) > 1 and rng.random() < 0.15:
                cut = rng.randrange(1, len(own))
                own, later = own[:cut], own[cut:]
            actions.append(StartTurn(turn, offered))
            # What the previous turn had still to send arrives while this one streams.
            actions.extend(_interleave(rng, carried, own))
            carried = later
        return Conversation(
            tenant=tenant,
            name=name,
            principal=f"user:{index}",
            start=rng.uniform(0, 3),
            actions=tuple(actions),
            keys=tuple(keys),
        )

    def _response(
        self, turn: TurnRef, response_id: str, calls: int, keys: list[CallKey]
    ) -> list[Action]:
        rng = self.rng
        response = ResponseRef(
            tenant=turn.tenant,
            conversation=turn.conversation,
            turn=turn.turn,
            response=response_id,
        )
        streams: list[list[Event]] = []
        late: list[Event] = []
        confirmations: list[tuple[CallKey, str]] = []
        for number in range(calls):
            tenant = turn.tenant
            if rng.random() < 0.02:
                tenant = next(other for other in TENANTS if other != tenant)
            key = CallKey(
                tenant=tenant,
                conversation=turn.conversation,
                turn=turn.turn,
                response=response_id,
                item=f"item-{number}",
                call=f"call_{number}",
            )
            keys.append(key)
            events, lost, needs = self._call(key)
            streams.append(events)
            late.extend(lost)
            if needs:
                confirmations.append((key, _weighted(rng, PERSON_CHOICES)))
        merged: list[Event] = []
        while any(streams):
            stream = rng.choice([stream for stream in streams if stream])
            merged.append(stream.pop(0))
        for event in late:
            merged.insert(rng.randint(len(merged) // 2, len(merged)), event)
        merged = self._disturb(response, merged)
        reason = ResponseEndReason.COMPLETED
        if rng.random() < 0.08:
            reason = rng.choice([r for r in ResponseEndReason if r is not reason])
        if rng.random() > 0.03:
            merged.append(
                ResponseEnded(response=response, reason=reason, terminal=TerminalRef(digest="end"))
            )
            if rng.random() < 0.05:
                merged.append(merged[-1])
        actions: list[Action] = self._feeds(merged)
        if confirmations:
            actions.append(Confirmations(tuple(confirmations)))
        return actions

    def _call(self, key: CallKey) -> tuple[list[Event], list[Event], bool]:
        """The events of one call in their own order, the ones it loses, and whether it is
        a call that waits for confirmation."""
        rng = self.rng
        tool = rng.choice(self.tools)
        name = tool.declaration.name
        if rng.random() < 0.03:
            name = "shell_exec"
        data = rng.choice(tool.examples)
        if rng.random() < 0.12:
            data = malformed(data, rng.choice(MALFORMED), self.limits.max_bytes)
        pieces = _split(rng, data)
        events: list[Event] = [CallOpened(key=key, tool=name, sequence=0)]
        # Placed at their byte offsets, as adapters write them; a few calls keep schema 1's
        # unpositioned fragments, which logs written before still hold.
        positioned = rng.random() < 0.9
        offsets = [sum(len(piece) for piece in pieces[:index]) for index in range(len(pieces))]
        fragments: list[Event] = [
            ArgumentsAppended(
                key=key,
                data=piece,
                offset=offset if positioned else None,
                first_sequence=number,
                last_sequence=number,
            )
            for number, (piece, offset) in enumerate(zip(pieces, offsets, strict=True), start=1)
        ]
        if positioned and len(pieces) > 1 and rng.random() < 0.1:
            # A re-delivery chunked otherwise: two fragments' bytes again, as one.
            index = rng.randrange(len(pieces) - 1)
            fragments.append(
                ArgumentsAppended(
                    key=key,
                    data=pieces[index] + pieces[index + 1],
                    offset=offsets[index],
                    first_sequence=index + 1,
                    last_sequence=index + 2,
                    fragments=2,
                )
            )
        lost: list[Event] = []
        if len(fragments) > 1 and rng.random() < 0.05:
            dropped = fragments.pop(rng.randrange(len(fragments)))
            if rng.random() < 0.5:
                lost.append(dropped)
        if len(fragments) > 1 and rng.random() < 0.1:
            index = rng.randrange(len(fragments) - 1)
            fragments[index], fragments[index + 1] = fragments[index + 1], fragments[index]
        events.extend(fragments)
        if rng.random() < 0.15 and len(events) > 1:
            index = rng.randrange(1, len(events))
            events.insert(rng.randint(index + 1, len(events)), events[index])
        if rng.random() > 0.03:
            final = data if rng.random() < 0.1 else None
            end = CallEnded(
                key=key, terminal=TerminalRef(sequence=len(pieces) + 1), final_arguments=final
            )
            events.append(end)
            if rng.random() < 0.08:
                lost.append(end)
        if rng.random() < 0.04:
            lost.append(events[0])
        needs = tool.declaration.needs_confirmation and name == tool.declaration.name
        return events, lost, needs

    def _disturb(self, response: ResponseRef, events: list[Event]) -> list[Event]:
        """Reconnects, replays after them, and text, at random places of a response's stream."""
        rng = self.rng
        if events and rng.random() < 0.1:
            at = rng.randrange(len(events))
            replayed = events[max(0, at - rng.randint(0, 3)) : at]
            resumable = rng.random() < 0.8
            events = [
                *events[:at],
                StreamLost(response=response, resumable=resumable),
                *([StreamResumed(response=response), *replayed] if resumable else []),
                *events[at:],
            ]
        if events and rng.random() < 0.2:
            events.insert(
                rng.randrange(len(events)), TextReceived(response=response, characters=12)
            )
        return events

    def _feeds(self, events: list[Event]) -> list[Action]:
        rng = self.rng
        feeds: list[Action] = []
        while events:
            size = rng.choice((1, 1, 1, 2, 3))
            batch, events = events[:size], events[size:]
            roll = rng.random()
            pause = 0.0 if roll < 0.7 else rng.uniform(0, 2) if roll < 0.995 else 31.0
            feeds.append(Feed(tuple(batch), pause))
        return feeds


def _interleave(rng: random.Random, first: list[Action], second: list[Action]) -> list[Action]:
    merged: list[Action] = []
    first, second = list(first), list(second)
    while first or second:
        source = first if first and (not second or rng.random() < 0.5) else second
        merged.append(source.pop(0))
    return merged


def make_plan(
    seed: int,
    keys: int,
    tools: Sequence[SimulatedTool],
    limits: CallLimits = SIMULATION_LIMITS,
    *,
    per_conversation: int = CALLS_PER_CONVERSATION,
) -> Plan:
    """The plan of one seed: the same for the same arguments, always. ``per_conversation``:
    the call keys of a conversation (fewer make more conversations, which a partitioned log
    spreads over more partitions)."""
    if keys < 1:
        raise ValueError(f"a simulation needs at least one call key, not {keys}")
    return _Planner(seed, keys, tools, limits, per_conversation).plan()
