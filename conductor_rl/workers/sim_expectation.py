"""The exact chance that a plan's final answer is right in a pool of simulated workers.

A simulated step draws right or wrong by the rules of conductor_rl/workers/sim_rules.py; here the
draws are not made but summed over: every right/wrong outcome of the steps before the last, times
the last step's chance given it. The result is what the plan scores on average over infinitely many
runs, so a measure built on it carries no worker-draw noise. The best-plan search
(conductor_rl/evaluation/optimal.py) and the measures of what a Conductor wrote (the training
record's `expected_accuracy`, benchmarks/orchestration.py) both use this one implementation.

A written plan (`written_steps`) is judged as the simulator judges it: a step reads the earlier
steps its access names, it is a check when it reads something and its subtask holds a check word,
and it is on task when its subtask shares a content word with the question.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from conductor_rl.config import SimSpec, WorkerConfig
from conductor_rl.plan.language import Plan
from conductor_rl.workers.sim_rules import Role, on_task, step_role, success_chance


@dataclass(frozen=True)
class PlanStep:
    """One step as the simulator sees it: the worker's pool index, the earlier steps it reads, its
    role, and whether its subtask carries the question's content."""

    worker: int
    reads: tuple[int, ...] = ()
    role: Role = "solve"
    on_task: bool = True


def check_steps(steps: Sequence[PlanStep], n_workers: int) -> None:
    """Raises ValueError, naming the step, for a plan the rules cannot judge."""
    if not steps:
        raise ValueError("a plan needs at least one step")
    for i, step in enumerate(steps):
        if not 0 <= step.worker < n_workers:
            raise ValueError(f"step {i}: worker {step.worker} is not in a pool of {n_workers}")
        if any(not 0 <= j < i for j in step.reads):
            raise ValueError(f"step {i} may only read earlier steps (0..{i - 1}), not {list(step.reads)}")
        if step.role == "check" and not step.reads:
            raise ValueError(f"step {i} is a check but reads nothing: give it reads, or make it a solve")


# A step's chance per (worker, role, on task, reads something, the latest answer it reads is right).
Chances = dict[tuple[int, Role, bool, bool, bool], float]


def step_chances(specs: Sequence[SimSpec], domain: str, difficulty: float) -> Chances:
    """Every chance a step of this pool can have on a question of `domain` and `difficulty`."""
    return {
        (w, role, topical, reads, right): success_chance(spec, domain, difficulty, role, topical, reads, right)
        for w, spec in enumerate(specs)
        for role in ("solve", "check")
        for topical in (False, True)
        for reads in (False, True)
        for right in (False, True)
    }


def accuracy_of(steps: Sequence[PlanStep], chances: Chances, on_task: bool = True) -> float:
    """The chance that the last step is right; each step's chance depends only on the outcome of the
    latest step it reads. `on_task=False`: every step off task (a question with no content word)."""

    def go(i: int, outcome: tuple[bool, ...], weight: float) -> float:
        step = steps[i]
        reads = bool(step.reads)
        p = chances[step.worker, step.role, step.on_task and on_task, reads, reads and outcome[max(step.reads)]]
        if i == len(steps) - 1:
            return weight * p
        total = 0.0
        if p > 0.0:
            total += go(i + 1, (*outcome, True), weight * p)
        if p < 1.0:
            total += go(i + 1, (*outcome, False), weight * (1.0 - p))
        return total

    return go(0, (), 1.0)


def plan_accuracy(steps: Sequence[PlanStep], specs: Sequence[SimSpec], domain: str, difficulty: float) -> float:
    """The exact probability that the last step's answer is right, for a question of `domain` and
    `difficulty`."""
    check_steps(steps, len(specs))
    return accuracy_of(steps, step_chances(specs, domain, difficulty))


def written_steps(plan: Plan, question: str) -> tuple[PlanStep, ...]:
    """The steps of `plan` (model ids are pool places) as the simulator judges them for `question`."""
    steps = []
    for i, step in enumerate(plan.steps):
        reads = tuple(plan.visible(i))
        steps.append(
            PlanStep(step.model_id, reads, step_role(step.subtask, bool(reads)), on_task(step.subtask, question))
        )
    return tuple(steps)


def sim_specs(workers: Sequence[WorkerConfig]) -> list[SimSpec] | None:
    """Each worker's sim spec, or None when a worker is not simulated (its accuracy is not known)."""
    specs = [w.sim for w in workers if w.provider == "sim" and w.sim is not None]
    return specs if len(specs) == len(workers) else None


def expected_accuracy(
    plan: Plan, question: str, domain: str, difficulty: float, specs: Sequence[SimSpec]
) -> float | None:
    """The exact chance that `plan` (pool places) answers `question` right; None for an empty plan or one
    that names a worker outside `specs` (a recursive call's seat, say)."""
    if not plan.steps or any(not 0 <= s.model_id < len(specs) for s in plan.steps):
        return None
    return plan_accuracy(written_steps(plan, question), specs, domain, difficulty)
