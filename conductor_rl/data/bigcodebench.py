"""BigCodeBench: function-level tasks that call many libraries, graded by unittest
(``bigcode/bigcodebench`` on the Hub; one split per release, e.g. ``v0.1.4``).

A row has ``task_id``, ``complete_prompt`` (imports, signature and docstring),
``instruct_prompt`` (the same task in prose), ``canonical_solution`` (the body),
``code_prompt`` (imports and signature), ``test`` (a ``unittest`` module),
``entry_point``, ``doc_struct`` and ``libs``. Its two splits differ only in the
question: ``"complete"`` shows ``complete_prompt``, ``"instruct"``
``instruct_prompt``. Both are ``code_unittest`` questions whose ``meta`` has the
``test``, the ``entry_point`` and, as the grader's ``prompt``, ``complete_prompt``:
the grader puts it before an answer, which may be a whole function or only its
body. (``code_prompt``, also in ``meta``, would not do: its signature has no body,
so an answer that defines the whole function would follow a syntax error.) The
reference is ``code_prompt`` + ``canonical_solution``.

Many tasks import third-party libraries (pandas, numpy, matplotlib, ...): an
answer to one of those can only pass where the sandbox's interpreter has them.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from typing import Any

from .files import check_limit, check_split, collect_questions, iter_rows, resolve_benchmark_file, str_field
from .question import Question

HUB_NAME = "bigcode/bigcodebench"
#: The release read by default (the Hub's latest split when this was written).
DEFAULT_VERSION = "v0.1.4"
SPLITS = ("complete", "instruct")


def _libs(value: Any) -> list[str]:
    # Upstream stores the list as its Python repr ("['random', 'itertools']").
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value) if value.strip() else []
        except (SyntaxError, ValueError):
            raise ValueError(f"field 'libs' must be a list of module names, got {value[:100]!r}") from None
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"field 'libs' must be a list of module names, got {value!r}"[:200])
    return list(value)


def bigcodebench_question(row: Mapping[str, Any], split: str = "complete") -> Question:
    """A BigCodeBench row as a Question of `split` ``"complete"`` or ``"instruct"``."""
    check_split(split, SPLITS, "bigcodebench")
    task_id = str_field(row, "task_id")
    code_prompt = str_field(row, "code_prompt")
    solution = str_field(row, "canonical_solution", empty_ok=True)
    complete_prompt = str_field(row, "complete_prompt")
    if split == "complete":
        text = "Complete the following Python function:\n\n```python\n" + complete_prompt.rstrip() + "\n```"
    else:
        text = str_field(row, "instruct_prompt").strip()
    return Question(
        id=f"bigcodebench/{task_id}" if split == "complete" else f"bigcodebench/instruct/{task_id}",
        domain="code",
        question=text,
        reference=code_prompt + solution,
        answer_kind="code_unittest",
        source="bigcodebench",
        meta={
            "task_id": task_id,
            "split": split,
            "entry_point": str_field(row, "entry_point"),
            "prompt": complete_prompt,
            "code_prompt": code_prompt,
            "test": str_field(row, "test"),
            "libs": _libs(row.get("libs")),
        },
    )


def load_bigcodebench(
    split: str = "complete",
    path: str | os.PathLike | None = None,
    version: str = DEFAULT_VERSION,
    limit: int | None = None,
) -> list[Question]:
    """BigCodeBench (1,140 tasks) as `split` ``"complete"`` or ``"instruct"``.

    `path`: an upstream file (Parquet or JSONL) or a directory holding
    ``bigcodebench/<version>.parquet`` (or ``.jsonl``, or the Hub's
    ``<version>-00000-of-00001.parquet``); default: the shared data directory.
    Ids ``bigcodebench/<task_id>`` (complete) and ``bigcodebench/instruct/<task_id>``.
    """
    limit = check_limit(limit)
    check_split(split, SPLITS, "bigcodebench")
    candidates = tuple(
        f"bigcodebench/{version}{suffix}" for suffix in (".parquet", ".jsonl", ".jsonl.gz", "-00000-of-00001.parquet")
    )
    file = resolve_benchmark_file("bigcodebench", candidates, path, f"{HUB_NAME}:{version}")
    return collect_questions(file, iter_rows(file), lambda row, _i: bigcodebench_question(row, split), limit)
