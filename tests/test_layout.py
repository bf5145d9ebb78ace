"""The library's shape: data flows jobs → actors → library, never back up, and
every module stays one idea of a readable size."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "conductor_rl"
FORBIDDEN = ("ray", "jobs", "actors")   # the library runs and tests without a cluster
MAX_LINES = 500


def imported_roots(source: str) -> set[str]:
    """Top-level package of every import in the source, at any depth (function-level imports too)."""
    roots = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def library_modules() -> list[Path]:
    return sorted(LIBRARY.rglob("*.py"))


def test_the_walk_finds_function_level_imports() -> None:
    source = "import os\ndef f():\n    import ray.util\n    from jobs.common import log\n"
    assert imported_roots(source) == {"os", "ray", "jobs"}


@pytest.mark.parametrize("path", library_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_library_module_does_not_reach_up(path: Path) -> None:
    reached = imported_roots(path.read_text()) & set(FORBIDDEN)
    assert not reached, f"{path.relative_to(REPO)} imports {sorted(reached)}: the library must not depend on Ray or on the layers above it"


def test_actors_do_not_import_jobs() -> None:
    offenders = [str(p.relative_to(REPO)) for p in sorted((REPO / "actors").rglob("*.py"))
                 if "jobs" in imported_roots(p.read_text())]
    assert not offenders, f"actors import jobs: {offenders}"


def test_modules_stay_readable() -> None:
    long = {str(p.relative_to(REPO)): n for p in library_modules()
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"library modules over {MAX_LINES} lines (split them by idea): {long}"


def test_library_is_grouped_by_stage() -> None:
    loose = sorted(p.name for p in LIBRARY.glob("*.py")
                   if p.name not in {"__init__.py", "config.py", "models.py", "orchestrator.py"})
    assert not loose, f"modules outside a stage subpackage: {loose}"
