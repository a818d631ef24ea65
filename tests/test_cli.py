"""The ``inert`` command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inert import __version__
from inert._cli import main


def test_demo_appends_and_reads_back_a_streamed_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo writes one call's events to a SQLite log, reopens it and prints them."""
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    assert main(["demo", "--log", url]) == 0
    output = capsys.readouterr().out
    lines = output.splitlines()
    assert lines[0].startswith(f"appended 8 events of one streamed tool call to {url}")
    assert "reopened" in lines[1]
    kinds = [line.split()[3] for line in lines[2:]]
    assert kinds == [
        "ingress.turn_started",
        "ingress.call_opened",
        *["ingress.arguments_appended"] * 4,
        "ingress.call_ended",
        "ingress.response_ended",
    ]
    assert "Paris" not in output
    assert "data=<4 bytes>" in output


def test_demo_runs_as_a_console_script_on_a_temporary_log() -> None:
    """The console entry point runs the demo on a temporary log and exits with status 0."""
    done = subprocess.run(
        [sys.executable, "-c", "from inert._cli import main_entry; main_entry()", "demo"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "ingress.response_ended" in done.stdout


def test_a_bad_log_url_is_reported_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    """An invalid --log URL prints one line naming the problem and exits with status 1."""
    assert main(["demo", "--log", "nowhere://x"]) == 1
    error = capsys.readouterr().err
    assert error.startswith("inert: unknown log URL")
    assert "Traceback" not in error


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """--version prints the installed version."""
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"inert {__version__}"
