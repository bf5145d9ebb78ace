"""Mathematics sources: GSM8K, MATH, MATH-500 and AIME, from the shared data directory.

Each source has a row converter (shared with the ``hf:`` adapter) and a loader.
A reference answer comes from the row's answer field, or from its solution: the
number after GSM8K's ``####``, the final ``\\boxed{}`` of a MATH solution (read
by `conductor_rl.data.boxed.last_boxed`, the graders' parser too).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .boxed import last_boxed
from .files import check_limit, check_split, collect_questions, iter_jsonl, resolve_data_file, str_field
from .question import Question

# Upstream MATH rows whose solution ends in an empty \boxed{} (the answer was lost).
# Both are multiple-choice problems whose solutions argue the answer is (A) 0.
_MATH_ERRATA = MappingProxyType({"train/number_theory/7115.json": "0", "train/number_theory/7117.json": "0"})


def extract_boxed(text: str) -> str | None:
    """The answer a solution states: the content of its last ``\\boxed{...}`` (or ``\\fbox{...}``).

    Braces nest, and a backslash escapes the next character (``\\{`` and ``\\}``
    do not count). The brace-less form ``\\boxed 5`` gives the token after the
    space. None if there is no box, or if the last one does not close (an earlier
    box is a step of the solution, not its answer); the content is stripped of
    surrounding whitespace.
    """
    if not text:
        return None
    return last_boxed(text, skip_unclosed=False)


_GSM8K_NUMBER = re.compile(r"(-)?\s*\$?\s*(-)?\s*(\d[\d,]*(?:\.\d+)?|\.\d+)")


def extract_gsm8k_answer(text: str) -> str | None:
    """The final number of a GSM8K solution: the first number after the last ``####``.

    Thousands separators are removed (``"1,080"`` -> ``"1080"``), a minus sign is
    kept (``"-3"``, ``"-$3"``, ``"$-3"``), a dollar sign is dropped. None if there
    is no ``####`` or no number after it.
    """
    if not text or "####" not in text:
        return None
    tail = text.rsplit("####", 1)[1]
    m = _GSM8K_NUMBER.search(tail)
    if not m:
        return None
    sign = "-" if (m.group(1) or m.group(2)) else ""
    number = m.group(3).replace(",", "")
    if number.startswith("."):
        number = "0" + number
    return sign + number


def gsm8k_question(row: Mapping[str, Any], split: str, index: int) -> Question:
    """A GSM8K row (``question``, ``answer`` with ``#### <n>``) as a Question."""
    solution = str_field(row, "answer")
    reference = extract_gsm8k_answer(solution)
    if reference is None:
        raise ValueError("GSM8K answer has no '#### <number>' final answer")
    return Question(
        id=f"gsm8k/{split}/{index}",
        domain="math",
        question=str_field(row, "question").strip(),
        reference=reference,
        answer_kind="numeric",
        source="gsm8k",
        meta={"split": split, "index": index, "solution": solution},
    )


def _parse_level(level: Any) -> int | None:
    if isinstance(level, bool):
        raise ValueError(f"bad level {level!r}")
    if isinstance(level, int):
        return level
    if level is None:
        return None
    m = re.fullmatch(r"\s*(?:Level\s*)?(\d+|\?)\s*", str(level))
    if not m:
        raise ValueError(f"bad level {level!r} (expected an int or 'Level N')")
    return None if m.group(1) == "?" else int(m.group(1))


def math_question(row: Mapping[str, Any], source: str, split: str, index: int) -> Question:
    """A MATH / MATH-500 row as a Question.

    The reference is the row's ``answer`` when present (MATH-500), otherwise the
    last ``\\boxed{}`` of ``solution`` (MATH; two upstream rows with an empty box
    take their answer from `_MATH_ERRATA`, marked ``meta["answer_from"] == "errata"``). The id comes from ``unique_id``
    (``test/precalculus/807.json`` -> ``<source>/test/precalculus/807``), or from
    the split and index when there is none.
    """
    problem = str_field(row, "problem")
    solution = row.get("solution")
    if solution is not None and not isinstance(solution, str):
        raise ValueError(f"field 'solution' must be a string, got {type(solution).__name__}")
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        if isinstance(answer, bool) or not isinstance(answer, (int, float)):
            raise ValueError(f"field 'answer' must be a string or number, got {type(answer).__name__}")
        answer = str(answer)
    unique_id = row.get("unique_id")
    answer_from = "answer"
    if answer is None or not answer.strip():
        if solution is None:
            raise ValueError("row has neither 'answer' nor 'solution'")
        answer, answer_from = extract_boxed(solution), "boxed"
        if not answer and isinstance(unique_id, str) and unique_id in _MATH_ERRATA:
            answer, answer_from = _MATH_ERRATA[unique_id], "errata"
        if not answer:
            raise ValueError("no answer field and no non-empty, complete \\boxed{...} in 'solution'")
    if unique_id is not None:
        if not isinstance(unique_id, str) or not unique_id.strip():
            raise ValueError(f"bad unique_id {unique_id!r}")
        key = unique_id.strip()
        if key.endswith(".json"):
            key = key[: -len(".json")]
        qid = f"{source}/{key}"
    else:
        qid = f"{source}/{split}/{index}"
    subject = row.get("subject", row.get("type"))
    meta: dict[str, Any] = {
        "subject": subject,
        "level": _parse_level(row.get("level")),
        "split": split,
        "answer_from": answer_from,
    }
    if unique_id is not None:
        meta["unique_id"] = unique_id
    if solution is not None:
        meta["solution"] = solution
    return Question(
        id=qid,
        domain="math",
        question=problem.strip(),
        reference=answer.strip(),
        answer_kind="math",
        source=source,
        meta=meta,
    )


def aime_question(row: Mapping[str, Any], source: str, index: int) -> Question:
    """An AIME row (``problem``, integer ``answer``, ``id``) as a Question."""
    problem = str_field(row, "problem")
    answer = row["answer"]
    if isinstance(answer, bool):
        raise ValueError(f"bad answer {answer!r}")
    try:
        reference = str(int(str(answer).strip()))  # "025" -> "25"
    except ValueError:
        raise ValueError(f"AIME answer must be an integer, got {answer!r}") from None
    row_id = row.get("id", index)
    meta: dict[str, Any] = {"index": index, "upstream_id": row_id}
    for key in ("solution", "url"):
        if isinstance(row.get(key), str):
            meta[key] = row[key]
    return Question(
        id=f"{source}/{row_id}",
        domain="math",
        question=problem.strip(),
        reference=reference,
        answer_kind="numeric",
        source=source,
        meta=meta,
    )


def load_gsm8k(path: str | os.PathLike | None = None, split: str = "test", limit: int | None = None) -> list[Question]:
    """GSM8K (``gsm8k/<split>.jsonl``). Ids ``gsm8k/<split>/<line index>``; answer_kind ``numeric``."""
    limit = check_limit(limit)
    check_split(split, ("train", "test"), "gsm8k")
    file = resolve_data_file(f"gsm8k/{split}.jsonl", path)
    return collect_questions(file, iter_jsonl(file), lambda row, i: gsm8k_question(row, split, i), limit)


def load_math(path: str | os.PathLike | None = None, split: str = "test", limit: int | None = None) -> list[Question]:
    """MATH (``math/<split>.jsonl.gz``, 7,500 train / 5,000 test). Ids ``math/<unique_id>``."""
    limit = check_limit(limit)
    check_split(split, ("train", "test"), "math")
    file = resolve_data_file(f"math/{split}.jsonl.gz", path)
    return collect_questions(file, iter_jsonl(file), lambda row, i: math_question(row, "math", split, i), limit)


def load_math500(path: str | os.PathLike | None = None, limit: int | None = None) -> list[Question]:
    """MATH-500 (``math500/test.jsonl``). Ids ``math500/test/<subject>/<n>``."""
    limit = check_limit(limit)
    file = resolve_data_file("math500/test.jsonl", path)
    return collect_questions(file, iter_jsonl(file), lambda row, i: math_question(row, "math500", "test", i), limit)


def load_aime(
    year: int | str = 2025, path: str | os.PathLike | None = None, limit: int | None = None
) -> list[Question]:
    """AIME 2024 or 2025 (``aime24/test.jsonl``, ``aime25/test.jsonl``), 30 problems each.

    `year`: 2024, 2025, "24", "25", "aime24" or "aime25". Ids ``aime24/<upstream id>``.
    """
    key = str(year).lower().removeprefix("aime").removeprefix("20")
    if key not in ("24", "25"):
        raise ValueError(f"AIME year must be 2024 or 2025, got {year!r}")
    source = f"aime{key}"
    limit = check_limit(limit)
    file = resolve_data_file(f"{source}/test.jsonl", path)
    return collect_questions(file, iter_jsonl(file), lambda row, i: aime_question(row, source, i), limit)
