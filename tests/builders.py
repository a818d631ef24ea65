"""Builders of the identities and events most tests need, with the values the tests share: one
tenant ``acme``, conversation ``c1``, turn ``t1``, response ``resp_1``, item ``fc_1``, call
``call_1``, each given otherwise where a test needs it."""

from __future__ import annotations

from inert import CallKey


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
