"""``inert repartition``: copy a log no process writes into an empty log of another number of
partitions, and prove the copy by verifying both and comparing their ledgers call for call."""

from __future__ import annotations

import json
import time

import attrs
from attrs import frozen

from ..events import CallKey, LogError
from ..events._identity import key_part
from ..log import Log, open_log
from ..log._repartition import Repartitioned, repartition
from ..projections import LedgerRow, Projections
from ..runtime._verify import verify_log
from ._common import Progress, refuse_beside_a_runtime

SHOWN_DIFFERENCES = 5
"""The most calls whose ledgers differ that a failure names."""

OFFLINE = "a repartition copies a log that no process writes: stop it first"


def _numbers(log: Log) -> list[int]:
    return sorted({0, *log.call_partitions()})


async def _verified(log: Log, which: str) -> dict[CallKey, LedgerRow]:
    """``inert verify`` of every partition of the log, and the ledger row of every call its
    replay finds (without the horizon that ages finished calls out: when a row ages out depends
    on the later events of its partition, which a repartition changes)."""
    rows: dict[CallKey, LedgerRow] = {}
    for number in _numbers(log):
        part = log.partition(number)
        projections = Projections(ledger_horizon=None)
        progress = Progress(f"verify the {which}", await part.head())
        try:
            verified = await verify_log(part, progress=progress.advance, projections=projections)
        finally:
            progress.finish()
        if verified.problems:
            count = len(verified.problems)
            raise LogError(
                f"the {which} fails verification in partition {number}: {verified.problems[0]}"
                f" ({count} problem{'' if count == 1 else 's'}; inert verify lists them)"
            )
        rows.update((row.key, row) for row in projections.ledger.rows())
    return rows


def _shown(key: CallKey) -> str:
    return "/".join(key_part(part) for part in key._parts())


def _differences(before: dict[CallKey, LedgerRow], after: dict[CallKey, LedgerRow]) -> list[str]:
    """What differs between the ledgers of the source and of the copy, call by call."""
    found: list[str] = []
    for key in sorted(before.keys() | after.keys(), key=CallKey._parts):
        was, now = before.get(key), after.get(key)
        if was == now:
            continue
        if now is None:
            found.append(f"call {_shown(key)} is missing from the copy's ledger")
        elif was is None:
            found.append(f"call {_shown(key)} is in the copy's ledger alone")
        else:
            fields = [
                field.name
                for field in attrs.fields(LedgerRow)
                if getattr(was, field.name) != getattr(now, field.name)
            ]
            found.append(f"call {_shown(key)} differs in {', '.join(fields)}")
    return found


@frozen(kw_only=True)
class Report:
    """What a repartition did and what proves it: the rows it read and wrote by partition, and
    the calls whose ledger rows agree. No digest: a log's digest holds its audit's positions,
    so a log and its copy in other partitions differ by definition."""

    done: Repartitioned
    source_partitions: int
    target_partitions: int
    calls: int


async def checked_source(source: Log) -> dict[CallKey, LedgerRow]:
    """Refuse a source a runtime runs on, and verify it: the ledger row of each of its calls."""
    await refuse_beside_a_runtime(source, on="the log to repartition", then=OFFLINE)
    return await _verified(source, "source")


async def copied(source: Log, target: Log, before: dict[CallKey, LedgerRow]) -> Report:
    """Copy a checked source (its ledger: ``before``) into ``target``, verify the copy and
    compare the ledgers of both call for call. ``LogError`` on any failure, the source left as
    it was."""
    try:
        done = await repartition(source, target)
    except LogError as error:
        raise LogError(
            f"{error}; the source is as it was, and the target may hold part of a copy: make it"
            " empty again (a new file or schema) before trying again"
        ) from None
    after = await _verified(target, "copy")
    differences = _differences(before, after)
    if differences:
        left = len(differences) - SHOWN_DIFFERENCES
        raise LogError(
            "the copy's ledger is not the source's: "
            + "; ".join(differences[:SHOWN_DIFFERENCES])
            + (f" (and {left} more)" if left > 0 else "")
        )
    return Report(
        done=done,
        source_partitions=source.partitions,
        target_partitions=target.partitions,
        calls=len(before),
    )


async def repartition_verified(source: Log, target: Log) -> Report:
    """``checked_source``, then ``copied``: what ``inert repartition`` does once both are open."""
    return await copied(source, target, await checked_source(source))


async def repartition_command(
    source_url: str, target_url: str, *, partitions: int, as_json: bool
) -> None:
    started = time.monotonic()
    async with open_log(source_url, create=False) as source:
        # The target is opened (and made, where it does not exist) only for a source that passed.
        before = await checked_source(source)
        async with open_log(target_url, partitions=partitions) as target:
            report = await copied(source, target, before)
    milliseconds = round((time.monotonic() - started) * 1000)
    done = report.done
    read, written = sum(done.read.values()), sum(done.written.values())
    if as_json:
        print(
            json.dumps(
                {
                    "source": {
                        "partitions": report.source_partitions,
                        "events": read,
                        "read": [{"partition": n, "events": c} for n, c in done.read.items()],
                    },
                    "target": {
                        "partitions": report.target_partitions,
                        "events": written,
                        "written": [{"partition": n, "events": c} for n, c in done.written.items()],
                    },
                    "controls": done.controls,
                    "calls": report.calls,
                    "milliseconds": milliseconds,
                }
            )
        )
        return
    print(
        f"copied {read} events of {_partitions(report.source_partitions)} into {written} events"
        f" of {_partitions(report.target_partitions)} in {milliseconds / 1000:.1f} s"
    )
    for number, count in done.written.items():
        print(f"partition {number}: {count} events")
    if done.controls:
        print(
            f"controls: {done.controls}, in partition 0"
            + (" and copied into every partition of calls" if report.target_partitions > 1 else "")
        )
    print(f"verified both logs, whose ledgers agree for each of {report.calls} calls")
    print("snapshots are not copied: a runtime on the copy makes them again")


def _partitions(count: int) -> str:
    return f"{count} partition{'s' if count > 1 else ''}"
