"""Calls and ledgers as a person reads them: keys shortened where they can be, aligned tables, JSON.

Nothing shown carries an argument value: calls are shown by key, tool, counts, sizes, reasons
and digests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime

from attrs import frozen

from ..events import (
    CallKey,
)
from ..events._identity import key_part, shown_text
from ..projections import JSON, Ledger, LedgerRow, Transition
from ..projections._shown import EVERY_ROW, RowFilter, shown_time
from ._common import KEY_FIELDS

# --- showing keys and tables -----------------------------------------------------------------


SHORT_ID = 12
"""The longest identity a narrow table shows whole; a longer one is cut to the shortest prefix
of at least ``SHORT_ID - 4`` characters that no other identity of its column shares."""


def _shortened(values: Iterable[str]) -> dict[str, str]:
    distinct = sorted(set(values))
    short: dict[str, str] = {}
    for value in distinct:
        if len(value) <= SHORT_ID:
            continue
        length = SHORT_ID - 4
        while length < len(value) and any(
            other != value and other.startswith(value[:length]) for other in distinct
        ):
            length += 1
        if length < len(value):
            short[value] = value[:length] + "…"
    return short


class Keys:
    """How call keys are shown: the leading identities every key shares are named once and, in
    a narrow table, long provider ids are cut to a prefix that still tells them apart."""

    def __init__(self, keys: Iterable[CallKey], *, wide: bool = True) -> None:
        keys = list(keys)
        self.shared: list[tuple[str, str]] = []
        for name in ("tenant", "conversation"):
            values = {getattr(key, name) for key in keys}
            if len(values) != 1:
                break
            self.shared.append((name, values.pop()))
        self.fields = KEY_FIELDS[len(self.shared) :]
        self._short: dict[str, dict[str, str]] = {
            name: {} if wide else _shortened(getattr(key, name) for key in keys)
            for name in self.fields
        }

    def show(self, key: CallKey) -> str:
        parts = []
        for name in self.fields:
            value = getattr(key, name)
            parts.append(self._short[name].get(value) or key_part(value))
        return "/".join(parts)

    def legend(self) -> str:
        """For instance ``tenant acme; calls shown as conversation/turn/response/item/call``."""
        shared = ", ".join(f"{name} {key_part(value)}" for name, value in self.shared)
        shown = f"calls shown as {'/'.join(self.fields)}"
        if any(self._short.values()):
            shown += " (long ids cut short: --wide shows them whole)"
        return f"{shared}; {shown}" if shared else shown


def text_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    numeric: set[int],
    paint: Callable[[int, str, str], str] | None = None,
) -> list[str]:
    """Aligned columns (numbers to the right), two spaces apart, under a header line.
    ``paint`` (column, cell, the cell padded) gives a body cell its colour, after alignment."""
    widths = [max(len(row[column]) for row in (header, *rows)) for column in range(len(header))]

    def line(cells: Sequence[str], painted: bool) -> str:
        parts = []
        for column, (cell, width) in enumerate(zip(cells, widths, strict=True)):
            padded = cell.rjust(width) if column in numeric else cell.ljust(width)
            parts.append(paint(column, cell, padded) if painted and paint else padded)
        return "  ".join(parts).rstrip()

    return [line(header, False), *(line(row, True) for row in rows)]


STATE_STYLES = {
    "dispatched": "green",
    "validated": "cyan",
    "terminal_candidate": "cyan",
    "cancelled": "yellow",
    "failed": "red",
}
"""The Rich styles of the states a terminal shows in colour."""

STATE_COLUMN = 2


def paint_state(column: int, cell: str, padded: str) -> str:
    """The state column in its colour, the rest as it is."""
    style = STATE_STYLES.get(cell) if column == STATE_COLUMN else None
    if style is None:
        return padded
    # Only a table in colour needs Rich: the other commands do not wait for its import.
    from rich.color import ColorSystem  # noqa: PLC0415
    from rich.style import Style  # noqa: PLC0415

    # The terminal's own sixteen colours, which every terminal has and its theme sets.
    return Style.parse(style).render(padded, color_system=ColorSystem.STANDARD)


LEDGER_HEADER = (
    "call",
    "tool",
    "state",
    "fragments",
    "bytes",
    "terminal event",
    "reason",
    "parse",
    "validation",
    "dispatch",
    "outcome",
)


def _cell(value: object) -> str:
    """A cell of text as a person reads it: hidden characters shown escaped (``shown_text``)."""
    return "-" if value is None or value == "" else shown_text(str(value))


def ledger_cells(keys: Keys, row: LedgerRow) -> list[str]:
    return [keys.show(row.key), *row_cells(row)]


def row_cells(row: LedgerRow) -> list[str]:
    """The cells of a ledger row after its key's."""
    return [
        "-" if not row.tool else key_part(row.tool),
        row.state,
        str(row.fragments),
        str(row.bytes),
        _cell(row.terminal_event),
        _cell(row.terminal_reason),
        _cell(row.parse),
        _cell(row.validation),
        row.dispatch,
        _cell(row.outcome),
    ]


def _history_keys(ledger: Ledger) -> list[CallKey]:
    """Every key with a row or a transition, in the order it first appeared."""
    keys = dict.fromkeys(ledger.histories())
    keys.update(dict.fromkeys(row.key for row in ledger.rows()))
    return list(keys)


def _transition_cells(step: Transition, at: datetime | None) -> list[str]:
    return [
        f"@{step.position}",
        "-" if at is None else shown_time(at),
        step.event_type,
        _cell(step.state),
        shown_text(step.detail),
    ]


