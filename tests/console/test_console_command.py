"""``inert console``: served on the address it prints, with its token, over an existing log."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from inert.cli import main

TOKEN = "command-token-0123456789abcdef"


@pytest.mark.slow(seconds=3)
def test_the_command_serves_the_console_at_the_address_it_prints(tmp_path: Path) -> None:
    """It prints the URL with its token; the token opens the ledger, and no token gets 401."""
    log = f"sqlite:///{tmp_path / 'demo.db'}"
    assert main(["demo", "--log", log]) == 0
    environment = {**os.environ, "INERT_CONSOLE_TOKEN": TOKEN, "INERT_OPERATORS": "olga"}
    command = [sys.executable, "-m", "inert", "console", "--log", log, "--port", "0"]
    command += ["--principal", "olga"]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("inert console on http://127.0.0.1:")
            url = line.split()[-1]
            assert url.endswith(f"/?token={TOKEN}")
            base = url.split("/?")[0]
            assert httpx.get(base + "/").status_code == 401
            page = httpx.get(base + "/", headers={"authorization": f"Bearer {TOKEN}"})
            assert page.status_code == 200
            assert "olga (operator)" in page.text
            assert "get_weather" in page.text
        finally:
            process.terminate()
            process.wait(10)


def test_the_command_refuses_a_log_that_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing SQLite file is one error line, before anything is served."""
    status = main(["console", "--log", f"sqlite:///{tmp_path / 'none.db'}", "--port", "0"])
    assert status == 1
    assert capsys.readouterr().err.startswith("inert: ")
