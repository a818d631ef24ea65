"""A child process that resumes a lost OpenAI Responses background stream and is killed.

Usage: ``python resume_killed.py URL [written]``. On the log at URL it resumes the one lost
stream of the turn ``t1`` of ``tests/test_adapter_openai_responses.py``'s resume tests from the
sequence the log holds, feeds the continuation's argument deltas (fragments: held, not yet
written), prints ``fed N`` with the number of fragments, and kills itself with SIGKILL before
the next append; with ``written``, once they are written.
"""

from __future__ import annotations

import os
import signal
import sys

import trio
from adapter_support import FIXTURES, declarations, turn_ref

from inert import ArgumentsAppended, open_runtime
from inert.adapters import OpenAIResponsesAdapter

STREAM = FIXTURES / "openai-responses" / "two-function-calls-gpt-4o.sse"


async def main(url: str, written: bool) -> None:
    async with open_runtime(
        log=url, create=True, tools=declarations(["search", "weather"])
    ) as runtime:
        turn = turn_ref()
        [(response, after)] = runtime.resumable_streams(turn).items()
        assert after is not None
        adapter = OpenAIResponsesAdapter(turn)
        await runtime.feed(
            adapter.resume(
                response.response, after_sequence=after, calls=runtime.resumable_calls(response)
            )
        )
        events = adapter.feed(STREAM.read_bytes())
        fragments = [event for event in events if isinstance(event, ArgumentsAppended)]
        for fragment in fragments:
            await runtime.feed([fragment])
        if written:
            await runtime.settle()
        print(f"fed {len(fragments)}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2:] == ["written"])
