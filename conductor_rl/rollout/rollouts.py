"""One rollout: a Conductor completion turned into a reward.

parse the plan → run it on the workers → grade the final answer → reward
(0 unparsable / 0.5 wrong / 1 correct / None when the infrastructure failed,
so the trainer retries or drops it instead of scoring it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from conductor_rl import grading
from conductor_rl.grading import GradeResult, MathGrader, Verdict
from conductor_rl.grading.service import GradeRequest
from conductor_rl.plan import Plan, PlanError, parse_plan
from conductor_rl.plan.roster import Roster, as_roster
from conductor_rl.rollout.recursion import discounted_reward
from conductor_rl.rollout.workflow import (
    InnerCall,
    StepLimits,
    StepTrace,
    Task,
    WorkflowResult,
    limits_per_worker,
    run_plan,
)
from conductor_rl.workers.providers.base import Provider

if TYPE_CHECKING:
    from conductor_rl.rollout.recursion import Recursion


@dataclass
class Rollout:
    task: Task
    completion: str
    plan: Plan | None = None
    plan_error: str | None = None
    workflow: WorkflowResult | None = None
    grade: GradeResult | None = None
    reward: float | None = None
    # Training: where it sits in the batch, what the sampler produced, and what GRPO made of it.
    group: int = 0
    sample: int = 0
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    advantage: float | None = None
    attempts: int = 0  # executions of its plan (more than one after infrastructure errors)
    roster: Roster | None = None  # the workers its prompt listed (None: the whole pool); plan ids index it
    forced: bool = False  # its group was forced to recurse (recursive training)
    discount: float = 0.0  # of the reward when it did not recurse (rollout/recursion.py; training only)
    weights_version: int = 0  # of the weights that sampled the completion (asynchronous training)

    @property
    def inner_calls(self) -> list[InnerCall]:
        """Its recursive calls, at every depth (none without recursion)."""
        return [] if self.workflow is None else self.workflow.inner_calls()

    @property
    def pool_plan(self) -> Plan | None:
        """The plan with the pool's worker indices (the same plan when the prompt listed the whole pool)."""
        if self.plan is None or self.roster is None:
            return self.plan
        return self.roster.pool_plan(self.plan)

    @property
    def written_plan(self) -> Plan | None:
        """The plan with the numbers the Conductor wrote (its roster's model ids)."""
        if self.plan is None or self.roster is None:
            return self.plan
        return self.roster.written_plan(self.plan)

    @property
    def infrastructure_error(self) -> str | None:
        """Why this rollout has no reward although its plan parsed, if it has none."""
        if self.workflow is not None and self.workflow.error:
            return self.workflow.error
        if self.grade is not None and self.grade.verdict is Verdict.ERROR:
            return f"grader: {self.grade.detail}"
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record (no secrets: requests carry no keys)."""
        wf, plan, pool_plan, written = self.workflow, self.plan, self.pool_plan, self.written_plan
        return {
            "question_id": self.task.id,
            "question": self.task.question,
            "domain": self.task.domain,
            "reference": self.task.reference,
            "completion": self.completion,
            "plan": None
            if plan is None or pool_plan is None or written is None
            else [
                {
                    "model_id": w.model_id,
                    "pool_model_id": p.model_id,
                    "roster_place": s.model_id,
                    "subtask": s.subtask,
                    "access": s.access,
                }
                for s, p, w in zip(plan.steps, pool_plan.steps, written.steps)
            ],
            "roster": None if self.roster is None else list(self.roster.workers),
            "roster_model_ids": None if self.roster is None else list(self.roster.model_ids),
            "plan_error": self.plan_error,
            "steps": [] if wf is None else [step_record(s) for s in wf.steps],
            "final_answer": None if wf is None else wf.final_answer,
            "verdict": None if self.grade is None else self.grade.verdict.value,
            "extracted_answer": None if self.grade is None else self.grade.extracted,
            "grade_detail": None if self.grade is None else self.grade.detail,
            "reward": self.reward,
            "infrastructure_error": self.infrastructure_error,
            "cost_usd": 0.0 if wf is None else wf.cost_usd,
            "wall_s": 0.0 if wf is None else wf.wall_s,
            "simulated": bool(wf and wf.simulated),
            "group": self.group,
            "sample": self.sample,
            "completion_tokens": len(self.completion_ids),
            "advantage": self.advantage,
            "attempts": self.attempts,
            "recursive_calls": len(self.inner_calls),
            "sampled_weights_version": self.weights_version,
            "forced_recursion": self.forced,
        }


def step_record(step: StepTrace) -> dict[str, Any]:
    """A step as a JSON-ready dict; a step given to the Conductor carries its recursive call
    (`inner`) with the inner plan's own steps: the recursion tree."""
    record = {k: v for k, v in asdict(step).items() if k not in ("usage", "inner")}
    record["usage"] = asdict(step.usage)
    record["inner"] = None if step.inner is None else inner_record(step.inner)
    return record


