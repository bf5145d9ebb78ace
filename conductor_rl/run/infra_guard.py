"""Stop a run that is silently losing a worker (`train.max_infra_error_rate`).

A worker whose calls fail for reasons that are not the policy's (a refused
parameter, a bad key, an outage) does not crash training: its rollouts are
retried, then dropped, and the run goes on with the others. One bad setting
can so turn a six-worker run into a five-worker one without anyone noticing.
The guard counts, over a window of iterations:

- per worker: its steps that failed / its steps that ran (every attempt,
  including ones a later re-run replaced), judged once the worker has run
  `min_steps` steps in the window, so that one unlucky call decides nothing;
- overall: rollouts dropped for infrastructure errors / parsed rollouts.

Over the limit, `check` raises `InfraErrorRateExceeded`, naming the worker,
its rate and its last errors; the loop stops with a checkpoint. Skipped steps
(an earlier step failed) are the failing step's doing and are not counted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from conductor_rl.rollout.workflow import WorkflowResult

LAST_ERRORS = 3


class InfraErrorRateExceeded(RuntimeError):
    """A worker (or the pool as a whole) failed too often; the message says which and how to look."""


@dataclass
class InfraCounts:
    """One iteration's counts. An iteration collected ahead of the learner (asynchronous
    training) keeps its own until the learner reaches it (`InfraErrorGuard.end_iteration`)."""

    steps: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    rollouts: int = 0
    dropped: int = 0
    errors: dict[str, list[str]] = field(default_factory=dict)  # each worker's last errors

    def observe(self, workflows: Iterable[WorkflowResult | None]) -> None:
        """Count the steps of one round of executions (call it before a re-run replaces them)."""
        for workflow in workflows:
            for step in workflow.steps if workflow is not None else ():
                if step.error is not None and step.error.startswith("skipped"):
                    continue
                if step.error is None and step.response is None:
                    continue  # never started
                self.steps[step.worker] = self.steps.get(step.worker, 0) + 1
                if step.error is not None:
                    self.failed[step.worker] = self.failed.get(step.worker, 0) + 1
                    self.errors[step.worker] = (self.errors.get(step.worker, []) + [step.error])[-LAST_ERRORS:]


class InfraErrorGuard:
    def __init__(self, max_rate: float | None, window: int = 5, min_steps: int = 20) -> None:
        """`max_rate` None turns the guard off (counts are still kept for the metrics)."""
        self.max_rate, self.window, self.min_steps = max_rate, window, min_steps
        self._windows: deque[InfraCounts] = deque(maxlen=window)
        self._current = InfraCounts()
        self._last_errors: dict[str, deque[str]] = {}

    def observe(self, workflows: Iterable[WorkflowResult | None]) -> None:
        """Count the steps of one round of executions into the current iteration."""
        self._current.observe(workflows)

    def end_iteration(self, rollouts: int, dropped: int, counts: InfraCounts | None = None) -> dict:
        """Close the iteration (`rollouts` parsed, `dropped` of them without a reward) whose steps
        `counts` holds (None: those `observe` counted); returns its per-worker figures for the metrics record."""
        if counts is None:
            counts, self._current = self._current, InfraCounts()
        done = counts
        done.rollouts, done.dropped = rollouts, dropped
        self._windows.append(done)
        for name, errors in done.errors.items():
            self._last_errors.setdefault(name, deque(maxlen=LAST_ERRORS)).extend(errors)
        return {name: {"steps": n, "failed": done.failed.get(name, 0)} for name, n in sorted(done.steps.items())}

    def rates(self) -> tuple[dict[str, tuple[float, int]], float, int]:
        """(worker -> (failure rate, steps) over the window, overall drop rate, rollouts)."""
        steps: dict[str, int] = {}
        failed: dict[str, int] = {}
        for w in self._windows:
            for name, n in w.steps.items():
                steps[name] = steps.get(name, 0) + n
                failed[name] = failed.get(name, 0) + w.failed.get(name, 0)
        rollouts = sum(w.rollouts for w in self._windows)
        dropped = sum(w.dropped for w in self._windows)
        per_worker = {name: (failed[name] / n, n) for name, n in steps.items() if n}
        return per_worker, dropped / rollouts if rollouts else 0.0, rollouts

    def check(self) -> None:
        """Raise InfraErrorRateExceeded when a worker, or the pool, is over the limit."""
        if self.max_rate is None:
            return
        per_worker, overall, rollouts = self.rates()
        iterations = len(self._windows)
        over = sorted(
            ((rate, name, n) for name, (rate, n) in per_worker.items() if n >= self.min_steps and rate > self.max_rate),
            reverse=True,
        )
        if over:
            rate, name, n = over[0]
            errors = "\n".join(f"    {e[:300]}" for e in self._last_errors.get(name, ()))
            raise InfraErrorRateExceeded(
                f"worker {name!r} failed {rate:.0%} of its {n} calls over the last {iterations} iteration(s) "
                f"(train.max_infra_error_rate={self.max_rate:g}); its last errors:\n{errors}\n"
                f"Check it with `conductor-rl check --config ...`; fix its settings (workers.<i>) and continue "
                f"with --resume, or raise train.max_infra_error_rate."
            )
        if rollouts >= self.min_steps and overall > self.max_rate:
            worst = max(per_worker.items(), key=lambda item: item[1][0], default=None)
            hint = f"; the worst worker is {worst[0]!r} ({worst[1][0]:.0%} of {worst[1][1]} calls)" if worst else ""
            raise InfraErrorRateExceeded(
                f"{overall:.0%} of {rollouts} rollouts over the last {iterations} iteration(s) had no reward "
                f"because of infrastructure errors (train.max_infra_error_rate={self.max_rate:g}){hint}. "
                f"See the traces' infrastructure_error column, fix the cause and continue with --resume."
            )

    def state(self) -> dict:
        """What a checkpoint keeps, so a resumed run judges the same window."""
        return {
            "windows": [
                {"steps": w.steps, "failed": w.failed, "rollouts": w.rollouts, "dropped": w.dropped}
                for w in self._windows
            ],
            "last_errors": {name: list(errors) for name, errors in self._last_errors.items()},
        }

    def restore(self, state: dict | None) -> None:
        for w in (state or {}).get("windows", []):
            self._windows.append(InfraCounts(dict(w["steps"]), dict(w["failed"]), w["rollouts"], w["dropped"]))
        for name, errors in (state or {}).get("last_errors", {}).items():
            self._last_errors[name] = deque(errors, maxlen=LAST_ERRORS)
