"""Rules 9 of the decider: no detail holds text of the arguments, a tool the turn did not
offer is named by length and digest, every detail is bounded; a turn of earlier rules decides
as it did, so that the logs it wrote replay to the decisions they hold."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from inert.actors._call import (
    CallContext,
    CallLimits,
    CallState,
    Decision,
    Input,
    TurnView,
    ValidationOutcome,
    ValidationResult,
    recorded,
)
from inert.actors._decider import step
from inert.actors._handlers import NO_ARGUMENT_TEXT
from inert.actors._places import MAX_DETAIL_LENGTH, unoffered_tool
from inert.events import (
    RULES_VERSION,
    ArgumentsAppended,
    CallCollecting,
    CallEnded,
    CallFailed,
    CallKey,
    CallOpened,
    ConfirmationGiven,
    EditRefused,
    Event,
    FailReason,
    OfferedTool,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
KEY = CallKey(tenant="acme", conversation="c1", turn="t1", response="r1", item="i1", call="c1")
TOOL = OfferedTool(name="lookup", digest="sha256:lookup")
SECRET_NAME = "Authorization: Bearer sk-CANARY"
REFUSED = ('{"h": {"' + SECRET_NAME + '\\u0000": 1}}').encode()


class Call:
    def __init__(self, rules: int) -> None:
        self.state = CallState(key=KEY)
        self.position = 0
        turn = TurnView(principal="user:alice", tools={TOOL.name: TOOL}, rules=rules)
        self.context = CallContext(turn=turn, limits=CallLimits())

    def send(self, event: Event) -> tuple[Decision, ...]:
        self.position += 1
        received = Input(
            event=event,
            position=self.position,
            event_id=f"event-{self.position}",
            at=T0 + timedelta(seconds=self.position),
        )
        self.state, decisions = step(self.state, received, self.context)
        return decisions

    def answer(self, result: ValidationResult) -> tuple[Decision, ...]:
        self.state, decisions = step(self.state, ValidationOutcome(result=result), self.context)
        return decisions

    def through_end(self, data: bytes, tool: str = TOOL.name) -> tuple[Decision, ...]:
        decisions = self.send(CallOpened(key=KEY, tool=tool, sequence=0))
        if any(isinstance(decision, CallFailed) for decision in decisions):
            return decisions
        self.send(
            ArgumentsAppended(key=KEY, data=data, offset=0, first_sequence=1, last_sequence=1)
        )
        return self.send(CallEnded(key=KEY, terminal=TerminalRef(sequence=2)))


def _failed(decisions: tuple[Decision, ...]) -> CallFailed:
    found = recorded(decisions)[-1]
    assert isinstance(found, CallFailed), decisions
    return found


def test_the_rules_of_a_turn_started_now_keep_argument_text_out() -> None:
    """A turn started now is judged by rules 9 or later."""
    assert RULES_VERSION >= NO_ARGUMENT_TEXT == 9


@pytest.mark.parametrize("rules", range(NO_ARGUMENT_TEXT, RULES_VERSION + 1))
def test_refused_arguments_name_positions_under_rules_8(rules: int) -> None:
    """A NUL in a name the model wrote fails the call naming the place by positions."""
    failed = _failed(Call(rules).through_end(REFUSED))
    assert failed.reason is FailReason.MALFORMED_ARGUMENTS
    assert failed.detail == "nul_character at $.<key #1>.<key #1>: in the name"


@pytest.mark.parametrize("rules", range(1, NO_ARGUMENT_TEXT))
def test_refused_arguments_name_the_names_as_recorded_under_earlier_rules(rules: int) -> None:
    """A turn of earlier rules records the detail it always did, names and all: the logs it
    wrote replay to the same decisions."""
    failed = _failed(Call(rules).through_end(REFUSED))
    assert failed.detail == f'nul_character at $.h["{SECRET_NAME}\\u0000"]'


def test_an_over_long_name_is_not_copied_into_the_detail() -> None:
    """A name past the string limit is named by its position and length, the detail short;
    under earlier rules it was copied whole."""
    data = b'{"' + b"CANARY" * 12_000 + b'": 1}'
    detail = _failed(Call(NO_ARGUMENT_TEXT).through_end(data)).detail
    assert (
        detail == "string_too_long at $.<key #1>: in the name, 72000 characters, the limit is 65536"
    )
    assert len(_failed(Call(NO_ARGUMENT_TEXT - 1).through_end(data)).detail) > 72_000


def test_an_unoffered_tool_is_named_by_length_and_digest_under_rules_8() -> None:
    """The opening decision and the failure name a tool the turn did not offer by its stand-in,
    never by the model's text; earlier rules recorded the text."""
    tool = "CANARY-TOOL " * 100
    decisions = Call(NO_ARGUMENT_TEXT).through_end(b"{}", tool=tool)
    collecting = recorded(decisions)[0]
    assert isinstance(collecting, CallCollecting)
    assert collecting.tool == unoffered_tool(tool)
    failed = _failed(decisions)
    assert failed.reason is FailReason.UNKNOWN_TOOL
    assert "CANARY" not in failed.detail
    assert failed.detail == f"the turn did not offer the tool {unoffered_tool(tool)}"
    earlier = Call(NO_ARGUMENT_TEXT - 1).through_end(b"{}", tool=tool)
    assert recorded(earlier)[0] == CallCollecting(key=KEY, cause=1, tool=tool)
    assert tool in _failed(earlier).detail


