"""What the command accepts on its command line: text, file names and counts, each bounded."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

MAX_TEXT = 4096
"""The most characters an identity, a principal or a reason given on the command line holds."""

MAX_SEEDS = 1_000_000
MAX_KEYS = 100_000
MAX_WORKERS = 256
MAX_CONFIRMATION_SECONDS = 7 * 24 * 3600

# Lone surrogates are the bytes of an argument that were not UTF-8 (Python's surrogateescape).
_NOT_TEXT = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def text_argument(value: str) -> str:
    """An identity, a principal or a reason: written to the log and printed back, so valid
    Unicode without control characters, and bounded."""
    found = _NOT_TEXT.search(value)
    if found is not None:
        character = found.group()
        if "\ud800" <= character <= "\udfff":
            raise argparse.ArgumentTypeError("not valid UTF-8 text")
        raise argparse.ArgumentTypeError(
            f"holds the control character U+{ord(character):04X} at {found.start()}"
        )
    if len(value) > MAX_TEXT:
        raise argparse.ArgumentTypeError(f"{len(value)} characters, the limit is {MAX_TEXT}")
    return value


def path_argument(value: str) -> Path:
    """A file name: any bytes the system takes, which excludes NUL."""
    if "\0" in value:
        raise argparse.ArgumentTypeError("a file name holds no NUL character")
    return Path(value)


def count_argument(most: int) -> Callable[[str], int]:
    """The reader of a count from 1 to ``most``: beyond, a seed or a worker too many would
    run for ever or exhaust the machine."""

    def count(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = 0
        if not 1 <= number <= most:
            raise argparse.ArgumentTypeError(f"a whole number from 1 to {most:,}")
        return number

    return count


MAX_WAIT_SECONDS = 3600.0
"""The longest a command may be told to wait for a log's runtimes."""


def seconds_argument(value: str) -> float:
    """A wait in seconds, from 0 to ``MAX_WAIT_SECONDS`` (NaN and infinities are none)."""
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_SECONDS:
        raise argparse.ArgumentTypeError(f"a number of seconds from 0 to {MAX_WAIT_SECONDS:g}")
    return seconds
