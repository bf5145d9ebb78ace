"""GPQA: graduate-level multiple-choice science questions (Diamond: 198 of them),
in the CSV its authors ship and the Hub's ``Idavidrein/gpqa`` stores
(``gpqa_diamond.csv``, ``gpqa_main.csv``, ``gpqa_extended.csv``).

A row names its ``Question``, ``Correct Answer`` and ``Incorrect Answer 1..3``,
with ``Record ID``, ``Subdomain`` and ``High-level domain`` among some forty other
columns. The file always lists the correct answer first, so, as the authors
recommend, the four choices are shuffled, by a permutation fixed per question:
the options sorted by sha256 of ``"<seed>\\x1f<Record ID>\\x1f<option index>"``
(index 0 the correct answer, 1..3 the incorrect ones in file order). The same
seed gives the same letters on every machine and Python version; another seed
gives another, equally fair, order. The reference is the letter that shows the
correct answer.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from .files import check_limit, check_split, collect_questions, iter_rows, resolve_benchmark_file, str_field
from .question import Question

HUB_NAME = "Idavidrein/gpqa"
#: The seed string of the choice permutations unless one is given.
GPQA_SEED = "conductor-rl/gpqa"
SUBSETS = ("diamond", "main", "extended")
_OPTIONS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
_LETTERS = "ABCD"


def gpqa_permutation(record_id: str, seed: str = GPQA_SEED) -> list[int]:
    """The order the four options are shown in: position k shows option ``perm[k]``
    (option 0 is the correct answer)."""

    def key(option: int) -> bytes:
        return hashlib.sha256(f"{seed}\x1f{record_id}\x1f{option}".encode()).digest()

    return sorted(range(len(_OPTIONS)), key=key)


def gpqa_question(row: Mapping[str, Any], seed: str = GPQA_SEED) -> Question:
    """A GPQA row as a Question with its choices shuffled by `gpqa_permutation`."""
    record_id = str_field(row, "Record ID").strip()
    options = [str_field(row, column).strip() for column in _OPTIONS]
    order = gpqa_permutation(record_id, seed)
    choices = [options[i] for i in order]
    letter = _LETTERS[order.index(0)]
    lettered = "\n".join(f"{_LETTERS[k]}. {choice}" for k, choice in enumerate(choices))
    subdomain = row.get("Subdomain")
    return Question(
        id=f"gpqa/{record_id}",
        domain="science",
        question=str_field(row, "Question").strip() + "\n\n" + lettered,
        reference=letter,
        answer_kind="choice",
        source="gpqa",
        meta={
            "record_id": record_id,
            "subject": subdomain.strip() if isinstance(subdomain, str) else None,
            "high_level_domain": row.get("High-level domain"),
            "choices": choices,
            "n_choices": len(choices),
            "permutation_seed": seed,
        },
    )


def load_gpqa(
    subset: str = "diamond",
    path: str | os.PathLike | None = None,
    seed: str = GPQA_SEED,
    limit: int | None = None,
) -> list[Question]:
    """GPQA `subset` (``"diamond"``, ``"main"`` or ``"extended"``) from its CSV.

    `path`: a CSV (or Parquet / JSONL with the same columns) or a directory holding
    ``gpqa/gpqa_<subset>.csv``; default: the shared data directory. Ids
    ``gpqa/<Record ID>``; domain ``science``; the reference is a letter and
    ``meta`` has ``choices`` and ``n_choices``, as MMLU's do.
    """
    limit = check_limit(limit)
    check_split(subset, SUBSETS, "gpqa")
    candidates = (f"gpqa/gpqa_{subset}.csv", f"gpqa/gpqa_{subset}.parquet")
    file = resolve_benchmark_file("gpqa", candidates, path, f"{HUB_NAME}@gpqa_{subset}:train")
    return collect_questions(file, iter_rows(file), lambda row, _i: gpqa_question(row, seed), limit)
