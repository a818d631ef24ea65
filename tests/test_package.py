"""The package as a user gets it: the wheel, installed into a fresh virtual environment with its
own dependencies and nothing else (not even the OpenTelemetry SDK, an extra), runs ``inert
demo``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from locations import ROOT


@pytest.mark.slow(seconds=90)
def test_the_wheel_installed_alone_runs_the_demo(tmp_path: Path) -> None:
    """``pip install`` of the built wheel into a clean venv, then ``inert demo --log
    sqlite:///demo.db`` and the commands it prints, all work (but the console, which says it
    needs its extra first)."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = dist.glob("*.whl")
    venv = tmp_path / "venv"
    # Without a pip of its own (seeding one costs more than the rest of making the venv): this
    # process's pip installs into it and lists it, through --python.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    installed = subprocess.run(
        [
            *pip,
            "install",
            "--disable-pip-version-check",
            "--quiet",
            "--constraint",
            str(ROOT / "constraints.txt"),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    inert = str(venv / "bin" / "inert")
    demo = subprocess.run(
        [inert, "demo", "--log", "sqlite:///demo.db"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    assert "dispatched" in demo.stdout
    # Then the commands it ends with, as printed: the console's first asks for its extra.
    lines = demo.stdout.splitlines()
    printed = [line.split("#")[0].split() for line in lines if line.startswith(f"  {inert} ")]
    assert [command[1] for command in printed] == ["console", "ledger", "replay", "verify", "audit"]
    assert "  pip install 'inert[console]'" in "\n".join(lines)
    for command in printed[1:]:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            check=False,
        )
        assert done.returncode == 0, (command, done.stderr)
    # Nothing of the tests' tools came along: the package needs none of them.
    listed = subprocess.run(
        [*pip, "list", "--disable-pip-version-check", "--format=freeze"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.lower()
    for tool in ("pytest", "mypy", "hypothesis", "psycopg", "opentelemetry-sdk"):
        assert f"{tool}==" not in listed, tool
