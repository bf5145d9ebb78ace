#!/usr/bin/env python3
"""Generate docs/configuration.md from the pydantic models in conductor_rl/config/ (sections.py, workers.py).

    python scripts/config_reference.py           # rewrite docs/configuration.md
    python scripts/config_reference.py --check   # exit 1 if it is out of date
    python scripts/config_reference.py --stdout  # print instead of writing

Everything in the reference that can be taken from the code is: every key, its
type, allowed range, default and description come from `Config.model_fields`
(walked recursively); the error messages shown are produced by `load_config` on
the spot; the per-file examples are read from `configs/*.yaml`. The few notes
written here by hand (`NOTES`, for fields without a `description`) say what the
code does with the value; a field's own `description` always wins over them.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import annotated_types  # noqa: E402
import yaml  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402

from conductor_rl import config as cfg  # noqa: E402
from conductor_rl.config import Config, ConfigError, load_config  # noqa: E402

OUTPUT = REPO / "docs" / "configuration.md"
CONFIG_DIR = cfg.CONFIG_DIR

# Notes for fields that have no `description` in conductor_rl/config/ (what
# the code does with the value). Keys use `<i>` for list indices.
NOTES: dict[str, str] = {
    "conductor.temperature": "Sampling temperature of the Conductor's plans (paper: 1.0); 0 samples greedily.",
    "conductor.top_p": "Nucleus sampling threshold, applied when the temperature is above 0.",
    "conductor.max_new_tokens": "Most tokens the Conductor may write per plan (paper: 1024).",
    "conductor.max_steps": "Most steps a plan may have; the prompt states it and `parse_plan` enforces it (paper: 5).",
    "conductor.dtype": "Torch dtype the Conductor's weights are loaded in ('auto': the checkpoint's own).",
    "conductor.seed": "Seed of the Conductor's sampling; `ask` also passes it to every worker provider.",
    "workers.<i>.name": "Unique name, shown in logs and traces. The Conductor never sees it (only 'Model <i>').",
    "workers.<i>.provider": "The backend that serves this worker "
    "(see `conductor_rl.workers.providers.build_provider`).",
    "workers.<i>.model": "The provider's model name; required unless the provider is 'sim'. "
    "For 'local': any name `conductor.model` accepts.",
    "workers.<i>.base_url": "Endpoint of an HTTP provider (an OpenAI-compatible server, a proxy).",
    "workers.<i>.temperature": "Sampling temperature of this worker (paper: 0.2).",
    "workers.<i>.max_tokens": "Most tokens this worker may write per step (paper: 4096).",
    "workers.<i>.reasoning_budget": "Reasoning-token budget sent with every request (null: the provider's default). "
    "The sim and local providers ignore it.",
    "workers.<i>.timeout_s": "Longest wait for one call; a step waits at most the smaller of this and "
    "`workflow.step_timeout_s`.",
    "workers.<i>.price.input": "USD per million fresh (uncached) input tokens.",
    "workers.<i>.price.output": "USD per million output tokens (reasoning tokens count as output).",
    "workers.<i>.price.cached_input": "USD per million cached input tokens.",
    "workers.<i>.sim.accuracy": "Probability of a correct answer per question domain ('math', 'mmlu', 'code'); "
    "the key 'default' covers other domains, else 0.5. With `hard_accuracy` set, this is the skill on the "
    "easiest questions (difficulty 0).",
    "workers.<i>.sim.gain_with_context": "Added to a solving step's chance when the step may read earlier steps "
    "(the sum is clipped to 0..1).",
    "workers.<i>.sim.output_tokens": "Mean simulated output tokens per call (drawn from 0.5x to 1.5x, "
    "at most `max_tokens`).",
    "data.limit": "Use only the first N questions (null: all).",
}

# A command for each shipped configuration file ({overrides} marks where the
# overrides go); the overrides are checked against the file when the reference
# is generated. Files not listed here get `conductor-rl config --config <file>`.
EXAMPLES: dict[str, tuple[str, list[str], str]] = {
    "local.yaml": (
        'conductor-rl ask "What is 17 * 23?" {overrides} --reference 391 --kind numeric',
        ["ask.temperature=0.7", "workers.2.sim.accuracy.default=0.9"],
        "`ask.temperature` is the Conductor's temperature in `ask` (this file sets 0.0: greedy). A question "
        "typed on the command line has the domain `default`, so a simulated worker answers it correctly with "
        "probability `accuracy.default` (0.5 where unset); the override adds that entry for Model 2.",
    ),
    "paper.yaml": (
        "conductor-rl config --config configs/paper.yaml {overrides}",
        ["workers.0.temperature=0.5", "data.questions=samples:math500"],
        "Prints the resolved configuration: GPT-5 at temperature 0.5, questions from the shipped MATH-500 sample.",
    ),
}

# Mistakes whose error messages the reference shows: (overrides, what it shows).
MISTAKES: list[tuple[list[str], str]] = [
    (["conductor.temprature=0.5"], "a typo in a key"),
    (["conductor.temperature=-1"], "a value out of range"),
    (["conductor.dtype=fp16"], "a value that is not one of the choices"),
    (["conductor.model=yes"], "YAML reads `yes` as a boolean"),
    (["learner.lr=true"], "true/false where a number is wanted (never read as 1 or 0)"),
    (["nonsense.key=1"], "a section that does not exist"),
    (["workers.3.temperature=0.5"], "a list index that does not exist (the default file has 3 workers)"),
]

# Rules that involve several keys (model validators), each with an override that breaks it.
RULES: list[tuple[str, list[str]]] = [
    (
        "`conductor.response_prefix` must be empty or a start of `model_id = [` when "
        "`conductor.constrain_format` is true.",
        ["conductor.response_prefix=Plan"],
    ),
    ("A worker with provider `sim` needs a `sim` section.", ["workers.0.sim=null"]),
    ("A worker with any other provider needs `model`.", ["workers.0.provider=openai"]),
    ("Worker names are unique.", ["workers.1.name=sim-math-expert"]),
    ("There is at least one worker.", ["workers=[]"]),
]


# --------------------------------------------------------------------------- #
# Reading the models
# --------------------------------------------------------------------------- #


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without None, whether None is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) == 1:
            return args[0], optional
        return typing.Union[tuple(args)], optional  # noqa: UP007 (a union of a runtime list of types)
    return annotation, False


def _model_of(annotation: Any) -> type[BaseModel] | None:
    inner, _ = _unwrap_optional(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _list_model_of(annotation: Any) -> type[BaseModel] | None:
    inner, _ = _unwrap_optional(annotation)
    if typing.get_origin(inner) is list:
        (item,) = typing.get_args(inner)
        return _model_of(item)
    return None


def type_name(annotation: Any) -> str:
    inner, optional = _unwrap_optional(annotation)
    origin = typing.get_origin(inner)
    if origin is typing.Literal:
        text = "one of " + ", ".join(f"`{v}`" for v in typing.get_args(inner))
    elif origin is list:
        text = f"list of {type_name(typing.get_args(inner)[0])}"
    elif origin is dict:
        key, value = typing.get_args(inner)
        text = f"mapping of {type_name(key)} to {type_name(value)}"
    elif origin in (typing.Union, types.UnionType):
        text = " or ".join(type_name(a) for a in typing.get_args(inner))
    elif isinstance(inner, type) and issubclass(inner, BaseModel):
        text = "section"
    elif isinstance(inner, type):
        text = inner.__name__
    else:
        text = str(inner)
    return f"{text} or null" if optional else text


def bounds(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            if isinstance(item, getattr(annotated_types, attr.capitalize())):
                parts.append(f"{sign} {_fmt_number(getattr(item, attr))}")
    return ", ".join(parts)


def _fmt_number(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def as_yaml(value: Any) -> str:
    """A value written as it would be in a YAML file or a `key=value` override."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, allow_unicode=True, sort_keys=False)
    if text.endswith("\n...\n"):
        text = text[: -len("\n...\n")]
    return text.strip()


