"""RLPR: general-domain reasoning questions with free-form reference answers, from
RLPR's Parquet files (``openbmb/RLPR-Train-Dataset``'s ``rlpr_train.parquet``, and
the files of ``openbmb/RLPR-Evaluation``).

Their rows are in verl's RL format: ``prompt`` (chat messages, a system prompt
with RLPR's answer-format instruction, then the user's question),
``reward_model`` (``{"ground_truth": ..., "style": ...}``), ``data_source``,
``ability`` and ``extra_info``. This schema is read from the datasets' published
files and from code that uses them, not from a specification: the loader needs
only ``prompt`` (messages, or a plain string) and ``reward_model.ground_truth``
(a string, or a list of strings: the first is the reference, all are kept in
``meta["answers"]``), and keeps the others in ``meta`` when present. The question
is the last user message; RLPR's system prompt is kept in ``meta["system_prompt"]``
(the workflow's prompts say how to answer).

Splits: ``"train"`` is ``rlpr_train.parquet``; ``"test"`` is our choice of
RLPR-Evaluation's ``WebInstruct-verified-val_Avg2.parquet``, the held-out part of
the source the training set comes from (the other evaluation files are MMLU-Pro,
GPQA, MATH-500, ... which this project loads on their own; any of them loads
with ``rlpr:test@<file>``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .files import check_limit, check_split, collect_questions, iter_rows, resolve_benchmark_file
from .question import Question

SPLITS = ("train", "test")
HUB_NAMES = MappingProxyType({"train": "openbmb/RLPR-Train-Dataset:train", "test": "openbmb/RLPR-Evaluation"})
_DEFAULT_FILES = MappingProxyType(
    {
        "train": ("rlpr/train.parquet", "rlpr/rlpr_train.parquet", "rlpr/train.jsonl"),
        "test": ("rlpr/test.parquet", "rlpr/WebInstruct-verified-val_Avg2.parquet", "rlpr/test.jsonl"),
    }
)


def _question_text(prompt: Any) -> tuple[str, str | None]:
    """(the user's question, the system prompt or None) from a chat prompt or a string."""
    text: Any
    if isinstance(prompt, str):
        text, system = prompt, None
    elif isinstance(prompt, (list, tuple)) and all(isinstance(m, Mapping) for m in prompt):
        users = [m.get("content") for m in prompt if m.get("role") == "user"]
        systems = [m.get("content") for m in prompt if m.get("role") == "system"]
        text = users[-1] if users else None
        system = systems[0] if systems and isinstance(systems[0], str) else None
    else:
        raise ValueError(f"field 'prompt' must be a list of chat messages or a string, got {type(prompt).__name__}")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("field 'prompt' has no non-empty user message")
    return text.strip(), system


def _answers(reward_model: Any) -> list[str]:
    if not isinstance(reward_model, Mapping) or "ground_truth" not in reward_model:
        raise ValueError("field 'reward_model' must be an object with a 'ground_truth'")
    truth = reward_model["ground_truth"]
    answers = [truth] if isinstance(truth, (str, int, float)) and not isinstance(truth, bool) else truth
    if not isinstance(answers, (list, tuple)) or not answers:
        raise ValueError(f"reward_model.ground_truth must be a string or a list of strings, got {truth!r}"[:200])
    texts = [str(a).strip() for a in answers if isinstance(a, (str, int, float)) and not isinstance(a, bool)]
    if not texts or not texts[0]:
        raise ValueError(f"reward_model.ground_truth is empty or not text: {truth!r}"[:200])
    return texts


def rlpr_question(row: Mapping[str, Any], split: str, index: int) -> Question:
    """An RLPR row as a ``freeform`` Question; `index` is its position in the file."""
    text, system = _question_text(row["prompt"])
    answers = _answers(row["reward_model"])
    meta: dict[str, Any] = {"split": split, "index": index}
    for key in ("data_source", "ability"):
        if isinstance(row.get(key), str):
            meta[key] = row[key]
    if len(answers) > 1:
        meta["answers"] = answers
    if system is not None:
        meta["system_prompt"] = system
    return Question(
        id=f"rlpr/{split}/{index}",
        domain="reasoning",
        question=text,
        reference=answers[0],
        answer_kind="freeform",
        source="rlpr",
        meta=meta,
    )


def load_rlpr(split: str = "test", path: str | os.PathLike | None = None, limit: int | None = None) -> list[Question]:
    """RLPR's `split` (``"train"`` or ``"test"``, see the module docstring).

    `path`: an RLPR Parquet (or JSONL) file or a directory holding
    ``rlpr/<split>.parquet``; default: the shared data directory. Ids
    ``rlpr/<split>/<row index>``; domain ``reasoning``; answer_kind ``freeform``.
    """
    limit = check_limit(limit)
    check_split(split, SPLITS, "rlpr")
    file = resolve_benchmark_file("rlpr", _DEFAULT_FILES[split], path, HUB_NAMES[split])
    return collect_questions(file, iter_rows(file), lambda row, i: rlpr_question(row, split, i), limit)