@frozen
class Seen:
    """When the log first and last recorded something of a call, and when it recorded each of
    the records a history shows (by position, where noted)."""

    first: Mapping[CallKey, datetime]
    changed: Mapping[CallKey, datetime]
    at: Mapping[int, datetime]

    def keeps(self, shown: RowFilter, key: CallKey, row: LedgerRow | None) -> bool:
        return shown.keeps(key, row, first=self.first.get(key), changed=self.changed.get(key))


NOTHING_SEEN = Seen({}, {}, {})


NARROW_COLUMNS = ("call", "tool", "state", "bytes", "reason", "outcome")
"""The columns of a ledger that fits 100 characters a line (with ids as short as the demo's):
what became of each call, without how its arguments ended and were judged."""


def ledger_table(
    ledger: Ledger,
    *,
    history: bool = False,
    wide: bool = True,
    shown_rows: RowFilter = EVERY_ROW,
    seen: Seen | None = None,
    colour: bool = False,
    columns: Sequence[str] = LEDGER_HEADER,
) -> list[str]:
    """The ledger as lines a person reads: a legend, a header and one line per call key.

    With ``history``, each key's transitions follow it, indented, and keys that only have
    rejected events (no row) are listed too, each transition with the log's time of its record
    where ``seen`` has it; ``wide`` shows every id whole; ``shown_rows`` says which calls to
    show; ``seen``, where given, when the log recorded each call's events: the time of its last
    is shown in a last column; ``colour``, each state in its colour (for a terminal);
    ``columns``, which of the ledger's columns to show (``call``, ``tool`` and ``state`` first,
    where the colours of the states go).
    """
    rows = ledger.rows()
    by_key = {row.key: row for row in rows}
    keys = _history_keys(ledger) if history else [row.key for row in rows]
    noted = NOTHING_SEEN if seen is None else seen
    keys = [key for key in keys if noted.keeps(shown_rows, key, by_key.get(key))]
    if not keys:
        return ["(no calls)"]
    shown = Keys(keys, wide=wide)
    cells = [
        ledger_cells(shown, by_key[key])
        if key in by_key
        else [shown.show(key), "-", "(no call: only rejected events)", *[""] * 8]
        for key in keys
    ]
    header: tuple[str, ...] = LEDGER_HEADER
    if seen is not None:
        header = (*header, "changed")
        for key, row_cells in zip(keys, cells, strict=True):
            moment = seen.changed.get(key)
            row_cells.append("-" if moment is None else shown_time(moment))
    shown_columns = [
        index for index, name in enumerate(header) if name in columns or index >= len(LEDGER_HEADER)
    ]
    header = tuple(header[index] for index in shown_columns)
    cells = [[row_cells[index] for index in shown_columns] for row_cells in cells]
    numeric = {index for index, name in enumerate(header) if name in ("fragments", "bytes")}
    table = text_table(header, cells, numeric, paint_state if colour else None)
    lines = [shown.legend(), table[0]]
    histories = ledger.histories() if history else {}
    steps = [
        _transition_cells(step, noted.at.get(step.position))
        for key in keys
        for step in histories.get(key, [])
    ]
    # One table for every transition, so that their columns line up under all the calls.
    indented = iter(text_table(("", "", "", "", ""), steps, {0})[1:])
    for key, line in zip(keys, table[1:], strict=True):
        lines.append(line)
        lines.extend("      " + next(indented) for _ in histories.get(key, []))
    return lines


def whole_key(key: CallKey) -> str:
    """A call key with every identity, tenant and conversation too: ``tenant/conversation/
    turn/response/item/call``, each as ``key_part`` shows it."""
    return "/".join(key_part(getattr(key, name)) for name in KEY_FIELDS)


def key_json(key: CallKey) -> dict[str, JSON]:
    return {name: getattr(key, name) for name in KEY_FIELDS}


def ledger_json(
    ledger: Ledger, *, history: bool, shown_rows: RowFilter = EVERY_ROW, seen: Seen = NOTHING_SEEN
) -> list[dict[str, JSON]]:
    """The ledger's rows as JSON objects; with ``history``, each with its transitions, each
    with ``recorded_at`` (the log's time of its record, ISO 8601 UTC) where ``seen`` has it."""
    if not history:
        return [row.to_json() for row in ledger.rows() if seen.keeps(shown_rows, row.key, row)]
    by_key = {row.key: row for row in ledger.rows()}
    histories = ledger.histories()
    objects: list[dict[str, JSON]] = []
    for key in _history_keys(ledger):
        row = by_key.get(key)
        if not seen.keeps(shown_rows, key, row):
            continue
        # A key with only rejected events has no row: its columns are null.
        entry = row.to_json() if row is not None else _row_of_nothing(key)
        entry["history"] = [_step_json(step, seen) for step in histories.get(key, [])]
        objects.append(entry)
    return objects


def _step_json(step: Transition, seen: Seen) -> dict[str, JSON]:
    shown = step.to_json()
    at = seen.at.get(step.position)
    shown["recorded_at"] = None if at is None else shown_time(at)
    return shown


def _row_of_nothing(key: CallKey) -> dict[str, JSON]:
    """The columns of a key without a row: its identities, and null for everything else."""
    columns = LedgerRow.opened(key, tool="", fragments=0, size=0).to_json()
    return {name: (value if name in KEY_FIELDS else None) for name, value in columns.items()}


def times_text(count: int) -> str:
    """How many times, as a sentence says it."""
    return {1: "once", 2: "twice"}.get(count, f"{count} times")
