"""The commands of people: ``cancel-turn``, ``confirm`` and ``deny`` for a turn's principal,
``control`` for operators.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import timedelta

from ..actors import TERMINAL_PHASES, ToolDeclaration
from ..events import (
    CallKey,
    ConfigurationError,
    RefusedError,
    TurnRef,
)
from ..events._identity import key_part
from ..projections import JSON, LedgerRow
from ..runtime import PendingConfirmation, Runtime
from ..runtime._runtime import DEFAULT_CONFIRMATION_VALIDITY
from ._common import runtime_on, settle_within
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
    async with runtime_on(url) as runtime:
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


async def control_command(
    url: str,
    action: str,
    target: str,
    *,
    tenant: str | None,
    operator: str,
    reason: str,
    as_json: bool = False,
) -> None:
    operators = configured_operators()
    if not operators:
        raise RefusedError(
            f"no operator is configured: {OPERATORS_VARIABLE} names the operator principals"
        )
    async with runtime_on(url, operators=operators) as runtime:
        await settle_within(runtime)
        match action:
            case "quarantine-response":
                position = await runtime.quarantine_response(
                    target, tenant=tenant, operator=operator, reason=reason
                )
            case "disable-tool":
                position = await runtime.disable_tool(
                    target, tenant=tenant, operator=operator, reason=reason
                )
            case "enable-tool":
                position = await runtime.enable_tool(
                    target, tenant=tenant, operator=operator, reason=reason
                )
            case "stop-tenant":
                position = await runtime.stop_tenant(target, operator=operator, reason=reason)
            case _:
                position = await runtime.resume_tenant(target, operator=operator, reason=reason)
        await settle_within(runtime)
        [entry] = [e for e in runtime.projections.audit.entries() if e.position == position]
    ended = len(entry.ended)
    if as_json:
        _print_json(
            {
                "action": action,
                "target": target,
                "tenant": tenant,
                "operator": operator,
                "position": position,
                "ended": [key_json(key) for key in entry.ended],
            }
        )
        return
    print(
        f"{action} {target} by {operator} at position {position}:"
        f" {ended} {'call' if ended == 1 else 'calls'} ended"
    )
    for key in entry.ended:
        print(f"  ended  {Keys(entry.ended).show(key)}")


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
    async with runtime_on(url, tools=tools or ()) as runtime:
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
    async with runtime_on(url) as runtime:
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
