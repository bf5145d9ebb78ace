"""Evaluation without luck, for a pool of simulated workers: each record's plan scored by its exact
expected accuracy (conductor_rl/workers/sim_expectation.py) instead of its one drawn verdict, and
methods compared question by question.

Decisions:
- A plan error scores 0 (its verdict is wrong and its reward 0); an infrastructure error, or a plan
  that cannot be judged exactly (a step for the Conductor's own seat), is left out.
- A method's figure for a question is the mean over its repeats; its accuracy the mean over questions.
- A paired difference is taken per question, over the questions both methods answered; its standard
  error is that of the mean of those differences (ddof 1).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from conductor_rl.config import WorkerConfig
from conductor_rl.data import Question
from conductor_rl.plan import Plan, Step
from conductor_rl.workers.sim_expectation import expected_accuracy, sim_specs

from .summary import EvalRecord

QuestionKey = tuple[str, str]  # (benchmark, question id)


def record_plan(record: EvalRecord, workers: Sequence[WorkerConfig]) -> Plan | None:
    """The record's plan with pool places, found by the name of each step's worker (`record.workers`, in
    step order), or None without a plan or with a worker outside the pool."""
    if not record.plan or len(record.workers) != len(record.plan):
        return None
    names = [w.name for w in workers]
    if any(name not in names for name in record.workers):
        return None
    return Plan(
        tuple(
            Step(names.index(name), str(step.get("subtask", "")), step.get("access", []))
            for name, step in zip(record.workers, record.plan)
        )
    )


def record_expected_accuracy(record: EvalRecord, question: Question, workers: Sequence[WorkerConfig]) -> float | None:
    """The exact chance that the record's plan answers `question` right (decisions above)."""
    if record.verdict == "plan_error":
        return 0.0
    if record.verdict == "error" or record.difficulty is None:
        return None
    specs = sim_specs(workers)
    plan = record_plan(record, workers)
    if specs is None or plan is None:
        return None
    return expected_accuracy(plan, question.question, question.domain, record.difficulty, specs)


def expected_by_question(
    records: Sequence[EvalRecord], questions: Mapping[QuestionKey, Question], workers: Sequence[WorkerConfig]
) -> dict[str, dict[QuestionKey, float]]:
    """Per method, each question's mean expected accuracy over its repeats."""
    values: dict[str, dict[QuestionKey, list[float]]] = {}
    for r in records:
        key = (r.benchmark, r.question_id)
        value = record_expected_accuracy(r, questions[key], workers)
        if value is not None:
            values.setdefault(r.method, {}).setdefault(key, []).append(value)
    return {m: {k: statistics.fmean(v) for k, v in by_q.items()} for m, by_q in values.items()}


@dataclass(frozen=True)
class Paired:
    """mean(a - b) over the questions both answered, its standard error, and how many questions."""

    difference: float
    se: float
    questions: int

    def beats(self, standard_errors: float = 2.0) -> bool:
        return self.difference > standard_errors * self.se


def paired(a: Mapping[QuestionKey, float], b: Mapping[QuestionKey, float]) -> Paired:
    shared = sorted(set(a) & set(b))
    if len(shared) < 2:
        raise ValueError(f"a paired comparison needs two or more shared questions, got {len(shared)}")
    diffs = [a[k] - b[k] for k in shared]
    return Paired(statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs)), len(diffs))
