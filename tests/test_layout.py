"""The house rules of the layout: who may import what."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "inert"
PURE_MODULES = [
    *(f"events/{path.name}" for path in sorted((PACKAGE / "events").glob("*.py"))),
    *(
        f"actors/{name}.py"
        for name in (
            "_arguments",
            "_buffer",
            "_call",
            "_decider",
            "_fold",
            "_handlers",
            "_scope",
            "_slot",
            "_tools",
        )
    ),
    "log/_records.py",
    "log/_snapshots.py",
    "tracing/_context.py",
    "tracing/_spans.py",
    *(
        f"projections/{name}.py"
        for name in ("__init__", "_digest", "_dispatch", "_ledger", "_status")
    ),
]
IO_MODULES = {"trio", "sqlite3", "socket", "asyncio", "threading", "subprocess", "psycopg"}
SDK_MODULES = {"openai", "anthropic", "boto3", "botocore", "google", "httpx", "httpx2", "requests"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            prefix = "." * node.level + (node.module or "")
            names.add(prefix)
    return names


def test_events_imports_nothing_else_of_inert() -> None:
    """``inert.events`` depends on no other part of inert."""
    for path in (PACKAGE / "events").glob("*.py"):
        for name in imported_modules(path):
            assert not name.startswith(".."), f"{path.name} imports {name}"
            assert not name.startswith("inert"), f"{path.name} imports {name}"


@pytest.mark.parametrize("module", PURE_MODULES)
def test_pure_modules_do_no_io(module: str) -> None:
    """The vocabulary, the codec and the argument parser import neither trio nor any storage."""
    names = imported_modules(PACKAGE / module)
    assert not {name.split(".")[0] for name in names} & IO_MODULES


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "adapters").glob("*.py")), ids=lambda path: path.name
)
def test_adapters_are_sans_io_and_import_only_the_vocabulary(path: Path) -> None:
    """An adapter imports ``inert.events`` and other adapter modules, no I/O and no SDK."""
    for name in imported_modules(path):
        top = name.split(".")[0]
        assert top not in IO_MODULES | SDK_MODULES, f"{path.name} imports {name}"
        assert not name.startswith("inert"), f"{path.name} imports {name}"
        if name.startswith(".."):
            assert name == "..events", f"{path.name} imports {name}"


def test_projections_import_only_the_vocabulary() -> None:
    """Projections depend on ``inert.events`` alone: never on the actors or the runtime."""
    for path in (PACKAGE / "projections").glob("*.py"):
        for name in imported_modules(path):
            if name.startswith(".."):
                assert name == "..events", f"{path.name} imports {name}"


def test_actors_import_only_the_vocabulary() -> None:
    """The actors depend on ``inert.events`` alone among the other parts of inert; their router,
    which appends their decisions, on ``inert.log`` too."""
    for path in (PACKAGE / "actors").glob("*.py"):
        allowed = {"..events", "..log"} if path.name == "_router.py" else {"..events"}
        for name in imported_modules(path):
            if name.startswith(".."):
                assert name in allowed, f"{path.name} imports {name}"


# cryptography seals the argument bytes a PostgreSQL log must be able to destroy.
LOG_DRIVERS = {"trio", "sqlite3", "psycopg", "attrs", "msgpack", "cryptography"}


def test_the_log_imports_only_the_vocabulary_and_its_drivers() -> None:
    """``inert.log`` depends on ``inert.events``, the standard library and the drivers of its
    backends, nothing else."""
    for path in (PACKAGE / "log").glob("*.py"):
        for name in imported_modules(path):
            if name.startswith(".."):
                assert name == "..events" or name.startswith("..events."), (
                    f"{path.name} imports {name}"
                )
            elif not name.startswith("."):
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names | LOG_DRIVERS, f"{path.name} imports {name}"


def test_only_the_command_line_imports_the_command_line() -> None:
    """``inert.cli`` sits on top: no other part of inert imports it (``python -m inert`` aside)."""
    for path in PACKAGE.rglob("*.py"):
        if path.parent.name == "cli" or path.name == "__main__.py":
            continue
        for name in imported_modules(path):
            assert "cli" not in name.lstrip(".").split("."), f"{path} imports {name}"


def test_the_layout_of_the_design_exists() -> None:
    """The packages of the design are present and the package is marked as typed."""
    for package in (
        "events",
        "log",
        "adapters",
        "actors",
        "projections",
        "tracing",
        "runtime",
        "console",
        "cli",
        "mcp",
        "pydantic_ai",
        "openai_agents",
    ):
        assert (PACKAGE / package / "__init__.py").is_file()
    assert (PACKAGE / "py.typed").is_file()


LAYERS = [
    "cli",
    "console",
    "mcp",
    "pydantic_ai",
    "openai_agents",
    "testing",
    "runtime",
    "tracing",
    "actors",
    "projections",
    "adapters",
    "log",
    "events",
]
"""inert's packages, each importing only those below it (the README's layout, in its order)."""


@pytest.mark.parametrize("layer", LAYERS)
def test_imports_run_one_way_down_the_layers(layer: str) -> None:
    """A package imports only packages below it in ``LAYERS``, never one above or beside."""
    below = set(LAYERS[LAYERS.index(layer) + 1 :])
    for path in (PACKAGE / layer).rglob("*.py"):
        depth = len(path.relative_to(PACKAGE).parts) - 1
        for name in imported_modules(path):
            dots = len(name) - len(name.lstrip("."))
            if dots <= depth:
                continue
            target = name.lstrip(".").split(".")[0]
            if target and target in LAYERS and target != layer:
                assert target in below, f"{path.relative_to(PACKAGE)} imports {name}"
