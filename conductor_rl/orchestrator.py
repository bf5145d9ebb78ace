"""The public Python API: a Conductor and its workers answering questions.

    from conductor_rl import Orchestrator

    orchestrator = Orchestrator.from_config("configs/local.yaml", conductor="runs/local/checkpoints/ckpt-000007/model")
    answer = orchestrator.answer("What is 17 * 23?", reference="391", kind="numeric")

`answer` samples the Conductor's plans in this process (transformers), runs the
first that parses on the workers and grades the final answer when there is a
reference, as `conductor-rl ask` does (`ask.samples` plans at `ask.temperature`).
`answer_many` answers several questions at once: the Conductor samples the plans
of all of them in one batch (`Conductor.write_plans_many`; chunks of
`plan_batch` questions when there are many), then every workflow of the batch
runs concurrently; a later chunk is sampled while the earlier chunks' workflows
run. Question i of a chunk draws with its own seed (`prompt_seed(seed, i)`, as
generation.py does), the chunk's seed being `conductor.seed` plus the
chunk's number, so `answer(q)` samples what the first question of
`answer_many` samples.

Workers: by default each configured worker is built in this process behind
`GuardedProvider`, with its own rate limiter, its retries and one `CostLedger`
shared by all (capped by `budget_usd`), as a worker replica on a Ray cluster
calls it. On a cluster, pass the worker pools as `workers=`
(jobs/training_system.py `start_worker_pools`): the library never imports Ray.

Everything runs on one event loop in a thread the Orchestrator owns, so
providers (HTTP clients, limiters) stay bound to one loop, and `answer` works
the same from a script, a notebook or a running event loop (`answer_async`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Coroutine, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from conductor_rl import grading
from conductor_rl.config import Config, load_config
from conductor_rl.data import Question
from conductor_rl.grading import SCORED_VERDICTS, MathGrader
from conductor_rl.plan import Plan
from conductor_rl.plan.roster import Roster, with_workers
from conductor_rl.rollout.recursion import BatchedPlanWriter, Recursion
from conductor_rl.rollout.rollouts import Rollout, inner_record, run_rollout
from conductor_rl.rollout.workflow import StepTrace, Task
from conductor_rl.system import System
from conductor_rl.workers.guarded import GuardedProvider
from conductor_rl.workers.ledger import CostLedger, refused_by_ledger
from conductor_rl.workers.limits import AsyncRateLimiter, WindowLimits
from conductor_rl.workers.providers import Provider, Usage, build_provider, cached
from conductor_rl.workers.retry import RetryPolicy

if TYPE_CHECKING:
    from conductor_rl.plan.shape import PlanShape
    from conductor_rl.policy.conductor import Completion
    from conductor_rl.policy.sampling import Sample

T = TypeVar("T")

RATE_WINDOW_S = 60.0  # providers state their limits per minute


@dataclass(frozen=True)
class AnswerStep:
    """One step of the plan as it ran."""

    index: int
    model_id: int  # the worker's place in the roster (the plan named it by the roster's number for that place)
    worker: str  # the worker's name
    subtask: str
    access: tuple[int, ...]  # the earlier steps whose answers it read
    messages: tuple[dict, ...]  # what the worker was sent
    response: str | None  # its output (None when the step failed or was skipped)
    usage: Usage
    cost_usd: float
    latency_s: float
    started_s: float | None  # seconds after the workflow started
    finished_s: float | None
    error: str | None  # "kind: message" when the step failed or was skipped
    simulated: bool
    inner: dict | None = None  # a step given to the Conductor: its recursive call, with its own steps

    @classmethod
    def of(cls, trace: StepTrace) -> AnswerStep:
        values = {f.name: getattr(trace, f.name) for f in fields(cls) if f.name != "inner"}
        return cls(
            **{
                **values,
                "access": tuple(trace.access),
                "messages": tuple(dict(m) for m in trace.messages),
                "inner": None if trace.inner is None else inner_record(trace.inner),
            }
        )


@dataclass(frozen=True)
class Answer:
    """A question answered: the plan, each step, the totals and, when graded, the verdict."""

    question_id: str
    question: str
    domain: str
    reference: str
    answer_kind: str
    final_answer: str | None  # the last step's answer (None after a plan or infrastructure error)
    completion: str  # the Conductor's raw completion whose plan ran (prefix included)
    plan: Plan | None  # as the Conductor wrote it: each step's worker by its number in the roster
    plan_error: str | None  # why the completion did not parse (reward 0)
    steps: tuple[AnswerStep, ...]
    usage: Usage  # tokens of all steps together
    cost_usd: float
    wall_s: float  # the workflow's latency (its critical path)
    simulated: bool  # some worker was simulated: not a real model's answer
    verdict: str | None  # correct | wrong | error (the grader failed); None: not graded
    extracted_answer: str | None
    grade_detail: str | None
    reward: float | None  # 1 correct, 0.5 wrong, 0 unparsable plan, None: not scored
    infrastructure_error: str | None
    completion_tokens: int
    truncated: bool  # the completion was cut off at conductor.max_new_tokens
    conductor_s: float  # time the Conductor took to write the plans of this question's batch
    sample_index: int  # which of the sampled plans ran (the first that parsed)
    samples: int
    other_plan_errors: tuple[str | None, ...]  # why the earlier samples did not run

    @property
    def graded(self) -> bool:
        return self.verdict in SCORED_VERDICTS

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record (`conductor-rl ask --json` prints these)."""
        record = asdict(self)
        record["plan"] = (
            None
            if self.plan is None
            else [{"model_id": s.model_id, "subtask": s.subtask, "access": s.access} for s in self.plan.steps]
        )
        return record

    @classmethod
    def of(cls, attempts: Sequence[Rollout], completions: Sequence[Completion], conductor_s: float) -> Answer:
        """The answer from the rollouts of one question's samples (the last one ran)."""
        chosen, wf, grade = attempts[-1], attempts[-1].workflow, attempts[-1].grade
        task, completion = chosen.task, completions[len(attempts) - 1]
        infrastructure_error, grade_detail = chosen.infrastructure_error, None if grade is None else grade.detail
        if not task.reference and task.answer_kind not in grading.REFERENCE_FREE_KINDS:
            # Nothing to grade against: not graded, rather than a grader's failure.
            grade, grade_detail = None, "not graded: no reference answer"
            infrastructure_error = None if wf is None else wf.error
        return cls(
            question_id=task.id,
            question=task.question,
            domain=task.domain,
            reference=task.reference,
            answer_kind=task.answer_kind,
            final_answer=None if wf is None else wf.final_answer,
            completion=chosen.completion,
            plan=chosen.written_plan,
            plan_error=chosen.plan_error,
            steps=() if wf is None else tuple(AnswerStep.of(s) for s in wf.steps),
            usage=Usage() if wf is None else wf.usage,
            cost_usd=0.0 if wf is None else wf.cost_usd,
            wall_s=0.0 if wf is None else wf.wall_s,
            simulated=bool(wf and wf.simulated),
            verdict=None if grade is None else grade.verdict.value,
            extracted_answer=None if grade is None else grade.extracted,
            grade_detail=grade_detail,
            reward=chosen.reward,
            infrastructure_error=infrastructure_error,
            completion_tokens=completion.completion_tokens,
            truncated=completion.truncated,
            conductor_s=conductor_s,
            sample_index=len(attempts) - 1,
            samples=len(completions),
            other_plan_errors=tuple(a.plan_error for a in attempts[:-1]),
        )


