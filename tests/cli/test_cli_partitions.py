"""``inert replay`` and ``inert verify`` on a partitioned log: each partition on its own, or
one alone, and the digest over all of them as the docs define it."""

from __future__ import annotations

import json
import uuid

import pytest
import trio

from inert import (
    ArgumentsAppended,
    CallEnded,
    CallKey,
    CallOpened,
    Event,
    ResponseEnded,
    ResponseEndReason,
    TerminalRef,
    ToolDeclaration,
    open_log,
    open_runtime,
)
from inert.cli import main
from inert.log import Log
from inert.projections import Projections
from inert.runtime._verify import partitions_digest

WEATHER = ToolDeclaration(name="get_weather")


def call_key(conversation: str) -> CallKey:
    """The one call of a conversation's turn ``t1``."""
    return CallKey(
        tenant="acme",
        conversation=conversation,
        turn="t1",
        response=f"r-{conversation}",
        item="i",
        call="c",
    )


def ready_call_events(key: CallKey) -> list[Event]:
    """The events of a whole call of ``get_weather`` and its response's end: fed, it is ready."""
    return [
        CallOpened(key=key, tool=WEATHER.name, sequence=0),
        ArgumentsAppended(key=key, data=b'{"city": "Lima"}', first_sequence=1, last_sequence=1),
        CallEnded(key=key, terminal=TerminalRef(sequence=2)),
        ResponseEnded(
            response=key.response_ref,
            reason=ResponseEndReason.COMPLETED,
            terminal=TerminalRef(sequence=3),
        ),
    ]


async def _one_ready_call(log: Log, conversation: str) -> str:
    """A validated call in a log of one partition; the digest its runtime ends with."""
    key = call_key(conversation)
    async with open_runtime(log=log, tools=[WEATHER]) as runtime:
        await runtime.start_turn(
            tenant="acme", conversation=conversation, turn="t1", principal="user:alice"
        )
        await runtime.feed(ready_call_events(key))
        await runtime.settle()
        return runtime.digest()


@pytest.fixture
def partitioned() -> tuple[str, dict[int, str]]:
    """A memory log of two partitions of calls, a ready call in each: its URL and the digest
    of each partition's runtime (partition 0, empty, has the digest of an empty replay)."""
    url = f"memory://partitions-{uuid.uuid4().hex}"

    async def fill() -> dict[int, str]:
        async with open_log(url, partitions=2) as log:
            digests = {
                number: await _one_ready_call(log.partition(number), conversation)
                for number, conversation in ((1, "c-one"), (2, "c-two"))
            }
        digests[0] = Projections().digest()
        return digests

    return url, trio.run(fill)


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_replay_goes_over_every_partition(
    partitioned: tuple[str, dict[int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """``replay`` replays each partition on its own: the counts add up, each partition's digest
    is its runtime's, and the log's digest is the one defined over them."""
    url, digests = partitioned
    status, output, error = _run(capsys, ["replay", "--log", url, "--json"])
    assert status == 0, error
    summary = json.loads(output)
    assert summary["calls"] == 2
    assert summary["ready"] == 2
    assert {part["partition"]: part["digest"] for part in summary["partitions"]} == digests
    assert summary["digest"] == partitions_digest(digests)
    assert summary["digest"].startswith("sha256:")
    status, text, _ = _run(capsys, ["replay", "--log", url])
    assert f"partition 2: {summary['partitions'][2]['events']} events, digest {digests[2]}" in text
    assert text.splitlines()[-1] == f"digest {summary['digest']}"


def test_replay_and_verify_of_one_partition(
    partitioned: tuple[str, dict[int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """``--partition N`` reads that partition alone; its digest is its runtime's."""
    url, digests = partitioned
    status, output, error = _run(capsys, ["replay", "--log", url, "--partition", "1", "--json"])
    assert status == 0, error
    summary = json.loads(output)
    assert summary["calls"] == 1
    assert [part["partition"] for part in summary["partitions"]] == [1]
    status, output, error = _run(capsys, ["verify", "--log", url, "--partition", "2", "--json"])
    assert status == 0, error
    report = json.loads(output)
    assert report["ok"]
    assert report["partitions"] == [
        {"partition": 2, "events": report["events"], "digest": digests[2]}
    ]


def test_verify_goes_over_every_partition(
    partitioned: tuple[str, dict[int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """``verify`` checks every partition and ends with the digest over all of them."""
    url, digests = partitioned
    status, output, error = _run(capsys, ["verify", "--log", url])
    assert status == 0, error
    assert "partition 1: " in output
    assert output.splitlines()[-1] == f"digest {partitions_digest(digests)}"


def test_a_partition_the_log_does_not_have_is_refused(
    partitioned: tuple[str, dict[int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Asking for a partition the log does not have names the partitions it has."""
    url, _ = partitioned
    status, output, error = _run(capsys, ["verify", "--log", url, "--partition", "7"])
    assert status != 0
    assert output == ""
    assert "no partition 7: its partitions are 0 to 2" in error


def test_a_log_of_one_partition_keeps_its_digest() -> None:
    """The digest of a log of one partition is its partition's, as it always was."""
    assert partitions_digest({0: "abc"}) == "abc"
    assert partitions_digest({0: "a", 1: "b"}) != partitions_digest({0: "b", 1: "a"})