def inner_record(call: InnerCall) -> dict[str, Any]:
    wf = call.workflow
    return {
        "depth": call.depth,
        "forced": call.forced,
        "at_limit": call.at_limit,
        "kept": call.kept,
        "incoming_correct": call.incoming_correct,
        "completion": call.completion,
        "completion_tokens": len(call.completion_ids),
        "plan": None
        if call.plan is None
        else [{"model_id": s.model_id, "subtask": s.subtask, "access": s.access} for s in call.plan.steps],
        "plan_error": call.plan_error,
        "answer": call.answer,
        "steps": [] if wf is None else [step_record(s) for s in wf.steps],
    }


async def run_rollout(
    completion: str,
    task: Task,
    workers: Sequence[Provider],
    limits: StepLimits | Sequence[StepLimits] = StepLimits(),
    max_steps: int = 5,
    math_grader: MathGrader | None = None,
    sample_key: str = "",
    recursion: Recursion | None = None,
    on_step: Callable[[StepTrace], None] | None = None,
    roster: Roster | None = None,
) -> Rollout:
    """Parse `completion`, run its plan (`on_step`: see `run_plan`) and grade the final answer.
    `roster`: what the prompt listed, `workers` being its members in order (None: `workers`,
    numbered 0..n-1)."""
    rollout = Rollout(task=task, completion=completion, roster=roster)
    listed = as_roster(len(workers)) if roster is None else roster
    try:
        rollout.plan = parse_plan(completion, len(listed), max_steps, ids=listed.model_ids)
    except PlanError as err:
        rollout.plan_error = err.reason
        rollout.reward = grading.reward(False, None)
        return rollout
    rollout.workflow = await run_plan(
        rollout.plan,
        task,
        workers,
        limits,
        sample_key=sample_key,
        recursion=None if recursion is None else recursion.for_plan(completion, roster=listed),
        on_step=on_step,
    )
    if rollout.workflow.error:
        return rollout  # reward stays None: not the policy's fault
    if rollout.workflow.plan_error:
        rollout.plan_error = rollout.workflow.plan_error
        rollout.reward = grading.reward(False, None)
        return rollout
    grade = await asyncio.to_thread(grade_answer, task, rollout.workflow.final_answer or "", math_grader)
    apply_grade(rollout, grade)
    return rollout


def grade_answer(task: Task, answer: str, math_grader: MathGrader | None = None) -> GradeResult:
    """Grade with the grader the task's answer kind names; a kind without a
    grader yet is an ERROR verdict (dropped), never a silent wrong. Code kinds
    are graded against the tests in `task.meta` and need no reference."""
    if not task.reference and task.answer_kind not in grading.REFERENCE_FREE_KINDS:
        return GradeResult(Verdict.ERROR, None, "no reference answer to grade against")
    if task.answer_kind not in grading.KINDS:
        return GradeResult(
            Verdict.ERROR, None, f"no grader for answer kind {task.answer_kind!r} (have {sorted(grading.KINDS)})"
        )
    return grading.grade(task.answer_kind, answer, task.reference, math=math_grader, meta=task.meta)


# The training loop's steps over a whole batch (jobs/train.py): parse every
# completion, run every parsed plan at once, grade through any grading service.


def parse_rollout(rollout: Rollout, listed: int | Roster, max_steps: int) -> Rollout:
    """Parse the completion against its roster (else `listed`: the pool's roster, or Model
    0..n-1); an unparsable plan, or one naming a model its prompt did not list, gets its
    reward (0) at once."""
    try:
        roster = rollout.roster if rollout.roster is not None else as_roster(listed)
        rollout.plan = parse_plan(rollout.completion, len(roster), max_steps, ids=roster.model_ids)
    except PlanError as err:
        rollout.plan_error = err.reason
        rollout.reward = grading.reward(False, None)
    return rollout


def unfinished(rollouts: Sequence[Rollout]) -> list[Rollout]:
    """Parsed rollouts without a reward: never run, or hit an infrastructure error."""
    return [r for r in rollouts if r.plan is not None and r.reward is None]


def needs_execution(rollouts: Sequence[Rollout]) -> list[Rollout]:
    """Parsed plans never run, or whose run failed (a grader failure needs no re-run: the answer stands)."""
    return [r for r in rollouts if r.plan is not None and (r.workflow is None or r.workflow.error)]


