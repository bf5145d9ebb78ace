"""Asynchronous training (train.max_staleness = k >= 1): the rollouts of the next
iterations are collected while the learner trains.

Two producer threads feed the learner, in iteration order:
- the sampler draws iteration j's questions and samples its plans
  (`jobs.train.sample_plans`) once the learner has finished iteration
  j - k - 1 and synced its weights (`conductor_rl.policy.staleness.may_collect`);
- the runner executes and grades them (`jobs.train.run_plans`).
The learner, in the caller's thread, takes each iteration when it is graded.
Generation, the workers' calls and the learner's step, one of each iteration,
then run at once, so an iteration costs about the slowest of them; each weight
sync slips in between generator batches (`GeneratorPool.paused`).

A failure or a stop (a signal, a spent budget) in a producer reaches the
learner when it asks for that iteration; what came before is handed over
first. Closing the pipeline asks a collection in flight to stop at its next
safe point (`halt`) and waits for both threads, so an abandoned iteration's
worker calls are all in the ledger before a checkpoint saves it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from conductor_rl.policy.staleness import may_collect

T = TypeVar("T")

JOIN_TIMEOUT_S = 600.0  # a producer finishes its phase in flight (a generation, a round of calls) first


class PipelineClosed(Exception):
    """The pipeline was closed before the iteration asked for was collected."""


class RolloutPipeline(Generic[T]):
    """Collects iterations first..last-1 ahead of the learner, at most `max_staleness` ahead."""

    def __init__(
        self,
        sample: Callable[[int], T],
        run: Callable[[T], T],
        first: int,
        last: int,
        max_staleness: int,
        halt: Callable[[], None],
    ) -> None:
        """`sample(j)`: iteration j's plans; `run(sampled)`: them executed and graded; `halt()`: ask a
        collection in flight to stop at its next safe point (it then raises, and its thread ends)."""
        if max_staleness < 1:
            raise ValueError(f"an asynchronous pipeline needs max_staleness >= 1, got {max_staleness}")
        self.sample, self.run, self.halt = sample, run, halt
        self.first, self.last, self.max_staleness = first, last, max_staleness
        self._changed = threading.Condition()
        self._sampled: dict[int, T] = {}
        self._ready: dict[int, T] = {}
        self._learned = first - 1
        self._failed: tuple[int, BaseException] | None = None  # the first iteration a producer failed on
        self._closing = False
        self.bound_wait_s: dict[int, float] = {}  # per iteration: how long sampling it waited on the bound
        self._threads = [
            threading.Thread(target=self._sampler, name="pipeline-sampler", daemon=True),
            threading.Thread(target=self._runner, name="pipeline-runner", daemon=True),
        ]

    def __enter__(self) -> RolloutPipeline[T]:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _stopped(self) -> bool:
        return self._closing or self._failed is not None

    def _fail(self, iteration: int, err: BaseException) -> None:
        with self._changed:
            if self._failed is None or iteration < self._failed[0]:
                self._failed = (iteration, err)
            self._changed.notify_all()

    def _sampler(self) -> None:
        for j in range(self.first, self.last):
            started = time.perf_counter()
            with self._changed:
                self._changed.wait_for(lambda j=j: self._stopped() or may_collect(j, self._learned, self.max_staleness))
                if self._stopped():
                    return
                self.bound_wait_s[j] = time.perf_counter() - started
            try:
                sampled = self.sample(j)
            except BaseException as err:  # delivered to the learner's thread by next()
                self._fail(j, err)
                return
            with self._changed:
                self._sampled[j] = sampled
                self._changed.notify_all()

    def _runner(self) -> None:
        for j in range(self.first, self.last):
            with self._changed:
                self._changed.wait_for(
                    lambda j=j: (
                        j in self._sampled or self._closing or (self._failed is not None and self._failed[0] <= j)
                    )
                )
                if self._closing or j not in self._sampled:
                    return
                sampled = self._sampled.pop(j)
            try:
                ran = self.run(sampled)
            except BaseException as err:
                self._fail(j, err)
                return
            with self._changed:
                self._ready[j] = ran
                self._changed.notify_all()

    def next(self, iteration: int) -> tuple[T, float]:
        """Iteration `iteration`'s collection and the seconds the learner waited for it; raises
        what stopped a producer on it or before it (StopRun, a failure)."""
        started = time.perf_counter()
        with self._changed:
            self._changed.wait_for(
                lambda: (
                    iteration in self._ready
                    or self._closing
                    or (self._failed is not None and self._failed[0] <= iteration)
                )
            )
            if iteration in self._ready:
                return self._ready.pop(iteration), time.perf_counter() - started
            if self._failed is not None:
                raise self._failed[1]
            raise PipelineClosed(f"the pipeline was closed before iteration {iteration} was collected")

    def learned(self, iteration: int) -> None:
        """The learner has finished `iteration` and the generators hold its weights."""
        with self._changed:
            self._learned = iteration
            self._changed.notify_all()

    def in_flight(self) -> list[int]:
        """Iterations a producer has begun that the learner has not finished."""
        with self._changed:
            return sorted(j for j in self.bound_wait_s if j > self._learned)

    def close(self) -> None:
        """Stop collecting: a collection in flight stops at its next safe point and is abandoned."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if any(t.is_alive() for t in self._threads):
            self.halt()
            for thread in self._threads:
                thread.join(JOIN_TIMEOUT_S)
