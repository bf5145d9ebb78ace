"""Decontamination: refuse to evaluate on questions the Conductor was trained on.

Two questions are the same when their shown text is the same after
normalisation (`text_key`): Unicode NFKC, case folded, every run of whitespace
made one space, stripped. Ids are not compared: the same problem reaches us
under different ids (MATH's ``math/test/algebra/1`` is MATH-500's
``math500/test/algebra/1``), and a re-spaced or re-cased copy is still a copy.

`check_disjoint` is what ``conductor-rl train`` and ``conductor-rl evaluate``
call with their training and evaluation sets; `find_overlap` lists the pairs.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

from .question import Question

#: How many example ids a `ContaminationError` message names.
EXAMPLES = 5


class ContaminationError(ValueError):
    """Evaluation questions that the training data also contains. `pairs` lists them
    as (training question, evaluation question)."""

    def __init__(self, message: str, pairs: list[tuple[Question, Question]]):
        super().__init__(message)
        self.pairs = pairs


def normalise_text(text: str) -> str:
    """NFKC, casefold, whitespace runs collapsed to one space, stripped."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def text_key(text: str) -> str:
    """The sha256 hex digest of `normalise_text(text)`: equal for texts that differ
    only in Unicode form, case or whitespace."""
    return hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()


def find_overlap(training: Iterable[Question], evaluation: Iterable[Question]) -> list[tuple[Question, Question]]:
    """(training question, evaluation question) for every pair with the same `text_key`,
    in the evaluation set's order, then the training set's."""
    by_key: dict[str, list[Question]] = {}
    for question in training:
        by_key.setdefault(text_key(question.question), []).append(question)
    return [(seen, question) for question in evaluation for seen in by_key.get(text_key(question.question), ())]


def _counts(values: Iterable[str]) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in sorted(Counter(values).items(), key=lambda kv: (-kv[1], kv[0])))


def check_disjoint(
    training: Sequence[Question],
    evaluation: Sequence[Question],
    *,
    training_name: str = "training set",
    evaluation_name: str = "evaluation set",
) -> None:
    """Raise `ContaminationError` if any evaluation question is also a training question.

    The message says how many evaluation questions the training data contains,
    per evaluation source and per training source, names a few, and how to fix it.
    """
    pairs = find_overlap(training, evaluation)
    if not pairs:
        return
    shared_eval = {e.id: e for _, e in pairs}
    shared_train = {t.id: t for t, _ in pairs}
    examples = ", ".join(f"{e.id} (= {t.id})" for t, e in pairs[:EXAMPLES])
    raise ContaminationError(
        f"the evaluation set {evaluation_name!r} shares {len(shared_eval):,} of its {len(evaluation):,} questions "
        f"with the training set {training_name!r} (same text after normalising case and whitespace). "
        f"Evaluation questions by source: {_counts(e.source for e in shared_eval.values())}; "
        f"training questions by source: {_counts(t.source for t in shared_train.values())}; "
        f"for example {examples}. "
        "Train and evaluate on disjoint data: train on gsm8k:train, math:train, mmlu:train, samples:gsm8k, "
        "samples:mmlu or samples:mixed; evaluate on gsm8k:test, math500, mmlu:eval or humaneval "
        "(mmlu:test is all of MMLU, mmlu:train included); or train on a sample set's :train split and "
        "evaluate on its :eval split (samples:math500:train, samples:math500:eval).",
        pairs,
    )
