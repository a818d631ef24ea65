"""Editing a call's arguments at confirmation: parsed and validated once like the model's, bound
by the confirmation, run as edited; refused edits change nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
import trio
import trio.testing

from inert import (
    CallKey,
    ConfirmationRefused,
    Retention,
    Runtime,
    StatusCue,
    ToolDeclaration,
    open_runtime,
    trio_clock,
)
from inert.actors import CallUnderValidation, FieldProblem
from inert.events import CallConfirmed, CallValidated, ConfirmationGiven, EditRefused, Redacted
from inert.log import MemoryLog, MemoryStore
from inert.projections import Projections

PRINCIPAL = "user:alice"
EMAIL = json.dumps({"to": "bob@example.com", "subject": "Lunch", "body": "At noon?"}).encode()
SCHEMA = {
    "type": "object",
    "properties": {
        "to": {"type": "string"},
        "subject": {"type": "string"},
        "body": {"type": "string"},
    },
    "required": ["to", "subject", "body"],
    "additionalProperties": False,
}
SEEN: list[dict[str, object]] = []


async def only_our_domain(call: CallUnderValidation) -> None:
    SEEN.append(dict(call.arguments))
    if not str(call.arguments["to"]).endswith("@example.com"):
        raise FieldProblem("/to", "outside_the_domain")


TOOLS = [
    ToolDeclaration(
        name="send_email", parameters=SCHEMA, needs_confirmation=True, validator=only_our_domain
    )
]
KEY = CallKey(tenant="acme", conversation="c1", turn="t1", response="r1", item="i1", call="call_1")


@asynccontextmanager
async def awaiting(
    store: MemoryStore | None = None, retention: Retention | None = None
) -> AsyncIterator[Runtime]:
    """A runtime whose one send_email call waits for its principal's confirmation."""
    from test_runtime import call_events, response_end  # noqa: PLC0415

    log = MemoryLog(store if store is not None else MemoryStore(), clock=trio_clock())
    options = {} if retention is None else {"retention": retention}
    async with open_runtime(log=log, tools=TOOLS, **options) as runtime:  # type: ignore[arg-type]
        if runtime.phase(KEY).value == "absent":
            await runtime.start_turn(
                tenant="acme", conversation="c1", turn="t1", principal=PRINCIPAL
            )
            await runtime.feed([*call_events(KEY, EMAIL, tool="send_email"), response_end(KEY)])
            await runtime.settle()
        yield runtime
    await log.aclose()


async def shown_digest(runtime: Runtime) -> str:
    pending = await runtime.pending_confirmation(KEY)
    assert pending is not None
    return pending.arguments_digest


async def test_an_edit_that_validates_is_what_runs_and_the_history_says_so() -> None:
    """The edited arguments replace the model's: validated once, confirmed, handed to the
    executor; the ledger records who edited, digests and size, never a value."""
    SEEN.clear()
    async with awaiting() as runtime:
        shown = await shown_digest(runtime)
        edit = {"to": "carol@example.com", "subject": "Lunch", "body": "At one?"}
        await runtime.confirm(KEY, principal=PRINCIPAL, arguments_digest=shown, arguments=edit)
        assert SEEN[-1] == edit
        assert len(SEEN) == 2
        dispatch = await runtime.claim(KEY, executor="mailer")
        assert dict(dispatch.arguments) == edit
        assert dispatch.arguments_digest != shown
        await runtime.complete(dispatch)
        await runtime.settle()
        history = runtime.ledger.history(KEY)
        edited = [step for step in history if "edited by" in step.detail]
        assert len(edited) == 1
        assert shown in edited[0].detail
        assert "carol" not in repr(history)
        assert "carol" not in repr(runtime.ledger.rows())


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (b'{"to": "carol@example.com", "to": "x"}', "malformed_arguments"),
        ({"to": "carol@example.com"}, "schema_invalid"),
        ({"to": "eve@elsewhere.test", "subject": "s", "body": "b"}, "business_invalid"),
        (b"[1, 2]", "malformed_arguments"),
    ],
)
async def test_a_refused_edit_changes_nothing(edit: object, reason: str) -> None:
    """An edit that does not parse or validate is refused with its reason; the call still waits
    and a confirmation of the model's arguments then runs them."""
    async with awaiting() as runtime:
        shown = await shown_digest(runtime)
        with pytest.raises(ConfirmationRefused) as refused:
            await runtime.confirm(
                KEY,
                principal=PRINCIPAL,
                arguments_digest=shown,
                arguments=edit,  # type: ignore[arg-type]
            )
        assert refused.value.reason == reason
        assert await shown_digest(runtime) == shown
        assert runtime.projections.status.of(KEY) is StatusCue.NEEDS_CONFIRMATION
        await runtime.confirm(KEY, principal=PRINCIPAL, arguments_digest=shown)
        dispatch = await runtime.claim(KEY, executor="mailer")
        assert dispatch.arguments_digest == shown
        events = [record.event for record in await runtime.log.read_stream(KEY.stream)]
        assert sum(isinstance(event, EditRefused) for event in events) == 1


