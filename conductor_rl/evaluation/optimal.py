"""The best plan for a simulated pool, computed exactly (no sampling).

A simulated worker's chance of a right answer follows fixed rules (conductor_rl/workers/sim_rules.py),
so for a question of known domain and difficulty the accuracy and expected cost of any plan can be
computed, and the best plan of a family found by trying them all. That gives a trained Conductor a
ceiling to be measured against (docs/guide/simulator.md); a pool with a real worker has none.

The family (`plan_family`): every plan of 1 to `max_steps` steps, each step any worker, each step
reading any subset of the earlier steps, worded as a check or as a solve when it reads something
(as a solve when it reads nothing), with every subtask carrying the question's content; plans with
a step whose answer nothing after it reads are left out, since such a step only costs.

Two facts of a question's wording narrow what a plan can be, and the search takes them: a question
with no content word cannot be on task (the simulator scales every solving step by `off_task_factor`:
`on_task=False`), and a solving step that reads earlier answers is a check in the simulator's eyes
when its subtask, which carries the question, holds a check word (`solve_reads=False` leaves such
steps out of the family).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from conductor_rl.config import SimSpec, WorkerConfig
from conductor_rl.plan.prompts import worker_messages
from conductor_rl.workers import sim_expectation
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.providers.base import Usage
from conductor_rl.workers.providers.sim import CHARS_PER_TOKEN
from conductor_rl.workers.sim_expectation import PlanStep, accuracy_of, check_steps, step_chances
from conductor_rl.workers.sim_rules import Role

#: Characters of a worker's prompt besides the question and the answers it reads: the system message
#: and the prompt's own headings, plus an allowance for the subtask's instruction words around the
#: question (its answer format, "check the earlier answer"). An estimate: real subtasks vary.
PROMPT_OVERHEAD_CHARS = sum(len(m["content"]) for m in worker_messages("")) + 100

# Values closer than this are equal, so that the same accuracy reached by multiplying in another
# order is a tie, broken by cost and length rather than by rounding.
_TIE = 1e-12


@dataclass(frozen=True)
class OptimalPlan:
    """A plan with its exact accuracy, expected cost (USD) and value (the expected reward less the cost
    penalty: `value_of`)."""

    steps: tuple[PlanStep, ...]
    accuracy: float
    cost_usd: float
    value: float


def value_of(accuracy: float, cost_usd: float, cost_weight: float = 0.0) -> float:
    """The expected training reward of a plan that parses (1 right, 0.5 wrong: conductor_rl/grading/verdict.py),
    less `cost_weight` (reward per USD) times its expected cost."""
    return 0.5 + 0.5 * accuracy - cost_weight * cost_usd


def plan_accuracy(steps: Sequence[PlanStep], specs: Sequence[SimSpec], domain: str, difficulty: float) -> float:
    """The exact probability that the last step's answer is right (conductor_rl/workers/sim_expectation.py)."""
    return sim_expectation.plan_accuracy(steps, specs, domain, difficulty)


