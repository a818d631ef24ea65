"""Schema validation: each declaration's JSON Schema compiled once, each call checked once."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest

from inert import (
    ArgumentLimits,
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    CallUnderValidation,
    ConfigurationError,
    FieldProblem,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    open_runtime,
)
from inert.actors import (
    ParsedArguments,
    ToolRegistry,
    ValidationRequested,
    ValidationResult,
    parse_arguments,
)
from inert.events import FailReason

KEY = CallKey(tenant="acme", conversation="c1", turn="t1", response="r1", item="i1", call="call_1")
CONTACT = ToolDeclaration(
    name="add_contact",
    parameters={
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "email": {"type": "string", "format": "email"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "email"],
        "additionalProperties": False,
    },
)


def parsed(data: bytes) -> ParsedArguments:
    arguments = parse_arguments(data, ArgumentLimits())
    assert isinstance(arguments, ParsedArguments)
    return arguments


async def validate(declaration: ToolDeclaration, data: bytes) -> tuple[FailReason | None, str]:
    registry = ToolRegistry([declaration])
    request = ValidationRequested(
        key=KEY,
        tool=declaration.offered(),
        principal="user:alice",
        arguments=parsed(data),
        cause=1,
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    result = await registry.validate(request)
    return result.failure, result.detail


async def test_arguments_that_match_the_schema_are_accepted() -> None:
    """A call whose arguments the schema allows passes."""
    assert await validate(CONTACT, b'{"name": "Bob", "email": "bob@example.com"}') == (None, "")


async def test_each_problem_is_named_by_its_path_and_kind_never_its_value() -> None:
    """Every violation is reported as ``/path kind``; the offending values appear nowhere."""
    data = b'{"name": "", "email": "secret-not-an-email", "tags": [7], "extra": "secret2"}'
    failure, detail = await validate(CONTACT, data)
    assert failure is FailReason.SCHEMA_INVALID
    assert set(detail.split("; ")) == {
        "$.name min_length",
        "$.email format",
        "$.tags[0] type",
        "$.<key #4> additional_properties",
    }
    assert "secret" not in detail
    assert "extra" not in detail


async def test_a_missing_required_field_is_reported_by_its_declared_name() -> None:
    """A required property that is absent fails the call, named as the schema declares it."""
    failure, detail = await validate(CONTACT, b'{"name": "Bob"}')
    assert (failure, detail) == (FailReason.SCHEMA_INVALID, "$.email required")


async def test_many_problems_are_counted_past_the_first_ones() -> None:
    """The detail stays short: past eight problems, the rest are counted."""
    declaration = ToolDeclaration(
        name="strings", parameters={"type": "object", "additionalProperties": {"type": "string"}}
    )
    data = ("{" + ", ".join(f'"k{n}": 1' for n in range(20)) + "}").encode()
    failure, detail = await validate(declaration, data)
    assert failure is FailReason.SCHEMA_INVALID
    assert detail.endswith("; and 12 more"), detail


async def test_a_tool_without_a_schema_takes_any_object() -> None:
    """A declaration that is only a name validates every parsed object."""
    assert await validate(ToolDeclaration(name="free"), b'{"anything": [1, 2]}') == (None, "")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"type": "objec"}, "not a JSON Schema inert can use"),
        ({"type": "string", "pattern": "(?=a)b"}, "not a JSON Schema inert can use"),
        ({"$ref": "https://example.com/schema.json"}, "not a JSON Schema inert can use"),
    ],
    ids=["invalid keyword value", "pattern needing backtracking", "remote reference"],
)
def test_a_schema_inert_cannot_use_is_refused_at_registration(
    parameters: dict[str, object], message: str
) -> None:
    """Invalid schemas, patterns beyond the linear-time regex engine and remote references are
    configuration errors that name the tool, when the tool is registered."""
    with pytest.raises(ConfigurationError, match=message) as raised:
        ToolRegistry([ToolDeclaration(name="broken", parameters=parameters)])
    assert "'broken'" in str(raised.value)


async def test_a_call_that_breaks_its_schema_fails_in_the_ledger_and_never_runs() -> None:
    """Through a runtime: the call ends failed schema_invalid, its history names the problem's
    path and kind, and the dispatch queue never offers it."""
    async with open_runtime(log="memory://", tools=[CONTACT]) as runtime:
        await runtime.start_turn(
            tenant="acme", conversation="c1", turn="t1", principal="user:alice"
        )
        await runtime.feed(
            [
                CallOpened(key=KEY, tool=CONTACT.name, sequence=0),
                ArgumentsAppended(
                    key=KEY, data=b'{"name": "Bob"}', first_sequence=1, last_sequence=1
                ),
                CallEnded(key=KEY, terminal=TerminalRef(sequence=2)),
                ResponseEnded(
                    response=KEY.response_ref,
                    reason=ResponseEndReason.COMPLETED,
                    terminal=TerminalRef(sequence=3),
                ),
            ]
        )
        await runtime.settle()
        row = runtime.projections.ledger.row(KEY)
        assert row is not None
        assert (row.state, row.terminal_reason, row.dispatch) == (
            "failed",
            "schema_invalid",
            "reject",
        )
        assert runtime.projections.queue.ready() == []


@pytest.mark.parametrize(
    ("parameters", "where"),
    [
        ({"type": "object"}, "at /"),
        ({"properties": {"a": {"type": "string"}}}, "at /"),
        (
            {
                "type": "object",
                "properties": {"inner": {"type": "object", "properties": {}}},
                "additionalProperties": False,
            },
            "at /properties/inner",
        ),
        (
            {
                "type": "object",
                "additionalProperties": False,
                "properties": {"list": {"type": "array", "items": {"type": "object"}}},
            },
            "at /properties/list/items",
        ),
        ({"type": "object", "additionalProperties": True}, "at /"),
    ],
    ids=["bare object", "properties only", "nested object", "objects in an array", "true"],
)
def test_a_schema_that_lets_unknown_properties_through_is_refused_by_default(
    parameters: dict[str, object], where: str
) -> None:
    """Strict by default: every object of the schema must say what other properties may be."""
    with pytest.raises(ConfigurationError, match="let the model add properties") as raised:
        ToolRegistry([ToolDeclaration(name="loose", parameters=parameters)])
    assert where in str(raised.value)
    assert "strict=False" in str(raised.value)


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "additionalProperties": False},
        {"type": "object", "unevaluatedProperties": False},
        {"type": "object", "additionalProperties": {"type": "string"}},
    ],
    ids=["additionalProperties false", "unevaluatedProperties false", "a map of strings"],
)
def test_schemas_that_say_what_other_properties_may_be_are_strict(
    parameters: dict[str, object],
) -> None:
    """Forbidding other properties, or giving them a schema, satisfies strictness."""
    ToolRegistry([ToolDeclaration(name="tight", parameters=parameters)])


def test_strictness_can_be_turned_off_per_tool() -> None:
    """``strict=False`` (``x-inert: {"strict": false}`` in a TOOLS.json) accepts a loose schema,
    and the setting does not change the declaration's digest."""
    loose = ToolDeclaration(name="loose", parameters={"type": "object"}, strict=False)
    ToolRegistry([loose])
    assert loose.digest == ToolDeclaration(name="loose", parameters={"type": "object"}).digest


