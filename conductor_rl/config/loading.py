"""Loading a configuration: a YAML file plus `key.sub=value` overrides, validated.

`load_config` turns pydantic's errors into a `ConfigError` that names the
dotted key and what is allowed.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .sections import Config
from .strict import ConfigError

CONFIG_DIR = Path(__file__).resolve().parent.parent.parent / "configs"
DEFAULT_CONFIG = "local.yaml"


def load_config(path: str | Path | Config | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML file (default: the embedded `configs/local.yaml`; a `Config`
    is taken as it is) and apply `key.sub=value` overrides (values parsed as
    YAML: `3`, `true`, `[1, 2]`). Raises ConfigError naming the offending key."""
    if isinstance(path, Config):
        raw = path.model_dump(mode="json")
    else:
        raw = _read_yaml(Path(path) if path else CONFIG_DIR / DEFAULT_CONFIG)
    for item in overrides:
        key, sep, _ = item.partition("=")
        top = key.strip().split(".")[0]
        if sep and top and top not in Config.model_fields:
            raise ConfigError(
                f"unknown configuration section {top!r} in override {item}; "
                f"sections are: {', '.join(Config.model_fields)}"
            )
        if top in Config.model_fields and top not in raw:
            # Override on top of the defaults: `workers.0.temperature=0.5` works when the file omits workers.
            raw[top] = Config().model_dump(mode="json")[top]
        raw = apply_override(raw, item)
    return validate_config(raw)


_DOTTED_KEY = re.compile(r"[a-z_]+(?:\.[\w-]+)+")


def is_override(item: str) -> bool:
    """Whether a command-line item is a `section.key=value` override rather than
    free text (a question for `ask`): the part before the first '=' is a section's
    name (`workers=[...]`) or a dotted key without spaces (`learner.lr=1e-5`; an
    unknown section there is then an error naming it, never a question)."""
    key, sep, _ = item.partition("=")
    return bool(sep) and (key in Config.model_fields or _DOTTED_KEY.fullmatch(key) is not None)


def validate_config(raw: dict[str, Any]) -> Config:
    try:
        return Config.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None


def apply_override(raw: dict[str, Any], item: str) -> dict[str, Any]:
    """Return a copy of `raw` with one `a.b.c=value` override applied. List
    elements are addressed by index (`workers.0.temperature=0.5`); the index just past
    the end appends one (`workers.3={name: conductor, provider: conductor}`)."""
    key, sep, text = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"override {item!r} must look like key.sub=value")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override {key}: value {text!r} is not valid YAML ({err.__class__.__name__})") from None
    raw = copy.deepcopy(raw)
    node: Any = raw
    parts = key.split(".")
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[: depth + 1])
        if isinstance(node, list):
            if last and part.isdigit() and int(part) == len(node):
                node.append(value)  # adding a worker (the Conductor's own seat) needs no copy of the list
            elif not part.isdigit() or int(part) >= len(node):
                raise ConfigError(
                    f"override {key}: {where!r} needs an index below {len(node)} (or {len(node)}: append)"
                )
            elif last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise ConfigError(f"override {key}: {'.'.join(parts[:depth])!r} is a value, not a section")
    return raw


def _read_yaml(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """A configuration file's mapping. A file may start from another (`base: local.yaml`, a path
    relative to the file): its sections are merged into the base's, key by key; a list replaces."""
    if not path.is_file():
        raise ConfigError(
            f"config file {path} does not exist (shipped configs: {sorted(p.name for p in CONFIG_DIR.glob('*.yaml'))})"
        )
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"config file {path}: base must name another config file, e.g. `base: local.yaml`")
    seen = (*seen, path.resolve())
    base_path = (path.parent / base).resolve()
    if base_path in seen:
        raise ConfigError(
            f"config file {path}: base {base} leads back to itself; a base may not have this file as base"
        )
    return _merged(_read_yaml(base_path, seen), data)


def _merged(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _describe(err: ValidationError) -> str:
    lines = []
    for problem in err.errors():
        key = ".".join(str(p) for p in problem["loc"]) or "(top level)"
        if problem["type"] == "extra_forbidden":
            parent = _model_at(problem["loc"][:-1])
            allowed = ", ".join(sorted(parent.model_fields)) if parent else "see docs/configuration.md"
            lines.append(f"{key}: unknown key (allowed here: {allowed})")
        else:
            given = problem.get("input")
            shown = "" if isinstance(given, (dict, list)) else f" (got {given!r})"  # sections: the message says it
            lines.append(f"{key}: {problem['msg']}{shown}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model found by following `loc` from Config, for error messages."""
    model: type[BaseModel] = Config
    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return model
