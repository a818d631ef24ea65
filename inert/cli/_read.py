"""The commands that read a log: ``ledger``, ``replay``, ``verify`` and ``audit``."""

from __future__ import annotations

import functools
import json
from collections import Counter
from datetime import datetime

import trio

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
from ..runtime._verify import DEFAULT_MAX_PROBLEMS, Verification, partitions_digest, verify_log
from ._common import Progress, fold_opened, in_colour
from ._partitions import FoldedPartitions
from ._tables import (
    Seen,
    ledger_json,
    ledger_table,
    row_cells,
    text_table,
    whole_key,
)

# --- ledger ----------------------------------------------------------------------------------


class _PartitionLedger:
    """One partition's ledger as a command folds it, and when the log recorded the events of
    each of its calls (a log of one partition has one, partition 0)."""

    def __init__(self, number: int, *, history: bool) -> None:
        self.number = number
        self.projections = Projections()
        self.first: dict[CallKey, datetime] = {}
        self.changed: dict[CallKey, datetime] = {}
        # The time of each record a history shows, only where histories are printed: a
        # fragment is never one of them.
        self.at: dict[int, datetime] = {}
        self._history = history

    def note_time(self, recorded: RecordedEvent) -> None:
        event = recorded.kept
        key = call_of(event)
        if key is None:
            return
        moment = recorded.recorded_at
        self.first.setdefault(key, moment)
        self.changed[key] = moment
        if self._history and not isinstance(event, ArgumentsAppended):
            self.at[recorded.position] = moment

    @property
    def seen(self) -> Seen:
        return Seen(self.first, self.changed, self.at)


async def ledger_command(
    url: str,
    *,
    as_json: bool,
    history: bool,
    wide: bool = False,
    shown_rows: RowFilter = EVERY_ROW,
    follow: bool = False,
) -> None:
    """The ledger of every partition of calls, each partition's after the one before (a JSON
    row names its partition, and a table is headed by it, where the log has several)."""
    async with open_log(url, create=False) as log:
        partitioned = log.partitions > 1
        parts = [_PartitionLedger(number, history=history) for number in log.call_partitions()]
        for part in parts:
            await fold_opened(
                log.partition(part.number),
                part.projections.apply,
                part.note_time,
                what="ledger" if not partitioned else f"ledger of partition {part.number}",
            )
        for part in parts:
            ledger = part.projections.ledger
            if as_json:
                for entry in ledger_json(
                    ledger, history=history, shown_rows=shown_rows, seen=part.seen
                ):
                    if partitioned:
                        entry["partition"] = part.number
                    print(json.dumps(entry, ensure_ascii=False))
                continue
            if partitioned:
                print(f"partition {part.number}")
            table = ledger_table(
                ledger,
                history=history,
                wide=wide,
                shown_rows=shown_rows,
                seen=part.seen,
                colour=in_colour(),
            )
            for line in table:
                print(line)
        if follow:
            async with trio.open_nursery() as nursery:
                for part in parts:
                    nursery.start_soon(
                        functools.partial(
                            _follow,
                            log.partition(part.number),
                            part,
                            as_json=as_json,
                            shown_rows=shown_rows,
                            partitioned=partitioned,
                        )
                    )


async def _follow(
    log: Log,
    part: _PartitionLedger,
    *,
    as_json: bool,
    shown_rows: RowFilter,
    partitioned: bool,
) -> None:
    """Print each row of a partition's ledger as it changes, until stopped (or the log
    closes): a JSON object, or a line led by the position of the event that changed it (after
    its partition's number and a colon, where the log has several)."""
    projections = part.projections
    ledger = projections.ledger
    prefix = f"{part.number}:" if partitioned else ""
    async for recorded in log.subscribe(projections.position + 1):
        key = call_of(recorded.kept)
        before = None if key is None else ledger.row(key)
        projections.apply(recorded)
        if key is None:
            continue
        moment = recorded.recorded_at
        seen_first = part.first.setdefault(key, moment)
        row = ledger.row(key)
        kept = shown_rows.keeps(key, row, first=seen_first, changed=moment)
        if row is None or row == before or not kept:
            continue
        if as_json:
            entry = row.to_json()
            if partitioned:
                entry["partition"] = part.number
            print(json.dumps(entry, ensure_ascii=False), flush=True)
        else:
            cells = [whole_key(key), *row_cells(row)]
            shown = shown_time(moment)
            print(f"@{prefix}{recorded.position}  {shown}  " + "  ".join(cells), flush=True)


# --- replay ----------------------------------------------------------------------------------


def _partitions_of(log: Log, partition: int | None) -> list[int]:
    """The partitions a command reads: the one asked for (refused if the log has none of that
    number), or every partition of the log, partition 0 first."""
    if partition is not None:
        log.partition(partition)
        return [partition]
    return sorted({0, *log.call_partitions()})


