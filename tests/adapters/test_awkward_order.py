"""The awkward-order suite written as portable events, through a runtime on the SQLite and
PostgreSQL logs, with and without a restart (``inert.testing.contracts.AdapterContract``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from postgres_support import fresh_schema, log_url

from inert.testing.contracts import (
    AdapterContract,
    OpenRuntime,
    PortableRenderer,
    Renderer,
    runtimes_on,
    sqlite_runtimes,
)


class TestPortableEvents(AdapterContract):
    """The suite's own baseline: the steps as inert's portable ingress events, on both logs."""

    @pytest.fixture
    def renderer(self) -> Renderer:
        return PortableRenderer()

    @pytest.fixture(params=["sqlite", "postgresql"])
    def runtimes(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenRuntime]:
        if request.param == "sqlite":
            yield sqlite_runtimes(tmp_path)
        else:
            with fresh_schema() as schema:
                yield runtimes_on(log_url(schema))
