"""train.max_infra_error_rate: a worker lost to infrastructure errors stops the run, naming it."""

from __future__ import annotations

import pytest

from conductor_rl.rollout.workflow import StepTrace, WorkflowResult
from conductor_rl.run.infra_guard import InfraErrorGuard, InfraErrorRateExceeded


def workflow(*steps: tuple[str, str | None]) -> WorkflowResult:
    """Steps as (worker, error or None)."""
    traces = [
        StepTrace(
            index=i, model_id=i, worker=w, subtask="s", access=[], response=None if error else "answer", error=error
        )
        for i, (w, error) in enumerate(steps)
    ]
    first = next((f"step {t.index}: {t.error}" for t in traces if t.error and not t.error.startswith("skipped")), None)
    return WorkflowResult(traces, wall_s=0.1, error=first)


def one_iteration(guard: InfraErrorGuard, good: int, bad: int, dropped: int = 0) -> dict:
    guard.observe([workflow(("gpt-5", None), ("claude", None)) for _ in range(good)])
    guard.observe(
        [
            workflow(
                ("gpt-5", "bad_request: worker 'gpt-5': HTTP 400: Unsupported value: 'temperature'"),
                ("claude", "skipped: an earlier step failed"),
            )
            for _ in range(bad)
        ]
    )
    return guard.end_iteration(good + bad, dropped)


def test_a_worker_that_always_fails_stops_the_run_with_its_errors():
    guard = InfraErrorGuard(0.25, window=3, min_steps=10)
    counts = one_iteration(guard, good=0, bad=12, dropped=0)
    assert counts == {"gpt-5": {"steps": 12, "failed": 12}}  # skipped steps are the failing step's doing
    with pytest.raises(InfraErrorRateExceeded) as err:
        guard.check()
    message = str(err.value)
    assert "'gpt-5' failed 100% of its 12 calls" in message
    assert "Unsupported value: 'temperature'" in message
    assert "conductor-rl check" in message and "--resume" in message


def test_healthy_workers_and_rare_faults_pass():
    guard = InfraErrorGuard(0.25, window=3, min_steps=10)
    for _ in range(3):
        one_iteration(guard, good=20, bad=2)
    guard.check()
    rates, overall, rollouts = guard.rates()
    assert rates["gpt-5"] == (pytest.approx(6 / 66), 66)
    assert rates["claude"] == (0.0, 60)
    assert (overall, rollouts) == (0.0, 66)


def test_too_few_calls_are_not_judged():
    guard = InfraErrorGuard(0.25, window=3, min_steps=10)
    one_iteration(guard, good=0, bad=5)
    guard.check()  # 5 < min_steps


def test_the_window_forgets_old_iterations():
    guard = InfraErrorGuard(0.25, window=2, min_steps=10)
    one_iteration(guard, good=0, bad=12)  # an outage
    one_iteration(guard, good=30, bad=0)
    with pytest.raises(InfraErrorRateExceeded):
        guard.check()  # 12 of 42 in the window
    one_iteration(guard, good=30, bad=0)
    guard.check()  # the outage left the window


def test_overall_drop_rate_is_judged_too():
    guard = InfraErrorGuard(0.25, window=1, min_steps=10)
    guard.observe([workflow(("gpt-5", None))] * 5)
    guard.end_iteration(rollouts=20, dropped=15)  # e.g. the grader failed
    with pytest.raises(InfraErrorRateExceeded, match="75% of 20 rollouts"):
        guard.check()


def test_off_never_raises_and_state_round_trips():
    off = InfraErrorGuard(None)
    one_iteration(off, good=0, bad=50)
    off.check()
    guard = InfraErrorGuard(0.25, window=3, min_steps=10)
    one_iteration(guard, good=0, bad=12)
    again = InfraErrorGuard(0.25, window=3, min_steps=10)
    again.restore(guard.state())
    assert again.rates() == guard.rates()
    with pytest.raises(InfraErrorRateExceeded, match="HTTP 400"):
        again.check()
