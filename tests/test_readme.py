"""The README's Python examples run as they are written."""

from __future__ import annotations

import re
from contextlib import ExitStack
from pathlib import Path

import pytest
from adapter_support import FIXTURES, recorded_body
from replay_server import threaded_replay_server

README = Path(__file__).parent.parent / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_has_examples() -> None:
    """The README shows the log and the embedding API in code."""
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_a_readme_example_runs(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each Python block of the README runs without error in an empty folder (one that calls
    a model does so against a local server replaying a recorded answer)."""
    monkeypatch.chdir(tmp_path)
    with ExitStack() as stack:
        if "anthropic.AsyncAnthropic()" in EXAMPLES[index]:
            body = recorded_body(FIXTURES / "anthropic" / "text-then-tool-use.sse")
            served = threaded_replay_server(body, fresh_id=b"msg_019Q1hrJbZG26Fb9BQhrkHEr")
            monkeypatch.setenv("ANTHROPIC_BASE_URL", stack.enter_context(served))
            monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
        exec(compile(EXAMPLES[index], f"README example {index}", "exec"), {"__name__": "readme"})
    printed = capsys.readouterr().out
    # A print the reader is told the output of, in a comment on its line, prints just that.
    promised = re.findall(r"^\s*print\(.*\)\s+#\s*(.+)$", EXAMPLES[index], flags=re.MULTILINE)
    if promised:
        assert printed == "".join(f"{line}\n" for line in promised)
