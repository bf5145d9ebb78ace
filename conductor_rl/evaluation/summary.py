"""Evaluation records and the numbers of the results table.

An `EvalRecord` is one sample: one method's answer to one question of one
benchmark, in one repeat. `summarise` turns records into one `Cell` per
(method, benchmark); `strategy` gives the paper's strategy analysis of the
Conductor's plans (steps and worker shares per domain) and their shapes per
domain and difficulty: the share of one-step plans, of plans with a step that
reads an earlier answer, and of plans with a step that checks one.

Decisions:

- Verdicts: ``correct``, ``wrong``, ``plan_error`` (the Conductor wrote no valid
  plan: wrong, as its reward says) and ``error`` (an infrastructure failure:
  a worker or grader fault). ``error`` samples are left out of accuracy, cost
  and token means and counted in `Cell.errors`; their spending is still in
  `Cell.cost_total_usd`.
- Accuracy is the mean over questions of each question's mean over its scored
  repeats, so a question weighs the same whatever its repeats that errored. Its
  standard error is that of the mean of those per-question means (ddof = 1),
  which covers both the question sample and the repeats' noise; 0 for one question.
- Calls, tokens and dollars are means per scored sample; steps are the mean
  over samples that had a plan (a plan error has none).
- A plan's step reads an earlier answer when its access list names an earlier
  step ("all" on the first step names none); it checks one when it also holds a
  check word (conductor_rl/workers/sim_rules.py: the simulator's own rule, which
  says what a plan asks for whatever the pool). Difficulty bands are
  conductor_rl/data/difficulty.py's: hard from `HARD_FROM`, easy below; records
  written before records carried a difficulty are "unknown".
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from conductor_rl.data.difficulty import band_of
from conductor_rl.grading.verdict import SCORED_VERDICTS
from conductor_rl.rollout.recursion import StopCounts
from conductor_rl.workers.sim_rules import plan_shape

__all__ = [
    "MAX_ANSWER_CHARS",
    "VERDICTS",
    "Cell",
    "EvalRecord",
    "StrategyRow",
    "stop_rates",
    "strategy",
    "summarise",
]

VERDICTS = ("correct", "wrong", "truncated", "plan_error", "error")
MAX_ANSWER_CHARS = 4000  # kept of each final answer: the end, where graders look


@dataclass(frozen=True)
class EvalRecord:
    """One evaluated sample, JSON- and Parquet-ready (`to_dict`, `from_dict`)."""

    method: str
    benchmark: str
    question_id: str
    domain: str
    repeat: int
    verdict: str
    steps: int = 0
    workers: tuple[str, ...] = ()  # worker names in step order
    calls: int = 0  # worker calls made (a failed plan stops early)
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    simulated: bool = False
    final_answer: str | None = None
    plan: tuple[dict[str, Any], ...] | None = None  # steps: model_id, worker, subtask, access
    error: str | None = None
    difficulty: float | None = None  # the question's (conductor_rl/data/difficulty.py); None in older records
    # Recursive calls really made (not cut off by the depth limit), and the stop statistics (StopCounts):
    # calls shown a right answer, those of them that kept it; calls shown a wrong one, those that kept it.
    recursive_calls: int = 0
    calls_on_right: int = 0
    stops_on_right: int = 0
    calls_on_wrong: int = 0
    stops_on_wrong: int = 0

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"EvalRecord.verdict must be one of {VERDICTS}, got {self.verdict!r}")
        object.__setattr__(self, "workers", tuple(self.workers))
        if self.plan is not None:
            object.__setattr__(self, "plan", tuple(dict(step) for step in self.plan))
        if self.final_answer is not None and len(self.final_answer) > MAX_ANSWER_CHARS:
            object.__setattr__(self, "final_answer", "[...] " + self.final_answer[-MAX_ANSWER_CHARS:])

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.method, self.benchmark, self.question_id, self.repeat)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["workers"] = list(self.workers)
        out["plan"] = None if self.plan is None else [dict(step) for step in self.plan]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalRecord:
        """The record of `to_dict`'s output; keys it does not know are ignored (newer writers)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @property
    def stop_counts(self) -> StopCounts:
        """Its recursive calls' stop statistics (conductor_rl/rollout/recursion.py)."""
        return StopCounts(self.calls_on_right, self.stops_on_right, self.calls_on_wrong, self.stops_on_wrong)


