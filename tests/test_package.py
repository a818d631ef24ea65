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
    """``pip install`` of the built wheel into a clean venv, then ``inert demo``, works."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = dist.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
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
    demo = subprocess.run(
        [str(venv / "bin" / "inert"), "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    assert "dispatched" in demo.stdout
    # Nothing of the tests' tools came along: the package needs none of them.
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.lower()
    for tool in ("pytest", "mypy", "hypothesis", "psycopg", "opentelemetry-sdk"):
        assert f"{tool}==" not in listed, tool
