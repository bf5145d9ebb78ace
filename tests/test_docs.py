"""The documentation cannot go stale: the configuration reference matches what
`scripts/config_reference.py` generates, and every module path that
docs/architecture.md names exists."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ARCHITECTURE = REPO / "docs" / "architecture.md"
TOP_DIRS = ("conductor_rl", "jobs", "actors", "configs", "benchmarks", "scripts", "tests", "docs")
# `conductor_rl/plan/language.py`, `conductor_rl/data/samples/`, `configs/local.yaml`, ...
PATH_RE = re.compile(r"(?<![\w./-])(?:" + "|".join(TOP_DIRS) + r")/[\w./-]*")
# `conductor_rl.plan.language`, `conductor_rl.plan.parse_plan`, `jobs.ask`, ...
DOTTED_RE = re.compile(r"(?<![\w./-])(?:conductor_rl|jobs|actors)(?:\.[A-Za-z_]\w*)+")


def named_paths(text: str) -> set[str]:
    return {m.group().rstrip(".") for m in PATH_RE.finditer(text)}


def named_modules(text: str) -> set[str]:
    return set(DOTTED_RE.findall(text))


@pytest.mark.slow
def test_configuration_reference_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "config_reference.py"), "--check"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_check_fails_on_a_stale_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import config_reference
    finally:
        sys.path.remove(str(REPO / "scripts"))
    stale = tmp_path / "configuration.md"
    stale.write_text(config_reference.generate().replace("| `conductor.temperature` |", "| `conductor.temp` |"))
    monkeypatch.setattr(config_reference, "OUTPUT", tmp_path / "configuration.md")
    assert config_reference.main(["--check"]) == 1
    out = capsys.readouterr().out
    assert "out of date" in out and "conductor.temp" in out
    assert config_reference.main([]) == 0  # rewrites the (temporary) file
    assert config_reference.main(["--check"]) == 0


def test_reference_covers_every_key() -> None:
    from conductor_rl.config import Config

    text = (REPO / "docs" / "configuration.md").read_text()

    def keys(model, prefix):
        for name, field in model.model_fields.items():
            annotation = field.annotation
            inner = [a for a in (annotation, *getattr(annotation, "__args__", ())) if isinstance(a, type)]
            nested = [a for a in inner if hasattr(a, "model_fields")]
            if nested:
                sub = f"{prefix}{name}.<i>." if getattr(annotation, "__origin__", None) is list else f"{prefix}{name}."
                yield from keys(nested[0], sub)
            else:
                yield f"{prefix}{name}"

    missing = [k for k in keys(Config, "") if f"`{k}`" not in text]
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_architecture_names_only_existing_paths() -> None:
    text = ARCHITECTURE.read_text()
    paths = named_paths(text)
    assert len(paths) > 30, "the module map seems to be missing"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_architecture_names_only_existing_modules() -> None:
    missing = []
    for dotted in sorted(named_modules(ARCHITECTURE.read_text())):
        parts = dotted.split(".")
        # The longest prefix that is a module; the rest must be attributes of it.
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(dotted)
            break
        else:
            missing.append(dotted)
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_path_patterns() -> None:
    text = "see `conductor_rl/plan/language.py`, configs/local.yaml. And ../shared/DESIGN.md and conductor_rl.plan.parse_plan"
    assert named_paths(text) == {"conductor_rl/plan/language.py", "configs/local.yaml"}
    assert named_modules(text) == {"conductor_rl.plan.parse_plan"}
