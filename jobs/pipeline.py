"""Asynchronous training (train.max_staleness = k >= 1): the rollouts of the next
iterations are collected while the learner trains.

A producer thread collects iterations in order (draw, generate, execute, grade:
`jobs.train.collect_rollouts`); iteration j may start once the learner has
finished iteration j - k - 1 and synced its weights
(`conductor_rl.policy.staleness.may_collect`). The learner, in the caller's
thread, takes them in order. Generation and the learner's step, the two phases
that compute, then overlap each other and the workers' calls, and the weight sync
slips in between generator batches (`GeneratorPool.paused`).

A failure or a stop (a signal, a spent budget) in the producer reaches the
learner at its next `next()`; closing the pipeline asks the producer to stop at
its next safe point and waits for it, so an abandoned iteration's worker calls
are all in the ledger before a checkpoint saves it.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

from conductor_rl.policy.staleness import may_collect

T = TypeVar("T")

JOIN_TIMEOUT_S = 600.0   # the producer finishes its phase in flight (a generation, a round of calls) first


class PipelineClosed(Exception):
    """The pipeline was closed before the iteration asked for was collected."""


class RolloutPipeline(Generic[T]):
    """Collects iterations first..last-1 ahead of the learner, at most `max_staleness` ahead."""

    def __init__(self, collect: Callable[[int], T], first: int, last: int, max_staleness: int,
                 halt: Callable[[], None]) -> None:
        """`collect(j)`: iteration j's rollouts; `halt()`: ask a collection in flight to stop at its
        next safe point (it then raises, and the producer ends)."""
        if max_staleness < 1:
            raise ValueError(f"an asynchronous pipeline needs max_staleness >= 1, got {max_staleness}")
        self.collect, self.first, self.last, self.max_staleness, self.halt = collect, first, last, max_staleness, halt
        self._changed = threading.Condition()
        self._ready: dict[int, T] = {}
        self._learned = first - 1
        self._error: BaseException | None = None
        self._closing = False
        self.bound_wait_s: dict[int, float] = {}   # per iteration: how long collecting it waited on the bound
        self._thread = threading.Thread(target=self._produce, name="rollout-pipeline", daemon=True)

    def __enter__(self) -> "RolloutPipeline[T]":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _produce(self) -> None:
        for j in range(self.first, self.last):
            started = time.perf_counter()
            with self._changed:
                self._changed.wait_for(lambda: self._closing or may_collect(j, self._learned, self.max_staleness))
                if self._closing:
                    return
            self.bound_wait_s[j] = time.perf_counter() - started
            try:
                item = self.collect(j)
            except BaseException as err:   # delivered to the learner's thread by next()
                with self._changed:
                    self._error = err
                    self._changed.notify_all()
                return
            with self._changed:
                self._ready[j] = item
                self._changed.notify_all()

    def next(self, iteration: int) -> tuple[T, float]:
        """Iteration `iteration`'s collection and the seconds the learner waited for it; raises
        what stopped the producer (StopRun, a failure) once everything before it was handed over."""
        started = time.perf_counter()
        with self._changed:
            self._changed.wait_for(lambda: iteration in self._ready or self._error is not None or self._closing)
            if iteration in self._ready:
                return self._ready.pop(iteration), time.perf_counter() - started
            if self._error is not None:
                raise self._error
            raise PipelineClosed(f"the pipeline was closed before iteration {iteration} was collected")

    def learned(self, iteration: int) -> None:
        """The learner has finished `iteration` and the generators hold its weights."""
        with self._changed:
            self._learned = iteration
            self._changed.notify_all()

    def in_flight(self) -> list[int]:
        """Iterations the producer has begun that the learner has not finished."""
        with self._changed:
            begun = set(self.bound_wait_s)
            return sorted(j for j in begun if j > self._learned)

    def close(self) -> None:
        """Stop collecting: a collection in flight stops at its next safe point and is abandoned."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if self._thread.is_alive():
            self.halt()
            self._thread.join(JOIN_TIMEOUT_S)
