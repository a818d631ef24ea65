"""What the tests that put a child process's clock off true need: libfaketime."""

from __future__ import annotations

import os

import pytest

from inert.testing import faketime_unavailable


def require_faketime() -> None:
    """Skip the test (fail it under ``CI=true``) where libfaketime cannot be used."""
    reason = faketime_unavailable()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"the clock fault tests must run under CI but cannot: {reason}", pytrace=False)
    pytest.skip(f"clock fault tests skipped: {reason}")
