"""The workflow engine: run a Plan's steps against the worker pool.

A step starts as soon as every step it may read has finished, so independent
steps run in parallel and a plan takes the time of its critical path. Each step
is recorded (worker, prompt, response, tokens, cost, latency, error). A worker
failure never raises out of `run_plan`: it marks the result as an
infrastructure error, steps that have not started are skipped (their result
could no longer count), and calls already in flight finish so that their cost
is recorded.

A worker is anything with `async complete(WorkerRequest) -> WorkerResponse`.
The Conductor itself may sit in the pool (`provider: conductor`): a step given
to it is a recursive call (conductor_rl/rollout/recursion.py), whose result,
an `InnerCall` with the inner plan's own steps, hangs under the step, so a
trace holds the whole recursion tree.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from conductor_rl.data.difficulty import UNKNOWN, difficulty_of
from conductor_rl.plan import Plan
from conductor_rl.plan.prompts import ANSWER_INSTRUCTIONS, worker_messages
from conductor_rl.workers.providers.base import CallKey, Provider, ProviderError, TaskHint, Usage, WorkerRequest

if TYPE_CHECKING:
    from conductor_rl.config import Config, WorkerConfig
    from conductor_rl.data.question import Question


@dataclass(frozen=True)
class Task:
    """The question a plan answers, as the engine needs it."""

    id: str
    question: str
    domain: str = "default"
    reference: str = ""
    answer_kind: str = "exact"
    # What a grader needs beyond the reference (a code question's tests); not hashed, so the task stays hashable.
    meta: dict = field(default_factory=dict, hash=False)
    # conductor_rl/data/difficulty.py, for simulated workers only. Derived from the question's source,
    # which a task does not keep, so it stays out of equality: two tasks of one question are one task.
    difficulty: float = field(default=UNKNOWN, compare=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.difficulty <= 1.0:
            raise ValueError(
                f"Task {self.id!r}: difficulty {self.difficulty} must be between 0 and 1 "
                "(conductor_rl/data/difficulty.py; leave it unset for the middle of the scale)"
            )

    @property
    def answer_format(self) -> str | None:
        """The answer instruction of the grader this task goes to (None: no grader, a user's own question)."""
        graded = bool(self.reference) or self.answer_kind.startswith("code_")
        return ANSWER_INSTRUCTIONS.get(self.answer_kind) if graded else None

    @classmethod
    def of(cls, question: Question) -> Task:
        """A benchmark question (conductor_rl/data/question.py) as the workflow engine and the graders need it."""
        return cls(
            id=question.id,
            question=question.question,
            domain=question.domain,
            reference=question.reference,
            answer_kind=question.answer_kind,
            meta=dict(question.meta),
            difficulty=difficulty_of(question.source, question.meta),
        )


@dataclass
class StepTrace:
    index: int
    model_id: int
    worker: str
    subtask: str
    access: list[int]
    messages: list[dict[str, str]] = field(default_factory=list)
    response: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    latency_s: float = 0.0
    started_s: float | None = None  # seconds since the workflow started
    finished_s: float | None = None
    error: str | None = None  # "kind: message" when the step failed or was skipped
    simulated: bool = False
    reasoning: str = ""  # the worker's reasoning text, never its answer (WorkerResponse)
    finish_reason: str = ""  # "stop", "length" or "" (not reported)
    inner: InnerCall | None = None  # a step given to the Conductor: its recursive call

    @property
    def empty_after_length(self) -> bool:
        """The worker's output budget ran out before it wrote any answer."""
        return self.error is None and self.finish_reason == "length" and not (self.response or "").strip()


@dataclass
class InnerCall:
    """One recursive call of the Conductor (paper §3.2): shown the question, the plan
    that called it (`parent`) and the answer so far, it wrote a plan that ran at
    `depth` (`workflow`), or three empty lists, which keep the answer so far."""

    depth: int
    current_answer: str  # the answer so far, kept when the call writes no plan
    forced: bool = False  # made by the engine after a plan, not by a plan's step
    prompt_ids: tuple[int, ...] = ()
    completion: str = ""  # what the Conductor wrote (prefix included)
    completion_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    plan: Plan | None = None
    plan_error: str | None = None  # the completion did not parse: the rollout's reward is 0
    workflow: WorkflowResult | None = None
    at_limit: bool = False  # beyond the maximum depth: no call was made, the answer stands
    weights_version: int = 0  # of the weights that sampled the completion
    incoming_correct: bool | None = None  # was `current_answer` right (set when the rollout is graded)

    @property
    def made(self) -> bool:
        """The Conductor was really asked (not cut off by the depth limit)."""
        return not self.at_limit

    @property
    def kept(self) -> bool:
        """The answer so far stands: empty lists, or the depth limit."""
        return self.plan_error is None and self.workflow is None

    @property
    def answer(self) -> str | None:
        if self.plan_error is not None:
            return None
        return self.current_answer if self.workflow is None else self.workflow.final_answer


@dataclass
class WorkflowResult:
    steps: list[StepTrace]
    wall_s: float
    error: str | None = None  # set when any step failed: an infrastructure error, not a wrong answer

    @property
    def final_answer(self) -> str | None:
        return None if self.error or self.plan_error or not self.steps else self.steps[-1].response

    @property
    def cost_usd(self) -> float:
        return sum(s.cost_usd for s in self.steps)

    @property
    def usage(self) -> Usage:
        return Usage(
            input_tokens=sum(s.usage.input_tokens for s in self.steps),
            output_tokens=sum(s.usage.output_tokens for s in self.steps),
            reasoning_tokens=sum(s.usage.reasoning_tokens for s in self.steps),
            cached_tokens=sum(s.usage.cached_tokens for s in self.steps),
        )

    def inner_calls(self) -> list[InnerCall]:
        """Every recursive call in the tree below this workflow, parents before their children."""
        calls = []
        for step in self.steps:
            if step.inner is not None:
                calls.append(step.inner)
                if step.inner.workflow is not None:
                    calls.extend(step.inner.workflow.inner_calls())
        return calls

    def worker_steps(self) -> list[StepTrace]:
        """The steps that called a worker, at every depth (a step given to the Conductor is not one)."""
        steps = []
        for step in self.steps:
            if step.inner is None:
                steps.append(step)
            elif step.inner.workflow is not None:
                steps.extend(step.inner.workflow.worker_steps())
        return steps

    @property
    def plan_error(self) -> str | None:
        """Why a recursive call's plan did not parse, at any depth (None: every plan parsed)."""
        return next(
            (
                f"recursive call at depth {c.depth}: {c.plan_error}"
                for c in self.inner_calls()
                if c.plan_error is not None
            ),
            None,
        )

    @property
    def simulated(self) -> bool:
        return any(s.simulated for s in self.steps)

    @property
    def empty_after_length(self) -> bool:
        """The final answer is empty because its worker ran out of output tokens."""
        return self.error is None and bool(self.steps) and self.steps[-1].empty_after_length


@dataclass(frozen=True)
class StepLimits:
    max_tokens: int = 4096
    temperature: float = 0.2
    reasoning_budget: int | None = None
    timeout_s: float = 900.0
    max_context_chars: int = 32_000
    show_question: bool = False
    answer_format: bool = True  # the last step of a plan is told the grader's answer format
    reasoning: str = "default"
    reasoning_in_context: bool = False  # later steps may read this worker's reasoning too

    @classmethod
    def for_worker(cls, worker: WorkerConfig, config: Config) -> StepLimits:
        """How one worker's steps are called: its own settings, within the workflow's."""
        return cls(
            max_tokens=worker.max_tokens,
            temperature=worker.temperature,
            reasoning_budget=worker.reasoning_budget,
            reasoning=worker.reasoning,
            reasoning_in_context=worker.reasoning_in_context,
            timeout_s=min(worker.timeout_s, config.workflow.step_timeout_s),
            max_context_chars=config.workflow.max_context_chars,
            show_question=config.workflow.show_question,
            answer_format=config.workflow.answer_format,
        )


def limits_per_worker(limits: StepLimits | Sequence[StepLimits], n_workers: int) -> list[StepLimits]:
    """One StepLimits per worker, from one for all or a list of them."""
    return [limits] * n_workers if isinstance(limits, StepLimits) else list(limits)


def keep_answer(depth: int, current: str, forced: bool = False, at_limit: bool = False) -> InnerCall:
    """A call that keeps the answer so far without asking the Conductor."""
    return InnerCall(depth, current, forced, at_limit=at_limit)


class RecursiveCaller(Protocol):
    """How a step given to the Conductor calls it again: `Recursion` (conductor_rl/rollout/recursion.py),
    which runs the inner plan with this engine."""

    @property
    def forces_call(self) -> bool:
        """A plan that made no call of its own ends with one (recursive training's forced groups only)."""
        ...

    async def call(
        self,
        task: Task,
        current: str,
        workers: Sequence[Provider],
        limits: Sequence[StepLimits],
        key: str,
        forced: bool = False,
    ) -> InnerCall: ...


async def run_plan(
    plan: Plan,
    task: Task,
    workers: Sequence[Provider],
    limits: StepLimits | Sequence[StepLimits] = StepLimits(),
    sample_key: str = "",
    recursion: RecursiveCaller | None = None,
    answer_so_far: str | None = None,
    on_step: Callable[[StepTrace], None] | None = None,
) -> WorkflowResult:
    """Execute `plan` for `task`. `workers[i]` serves "Model i"; `limits` is one
    StepLimits for all workers or one per worker. Never raises for worker faults.
    `recursion`: how a step given to the Conductor (and, where it forces one, the end
    of the plan) calls the Conductor again; without it such a step keeps the answer so
    far. `answer_so_far`: the answer an inner plan improves on, shown to every step.
    `on_step`: called with each step's trace as it finishes (a served request streams them)."""
    per_worker = limits_per_worker(limits, len(workers))
    start = time.perf_counter()
    traces = [
        StepTrace(
            index=i,
            model_id=s.model_id,
            worker=_worker_name(workers, s.model_id),
            subtask=s.subtask,
            access=plan.visible(i),
        )
        for i, s in enumerate(plan.steps)
    ]
    done: list[asyncio.Event] = [asyncio.Event() for _ in traces]
    failed = asyncio.Event()

    async def run_step(trace: StepTrace) -> None:
        try:
            bad = [j for j in trace.access if not 0 <= j < trace.index]
            if bad:
                # parse_plan rejects these; a hand-built Plan must not deadlock (self or later
                # step) or crash (index out of range) the engine.
                trace.error = f"bad_access: step {trace.index} may only read earlier steps, not {bad}"
                failed.set()
                return
            for j in trace.access:
                await done[j].wait()
            if failed.is_set():
                trace.error = "skipped: an earlier step failed"
                return
            if is_conductor(workers, trace.model_id):
                # The answer so far: the latest step it may read, else the one this plan improves on.
                current = (traces[max(trace.access)].response or "") if trace.access else (answer_so_far or "")
                await _call_conductor(trace, task, workers, per_worker, sample_key, start, recursion, current)
            else:
                await _call_worker(trace, traces, task, workers, per_worker, sample_key, start, answer_so_far)
            if trace.error or (trace.inner is not None and trace.inner.answer is None):
                failed.set()
        finally:
            done[trace.index].set()
            if on_step is not None:
                on_step(trace)

    await asyncio.gather(*(run_step(t) for t in traces))
    result = WorkflowResult(steps=traces, wall_s=time.perf_counter() - start, error=_first_error(traces))
    if (
        recursion is not None
        and recursion.forces_call
        and traces
        and not failed.is_set()
        and not any(t.inner is not None for t in traces)
    ):
        # Recursive training's forced groups (never inference): the plan's answer goes back to the Conductor.
        forced = StepTrace(
            index=len(traces),
            model_id=FORCED_CALL,
            worker=CONDUCTOR_NAME,
            subtask="(forced) improve the answer so far, or keep it",
            access=[len(traces) - 1],
        )
        traces.append(forced)
        await _call_conductor(
            forced, task, workers, per_worker, sample_key, start, recursion, traces[-2].response or "", forced=True
        )
        if on_step is not None:
            on_step(forced)
        result = WorkflowResult(steps=traces, wall_s=time.perf_counter() - start, error=_first_error(traces))
    return result


FORCED_CALL = -1  # the model id of a forced call's step: no "Model i" of the plan made it
CONDUCTOR_NAME = "conductor"


def is_conductor(workers: Sequence[Provider], model_id: int) -> bool:
    """Is "Model `model_id`" the Conductor itself (`provider: conductor`)?"""
    return 0 <= model_id < len(workers) and getattr(workers[model_id], "is_conductor", False)


def _first_error(traces: Sequence[StepTrace]) -> str | None:
    return next((f"step {t.index}: {t.error}" for t in traces if t.error and not t.error.startswith("skipped")), None)


async def _call_conductor(
    trace: StepTrace,
    task: Task,
    workers: Sequence[Provider],
    limits: Sequence[StepLimits],
    sample_key: str,
    start: float,
    recursion: RecursiveCaller | None,
    current: str,
    forced: bool = False,
) -> None:
    """A step given to the Conductor: a recursive call, whose inner plan's totals are the step's."""
    trace.started_s = time.perf_counter() - start
    try:
        if recursion is None:  # a plan run without a Conductor to call (a baseline's, a check's)
            inner = keep_answer(0, current, forced, at_limit=True)
        else:
            inner = await recursion.call(task, current, workers, limits, f"{sample_key}/{trace.index}", forced)
    except Exception as err:  # the generator failed: infrastructure, retried like a worker's failure
        trace.error = f"conductor: {type(err).__name__}: {err}"
    else:
        trace.inner = inner
        trace.response = inner.answer
        wf = inner.workflow
        if wf is not None:
            trace.usage, trace.cost_usd, trace.simulated = wf.usage, wf.cost_usd, wf.simulated
            if wf.error:
                trace.error = f"inner plan: {wf.error}"
    trace.finished_s = time.perf_counter() - start
    trace.latency_s = trace.finished_s - trace.started_s


async def _call_worker(
    trace: StepTrace,
    traces: list[StepTrace],
    task: Task,
    workers: Sequence[Provider],
    limits: Sequence[StepLimits],
    sample_key: str,
    start: float,
    answer_so_far: str | None = None,
) -> None:
    if not 0 <= trace.model_id < len(workers):
        # parse_plan rejects these; kept so a hand-built Plan cannot crash the engine.
        trace.error = f"unknown_worker: model {trace.model_id} is not in a pool of {len(workers)}"
        return
    worker, limit = workers[trace.model_id], limits[trace.model_id]
    context = [(j, traces[j].subtask, _readable_output(traces[j], limits)) for j in trace.access]
    last = trace.index == len(traces) - 1
    trace.messages = worker_messages(
        trace.subtask,
        context,
        question=task.question if limit.show_question else None,
        max_context_chars=limit.max_context_chars,
        answer_so_far=answer_so_far,
        answer_format=task.answer_format if limit.answer_format and last else None,
    )
    hint = None
    if getattr(worker, "simulated", False):
        # In step order: a simulated check judges the latest answer it reads (conductor_rl/workers/sim_rules.py).
        visible = ((answer_so_far,) if answer_so_far else ()) + tuple(a for _, _, a in sorted(context))
        hint = TaskHint(
            task.id,
            task.domain,
            task.reference,
            task.answer_kind,
            visible_answers=visible,
            sample_key=f"{sample_key}/{trace.index}",
            question=task.question,
            subtask=trace.subtask,
            difficulty=task.difficulty,
        )
    request = WorkerRequest(
        trace.messages,
        limit.max_tokens,
        limit.temperature,
        limit.reasoning_budget,
        hint,
        reasoning=limit.reasoning,
        key=CallKey(task.id, sample_key, trace.index),
    )
    trace.started_s = time.perf_counter() - start
    try:
        async with asyncio.timeout(limit.timeout_s):  # unlike wait_for, no extra task per call
            response = await worker.complete(request)
    except TimeoutError:
        trace.error = f"timeout: no answer within {limit.timeout_s:g}s"
    except ProviderError as err:
        trace.error = f"{err.kind}: {err}"
    except Exception as err:  # a bug in a provider must not end the run
        trace.error = f"exception: {type(err).__name__}: {err}"
    else:
        trace.response = response.text
        trace.usage = response.usage
        trace.cost_usd = response.cost_usd
        trace.latency_s = response.latency_s
        trace.simulated = response.simulated
        trace.reasoning = response.reasoning
        trace.finish_reason = response.finish_reason
    trace.finished_s = time.perf_counter() - start


def _readable_output(step: StepTrace, limits: Sequence[StepLimits]) -> str:
    """What a later step sees of `step`: its answer; its reasoning too only where its
    worker's `reasoning_in_context` says so (reasoning is long, and a worker's own business)."""
    answer = step.response or ""
    shows = 0 <= step.model_id < len(limits) and limits[step.model_id].reasoning_in_context
    if shows and step.reasoning:
        return f"<think>\n{step.reasoning}\n</think>\n{answer}"
    return answer


def _worker_name(workers: Sequence[Provider], model_id: int) -> str:
    return workers[model_id].name if 0 <= model_id < len(workers) else f"<unknown model {model_id}>"