async def test_a_tool_s_size_allowance_bounds_its_canonical_arguments() -> None:
    """Arguments past the declaration's max_bytes fail too_large, named in bytes, not values."""
    small = ToolDeclaration(name="note", parameters={"type": "object"}, strict=False, max_bytes=16)
    assert await validate(small, b'{"a": "1"}') == (None, "")
    failure, detail = await validate(small, b'{"text": "a secret far too long"}')
    assert failure is FailReason.TOO_LARGE
    assert detail == "32 canonical bytes, tool 'note' allows 16"


def test_a_size_allowance_is_part_of_the_declaration_s_digest_only_when_set() -> None:
    """Declarations without one keep their digest; a changed allowance is another declaration."""
    plain = ToolDeclaration(name="note")
    assert ToolDeclaration(name="note", max_bytes=None).digest == plain.digest
    assert ToolDeclaration(name="note", max_bytes=16).digest != plain.digest
    assert ToolDeclaration(name="note", max_bytes=16).digest != (
        ToolDeclaration(name="note", max_bytes=17).digest
    )


# --- business validators and permission policies ----------------------------------------------


class Recorder:
    """A validator and a policy that note what they were shown."""

    def __init__(self, *, allow: bool = True, problems: list[FieldProblem] | None = None) -> None:
        self.allow = allow
        self.problems = problems or []
        self.seen: list[CallUnderValidation] = []

    async def validator(self, call: CallUnderValidation) -> None:
        self.seen.append(call)
        if len(self.problems) == 1:
            raise self.problems[0]
        if self.problems:
            raise ExceptionGroup("business rules", self.problems)

    async def policy(self, call: CallUnderValidation) -> bool:
        self.seen.append(call)
        return self.allow


