"""The console's pages: Jinja2 templates, escaped everywhere, drawn in slices; and the
overview's chart.

Every value a page shows goes through the templates' autoescaping (provider ids, tenants, tool
names and reasons are whatever a stream or a person sent), and is shown as its characters are:
an identity (tenant, conversation, turn, response, item, call, tool) as ``key_part`` shows it
on the command line, percent-encoded but for letters, digits and ``_.-~``, so that no format
or control character can hide in it or reorder what is drawn; free text (a reason, a detail,
a principal) as written, but for each such character, escaped the same way. A link to a call
carries its key as one URL-safe word; the chart is SVG made here, its labels escaped the same
way.

A page runs in the event loop that also answers every other request: a long list is drawn
one page at a time (``Paging``), long walks and the drawing let the other requests in every
``SLICE_SECONDS`` (``Slices``), and the pages that list calls take turns (``Console.drawing``),
so that the controls never wait behind more than a slice of one of them.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

import jinja2
import markupsafe
from attrs import frozen
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ..events._identity import key_part, shown_text
from ._slices import Slices
from ._view import STAGE_MARKS, Stage, shown_age, shown_time


def time_element(moment: datetime | str) -> markupsafe.Markup:
    """A time of the log as a page shows it: ISO 8601 in UTC, in a ``<time>`` element that the
    pages' script may show in the browser's own time zone instead (the page reads right
    without it)."""
    if isinstance(moment, str):
        moment = datetime.fromisoformat(moment)
    shown = shown_time(moment)
    # The text is the function's own: digits, dashes, colons, T and Z.
    return markupsafe.Markup(f'<time datetime="{shown}">{shown}</time>')


MAX_PAGE = 1_000_000_000
"""The last page number a request may ask for (a larger one asks for that one)."""


_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("inert.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    # The templates are the package's own: looking whether they changed on disk at every page
    # (and every include) would cost a file system call each.
    auto_reload=False,
)
_ENVIRONMENT.filters["time"] = time_element
_ENVIRONMENT.filters["age"] = shown_age
_ENVIRONMENT.filters["id"] = key_part
_ENVIRONMENT.filters["text"] = shown_text
_ENVIRONMENT.globals["marks"] = STAGE_MARKS
_ENVIRONMENT.globals["stage_class"] = lambda stage: "stage-" + stage.value.replace(" ", "-")


async def render(
    request: Request, template: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """A page of the console, with what every page shows: who is asking, the form token,
    the links' base and the log's time now; drawn in slices."""
    console = request.app.state.console
    principal: str = request.scope["inert.console.principal"]
    now: datetime = console.feed.now()
    asked = [(name, value) for name, value in request.query_params.multi_items()]
    pieces = _ENVIRONMENT.get_template(template).generate(
        base=request.scope.get("root_path", ""),
        principal=principal,
        is_operator=console.settings.is_operator(principal),
        csrf=console.auth.csrf_token(principal),
        now=now,
        now_ms=int(now.timestamp() * 1000),
        position=console.feed.view.position,
        query=lambda **changes: _query(asked, changes),
        **context,
    )
    page: list[str] = []
    slices = Slices()
    for piece in pieces:
        page.append(piece)
        await slices.due()
    return HTMLResponse("".join(page), status_code=status_code)


def _query(asked: list[tuple[str, str]], changes: dict[str, object]) -> str:
    """The query of the address asked for, with ``changes`` in place of what it said (in its
    place, or at the end where it said nothing of it)."""
    changed = {name: str(value) for name, value in changes.items()}
    query: list[tuple[str, str]] = []
    for name, value in asked:
        if name not in changes:
            query.append((name, value))
        elif name in changed:
            query.append((name, changed.pop(name)))
    return urlencode([*query, *changed.items()])


@frozen
class Paging:
    """One page of a long list: its number (from 1), its size, and how long the list is."""

    name: str
    """The query parameter that says which page."""
    number: int
    size: int
    total: int

    @property
    def offset(self) -> int:
        return (self.number - 1) * self.size

    @property
    def pages(self) -> int:
        return max((self.total + self.size - 1) // self.size, 1)

    @property
    def past_end(self) -> bool:
        """Whether the page asked for comes after the last one (there is always a first)."""
        return self.number > self.pages

    @property
    def past_end_text(self) -> str:
        """What a page past the end says in place of the places it shows."""
        return f"page {self.number} is past the last page, {self.pages}"

    def shown(self, count: int) -> tuple[int, int]:
        """The places in the list (from 1) of the first and last of ``count`` shown."""
        return (self.offset + 1, self.offset + count) if count else (0, 0)


def page_number(request: Request, name: str = "page") -> int:
    """The page a request asks for under ``name`` (the first where it says none, or nonsense)."""
    try:
        return min(max(int(request.query_params.get(name, "1")), 1), MAX_PAGE)
    except ValueError:
        return 1


def paging(request: Request, total: int, *, name: str = "page") -> Paging:
    """The page of a list of ``total`` a request asks for, the console's page size long."""
    size: int = request.app.state.console.settings.page_size
    return Paging(name=name, number=page_number(request, name), size=size, total=total)


def ms(moment: datetime) -> int:
    """A time as milliseconds since the epoch, for the pages' script to count ages from."""
    return int(moment.timestamp() * 1000)


_ENVIRONMENT.filters["ms"] = ms


@frozen
class Bar:
    """One stage's part of a tenant's bar in the overview's chart."""

    stage: Stage
    x: float
    width: float
    count: int


@frozen
class TenantBars:
    tenant: str
    y: float
    total: int
    bars: list[Bar]


CHART_WIDTH = 640.0
BAR_HEIGHT = 22.0
LABEL_WIDTH = 160.0
MAX_TENANTS = 20


def chart(counts: dict[str, Counter[Stage]]) -> tuple[list[TenantBars], float, int]:
    """The overview's stacked bars, one per tenant (the busiest ``MAX_TENANTS``), its height,
    and how many tenants were left out."""
    busiest = sorted(counts.items(), key=lambda item: (-item[1].total(), item[0]))
    shown = busiest[:MAX_TENANTS]
    largest = max((stages.total() for _, stages in shown), default=1) or 1
    scale = (CHART_WIDTH - LABEL_WIDTH - 60) / largest
    rows: list[TenantBars] = []
    for index, (tenant, stages) in enumerate(shown):
        x = LABEL_WIDTH
        bars = []
        for stage in Stage:
            count = stages.get(stage, 0)
            if count:
                bars.append(Bar(stage=stage, x=x, width=count * scale, count=count))
                x += count * scale
        rows.append(
            TenantBars(tenant=tenant, y=index * (BAR_HEIGHT + 8), total=stages.total(), bars=bars)
        )
    height = max(len(rows), 1) * (BAR_HEIGHT + 8)
    return rows, height, len(busiest) - len(shown)