async def _replay_partition(log: Log) -> dict[str, JSON]:
    """Replay one partition (or a log of one): its counts and digest."""
    fold = CallFold(live=False, digest_key=log.key(DIGEST_KEY))
    projections = Projections()
    kinds: Counter[str] = Counter()
    events = await fold_opened(
        log,
        fold.apply,
        projections.apply,
        lambda recorded: kinds.update((recorded.event_type,)),
        what="replay",
    )
    # A key that only ever had events rejected stays absent: it is no call.
    phases = Counter(record.state.phase for record in fold.records.values())
    states: dict[str, JSON] = {
        phase.value: phases[phase] for phase in Phase if phase in phases and phase != Phase.ABSENT
    }
    return {
        "events": events,
        "calls": sum(phases.values()) - phases[Phase.ABSENT],
        "states": states,
        "ready": len(projections.queue),
        "rejections": kinds[EventRejected.TAG],
        "digest": projections.digest(),
    }


def _summed(parts: dict[int, dict[str, JSON]]) -> dict[str, JSON]:
    """The counts of several partitions' replays added up, and the digest over them."""
    states: Counter[str] = Counter()
    for part in parts.values():
        states.update(part["states"])  # type: ignore[arg-type]
    summary: dict[str, JSON] = {
        name: sum(part[name] for part in parts.values())  # type: ignore[misc]
        for name in ("events", "calls", "ready", "rejections")
    }
    summary["states"] = {phase.value: states[phase.value] for phase in Phase if states[phase.value]}
    summary["digest"] = partitions_digest({n: str(part["digest"]) for n, part in parts.items()})
    return summary


async def replay_command(url: str, *, as_json: bool, partition: int | None = None) -> None:
    async with open_log(url, create=False) as log:
        numbers = _partitions_of(log, partition)
        parts = {number: await _replay_partition(log.partition(number)) for number in numbers}
    summary = _summed(parts)
    if len(numbers) > 1 or log.partitions > 1:
        summary["partitions"] = [{"partition": number, **part} for number, part in parts.items()]
    if as_json:
        print(json.dumps(summary))
        return
    print(f"replayed {summary['events']} events; every decision found in the log was made again")
    print(f"calls       {summary['calls']}")
    for state, count in summary["states"].items():  # type: ignore[union-attr]
        print(f"  {state:<18} {count}")
    print(f"ready       {summary['ready']}")
    print(f"rejections  {summary['rejections']}")
    if len(numbers) > 1 or log.partitions > 1:
        for number, part in parts.items():
            print(f"partition {number}: {part['events']} events, digest {part['digest']}")
    print(f"digest {summary['digest']}")


# --- verify ----------------------------------------------------------------------------------


async def verify_command(url: str, *, as_json: bool, partition: int | None = None) -> None:
    found: dict[int, Verification] = {}
    async with open_log(url, create=False) as log:
        for number in _partitions_of(log, partition):
            part = log.partition(number)
            progress = Progress("verify", await part.head())
            try:
                found[number] = await verify_log(part, progress=progress.advance)
            finally:
                progress.finish()
    partitioned = len(found) > 1 or log.partitions > 1
    problems = [
        (number, problem) for number, verified in found.items() for problem in verified.problems
    ]
    events = sum(verified.events for verified in found.values())
    digests = {number: verified.digest for number, verified in found.items()}
    digest = (
        partitions_digest({n: d for n, d in digests.items() if d is not None})
        if all(d is not None for d in digests.values())
        else None
    )
    if as_json:
        report: dict[str, JSON] = {
            "events": events,
            "ok": not problems,
            "replayed": all(verified.replayed for verified in found.values()),
            "digest": digest,
            "problems": [
                {
                    **({"partition": number} if partitioned else {}),
                    "position": problem.position,
                    "problem": problem.what,
                }
                for number, problem in problems
            ],
        }
        if partitioned:
            report["partitions"] = [
                {"partition": number, "events": verified.events, "digest": verified.digest}
                for number, verified in found.items()
            ]
        print(json.dumps(report, ensure_ascii=False))
    else:
        for number, problem in problems:
            print(f"partition {number}, {problem}" if partitioned else problem)
    if problems:
        more = " (the first of them)" if len(problems) >= DEFAULT_MAX_PROBLEMS else ""
        count = len(problems)
        raise LogError(
            f"the log failed verification: {count} problem{'' if count == 1 else 's'}{more} in"
            f" {events} events read"
        )
    if not as_json:
        print(
            f"verified {events} events: the storage's own checks, every row's position and"
            " checksum, and a replay of every decision and what it implies"
        )
        if partitioned:
            for number, verified in found.items():
                print(f"partition {number}: {verified.events} events, digest {verified.digest}")
        print(f"digest {digest}")


async def audit_command(url: str, *, as_json: bool) -> None:
    async with open_log(url, create=False) as log:
        folded = FoldedPartitions(log)
        await folded.catch_up()
    # The controls refused to principals that are no operators are shown among them, marked;
    # the last first, as the console's audit lists them. Each control with what it did in
    # every partition of calls.
    entries = sorted(
        folded.entries() + folded.controls.audit.refusals(),
        key=lambda entry: entry.position,
        reverse=True,
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
        for key in entry.ended:
            row = folded.row(key)
            state = "-" if row is None else f"{row.state} {row.terminal_reason}"
            print(f"@{entry.position} ended {whole_key(key)}: {state}")
        for key, outcome in entry.asked_to_stop.items():
            print(f"@{entry.position} asked to stop {whole_key(key)}: {outcome}")
