"""The commands of people: ``cancel-turn``, ``confirm`` and ``deny`` for a turn's principal,
``control`` for operators.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import timedelta

import trio

from ..actors import TERMINAL_PHASES, ToolDeclaration
from ..events import (
    CallKey,
    ConfigurationError,
    OperatorControl,
    RefusedError,
    TurnRef,
)
from ..events._identity import key_part, shown_text
from ..log import open_log
from ..projections import (
    JSON,
    AuditEntry,
    LedgerRow,
    Preview,
    Projections,
    in_force,
    never_seen,
    preview,
    without_effect,
)
from ..projections._controls import control_event, target_of
from ..projections._shown import stage_of
from ..runtime import PendingConfirmation, Runtime, trio_clock
from ..runtime._controls import give_control
from ..runtime._runtime import DEFAULT_CONFIRMATION_VALIDITY
from ._common import fold_log, runtime_on, settle_within
from ._partitions import FoldedPartitions
from ._tables import Keys, key_json

# --- cancel-turn -----------------------------------------------------------------------------


def turn_rows(runtime: Runtime, turn: TurnRef) -> dict[CallKey, LedgerRow]:
    return {row.key: row for row in runtime.projections.ledger.rows() if row.key.turn_ref == turn}


def _check_turn_known(runtime: Runtime, turn: TurnRef) -> None:
    """A turn the log does not hold is a mistyped identity more often than a turn to come."""
    if runtime.turn_principal(turn) is None:
        raise RefusedError(
            f"turn {turn.stream!r} is not on this log: check --tenant, --conversation and"
            f" --turn (inert ledger --tenant {turn.tenant} lists the calls of its turns)"
        )


async def cancel_turn_command(
    url: str, turn: TurnRef, *, principal: str, reason: str, as_json: bool = False
) -> None:
    async with runtime_on(url, turn=turn) as runtime:
        await settle_within(runtime)
        _check_turn_known(runtime, turn)
        before = turn_rows(runtime, turn)
        await runtime.cancel_turn(turn, principal=principal, reason=reason)
        await settle_within(runtime)
        after = turn_rows(runtime, turn)
    cancelled = [
        key
        for key, row in after.items()
        if row.state == "cancelled" and (key not in before or before[key].state != "cancelled")
    ]
    ended = sum(1 for row in before.values() if row.state in TERMINAL_PHASES)
    if as_json:
        _print_json(
            {
                "turn": {
                    "tenant": turn.tenant,
                    "conversation": turn.conversation,
                    "turn": turn.turn,
                },
                "principal": principal,
                "calls": len(after),
                "ended_before": ended,
                "cancelled": [key_json(key) for key in cancelled],
            }
        )
        return
    shown = Keys(after)
    noun = "call" if len(cancelled) == 1 else "calls"
    print(
        f"turn {key_part(turn.tenant)}/{key_part(turn.conversation)}/{key_part(turn.turn)}"
        " cancelled"
        f" for {principal}: {len(cancelled)} {noun} of its {len(after)} cancelled"
        f" ({ended} had ended before)"
    )
    for key in cancelled:
        print(f"  cancelled  {shown.show(key)}  {key_part(after[key].tool)}")


# --- operators ---------------------------------------------------------------------------------

OPERATORS_VARIABLE = "INERT_OPERATORS"
"""The environment variable naming the principals with the operator role, comma separated."""


def configured_operators() -> frozenset[str]:
    """The operator principals ``INERT_OPERATORS`` names."""
    return frozenset(
        name.strip() for name in os.environ.get(OPERATORS_VARIABLE, "").split(",") if name.strip()
    )


CONTROL_WAIT_SECONDS = 10.0
"""How long ``inert control`` waits, by default, for the runtimes' decisions on the calls a
control ends or asks to stop."""


def _decided(folded: FoldedPartitions, shown: Preview) -> bool:
    """Whether the runtimes have answered for every call of the preview: ended, or asked to
    stop (or done running)."""
    for row in shown.ending:
        now = folded.row(row.key)
        if now is not None and now.state not in TERMINAL_PHASES:
            return False
    for row in shown.stopping:
        now = folded.row(row.key)
        if now is not None and now.outcome is None:
            return False
    return True


async def _follow_until_decided(
    folded: FoldedPartitions, shown: Preview, position: int, wait: float
) -> bool:
    """Fold what the runtimes write, in every partition, until they have answered the control
    at ``position`` of partition 0 for every call of the preview, for at most ``wait``
    seconds; whether they have."""

    def answered() -> bool:
        return folded.controls.position >= position and _decided(folded, shown)

    with trio.move_on_after(wait):
        async with trio.open_nursery() as nursery:
            for number in folded.parts:
                nursery.start_soon(folded.follow, number)
            while not answered():
                await folded.changed.wait()
                folded.changed = trio.Event()
            nursery.cancel_scope.cancel()
    return answered()


async def control_command(
    url: str,
    action: str,
    target: str,
    *,
    tenant: str | None,
    operator: str,
    reason: str,
    as_json: bool = False,
    dry_run: bool = False,
    new_target: bool = False,
    wait: float = CONTROL_WAIT_SECONDS,
) -> None:
    """Give an operator control beside whatever runs on the log: it is appended as the
    console appends it (no runtime is opened here), and the runtimes that own the calls decide;
    what they decided within ``wait`` seconds is reported."""
    operators = configured_operators()
    if not operators and not dry_run:
        raise RefusedError(
            f"no operator is configured: {OPERATORS_VARIABLE} names the operator principals"
        )
    event = control_event(action, target, tenant=tenant, operator=operator, reason=reason)
    async with open_log(url, clock=trio_clock(), create=False) as log:
        folded = FoldedPartitions(log)
        await folded.catch_up()
        audit = folded.controls.audit
        idle = without_effect(event, audit)
        if idle is not None:
            raise RefusedError(f"{idle}: {action} would change nothing, and is not given")
        rows = folded.rows()
        unseen = never_seen(event, rows, audit)
        if unseen is not None and not new_target:
            raise RefusedError(
                f"{unseen}: check the name (inert ledger lists the calls), or give --new-target"
                " to control it before it is ever seen"
            )
        shown = preview(event, rows)
        running = await log.runtime_running()
        if dry_run:
            _print_preview(event, action, shown, running=running, as_json=as_json)
            return
        position = await give_control(log, event, operators.__contains__)
        decided = running and await _follow_until_decided(folded, shown, position, wait)
        if not decided:
            await folded.catch_up()
        entry = folded.entry(position)
    _print_given(entry, action, target, tenant, shown, running=running, as_json=as_json)


NO_RUNTIME = (
    "no runtime is running on this log: it takes effect before any dispatch when one opens it"
)


def _noun(count: int, what: str = "call") -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def _print_preview(
    event: OperatorControl, action: str, shown: Preview, *, running: bool, as_json: bool
) -> None:
    if as_json:
        _print_json(
            {
                "action": action,
                "dry_run": True,
                "runtime_running": running,
                "would_end": [
                    key_json(row.key) | {"stage": stage_of(row).value} for row in shown.ending
                ],
                "would_ask_to_stop": [key_json(row.key) for row in shown.stopping],
            }
        )
        return
    noun, name = target_of(event)
    where = "a runtime is running on this log" if running else NO_RUNTIME
    print(
        f"dry run: {action} {noun} {key_part(name)} would end {_noun(len(shown.ending))} and ask"
        f" {_noun(len(shown.stopping), 'running call')} to stop; nothing was given ({where})"
    )
    keys = Keys(row.key for row in (*shown.ending, *shown.stopping))
    for row in shown.ending:
        stage = stage_of(row).value
        print(f"  would end          {keys.show(row.key)}  {key_part(row.tool)}  {stage}")
    for row in shown.stopping:
        print(f"  would ask to stop  {keys.show(row.key)}  {key_part(row.tool)}  running")


def _print_given(
    entry: AuditEntry,
    action: str,
    target: str,
    tenant: str | None,
    shown: Preview,
    *,
    running: bool,
    as_json: bool,
) -> None:
    ended = set(entry.ended)
    held = [row for row in shown.ending if row.key not in ended] if not running else []
    if as_json:
        _print_json(
            {
                "action": action,
                "target": target,
                "tenant": tenant,
                "operator": entry.operator,
                "position": entry.position,
                "runtime_running": running,
                "ended": [key_json(key) for key in entry.ended],
                "asked_to_stop": [
                    key_json(key) | {"outcome": outcome}
                    for key, outcome in entry.asked_to_stop.items()
                ],
                "held": [key_json(row.key) | {"stage": stage_of(row).value} for row in held],
            }
        )
        return
    said = (
        f"{action} {key_part(target)} by {shown_text(entry.operator)} at position"
        f" {entry.position}: {_noun(len(entry.ended))} ended,"
        f" {_noun(len(entry.asked_to_stop), 'running call')} asked to stop"
    )
    if not running:
        said += f"; recorded, {NO_RUNTIME}"
    print(said)
    keys = Keys([*entry.ended, *entry.asked_to_stop, *(row.key for row in held)])
    for key in entry.ended:
        print(f"  ended          {keys.show(key)}")
    for key, outcome in entry.asked_to_stop.items():
        print(f"  asked to stop  {keys.show(key)}  {outcome}")
    for row in held:
        print(f"  held by it     {keys.show(row.key)}  {key_part(row.tool)}  {stage_of(row).value}")
    if running and len(entry.ended) < len(shown.ending):
        print(
            f"  {len(shown.ending) - len(entry.ended)} of the calls it concerns had not been"
            " ended when the wait ran out: see inert audit"
        )


async def controls_command(url: str, *, as_json: bool) -> None:
    """The controls in force now: who gave each, when and why."""
    projections = Projections()
    await fold_log(url, projections.apply, what="controls")
    entries = in_force(projections.audit)
    if as_json:
        for entry in entries:
            _print_json(entry.digest_json())
        return
    if not entries:
        print("(no control in force)")
        return
    for entry in entries:
        scope = ", ".join(
            f"{name} {key_part(value)}" for name, value in entry.scope.items() if value
        )
        print(
            f"@{entry.position}  {entry.recorded_at}  {entry.control.removeprefix('operator.')}"
            f"  {scope}  by {shown_text(entry.operator)}: {shown_text(entry.reason)}"
        )


# --- confirm and deny ------------------------------------------------------------------------


def _call_of_turn(runtime: Runtime, turn: TurnRef, call_id: str, response: str | None) -> CallKey:
    """The one call of the turn with this provider call id (and response, where given)."""
    _check_turn_known(runtime, turn)
    keys = [
        key
        for key in turn_rows(runtime, turn)
        if key.call == call_id and (response is None or key.response == response)
    ]
    if not keys:
        of = "" if response is None else f" of response {response!r}"
        raise RefusedError(
            f"turn {turn.stream!r} has no call {call_id!r}{of}: check --call-id and --response"
            f" (inert ledger --turn {turn.turn} lists its calls)"
        )
    if len(keys) > 1:
        responses = ", ".join(sorted(key.response for key in keys))
        raise RefusedError(
            f"{len(keys)} calls of turn {turn.stream!r} have call id {call_id!r} (responses"
            f" {responses}): name one with --response"
        )
    return keys[0]


def _check_edit_declared(
    pending: PendingConfirmation, tools: Sequence[ToolDeclaration] | None
) -> None:
    """An edit is validated against the declaration the turn offered, which only ``--tools``
    can give this command: without it the edit could only fail as an unknown tool."""
    offered = f"{pending.tool!r} (declaration {pending.tool_digest[:19]}...)"
    if not tools:
        raise ConfigurationError(
            "--arguments needs --tools: the TOOLS.json of the declarations the turn offered,"
            f" which validate the edit; it must hold the declaration of {offered}"
        )
    if any(declaration.digest == pending.tool_digest for declaration in tools):
        return
    named = [declaration for declaration in tools if declaration.name == pending.tool]
    if named:
        raise ConfigurationError(
            f"--tools declares {pending.tool!r} otherwise than the turn offered it"
            f" ({named[0].digest[:19]}..., the turn offered {pending.tool_digest[:19]}...):"
            " give the declarations the turn was started with"
        )
    raise ConfigurationError(
        f"--tools does not declare {offered}, the tool the turn offered for this call: give"
        " the declarations the turn was started with"
    )


async def confirm_command(
    url: str,
    turn: TurnRef,
    *,
    call_id: str,
    response: str | None,
    principal: str,
    arguments_digest: str | None,
    expires_in: timedelta = DEFAULT_CONFIRMATION_VALIDITY,
    edit: bytes | None = None,
    tools: Sequence[ToolDeclaration] | None = None,
    as_json: bool = False,
) -> None:
    async with runtime_on(url, turn=turn, tools=tools or ()) as runtime:
        await settle_within(runtime)
        key = _call_of_turn(runtime, turn, call_id, response)
        pending = await runtime.pending_confirmation(key)
        if pending is None:
            row = runtime.projections.ledger.row(key)
            state = "unknown" if row is None else row.state
            raise RefusedError(f"call {key.stream!r} is not waiting for a confirmation ({state})")
        if edit is not None:
            _check_edit_declared(pending, tools)
        # A digest given is the one the person was shown: the confirmation binds that one, and
        # the call's actor refuses it if the arguments are not those.
        digest = arguments_digest or pending.arguments_digest
        expires_at = await runtime.confirm(
            key, principal=principal, arguments_digest=digest, expires_in=expires_in, arguments=edit
        )
        await settle_within(runtime)
        # Confirmed, the call is ready: the digest of what would run, an edit's if one passed.
        ready = runtime.ready_call(key)
        confirmed = digest if ready is None else ready.arguments_digest
    if as_json:
        _print_json(
            {
                "call": key_json(key),
                "tool": pending.tool,
                "principal": principal,
                "arguments_digest": confirmed,
                "edited_from": None if confirmed == digest else digest,
                "ready": True,
                "claim_before": expires_at.isoformat(),
            }
        )
        return
    edited = "" if confirmed == digest else f" (edited; the model's were {digest})"
    print(
        f"confirmed {Keys([key]).show(key)} ({key_part(pending.tool)}) for {principal}: arguments"
        f" {confirmed}{edited}; the call is ready to run until"
        f" {expires_at:%Y-%m-%d %H:%M:%S} UTC"
    )


async def deny_command(
    url: str,
    turn: TurnRef,
    *,
    call_id: str,
    response: str | None,
    principal: str,
    reason: str,
    as_json: bool = False,
) -> None:
    async with runtime_on(url, turn=turn) as runtime:
        await settle_within(runtime)
        key = _call_of_turn(runtime, turn, call_id, response)
        await runtime.deny(key, principal=principal, reason=reason)
        await settle_within(runtime)
        row = runtime.projections.ledger.row(key)
    state = "-" if row is None else row.state
    if as_json:
        _print_json({"call": key_json(key), "principal": principal, "state": state})
        return
    print(f"denied {Keys([key]).show(key)} for {principal}: the call is {state}, it never runs")


def _print_json(entry: dict[str, JSON]) -> None:
    print(json.dumps(entry, ensure_ascii=False))
