"""The console's controls in an incident: every stopping control previews the calls it ends
and the running calls it asks to stop, warns of a target never seen, says whether a runtime
runs to act on it; lifting what is not in force is refused; the controls page lists what is in
force; a control's page counts the running calls asked to stop with their outcomes, and the
calls it holds while no runtime runs."""

from __future__ import annotations

import re

import trio
from console_support import (
    OPERATOR,
    TOOLS,
    client_of,
    finished,
    key,
    opened,
    response_ended,
    start,
)

from inert import Runtime, open_runtime
from inert.log import MemoryLog, MemoryStore


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None
    return found.group(1)


async def _incident(runtime: Runtime, nursery: trio.Nursery) -> None:
    """acme: call_1 collecting (a response of its own), call_2 ready, call_3 running until
    asked to stop."""
    await start(runtime)
    await runtime.feed(opened(key("call_1", response="resp_2")))
    for call in ("call_2", "call_3"):
        await runtime.feed(opened(key(call)) + finished(key(call)))
    await runtime.feed(response_ended(key("call_2")))
    await runtime.settle()
    dispatch = await runtime.claim(key("call_3"), executor="worker")

    async def run_until_stopped() -> None:
        await runtime.wait_for_stop(dispatch)
        await runtime.stopped(dispatch)

    nursery.start_soon(run_until_stopped)


async def test_a_stop_previews_the_running_call_and_its_page_counts_its_outcome() -> None:
    """The question lists the live calls it ends and the running call it asks to stop, with a
    runtime running; once given, the control's page shows the running call with its outcome,
    and the controls page lists the stop as in force."""
    async with (
        open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime,
        trio.open_nursery() as nursery,
    ):
        await _incident(runtime, nursery)
        async with client_of(runtime.log) as (client, _):
            csrf = _csrf((await client.get("/controls")).text)
            form = {"csrf": csrf, "action": "stop-tenant", "target": "acme", "reason": "drill"}
            question = (await client.post("/controls", data=form)).text
            assert "1 running call is asked to stop" in question
            assert "A runtime is running on this log" in question
            assert 'id="unseen"' not in question
            assert question.count("/calls/") == 3
            given = await client.post("/controls", data={**form, "confirmed": "yes"})
            assert given.status_code == 303
            await runtime.settle()
            entry = (await client.get(given.headers["location"])).text
            assert "Calls it ended (2)" in entry
            assert "Running calls it asked to stop (1)" in entry
            assert re.search(r"<td>(stop requested|stopped)</td>", entry)
            in_force = (await client.get("/controls")).text
            assert "In force now (1)" in in_force
            assert "tenant_stopped @" in in_force


async def test_a_target_never_seen_is_questioned_and_lifting_nothing_is_refused() -> None:
    """A tenant the log never named is questioned before it is stopped; resuming a tenant that
    is not stopped or enabling a tool that is not disabled changes nothing and is refused."""
    async with open_runtime(log="memory://", tools=TOOLS, operators=[OPERATOR]) as runtime:
        await start(runtime)
        await runtime.feed(opened(key("call_1")))
        await runtime.settle()
        async with client_of(runtime.log) as (client, _):
            csrf = _csrf((await client.get("/controls")).text)
            form = {"csrf": csrf, "action": "stop-tenant", "target": "initek", "reason": "typo"}
            question = (await client.post("/controls", data=form)).text
            assert "tenant &#39;initek&#39; has never been seen on this log" in question
            head = await runtime.log.head()
            for action, target, said in [
                ("resume-tenant", "acme", "tenant &#39;acme&#39; is not stopped"),
                ("enable-tool", "get_weather", "tool &#39;get_weather&#39; is not disabled"),
            ]:
                refused = await client.post(
                    "/controls", data={**form, "action": action, "target": target}
                )
                assert refused.status_code == 400
                assert said in refused.text
            assert await runtime.log.head() == head


async def test_with_no_runtime_running_a_control_says_so_and_lists_what_it_holds() -> None:
    """With the runtime gone, the question and the control's page say that no runtime runs,
    and the page lists the live calls the control holds until one opens the log."""
    store = MemoryStore()
    async with open_runtime(log=MemoryLog(store), tools=TOOLS, operators=[OPERATOR]) as runtime:
        await start(runtime)
        await runtime.feed(opened(key("call_1")))
        await runtime.settle()
    async with client_of(MemoryLog(store)) as (client, _):
        csrf = _csrf((await client.get("/controls")).text)
        form = {"csrf": csrf, "action": "stop-tenant", "target": "acme", "reason": "drill"}
        question = (await client.post("/controls", data=form)).text
        assert "No runtime is running on this log" in question
        given = await client.post("/controls", data={**form, "confirmed": "yes"})
        entry = (await client.get(given.headers["location"])).text
        assert "Calls it ended (0)" in entry
        assert "Held by it (1): no runtime is running on this log" in entry
