"""``inert simulate --tools``: a user's own tools, validators and policies through the simulator."""

from __future__ import annotations

import itertools
import json
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from inert import ToolDeclaration
from inert.actors._schemas import compile_schema
from inert.cli import main
from inert.testing import SimulatedTool, ToolSuite

Project = Callable[[str], str]
"""Writes a module into the user's project folder; its name, unique to the test."""

_NAMES = itertools.count()

TRANSFER = """
from inert import CallUnderValidation, FieldProblem, ToolDeclaration

REFUSED: list[int] = []
ACCEPTED: list[int] = []


async def small_amounts(call: CallUnderValidation) -> None:
    amount = call.arguments["amount"]
    if amount > 1000:
        # Recorded, not decided on: the simulation stays a function of its seed.
        REFUSED.append(amount)
        raise FieldProblem("/amount", "maximum")
    ACCEPTED.append(amount)


SCHEMA = {
    "type": "object",
    "properties": {"amount": {"type": "integer"}, "memo": {"type": "string"}},
    "required": ["amount"],
    "additionalProperties": False,
}
TOOLS = [
    ToolDeclaration(
        name="transfer", needs_confirmation=True, parameters=SCHEMA, validator=small_amounts
    )
]
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Project]:
    """The user's project folder, the current one, where modules are written."""
    monkeypatch.chdir(tmp_path)
    # The command puts the current folder on the import path, as ``python -m`` does.
    monkeypatch.setattr(sys, "path", [*sys.path])
    written: list[str] = []

    def write(source: str) -> str:
        name = f"user_tools_{next(_NAMES)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """Run the command in-process; its status, stdout and stderr."""
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def replay_lines(out: str) -> list[str]:
    """The replay commands a run printed, one per failing seed."""
    marker = "replay it with: "
    return [line.split(marker, 1)[1] for line in out.splitlines() if marker in line]


def test_a_users_declarations_and_validator_run_clean(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """Declarations with a validator that refuses some amounts pass every invariant over a few
    seeds, and the validator saw calls it accepted and calls it refused."""
    name = project(TRANSFER)
    status, out, err = run(
        capsys, ["simulate", "--tools", f"{name}:TOOLS", "--seeds", "3", "--keys", "30"]
    )
    assert status == 0, out + err
    assert f"3 seeds run twice, 30 call keys each, tools from {name}:TOOLS:" in out
    assert out.rstrip().endswith(" 0 violations")
    module = sys.modules[name]
    assert module.REFUSED
    assert module.ACCEPTED


def test_functions_and_a_business_check_are_tools(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """Plain functions are declared from their signatures, and a ``ToolSuite`` carries the
    runtime's business check, which the calls reach."""
    name = project(
        """
        from typing import Literal

        from inert import ValidationResult
        from inert.actors import ValidationRequested
        from inert.events import FailReason
        from inert.testing import ToolSuite

        CHECKED: list[str] = []


        def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> None:
            \"\"\"The weather in a city.\"\"\"


        def lookup_order(order: int, note: str | None = None) -> None:
            \"\"\"An order by its number.\"\"\"


        async def no_negative_orders(request: ValidationRequested) -> ValidationResult:
            CHECKED.append(request.tool.name)
            if request.arguments.value.get("order", 0) < 0:
                return ValidationResult(failure=FailReason.BUSINESS_INVALID, detail="/order")
            return ValidationResult()


        SUITE = ToolSuite(tools=[get_weather, lookup_order], check=no_negative_orders)
        """
    )
    status, out, err = run(
        capsys, ["simulate", "--tools", f"{name}:SUITE", "--seeds", "2", "--keys", "30"]
    )
    assert status == 0, out + err
    assert set(sys.modules[name].CHECKED) == {"get_weather", "lookup_order"}


