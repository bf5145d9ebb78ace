"""The library's shape: data flows jobs → actors → library, never back up; inside
the library, units import one way along the stage order, with no circle; and every
module stays one idea of a readable size."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LIBRARY = REPO / "conductor_rl"
PACKAGE = "conductor_rl"  # its __init__ is the public facade (lazy re-exports), exempt from the order
FORBIDDEN = ("ray", "jobs", "actors")  # the library runs and tests without a cluster
MAX_LINES = 500

#: The stage order, ground floor first: a module imports only from its own unit
#: (a subpackage or a root module) and the units before it (docs/architecture.md, "Stage order").
ORDER = (
    "atomic_files",
    "generation",
    "models",
    "config",
    "data",
    "plan",
    "workers",
    "grading",
    "rollout",
    "policy",
    "run",
    "evaluation",
    "system",
    "orchestrator",
    "serving",
    "testing",
)
#: Root modules allowed outside a subpackage.
ROOT_MODULES = {"__init__", "atomic_files", "generation", "models", "system", "orchestrator"}
#: (importing module, imported module) pairs allowed against the order, each with its reason. Keep it empty.
EXCEPTIONS: dict[tuple[str, str], str] = {}

Sources = dict[str, tuple[str, str]]  # module name -> (path shown in messages, source)


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


def module_name(path: Path, root: Path = LIBRARY) -> str:
    parts = (PACKAGE, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def library_sources() -> Sources:
    return {module_name(p): (str(p.relative_to(REPO)), p.read_text()) for p in library_modules()}


def _known(name: str, modules: set[str]) -> str:
    """The longest prefix of `name` that is a module (`a.b.Name` -> `a.b`)."""
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def imported_modules(name: str, path: str, source: str, modules: set[str]) -> list[tuple[int, str]]:
    """(line, module) of every library module the source imports, at any depth: inside
    functions and TYPE_CHECKING blocks too, absolute or relative. `from pkg import sub`
    names the submodule; `from pkg import Name` the package's __init__."""
    found = []
    package = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            for alias in node.names:
                found.append((node.lineno, f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base))
    return sorted((line, _known(m, modules)) for line, m in found if m == PACKAGE or m.startswith(PACKAGE + "."))


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else PACKAGE


def order_violations(sources: Sources) -> list[str]:
    """One message per import that runs against `ORDER`."""
    modules, broken = set(sources), []
    for name, (path, source) in sorted(sources.items()):
        importer = unit_of(name)
        if importer == PACKAGE:
            continue
        for line, target in sorted(set(imported_modules(name, path, source, modules))):
            imported = unit_of(target)
            if (name, target) in EXCEPTIONS or imported == importer:
                continue
            where = f"{path}:{line} imports {target}"
            if imported == PACKAGE:
                broken.append(f"{where}: the facade {PACKAGE} re-exports the orchestrator; import the module itself")
            elif importer not in ORDER or imported not in ORDER:
                unknown = importer if importer not in ORDER else imported
                broken.append(
                    f"{where}: unit {unknown!r} is not in the stage order; "
                    "add it to ORDER in tests/test_layout.py and to docs/architecture.md"
                )
            elif ORDER.index(imported) > ORDER.index(importer):
                broken.append(
                    f"{where}: {importer} ({ORDER.index(importer) + 1}) may not import "
                    f"{imported} ({ORDER.index(imported) + 1}): a unit imports only itself and the units "
                    "before it; move the code down to a unit both may import"
                )
    return broken


def import_circles(sources: Sources) -> list[list[str]]:
    """One circle (a -> ... -> a) per group of library modules that import each other."""
    modules = set(sources)
    graph = {
        name: sorted({t for _, t in imported_modules(name, path, source, modules) if t != name and t in modules})
        for name, (path, source) in sources.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_circle_in(sorted(group), graph) for group in groups]


