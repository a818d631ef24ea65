"""``inert execute``: run the calls that are ready, with an executor that records them and
runs nothing."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..events import (
    CallKey,
    ClaimRefused,
    TurnRef,
)
from ..projections import JSON
from ..runtime import Dispatch, Runtime
from ._common import EXECUTOR, runtimes_on, settle_within
from ._tables import Keys, key_json, text_table, times_text

# --- execute ---------------------------------------------------------------------------------


class Recorder:
    """An executor that runs nothing: it only records the claims it was handed."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def __call__(self, dispatch: Dispatch) -> None:
        self.ran.append(dispatch.claim_id)


Executed = tuple[CallKey, dict[str, JSON]]
"""A call the command tried to run, and what it reports of it (as JSON, never a value)."""


async def execute_ready(
    runtime: Runtime, recorder: Recorder, *, turn: TurnRef | None = None
) -> list[Executed]:
    """Claim and run every ready call (of ``turn``, if given) once with the recorder; what
    became of each."""
    await settle_within(runtime)
    results: list[Executed] = []
    for key in runtime.projections.queue.ready():
        if turn is not None and key.turn_ref != turn:
            continue
        row = runtime.projections.ledger.row(key)
        entry = key_json(key)
        entry["tool"] = "" if row is None else row.tool
        try:
            dispatch = await runtime.execute(key, recorder, name=EXECUTOR)
        except ClaimRefused as refused:
            entry["refused"] = refused.reason
            entry["detail"] = refused.detail
        else:
            entry["tool"] = dispatch.tool
            entry["arguments_digest"] = dispatch.arguments_digest
            entry["claim_id"] = dispatch.claim_id
        results.append((key, entry))
    await settle_within(runtime)
    return results


SHORT_DIGEST = 24
"""The characters of an arguments digest a narrow line shows (``hmac-sha256:`` and 12 of its
hex digits), enough to tell the calls of one run apart."""


def execution_lines(results: Sequence[Executed], keys: Keys, *, wide: bool = True) -> list[str]:
    """A line per call executed or refused; ``wide`` shows each arguments digest whole."""
    cells = [
        [
            "refused" if "refused" in entry else "executed",
            keys.show(key),
            str(entry["tool"]),
            f"{entry['refused']}: {entry['detail']}"
            if "refused" in entry
            else f"arguments {_digest_shown(str(entry['arguments_digest']), wide)}",
        ]
        for key, entry in results
    ]
    return text_table(("", "call", "tool", ""), cells, set())[1:]


def _digest_shown(digest: str, wide: bool) -> str:
    return digest if wide or len(digest) <= SHORT_DIGEST else digest[:SHORT_DIGEST] + "…"


async def execute_command(url: str, *, as_json: bool) -> None:
    recorder = Recorder()
    results: list[Executed] = []
    async with runtimes_on(url) as runtimes:
        for runtime in runtimes.values():
            results.extend(await execute_ready(runtime, recorder))
        keys = Keys(
            row.key for runtime in runtimes.values() for row in runtime.projections.ledger.rows()
        )
    if as_json:
        for _, entry in results:
            print(json.dumps(entry, ensure_ascii=False))
        return
    if not results:
        print("nothing to execute: no call is ready")
        return
    print(
        f"{keys.legend()}; executor {EXECUTOR!r}, which records that it ran and nothing else,"
        f" ran {times_text(len(recorder.ran))}"
    )
    for line in execution_lines(results, keys):
        print(line)