def hooked(recorder: Recorder) -> ToolDeclaration:
    return ToolDeclaration(
        name="transfer",
        parameters={"type": "object"},
        strict=False,
        validator=recorder.validator,
        policy=recorder.policy,
    )


async def test_the_validator_and_the_policy_see_the_turn_s_tenant_and_principal_once() -> None:
    """Each is called once, with the key's tenant and the turn's principal, and the arguments
    read-only; a call they let through is accepted."""
    recorder = Recorder()
    assert await validate(hooked(recorder), b'{"amount": 5, "principal": "root"}') == (None, "")
    assert [(call.tenant, call.principal, call.tool) for call in recorder.seen] == [
        ("acme", "user:alice", "transfer")
    ] * 2
    assert recorder.seen[0].arguments["amount"] == 5
    with pytest.raises(TypeError):
        recorder.seen[0].arguments["amount"] = 6  # type: ignore[index]


async def test_business_problems_are_recorded_by_path_and_kind() -> None:
    """A group of FieldProblems fails business_invalid, one ``path kind`` per problem."""
    recorder = Recorder(
        problems=[FieldProblem("/amount", "over_limit"), FieldProblem("/to", "blocked_account")]
    )
    failure, detail = await validate(hooked(recorder), b'{"amount": 5000, "to": "x"}')
    assert (failure, detail) == (
        FailReason.BUSINESS_INVALID,
        "$.<key #1> over_limit; $.<key #2> blocked_account",
    )
    single = Recorder(problems=[FieldProblem("/amount", "over_limit")])
    declared = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}},
        "additionalProperties": {"type": "string"},
    }
    assert await validate(attrs.evolve(hooked(single), parameters=declared), b'{"amount": 5}') == (
        FailReason.BUSINESS_INVALID,
        "$.amount over_limit",
    )


async def test_a_policy_that_refuses_denies_permission() -> None:
    """A policy answering anything but True fails the call permission_denied."""
    failure, detail = await validate(hooked(Recorder(allow=False)), b"{}")
    assert (failure, detail) == (
        FailReason.PERMISSION_DENIED,
        "user:alice may not run 'transfer'",
    )


async def test_a_validator_that_breaks_is_an_error_named_by_its_type_only() -> None:
    """An unexpected exception is validator_error, naming its type, never its message."""

    async def broken(call: CallUnderValidation) -> None:
        raise KeyError(f"secret {call.arguments}")

    declaration = ToolDeclaration(name="t", validator=broken)
    assert await validate(declaration, b'{"a": "secret"}') == (
        FailReason.VALIDATOR_ERROR,
        "KeyError",
    )


def request_for(declaration: ToolDeclaration, data: bytes) -> ValidationRequested:
    return ValidationRequested(
        key=KEY,
        tool=declaration.offered(),
        principal="user:alice",
        arguments=parsed(data),
        cause=1,
        at=datetime(2026, 1, 1, tzinfo=UTC),
    )


async def test_a_call_nothing_is_asked_about_is_answered_without_awaiting() -> None:
    """start_validation returns the result itself (accepted, or a schema failure) where no
    validator, policy or check is to be asked; validate gives the same answer."""
    registry = ToolRegistry([CONTACT])
    good = request_for(CONTACT, b'{"name": "Ada", "email": "ada@example.com"}')
    bad = request_for(CONTACT, b'{"name": ""}')
    started = registry.start_validation(good)
    assert isinstance(started, ValidationResult)
    assert started.accepted
    failed = registry.start_validation(bad)
    assert isinstance(failed, ValidationResult)
    assert failed.failure is FailReason.SCHEMA_INVALID
    assert (started, failed) == (await registry.validate(good), await registry.validate(bad))


async def test_a_call_with_a_validator_or_a_check_is_left_to_await() -> None:
    """Where a validator, a policy or a check is to be asked, start_validation returns what is
    left to await, and nothing of it has run yet."""
    recorder = Recorder()
    declaration = hooked(recorder)
    started = ToolRegistry([declaration]).start_validation(request_for(declaration, b"{}"))
    assert not isinstance(started, ValidationResult)
    assert recorder.seen == []
    assert await started == ValidationResult()
    assert len(recorder.seen) == 2

    async def check(request: ValidationRequested) -> ValidationResult:
        return ValidationResult(needs_confirmation=True)

    checked = ToolRegistry([CONTACT], check=check)
    request = request_for(CONTACT, b'{"name": "Ada", "email": "ada@example.com"}')
    pending = checked.start_validation(request)
    assert not isinstance(pending, ValidationResult)
    assert (await pending).needs_confirmation
