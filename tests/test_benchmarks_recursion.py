"""benchmarks/recursion.py: the figures it reads from an evaluation's records (per maximum depth,
the plain Conductor beside them, the stop rates) and the goals it reports. (The benchmark itself
trains and evaluates for tens of minutes; its figures are in docs/results.md.)"""

from __future__ import annotations

import pytest

from conductor_rl.evaluation.summary import EvalRecord
from tests.benchmark_scripts import load_benchmark

RUN, PLAIN = "runs/bench/recursive", "runs/bench/plain"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("recursion")


def record(method: str, verdict: str, calls: int = 1, q: int = 0, **stops: int) -> EvalRecord:
    return EvalRecord(method, "samples:math500:eval", f"q{q}", "math", 0, verdict, steps=calls, calls=calls, **stops)


def test_the_figures_are_per_depth_with_the_plain_conductor_and_the_stop_rates(bench):
    records = [
        record(f"conductor:{PLAIN}", "correct"),
        record(f"conductor:{PLAIN}", "wrong", q=1),
        record(f"conductor:{RUN}@depth=0", "wrong"),
        record(f"conductor:{RUN}@depth=0", "correct", q=1),
        record(f"conductor:{RUN}@depth=1", "correct", 2, recursive_calls=1, calls_on_right=1, stops_on_right=1),
        record(f"conductor:{RUN}@depth=1", "correct", 2, q=1, recursive_calls=1, calls_on_wrong=1),
        record(f"conductor:{RUN}@depth=2", "correct", 2, recursive_calls=1, calls_on_right=1, stops_on_right=1),
        record(f"conductor:{RUN}@depth=2", "error", 9, q=1),  # an infrastructure error: left out
        record(f"conductor:{RUN}@depth=3", "correct", 3, recursive_calls=2, calls_on_right=2, stops_on_right=1),
        record(f"conductor:{RUN}@depth=3", "plan_error", 0, q=1),  # the policy's failure: scores 0
    ]
    figures = bench.depth_figures(records, PLAIN)
    assert figures["plain_accuracy"] == 0.5
    assert [figures[f"depth_{d}_accuracy"] for d in range(4)] == [0.5, 1.0, 1.0, 0.5]
    assert [figures[f"depth_{d}_calls_per_sample"] for d in range(4)] == [1.0, 2.0, 2.0, 1.5]
    assert figures["depth_1_stop_rate_when_right"] == 1.0 and figures["depth_1_stop_rate_when_wrong"] == 0.0
    assert figures["depth_0_stop_rate_when_right"] is None  # no call was made there
    assert figures["stop_rate_when_right"] == 3 / 4 and figures["stop_rate_when_wrong"] == 0.0

    goals = bench.goals(figures)
    assert goals["accuracy_never_falls"] == {
        "value": -0.5,
        "goal": "each depth's accuracy - the one before >= 0",
        "reached": False,
    }
    assert goals["accuracy_rises_0_to_3"]["reached"] is False  # 0.5 -> 0.5
    assert goals["calls_ratio_3_to_0"]["value"] == 1.5 and goals["calls_ratio_3_to_0"]["reached"] is True
    assert goals["stop_rate_when_right"]["reached"] is True and goals["stop_rate_when_wrong"]["reached"] is True
    assert bench.by_depth(figures)["3"]["accuracy"] == 0.5