def default_of(field: FieldInfo) -> Any:
    return field.get_default(call_default_factory=True)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def code(text: str) -> str:
    """Inline code that survives backticks inside."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def doc_of(model: type[BaseModel]) -> str:
    doc = model.__dict__.get("__doc__") or ""
    return " ".join(doc.split())


# --------------------------------------------------------------------------- #
# Writing the reference
# --------------------------------------------------------------------------- #


def field_rows(model: type[BaseModel], prefix: str) -> Iterator[str]:
    """Table rows for the scalar fields of `model` (sections are skipped)."""
    for name, field in model.model_fields.items():
        if _model_of(field.annotation) or _list_model_of(field.annotation):
            continue
        key = f"{prefix}{name}"
        kind = type_name(field.annotation)
        limits = bounds(field)
        if limits:
            kind += f", {limits}"
        if field.is_required():
            default = "*required*"
        else:
            default = code(as_yaml(default_of(field)))
        description = field.description or NOTES.get(key, "")
        yield f"| {code(key)} | {cell(kind)} | {cell(default)} | {cell(description)} |"


TABLE_HEAD = ["| key | type | default | description |", "|---|---|---|---|"]


def section(model: type[BaseModel], prefix: str, level: int, title: str, intro: list[str]) -> list[str]:
    out = [f"{'#' * level} {title}", ""]
    if doc_of(model):
        out += [doc_of(model), ""]
    out += intro
    rows = list(field_rows(model, prefix))
    if rows:
        out += TABLE_HEAD + rows + [""]
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        nested = _model_of(field.annotation)
        items = _list_model_of(field.annotation)
        if nested is not None:
            note = []
            _, optional = _unwrap_optional(field.annotation)
            if optional:
                note = [
                    f"Optional section (default: `{as_yaml(default_of(field))}`)."
                    + (f" {field.description}" if field.description else ""),
                    "",
                ]
            elif field.description:
                note = [field.description, ""]
            out += section(nested, f"{key}.", level + 1, f"`{key}`", note)
        elif items is not None:
            out += list_section(field, items, key, level + 1)
    return out


def list_section(field: FieldInfo, items: type[BaseModel], key: str, level: int) -> list[str]:
    default = default_of(field)
    intro = [
        f"A list: `{key}.0`, `{key}.1`, ... address its entries in overrides. "
        f"A file that sets `{key}` replaces the whole list.",
        "",
    ]
    if default:
        intro += [
            f"Default ({len(default)} entries; the paper's roster, §4.1); "
            "columns show the keys an entry sets, other keys keep the defaults below:",
            "",
        ]
        intro += roster_table(default) + [""]
    return section(items, f"{key}.<i>.", level, f"`{key}`", intro)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def roster_table(workers: list[BaseModel]) -> list[str]:
    dumps = [_flatten(w.model_dump(mode="json", exclude_defaults=True)) for w in workers]
    order = list(_flatten(workers[0].model_dump(mode="json")))  # declaration order
    # Keys the first worker lacks (a later one's `serve.*`) follow in the order they first appear:
    # never a set's order, which changes with the hash seed.
    seen = list(dict.fromkeys(k for d in dumps for k in d))
    columns = sorted(seen, key=lambda k: (order.index(k), 0) if k in order else (len(order), seen.index(k)))
    lines = ["| Model | " + " | ".join(code(c) for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for i, d in enumerate(dumps):
        values = [cell(code(as_yaml(d[c]))) if c in d else "" for c in columns]
        lines.append(f"| {i} | " + " | ".join(values) + " |")
    return lines


def error_of(overrides: list[str], path: Path | None = None) -> str:
    """The ConfigError message that `load_config` gives for these overrides."""
    try:
        load_config(path, overrides)
    except ConfigError as err:
        return str(err)
    raise RuntimeError(f"{overrides} no longer fails: update scripts/config_reference.py")


def config_files() -> list[Path]:
    files = sorted(CONFIG_DIR.glob("*.yaml"))
    return sorted(files, key=lambda p: p.name != cfg.DEFAULT_CONFIG)  # the embedded default first


def leading_comment(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return lines


def provider_availability() -> tuple[list[str], list[str]]:
    """(providers `build_provider` makes in this version, those it refuses)."""
    from conductor_rl.workers.providers import (
        OFFLINE_PROVIDERS,
        MissingApiKeyError,
        ProviderUnavailableError,
        build_provider,
    )

    literal, _ = _unwrap_optional(cfg.WorkerConfig.model_fields["provider"].annotation)
    available, missing = [], []
    for name in typing.get_args(literal):
        if name in OFFLINE_PROVIDERS:
            available.append(name)
            continue
        probe = cfg.WorkerConfig(name="probe", provider=name, model="probe", api_key_env="CONDUCTOR_RL_NO_SUCH_KEY")
        try:
            build_provider(probe)
        except MissingApiKeyError:  # built, once its key is set
            available.append(name)
        except ProviderUnavailableError:
            missing.append(name)
        except Exception:  # noqa: BLE001 - it exists, it just wants real settings
            available.append(name)
        else:
            available.append(name)
    return available, missing


def file_examples() -> list[str]:
    available, _missing = provider_availability()
    defaults = _flatten({k: v for k, v in Config().model_dump(mode="json").items() if k != "workers"})
    out = ["## Shipped configurations", ""]
    for path in config_files():
        rel = path.relative_to(REPO).as_posix()
        config = load_config(path)
        out += [f"### `{rel}`" + (" (the embedded default)" if path.name == cfg.DEFAULT_CONFIG else ""), ""]
        comment = leading_comment(path)
        if comment:
            out += ["> " + " ".join(comment), ""]
        ours = _flatten({k: v for k, v in config.model_dump(mode="json").items() if k != "workers"})
        changed = [k for k in ours if ours[k] != defaults.get(k)]
        if changed:
            out += ["Differs from the defaults in:", "", "| key | this file | default |", "|---|---|---|"]
            out += [
                f"| {code(k)} | {cell(code(as_yaml(ours[k])))} | {cell(code(as_yaml(defaults.get(k))))} |"
                for k in changed
            ]
            out += [""]
        else:
            out += ["Apart from its workers, it keeps every default.", ""]
        out += ["Workers:", ""]
        for i, w in enumerate(config.workers):
            model = f", model `{w.model}`" if w.model else ""
            out.append(f"- Model {i}: `{w.name}` (provider `{w.provider}`{model})")
        out += [""]
        unavailable = sorted({w.provider for w in config.workers if w.provider not in available})
        fallback = (f"conductor-rl config --config {rel} {{overrides}}", [], "")
        command, overrides, note = EXAMPLES.get(path.name, fallback)
        load_config(path, overrides)  # the example must be valid
        if "--config" not in command and path.name != cfg.DEFAULT_CONFIG:
            raise RuntimeError(f"the example for {rel} must pass --config {rel}")
        out += ["```sh", " ".join(command.replace("{overrides}", " ".join(overrides)).split()), "```", ""]
        if note:
            out += [note, ""]
        if unavailable:
            out += [
                f"Providers {', '.join(f'`{p}`' for p in unavailable)} are not available in this version "
                "(`build_provider` refuses them), so jobs that run workers stop at start with this file; "
                "`conductor-rl config` shows the resolved configuration.",
                "",
            ]
    return out


def intro() -> list[str]:
    available, missing = provider_availability()
    sections = ", ".join(f"`{k}`" for k in Config.model_fields)
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/config_reference.py from conductor_rl/config/: do not edit by hand. -->",
        "",
        "Generated from the pydantic models in `conductor_rl/config/` by `python scripts/config_reference.py`;",
        "`python scripts/config_reference.py --check` (run by `tests/test_docs.py`) "
        "fails when this file is out of date.",
        "",
        "## How a configuration is read",
        "",
        "- Every command takes `--config FILE` (YAML). "
        f"Without it, the embedded `configs/{cfg.DEFAULT_CONFIG}` is read.",
        f"- The top-level sections are {sections}. A key that a file leaves out takes the default listed below;",
        "  the defaults are the paper's setting (arXiv 2512.04388), the shipped files change some of them.",
        "- Overrides come after the file, as `key.sub=value`: either bare arguments (`conductor-rl ask",
        "  conductor.temperature=0.7`; an argument counts as an override when the part before the first `=` is a",
        "  dotted key without spaces, or a section's name; a dotted key of an unknown section is an error that names",
        "  it, never a question for `ask`) or `--set key.sub=value`. Bare overrides go with the positional arguments,",
        "  before any option such as `--reference`; after an option, use `--set`. Overrides apply in order, bare",
        "  ones first, then `--set` ones; the last one for a key wins.",
        "- List entries are addressed by index: `workers.0.temperature=0.5`. The index must exist; to change the",
        "  number of entries, give the whole list (in a file, or as a YAML value: `workers=[{...}, {...}]`).",
        "- An override of a section that the file leaves out applies on top of that section's defaults",
        "  (`workers.0.temperature=0.5` with a file that has no `workers` changes the paper's first worker).",
        "- A value is read as YAML (`yaml.safe_load`): `3` is an int, `0.5` a float, `true`/`false` booleans,",
        "  `null` is none, `[1, 2]` a list, `{math: 0.9}` a mapping, nothing after `=` the empty string, and",
        "  anything else a string. YAML 1.1 also reads `yes`, `no`, `on` and `off` as booleans: quote them",
        "  (`'key=\"on\"'`) to mean the string. Setting a mapping replaces it (`workers.0.sim.accuracy={math: 0.9}`",
        "  drops the other domains); a dotted key changes one entry (`workers.0.sim.accuracy.math=0.9`).",
        "- Every section forbids unknown keys, and every value is checked, when the configuration is loaded: a",
        "  mistake stops the command at start with a message that names the dotted key (and, for an unknown key,",
        "  the keys allowed there). `conductor-rl config [--config FILE] [key=value ...]` prints the resolved",
        "  configuration as YAML.",
        "- Providers that `conductor_rl.workers.providers.build_provider` makes in this version: "
        + ", ".join(f"`{p}`" for p in available)
        + (
            "; the others (" + ", ".join(f"`{p}`" for p in missing) + ") pass validation but are refused when "
            "a job builds its workers."
            if missing
            else "."
        ),
        "",
        "## What a mistake looks like",
        "",
        "Messages as `load_config` gives them (with the embedded default file):",
        "",
    ]
    for overrides, what in MISTAKES:
        out += [f"{what[0].upper()}{what[1:]}, `{' '.join(overrides)}`:", "", "```text", error_of(overrides), "```", ""]
    out += ["Rules that involve several keys (each shown with an override that breaks it):", ""]
    for rule, overrides in RULES:
        message = error_of(overrides).replace("invalid configuration:\n", "").strip()
        out += [f"- {rule} `{' '.join(overrides)}` gives: {code(message)}"]
    out += [""]
    return out


def generate() -> str:
    lines = intro()
    lines += ["## Keys", ""]
    for name, field in Config.model_fields.items():
        nested, items = _model_of(field.annotation), _list_model_of(field.annotation)
        if nested is not None:
            lines += section(nested, f"{name}.", 3, f"`{name}`", [field.description, ""] if field.description else [])
        elif items is not None:
            lines += list_section(field, items, name, 3)
        else:
            lines += TABLE_HEAD + list(field_rows(Config, "")) + [""]
    lines += file_examples()
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is out of date")
    mode.add_argument("--stdout", action="store_true", help="print the reference instead of writing it")
    args = parser.parse_args(argv)
    text = generate()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    rel = OUTPUT.relative_to(REPO).as_posix() if OUTPUT.is_relative_to(REPO) else str(OUTPUT)
    if args.check:
        current = OUTPUT.read_text() if OUTPUT.is_file() else ""
        if current == text:
            print(f"{rel} is up to date")
            return 0
        diff = list(
            difflib.unified_diff(
                current.splitlines(), text.splitlines(), f"{rel} (on disk)", f"{rel} (generated)", lineterm="", n=1
            )
        )
        print(f"{rel} is out of date: run `python scripts/config_reference.py` and commit the result.")
        print("\n".join(diff[:60]) + (f"\n... ({len(diff) - 60} more diff lines)" if len(diff) > 60 else ""))
        return 1
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {rel} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
