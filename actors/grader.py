"""GraderActor: a Ray shell over `conductor_rl.grading.service.Grader`; GraderPool: N of them.

A GraderActor is a threaded actor (``max_concurrency = grader.concurrency``):
that many answers are graded at once in it, each in its own sandbox. Ray
restarts a crashed actor (``max_restarts``); calls in flight when it died are
not retried (``max_task_retries=0``) but reported.

`GraderPool.grade_many` sends each request to the least-loaded live actor (at
most ``concurrency`` in flight per actor, so a request's timeout measures its
grading, not its queueing) and guarantees one `GradeResult` per request:

* an actor that died with the request in flight → ERROR;
* no result within ``sample_timeout_s`` → ERROR (the late result is dropped;
  its slot stays taken until the sandbox's own timeout frees it);
* no live actor left → ERROR.

A grader failure is never a silent WRONG: ERROR is never scored.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Hashable, Sequence
from typing import Any

import ray
from ray import ObjectRef
from ray.actor import ActorHandle
from ray.exceptions import ActorUnavailableError, GetTimeoutError, RayActorError

from conductor_rl.config import GraderConfig
from conductor_rl.grading.service import Grader, GradeRequest
from conductor_rl.grading.verdict import GradeResult, Verdict

__all__ = ["GraderActor", "GraderPool"]


@ray.remote
class GraderActor:
    def __init__(self, config: dict[str, Any]) -> None:
        self._grader = Grader(GraderConfig.model_validate(config))

    def grade(self, request: GradeRequest) -> GradeResult:
        return self._grader.grade(request)

    def info(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "isolation": self._grader.sandbox.isolation}


_PROBE_RETRY_S = 0.2


class _Member:
    """One actor of the pool and what the pool knows about it."""

    def __init__(self, handle: ActorHandle) -> None:
        self.handle = handle
        self.load = 0  # calls sent and not yet answered (abandoned ones included)
        self.probe: ObjectRef | None = None  # an info() call in flight after a failure; no new work until it answers
        self.probe_at: float | None = None  # when to send the next probe (an actor that is restarting)
        self.failures = 0  # probes that found it dead
        self.dead = False

    @property
    def suspect(self) -> bool:
        return self.probe is not None or self.probe_at is not None


class GraderPool:
    """N GraderActors behind one `grade_many` (see the module docstring).

    Args:
        config: the grader section (actors, concurrency, sample_timeout_s, max_restarts, sandbox).
        num_cpus: CPUs Ray reserves for each actor.
        resources: custom Ray resources each actor needs (e.g. a node type's label).
    """

    def __init__(
        self, config: GraderConfig | None = None, *, num_cpus: float = 1.0, resources: dict[str, float] | None = None
    ) -> None:
        self.config = config or GraderConfig()
        options = dict(
            max_concurrency=self.config.concurrency,
            max_restarts=self.config.max_restarts,
            max_task_retries=0,
            num_cpus=num_cpus,
        )
        if resources:
            options["resources"] = resources
        payload = self.config.model_dump()
        self._members = [_Member(GraderActor.options(**options).remote(payload)) for _ in range(self.config.actors)]
        self._abandoned: dict[Any, _Member] = {}  # timed-out calls still holding a slot

    @property
    def actors(self) -> list[Any]:
        return [m.handle for m in self._members]

    def wait_ready(self, timeout_s: float = 120.0) -> list[dict[str, Any]]:
        """Wait until every actor has started; returns their `info()`."""
        return ray.get([m.handle.info.remote() for m in self._members], timeout=timeout_s)

    def _pick(self) -> _Member | None:
        free = [m for m in self._members if not m.dead and not m.suspect and m.load < self.config.concurrency]
        return min(free, key=lambda m: m.load) if free else None

    def _suspect(self, member: _Member) -> None:
        """Send no more work to `member` until a probe finds it alive."""
        if not member.suspect and not member.dead:
            member.probe = member.handle.info.remote()

    def _send_due_probes(self) -> None:
        now = time.monotonic()
        for m in self._members:
            if m.probe is None and m.probe_at is not None and now >= m.probe_at and not m.dead:
                m.probe, m.probe_at = m.handle.info.remote(), None

    def _probe_answered(self, member: _Member, ref: ObjectRef) -> None:
        member.probe = None
        try:
            ray.get(ref)
            member.failures = 0
            return
        except ActorUnavailableError:
            pass  # restarting: ask again shortly
        except RayActorError:
            member.failures += 1
            if member.failures > self.config.max_restarts:
                member.dead = True  # Ray will not restart it again
                return
        member.probe_at = time.monotonic() + _PROBE_RETRY_S

    def grade_many(self, requests: Sequence[GradeRequest], timeout_s: float | None = None) -> list[GradeResult]:
        """One `GradeResult` per request, in order (see the module docstring)."""
        timeout = self.config.sample_timeout_s if timeout_s is None else timeout_s
        results: list[GradeResult | None] = [None] * len(requests)
        queue = deque(range(len(requests)))
        inflight: dict[Any, tuple[int, _Member, float]] = {}
        while queue or inflight:
            self._send_due_probes()
            while queue and (member := self._pick()) is not None:
                i = queue.popleft()
                member.load += 1
                inflight[member.handle.grade.remote(requests[i])] = (i, member, time.monotonic() + timeout)
            if all(m.dead for m in self._members):
                for i in [*queue, *(i for i, _, _ in inflight.values())]:
                    results[i] = GradeResult(Verdict.ERROR, None, "no grader actor is alive")
                break
            probes = {m.probe: m for m in self._members if m.probe is not None}
            waiting = [*inflight, *self._abandoned, *probes]
            next_deadline = min(
                [
                    *(d for _, _, d in inflight.values()),
                    *(m.probe_at for m in self._members if m.probe_at is not None),
                    time.monotonic() + 1.0,
                ]
            )
            if not waiting:  # pragma: no cover - every member is busy or dead, both cases are waited on above
                time.sleep(0.05)
                continue
            ready, _ = ray.wait(waiting, num_returns=1, timeout=max(0.0, next_deadline - time.monotonic()))
            if ready:  # take everything else that is ready too, not one per round
                ready, _ = ray.wait(waiting, num_returns=len(waiting), timeout=0)
            for ref in ready:
                if ref in probes:
                    self._probe_answered(probes[ref], ref)
                elif ref in self._abandoned:
                    self._abandoned.pop(ref).load -= 1
                else:
                    i, member, _ = inflight.pop(ref)
                    member.load -= 1
                    results[i] = self._result_of(ref, member)
            now = time.monotonic()
            for ref, (i, member, deadline) in list(inflight.items()):
                if deadline <= now:
                    del inflight[ref]
                    self._abandoned[ref] = member
                    results[i] = GradeResult(Verdict.ERROR, None, f"grading timed out after {timeout:g}s")
        return [r if r is not None else GradeResult(Verdict.ERROR, None, "not graded") for r in results]

    def _result_of(self, ref: ObjectRef, member: _Member) -> GradeResult:
        try:
            result = ray.get(ref, timeout=0)
        except RayActorError as exc:
            self._suspect(member)
            return GradeResult(Verdict.ERROR, None, f"grader actor died: {type(exc).__name__}")
        except GetTimeoutError:  # pragma: no cover - ray.wait said it was ready
            return GradeResult(Verdict.ERROR, None, "grader result vanished")
        except Exception as exc:  # the actor method raised: a grader bug
            return GradeResult(Verdict.ERROR, None, f"grader failed: {type(exc).__name__}: {str(exc)[:300]}")
        if not isinstance(result, GradeResult):
            return GradeResult(Verdict.ERROR, None, f"grader returned {type(result).__name__}")
        if result.verdict is Verdict.ERROR:
            self._suspect(member)  # e.g. its sandboxes were killed because the actor is going down
        return result

    def close(self) -> None:
        for m in self._members:
            ray.kill(m.handle, no_restart=True)


class GradingStream:
    """Grades requests as they are handed in, on a thread of its own, in batches through a
    GraderPool: grading overlaps the work that produces them (training grades each rollout as
    soon as its plan has run, not after the last one). `finish()` waits for the rest."""

    def __init__(self, pool: GraderPool) -> None:
        self.pool = pool
        self._changed = threading.Condition()
        self._queue: list[tuple[Hashable, GradeRequest]] = []
        self._closed = False
        self._results: dict[Hashable, GradeResult] = {}
        self._thread = threading.Thread(target=self._grade, name="grading-stream", daemon=True)
        self._thread.start()

    def submit(self, key: Hashable, request: GradeRequest) -> None:
        with self._changed:
            self._queue.append((key, request))
            self._changed.notify_all()

    def _grade(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            try:
                results = self.pool.grade_many([request for _, request in batch])
            except Exception as err:  # a pool failure is the infrastructure's: those rollouts are graded again
                results = [GradeResult(Verdict.ERROR, None, f"grader pool failed: {type(err).__name__}: {err}")] * len(
                    batch
                )
            with self._changed:
                self._results.update((key, result) for (key, _), result in zip(batch, results))

    def finish(self) -> dict[Any, GradeResult]:
        """Every submitted request's result, by key, once all are graded."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        self._thread.join()
        return dict(self._results)
