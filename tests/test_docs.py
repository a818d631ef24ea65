"""The Python examples of the README and of the documentation run as they are written."""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path

import pytest
from adapter_support import FIXTURES, recorded_body
from locations import ROOT
from replay_server import threaded_replay_server

RESPONSES = "two-function-calls-gpt-4o.sse"
"""The captured stream an example asking OpenAI's Responses API is answered with."""
CHAT = "parallel-tool-calls-gpt-4o.sse"
"""The captured stream an example asking OpenAI's Chat Completions is answered with."""

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(
    # A Python block, and the text block of what it prints where a line saying so follows it.
    r"```python\n(?P<code>.*?)```\n(?:\n[^`]*?\bprints\b[^`]*?:\n\n```text\n(?P<output>.*?)```)?",
    flags=re.DOTALL,
)
EXAMPLES = [
    (f"{page.relative_to(ROOT)} example {number}", found["code"], found["output"])
    for page in PAGES
    for number, found in enumerate(BLOCK.finditer(page.read_text()))
]


def test_the_readme_and_the_docs_have_examples() -> None:
    """The README shows the embedding API in code, and the documentation the log, the runtime
    under Trio and under asyncio."""
    names = [name for name, _, _ in EXAMPLES]
    assert any(name.startswith("README.md") for name in names)
    assert len(EXAMPLES) >= 5


@pytest.mark.parametrize("index", range(len(EXAMPLES)), ids=[name for name, _, _ in EXAMPLES])
def test_an_example_runs(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each Python block of the README and the docs runs without error in an empty folder (one
    that calls a model does so against a local server replaying a recorded answer), and prints
    what the page says it prints."""
    name, code, output = EXAMPLES[index]
    monkeypatch.chdir(tmp_path)
    with ExitStack() as stack:
        if "anthropic.AsyncAnthropic()" in code:
            body = recorded_body(FIXTURES / "anthropic" / "text-then-tool-use.sse")
            served = threaded_replay_server(body, fresh_id=b"msg_019Q1hrJbZG26Fb9BQhrkHEr")
            monkeypatch.setenv("ANTHROPIC_BASE_URL", stack.enter_context(served))
            monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        if "openai.AsyncOpenAI()" in code:
            if "client.responses." in code:
                body = recorded_body(FIXTURES / "openai-responses" / RESPONSES)
            else:
                body = recorded_body(FIXTURES / "openai-chat" / CHAT, interaction=1)
            served = threaded_replay_server(body)
            monkeypatch.setenv("OPENAI_BASE_URL", f"{stack.enter_context(served)}/v1")
            monkeypatch.setenv("OPENAI_API_KEY", "test")
        exec(compile(code, name, "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    # A print the reader is told the output of, in a comment on its line, prints just that.
    promised = re.findall(r"^\s*print\(.*\)\s+#\s*(.+)$", code, flags=re.MULTILINE)
    if promised:
        assert printed == "".join(f"{line}\n" for line in promised)
    if output is not None:
        # Its lines, in any order: calls that become ready together are offered in the order
        # their actors got there, as the pages say.
        assert sorted(printed.splitlines()) == sorted(output.splitlines())


def test_an_asyncio_embedding_is_shown_in_under_40_lines() -> None:
    """The docs show a whole asyncio embedding (open, feed, confirm, execute) in under 40 lines,
    and it is one of the examples the tests run."""
    asyncio_examples = [
        code
        for _, code, _ in EXAMPLES
        if "open_asyncio_runtime" in code and "asyncio.run(" in code and ".execute(" in code
    ]
    assert asyncio_examples
    assert min(len(code.strip().splitlines()) for code in asyncio_examples) < 40


@pytest.mark.parametrize("page", ["README.md", "docs/getting-started.md"])
def test_the_first_embedding_feeds_a_provider_sdk_s_stream_and_shows_what_it_prints(
    page: str,
) -> None:
    """The first example of the README and of getting started asks OpenAI through its SDK and
    feeds the raw bytes of its stream through an adapter; the page shows what it prints, which
    the example's run above checks."""
    _, code, output = next(example for example in EXAMPLES if example[0].startswith(page))
    assert "openai.AsyncOpenAI()" in code
    assert "with_streaming_response" in code
    assert "response.iter_bytes()" in code
    assert "feed_stream(" in code
    assert "Adapter(turn)" in code
    assert "CallOpened" not in code
    assert output
