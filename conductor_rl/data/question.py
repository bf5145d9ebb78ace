"""The Question record: one benchmark item, whatever its source.

A `Question` is what the rest of the system passes around: the text shown to
the Conductor and its workers, the reference answer, and how to grade it.
It serialises to one JSON object per line (``to_dict`` / ``from_dict``), the
format of the shipped sample files and of ``load_dataset("jsonl:...")``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Allowed values of `Question.domain`.
DOMAINS = ("math", "mmlu", "code", "science", "reasoning")
#: Allowed values of `Question.answer_kind` (tells the grader what to do).
ANSWER_KINDS = ("math", "numeric", "choice", "freeform", "code_humaneval", "code_stdio", "code_call", "code_unittest")
#: The fields of a serialised Question, in order; `meta` may be omitted.
FIELDS = ("id", "domain", "question", "reference", "answer_kind", "source", "meta")
_STRING_FIELDS = FIELDS[:-1]


@dataclass(frozen=True)
class Question:
    """One benchmark question.

    id:          stable, unique key, e.g. ``"gsm8k/test/17"``.
    domain:      ``"math" | "mmlu" | "code" | "science" | "reasoning"`` (science: GPQA;
                 reasoning: RLPR's general-domain questions).
    question:    the text shown to the Conductor / workers (MMLU: with lettered choices).
    reference:   the reference answer (math: final answer; mmlu: a letter; code: the full
                 canonical program, prompt included).
    answer_kind: how to grade: one of `ANSWER_KINDS` (the graders' kinds, see `conductor_rl.grading`).
    source:      the dataset it came from (``"gsm8k"``, ``"math500"``, ``"math"``, ...).
    meta:        extras (subject, level, choices, tests, ...); JSON-serialisable.
    """

    id: str
    domain: str
    question: str
    reference: str
    answer_kind: str
    source: str
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in _STRING_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(f"Question.{name} must be a str, got {type(value).__name__}: {value!r}")
        for name in ("id", "question", "reference", "source"):
            if not getattr(self, name).strip():
                raise ValueError(f"Question.{name} must not be empty (id={self.id!r})")
        if self.domain not in DOMAINS:
            raise ValueError(f"Question.domain must be one of {DOMAINS}, got {self.domain!r} (id={self.id!r})")
        if self.answer_kind not in ANSWER_KINDS:
            raise ValueError(
                f"Question.answer_kind must be one of {ANSWER_KINDS}, got {self.answer_kind!r} (id={self.id!r})"
            )
        if not isinstance(self.meta, dict):
            raise TypeError(f"Question.meta must be a dict, got {type(self.meta).__name__} (id={self.id!r})")

    # `meta` is a dict, so the generated hash would fail; the id identifies a question.
    def __hash__(self) -> int:
        return hash(self.id)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict with the fields in `FIELDS` order."""
        return {
            "id": self.id,
            "domain": self.domain,
            "question": self.question,
            "reference": self.reference,
            "answer_kind": self.answer_kind,
            "source": self.source,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Question:
        """Build a Question from a dict such as `to_dict` returns.

        Raises ValueError naming missing or unknown keys, and TypeError/ValueError
        for values of the wrong type.
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"a Question must be a JSON object, got {type(data).__name__}")
        missing = [k for k in _STRING_FIELDS if k not in data]
        if missing:
            raise ValueError(f"missing field(s) {missing}; a Question needs {list(FIELDS)}")
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown field(s) {unknown}; a Question has {list(FIELDS)}")
        meta = data.get("meta")
        return cls(
            id=data["id"],
            domain=data["domain"],
            question=data["question"],
            reference=data["reference"],
            answer_kind=data["answer_kind"],
            source=data["source"],
            meta={} if meta is None else meta,
        )
