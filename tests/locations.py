"""Where the tests' own files are, for the tests in every folder below."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""The folder of the tests, their support modules, child-process scripts and fixtures."""

ROOT = TESTS.parent
"""The project's root: the package, the README."""