async def execute_rollouts(
    rollouts: Sequence[Rollout],
    workers: Sequence[Provider],
    limits: StepLimits | Sequence[StepLimits],
    key: str = "",
    recursion: Recursion | None = None,
    on_done: Callable[[Rollout], None] | None = None,
) -> None:
    """Run every rollout's plan concurrently (a re-run replaces the failed
    attempt's workflow). `key` seeds simulated workers per run. A rollout with a roster runs on
    its roster's workers only: `workers` and `limits` are the whole pool's. `recursion`: how
    plans call the Conductor again (a forced rollout ends with one call at least) and the discount
    of a non-recursive reward. `on_done`
    hears each rollout as its plan finishes (training starts grading it then)."""
    per_worker = limits_per_worker(limits, len(workers))

    async def run(rollout: Rollout, plan: Plan) -> None:
        rollout.attempts += 1
        rollout.grade = None
        if recursion is not None and recursion.discount:
            rollout.discount = recursion.discount  # training: every group's non-recursive rollouts are discounted
        roster = rollout.roster
        inner = (
            None
            if recursion is None
            else recursion.for_plan(
                rollout.completion,
                forced_below=max(recursion.forced_below, 1) if rollout.forced else None,
                roster=roster,  # None: the whole pool, which `Recursion.call` lists as Model 0..n-1
            )
        )
        rollout.workflow = await run_plan(
            plan,
            rollout.task,
            workers if roster is None else roster.select(workers),
            per_worker if roster is None else roster.select(per_worker),
            sample_key=f"{key}/{rollout.group}/{rollout.sample}/{rollout.attempts}",
            recursion=inner,
        )
        if not rollout.workflow.error and rollout.workflow.plan_error:
            rollout.plan_error = rollout.workflow.plan_error  # the policy's failure, at some depth: reward 0
            rollout.reward = grading.reward(False, None)
        if on_done is not None:
            on_done(rollout)

    await asyncio.gather(*(run(r, r.plan) for r in rollouts if r.plan is not None))


def ready_to_grade(rollouts: Sequence[Rollout]) -> list[Rollout]:
    """Finished workflows not graded yet, or whose grading failed (graded again)."""
    return [
        r
        for r in rollouts
        if r.workflow is not None
        and not r.workflow.error
        and not r.workflow.plan_error
        and (r.grade is None or r.grade.verdict is Verdict.ERROR)
    ]


def grade_request(rollout: Rollout) -> GradeRequest:
    """What a grading service needs to grade a rollout's final answer."""
    wf = rollout.workflow
    assert wf is not None, "only a finished workflow is graded (see ready_to_grade)"
    return GradeRequest(rollout.task.answer_kind, wf.final_answer or "", rollout.task.reference, meta=rollout.task.meta)


def apply_grade(rollout: Rollout, result: GradeResult) -> None:
    """ERROR is the grader's failure, not the answer's: no reward (retried or dropped).
    An empty final answer after a length stop is TRUNCATED, whatever the grader said of ''."""
    if result.verdict is not Verdict.ERROR and rollout.workflow is not None and rollout.workflow.empty_after_length:
        last = rollout.workflow.steps[-1]
        result = GradeResult(
            Verdict.TRUNCATED,
            None,
            f"worker {last.worker!r} used its whole output budget ({last.usage.output_tokens} "
            f"tokens, {last.usage.reasoning_tokens} reasoning) and wrote no answer",
        )
    rollout.grade = result
    if result.verdict is Verdict.ERROR:
        rollout.reward = None
        return
    reward = grading.reward(True, result.verdict)
    assert reward is not None  # only ERROR has none, and it returned above
    grade_incoming(rollout, result)
    rollout.reward = discounted_reward(reward, rollout.inner_calls, rollout.discount)


def grade_incoming(rollout: Rollout, final: GradeResult, math_grader: MathGrader | None = None) -> None:
    """Record, for each recursive call really made, whether the answer it was shown was right
    (the stop statistics, `StopCounts`). An answer that is the final one takes the final verdict;
    any other is graded with the task's grader, as the final answer was (cheap for simulated workers)."""
    final_answer = rollout.workflow.final_answer if rollout.workflow is not None else None
    for call in rollout.inner_calls:
        if not call.made or call.incoming_correct is not None:
            continue
        same = call.current_answer == final_answer
        verdict = final.verdict if same else grade_answer(rollout.task, call.current_answer, math_grader).verdict
        call.incoming_correct = None if verdict is Verdict.ERROR else verdict is Verdict.CORRECT