def test_an_unoffered_tool_opening_a_call_again_is_named_by_its_stand_in() -> None:
    """A call opened again under a name the turn did not offer fails identity_conflict
    without that name."""
    call = Call(NO_ARGUMENT_TEXT)
    call.send(CallOpened(key=KEY, tool=TOOL.name, sequence=0))
    failed = _failed(call.send(CallOpened(key=KEY, tool="CANARY-TOOL", sequence=0)))
    assert failed.reason is FailReason.IDENTITY_CONFLICT
    assert failed.detail == f"opened again as {unoffered_tool('CANARY-TOOL')}, it was 'lookup'"


@pytest.mark.parametrize("rules", [NO_ARGUMENT_TEXT - 1, NO_ARGUMENT_TEXT])
def test_every_detail_is_bounded_under_rules_8(rules: int) -> None:
    """A validation's long detail and a provider's long reason are cut to MAX_DETAIL_LENGTH
    characters under rules 9; earlier rules recorded them whole."""
    call = Call(rules)
    call.through_end(b"{}")
    if call.state.validating is None:
        call.send(
            ResponseEnded(
                response=KEY.response_ref,
                reason=ResponseEndReason.COMPLETED,
                terminal=TerminalRef(sequence=3),
            )
        )
    long = "x" * 1000
    failed = _failed(
        call.answer(ValidationResult(failure=FailReason.BUSINESS_INVALID, detail=long))
    )
    assert len(failed.detail) == (MAX_DETAIL_LENGTH if rules >= NO_ARGUMENT_TEXT else 1000)
    ended = Call(rules)
    ended.send(CallOpened(key=KEY, tool=TOOL.name, sequence=0))
    reason = ResponseEndReason.ERROR
    cut = _failed(
        ended.send(
            ResponseEnded(
                response=KEY.response_ref,
                reason=reason,
                terminal=TerminalRef(sequence=3),
                detail=long,
            )
        )
    )
    assert (len(cut.detail) <= MAX_DETAIL_LENGTH) is (rules >= NO_ARGUMENT_TEXT)


def test_a_refused_edit_names_positions_under_rules_8() -> None:
    """An edit at confirmation refused by the parse names the place by positions."""
    call = Call(NO_ARGUMENT_TEXT)
    call.through_end(b'{"city": "Paris"}')
    call.answer(ValidationResult(needs_confirmation=True))
    assert call.state.awaiting_confirmation
    edit = ConfirmationGiven(
        key=KEY,
        principal="user:alice",
        tool_digest=TOOL.digest,
        arguments_digest=call.state.arguments_digest,
        nonce="n",
        expires_at=T0 + timedelta(days=1),
        arguments=REFUSED,
    )
    [refused] = recorded(call.send(edit))
    assert isinstance(refused, EditRefused)
    assert refused.detail == "nul_character at $.<key #1>.<key #1>: in the name"
