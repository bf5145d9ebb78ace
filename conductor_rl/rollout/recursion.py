"""The recursive Conductor (paper §3.2): the Conductor is called again on its own workflow.

A recursive call sees the question, the plan of the Conductor that called it and
the answer so far (the output of the step before it), and writes a new plan,
which runs with every step shown that answer, or three empty lists, which stop
and keep the answer. A call is made two ways:
- a plan gives a step to the Conductor itself (a pool worker with `provider: conductor`,
  required for any `conductor.max_depth` >= 1): the Conductor's own choice, the only
  way at inference (`ask`, `serve`, the `Orchestrator`, `evaluate`'s
  `conductor:<ckpt>@depth=N`), where `max_depth` is a limit, never a number of calls;
- in training only, the engine forces one after a plan that made none
  (`Recursion.forced_below`), in `train.recursion.forced_share` of the groups (the
  paper's "one recursive call in half of each batch").
Inner calls sample from the same generator, with the same weights, as their root:
they run inside the execution phase, before the learner steps.

Decisions where the paper is silent:
- Depth: the root plan is depth 0, a call it makes writes a plan at depth 1.
  Past `max_depth` no call is made: the step keeps the answer so far (`at_limit`).
- A recursive call whose completion does not parse (only possible without the
  constrained format, or cut off) is the policy's failure: reward 0, like an
  unparsable root plan. A call the generator failed to answer is an
  infrastructure error, retried as a worker's would be.
- The non-recursive discount (`discounted_reward`): a rollout is recursive when the
  Conductor was really called again at least once on an answer (not `at_limit`),
  whatever that call did (a new plan, or three empty lists). A non-recursive rollout
  earns r' = (1 - d) * r in every group, with d = `train.recursion.discount` (the
  paper's 0.25). Reason: the reward must let stopping pay. A call that keeps a right
  answer earns 1, as much as another round that keeps it right and more in expectation
  (a round can spoil it); a plan that never asks for its own review earns 0.75 r. Extra
  rounds earn nothing more, so the Conductor is paid to review once and to stop when
  the answer is right. (Discounting only calls that kept the answer, the old rule, paid
  a stop 0.75 r against r for any new plan: stopping could never pay.)
- Stop statistics (`StopCounts`): each call really made records whether the answer it
  was shown was right (`InnerCall.incoming_correct`, graded with the task's grader when
  the rollout is), so training logs and evaluation records show how often the Conductor
  stops on a right answer and on a wrong one.
- Every recursive call's completion tokens are in the loss as rows of their own,
  with the advantage of the rollout they belong to (policy/batch.py): the
  reward judged the whole tree, so every choice in it shares the credit.
- Each call samples with its own seed, derived from the run's seed and the
  call's place (rollout, attempt, step path), so which calls happen to be
  batched together changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from conductor_rl.plan import PlanError, parse_plan
from conductor_rl.plan.roster import Roster, as_roster
from conductor_rl.rollout.workflow import InnerCall, StepLimits, Task, keep_answer, run_plan
from conductor_rl.workers.providers.base import Provider

if TYPE_CHECKING:
    from conductor_rl.plan.prompts import ConductorPrompt
    from conductor_rl.plan.shape import PlanShape


class SampledPlan(Protocol):
    """A sampled plan, as a recursive call records it: the policy's `Sample`
    (conductor_rl/policy/sampling.py), which comes later in the stage order."""

    @property
    def text(self) -> str: ...

    @property
    def token_ids(self) -> Sequence[int]: ...

    @property
    def logprobs(self) -> Sequence[float]: ...

    @property
    def finish_reason(self) -> str:
        """ "stop" or "length" (cut off by the token limit)."""
        ...


class PlanWriter(Protocol):
    """What samples a recursive call's plan: the generator (training, evaluation) or the in-process model."""

    async def write(self, prompt_ids: Sequence[int], shape: PlanShape | None, seed: int) -> SampledPlan: ...


