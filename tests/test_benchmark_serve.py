"""benchmarks/serve.py's figures: a request's workers' time is its plan's critical path, its overhead the
end-to-end latency over that, and requests per second are per replica."""

import pytest

from tests.benchmark_scripts import load_benchmark

serve = load_benchmark("serve")


def step(index, access, latency_s):
    return {"index": index, "access": access, "latency_s": latency_s}


def test_the_workers_time_is_the_critical_path_of_the_steps_as_they_read_each_other():
    # Steps 0 and 1 run side by side, step 2 reads both: 1.0 (the slower) + 0.5.
    parallel = {"steps": [step(2, [0, 1], 0.5), step(0, [], 1.0), step(1, [], 0.25)]}
    assert serve.workers_time_s(parallel) == pytest.approx(1.5)
    chain = {"steps": [step(0, [], 1.0), step(1, [0], 1.0), step(2, [1], 1.0)]}
    assert serve.workers_time_s(chain) == pytest.approx(3.0)


def test_overhead_percentiles_and_requests_per_second_per_replica():
    answered = [{"e2e_s": 1.0 + i / 100, "workers_s": 1.0, "conductor_s": 0.005} for i in range(100)]
    figures = serve.figures({"answered": answered, "unanswered": 3, "wall_s": 10.0}, replicas=2)
    assert figures["overhead_p50"] == pytest.approx(0.5, abs=0.01)
    assert figures["overhead_p99"] == pytest.approx(0.98, abs=0.01)
    assert figures["requests_per_s"] == pytest.approx(5.0) and figures["requests_per_s_total"] == pytest.approx(10.0)
    assert figures["answered"] == 100 and figures["unanswered"] == 3
    assert serve.figures({"answered": [], "unanswered": 2, "wall_s": 1.0}, 1)["answered"] == 0
