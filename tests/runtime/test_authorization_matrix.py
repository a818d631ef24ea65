"""The authorization matrix: who may confirm and claim a call that waits for confirmation.

Every combination of the tenant a claim is made under {the call's, another}, the principal who
confirms {the turn's owner, another}, the turn {current, stale: superseded by a newer one},
the approval {fresh, expired, used by an earlier dispatch, for other arguments, under another
tenant} and a replayed terminal {none, an old turn's cancellation again, the call's own end
and its response's completion again}. Exactly the single valid path (the call's tenant, the
owner, the current turn, a fresh approval) dispatches, once, whatever is replayed; every other
combination dispatches nothing, and each request refused is recorded in the log.
"""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from builders import call_key

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    ClaimRefused,
    ConfirmationRefused,
    RefusedError,
    ResponseEnded,
    ResponseEndReason,
    Runtime,
    TerminalRef,
    ToolDeclaration,
    TurnRef,
    open_runtime,
)
from inert.events import EventRejected

OWNER, OTHER = "user:alice", "user:mallory"
TOOL = ToolDeclaration(name="send_email", needs_confirmation=True)
ARGUMENTS = b'{"to": "bob@example.com", "body": "hi"}'

TENANTS = ("call's", "other")
ACTORS = ("owner", "other")
TURNS = ("current", "stale")
APPROVALS = ("fresh", "expired", "used", "other arguments", "other tenant")
REPLAYS = ("none", "old cancel", "old complete")
MATRIX = list(itertools.product(TENANTS, ACTORS, TURNS, APPROVALS, REPLAYS))


def ending(key: CallKey) -> list[CallEnded | ResponseEnded]:
    return [
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=9),
        ),
    ]


async def waiting_call(runtime: Runtime, replay: str) -> tuple[CallKey, str]:
    """A call of turn t1 of tenant A, validated and waiting for its owner's confirmation."""
    if replay == "old cancel":
        old = await runtime.start_turn(tenant="A", conversation="c1", turn="t0", principal=OWNER)
        await runtime.cancel_turn(old, principal=OWNER)
    await runtime.start_turn(tenant="A", conversation="c1", turn="t1", principal=OWNER)
    key = call_key(tenant="A")
    await runtime.feed(
        [
            CallOpened(key=key, tool=TOOL.name, sequence=0),
            ArgumentsAppended(key=key, data=ARGUMENTS, first_sequence=1, last_sequence=1),
            *ending(key),
        ]
    )
    await runtime.settle()
    pending = await runtime.pending_confirmation(key)
    assert pending is not None
    return key, pending.arguments_digest


async def confirm(
    runtime: Runtime, key: CallKey, principal: str, digest: str, **kw: object
) -> bool:
    try:
        await runtime.confirm(key, principal=principal, arguments_digest=digest, **kw)  # type: ignore[arg-type]
    except (ConfirmationRefused, RefusedError):
        return False
    return True


async def claim(runtime: Runtime, key: CallKey) -> bool:
    try:
        dispatch = await runtime.claim(key, executor="matrix")
    except (ClaimRefused, RefusedError):
        return False
    await runtime.complete(dispatch)
    return True


async def rejections(runtime: Runtime) -> int:
    return sum(isinstance(event.event, EventRejected) for event in await runtime.log.read(1))


@pytest.mark.parametrize(
    ("tenant", "actor", "turn", "approval", "replay"),
    MATRIX,
    ids=["/".join(combination) for combination in MATRIX],
)
async def test_only_the_single_valid_path_dispatches(
    tenant: str, actor: str, turn: str, approval: str, replay: str
) -> None:
    """The claim dispatches only for the call's tenant, its owner, the current turn and a fresh
    approval, once; everything refused on the way is recorded as a rejection."""
    async with open_runtime(log="memory://", tools=[TOOL]) as runtime:
        key, digest = await waiting_call(runtime, replay)
        principal = OWNER if actor == "owner" else OTHER
        if turn == "stale":
            await runtime.start_turn(tenant="A", conversation="c1", turn="t2", principal=OWNER)
        if replay == "old complete":
            await runtime.feed(ending(key))
        elif replay == "old cancel":
            await runtime.cancel_turn(
                TurnRef(tenant="A", conversation="c1", turn="t0"), principal=OWNER
            )
        await runtime.settle()
        before = await rejections(runtime)
        refused = 0
        if approval == "used":
            # An approval that already led to a dispatch, by the owner, in the current turn.
            await confirm(runtime, key, OWNER, digest)
            earlier = await claim(runtime, key)
            assert earlier == (turn == "current")
        elif approval == "fresh":
            refused += not await confirm(runtime, key, principal, digest)
        elif approval == "expired":
            refused += not await confirm(
                runtime, key, principal, digest, expires_in=timedelta(seconds=-1)
            )
        elif approval == "other arguments":
            refused += not await confirm(runtime, key, principal, "sha256:" + "0" * 64)
        else:
            refused += not await confirm(runtime, call_key(tenant="B"), principal, digest)
        claimed = await claim(runtime, key if tenant == "call's" else call_key(tenant="B"))
        refused += not claimed
        await runtime.settle()
        valid = (tenant, actor, turn, approval) == ("call's", "owner", "current", "fresh")
        assert claimed is valid
        row = runtime.projections.ledger.row(key)
        assert row is not None
        dispatched_once = turn == "current" and (valid or approval == "used")
        assert (row.dispatch == "dispatched") is dispatched_once, row
        assert await rejections(runtime) - before >= refused
