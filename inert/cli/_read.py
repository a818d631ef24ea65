"""The commands that read a log: ``ledger``, ``replay``, ``verify`` and ``audit``."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime

from ..actors import CallFold, Phase
from ..actors._call import DIGEST_KEY
from ..events import (
    ArgumentsAppended,
    CallKey,
    EventRejected,
    LogError,
    RecordedEvent,
    call_of,
)
from ..events._identity import key_part, shown_text
from ..log import Log, open_log
from ..projections import JSON, Projections
from ..projections._shown import EVERY_ROW, RowFilter, shown_time
from ..runtime._verify import DEFAULT_MAX_PROBLEMS, verify_log
from ._common import Progress, fold_log, in_colour
from ._tables import (
    Seen,
    ledger_json,
    ledger_table,
    row_cells,
    text_table,
    whole_key,
)

# --- ledger ----------------------------------------------------------------------------------


async def ledger_command(
    url: str,
    *,
    as_json: bool,
    history: bool,
    wide: bool = False,
    shown_rows: RowFilter = EVERY_ROW,
    follow: bool = False,
) -> None:
    projections = Projections()
    first: dict[CallKey, datetime] = {}
    changed: dict[CallKey, datetime] = {}
    # The time of each record a history shows, only where histories are printed: a fragment
    # is never one of them.
    at: dict[int, datetime] = {}

    def note_time(recorded: RecordedEvent) -> None:
        event = recorded.kept
        key = call_of(event)
        if key is None:
            return
        moment = recorded.recorded_at
        first.setdefault(key, moment)
        changed[key] = moment
        if history and not isinstance(event, ArgumentsAppended):
            at[recorded.position] = moment

    await fold_log(url, projections.apply, note_time, what="ledger")
    seen = Seen(first, changed, at)
    if as_json:
        shown = ledger_json(projections.ledger, history=history, shown_rows=shown_rows, seen=seen)
        for entry in shown:
            print(json.dumps(entry, ensure_ascii=False))
    else:
        table = ledger_table(
            projections.ledger,
            history=history,
            wide=wide,
            shown_rows=shown_rows,
            seen=seen,
            colour=in_colour(),
        )
        for line in table:
            print(line)
    if follow:
        await _follow(url, projections, as_json=as_json, shown_rows=shown_rows, first=first)


async def _follow(
    url: str,
    projections: Projections,
    *,
    as_json: bool,
    shown_rows: RowFilter,
    first: dict[CallKey, datetime],
) -> None:
    """Print each row of the ledger as it changes, until stopped (or the log closes): a JSON
    object, or a line led by the position of the event that changed it."""
    ledger = projections.ledger
    async with open_log(url, create=False) as log:
        async for recorded in log.subscribe(projections.position + 1):
            key = call_of(recorded.kept)
            before = None if key is None else ledger.row(key)
            projections.apply(recorded)
            if key is None:
                continue
            moment = recorded.recorded_at
            seen_first = first.setdefault(key, moment)
            row = ledger.row(key)
            kept = shown_rows.keeps(key, row, first=seen_first, changed=moment)
            if row is None or row == before or not kept:
                continue
            if as_json:
                print(json.dumps(row.to_json(), ensure_ascii=False), flush=True)
            else:
                cells = [whole_key(key), *row_cells(row)]
                shown = shown_time(moment)
                print(f"@{recorded.position}  {shown}  " + "  ".join(cells), flush=True)


# --- replay ----------------------------------------------------------------------------------


async def replay_command(url: str, *, as_json: bool) -> None:
    fold = CallFold(live=False)
    projections = Projections()
    kinds: Counter[str] = Counter()

    def keyed(log: Log) -> None:
        # Turns of rules 10 on digest their arguments keyed by the log.
        fold.digest_key = log.key(DIGEST_KEY)

    events = await fold_log(
        url,
        fold.apply,
        projections.apply,
        lambda recorded: kinds.update((recorded.event_type,)),
        what="replay",
        opened=keyed,
    )
    rejections = kinds[EventRejected.TAG]
    # A key that only ever had events rejected stays absent: it is no call.
    phases = Counter(record.state.phase for record in fold.records.values())
    states: dict[str, JSON] = {
        phase.value: phases[phase] for phase in Phase if phase in phases and phase != Phase.ABSENT
    }
    summary: dict[str, JSON] = {
        "events": events,
        "calls": sum(phases.values()) - phases[Phase.ABSENT],
        "states": states,
        "ready": len(projections.queue),
        "rejections": rejections,
        "digest": projections.digest(),
    }
    if as_json:
        print(json.dumps(summary))
        return
    print(f"replayed {events} events; every decision found in the log was made again")
    print(f"calls       {summary['calls']}")
    for state, count in states.items():
        print(f"  {state:<18} {count}")
    print(f"ready       {summary['ready']}")
    print(f"rejections  {rejections}")
    print(f"digest {summary['digest']}")


# --- verify ----------------------------------------------------------------------------------


async def verify_command(url: str, *, as_json: bool) -> None:
    async with open_log(url, create=False) as log:
        progress = Progress("verify", await log.head())
        try:
            found = await verify_log(log, progress=progress.advance)
        finally:
            progress.finish()
    if as_json:
        print(
            json.dumps(
                {
                    "events": found.events,
                    "ok": found.ok,
                    "replayed": found.replayed,
                    "digest": found.digest,
                    "problems": [
                        {"position": problem.position, "problem": problem.what}
                        for problem in found.problems
                    ],
                },
                ensure_ascii=False,
            )
        )
    else:
        for problem in found.problems:
            print(problem)
    if not found.ok:
        more = " (the first of them)" if len(found.problems) >= DEFAULT_MAX_PROBLEMS else ""
        count = len(found.problems)
        raise LogError(
            f"the log failed verification: {count} problem{'' if count == 1 else 's'}{more} in"
            f" {found.events} events read"
        )
    if not as_json:
        print(
            f"verified {found.events} events: the storage's own checks, every row's position and"
            " checksum, and a replay of every decision and what it implies"
        )
        print(f"digest {found.digest}")


async def audit_command(url: str, *, as_json: bool) -> None:
    projections = Projections()
    await fold_log(url, projections.apply)
    audit = projections.audit
    # The controls refused to principals that are no operators are shown among them, marked;
    # the last first, as the console's audit lists them.
    entries = sorted(
        audit.entries() + audit.refusals(), key=lambda entry: entry.position, reverse=True
    )
    if as_json:
        for entry in entries:
            print(json.dumps(entry.to_json(), ensure_ascii=False))
        return
    if not entries:
        print("(no controls)")
        return
    cells = [
        [
            f"@{entry.position}",
            shown_time(datetime.fromisoformat(entry.recorded_at)),
            entry.control.removeprefix("operator.") + (" (refused)" if entry.refused else ""),
            ", ".join(f"{name} {key_part(value)}" for name, value in entry.scope.items() if value),
            shown_text(entry.operator),
            shown_text(entry.reason),
            "-" if entry.refused else str(len(entry.ended)),
            "-" if entry.refused else str(len(entry.asked_to_stop)),
        ]
        for entry in entries
    ]
    header = (
        "",
        "recorded at",
        "control",
        "scope",
        "operator",
        "reason",
        "calls ended",
        "asked to stop",
    )
    for line in text_table(header, cells, {6, 7}):
        print(line)
    for entry in entries:
        ledger = projections.ledger
        for key in entry.ended:
            row = ledger.row(key)
            state = "-" if row is None else f"{row.state} {row.terminal_reason}"
            print(f"@{entry.position} ended {whole_key(key)}: {state}")
        for key, outcome in entry.asked_to_stop.items():
            print(f"@{entry.position} asked to stop {whole_key(key)}: {outcome}")
