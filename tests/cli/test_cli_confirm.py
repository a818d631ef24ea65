"""``inert confirm`` and ``inert deny``: the person's answer to a call waiting for it."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from adapter_support import FIXTURES

from inert.cli import main

CHAT = FIXTURES / "openai-chat" / "parallel-tool-calls-gpt-4o.sse"
COUNTRY_CALL = "call_q2UyBRP7eXNTzAoR8lEhjc9Z"
LOOSE = {"type": "object"}


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def fed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A log whose turn default/default/1 holds get_country waiting for confirmation."""
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {
                    "type": "function",
                    "function": {"name": name, "parameters": LOOSE},
                    "x-inert": {"strict": False, "confirm": name == "get_country"},
                }
                for name in ("get_country", "get_product_name", "final_result")
            ]
        )
    )
    url = f"sqlite:///{tmp_path / 'confirm.db'}"
    status, _, err = run(
        capsys,
        ["feed", str(CHAT), "--provider", "openai-chat", "--tools", str(tools), "--log", url],
    )
    assert status == 0, err
    return url


def call_options(url: str, principal: str = "cli", call: str = COUNTRY_CALL) -> list[str]:
    return [
        *("--log", url, "--tenant", "default", "--conversation", "default", "--turn", "1"),
        *("--call-id", call, "--principal", principal),
    ]


def ledger(capsys: pytest.CaptureFixture[str], url: str) -> dict[str, dict[str, object]]:
    _, out, _ = run(capsys, ["ledger", "--log", url, "--json"])
    return {row["call"]: row for row in map(json.loads, out.splitlines())}


def test_a_confirmed_call_runs_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Waiting, then confirmed by the turn's principal, then executed, once."""
    url = fed(tmp_path, capsys)
    assert ledger(capsys, url)[COUNTRY_CALL]["dispatch"] == "await_confirmation"
    status, out, err = run(capsys, ["confirm", *call_options(url)])
    assert status == 0, err
    assert out.startswith("confirmed 1/chatcmpl-")
    assert "get_country" in out
    status, out, _ = run(capsys, ["execute", "--log", url, "--json"])
    executed = [json.loads(line)["call"] for line in out.splitlines()]
    assert executed.count(COUNTRY_CALL) == 1
    assert ledger(capsys, url)[COUNTRY_CALL]["outcome"] == "completed"


