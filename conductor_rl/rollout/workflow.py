"""The workflow engine: run a Plan's steps against the worker pool.

A step starts as soon as every step it may read has finished, so independent
steps run in parallel and a plan takes the time of its critical path. Each step
is recorded (worker, prompt, response, tokens, cost, latency, error). A worker
failure never raises out of `run_plan`: it marks the result as an
infrastructure error, steps that have not started are skipped (their result
could no longer count), and calls already in flight finish so that their cost
is recorded.

A worker is anything with `async complete(WorkerRequest) -> WorkerResponse`;
that is also how the Conductor itself will join the pool (recursion).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from conductor_rl.plan import Plan
from conductor_rl.plan.prompts import worker_messages
from conductor_rl.workers.providers.base import Provider, ProviderError, TaskHint, Usage, WorkerRequest

if TYPE_CHECKING:
    from conductor_rl.config import Config, WorkerConfig


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
    started_s: float | None = None   # seconds since the workflow started
    finished_s: float | None = None
    error: str | None = None         # "kind: message" when the step failed or was skipped
    simulated: bool = False
    reasoning: str = ""              # the worker's reasoning text, never its answer (WorkerResponse)
    finish_reason: str = ""          # "stop", "length" or "" (not reported)

    @property
    def empty_after_length(self) -> bool:
        """The worker's output budget ran out before it wrote any answer."""
        return self.error is None and self.finish_reason == "length" and not (self.response or "").strip()


@dataclass
class WorkflowResult:
    steps: list[StepTrace]
    wall_s: float
    error: str | None = None    # set when any step failed: an infrastructure error, not a wrong answer

    @property
    def final_answer(self) -> str | None:
        return None if self.error or not self.steps else self.steps[-1].response

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
    reasoning: str = "default"
    reasoning_in_context: bool = False    # later steps may read this worker's reasoning too

    @classmethod
    def for_worker(cls, worker: "WorkerConfig", config: "Config") -> "StepLimits":
        """How one worker's steps are called: its own settings, within the workflow's."""
        return cls(max_tokens=worker.max_tokens, temperature=worker.temperature,
                   reasoning_budget=worker.reasoning_budget, reasoning=worker.reasoning,
                   reasoning_in_context=worker.reasoning_in_context,
                   timeout_s=min(worker.timeout_s, config.workflow.step_timeout_s),
                   max_context_chars=config.workflow.max_context_chars,
                   show_question=config.workflow.show_question)


def limits_per_worker(limits: StepLimits | Sequence[StepLimits], n_workers: int) -> list[StepLimits]:
    """One StepLimits per worker, from one for all or a list of them."""
    return [limits] * n_workers if isinstance(limits, StepLimits) else list(limits)


async def run_plan(
    plan: Plan,
    task: Task,
    workers: Sequence[Provider],
    limits: StepLimits | Sequence[StepLimits] = StepLimits(),
    sample_key: str = "",
) -> WorkflowResult:
    """Execute `plan` for `task`. `workers[i]` serves "Model i"; `limits` is one
    StepLimits for all workers or one per worker. Never raises for worker faults."""
    per_worker = limits_per_worker(limits, len(workers))
    start = time.perf_counter()
    traces = [
        StepTrace(index=i, model_id=s.model_id, worker=_worker_name(workers, s.model_id),
                  subtask=s.subtask, access=plan.visible(i))
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
            await _call_worker(trace, traces, task, workers, per_worker, sample_key, start)
            if trace.error:
                failed.set()
        finally:
            done[trace.index].set()

    await asyncio.gather(*(run_step(t) for t in traces))
    first_error = next((f"step {t.index}: {t.error}" for t in traces if t.error and not t.error.startswith("skipped")), None)
    return WorkflowResult(steps=traces, wall_s=time.perf_counter() - start, error=first_error)


async def _call_worker(
    trace: StepTrace,
    traces: list[StepTrace],
    task: Task,
    workers: Sequence[Provider],
    limits: Sequence[StepLimits],
    sample_key: str,
    start: float,
) -> None:
    if not 0 <= trace.model_id < len(workers):
        # parse_plan rejects these; kept so a hand-built Plan cannot crash the engine.
        trace.error = f"unknown_worker: model {trace.model_id} is not in a pool of {len(workers)}"
        return
    worker, limit = workers[trace.model_id], limits[trace.model_id]
    context = [(j, traces[j].subtask, _readable_output(traces[j], limits)) for j in trace.access]
    trace.messages = worker_messages(
        trace.subtask, context, question=task.question if limit.show_question else None,
        max_context_chars=limit.max_context_chars,
    )
    hint = None
    if getattr(worker, "simulated", False):
        hint = TaskHint(task.id, task.domain, task.reference, task.answer_kind,
                        visible_answers=tuple(a for _, _, a in context), sample_key=f"{sample_key}/{trace.index}")
    request = WorkerRequest(trace.messages, limit.max_tokens, limit.temperature, limit.reasoning_budget, hint,
                            reasoning=limit.reasoning)
    trace.started_s = time.perf_counter() - start
    try:
        async with asyncio.timeout(limit.timeout_s):  # unlike wait_for, no extra task per call
            response = await worker.complete(request)
    except asyncio.TimeoutError:
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