def test_a_tools_json_file_is_simulated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A TOOLS.json in a provider's format, as ``inert feed`` reads it, runs too."""
    tools = tmp_path / "tools.json"
    schema = {
        "type": "object",
        "properties": {"to": {"type": "string", "format": "email"}, "body": {"type": "string"}},
        "required": ["to", "body"],
        "additionalProperties": False,
    }
    declaration = {"name": "send_email", "input_schema": schema, "x-inert": {"confirm": True}}
    tools.write_text(json.dumps([declaration]))
    status, out, err = run(capsys, ["simulate", "--tools", str(tools), "--keys", "30"])
    assert status == 0, out + err
    assert f"tools from {tools}:" in out


def test_json_output_names_the_tools(project: Project, capsys: pytest.CaptureFixture[str]) -> None:
    """Each seed's JSON object says where its tools came from, and its command loads them."""
    name = project(TRANSFER)
    status, out, err = run(
        capsys,
        ["simulate", "--tools", f"{name}:TOOLS", "--seeds", "2", "--keys", "10", "--json"],
    )
    assert status == 0, out + err
    seeds = [json.loads(line) for line in out.splitlines()]
    assert [seed["tools"] for seed in seeds] == [f"{name}:TOOLS"] * 2
    assert seeds[1]["command"] == f"inert simulate --tools {name}:TOOLS --seed 1 --keys 10"


RAISING = """
from inert import CallUnderValidation, ToolDeclaration


async def memo_is_short(call: CallUnderValidation) -> None:
    # A bug: the memo is optional, and a call without one raises KeyError.
    if len(call.arguments["memo"]) > 100:
        raise ValueError("too long")


TOOLS = [
    ToolDeclaration(
        name="transfer",
        parameters={
            "type": "object",
            "properties": {"amount": {"type": "integer"}, "memo": {"type": "string"}},
            "required": ["amount"],
            "additionalProperties": False,
        },
        validator=memo_is_short,
    )
]
"""


