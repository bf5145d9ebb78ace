"""The methods `conductor-rl evaluate` compares, by name.

=========================  ===================================================
name                       what answers a question
=========================  ===================================================
``conductor:<path>``       a trained Conductor: a run folder, a checkpoint
                           folder or a Hugging Face model folder
``conductor:untrained``    the configured base model with its few-shot prompt
``conductor:<...>@depth=N`` either, recursive up to depth N: a plan may give a
                           step to the Conductor's seat, below N (needs a
                           ``provider: conductor`` worker when N >= 1)
``single:<worker>``        one worker, asked the question
``reflect:<worker>[:<n>]`` one worker's answer, then n rounds of critique
                           and revision of it (n + 1 calls; default 5: the
                           paper's "5x self-reflection")
``moa``                    Mixture-of-Agents (`baselines.moa_plan`)
``router``                 the worker with the best predicted success less
                           cost (`router`)
``random``                 a random valid plan (`baselines.random_plan`)
``oracle``                 the best single worker per question, from its
                           single-worker runs: an upper bound of routing
``oracle-single``          the single worker with the highest expected
                           success per question (exact in a simulated pool,
                           else as ``oracle``): an upper bound of any router
``optimal``                the exact best plan per question (`optimal`; a
                           simulated pool only): an upper bound of any plan
=========================  ===================================================

Decisions:

- Worker names are matched whole before anything is split off, so a worker
  named ``qwen3:32b`` works in ``single:qwen3:32b`` and ``reflect:qwen3:32b:3``.
- ``reflect:<worker>`` is stored as ``reflect:<worker>:5``: both spellings are
  one method, so a resumed evaluation finds the records of either.
- "5x self-reflection" is read as five reflections on an answer: the answer, then
  five critique-and-revise rounds, six calls. Rounds run from 1 to `MAX_ROUNDS`: a
  typo such as ``reflect:gpt-5:50`` should not spend fifty calls per question.
- ``conductor:<path>`` keeps the path as written in its name (the row label)
  and resolves the model folder at once, so a wrong path fails before any call.
- ``@depth=N`` (0 to `MAX_DEPTH`) sets the Conductor's maximum recursion depth: a
  limit, not a number of calls. Below it the Conductor recurses only where its plan
  gives a step to its own seat, and each call writes a new plan or three empty lists
  (conductor_rl/rollout/recursion.py); N >= 1 on a pool without a seat is refused
  before the run (prepare.py); ``@depth=0`` is the plain Conductor under another
  row label (a step given to the seat keeps the answer).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from conductor_rl.config import EvaluateConfig
from conductor_rl.run.checkpoint import PREFIX, Checkpoints

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_ROUNDS",
    "KINDS",
    "MAX_ROUNDS",
    "UPPER_BOUNDS",
    "Method",
    "MethodError",
    "default_methods",
    "expand_methods",
    "parse_method",
    "parse_methods",
    "resolve_checkpoint",
]

Kind = Literal["conductor", "single", "reflect", "moa", "router", "random", "oracle", "oracle-single", "optimal"]
KINDS: tuple[str, ...] = (
    "conductor",
    "single",
    "reflect",
    "moa",
    "router",
    "random",
    "oracle",
    "oracle-single",
    "optimal",
)
DEFAULT_ROUNDS = 5  # the paper's "GPT-5 with 5x self-reflection" (Table 7)
MAX_ROUNDS = 20
MAX_DEPTH = 8  # conductor.max_depth's own limit
UNTRAINED = "untrained"
# The rows of the paper's comparison (Table 7), one per worker where a worker is named: evaluate.methods' default.
DEFAULT_METHODS: tuple[str, ...] = tuple(EvaluateConfig().methods)
_NO_ARGUMENT = ("moa", "router", "random", "oracle", "oracle-single", "optimal")
_ALLOWED = (
    "conductor:<checkpoint or run folder>[@depth=N], conductor:untrained, single:<worker>, "
    "reflect:<worker>[:<rounds>], moa, router, random, oracle, oracle-single, optimal"
)
#: Methods that pick with knowledge no method has (the questions' outcomes or the simulator's rules).
UPPER_BOUNDS: tuple[str, ...] = ("oracle", "oracle-single", "optimal")
_WEIGHTS = ("*.safetensors", "*.bin")


class MethodError(ValueError):
    """A method name (or a Conductor checkpoint path) that cannot be used; the message says what is allowed."""


@dataclass(frozen=True)
class Method:
    """One evaluated method. `worker` indexes the configured workers (single, reflect);
    `rounds` is the reflection's critique-and-revise rounds (rounds + 1 calls); `checkpoint` is the Conductor's
    model folder (None for every other kind and for ``conductor:untrained``)."""

    name: str
    kind: Kind
    worker: int | None = None
    rounds: int | None = None
    checkpoint: Path | None = None
    depth: int | None = None  # conductor:<...>@depth=N (None: the checkpoint's own conductor.max_depth)

    @property
    def is_conductor(self) -> bool:
        return self.kind == "conductor"


def _worker_index(name: str, value: str, worker_names: Sequence[str]) -> int:
    if value in worker_names:
        return list(worker_names).index(value)
    raise MethodError(f"method {name!r}: unknown worker {value!r}; the workers are {', '.join(worker_names)}")


def _reflect(name: str, rest: str, worker_names: Sequence[str]) -> Method:
    worker, rounds_text = rest, str(DEFAULT_ROUNDS)
    if rest not in worker_names and ":" in rest:
        worker, rounds_text = rest.rsplit(":", 1)
    index = _worker_index(name, worker, worker_names)
    if not re.fullmatch(r"\d+", rounds_text) or not 1 <= int(rounds_text) <= MAX_ROUNDS:
        raise MethodError(
            f"method {name!r}: rounds must be a whole number from 1 to {MAX_ROUNDS}, "
            f"got {rounds_text!r} (write reflect:<worker>:<rounds>)"
        )
    rounds = int(rounds_text)
    return Method(f"reflect:{worker}:{rounds}", "reflect", worker=index, rounds=rounds)


def _every_worker(kind: str, rest: str) -> bool:
    return kind in ("single", "reflect") and (rest == "*" or rest.startswith("*:"))


def parse_method(name: str, worker_names: Sequence[str]) -> Method:
    """The method a name stands for (see the module's table); raises MethodError
    with one line naming the value and what is allowed."""
    text = name.strip()
    kind, sep, rest = text.partition(":")
    if kind in _NO_ARGUMENT and not sep:
        return Method(kind, kind)  # type: ignore[arg-type]
    if _every_worker(kind, rest):
        raise MethodError(f"method {name!r}: '*' (every worker) must be written out by expand_methods first")
    if kind == "single" and rest:
        return Method(text, "single", worker=_worker_index(text, rest, worker_names))
    if kind == "reflect" and rest:
        return _reflect(text, rest, worker_names)
    if kind == "conductor" and rest:
        rest, depth = _depth(text, rest)
        if rest == UNTRAINED:
            return Method(text, "conductor", depth=depth)
        return Method(text, "conductor", checkpoint=resolve_checkpoint(rest), depth=depth)
    if kind in _NO_ARGUMENT:
        raise MethodError(f"method {name!r}: {kind} takes no argument; write just {kind!r}")
    raise MethodError(f"unknown method {name!r}; allowed: {_ALLOWED}")


def _depth(name: str, rest: str) -> tuple[str, int | None]:
    """Split ``<checkpoint>@depth=N`` into the checkpoint and N."""
    if "@" not in rest:
        return rest, None
    rest, _, option = rest.rpartition("@")
    match = re.fullmatch(r"depth=(\d+)", option)
    if not match or int(match.group(1)) > MAX_DEPTH:
        raise MethodError(
            f"method {name!r}: after '@' write depth=N with N from 0 to {MAX_DEPTH} "
            f"(conductor:<checkpoint>@depth=2), got {option!r}"
        )
    return rest, int(match.group(1))


def expand_methods(names: Sequence[str], worker_names: Sequence[str]) -> list[str]:
    """`names` with ``single:*`` and ``reflect:*[:<rounds>]`` written out once per
    worker (in the workers' order); repeats are dropped, the first order kept."""
    out: list[str] = []
    for name in names:
        text = name.strip()
        kind, _, rest = text.partition(":")
        if _every_worker(kind, rest):
            out.extend(f"{kind}:{worker}{rest[1:]}" for worker in worker_names)
        else:
            out.append(text)
    return list(dict.fromkeys(out))


def parse_methods(
    names: Sequence[str], worker_names: Sequence[str], every: Sequence[str] | None = None
) -> list[Method]:
    """Expand (a '*' over `every`, default all of `worker_names`), then parse every name; two
    spellings of one method count once."""
    methods: dict[str, Method] = {}
    for name in expand_methods(names, worker_names if every is None else every):
        method = parse_method(name, worker_names)
        methods.setdefault(method.name, method)
    return list(methods.values())


def default_methods(worker_names: Sequence[str], checkpoint: str | None = None) -> list[str]:
    """The paper's comparison for a pool of workers: `DEFAULT_METHODS` expanded, with
    ``conductor:<checkpoint>`` first when a trained Conductor is given."""
    names = ([f"conductor:{checkpoint}"] if checkpoint else []) + list(DEFAULT_METHODS)
    return expand_methods(names, worker_names)


# --------------------------------------------------------------------------- checkpoints


def _is_model_folder(folder: Path) -> bool:
    if not folder.is_dir():
        return False
    if any(folder.glob("*.gguf")):
        return True
    return (folder / "config.json").is_file() and any(p for pattern in _WEIGHTS for p in folder.glob(pattern))


def resolve_checkpoint(path: str | Path) -> Path:
    """The model folder a Conductor checkpoint path names:

    - a run folder (``<run>/checkpoints/ckpt-NNNNNN/``): its newest complete checkpoint's ``model/``;
    - a checkpoints folder or one checkpoint folder: the newest one's / its ``model/``;
    - a Hugging Face model folder (``config.json`` and ``*.safetensors`` or ``*.bin``
      weights, or a ``*.gguf`` file): itself.
    """
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise MethodError(
            f"conductor checkpoint {str(path)!r} is not a folder: pass a run folder, a checkpoint "
            f"folder or a model folder (config.json with *.safetensors or *.bin weights, or a *.gguf)"
        )
    candidates = [folder, folder / "model"]
    for checkpoints in (folder / "checkpoints", folder):
        latest = Checkpoints(checkpoints).latest()
        if latest is not None:
            candidates.append(latest / "model")
    for candidate in candidates:
        if _is_model_folder(candidate):
            return candidate.resolve()
    # A run killed during its first save has checkpoint folders but no complete one.
    partial = any(p.name.startswith(PREFIX) for p in (*folder.glob("checkpoints/*"), *folder.glob("*")))
    hint = " (its checkpoints are incomplete: no state.json)" if partial else ""
    raise MethodError(
        f"conductor checkpoint {str(path)!r} holds no model{hint}: a model folder needs config.json "
        f"with *.safetensors or *.bin weights (or a *.gguf); a run folder needs "
        f"checkpoints/{PREFIX}NNNNNN/model"
    )
