"""Every case of the damaged-log corpus is found where it is, and nothing runs from it."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from damaged_logs import CASES, DamagedLog

from inert import InertError, LogDamaged, open_runtime
from inert.cli import main
from inert.cli._demo import DEMO_TOOLS
from inert.log import SQLiteLog
from inert.runtime._verify import verify_log


@pytest.fixture(scope="module")
def sound_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log the demo wrote: turns, fragments, decisions, confirmations, outcomes, a restart."""
    path = tmp_path_factory.mktemp("sound") / "demo.db"
    assert main(["demo", "--log", f"sqlite:///{path}"]) == 0
    return path


def _damaged(sound_log: Path, tmp_path: Path, case: DamagedLog) -> tuple[Path, int | None]:
    path = tmp_path / "damaged.db"
    shutil.copyfile(sound_log, path)
    with sqlite3.connect(path) as connection:
        position = case.damage(connection, path)
    return path, position


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_a_damaged_log_is_found_where_it_is_damaged(
    case: DamagedLog, sound_log: Path, tmp_path: Path
) -> None:
    """A read refuses the damaged row by its position, verify lists it there, and a runtime
    refuses to start on the log; damage to the storage alone is found by verify's own checks."""
    path, position = _damaged(sound_log, tmp_path, case)
    async with SQLiteLog.open(path) as log:
        found = await verify_log(log)
        assert not found.ok
        if position is None:
            assert [problem.position for problem in found.problems] == [None] * len(found.problems)
            return
        assert position in [problem.position for problem in found.problems]
        if case.refused_by != "replay":
            with pytest.raises(LogDamaged, match=f"damaged at position {position}"):
                await log.read()
    with pytest.raises(InertError, match=f"position {position}"):
        async with SQLiteLog.open(path) as log, open_runtime(log=log, tools=DEMO_TOOLS):
            pass


async def test_the_sound_log_verifies(sound_log: Path) -> None:
    """The log every case starts from is sound: the corpus's findings are the damage's."""
    async with SQLiteLog.open(sound_log) as log:
        assert (await verify_log(log)).ok
