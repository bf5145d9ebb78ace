"""benchmarks/paper_scale.py: its rate bound and the paper pool it rehearses against (quick: no Ray); the
rehearsal itself runs as a benchmark (docs/results.md)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conductor_rl.config import WorkerConfig
from tests.benchmark_scripts import load_benchmark


def call(worker: str, tokens: int) -> SimpleNamespace:
    return SimpleNamespace(worker=worker, started_s=0.0, usage=SimpleNamespace(input_tokens=tokens, output_tokens=100))


def test_the_rate_bound_is_the_busiest_workers_time_at_its_limits() -> None:
    bench = load_benchmark("paper_scale")
    workers = [
        WorkerConfig(name="a", provider="openai", model="gpt-6.1-sol", rpm=60, max_tokens=100),
        WorkerConfig(name="b", provider="openai", model="gpt-6.1-sol", tpm=6000, max_tokens=100),
        WorkerConfig(name="c", provider="openai", model="gpt-6.1-sol", max_tokens=100),  # no limit
    ]
    rollouts = [
        SimpleNamespace(workflow=SimpleNamespace(steps=[call("a", 10), call("b", 100), call("c", 10)]))
        for _ in range(30)
    ]
    rollouts.append(SimpleNamespace(workflow=None))  # a plan that did not parse: no calls
    # a: 30 calls at 60 a minute = 30 s; b: 30 x (100 + 100) tokens used = 6000 at 6000 a minute = 60 s.
    assert bench.rate_bound_s(workers, rollouts) == pytest.approx(60.0)
    assert bench.rate_bound_s(workers[2:], rollouts) == 0.0


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