@dataclass(frozen=True)
class Recursion:
    """How a plan calls the Conductor again, as seen from a plan at `depth` written by `parent`."""

    writer: PlanWriter
    prompts: ConductorPrompt
    max_depth: int
    max_steps: int
    forced_below: int = 0  # a plan at a depth below this ends with a forced call (training's forced groups only)
    seed: int = 0
    depth: int = 0
    parent: str = ""  # the completion whose plan is running
    roster: Roster | None = None  # what the root plan's prompt listed (None: the workers, as Model 0..n-1)
    discount: float = 0.0  # of a non-recursive rollout's reward (training: train.recursion.discount; else 0)

    @property
    def forces_call(self) -> bool:
        return self.depth < min(self.forced_below, self.max_depth)

    def for_plan(self, completion: str, forced_below: int | None = None, roster: Roster | None = None) -> Recursion:
        """The recursion of a root plan written as `completion` for a prompt that listed `roster`:
        its inner calls list the same workers under the same names."""
        return replace(
            self,
            depth=0,
            parent=completion,
            forced_below=self.forced_below if forced_below is None else forced_below,
            roster=roster,
        )

    async def call(
        self,
        task: Task,
        current: str,
        workers: Sequence[Provider],
        limits: Sequence[StepLimits],
        key: str,
        forced: bool = False,
    ) -> InnerCall:
        """One recursive call at `self.depth + 1`, on the workers (the roster) of the calling plan."""
        depth = self.depth + 1
        if depth > self.max_depth:
            return keep_answer(depth, current, forced, at_limit=True)
        listed = as_roster(len(workers)) if self.roster is None else self.roster
        prompt_ids = self.prompts.recursive_ids(task.question, listed, self.parent, current, task.answer_format)
        sample = await self.writer.write(
            prompt_ids, self.prompts.shape_for(listed, allow_empty=True), call_seed(self.seed, f"{task.id}|{key}")
        )
        call = InnerCall(
            depth,
            current,
            forced,
            tuple(prompt_ids),
            self.prompts.response_prefix + sample.text,
            tuple(sample.token_ids),
            tuple(sample.logprobs),
            weights_version=getattr(sample, "weights_version", 0),
        )
        try:
            call.plan = parse_plan(call.completion, len(listed), self.max_steps, allow_empty=True, ids=listed.model_ids)
        except PlanError as err:
            call.plan_error = err.reason
            return call
        if call.plan.steps:
            call.workflow = await run_plan(
                call.plan,
                task,
                workers,
                limits,
                sample_key=f"{key}/r",
                recursion=replace(self, depth=depth, parent=call.completion),
                answer_so_far=current,
            )
        return call


