"""Retiring idle turns, so that a runtime holds its live calls and its horizon, not its history.

A turn that has had no live call for the runtime's horizon (``ledger_horizon``) is over: the
runtime appends ``TurnRetired`` to its stream, and every fold of the log (this process's, a
replay's, another process's) forgets the turn and its calls at that position, and every
projection forgets what it held of them. The retirement is an event rather than a rule of time
applied by each fold, so that a replay forgets exactly what the live runtime forgot, whatever
horizon the replaying program was given.

The retirement is written by the turn's owner. Its event id is made of the turn and of the
time the turn became idle, so that two processes retiring the same idle turn write one event,
and a turn that became live again and idle later is retired by a new one. A retirement that
lands after a call of the turn became live again is void (the fold says so, see
``inert.actors._fold``); the turn is retired again once it is idle for the horizon.

The task sleeps until the longest idle turn comes due, or for the horizon when no turn is idle
(a turn going idle now comes due no sooner), so that it wakes for retirements only, never for
the log's other events.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import trio

from ..actors import CallFold
from ..events import TurnRetired
from ..events._times import datetime_to_micros
from ..log import Log, NewEvent


async def retire_idle_turns(
    log: Log, fold: CallFold, horizon: timedelta, caught_up: Callable[[], Awaitable[None]]
) -> None:
    """Retire, for ever, the turns this process owns once they have been idle for ``horizon``."""
    while True:
        now = log.now()
        cutoff = now - horizon
        due = [turn for turn in fold.idle_turns(cutoff) if fold.owns(turn)]
        if due:
            retirements = []
            for turn in due:
                since = fold.idle_since(turn)
                assert since is not None
                retirements.append(
                    NewEvent(
                        stream=turn.stream,
                        event=TurnRetired(turn=turn),
                        event_id=f"retired:{turn.stream}:{datetime_to_micros(since)}",
                    )
                )
            await log.append(retirements)
            # Folded before looking again, so that the same turns are not found idle again.
            await caught_up()
        following = fold.next_idle_after(cutoff)
        wait = horizon if following is None else following + horizon - log.now()
        await trio.sleep(max(wait.total_seconds(), 0.0))