def test_a_validator_that_raises_is_reported_with_a_replay_that_reproduces_it(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """A validator raising on arguments its schema allows is a violation; the command printed
    for its seed runs it again and finds it again."""
    name = project(RAISING)
    status, out, err = run(
        capsys, ["simulate", "--tools", f"{name}:TOOLS", "--seeds", "2", "--keys", "20"]
    )
    assert status == 1
    found = [line for line in out.splitlines() if "tool_error" in line]
    assert found
    assert "tool 'transfer': its validator, policy or check raised KeyError" in found[0]
    assert f"replay the first with: inert simulate --tools {name}:TOOLS --seed" in err
    first = replay_lines(out)[0]
    seed = found[0].split(":", 1)[0]
    again_status, again, _ = run(capsys, shlex.split(first)[1:])
    assert again_status == 1
    assert [line for line in again.splitlines() if "tool_error" in line] == [
        line for line in found if line.startswith(f"{seed}:")
    ]


def test_a_policy_that_keeps_state_is_nondeterminism_a_fresh_process_reproduces(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A policy that remembers the calls it saw decides otherwise in a seed's second run: the
    logs differ, and the printed command, run as a new process, finds it again."""
    name = project(
        """
        from inert import CallUnderValidation, ToolDeclaration

        SEEN = set()


        async def once_per_call(call: CallUnderValidation) -> bool:
            fresh = call.key not in SEEN
            SEEN.add(call.key)
            return fresh


        TOOLS = [ToolDeclaration(name="ping", policy=once_per_call)]
        """
    )
    status, out, _ = run(capsys, ["simulate", "--tools", f"{name}:TOOLS", "--keys", "10"])
    assert status == 1
    assert "seed 0: nondeterminism: two runs of the seed" in out
    [command] = replay_lines(out)
    assert command == f"inert simulate --tools {name}:TOOLS --seed 0 --keys 10"
    again = subprocess.run(
        [sys.executable, "-m", "inert", *shlex.split(command)[1:]],
        cwd=tmp_path,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 1, again.stderr
    assert "seed 0: nondeterminism: two runs of the seed" in again.stdout


def test_a_runtime_that_skips_the_schema_is_caught(
    project: Project, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The simulation streams arguments that break the tool's schema: a runtime that validated
    one (its schema check skipped) breaks I4."""
    name = project(
        """
        def transfer(amount: int, to: str, memo: str = "") -> None:
            \"\"\"Move an amount to an account.\"\"\"


        TOOLS = [transfer]
        """
    )
    monkeypatch.setattr("inert.actors._tools.schema_problems", lambda *_: "")
    status, out, _ = run(capsys, ["simulate", "--tools", f"{name}:TOOLS", "--keys", "30"])
    assert status == 1
    assert "validated, yet its arguments break its tool's schema" in out


def test_examples_are_made_from_a_declarations_schema() -> None:
    """A declaration without examples gets bodies its schema accepts, varied, and a few it
    refuses (a required property left out, a value of another type, a choice not offered)."""
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer", "minimum": 1, "maximum": 14},
            "unit": {"enum": ["celsius", "fahrenheit"]},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    declaration = ToolDeclaration(name="forecast", parameters=schema)
    [tool] = ToolSuite(tools=[declaration]).tools
    validator = compile_schema(declaration)
    assert validator is not None
    bodies = [json.loads(example) for example in tool.examples]
    valid = [body for body in bodies if validator.is_valid(body)]
    invalid = [body for body in bodies if not validator.is_valid(body)]
    assert len(valid) >= 4
    assert 1 <= len(invalid) <= 3
    assert {body["unit"] for body in valid if "unit" in body} == {"celsius", "fahrenheit"}
    assert len({body["city"] for body in valid}) == len(valid)
    assert [body for body in invalid if "city" not in body]
    own = SimulatedTool(declaration=declaration, examples=[b'{"city": "Oslo"}'])
    assert ToolSuite(tools=[own]).tools == (own,)


BAD_TOOLS = [
    ("missing-module", None, "absent_module_zz:TOOLS", "no module named 'absent_module_zz'"),
    ("missing-attribute", "OTHER = []", "{name}:TOOLS", "has no attribute 'TOOLS'"),
    ("not-a-list", "TOOLS = 42", "{name}:TOOLS", "TOOLS is of type int, not a ToolSuite"),
    ("not-tools", "TOOLS = ['get_weather']", "{name}:TOOLS", "tool 0 is a str"),
    ("no-tools", "TOOLS = []", "{name}:TOOLS", "a simulation needs at least one"),
    (
        "import-raises",
        "raise RuntimeError('no database configured')",
        "{name}:TOOLS",
        "raised RuntimeError: no database configured",
    ),
    ("no-attribute-named", "TOOLS = []", "{name}", "name them as module:attribute"),
    ("unannotated-function", "def ping(host): pass\nTOOLS = [ping]", "{name}:TOOLS", "'host'"),
    (
        "loose-schema",
        "from inert import ToolDeclaration\n"
        "TOOLS = [ToolDeclaration(name='t', parameters={'type': 'object', 'properties': {}})]",
        "{name}:TOOLS",
        "let the model add properties",
    ),
    ("missing-json", None, "absent.json", "no such file"),
]


@pytest.mark.parametrize(
    ("source", "spec", "named"), [case[1:] for case in BAD_TOOLS], ids=[c[0] for c in BAD_TOOLS]
)
def test_tools_that_cannot_be_loaded_are_one_line(
    source: str | None,
    spec: str,
    named: str,
    project: Project,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A missing module or attribute, an attribute of the wrong shape, an import that raises:
    one ``inert:`` line naming the tools given and what was wrong, exit status 1."""
    if source is not None:
        spec = spec.format(name=project(source))
    status, out, err = run(capsys, ["simulate", "--tools", spec, "--keys", "4"])
    assert status == 1
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith(f"inert: tools {spec!r}: "), line
    assert named in line, line


def test_worker_processes_load_the_tools_by_name(
    project: Project, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each worker process imports the user's module itself, from the same folder, and its
    seeds find what one process finds."""
    name = project(RAISING)
    argv = ["simulate", "--tools", f"{name}:TOOLS", "--seeds", "2", "--keys", "20", "--json"]
    _, alone, _ = run(capsys, argv)
    status, spread, err = run(capsys, [*argv, "--workers", "2"])
    assert status == 1, err
    assert spread == alone
