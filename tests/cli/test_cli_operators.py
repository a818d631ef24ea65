"""``inert control`` and ``inert audit``: operator controls from the command line, audited."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from adapter_support import FIXTURES

from inert.cli import main
from inert.cli._common import KEY_FIELDS

RESPONSES = FIXTURES / "openai-responses" / "two-function-calls-gpt-4o.sse"
RESPONSE = "resp_6859a4b21f84819bba8036beab6d54360be65637a2186412"


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def cut_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A log whose turn holds a call still collecting: a background Responses stream cut in the
    middle of its first call, which waits for its continuation."""
    events = [event for event in RESPONSES.read_bytes().split(b"\n\n") if event.strip()]
    cut = tmp_path / "cut.sse"
    cut.write_bytes(b"\n\n".join(events[:10]) + b"\n\n")
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {"name": name, "input_schema": {"type": "object"}, "x-inert": {"strict": False}}
                for name in ("search", "weather")
            ]
        )
    )
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    argv = ["feed", str(cut), "--provider", "openai-responses", "--tools", str(tools)]
    argv += ["--log", url]
    assert run(capsys, argv)[0] == 0
    return url


def test_a_stop_is_refused_without_operators_configured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody is an operator unless INERT_OPERATORS says so."""
    monkeypatch.delenv("INERT_OPERATORS", raising=False)
    argv = ["control", "stop-tenant", "default", "--log", f"sqlite:///{tmp_path / 'x.db'}"]
    status, _, err = run(capsys, [*argv, "--operator", "olga", "--reason", "incident"])
    assert status == 1
    assert "no operator is configured" in err


def test_a_principal_that_is_not_an_operator_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's own principal cannot act as an operator; the audit shows its attempt,
    refused."""
    monkeypatch.setenv("INERT_OPERATORS", "olga")
    url = cut_stream(tmp_path, capsys)
    argv = ["control", "stop-tenant", "default", "--log", url]
    status, _, err = run(capsys, [*argv, "--operator", "cli", "--reason", "incident"])
    assert status == 1
    assert "'cli' is not an operator" in err
    _, out, _ = run(capsys, ["audit", "--log", url, "--json"])
    [entry] = [json.loads(line) for line in out.splitlines()]
    assert (entry["refused"], entry["control"], entry["operator"], entry["scope"]) == (
        True,
        "operator.tenant_stopped",
        "cli",
        {"tenant": "default"},
    )
    _, out, _ = run(capsys, ["audit", "--log", url])
    assert "tenant_stopped (refused)" in out


def test_a_quarantine_from_the_command_line_is_audited_with_the_calls_it_ended(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Given while no runtime runs, the control is recorded and says it holds the response's
    call; once a runtime opens the log the call is ended, and the audit shows the control, its
    operator, reason and scope, and the ledger rows it ended."""
    monkeypatch.setenv("INERT_OPERATORS", "olga, oscar")
    url = cut_stream(tmp_path, capsys)
    response = RESPONSE
    argv = ["control", "quarantine-response", response, "--tenant", "default", "--log", url]
    status, out, err = run(capsys, [*argv, "--operator", "olga", "--reason", "injection"])
    assert status == 0, err
    first, *rest = out.splitlines()
    assert first.startswith(f"quarantine-response {response} by olga at position ")
    assert (
        ": 0 calls ended, 0 running calls asked to stop; recorded, no runtime is running" in first
    )
    assert [line.split()[:3] for line in rest] == [["held", "by", "it"]]
    assert run(capsys, ["execute", "--log", url])[0] == 0
    status, out, _ = run(capsys, ["audit", "--log", url, "--json"])
    [entry] = [json.loads(line) for line in out.splitlines()]
    assert (entry["control"], entry["operator"], entry["reason"]) == (
        "operator.response_quarantined",
        "olga",
        "injection",
    )
    assert entry["scope"] == {"response": response, "tenant": "default"}
    assert [key["call"] for key in entry["ended"]] == ["call_GXd80NWdsX8ng3xdeNLeA42o"]
    status, out, _ = run(capsys, ["audit", "--log", url])
    assert "response_quarantined" in out
    assert "cancelled response_quarantined" in out
    # The calls it ended are named whole, so that two tenants' calls never read the same.
    ended = entry["ended"][0]
    whole = "/".join(ended[name] for name in KEY_FIELDS)
    assert f"ended {whole}: cancelled response_quarantined" in out
    assert re.search(r"  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ  response_quarantined", out)


def test_tool_and_tenant_controls_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Disable, enable, stop and resume are each recorded once, in the audit's order (the
    last first, as the console lists them)."""
    monkeypatch.setenv("INERT_OPERATORS", "olga")
    url = cut_stream(tmp_path, capsys)
    for action, target in [
        ("disable-tool", "search"),
        ("enable-tool", "search"),
        ("stop-tenant", "default"),
        ("resume-tenant", "default"),
    ]:
        argv = ["control", action, target, "--log", url, "--operator", "olga", "--reason", "r"]
        assert run(capsys, argv)[0] == 0
    _, out, _ = run(capsys, ["audit", "--log", url, "--json"])
    controls = [json.loads(line)["control"] for line in out.splitlines()]
    assert controls == [
        "operator.tenant_resumed",
        "operator.tenant_stopped",
        "operator.tool_enabled",
        "operator.tool_disabled",
    ]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert run(capsys, ["audit", "--log", cut_stream(fresh, capsys)])[1] == "(no controls)\n"
