"""benchmarks/paper_scale.py: the critical path under the limits it measures against
(benchmarks/limited_schedule.py) and the paper pool it rehearses against (quick: no Ray); the
rehearsal itself runs as a benchmark (docs/results.md)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.benchmark_scripts import load_benchmark


def step(worker: str, latency: float, reads: list[int], used: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        worker=worker,
        latency_s=latency,
        access=reads,
        started_s=0.0,
        messages=[{"role": "user", "content": "x" * 400}],  # 100 tokens by the limiter's estimate
        usage=SimpleNamespace(input_tokens=used, output_tokens=0),
    )


def rollouts(*plans: list[SimpleNamespace]) -> list[SimpleNamespace]:
    return [SimpleNamespace(workflow=SimpleNamespace(steps=plan)) for plan in plans] + [
        SimpleNamespace(workflow=None)  # a plan that did not parse: no calls
    ]


def test_the_critical_path_under_the_limits_spaces_each_workers_calls_and_runs_long_chains_first() -> None:
    schedule = load_benchmark("limited_schedule")
    # Ten one-step rollouts on a worker allowing 4 calls a 10 s window (one each 2.5 s), 1 s each.
    plans = schedule.calls_of(rollouts(*[[step("a", 1.0, [])] for _ in range(10)]), {"a": 0})
    limits = {"a": schedule.Limits(4, None, 10.0)}
    assert schedule.reference_schedule_s(plans, limits) == schedule.lower_bound_s(plans, limits) == 23.5
    assert schedule.chain_s(plans) == 1.0
    # One call a window on `a`; each a-call is read by a 5 s step on unlimited `b`, and one rollout has
    # a 20 s `b` after its a-call: it goes first (finishing at 21 s), the others at 10 and 20 s (+6).
    plans = schedule.calls_of(
        rollouts([step("a", 1.0, []), step("b", 5.0, [0])], [step("a", 1.0, []), step("b", 20.0, [0])])
        + rollouts([step("a", 1.0, []), step("b", 5.0, [0])]),
        {},
    )
    limits = {"a": schedule.Limits(1, None, 10.0)}
    assert schedule.reference_schedule_s(plans, limits) == schedule.lower_bound_s(plans, limits) == 26.0


def test_tokens_are_reserved_at_the_send_and_settled_to_what_was_used() -> None:
    schedule = load_benchmark("limited_schedule")
    # Each call reserves 100 (prompt) + 50 (max_tokens) of 200 a window: one at a time while in flight;
    # settled to 10 used, the next fits at once.
    plans = schedule.calls_of(rollouts(*[[step("a", 2.0, [], used=10)] for _ in range(3)]), {"a": 50})
    assert schedule.reference_schedule_s(plans, {"a": schedule.Limits(None, 200, 60.0)}) == 6.0
    # Used tokens that fill the window make the next call wait for it to pass.
    plans = schedule.calls_of(rollouts(*[[step("a", 2.0, [], used=150)] for _ in range(2)]), {"a": 50})
    assert schedule.reference_schedule_s(plans, {"a": schedule.Limits(None, 200, 60.0)}) == 62.0


def test_the_rehearsal_runs_the_papers_seven_workers_with_their_limits_scaled_to_its_time() -> None:
    from conductor_rl.config import load_config

    bench = load_benchmark("paper_scale")
    servers = {
        name: SimpleNamespace(base_url_for=lambda provider: f"http://127.0.0.1:1/{provider}") for name in bench.LATENCY
    }
    workers = bench.paper_workers(0.1, servers)
    paper = load_config("configs/paper.yaml").workers
    assert [w["name"] for w in workers] == [w.name for w in paper] == list(bench.LATENCY)
    for mine, theirs in zip(workers, paper, strict=True):
        assert mine["serve"] is None and mine["base_url"].startswith("http://127.0.0.1:1/")
        assert mine["rpm"] == (round(theirs.rpm / 0.1) if theirs.rpm else None)
        assert (mine["model"], mine["provider"], mine["max_tokens"]) == (
            theirs.model,
            theirs.provider,
            theirs.max_tokens,
        )


def test_refused_attempts_take_a_slot_and_429s_stop_the_worker_for_their_retry_after() -> None:
    schedule = load_benchmark("limited_schedule")
    plans = schedule.calls_of(rollouts(*[[step("a", 1.0, [])] for _ in range(3)]), {"a": 0})
    # One send a second; 2 refusals spread over 5 sends (the 2nd and 3rd), the second a 429 of 10 s:
    # sends at 0 (ok), 1 (a 500), 2 (a 429: blocked until 12), 12 (ok), 13 (ok, ends at 14).
    limits = {"a": schedule.Limits(60, None, 60.0, refused=2, cooldowns=1, cooldown_s=10.0)}
    assert schedule.reference_schedule_s(plans, limits) == 14.0
    assert schedule.reference_schedule_s(plans, {"a": schedule.Limits(60, None, 60.0)}) == 3.0
