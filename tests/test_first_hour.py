"""The first hour as the README tells it: ``make demo``, run as its recipe is written, then the
commands it ends with, the console first. (The first embedding, against a local replay of a
captured stream, runs with the docs' other examples: tests/test_docs.py.)"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from locations import ROOT

from inert.cli import main

TOKEN = "first-hour-token-0123456789abcdef"
NEXT_STEPS = re.compile(r"^  (?P<command>\S+ (?:console|ledger|replay|verify|audit) .*?)\s+# ")
"""A command the demo ends with, then what it shows."""


def demo_recipe() -> list[str]:
    """The commands of the Makefile's ``demo`` target, as written."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^demo:.*\n((?:\t.*\n)+)", makefile, flags=re.MULTILINE)
    assert recipe is not None
    return [line.strip() for line in recipe.group(1).splitlines()]


def test_the_demo_s_log_is_ignored_by_git() -> None:
    """demo.db and the files kept beside it (SQLite's, and the one whose locks say that a
    runtime runs on the log) match a pattern of .gitignore."""
    patterns = (ROOT / ".gitignore").read_text().split()
    for name in ("demo.db", "demo.db-wal", "demo.db-shm", "demo.db-journal", "demo.db-runtimes"):
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name


@pytest.mark.slow(seconds=20)
def test_make_demo_keeps_its_log_and_ends_with_commands_that_work_on_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recipe of ``make demo``, run twice in an empty folder (the demo through its entry
    point), keeps its log in demo.db, prints no line past 100 characters, and ends with the
    commands that look into that log, the console first: each works as printed."""
    *removals, demo = demo_recipe()
    program, *arguments = shlex.split(demo)
    assert program == "$(BIN)/inert"
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # a second make demo starts afresh
        for removal in removals:
            subprocess.run(removal, shell=True, check=True, cwd=tmp_path)
        capsys.readouterr()
        assert main(arguments) == 0
    output = capsys.readouterr().out
    assert (tmp_path / "demo.db").is_file()
    # The log, and the file whose locks say that a runtime runs on it: nothing else is left.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["demo.db", "demo.db-runtimes"]
    assert max(len(line) for line in output.splitlines()) <= 100
    digest = next(line for line in output.splitlines() if line.startswith("digest sha256:"))
    commands = [
        shlex.split(found["command"])
        for found in map(NEXT_STEPS.match, output.splitlines())
        if found is not None
    ]
    assert [command[:2] for command in commands] == [
        ["inert", "console"],
        ["inert", "ledger"],
        ["inert", "replay"],
        ["inert", "verify"],
        ["inert", "audit"],
    ]
    console, *others = commands
    for command in others:
        assert main(command[1:]) == 0, command
        printed = capsys.readouterr().out
        if command[1] in ("replay", "verify"):
            assert digest in printed.splitlines()
        if command[1] == "ledger":
            assert "decision.dispatched" in printed
    environment = {**os.environ, "INERT_CONSOLE_TOKEN": TOKEN}
    # Any free port: the default one may be taken on the machine running the tests.
    served = [sys.executable, "-m", "inert", *console[1:], "--port", "0"]
    with subprocess.Popen(
        served, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("inert console on http://127.0.0.1:")
            base = line.split()[-1].split("/?")[0]
            page = httpx.get(base + "/", headers={"authorization": f"Bearer {TOKEN}"})
            assert page.status_code == 200
            assert "delete_files" in page.text
        finally:
            process.terminate()
            process.wait(10)
