"""Input a running call asks its principal for: the executor's request, the person's answer,
bound to the call as a confirmation is, and carried back to the executor.

A dispatched call is past the call state machine (its state is ``dispatched``, and the decider
reads no executor's report); what its run does on its way is the executor's, and the runtime
records it as notes in the call's request stream, beside the outcomes. The request and the
answer are named in the log by the keyed digest and size of their canonical JSON (as a call's
arguments are, rule 14 of ``inert.actors._decider``), never by a value: the request is shown to
the person and the answer handed to the executor in memory, by the runtime process whose
executor holds the claim.

An answer binds as a confirmation does: it is given by the call's principal, for the request
the digest names, before the request expires, once. The first answer taken closes the request;
any other is refused before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import trio
from attrs import frozen

from ..actors import canonical_json
from ..actors._arguments import arguments_digest
from ..events import CallKey, ConfigurationError, InputRefused, RefusedError

MAX_TASK_ID_LENGTH = 256
"""The longest task id a note records (a server's handle, not a value of the call)."""


@frozen(kw_only=True)
class PendingInput:
    """What a running call asks its principal for: the call, the tool, the task the run is
    where the executor made one, the request as the executor gave it (to show it; inert never
    logs it), its exact digest, and until when an answer is taken."""

    key: CallKey
    principal: str
    tool: str
    task_id: str | None
    request: Mapping[str, Any]
    request_digest: str
    expires_at: datetime


@frozen(kw_only=True)
class InputAnswer:
    """The principal's answer to a request for input: ``value`` given (never logged), or
    denied (``given`` false, ``value`` None)."""

    principal: str
    given: bool
    value: Any = None


def task_id_checked(task_id: str) -> str:
    """A task id as a note records it, or ``ConfigurationError``: printable ASCII without
    spaces, at most ``MAX_TASK_ID_LENGTH`` characters."""
    if not 0 < len(task_id) <= MAX_TASK_ID_LENGTH or not all(
        "!" <= character <= "~" for character in task_id
    ):
        raise ConfigurationError(
            "a task id is 1 to"
            f" {MAX_TASK_ID_LENGTH} printable ASCII characters without spaces, not a text of"
            f" {len(task_id)} characters; nothing was recorded"
        )
    return task_id


def digested(value: Any, key: bytes, what: str) -> tuple[str, int]:
    """The keyed digest and the size of a JSON value's canonical form (``ConfigurationError``
    for a value that is not JSON)."""
    try:
        # The canonical form writes what JSON has not (a NaN) as it comes: refused first.
        json.dumps(value, allow_nan=False)
        canonical = canonical_json(value)
    except (TypeError, ValueError, AttributeError):
        # A value of another type, a number JSON has not, a name that is not a string.
        raise ConfigurationError(f"{what} is not a JSON value; nothing was recorded") from None
    return arguments_digest(canonical, key), len(canonical)


class Ask:
    """One request for input an executor of this process waits on."""

    __slots__ = ("_answered", "answer", "claim_id", "pending", "taken", "withdrawn", "written")

    def __init__(self, pending: PendingInput, claim_id: str) -> None:
        self.pending = pending
        self.claim_id = claim_id
        self.taken = False
        """An answer is being recorded or was: any other is refused."""
        self.answer: InputAnswer | None = None
        self.written = trio.Event()
        """Set once the request is in the log (or withdrawn before it was)."""
        self.withdrawn = False
        """The executor no longer waits: no answer is recorded any more."""
        self._answered = trio.Event()

    def withdraw(self) -> None:
        self.withdrawn = True
        self.written.set()

    def check(self, key: CallKey, principal: str, request_digest: str, now: datetime) -> None:
        """Refuse an answer that does not bind to this request now."""
        if principal != self.pending.principal:
            raise InputRefused(key.stream, "wrong_principal", "the call is another principal's")
        if request_digest != self.pending.request_digest:
            raise InputRefused(
                key.stream, "digest_mismatch", "the call asks for input of another request"
            )
        if now >= self.pending.expires_at:
            raise InputRefused(key.stream, "expired", "the request for input has expired")
        if self.taken:
            raise InputRefused(key.stream, "answered", "the request for input has its answer")

    def give(self, answer: InputAnswer) -> None:
        """Hand the recorded answer to the executor waiting."""
        self.answer = answer
        self._answered.set()

    async def wait(self) -> InputAnswer:
        await self._answered.wait()
        assert self.answer is not None
        return self.answer


def ask_of(asks: Mapping[CallKey, Ask], key: CallKey) -> Ask:
    """The request for input the call's executor waits on here, or ``InputRefused``."""
    ask = asks.get(key)
    if ask is None:
        raise InputRefused(
            key.stream,
            "not_awaiting_input",
            "no executor of this runtime waits for input of this call",
        )
    return ask


def refuse_second_ask(asks: Mapping[CallKey, Ask], key: CallKey) -> None:
    if key in asks:
        raise RefusedError(f"{key.stream!r} waits for an answer to its request for input already")