class BudgetSpentError(RuntimeError):
    """The worker budget refused a call, so some workflows stopped before their
    end; the answers (those stopped have an `infrastructure_error`) are in `answers`."""

    def __init__(self, answers: list[Answer]) -> None:
        stopped = [a for a in answers if _stopped_by_budget(a)]
        super().__init__(
            f"{len(stopped)} of {len(answers)} question(s) stopped by the worker budget "
            f"({stopped[0].infrastructure_error}). Pass a larger budget_usd to Orchestrator.from_config "
            f"(conductor-rl ask: --budget-usd), or None for no cap; the answers are in this error's `answers`"
        )
        self.answers = answers


def _stopped_by_budget(answer: Answer) -> bool:
    return any(refused_by_ledger(s.error) for s in answer.steps)


class PlanSampler(Protocol):
    """What writes an Orchestrator's plans: `conductor_rl.policy.conductor.Conductor` (in this process),
    `EngineConductor` (on generator engines), or a test's stand-in."""

    def write_plans_many(
        self,
        questions: Sequence[str],
        n_workers: int | Roster,
        n: int = 1,
        seed: int | None = None,
        temperature: float | None = None,
        answer_formats: Sequence[str | None] | None = None,
    ) -> list[list[Completion]]: ...


class Orchestrator:
    """A Conductor and its workers: `answer(question) -> Answer`.

    Build one with `from_config`; the constructor takes the parts ready-made
    (`conductor`: anything with `write_plans_many(questions, n_workers, n, seed,
    temperature, answer_formats)`, as `conductor_rl.policy.conductor.Conductor`; `workers`: one
    provider per configured worker, in the configuration's order). Close it
    (or use it in a `with` block) to stop its thread and the grader's process.
    """

    # Questions whose plans are sampled in one generation: its key/value cache grows with
    # questions x samples x prompt length, and a chunk's workflows start only once all its
    # plans are written, so a bounded chunk bounds memory and gets the first workflows going.
    plan_batch: int = 16

    def __init__(
        self,
        config: Config,
        conductor: PlanSampler,
        workers: Sequence[Provider],
        *,
        ledger: CostLedger | None = None,
        owns_workers: bool = False,
    ) -> None:
        if len(workers) != len(config.workers):
            raise ValueError(
                f"{len(workers)} worker(s) given for the {len(config.workers)} configured "
                f"({[w.name for w in config.workers]}): pass one per configured worker, in order"
            )
        self.config = config
        self.conductor = conductor
        self.workers = list(workers)
        self.ledger = ledger  # the in-process ledger (None when the workers bring their own)
        # The Conductor's prompt for recursive calls uses its own tokenizer (loaded with its model).
        self.system = System(config, tokenizer=getattr(conductor, "tokenizer", None))
        self.generation = self.system.generation("answer")
        self.limits = self.system.step_limits
        self.roster = self.system.pool_roster  # what the prompt lists: every configured worker, under its number
        self._owns_workers = owns_workers
        self._grader = MathGrader()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="orchestrator-loop", daemon=True)
        self._thread.start()
        self._sampling = asyncio.Lock()  # used on its loop only
        self._closed = False
        self.recursion = self._recursion()

    @classmethod
    def from_config(
        cls,
        config: str | Path | Config | None = None,
        conductor: str | Path | None = None,
        overrides: Sequence[str] = (),
        *,
        workers: Sequence[Provider] | None = None,
        budget_usd: float | None = None,
        worker_names: Sequence[str] | None = None,
    ) -> Orchestrator:
        """Load the configuration (a YAML path, a `Config`, or None for the
        embedded configs/local.yaml) with `key.sub=value` overrides, and the
        Conductor (`conductor`: a model folder such as a checkpoint's `model/`,
        or a model name; default `conductor.model`). Without `workers`, the
        configured workers are built in this process, their spend capped at
        `budget_usd` (None: no cap). `worker_names`: offer the Conductor only these
        workers, each under its number in the whole pool (plan/roster.py; `workers`, if given,
        is then one per named worker). Raises ConfigError naming a bad key, RosterError
        an unknown worker."""
        config = with_workers(load_config(config, list(overrides)), worker_names)
        if conductor is not None:  # set as is: a path is not YAML to parse
            model = config.conductor.model_copy(update={"model": str(conductor)})
            config = config.model_copy(update={"conductor": model})
        ledger = None
        owns_workers = workers is None
        if workers is None:
            workers, ledger = in_process_workers(config, budget_usd)
        elif budget_usd is not None:
            raise ValueError(
                "budget_usd caps in-process workers; given workers spend against their own ledger "
                "(on Ray: start_worker_pools(config, budget_usd=...))"
            )
        if config.workflow.response_cache:
            workers = [cached(p, w, config.workflow.response_cache) for p, w in zip(workers, config.workers)]
        from conductor_rl.policy.conductor import Conductor  # torch: only once an Orchestrator is made

        return cls(config, Conductor(config.conductor), workers, ledger=ledger, owns_workers=owns_workers)

    def answer(
        self,
        question: str | Question | Task,
        *,
        reference: str | None = None,
        kind: str = "math",
        samples: int | None = None,
    ) -> Answer:
        """Answer one question. A str is graded when `reference` is given (`kind`:
        how, e.g. math, numeric, choice, exact); a `Question` carries its own.
        Raises BudgetSpentError when the budget stopped its workflow."""
        [answer] = self.answer_many([as_task(question, reference, kind)], samples=samples)
        return answer

    def answer_many(self, questions: Sequence[str | Question | Task], *, samples: int | None = None) -> list[Answer]:
        """Answer several questions concurrently, in their order. Raises
        BudgetSpentError (holding every answer) when the budget stopped any."""
        return self._run(self._answer_all(questions, samples))

    async def answer_async(
        self,
        question: str | Question | Task,
        *,
        reference: str | None = None,
        kind: str = "math",
        samples: int | None = None,
    ) -> Answer:
        """`answer` for callers inside an event loop."""
        [answer] = await self.answer_many_async([as_task(question, reference, kind)], samples=samples)
        return answer

    async def answer_many_async(
        self, questions: Sequence[str | Question | Task], *, samples: int | None = None
    ) -> list[Answer]:
        """`answer_many` for callers inside an event loop (the work runs on the Orchestrator's)."""
        return await asyncio.wrap_future(self._submit(self._answer_all(questions, samples)))

    async def _answer_all(self, questions: Sequence[str | Question | Task], samples: int | None) -> list[Answer]:
        tasks = [as_task(q, None, "math", index=i) for i, q in enumerate(questions)]
        samples = self.config.ask.samples if samples is None else samples
        if samples < 1:
            raise ValueError(f"samples must be at least 1, got {samples}")
        chunks = [tasks[i : i + self.plan_batch] for i in range(0, len(tasks), self.plan_batch)]
        answered = await asyncio.gather(*(self._answer_chunk(chunk, k, samples) for k, chunk in enumerate(chunks)))
        answers = [answer for chunk in answered for answer in chunk]
        if any(_stopped_by_budget(a) for a in answers):
            raise BudgetSpentError(answers)
        return answers

    async def _answer_chunk(self, tasks: Sequence[Task], number: int, samples: int) -> list[Answer]:
        """Sample the plans of `tasks` in one batch, then run their workflows concurrently."""
        async with self._sampling:  # one model: one chunk's plans at a time, in the order asked
            started = time.perf_counter()
            plans = await asyncio.to_thread(
                self.conductor.write_plans_many,
                [t.question for t in tasks],
                self.roster,
                samples,
                self.generation.seed_for(number),
                self.temperature,
                [t.answer_format for t in tasks],
            )
            conductor_s = time.perf_counter() - started
        return list(await asyncio.gather(*(self._run_plans(t, p, conductor_s) for t, p in zip(tasks, plans))))

    async def _run_plans(self, task: Task, completions: Sequence[Completion], conductor_s: float) -> Answer:
        """Run the first of a question's sampled plans that parses (else the last, with its plan error)."""
        attempts: list[Rollout] = []
        for i, completion in enumerate(completions):
            rollout = await run_rollout(
                completion.text,
                task,
                self.workers,
                self.limits,
                self.config.conductor.max_steps,
                self._grader,
                sample_key=f"answer/{i}",
                recursion=self.recursion,
                roster=self.roster,
            )
            attempts.append(rollout)
            if rollout.plan is not None:
                break
        return Answer.of(attempts, completions, conductor_s)

    def _recursion(self) -> Recursion | None:
        """Recursive calls (conductor.max_depth >= 1: a limit; a plan recurses by giving its seat a step)
        sample from the same in-process model, one batch for the calls made together, never at the
        same time as a chunk's plans (one model, one lock)."""
        sample_ids = getattr(self.conductor, "sample_ids", None)
        if self.config.conductor.max_depth < 1 or sample_ids is None:
            return None

        def sample_batch(prompt_ids: list[list[int]], shapes: list[PlanShape | None], seeds: list[int]) -> list[Sample]:
            return sample_ids(prompt_ids, shapes, seeds, self.temperature)

        return self.system.recursion(
            BatchedPlanWriter(sample_batch, lock=self._sampling), "answer", self.generation.base_seed
        )

    @property
    def temperature(self) -> float:
        """The Conductor's sampling temperature when it answers (`System.generation("answer")`)."""
        return self.generation.temperature

    def _submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coroutine.close()
            raise RuntimeError("this Orchestrator is closed; make a new one with Orchestrator.from_config")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self._submit(coroutine).result()

    def close(self) -> None:
        """Close the workers it built, the grader's process and its event loop thread."""
        if self._closed:
            return
        if self._owns_workers:
            self._run(_close_all(self.workers))
        self._closed = True
        self._grader.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> Orchestrator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _close_all(workers: Sequence[Provider]) -> None:
    await asyncio.gather(*(w.aclose() for w in workers))


