"""Bugs planted in a runtime process of a fault run, for the harness to catch.

``plant_in_process(name)`` plants one for the block, in the process that runs it (a child
process of the run: nothing of the tests' own process is touched). Besides the simulator's
plants (``inert.testing.PLANTS``, bugs of the decider), two bugs of a process among others:

- ``write_after_lease_lost``: no process hears that a turn's lease moved (taken over from a
  process taken for dead, or handed on), and decisions for such a turn are not fenced by its
  lease: its first holder goes on writing for it after it lost it;
- ``run_refused_claim``: an executor is handed a call whose claim was refused, as a process that
  took its own claim's answer for granted would.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from weakref import WeakKeyDictionary

from inert import ClaimRefused, Dispatch, ReadyCall, TurnRef
from inert.actors._fold import CallFold
from inert.events import CallValidated, TurnLeased
from inert.log import new_event_id
from inert.runtime._runtime import Runtime
from inert.testing import PLANTS, planted

PROCESS_PLANTS = ("write_after_lease_lost", "run_refused_claim")


def plant_names() -> list[str]:
    """Every bug a fault run can plant."""
    return [*PROCESS_PLANTS, *PLANTS]


@contextmanager
def _write_after_lease_lost() -> Iterator[None]:
    moved: WeakKeyDictionary[CallFold, set[TurnRef]] = WeakKeyDictionary()
    leased, lease = CallFold._leased, CallFold.lease

    def moves_unheard(fold: CallFold, event: TurnLeased, version: int) -> Any:
        if event.previous is None:
            return leased(fold, event, version)
        # The lease moved (taken over, or handed on): nobody hears it, the first holder acts on.
        moved.setdefault(fold, set()).add(event.turn)
        return []

    def unfenced(fold: CallFold, turn: TurnRef) -> tuple[str, int] | None:
        held = lease(fold, turn)
        if turn in moved.get(fold, ()) and held is not None and held[0] == fold.process:
            # The first holder's decisions go unfenced; the others see it hold the turn still.
            return None
        return held

    CallFold._leased = moves_unheard  # type: ignore[method-assign,assignment]
    CallFold.lease = unfenced  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        CallFold._leased, CallFold.lease = leased, lease  # type: ignore[method-assign]


@contextmanager
def _run_refused_claim() -> Iterator[None]:
    claim = Runtime.claim

    async def claimed_anyway(runtime: Runtime, call: Any, *, executor: str) -> Dispatch:
        try:
            return await claim(runtime, call, executor=executor)
        except ClaimRefused:
            key = call.key if isinstance(call, ReadyCall) else call
            view = runtime._fold.scope.turn(key.turn_ref)
            recorded = await runtime.log.read_stream(key.stream)
            if view is None or not any(r.event_type == CallValidated.TAG for r in recorded):
                raise
            decision, arguments = await runtime._validated(key, kept=None)
            return Dispatch(
                key=key,
                turn=key.turn_ref,
                tenant=key.tenant,
                principal=view.principal,
                tool=decision.tool,
                tool_digest=decision.tool_digest,
                arguments=arguments,
                arguments_digest=decision.arguments_digest,
                claim_id=new_event_id(),
                executor=executor,
            )

    Runtime.claim = claimed_anyway  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        Runtime.claim = claim  # type: ignore[method-assign]


@contextmanager
def plant_in_process(name: str | None) -> Iterator[None]:
    """Run the block with the named bug planted (``None``: none)."""
    if name == "write_after_lease_lost":
        with _write_after_lease_lost():
            yield
    elif name == "run_refused_claim":
        with _run_refused_claim():
            yield
    else:
        with planted(name):
            yield
