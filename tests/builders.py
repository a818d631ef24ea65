"""Builders of the identities and events most tests need, with the values the tests share: one
tenant ``acme``, conversation ``c1``, turn ``t1``, response ``resp_1``, item ``fc_1``, call
``call_1``, each given otherwise where a test needs it."""

from __future__ import annotations

from inert import CallKey
from inert.actors._arguments import arguments_digest
from inert.actors._call import DIGEST_KEY
from inert.log import Log, open_log


def call_key(
    call: str = "call_1",
    *,
    tenant: str = "acme",
    conversation: str = "c1",
    turn: str = "t1",
    response: str = "resp_1",
    item: str = "fc_1",
) -> CallKey:
    """A call's key: the shared values, but where given."""
    return CallKey(
        tenant=tenant,
        conversation=conversation,
        turn=turn,
        response=response,
        item=item,
        call=call,
    )


def digest_in(log: Log, canonical: bytes) -> str:
    """The digest a call of a turn of this log's rules (10 on) gives the canonical arguments:
    keyed by the log."""
    return arguments_digest(canonical, log.key(DIGEST_KEY))


async def digest_in_log(url: str, canonical: bytes) -> str:
    """``digest_in`` for the log at ``url``, opened for it."""
    async with open_log(url, create=False) as log:
        return digest_in(log, canonical)