def as_task(question: str | Question | Task, reference: str | None, kind: str, index: int = 0) -> Task:
    """The question as the workflow engine needs it; a str is graded only with a `reference`."""
    if isinstance(question, Task):
        return question
    if isinstance(question, Question):
        if reference is not None:
            raise ValueError(f"question {question.id!r} carries its own reference; pass reference= only with a str")
        return Task.of(question)
    if not isinstance(question, str):
        raise TypeError(f"a question is a str, a conductor_rl.data.Question or a Task, got {type(question).__name__}")
    if not question.strip():
        raise ValueError('the question is empty: ask something, e.g. orchestrator.answer("What is 17 * 23?")')
    if reference is None:
        return Task(id=f"user/{index}", question=question)
    return Task(id=f"user/{index}", question=question, domain="default", reference=reference, answer_kind=kind)


def in_process_workers(config: Config, budget_usd: float | None = None) -> tuple[list[Provider], CostLedger]:
    """Each configured worker behind its rate limiter, retries and one shared
    ledger, as a worker replica on the cluster calls it (actors/worker_pool.py)."""
    ledger = CostLedger(budget_usd)
    workers = []
    for w in config.workers:
        if w.provider == "conductor":  # its steps are recursive calls (rollout/recursion.py), not API calls
            workers.append(build_provider(w))
            continue
        limiter = None
        if w.rpm is not None or w.tpm is not None:
            # Headroom as on the cluster (2 % of the window): jitter between a grant and the provider's clock.
            limiter = AsyncRateLimiter(WindowLimits(w.rpm, w.tpm, RATE_WINDOW_S, headroom_s=0.02 * RATE_WINDOW_S))
        workers.append(
            GuardedProvider(
                build_provider(w, seed=config.conductor.seed),
                provider_kind=w.provider,
                limiter=limiter,
                ledger=ledger,
                policy=RetryPolicy(max_retries=w.max_retries),
                check_budget=budget_usd is not None,
                price=w.price,
            )
        )
    return workers, ledger
