"""The console's view keeps every call under its stage as the ledger's row says, after every
record of every golden log: a page of a stage is found from that index alone."""

from __future__ import annotations

from fold_views import decoded
from golden_logs import golden_paths, load

from inert.console._view import ConsoleView, Stage, stage_of


def _check(view: ConsoleView) -> None:
    ledger = view.projections.ledger
    rows = ledger.rows()
    for stage in Stage:
        indexed = [key for key in view.stage_keys(stage) if ledger.row(key) is not None]
        assert set(indexed) == {row.key for row in rows if stage_of(row) is stage}, stage
        shown = view.in_stage(stage, offset=0, limit=len(indexed) + 1)
        assert [key for key in shown if ledger.row(key) is not None] == indexed
        since = [view.call(key).stage_since for key in indexed]  # type: ignore[union-attr]
        assert since == sorted(since), stage
    assert {key for key in view.newest(offset=0, limit=len(view))} == {row.key for row in rows}


def test_every_call_is_indexed_under_the_stage_of_its_row() -> None:
    """Folding each golden log record by record, the calls indexed under each stage (in the
    order they entered it) are those whose ledger row is in it, and the newest-first order
    holds every call with a row."""
    folded = 0
    for path in golden_paths():
        view = ConsoleView()
        for recorded in decoded(load(path).rows):
            view.apply(recorded)
            _check(view)
            folded += 1
    assert folded > 1000
