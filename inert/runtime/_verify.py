"""``inert verify``: every check a log can be put through, with every problem found listed.

A read of the log stops at the first damage it finds (``LogDamaged``), which is what the
runtime needs: nothing is decided or executed from a damaged log. An operator who suspects
damage wants the whole picture instead, so verification goes on past a damaged row:

1. the backend's own checks (``Log.storage_problems``: SQLite's ``PRAGMA integrity_check``,
   rows against positions and stream versions);
2. every row: its position follows the one before, its checksum holds, its payload decodes;
3. a replay of every decision (``CallFold``) and of the projections, up to the first
   divergence or implausible decision, since what follows one can no longer be judged.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from attrs import frozen

from ..actors import CallFold
from ..actors._call import DIGEST_KEY
from ..events import CodecError, InertError, LogDamaged, LogError, RecordedEvent
from ..log import Log
from ..log._records import StoredRecord, check_row, decode_record
from ..projections import Projections

VERIFY_PAGE = 1024
DEFAULT_MAX_PROBLEMS = 100


@frozen(kw_only=True)
class Problem:
    """One thing wrong, at a position of the log where it has one."""

    position: int | None
    what: str

    def __str__(self) -> str:
        return self.what if self.position is None else f"position {self.position}: {self.what}"


@frozen(kw_only=True)
class Verification:
    """What verifying a log found: how many events it read, every problem (up to the limit),
    and, when the replay reached the end, the digest of the projections."""

    events: int
    problems: tuple[Problem, ...]
    replayed: bool
    digest: str | None

    @property
    def ok(self) -> bool:
        return not self.problems


async def verify_log(
    log: Log,
    *,
    max_problems: int = DEFAULT_MAX_PROBLEMS,
    progress: Callable[[int], object] | None = None,
    projections: Projections | None = None,
) -> Verification:
    """Run every check on the log; stops listing after ``max_problems``. ``progress`` is told
    how many events were read after each page. The replay folds ``projections`` (new ones if
    not given), which a caller that gives them may read after."""
    try:
        problems = [Problem(position=None, what=what) for what in await log.storage_problems()]
    except LogError as error:
        problems = [Problem(position=None, what=f"the storage's own checks failed: {error}")]
    fold = CallFold(live=False, digest_key=log.key(DIGEST_KEY))
    projections = Projections() if projections is None else projections
    replaying = True
    events = 0
    expected = 1
    while len(problems) < max_problems:
        try:
            rows = await log._read_rows(expected, VERIFY_PAGE)
        except LogError as error:
            problems.append(Problem(position=expected, what=f"the backend cannot read it: {error}"))
            replaying = False
            break
        if not rows:
            break
        for row in rows:
            if row.position != expected:
                problems.append(
                    Problem(position=expected, what=f"missing (the next row is at {row.position})")
                )
                replaying = False
            expected = row.position + 1
            events += 1
            recorded = _checked(log, row, problems)
            if recorded is None:
                replaying = False
            elif replaying:
                replaying = _replayed(fold, projections, recorded, problems)
        if progress is not None:
            progress(events)
    return Verification(
        events=events,
        problems=tuple(problems[:max_problems]),
        replayed=replaying,
        digest=projections.digest() if replaying else None,
    )


def _checked(log: Log, row: StoredRecord, problems: list[Problem]) -> RecordedEvent | None:
    try:
        check_row(row)
        return decode_record(log.codec, row)
    except LogDamaged as error:
        problems.append(Problem(position=row.position, what=error.what))
    except CodecError as error:
        problems.append(
            Problem(position=row.position, what=f"its payload does not decode: {error}")
        )
    return None


def _replayed(
    fold: CallFold, projections: Projections, recorded: RecordedEvent, problems: list[Problem]
) -> bool:
    try:
        fold.apply(recorded)
        projections.apply(recorded)
    except LogDamaged as error:
        problems.append(Problem(position=error.position, what=error.what))
    except InertError as error:
        problems.append(Problem(position=recorded.position, what=str(error)))
    else:
        return True
    return False


def partitions_digest(digests: Mapping[int, str]) -> str:
    """The digest of a log from the digests of its partitions' replays: a log of one partition
    has its partition's; a partitioned log ``sha256:`` of the lines ``N DIGEST`` (each
    partition's number and digest, partition 0 first, each line ending in a newline)."""
    if set(digests) == {0}:
        return digests[0]
    lines = "".join(f"{number} {digests[number]}\n" for number in sorted(digests))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