def test_expires_in_bounds_how_long_the_confirmed_call_may_be_claimed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--expires-in`` sets the confirmation's expiry, which the command prints: the call may
    be claimed until then (a later claim cancels it, as the decider's tests show)."""
    url = fed(tmp_path, capsys)
    before = datetime.now(UTC)
    status, out, err = run(
        capsys, ["confirm", *call_options(url), "--expires-in", "3600", "--json"]
    )
    assert status == 0, err
    claim_before = datetime.fromisoformat(json.loads(out)["claim_before"])
    assert before + timedelta(hours=1) <= claim_before <= datetime.now(UTC) + timedelta(hours=1)
    with pytest.raises(SystemExit):
        run(capsys, ["confirm", *call_options(url), "--expires-in", "0"])
    assert "--expires-in: a whole number from 1" in capsys.readouterr().err


def test_a_confirmation_from_another_principal_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only the principal the turn belongs to can confirm; the call keeps waiting."""
    url = fed(tmp_path, capsys)
    status, _, err = run(capsys, ["confirm", *call_options(url, principal="mallory")])
    assert status == 1
    assert "refused" in err or "principal" in err
    assert ledger(capsys, url)[COUNTRY_CALL]["dispatch"] == "await_confirmation"


def test_a_confirmation_for_other_arguments_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A digest that is not the call's arguments' (the person saw something else) is refused."""
    url = fed(tmp_path, capsys)
    other = ["--arguments-digest", "sha256:" + "0" * 64]
    status, _, err = run(capsys, ["confirm", *call_options(url), *other])
    assert status == 1, err
    assert ledger(capsys, url)[COUNTRY_CALL]["dispatch"] == "await_confirmation"


def test_a_denied_call_is_cancelled_and_never_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A denial cancels the call; executing afterwards does not run it."""
    url = fed(tmp_path, capsys)
    status, out, err = run(capsys, ["deny", *call_options(url), "--reason", "not now"])
    assert status == 0, err
    assert "is cancelled, it never runs" in out
    row = ledger(capsys, url)[COUNTRY_CALL]
    assert (row["state"], row["terminal_reason"]) == ("cancelled", "confirmation_denied")
    _, out, _ = run(capsys, ["execute", "--log", url, "--json"])
    assert COUNTRY_CALL not in out


@pytest.mark.parametrize(
    ("call", "message"),
    [("call_unknown", "has no call"), ("call_b51ijcpFkDiTQG1bQzsrmtW5", "not waiting")],
    ids=["unknown call", "call needing no confirmation"],
)
def test_confirming_what_is_not_waiting_says_why(
    call: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown call id, or a call that asks for no confirmation, is an error that says so."""
    url = fed(tmp_path, capsys)
    status, _, err = run(capsys, ["confirm", *call_options(url, call=call)])
    assert status == 1
    assert message in err


def chat_completion(identity: str, call: str) -> str:
    """A Chat Completions body of one completion with one call of get_country."""
    opening = {"index": 0, "id": call, "function": {"name": "get_country", "arguments": "{}"}}
    chunks = [
        {"id": identity, "choices": [{"index": 0, "delta": {"tool_calls": [opening]}}]},
        {"id": identity, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    return "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"


def test_a_call_id_the_turn_reuses_needs_its_response(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Providers reuse call ids (``call_0`` in every response): the command refuses to guess,
    names the responses to choose from, and acts on the one ``--response`` names."""
    stream = tmp_path / "two.sse"
    stream.write_text(
        chat_completion("chatcmpl-a", "call_0") + chat_completion("chatcmpl-b", "call_0")
    )
    tools = tmp_path / "tools.json"
    settings = {"strict": False, "confirm": True}
    tools.write_text(
        json.dumps([{"name": "get_country", "input_schema": LOOSE, "x-inert": settings}])
    )
    url = f"sqlite:///{tmp_path / 'two.db'}"
    argv = ["feed", str(stream), "--provider", "openai-chat", "--tools", str(tools)]
    assert run(capsys, [*argv, "--log", url])[0] == 0
    status, _, err = run(capsys, ["deny", *call_options(url, call="call_0")])
    assert status == 1
    assert "2 calls of turn" in err
    assert "chatcmpl-a, chatcmpl-b" in err
    status, _, err = run(
        capsys, ["deny", *call_options(url, call="call_0"), "--response", "chatcmpl-b"]
    )
    assert status == 0, err
    _, out, _ = run(capsys, ["ledger", "--log", url, "--json"])
    states = {row["response"]: row["state"] for row in map(json.loads, out.splitlines())}
    assert states == {"chatcmpl-a": "validated", "chatcmpl-b": "cancelled"}


def test_confirm_and_deny_answer_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With ``--json``, a confirmation prints the call, its tool and the digest it binds, and a
    denial the call and the state it ended in."""
    url = fed(tmp_path, capsys)
    status, out, err = run(capsys, ["confirm", *call_options(url), "--json"])
    assert status == 0, err
    confirmed = json.loads(out)
    assert (confirmed["call"]["call"], confirmed["tool"], confirmed["ready"]) == (
        COUNTRY_CALL,
        "get_country",
        True,
    )
    assert confirmed["arguments_digest"].startswith("hmac-sha256:")
    other = tmp_path / "other"
    other.mkdir()
    url = fed(other, capsys)
    status, out, err = run(capsys, ["deny", *call_options(url), "--json"])
    assert status == 0, err
    assert json.loads(out)["state"] == "cancelled"


def test_arguments_from_a_file_replace_the_models_once_validated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--arguments FILE`` confirms the person's edit: the command names the new digest and
    the one it replaced, and the executor runs the edit."""
    url = fed(tmp_path, capsys)
    edit = tmp_path / "edit.json"
    edit.write_text('{"city": "Lisbon"}')
    tools = tmp_path / "tools.json"
    argv = ["confirm", *call_options(url), "--arguments", str(edit), "--tools", str(tools)]
    status, out, err = run(capsys, [*argv, "--json"])
    assert status == 0, err
    answer = json.loads(out)
    assert answer["edited_from"] is not None
    assert answer["arguments_digest"] != answer["edited_from"]
    status, out, _ = run(capsys, ["execute", "--log", url, "--json"])
    executed = {json.loads(line)["call"]: json.loads(line) for line in out.splitlines()}
    assert executed[COUNTRY_CALL]["arguments_digest"] == answer["arguments_digest"]
    assert ledger(capsys, url)[COUNTRY_CALL]["outcome"] == "completed"


def test_arguments_from_standard_input_that_do_not_parse_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--arguments -`` reads standard input; an edit that is not a JSON object is refused
    (exit 1, the reason named) and the call still waits for a confirmation."""
    url = fed(tmp_path, capsys)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"[1, 2")))
    tools = ["--tools", str(tmp_path / "tools.json")]
    status, _, err = run(capsys, ["confirm", *call_options(url), "--arguments", "-", *tools])
    assert status == 1
    assert "malformed_arguments" in err
    assert ledger(capsys, url)[COUNTRY_CALL]["dispatch"] == "await_confirmation"
    status, _, err = run(capsys, ["confirm", *call_options(url), "--arguments", str(tmp_path)])
    assert status == 1
    assert "cannot read" in err


def test_an_edit_without_the_declarations_the_turn_offered_names_tools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--arguments`` without ``--tools``, or with a TOOLS.json that lacks the declaration the
    turn offered (or declares the tool otherwise), exits 1 naming ``--tools``, the tool and its
    digest, and records nothing: the call still waits for a confirmation."""
    url = fed(tmp_path, capsys)
    edit = tmp_path / "edit.json"
    edit.write_text('{"city": "Lisbon"}')
    argv = ["confirm", *call_options(url), "--arguments", str(edit)]
    other = tmp_path / "other.json"
    loose = {"strict": False}
    other.write_text(json.dumps([{"name": "get_weather", "input_schema": LOOSE, "x-inert": loose}]))
    changed = tmp_path / "changed.json"
    changed.write_text(
        json.dumps([{"name": "get_country", "input_schema": LOOSE, "x-inert": loose}])
    )
    for extra, said in (
        ([], "--arguments needs --tools"),
        (["--tools", str(other)], "--tools does not declare 'get_country'"),
        (["--tools", str(changed)], "--tools declares 'get_country' otherwise"),
    ):
        status, _, err = run(capsys, [*argv, *extra])
        assert status == 1, err
        assert said in err
        assert "sha256:" in err
        assert "is not registered" not in err
        assert ledger(capsys, url)[COUNTRY_CALL]["dispatch"] == "await_confirmation"
