"""The bad-input corpus (``tests/bad_inputs.py``): every case ends with exactly its one stable
code, in the parser and in the ledger, with no exception, no dispatch and no event lost."""

from __future__ import annotations

import json

import pytest
from bad_inputs import CONTACT_SCHEMA, CORPUS, SCHEMA_CASES, BadInput
from hypothesis import given, settings
from hypothesis import strategies as st

from inert import (
    ArgumentLimits,
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallLimits,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
)
from inert.actors import ArgumentProblem, ParsedArguments, RejectedArguments, parse_arguments

TOOL = ToolDeclaration(name="act", parameters={"type": "object"}, strict=False)
CONTACT = ToolDeclaration(name="add_contact", parameters=CONTACT_SCHEMA)
PER_TURN = 50


def test_the_corpus_holds_at_least_300_named_cases() -> None:
    """Three hundred cases or more, each under its own name, each code a stable one."""
    names = [case.name for case in CORPUS] + [name for name, _, _ in SCHEMA_CASES]
    assert len(names) >= 300
    assert len(set(names)) == len(names)
    assert {case.code for case in CORPUS} <= {problem.value for problem in ArgumentProblem}


@pytest.mark.parametrize("case", CORPUS, ids=[case.name for case in CORPUS])
def test_the_parser_gives_each_case_its_code(case: BadInput) -> None:
    """The strict parse refuses the case with exactly its code, and names no value."""
    result = parse_arguments(case.data, ArgumentLimits())
    assert isinstance(result, RejectedArguments), case.name
    assert result.problem.value == case.code


def _call(index: int, tool: str) -> CallKey:
    return CallKey(
        tenant="acme",
        conversation=f"c{index // PER_TURN}",
        turn="t1",
        response=f"resp_{index}",
        item="fc_1",
        call=f"call_{index}",
    )


def _events(key: CallKey, tool: str, data: bytes) -> list[Event]:
    return [
        CallOpened(key=key, tool=tool, sequence=0),
        ArgumentsAppended(key=key, data=data, first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


@pytest.mark.slow
async def test_every_case_ends_failed_with_its_code_in_the_ledger_and_never_runs() -> None:
    """Fed as calls through a runtime: each fails with its code as the ledger's parse result
    (or the schema kind in its history), none is offered for dispatch, and every fragment fed is
    counted: nothing lost, nothing raised."""
    limits = CallLimits(max_live_per_turn=PER_TURN, max_live_per_tenant=10_000)
    async with open_runtime(log="memory://", tools=[TOOL, CONTACT], limits=limits) as runtime:
        cases = [(case.name, TOOL.name, case.data, case.code) for case in CORPUS]
        cases += [(name, CONTACT.name, data, kind) for name, data, kind in SCHEMA_CASES]
        for index, _ in enumerate(cases[::PER_TURN]):
            await runtime.start_turn(
                tenant="acme", conversation=f"c{index}", turn="t1", principal="user:alice"
            )
        for index, (_, tool, data, _) in enumerate(cases):
            await runtime.feed(_events(_call(index, tool), tool, data))
        await runtime.settle()
        assert runtime.projections.queue.ready() == []
        for index, (name, tool, data, code) in enumerate(cases):
            key = _call(index, tool)
            row = runtime.projections.ledger.row(key)
            assert row is not None, name
            assert (row.state, row.dispatch) == ("failed", "reject"), (name, row)
            if tool == CONTACT.name:
                assert row.terminal_reason == "schema_invalid", (name, row)
                assert code in runtime.projections.ledger.history(key)[-1].detail, name
            elif code == "too_large":
                assert row.terminal_reason == "too_large", (name, row)
            else:
                assert (row.terminal_reason, row.parse) == ("malformed_arguments", code), name
                assert (row.fragments, row.bytes) == (1, len(data)), name


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_are_parsed_or_refused_never_raised_on(data: bytes) -> None:
    """Arbitrary bytes give arguments or a stable refusal; nothing escapes the parser."""
    result = parse_arguments(data, ArgumentLimits())
    assert isinstance(result, ParsedArguments | RejectedArguments)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(value=st.dictionaries(st.text(max_size=8), json_values, max_size=5), cut=st.data())
def test_a_damaged_object_is_parsed_or_refused_and_an_intact_one_round_trips(
    value: dict[str, object], cut: st.DataObject
) -> None:
    """Any object Python writes parses to itself or is refused with a code (NaN, surrogates,
    NUL, sizes); any cut of its text is refused or parses, never raises."""
    text = json.dumps(value).encode("utf-8", "surrogatepass")
    whole = parse_arguments(text, ArgumentLimits())
    if isinstance(whole, ParsedArguments):
        assert json.loads(whole.canonical) == json.loads(text)
    end = cut.draw(st.integers(0, len(text)))
    assert isinstance(
        parse_arguments(text[:end], ArgumentLimits()), ParsedArguments | RejectedArguments
    )
