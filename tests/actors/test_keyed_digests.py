"""Rules 10 of the decider: the digests that name a call's arguments, and a tool the turn did not
offer, are keyed by the log; a turn of earlier rules digests as it did, so that the logs it
wrote replay to the decisions they hold."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest
import trio

from inert import ToolDeclaration, open_runtime
from inert.actors._call import (
    KEYED_DIGESTS,
    CallContext,
    CallLimits,
    CallState,
    Decision,
    Input,
    TurnView,
    recorded,
)
from inert.actors._decider import step
from inert.actors._places import unoffered_tool
from inert.events import (
    RULES_VERSION,
    ArgumentsAppended,
    CallCollecting,
    CallEnded,
    CallKey,
    CallOpened,
    CallTerminalCandidate,
    Event,
    OfferedTool,
    TerminalRef,
)
from inert.log import MemoryLog, MemoryStore, NewEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = CallKey(tenant="acme", conversation="c1", turn="t1", response="r1", item="i1", call="c1")
TOOL = OfferedTool(name="lookup", digest="sha256:lookup")
CANONICAL = b'{"answer":"yes"}'
DIGEST_KEY = b"d" * 32


def _through_end(rules: int, tool: str = TOOL.name) -> tuple[Decision, ...]:
    """A call of a turn of ``rules`` that opens, receives its arguments and ends, under a log
    whose key for arguments digests is ``DIGEST_KEY``: every decision it records."""
    turn = TurnView(principal="user:alice", tools={TOOL.name: TOOL}, rules=rules)
    context = CallContext(turn=turn, limits=CallLimits(), digest_key=DIGEST_KEY)
    if rules < KEYED_DIGESTS:
        # As the fold gives it: no key for a turn of earlier rules.
        context = CallContext(turn=turn, limits=CallLimits())
    state = CallState(key=KEY)
    events: list[Event] = [
        CallOpened(key=KEY, tool=tool, sequence=0),
        ArgumentsAppended(key=KEY, data=CANONICAL, offset=0, first_sequence=1, last_sequence=1),
        CallEnded(key=KEY, terminal=TerminalRef(sequence=2)),
    ]
    decisions: list[Decision] = []
    for position, event in enumerate(events, start=1):
        received = Input(
            event=event,
            position=position,
            event_id=f"event-{position}",
            at=T0 + timedelta(seconds=position),
        )
        state, made = step(state, received, context)
        decisions.extend(made)
    return tuple(decisions)


def _candidate(decisions: tuple[Decision, ...]) -> CallTerminalCandidate:
    [found] = [event for event in recorded(decisions) if isinstance(event, CallTerminalCandidate)]
    return found


def test_a_turn_started_now_keys_its_digests() -> None:
    """A turn started now is judged by rules 10 or later."""
    assert RULES_VERSION >= KEYED_DIGESTS == 10


@pytest.mark.parametrize("rules", range(KEYED_DIGESTS, RULES_VERSION + 1))
def test_the_arguments_digest_is_an_hmac_keyed_by_the_log(rules: int) -> None:
    """The digest of the canonical arguments is HMAC-SHA-256 under the log's key: without the
    key, trying the candidate arguments finds nothing."""
    digest = _candidate(_through_end(rules)).arguments_digest
    expected = hmac.new(DIGEST_KEY, CANONICAL, hashlib.sha256).hexdigest()
    assert digest == "hmac-sha256:" + expected
    assert hashlib.sha256(CANONICAL).hexdigest() not in digest


@pytest.mark.parametrize("rules", range(1, KEYED_DIGESTS))
def test_a_turn_of_earlier_rules_digests_as_it_did(rules: int) -> None:
    """A turn of earlier rules records the plain SHA-256 it always did."""
    digest = _candidate(_through_end(rules)).arguments_digest
    assert digest == "sha256:" + hashlib.sha256(CANONICAL).hexdigest()


def test_an_unoffered_tool_is_named_by_a_keyed_digest() -> None:
    """A tool the turn did not offer is named by its length and a digest keyed by the log."""
    tool = "guessable"
    collecting = recorded(_through_end(KEYED_DIGESTS, tool=tool))[0]
    assert isinstance(collecting, CallCollecting)
    keyed = hmac.new(DIGEST_KEY, tool.encode(), hashlib.sha256).hexdigest()[:16]
    assert collecting.tool == f"<unoffered tool of 9 characters, hmac-sha256:{keyed}>"
    assert collecting.tool == unoffered_tool(tool, DIGEST_KEY)
    assert collecting.tool != unoffered_tool(tool)


async def _digest_in_a_new_log(store: MemoryStore) -> str:
    """The digest a runtime on a log of ``store`` gives the same arguments of the same call."""
    async with open_runtime(log=MemoryLog(store), tools=[ToolDeclaration(name="lookup")]) as rt:
        await rt.start_turn(tenant="acme", conversation="c1", turn="t1", principal="user:alice")
        await rt.feed(
            [
                CallOpened(key=KEY, tool="lookup", sequence=0),
                ArgumentsAppended(key=KEY, data=CANONICAL, first_sequence=1, last_sequence=1),
                CallEnded(key=KEY, terminal=TerminalRef(sequence=2)),
            ]
        )
        await rt.settle()
        found = [
            recorded.event.arguments_digest
            for recorded in await rt.log.read_stream(KEY.stream)
            if isinstance(recorded.event, CallTerminalCandidate)
        ]
        assert len(found) == 1
        return found[0]


def test_two_logs_give_the_same_arguments_different_digests() -> None:
    """Digests say which calls of one log had the same arguments, never across logs."""
    first = trio.run(_digest_in_a_new_log, MemoryStore())
    second = trio.run(_digest_in_a_new_log, MemoryStore())
    again = trio.run(_digest_in_a_new_log, MemoryStore(secret=b"s" * 32))
    same = trio.run(_digest_in_a_new_log, MemoryStore(secret=b"s" * 32))
    assert first.startswith("hmac-sha256:")
    assert first != second
    assert again == same


async def _redacted_digest(store: MemoryStore) -> str:
    log = MemoryLog(store)
    await log.append(
        [
            NewEvent(
                stream=KEY.stream,
                event_id="e1",
                event=ArgumentsAppended(key=KEY, data=CANONICAL, first_sequence=1, last_sequence=1),
            )
        ]
    )
    await log.redact(KEY.stream, 1)
    [row] = await log.read_stream(KEY.stream)
    digest = getattr(row.event, "digest", "")
    assert isinstance(digest, str)
    return digest


def test_a_redacted_payload_leaves_a_digest_keyed_by_its_log() -> None:
    """What retention leaves of a payload is keyed by the log: two logs leave different digests
    of the same bytes."""
    first = trio.run(_redacted_digest, MemoryStore())
    second = trio.run(_redacted_digest, MemoryStore())
    assert first
    assert second
    assert first != second