def stop_rates(records: Iterable[EvalRecord]) -> dict[str, dict[str, float | None]]:
    """Per method, over its scored samples: how often a recursive call kept the answer it was
    shown when that answer was right (`stop_rate_when_right`) and when it was wrong
    (`stop_rate_when_wrong`); None where no call saw such an answer."""
    totals: dict[str, StopCounts] = {}
    for r in records:
        if r.verdict != "error":
            totals[r.method] = totals.get(r.method, StopCounts()) + r.stop_counts
    return {
        method: {"stop_rate_when_right": c.rate_when_right, "stop_rate_when_wrong": c.rate_when_wrong}
        for method, c in totals.items()
    }


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Cell:
    """One (method, benchmark) entry of the results table."""

    method: str
    benchmark: str
    questions: int
    repeats: int  # the most repeats any question has
    samples: int  # scored samples (correct, wrong, plan_error)
    accuracy: float | None
    stderr: float | None
    calls: float
    steps: float | None  # per sample with a plan
    input_tokens: float
    output_tokens: float
    cost_usd: float  # per scored sample
    cost_total_usd: float  # every sample, errors included
    errors: int
    plan_errors: int
    simulated: bool
    truncated: int = 0  # scored wrong: the final worker ran out of output tokens before answering

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def mean_and_stderr(per_question: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean of per-question means and its standard error (ddof = 1; 0 for one question)."""
    n = len(per_question)
    if n == 0:
        return None, None
    mean = sum(per_question) / n
    if n == 1:
        return mean, 0.0
    variance = sum((x - mean) ** 2 for x in per_question) / (n - 1)
    return mean, math.sqrt(variance / n)


def _cell(method: str, benchmark: str, records: Sequence[EvalRecord]) -> Cell:
    scored = [r for r in records if r.verdict != "error"]
    by_question: dict[str, list[float]] = defaultdict(list)
    repeats: dict[str, set[int]] = defaultdict(set)
    for r in scored:
        by_question[r.question_id].append(1.0 if r.verdict == "correct" else 0.0)
        repeats[r.question_id].add(r.repeat)
    accuracy, stderr = mean_and_stderr([_mean(v) for v in by_question.values()])
    planned = [r.steps for r in scored if r.verdict != "plan_error"]
    return Cell(
        method=method,
        benchmark=benchmark,
        questions=len(by_question),
        repeats=max((len(v) for v in repeats.values()), default=0),
        samples=len(scored),
        accuracy=accuracy,
        stderr=stderr,
        calls=_mean([r.calls for r in scored]),
        steps=_mean(planned) if planned else None,
        input_tokens=_mean([r.input_tokens for r in scored]),
        output_tokens=_mean([r.output_tokens for r in scored]),
        cost_usd=_mean([r.cost_usd for r in scored]),
        cost_total_usd=sum(r.cost_usd for r in records),
        errors=len(records) - len(scored),
        plan_errors=sum(r.verdict == "plan_error" for r in scored),
        simulated=any(r.simulated for r in records),
        truncated=sum(r.verdict == "truncated" for r in scored),
    )


def _grouped(records: Iterable[EvalRecord], key) -> dict[Any, list[EvalRecord]]:
    groups: dict[Any, list[EvalRecord]] = {}
    for r in records:
        groups.setdefault(key(r), []).append(r)
    return groups


def summarise(records: Iterable[EvalRecord]) -> list[Cell]:
    """One Cell per (method, benchmark), in the order they first appear."""
    groups = _grouped(records, lambda r: (r.method, r.benchmark))
    return [_cell(method, benchmark, rs) for (method, benchmark), rs in groups.items()]


# --------------------------------------------------------------------------- strategy


@dataclass(frozen=True)
class StrategyRow:
    """How a Conductor plans in one domain and difficulty band: mean steps, each worker's share of
    calls, and the plans' shapes (shares of the band's plans)."""

    method: str
    domain: str
    plans: int
    mean_steps: float
    worker_shares: dict[str, float]  # worker name -> share of the plans' steps, largest first
    band: str = "unknown"  # "easy", "hard" or "unknown" (conductor_rl/data/difficulty.py)
    single_step_share: float = 0.0  # plans of one step
    reading_share: float = 0.0  # plans with a step that reads an earlier answer
    checking_share: float = 0.0  # plans with a step that reads an earlier answer and asks to check it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def recorded_plan_shape(plan: Sequence[Mapping[str, Any]]) -> tuple[bool, bool]:
    """`plan_shape` (conductor_rl/workers/sim_rules.py) of a plan as a record holds it."""

    def reads(i: int, access: object) -> list[int]:
        return list(range(i)) if access == "all" else list(access) if isinstance(access, list) else []

    return plan_shape([(str(s.get("subtask", "")), reads(i, s.get("access"))) for i, s in enumerate(plan)])


def _is_conductor(method: str) -> bool:
    return method.startswith("conductor:")


def strategy(records: Iterable[EvalRecord]) -> list[StrategyRow]:
    """For each Conductor method, domain and difficulty band, over its scored samples with a plan."""
    planned = [r for r in records if _is_conductor(r.method) and r.verdict in SCORED_VERDICTS and r.steps]
    rows = []
    groups = _grouped(planned, lambda r: (r.method, r.domain, band_of(r.difficulty)))
    for (method, domain, band), rs in groups.items():
        counts: dict[str, int] = defaultdict(int)
        for r in rs:
            for worker in r.workers:
                counts[worker] += 1
        total = sum(counts.values())
        shares = {w: c / total for w, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}
        shapes = [recorded_plan_shape(r.plan or ()) for r in rs]
        rows.append(
            StrategyRow(
                method,
                domain,
                len(rs),
                _mean([r.steps for r in rs]),
                shares,
                band,
                _mean([float(r.steps == 1) for r in rs]),
                _mean([float(reads) for reads, _ in shapes]),
                _mean([float(checks) for _, checks in shapes]),
            )
        )
    return rows
