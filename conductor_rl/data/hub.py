"""``hf:`` specs: datasets from the Hugging Face Hub, when the optional `datasets`
library is installed and the Hub is reachable; rows are recognised by their schema
and converted with the same converters as the local files."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .bigcodebench import bigcodebench_question
from .files import check_limit, collect_questions
from .gpqa import gpqa_question
from .humaneval import humaneval_question
from .livecodebench import lcb_question
from .math import aime_question, gsm8k_question, math_question
from .mmlu import mmlu_fields, mmlu_question
from .question import Question
from .rlpr import rlpr_question
from .specs import DATASET_SPEC_FORMS

# Hub configurations used when an hf: spec names none.
_HF_DEFAULT_CONFIGS = MappingProxyType(
    {"gsm8k": "main", "openai/gsm8k": "main", "cais/mmlu": "all", "hendrycks_test": "all"}
)


class HubUnavailableError(RuntimeError):
    """An ``hf:`` spec could not be served (no `datasets` library, or no Hub access)."""


def questions_from_hf_rows(
    rows: Iterable[Mapping[str, Any]], name: str, split: str, limit: int | None = None
) -> list[Question]:
    """Convert rows of a Hub dataset to Questions, recognising the schema by its fields.

    Known schemas: GSM8K (question, answer with ####), MATH / MATH-500 (problem,
    solution[, answer]), MMLU (question, subject, choices, answer), HumanEval
    (task_id, prompt, canonical_solution, test, entry_point), AIME-like (problem,
    integer answer, no solution), LiveCodeBench (question_content,
    public_test_cases, ...; every release window), BigCodeBench (complete_prompt,
    code_prompt, test, ...; as its "complete" split), GPQA (Question, Correct
    Answer, Incorrect Answer 1..3, Record ID) and RLPR (prompt, reward_model).
    Rows of one schema only.
    """
    limit = check_limit(limit)
    lowered = name.lower()
    math_source = "math500" if ("math-500" in lowered or "math500" in lowered) else "math"
    counts: dict[str, int] = {}

    def convert(row: Mapping[str, Any], i: int) -> Question | None:
        if not isinstance(row, Mapping):
            raise ValueError(f"expected a mapping row, got {type(row).__name__}")
        keys = set(row)
        if {"question_content", "public_test_cases", "private_test_cases"} <= keys:
            return lcb_question(row)
        if {"complete_prompt", "code_prompt", "test", "entry_point"} <= keys:
            return bigcodebench_question(row, "complete")
        if {"Question", "Correct Answer", "Incorrect Answer 1"} <= keys:
            return gpqa_question(row)
        if {"prompt", "reward_model"} <= keys:
            return rlpr_question(row, split, i)
        if {"task_id", "prompt", "canonical_solution", "test", "entry_point"} <= keys:
            return humaneval_question(row)
        if "choices" in keys or "answer_a" in keys:
            subject, question, choices, letter = mmlu_fields(row)
            index = counts.get(subject, 0)
            counts[subject] = index + 1
            return mmlu_question(subject, question, choices, letter, split, index)
        if "problem" in keys and "solution" in keys:
            return math_question(row, math_source, split, i)
        if "problem" in keys and "answer" in keys:
            return aime_question(row, "aime", i)
        if {"question", "answer"} <= keys:
            return gsm8k_question(row, split, i)
        raise ValueError(f"unrecognised row schema with fields {sorted(keys)}")

    return collect_questions(Path(f"hf:{name}:{split}"), ((i + 1, row) for i, row in enumerate(rows)), convert, limit)


def load_hf(name: str, split: str = "test", config: str | None = None, limit: int | None = None) -> list[Question]:
    """Load a dataset from the Hugging Face Hub with the `datasets` library, if installed.

    Raises HubUnavailableError when `datasets` is missing or the Hub cannot serve it.
    """
    if importlib.util.find_spec("datasets") is None:
        raise HubUnavailableError(
            f"hf:{name} needs the `datasets` library, which is not installed (`pip install datasets`; "
            "scripts/setup.sh installs it), and access to the Hugging Face Hub. Offline, use the local specs instead: "
            + "; ".join(DATASET_SPEC_FORMS[:-1])
        )
    import datasets  # noqa: PLC0415 - heavy: only for hf: specs

    if config is None:
        config = _HF_DEFAULT_CONFIGS.get(name)
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - the hub raises many kinds; say what failed
        raise HubUnavailableError(
            f"could not load hf:{name}" + (f"@{config}" if config else "") + f":{split} from the Hugging Face Hub "
            f"({type(exc).__name__}: {exc}). Is the Hub reachable (and HF_HUB_OFFLINE unset), or the dataset cached? "
            "Offline, use the local specs (samples:, gsm8k:, math:, math500, mmlu:, humaneval, livecodebench:, "
            "bigcodebench:, gpqa:, rlpr:, <benchmark>@<path>, jsonl:)."
        ) from exc
    return questions_from_hf_rows(ds, f"{name}" + (f"@{config}" if config else ""), split, limit)
