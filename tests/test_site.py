"""The documentation site as a reader gets it: the pages MkDocs builds, read as text."""

from __future__ import annotations

import html
import inspect
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from locations import ROOT

from inert import AsyncioRuntime, open_runtime

# Roles of reST: the site renders Markdown, where they would show as written.
RAW_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|ref|const):(?=\S)")
# A cross-reference whose target was not found is left as written: ``[text][target]``.
UNRESOLVED = re.compile(r"\]\[[A-Za-z][\w.\-]*\]")
PRIVATE_MODULE = re.compile(r"\binert(?:\.\w+)*\._[a-z]\w*")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as ``make docs`` builds it, into a folder of the test's."""
    folder = tmp_path_factory.mktemp("site")
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--quiet",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(folder),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, built.stderr
    return folder


def prose(page: Path) -> str:
    """A page's text as shown, code blocks left out (a code sample may index twice: ``a][b]``)."""
    source = re.sub(r"<pre[^>]*>.*?</pre>", "", page.read_text(), flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", "", source))


def section(page: Path, anchor: str) -> str:
    """The text of an object's heading (its signature) on a reference page."""
    found = re.search(rf'<h\d id="{re.escape(anchor)}"[^>]*>(.*?)</h\d>', page.read_text(), re.S)
    assert found, anchor
    return html.unescape(re.sub(r"<[^>]+>", "", found[1]))


@pytest.mark.slow(seconds=15)
def test_no_page_shows_markup_it_does_not_render(site: Path) -> None:
    """No page of the site shows a reST role, a cross-reference left unresolved or the name of
    a private module."""
    pages = sorted(site.rglob("*.html"))
    assert pages
    for page in pages:
        text = prose(page)
        where = page.relative_to(site)
        assert not RAW_ROLE.findall(text), where
        assert not UNRESOLVED.findall(text), where
        assert not PRIVATE_MODULE.findall(text), where


@pytest.mark.slow(seconds=15)
def test_the_reference_shows_the_asyncio_api_whole(site: Path) -> None:
    """``open_asyncio_runtime`` is shown as a function with every parameter of
    ``open_runtime``, and ``AsyncioRuntime`` with every public member."""
    page = site / "api" / "index.html"
    signature = section(page, "inert.open_asyncio_runtime")
    assert signature.strip().startswith("open_asyncio_runtime(")
    for name in inspect.signature(open_runtime).parameters:
        assert re.search(rf"\b{name}\b", signature), name
    members = [name for name, _ in inspect.getmembers(AsyncioRuntime) if not name.startswith("_")]
    assert {"claim", "confirm", "feed", "execute", "ready_calls"} <= set(members)
    for name in members:
        assert section(page, f"inert.AsyncioRuntime.{name}"), name


def test_the_site_and_the_package_are_built_in_folders_of_their_own() -> None:
    """``make docs`` writes where ``make package`` never deletes, and the reverse: the site's
    folder and the folders the package's recipe removes or writes are apart."""
    config = (ROOT / "mkdocs.yml").read_text()
    [site_dir] = re.findall(r"^site_dir:\s*(\S+)\s*$", config, flags=re.MULTILINE)
    recipe = re.search(r"^package:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe
    touched = {"build", "dist"}
    for line in recipe[1].splitlines():
        words = shlex.split(line)
        if words[:2] == ["rm", "-rf"]:
            touched.update(words[2:])
    site = Path(site_dir)
    for folder in map(Path, touched):
        assert not site.is_relative_to(folder), folder
        assert not folder.is_relative_to(site), folder
