"""An agent server in an incident, for the operator's incident tests (tests/cli/test_incident.py
and the console's browser test).

``python tests/incident_server.py URL`` runs one runtime process (``server-1``) on the log and
gives each of two tenants, ``acme`` and ``globex``, one call in every live stage: ``search``
still collecting, ``send_email`` waiting for its principal's confirmation, ``get_weather`` ready
and unclaimed, and ``book_flight`` running, claimed by an executor that runs until it is asked
to stop and then reports that it stopped. It prints ``ready`` once all eight are where they
should be, ``stopped TENANT CALL`` when a running call stops, and ends when its standard input
closes.
"""

from __future__ import annotations

import sys

import trio
from peer_process import call_events

from inert import (
    CallKey,
    Event,
    Runtime,
    ToolDeclaration,
    open_runtime,
)

TENANTS = ("acme", "globex")
TOOLS = [
    ToolDeclaration(name="search"),
    ToolDeclaration(name="send_email", needs_confirmation=True),
    ToolDeclaration(name="get_weather"),
    ToolDeclaration(name="book_flight"),
]
PROCESS = "server-1"


def say(line: str) -> None:
    print(line, flush=True)


def key_of(tenant: str, tool: str) -> CallKey:
    return CallKey(
        tenant=tenant,
        conversation=f"{tenant}-chat",
        turn=f"{tenant}-turn",
        response=f"resp_{tenant}_{tool}",
        item=f"item_{tool}",
        call=f"call_{tool}",
    )


def call(tenant: str, tool: str, *, whole: bool) -> list[Event]:
    """A call of its own response: whole (its response ends), or cut after one fragment."""
    return call_events(key_of(tenant, tool), tool, b'{"note": "incident drill"}', whole=whole)


async def run_until_stopped(runtime: Runtime, key: CallKey, task_status: trio.TaskStatus) -> None:
    dispatch = await runtime.claim(key, executor="flights")
    task_status.started()
    await runtime.wait_for_stop(dispatch)
    await runtime.stopped(dispatch)
    say(f"stopped {key.tenant} {key.call}")


async def main(url: str) -> None:
    async with (
        open_runtime(log=url, tools=TOOLS, process=PROCESS, create=True) as runtime,
        trio.open_nursery() as nursery,
    ):
        for tenant in TENANTS:
            first = key_of(tenant, "search")
            await runtime.start_turn(
                tenant=tenant,
                conversation=first.conversation,
                turn=first.turn,
                principal=f"user:{tenant}-alice",
            )
            await runtime.feed(
                [
                    *call(tenant, "search", whole=False),
                    *call(tenant, "send_email", whole=True),
                    *call(tenant, "get_weather", whole=True),
                    *call(tenant, "book_flight", whole=True),
                ]
            )
        await runtime.settle()
        for tenant in TENANTS:
            await nursery.start(run_until_stopped, runtime, key_of(tenant, "book_flight"))
        await runtime.settle()
        say("ready")
        await trio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
