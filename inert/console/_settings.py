"""How a console is set up: who may look, who may act, and where its links go."""

from __future__ import annotations

import secrets
import string
from collections.abc import Callable, Collection, Mapping
from datetime import timedelta

from attrs import field, frozen

from ..events import ConfigurationError
from ..projections import DEFAULT_LEDGER_HORIZON

JAEGER_TRACE_URL = "http://127.0.0.1:16686/trace/{trace_id}"
"""Where a call's trace id links to by default: Jaeger's UI on its usual port."""

DEFAULT_PAGE_SIZE = 100
"""Calls on one page of the ledger."""

MAX_PAGE_SIZE = 1000


def _page_size(instance: object, attribute: object, value: int) -> None:
    if not 1 <= value <= MAX_PAGE_SIZE:
        raise ConfigurationError(f"page_size must be from 1 to {MAX_PAGE_SIZE}, not {value}")


def _trace_url(instance: object, attribute: object, value: str) -> None:
    # Filled in at every traced call's page: a pattern that cannot be filled in is refused at
    # start, not on each of those pages.
    try:
        fields = [
            name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "")
            for _, name, spec, conversion in string.Formatter().parse(value)
            if name is not None
        ]
    except ValueError as error:
        raise ConfigurationError(
            f"trace_url cannot be filled in: {error} (a literal brace is written twice): {value!r}"
        ) from None
    odd = [field for field in fields if field != "trace_id"]
    if odd:
        raise ConfigurationError(
            f"trace_url holds {{{odd[0]}}}, but only {{trace_id}} is filled in: {value!r}"
        )
    if not fields:
        raise ConfigurationError(f"trace_url must hold {{trace_id}}: {value!r}")


@frozen(kw_only=True)
class ConsoleSettings:
    """Who may use a console and how it shows a log.

    Every request is authenticated, by one of:

    - ``tokens``: each token and the principal it stands for; a person opens the console once
      at ``/?token=...`` (the token then lives in a cookie the browser sends to this console
      alone) or sends ``Authorization: Bearer ...``;
    - ``principal_header``: the header in which a proxy in front of the console names the
      principal it authenticated, believed only from the addresses in ``trusted_proxies``.

    ``operators`` is the operator authorizer of the runtime (a function of the principal, or
    the principals themselves): a control by a principal it does not accept is refused and
    written to the audit. A call's trace id links to ``trace_url`` with ``{trace_id}`` in it.
    """

    tokens: Mapping[str, str] = field(factory=dict)
    principal_header: str | None = None
    trusted_proxies: frozenset[str] = frozenset({"127.0.0.1", "::1"})
    operators: Callable[[str], bool] | Collection[str] = frozenset()
    trace_url: str = field(default=JAEGER_TRACE_URL, validator=_trace_url)
    page_size: int = field(default=DEFAULT_PAGE_SIZE, validator=_page_size)
    ledger_horizon: timedelta | None = DEFAULT_LEDGER_HORIZON
    control_wait: float = 5.0
    """Seconds a control's page waits for the runtimes to end the calls it concerns."""
    secret: bytes = field(factory=lambda: secrets.token_bytes(32), repr=False)
    """Keys the session cookies and the forms' CSRF tokens (new at every start by default)."""

    def is_operator(self, principal: str) -> bool:
        """Whether the operator authorizer accepts the principal."""
        operators = self.operators
        return operators(principal) if callable(operators) else principal in operators

    def __attrs_post_init__(self) -> None:
        if not self.tokens and self.principal_header is None:
            raise ConfigurationError(
                "a console needs tokens or a principal header: every request is authenticated"
            )
        for token, principal in self.tokens.items():
            if len(token) < 16 or not principal:
                raise ConfigurationError(
                    "each console token is at least 16 characters and names a principal"
                )
