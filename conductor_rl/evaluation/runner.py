"""Running a batch of one evaluation cell: a method's samples for some questions,
executed on the worker pool, graded, and turned into records.

Every method reaches the workers the same way: as plans (a Conductor's sampled
completions, parsed, or a baseline's plan, built) run by the workflow engine
and graded as in training (conductor_rl/rollout/rollouts.py), so calls, tokens
and dollars are counted identically for all of them.

Decisions:
- A sample's dollars are its steps' token usage at the workers' list prices,
  not what this run paid: a response-cache hit is free, but the method's cost
  per sample is what it would cost (the ledger keeps what was actually spent).
- Repeat r of a question always runs with the draw key ``eval/0/r``, whatever
  the method or the batch, so a resumed run draws what an uninterrupted one
  would (simulated workers are seeded by it), and so two methods that send a
  worker the same request get the same answer.
- A sample that a spent budget stopped is not a record: it was not run to its
  end, so it is left for a resumed run instead of counting as an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from conductor_rl.config import Price
from conductor_rl.data import Question
from conductor_rl.grading import GradeResult
from conductor_rl.grading.service import GradeRequest
from conductor_rl.plan import Plan
from conductor_rl.plan.language import render_plan
from conductor_rl.plan.roster import Roster
from conductor_rl.rollout.recursion import Recursion, StopCounts
from conductor_rl.rollout.rollouts import (
    Rollout,
    apply_grade,
    execute_rollouts,
    grade_request,
    needs_execution,
    parse_rollout,
    ready_to_grade,
    unfinished,
)
from conductor_rl.rollout.workflow import StepLimits, Task
from conductor_rl.workers.costs import cost_of
from conductor_rl.workers.ledger import refused_by_ledger
from conductor_rl.workers.providers.base import Provider

from .summary import EvalRecord


@dataclass(frozen=True)
class Sample:
    """What a method makes for one (question, repeat): a completion to parse, or a ready plan."""

    completion: str
    plan: Plan | None = None

    @classmethod
    def of_plan(cls, plan: Plan) -> Sample:
        return cls(render_plan(plan), plan)


@dataclass
class Pool:
    """What a batch runs on. `workers[r]` serves repeat r (the job may give each
    repeat its own response-cache namespace, so repeats are fresh draws);
    `grade_many` grades a list of requests (the grader pool, or a local grader)."""

    workers: Sequence[Sequence[Provider]]
    limits: Sequence[StepLimits]
    prices: Sequence[Price]
    grade_many: Callable[[list[GradeRequest]], list[GradeResult]]
    max_steps: int
    attempts: int = 2
    roster: Roster | None = None  # what the Conductor's prompt lists (None: every worker, as Model 0..n-1)

    def for_repeat(self, repeat: int) -> Sequence[Provider]:
        return self.workers[repeat % len(self.workers)]


def stopped_by_budget(rollout: Rollout) -> bool:
    wf = rollout.workflow
    return wf is not None and any(refused_by_ledger(s.error) for s in wf.steps)


async def run_batch(
    questions: Sequence[Question],
    samples: Sequence[Sequence[Sample]],
    repeats: Sequence[Sequence[int]],
    pool: Pool,
    recursion: Recursion | None = None,
) -> list[Rollout]:
    """Run and grade `samples[i][j]`, repeat `repeats[i][j]` of question i. An
    infrastructure failure is run again, up to `pool.attempts` times in all.
    `recursion`: how a Conductor's plans call it again (rollout/recursion.py)."""
    rollouts: list[Rollout] = []
    for question, made, numbers in zip(questions, samples, repeats):
        for sample, repeat in zip(made, numbers):
            rollout = Rollout(Task.of(question), sample.completion, group=0, sample=repeat)
            if sample.plan is None:  # a Conductor's completion, for the prompt that listed `pool.roster`
                rollout.roster = pool.roster
                parse_rollout(rollout, len(pool.limits), pool.max_steps)
            else:
                rollout.plan = sample.plan  # a baseline's plan may be longer than a Conductor's
            rollouts.append(rollout)
    for _ in range(pool.attempts):
        todo = [r for r in unfinished(rollouts) if not stopped_by_budget(r)]
        if not todo:
            break
        by_repeat: dict[int, list[Rollout]] = {}
        for rollout in needs_execution(todo):
            by_repeat.setdefault(rollout.sample, []).append(rollout)
        await asyncio.gather(
            *(
                execute_rollouts(group, pool.for_repeat(repeat), pool.limits, key="eval", recursion=recursion)
                for repeat, group in by_repeat.items()
            )
        )
        to_grade = ready_to_grade(todo)
        if to_grade:
            results = await asyncio.to_thread(pool.grade_many, [grade_request(r) for r in to_grade])
            for rollout, result in zip(to_grade, results):
                apply_grade(rollout, result)
    return rollouts


def record_of(method: str, benchmark: str, rollout: Rollout, prices: Sequence[Price]) -> EvalRecord:
    """The record of one finished sample (see `stopped_by_budget` for those that are not)."""
    wf, plan = rollout.workflow, rollout.plan
    steps = [] if wf is None else wf.worker_steps()  # recursive calls' steps included
    if rollout.plan_error is not None:
        verdict = "plan_error"
    elif rollout.reward is None or rollout.grade is None:
        verdict = "error"
    else:
        verdict = rollout.grade.verdict.value
    cost = sum(cost_of(s.usage, prices[s.model_id]) for s in steps if 0 <= s.model_id < len(prices))
    final = None if wf is None else wf.final_answer
    made = [c for c in rollout.inner_calls if c.made]
    stops = StopCounts.of(made)
    return EvalRecord(
        method=method,
        benchmark=benchmark,
        question_id=rollout.task.id,
        domain=rollout.task.domain,
        repeat=rollout.sample,
        verdict=verdict,
        steps=0 if plan is None else len(plan.steps),
        workers=tuple(s.worker for s in steps),
        calls=sum(1 for s in steps if s.started_s is not None),
        input_tokens=sum(s.usage.input_tokens for s in steps),
        output_tokens=sum(s.usage.output_tokens for s in steps),
        cost_usd=cost,
        wall_s=0.0 if wf is None else wf.wall_s,
        simulated=bool(wf and wf.simulated),
        final_answer=final,
        plan=None
        if plan is None
        else tuple({"model_id": s.model_id, "subtask": s.subtask, "access": s.access} for s in plan.steps),
        error=rollout.plan_error or rollout.infrastructure_error,
        difficulty=rollout.task.difficulty,
        recursive_calls=len(made),
        calls_on_right=stops.right,
        stops_on_right=stops.kept_right,
        calls_on_wrong=stops.wrong,
        stops_on_wrong=stops.kept_wrong,
    )