def call_seed(seed: int, key: str) -> int:
    """A recursive call's sampling seed: a function of the run's seed and the call's place only."""
    digest = hashlib.sha256(f"recursion|{seed}|{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2**31)


def recursed(calls: Sequence[InnerCall]) -> bool:
    """Was the Conductor really called again on an answer (a call not cut off by the depth limit),
    whatever the call then did (a new plan, or three empty lists)?"""
    return any(c.made for c in calls)


def discounted_reward(reward: float, calls: Sequence[InnerCall], discount: float) -> float:
    """A non-recursive rollout earns (1 - d) r, in every group (the module's "Decisions")."""
    return reward if recursed(calls) else reward * (1.0 - discount)


@dataclass(frozen=True)
class StopCounts:
    """How often the Conductor stopped (kept the answer) when called again, split by whether the
    answer it was shown was right. Only calls really made and whose incoming answer was graded count."""

    right: int = 0  # calls shown a right answer
    kept_right: int = 0  # ... that kept it
    wrong: int = 0  # calls shown a wrong answer
    kept_wrong: int = 0  # ... that kept it

    @classmethod
    def of(cls, calls: Iterable[InnerCall]) -> StopCounts:
        graded = [c for c in calls if c.made and c.incoming_correct is not None]
        right = [c for c in graded if c.incoming_correct]
        wrong = [c for c in graded if not c.incoming_correct]
        return cls(len(right), sum(c.kept for c in right), len(wrong), sum(c.kept for c in wrong))

    def __add__(self, other: StopCounts) -> StopCounts:
        return StopCounts(
            self.right + other.right,
            self.kept_right + other.kept_right,
            self.wrong + other.wrong,
            self.kept_wrong + other.kept_wrong,
        )

    @property
    def rate_when_right(self) -> float | None:
        """Share of the calls shown a right answer that kept it (None: there were none)."""
        return self.kept_right / self.right if self.right else None

    @property
    def rate_when_wrong(self) -> float | None:
        """Share of the calls shown a wrong answer that kept it (None: there were none)."""
        return self.kept_wrong / self.wrong if self.wrong else None


def forced_groups(n_groups: int, share: float, seed: int, iteration: int) -> set[int]:
    """The groups of a batch whose rollouts are forced to recurse: round(share * n) of them,
    drawn per (seed, iteration), so a resumed run forces the same."""
    import random

    digest = hashlib.sha256(f"forced|{seed}|{iteration}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    return set(rng.sample(range(n_groups), round(share * n_groups)))


class BatchedPlanWriter:
    """A `PlanWriter` over a batch sampler: calls made within `window_s` of each other are
    sampled together (a generator is much faster on one batch than on calls one by one).
    A burst keeps the batch open while calls keep arriving, a window at a time, for up to
    `max_wait_s`: a burst spread wider than one window would otherwise be split into a small
    first batch and a large second one that waits for it.
    `sample_batch(prompt_ids, shapes, seeds)` returns one sample per prompt; it runs in a thread."""

    def __init__(
        self,
        sample_batch: Callable[[list[list[int]], list[Any], list[int]], Sequence[SampledPlan]],
        window_s: float = 0.05,
        lock: asyncio.Lock | None = None,
        max_wait_s: float | None = None,
    ) -> None:
        """`lock`: held while sampling, when the model has other users on the same event loop;
        `max_wait_s`: how long a burst may hold a batch open (default 10 windows)."""
        self.sample_batch = sample_batch
        self.window_s = window_s
        self.max_wait_s = 10 * window_s if max_wait_s is None else max_wait_s
        self.lock = lock
        self._pending: list[tuple[list[int], Any, int, asyncio.Future]] = []
        self._flush: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def write(self, prompt_ids: Sequence[int], shape: PlanShape | None, seed: int) -> SampledPlan:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop (one per execution round): nothing of the last one is live
            self._loop, self._pending, self._flush = loop, [], None
        future = loop.create_future()
        self._pending.append((list(prompt_ids), shape, seed, future))
        if self._flush is None or self._flush.done():
            self._flush = asyncio.ensure_future(self._sample_pending())
        return await future

    async def _sample_pending(self) -> None:
        # Calls made while a batch is being sampled wait for the next batch of this same loop.
        while self._pending:
            opened = time.monotonic()
            seen = 0
            while len(self._pending) > seen and time.monotonic() - opened < self.max_wait_s:
                seen = len(self._pending)
                await asyncio.sleep(self.window_s)  # one more window while calls keep arriving
            batch, self._pending = self._pending, []
            try:
                async with self.lock or contextlib.nullcontext():
                    samples = await asyncio.to_thread(
                        self.sample_batch, [b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch]
                    )
            except Exception as err:
                for *_, future in batch:
                    if not future.done():
                        future.set_exception(err)
                continue
            for (*_, future), sample in zip(batch, samples):
                if not future.done():
                    future.set_result(sample)


class DirectPlanWriter:
    """A `PlanWriter` that samples each call on its own, the moment it is made:
    `sample_one(prompt_ids, shape, seed)` is a coroutine on an engine that batches
    requests itself (vLLM's asynchronous engine: a request joins its running batch),
    so no window is waited for here."""

    def __init__(self, sample_one: Callable[[list[int], Any, int], Awaitable[SampledPlan]]) -> None:
        self.sample_one = sample_one

    async def write(self, prompt_ids: Sequence[int], shape: PlanShape | None, seed: int) -> SampledPlan:
        return await self.sample_one(list(prompt_ids), shape, seed)


def generator_writer(generators: Any, temperature: float, max_tokens: int, top_p: float = 1.0) -> BatchedPlanWriter:
    """Recursive calls sampled by a GeneratorPool (or anything with its `sample`), one completion each."""

    def sample_batch(prompt_ids: list[list[int]], shapes: list[Any], seeds: list[int]) -> list[SampledPlan]:
        groups = generators.sample(prompt_ids, 1, temperature, max_tokens, top_p, seed=seeds, shape=shapes)
        return [group[0] for group in groups]

    return BatchedPlanWriter(sample_batch)