async def test_an_edit_by_another_principal_or_after_expiry_is_refused() -> None:
    """The checks of every confirmation come first: another principal, an expired
    confirmation or a digest of other arguments is refused before the edit is looked at."""
    async with awaiting() as runtime:
        shown = await shown_digest(runtime)
        edit = {"to": "carol@example.com", "subject": "s", "body": "b"}
        with pytest.raises(ConfirmationRefused) as other:
            await runtime.confirm(
                KEY, principal="user:mallory", arguments_digest=shown, arguments=edit
            )
        assert other.value.reason == "wrong_principal"
        with pytest.raises(ConfirmationRefused) as stale:
            await runtime.confirm(
                KEY,
                principal=PRINCIPAL,
                arguments_digest=shown,
                arguments=edit,
                expires_in=timedelta(0),
            )
        assert stale.value.reason == "expired_confirmation"
        with pytest.raises(ConfirmationRefused) as mismatched:
            await runtime.confirm(
                KEY, principal=PRINCIPAL, arguments_digest="sha256:" + "0" * 64, arguments=edit
            )
        assert mismatched.value.reason == "mismatched_confirmation"
        assert await shown_digest(runtime) == shown


async def test_an_edit_equal_to_the_arguments_confirms_them_as_they_are() -> None:
    """Sending back the arguments unchanged confirms them: no second validation."""
    SEEN.clear()
    async with awaiting() as runtime:
        shown = await shown_digest(runtime)
        await runtime.confirm(
            KEY, principal=PRINCIPAL, arguments_digest=shown, arguments=json.loads(EMAIL)
        )
        assert len(SEEN) == 1
        events = [record.event for record in await runtime.log.read_stream(KEY.stream)]
        assert sum(isinstance(event, CallValidated) for event in events) == 1
        assert any(isinstance(event, CallConfirmed) for event in events)


async def test_an_edit_replays_to_the_same_state_and_is_redacted_after_its_outcome() -> None:
    """A restart rebuilds the edited call as it was; with retention on, the edit's text leaves
    the log once the call's outcome is recorded, and a replay still agrees."""
    store = MemoryStore()
    edit = {"to": "carol@example.com", "subject": "Lunch", "body": "At one?"}
    async with awaiting(store) as runtime:
        shown = await shown_digest(runtime)
        await runtime.confirm(KEY, principal=PRINCIPAL, arguments_digest=shown, arguments=edit)
        await runtime.settle()
        live = runtime.digest()
    async with awaiting(store) as runtime:
        assert runtime.digest() == live
        dispatch = await runtime.claim(KEY, executor="mailer")
        assert dict(dispatch.arguments) == edit
        await runtime.complete(dispatch)
        await runtime.settle()
        requests = await runtime.log.read_stream(KEY.request_stream)
        given = [record for record in requests if record.event_type == ConfirmationGiven.TAG]
        assert all(isinstance(record.event, Redacted) for record in given)
        replayed = Projections()
        for record in await runtime.log.read(1):
            replayed.apply(record)
        assert replayed.digest() == runtime.digest()


async def test_an_edit_after_the_wait_ran_out_is_refused(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Once the call's wait for confirmation ran out it is cancelled, and an edit is refused."""
    async with awaiting() as runtime:
        shown = await shown_digest(runtime)
        await trio.sleep(11 * 60)
        with pytest.raises(ConfirmationRefused) as late:
            await runtime.confirm(
                KEY,
                principal=PRINCIPAL,
                arguments_digest=shown,
                arguments={"to": "carol@example.com", "subject": "s", "body": "b"},
            )
        assert late.value.reason == "call_terminal"
        assert runtime.projections.status.of(KEY) is StatusCue.CANCELLED
