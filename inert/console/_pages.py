"""The console's pages: Jinja2 templates, escaped everywhere, and the overview's chart.

Every value a page shows goes through the templates' autoescaping (provider ids, tenants, tool
names and reasons are whatever a stream or a person sent); a link to a call carries its key as
one URL-safe word; the chart is SVG made here, its labels escaped the same way.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import jinja2
from attrs import frozen
from starlette.requests import Request
from starlette.responses import HTMLResponse

from ._view import STAGE_MARKS, Stage, shown_age, shown_time

_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("inert.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENVIRONMENT.filters["time"] = shown_time
_ENVIRONMENT.filters["age"] = shown_age
_ENVIRONMENT.globals["marks"] = STAGE_MARKS
_ENVIRONMENT.globals["stage_class"] = lambda stage: "stage-" + stage.value.replace(" ", "-")


def render(
    request: Request, template: str, context: dict[str, Any], *, status_code: int = 200
) -> HTMLResponse:
    """A page of the console, with what every page shows: who is asking, the form token,
    the links' base and the log's time now."""
    console = request.app.state.console
    principal: str = request.scope["inert.console.principal"]
    now: datetime = console.feed.now()
    page = _ENVIRONMENT.get_template(template).render(
        base=request.scope.get("root_path", ""),
        principal=principal,
        is_operator=console.settings.is_operator(principal),
        csrf=console.auth.csrf_token(principal),
        now=now,
        now_ms=int(now.timestamp() * 1000),
        position=console.feed.view.position,
        **context,
    )
    return HTMLResponse(page, status_code=status_code)


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
