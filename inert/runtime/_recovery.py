"""What a runtime does for the calls a stopped process left, and for the processes it shares
its log with.

Restart: calls that were assembling when the previous process stopped cannot be fed any more
(their stream went with it) and are cancelled with ``connection_lost``, unless their stream was
recorded as lost and resumable once (a background response): then it is lost and resumable
again, after the sequence that first loss recorded, and ``resumable_calls`` gives its calls as
they were then, so that the continuation sends again what the stopped process fed and never
wrote. A dispatched call without an outcome is recorded as ``outcome_unknown`` and never
dispatched again; terminal calls stay terminal.

Processes sharing the log: each beats, buries the processes that fell silent (leasing their
turns, one survivor winning each), ends what their turns were streaming and records the calls
their executors claimed as ``outcome_unknown`` (see ``inert.runtime._peers``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio
import trio.lowlevel

from ..events import (
    CallKey,
    ConflictError,
    ExecutionOutcomeUnknown,
    ExecutionTaskCreated,
    InertError,
    ProcessHeartbeat,
    ProcessLeft,
    ResponseRef,
    StreamLost,
    TurnLeased,
    TurnRef,
    process_stream,
)
from ..log import Log, NewEvent
from ._peers import Peers

if TYPE_CHECKING:
    from ._runtime import Runtime


async def keep_company(runtime: Runtime, peers: Peers) -> None:
    """Beat, bury the dead, take their turns over, end what they were streaming."""
    assert runtime.process is not None
    beat = process_stream(runtime.process)
    period = peers.lease_time.total_seconds() / 4
    while True:
        if runtime._beats_here:
            await runtime.log.append(
                [NewEvent(stream=beat, event=ProcessHeartbeat(process=runtime.process))]
            )
        # Silence is judged only by a fold that has read the log as it stood then: a fold
        # that lags (its router held up, or the process starved of CPU for a while) has not
        # heard the heartbeats written meanwhile, and would bury processes that still beat.
        # The wait is bounded, so that this process's own heartbeats go on meanwhile.
        now = runtime.log.now()
        head = await runtime.log.head()
        with trio.move_on_after(period):
            await runtime._router.wait_for(head)
        if runtime._router.position >= head:
            for dead in peers.newly_dead(now):
                if await _silent(runtime, peers, dead):
                    await _bury(runtime, peers, dead)
                else:
                    peers.spare(dead)
        while peers.gained:
            await _take_over(runtime, peers.gained.pop(0))
        with trio.move_on_after(period):
            await runtime._departed.wait()
        if runtime._departed.is_set():
            runtime._departed = trio.Event()


async def leave(log: Log, process: str) -> None:
    """Say in the log that the process stopped on purpose (``ProcessLeft``), if the log still
    takes it: one that does not is a process the others find dead once the lease runs out."""
    with trio.CancelScope(shield=True), contextlib.suppress(InertError):
        await log.append(
            [NewEvent(stream=process_stream(process), event=ProcessLeft(process=process))]
        )


async def _silent(runtime: Runtime, peers: Peers, process: str) -> bool:
    """Whether the log itself holds no heartbeat of the process within the lease time, or
    says last that it left: what
    this process heard may lag behind the log (a busy process hears late), and a process
    taken for dead on a late hearing would lose its turns while it beats."""
    log = runtime._heartbeats
    stream = process_stream(process)
    version = await log.stream_version(stream)
    if not version:
        return True
    last = await log.read_stream(stream, version)
    return (
        not last
        or isinstance(last[-1].event, ProcessLeft)
        or await log.time() - last[-1].recorded_at > peers.lease_time
    )


async def _bury(runtime: Runtime, peers: Peers, dead: str) -> None:
    """Lease the dead process's turns (one survivor wins each) and record that the calls
    its executors claimed have an unknown outcome."""
    assert runtime.process is not None
    for turn, (owner, version) in runtime._fold.leases().items():
        if owner != dead:
            continue
        lease = TurnLeased(turn=turn, owner=runtime.process, previous=dead)
        with contextlib.suppress(ConflictError):
            await runtime.log.append(
                [NewEvent(stream=turn.lease_stream, event=lease)],
                {turn.lease_stream: version},
            )
    await _record_unknown(runtime, lambda claimer, _: claimer == dead)


async def _take_over(runtime: Runtime, turn: TurnRef) -> None:
    """A turn this process leased from a dead one: what was still streaming is lost."""
    await runtime._caught_up()
    lease = runtime._fold.lease(turn)
    assert lease is not None
    lost = [
        NewEvent(
            stream=response.stream,
            event=_lost(runtime, response),
            # Every survivor would write the same loss: one id makes it one event.
            event_id=f"lost:{turn.lease_stream}:{lease[1]}:{response.stream}",
        )
        for response in runtime._fold.interrupted_responses()
        if response.turn_ref == turn
    ]
    if lost:
        await runtime.log.append(lost)


async def _record_unknown(
    runtime: Runtime, concerns: Callable[[str | None, CallKey], bool]
) -> None:
    """Outcome unknown for dispatched calls without an outcome whose claim ``concerns``
    (given the claiming process and the call)."""
    unknown = []
    for row in runtime.projections.ledger.rows():
        if not row.running:
            continue
        claim_id = _claim_of(runtime, row.key)
        claimer = None if runtime.peers is None else runtime.peers.claimer(claim_id)
        if concerns(claimer, row.key):
            task_id = await _task_of(runtime, row.key, claim_id)
            unknown.append(
                NewEvent(
                    stream=row.key.request_stream,
                    event=ExecutionOutcomeUnknown(key=row.key, claim_id=claim_id, task_id=task_id),
                    event_id=f"outcome-unknown:{claim_id}",
                )
            )
    if unknown:
        await runtime.log.append(unknown)


async def recover(runtime: Runtime) -> None:
    """Record what the stop of the previous process means for the calls it left.

    Alone on the log, that is every call; sharing it, the calls of the turns this process
    owns and the claims of its own executors (it ran under the same name before).
    """
    # First the decisions the previous process made but never wrote: a claim it answered
    # with a dispatch that never reached the log is dispatched now, then found unknown.
    await runtime.settle()
    owns = runtime._fold.owns
    lost = [
        NewEvent(stream=response.stream, event=_lost(runtime, response))
        for response in runtime._fold.interrupted_responses()
        if owns(response.turn_ref)
    ]
    if lost:
        await runtime.log.append(lost)
        # Ready once the losses are folded: what is resumable is then known.
        await runtime._caught_up()
    await _record_unknown(
        runtime,
        lambda claimer, key: claimer == runtime.process or (claimer is None and owns(key.turn_ref)),
    )


def _lost(runtime: Runtime, response: ResponseRef) -> StreamLost:
    """The loss of a stream its process no longer feeds. A stream that was lost and
    resumable before (a background response, resumed since) stays resumable, after the
    sequence that loss recorded: the log holds everything up to it, and a continuation
    from there sends again whatever the stopped process fed after it and did not write."""
    point = runtime._fold.resume_point(response)
    if point is None:
        return StreamLost(response=response, resumable=False)
    return StreamLost(response=response, resumable=True, last_sequence=point.after)


async def _task_of(runtime: Runtime, key: CallKey, claim_id: str) -> str | None:
    """The task the claim's run was on its server, as its executor last noted it."""
    noted = [
        recorded.event.task_id
        for recorded in await runtime.log.read_stream(key.request_stream)
        if isinstance(recorded.event, ExecutionTaskCreated) and recorded.event.claim_id == claim_id
    ]
    return noted[-1] if noted else None


def _claim_of(runtime: Runtime, key: CallKey) -> str:
    state = runtime._fold.state(key)
    assert state is not None
    return state.claim_id
