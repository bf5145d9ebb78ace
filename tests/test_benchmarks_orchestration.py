"""benchmarks/orchestration.py: the figures it reads from an evaluation's records
and the pool's optimum, and the goals it reports. (The benchmark itself trains and evaluates for
tens of minutes; its figures are in docs/results.md.)"""

from __future__ import annotations

import json

import pytest

from conductor_rl.config import load_config
from conductor_rl.data import load_dataset
from conductor_rl.evaluation.summary import EvalRecord
from tests.benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("orchestration")


def record(method: str, verdict: str, steps: int = 1, difficulty: float = 0.1, check: bool = False, **kw) -> EvalRecord:
    plan = [{"model_id": 0, "subtask": "Solve the triangle", "access": []}]
    plan += [{"model_id": 0, "subtask": "Check it" if check else "Again", "access": [i]} for i in range(steps - 1)]
    return EvalRecord(
        method, "samples:math500:eval", f"q{kw.pop('q', 0)}", "math", kw.pop("repeat", 0), verdict,
        steps=steps, workers=("w",) * steps, calls=steps, cost_usd=kw.pop("cost", 0.01) * steps,
        plan=tuple(plan) if verdict != "plan_error" else None, difficulty=difficulty,
    )  # fmt: skip


def test_the_figures_compare_the_conductor_with_the_optimum_and_the_baselines(bench):
    conductor = "conductor:runs/x/run"
    records = [
        record(conductor, "correct", 1, 0.1, q=0),
        record(conductor, "wrong", 1, 0.1, q=1),
        record(conductor, "correct", 3, 1.0, check=True, q=2),
        record(conductor, "plan_error", 0, 1.0, q=3),
        record(conductor, "correct", 2, 0.75, q=4),  # two steps, no check
        record("moa", "correct", 4, 0.1, cost=0.02),
        record("router", "correct"),
        record("random", "wrong"),
        record("oracle-single", "correct"),
        record("conductor:untrained", "plan_error", 0),
    ]
    got = bench.figures(records, optimal_accuracy=0.8, optimal_reward=0.9)
    assert got["fraction_of_optimal_reward"] == pytest.approx((1 + 0.5 + 1 + 0 + 1) / 5 / 0.9)
    assert got["accuracy"] == pytest.approx(3 / 5) and got["optimal_accuracy"] == 0.8
    assert (got["router_accuracy"], got["random_accuracy"], got["oracle_single_accuracy"]) == (1.0, 0.0, 1.0)
    assert got["hard_multi_step_share"] == 0.5  # of the two hard plans, one checks
    assert got["easy_single_step_share"] == 1.0
    assert got["moa_cost_per_sample_usd"] == pytest.approx(0.08)


def test_goals_are_reached_missed_or_unknown(bench):
    mean = {
        "fraction_of_optimal_reward": 0.95, "accuracy": 0.80, "oracle_single_accuracy": 0.78,
        "cost_per_sample_usd": 0.004, "moa_cost_per_sample_usd": 0.01, "hard_multi_step_share": None,
        "easy_single_step_share": 0.9, "router_accuracy": 0.7, "random_accuracy": 0.5,
    }  # fmt: skip
    assert bench.goals(mean) == {
        "fraction_of_optimal_reward": True,
        "accuracy_over_oracle_single": False,
        "cost_share_of_moa": True,
        "hard_multi_step_share": None,
        "easy_single_step_share": True,
        "router_beats_random": True,
    }
    runs = [
        {"seed": 0, "accuracy": 0.6, "hard_multi_step_share": None},
        {"seed": 1, "accuracy": 0.8, "hard_multi_step_share": 0.5},
    ]
    assert bench.mean_over_seeds(runs) == {"accuracy": pytest.approx(0.7), "hard_multi_step_share": None}


def test_the_optimum_of_the_embedded_pool_on_its_evaluation_questions(bench):
    config = load_config()
    questions = [q for spec in config.evaluate.benchmarks for q in load_dataset(spec)]
    accuracy, expected_reward = bench.optimum_of(questions, config.workers, 3)
    assert expected_reward == pytest.approx(0.5 + 0.5 * accuracy)
    assert 0.7 < accuracy < 1.0
    assert json.dumps(bench.GOALS)  # the goals print with the figures


def test_the_shares_sampled_in_training_come_from_the_first_and_last_iterations_traces(bench, tmp_path):
    from conductor_rl.run.traces import TraceWriter

    question = "Find the area of the triangle with sides 3, 4 and 5."
    solve = 'model_id = [0]\nsubtasks = ["Find the triangle area"]\naccess_list = [[]]\n'
    check = 'model_id = [0, 1]\nsubtasks = ["Noise words", "Check the answer above"]\naccess_list = [[], "all"]\n'
    writer = TraceWriter(tmp_path)
    writer.write(0, [{"question": question, "completion": solve, "iteration": 0}])
    writer.write(2, [{"question": question, "completion": c, "iteration": 2} for c in (check, "not a plan")])
    got = bench.sampled_shares(tmp_path, iterations=3, n_workers=2)
    assert got["first_iteration_on_task_share"] == 1.0 and got["first_iteration_check_step_share"] == 0.0
    assert got["last_iteration_reading_step_share"] == 0.5 and got["last_iteration_check_step_share"] == 0.5
    assert got["last_iteration_on_task_share"] == 0.0  # "Noise words" carries none of the question