def _circle_in(group: list[str], graph: dict[str, list[str]]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    start, members = group[0], set(group)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph[v]:
                if w == start:
                    return paths[v] + [start]
                if w in members and w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return group


def test_the_walk_finds_function_level_imports() -> None:
    source = "import os\ndef f():\n    import ray.util\n    from jobs.common import log\n"
    assert imported_roots(source) == {"os", "ray", "jobs"}


def test_the_walk_resolves_every_form_of_import() -> None:
    modules = {
        "conductor_rl",
        "conductor_rl.data",
        "conductor_rl.data.question",
        "conductor_rl.data.math",
        "conductor_rl.plan",
        "conductor_rl.plan.shape",
        "conductor_rl.grading",
    }
    source = (
        "from typing import TYPE_CHECKING\nfrom .question import Question\nfrom . import question\n"
        "from ..plan import Plan\nimport conductor_rl.plan.shape\nfrom conductor_rl import grading\n"
        "if TYPE_CHECKING:\n    from conductor_rl.plan.shape import PlanShape\n"
        "def f():\n    from .. import Orchestrator\n"
    )
    found = [m for _, m in imported_modules("conductor_rl.data.math", "conductor_rl/data/math.py", source, modules)]
    assert found == [
        "conductor_rl.data.question",
        "conductor_rl.data.question",
        "conductor_rl.plan",
        "conductor_rl.plan.shape",
        "conductor_rl.grading",
        "conductor_rl.plan.shape",
        "conductor_rl",
    ]


def test_the_checker_catches_a_backwards_import() -> None:
    sources = {
        "conductor_rl.data.question": (
            "conductor_rl/data/question.py",
            "def f():\n    from conductor_rl.rollout.workflow import Task\n",
        ),
        "conductor_rl.plan.prompts": (
            "conductor_rl/plan/prompts.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..policy.sampling import Sample\n",
        ),
        "conductor_rl.rollout.workflow": ("conductor_rl/rollout/workflow.py", "from conductor_rl.data import x\n"),
        "conductor_rl.policy.sampling": ("conductor_rl/policy/sampling.py", "from conductor_rl import orchestrator\n"),
        "conductor_rl.orchestrator": ("conductor_rl/orchestrator.py", "from conductor_rl import Answer\n"),
        "conductor_rl.data": ("conductor_rl/data/__init__.py", ""),
        "conductor_rl": ("conductor_rl/__init__.py", "from conductor_rl import orchestrator\n"),
    }
    broken = order_violations(sources)
    assert len(broken) == 4, broken
    assert broken[0].startswith(
        "conductor_rl/data/question.py:2 imports conductor_rl.rollout.workflow: data (5) may not import rollout (9)"
    )
    assert "conductor_rl/orchestrator.py:1 imports conductor_rl: the facade" in broken[1]
    assert broken[2].startswith(
        "conductor_rl/plan/prompts.py:3 imports conductor_rl.policy.sampling: plan (6) may not import policy (10)"
    )
    assert "policy (10) may not import orchestrator (14)" in broken[3]
    assert (
        "not in the stage order"
        in order_violations(
            {
                "conductor_rl.extras.x": ("conductor_rl/extras/x.py", "import conductor_rl.data\n"),
                "conductor_rl.data": ("conductor_rl/data/__init__.py", ""),
            }
        )[0]
    )


def test_the_checker_catches_a_circle() -> None:
    sources = {
        "conductor_rl.data": ("conductor_rl/data/__init__.py", "from .question import Question\n"),
        "conductor_rl.data.question": (
            "conductor_rl/data/question.py",
            "def f():\n    from conductor_rl.data.math import x\n",
        ),
        "conductor_rl.data.math": ("conductor_rl/data/math.py", "from conductor_rl.data import Question\n"),
        "conductor_rl.data.files": ("conductor_rl/data/files.py", "from .question import Question\n"),
    }
    assert import_circles(sources) == [
        ["conductor_rl.data", "conductor_rl.data.question", "conductor_rl.data.math", "conductor_rl.data"]
    ]
    sources["conductor_rl.data.math"] = ("conductor_rl/data/math.py", "import os\n")  # the submodule, not the package
    assert import_circles(sources) == []


def test_imports_follow_the_stage_order() -> None:
    broken = order_violations(library_sources())
    assert not broken, f"imports against the stage order ({' < '.join(ORDER)}):\n" + "\n".join(broken)


def test_no_import_circle() -> None:
    circles = import_circles(library_sources())
    assert not circles, (
        "library modules that import each other (import the submodule itself, or move the shared "
        "code down a unit):\n" + "\n".join(" -> ".join(c) for c in circles)
    )


def test_every_unit_is_in_the_order() -> None:
    units = {unit_of(name) for name in library_sources()} - {PACKAGE}
    assert units <= set(ORDER), f"units missing from ORDER (tests/test_layout.py): {sorted(units - set(ORDER))}"


def test_exceptions_are_still_needed() -> None:
    sources = library_sources()
    used = {
        (name, t)
        for name, (path, source) in sources.items()
        for _, t in imported_modules(name, path, source, set(sources))
    }
    assert set(EXCEPTIONS) <= used, f"exceptions no import needs any more: {sorted(set(EXCEPTIONS) - used)}"


@pytest.mark.parametrize("path", library_modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_library_module_does_not_reach_up(path: Path) -> None:
    reached = imported_roots(path.read_text()) & set(FORBIDDEN)
    assert not reached, (
        f"{path.relative_to(REPO)} imports {sorted(reached)}: "
        "the library must not depend on Ray or on the layers above it"
    )


def test_actors_do_not_import_jobs() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / "actors").rglob("*.py"))
        if "jobs" in imported_roots(p.read_text())
    ]
    assert not offenders, f"actors import jobs: {offenders}"


def test_modules_stay_readable() -> None:
    long = {
        str(p.relative_to(REPO)): n for p in library_modules() if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"library modules over {MAX_LINES} lines (split them by idea): {long}"


def test_library_is_grouped_by_stage() -> None:
    loose = sorted(p.name for p in LIBRARY.glob("*.py") if p.stem not in ROOT_MODULES)
    assert not loose, f"modules outside a stage subpackage (allowed at the root: {sorted(ROOT_MODULES)}): {loose}"