def expected_cost(steps: Sequence[PlanStep], workers: Sequence[WorkerConfig], question_chars: int) -> float:
    """The expected USD a simulated pool bills for the plan: each step writes its worker's mean
    `output_tokens` and reads the question, the prompt (`PROMPT_OVERHEAD_CHARS`) and the answers of
    the steps it reads, each as long as its worker's mean output; CHARS_PER_TOKEN characters a token."""
    check_steps(steps, len(workers))
    total = 0.0
    for step in steps:
        worker = workers[step.worker]
        read_chars = sum(_spec(workers[steps[j].worker]).output_tokens * CHARS_PER_TOKEN for j in step.reads)
        input_tokens = max(1, (question_chars + PROMPT_OVERHEAD_CHARS + read_chars) // CHARS_PER_TOKEN)
        output_tokens = min(worker.max_tokens, _spec(worker).output_tokens)
        total += cost_of(Usage(input_tokens=input_tokens, output_tokens=output_tokens), worker.price)
    return total


def _spec(worker: WorkerConfig) -> SimSpec:
    if worker.sim is None:
        raise ValueError(
            f"worker {worker.name!r} has no sim spec: only a pool of simulated workers (provider 'sim') "
            "has a computable best plan"
        )
    return worker.sim


def simulated_pool(workers: Sequence[WorkerConfig]) -> bool:
    """Whether every worker is simulated (provider "sim"), so that plans have exact accuracies."""
    return all(w.provider == "sim" and w.sim is not None for w in workers)


def plan_family(n_workers: int, max_steps: int, solve_reads: bool = True) -> Iterator[tuple[PlanStep, ...]]:
    """Every plan of the family in this module's docstring: shorter plans first, then by worker,
    reads and role of the first step, the second, and so on. `solve_reads=False`: a step that reads
    earlier answers is always a check."""
    if n_workers < 1 or max_steps < 1:
        raise ValueError(f"need at least one worker and one step, got {n_workers} workers and {max_steps} steps")
    for length in range(1, max_steps + 1):
        options = [_step_options(n_workers, i, solve_reads) for i in range(length)]
        for steps in itertools.product(*options):
            read = {j for step in steps for j in step.reads}
            if all(i in read for i in range(length - 1)):
                yield steps


def _step_options(n_workers: int, index: int, solve_reads: bool = True) -> list[PlanStep]:
    subsets = [tuple(reads) for size in range(index + 1) for reads in itertools.combinations(range(index), size)]
    reading: tuple[Role, ...] = ("solve", "check") if solve_reads else ("check",)
    return [
        PlanStep(worker, reads, role)
        for worker in range(n_workers)
        for reads in subsets
        for role in (reading if reads else ("solve",))
    ]


def _better(candidate: OptimalPlan, best: OptimalPlan | None) -> bool:
    """Higher value; on a tie the cheaper plan, then the shorter."""
    if best is None or candidate.value > best.value + _TIE:
        return True
    if candidate.value < best.value - _TIE:
        return False
    if candidate.cost_usd < best.cost_usd - _TIE:
        return True
    return abs(candidate.cost_usd - best.cost_usd) <= _TIE and len(candidate.steps) < len(best.steps)


def _search(
    plans: Iterator[tuple[PlanStep, ...]],
    workers: Sequence[WorkerConfig],
    domain: str,
    difficulty: float,
    question_chars: int,
    cost_weight: float,
    on_task: bool = True,
) -> OptimalPlan:
    chances = step_chances([_spec(w) for w in workers], domain, difficulty)
    best: OptimalPlan | None = None
    for steps in plans:
        accuracy = accuracy_of(steps, chances, on_task)
        cost = expected_cost(steps, workers, question_chars)
        candidate = OptimalPlan(steps, accuracy, cost, value_of(accuracy, cost, cost_weight))
        if _better(candidate, best):
            best = candidate
    assert best is not None  # every family holds at least the one-step plans
    return best


def best_plan(
    workers: Sequence[WorkerConfig],
    domain: str,
    difficulty: float,
    question_chars: int,
    max_steps: int,
    cost_weight: float = 0.0,
    *,
    on_task: bool = True,
    solve_reads: bool = True,
) -> OptimalPlan:
    """The plan of the family with the highest value (`value_of`) for a question of `domain`,
    `difficulty` and `question_chars` characters; `cost_weight` in reward per USD; `on_task` and
    `solve_reads` as in this module's docstring."""
    for w in workers:
        _spec(w)
    family = plan_family(len(workers), max_steps, solve_reads)
    return _search(family, workers, domain, difficulty, question_chars, cost_weight, on_task)


def best_single(
    workers: Sequence[WorkerConfig],
    domain: str,
    difficulty: float,
    question_chars: int,
    cost_weight: float = 0.0,
    *,
    on_task: bool = True,
) -> OptimalPlan:
    """The best one-step plan: the value of always asking the one right worker (`oracle-single`)."""
    return best_plan(workers, domain, difficulty, question_chars, 1, cost_weight, on_task=on_task)


class PoolOptimum:
    """`best_plan` and `best_single` for one pool, step limit and cost weight, remembered per question
    kind (domain, difficulty, length, wording facts): a loop over questions meets few distinct ones.
    `question_chars` is the length used when a call names none."""

    def __init__(
        self, workers: Sequence[WorkerConfig], question_chars: int, max_steps: int, cost_weight: float = 0.0
    ) -> None:
        for w in workers:
            _spec(w)
        self.workers = list(workers)
        self.question_chars = question_chars
        self.max_steps = max_steps
        self.cost_weight = cost_weight
        self._best: dict[tuple[str, float, int, bool, bool], OptimalPlan] = {}
        self._single: dict[tuple[str, float, int, bool], OptimalPlan] = {}

    def best(
        self,
        domain: str,
        difficulty: float,
        question_chars: int | None = None,
        *,
        on_task: bool = True,
        solve_reads: bool = True,
    ) -> OptimalPlan:
        chars = self.question_chars if question_chars is None else question_chars
        key = (domain, difficulty, chars, on_task, solve_reads)
        if key not in self._best:
            self._best[key] = best_plan(
                self.workers,
                domain,
                difficulty,
                chars,
                self.max_steps,
                self.cost_weight,
                on_task=on_task,
                solve_reads=solve_reads,
            )
        return self._best[key]

    def single(
        self, domain: str, difficulty: float, question_chars: int | None = None, *, on_task: bool = True
    ) -> OptimalPlan:
        chars = self.question_chars if question_chars is None else question_chars
        key = (domain, difficulty, chars, on_task)
        if key not in self._single:
            self._single[key] = best_single(self.workers, domain, difficulty, chars, self.cost_weight, on_task=on_task)
        return self._single[key]


def describe(steps: Sequence[PlanStep], workers: Sequence[WorkerConfig]) -> str:
    """A plan in one line: `a solve; b solve; a check(0,1)`."""
    parts = []
    for step in steps:
        reads = f"({','.join(str(j) for j in step.reads)})" if step.reads else ""
        parts.append(f"{workers[step.worker].name} {step.role}{reads}")
    return "; ".join(parts)
