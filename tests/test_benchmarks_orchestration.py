"""benchmarks/orchestration.py: the exact figures it reads from an evaluation's records, the paired
comparisons, the goals it reports, and the tabular yardstick. (The benchmark itself trains and
evaluates for tens of minutes; its figures are in docs/results.md.)"""

from __future__ import annotations

import json

import pytest

from conductor_rl.config import load_config
from conductor_rl.data import load_dataset
from conductor_rl.evaluation.summary import EvalRecord
from tests.benchmark_scripts import load_benchmark

QUESTION_TEXT = "Find the area of the triangle with sides 3, 4 and 5."


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("orchestration")


@pytest.fixture(scope="module")
def config():
    return load_config()


def record(method: str, verdict: str, workers=("sim-math-expert",), difficulty=1.0, check=False, q=0, repeat=0):
    plan = [{"model_id": 0, "worker": workers[0], "subtask": "Find the triangle area", "access": []}]
    plan += [
        {
            "model_id": 0,
            "worker": w,
            "subtask": "Check the answer" if check else "Find the triangle area",
            "access": "all",
        }
        for w in workers[1:]
    ]
    return EvalRecord(
        method, "bench", f"q{q}", "math", repeat, verdict, steps=len(workers), workers=tuple(workers),
        calls=len(workers), cost_usd=0.01 * len(workers), plan=None if verdict == "plan_error" else tuple(plan),
        difficulty=difficulty,
    )  # fmt: skip


def questions(bench_questions=2):
    from conductor_rl.data import Question

    return {
        ("bench", f"q{i}"): Question(f"q{i}", "math", QUESTION_TEXT, "6", "numeric", "math500", {"level": 5})
        for i in range(bench_questions)
    }


def test_each_method_is_scored_by_the_exact_expectation_of_the_plans_it_wrote(bench, config):
    conductor = "conductor:runs/x/run"
    records = [
        record(conductor, "wrong", ("sim-math-expert", "sim-generalist"), check=True, q=0),
        record(conductor, "plan_error", q=1),
        record(conductor, "correct", q=1, repeat=1),
        record("single:sim-math-expert", "wrong", q=0),
        record("single:sim-math-expert", "correct", q=1),
        record("single:sim-generalist", "correct", ("sim-generalist",), q=0),
        record("single:sim-generalist", "correct", ("sim-generalist",), q=1),
        record("moa", "error", q=0),  # an infrastructure error is left out
        record("moa", "correct", q=1),
    ]
    values = bench.method_values(records, questions(), config.workers)
    math, generalist = config.workers[0].sim, config.workers[2].sim
    p = math.hard_accuracy["math"]
    check = p * generalist.keep_rate + (1 - p) * generalist.repair_rate * generalist.hard_accuracy["math"]
    assert values["conductor"] == pytest.approx({("bench", "q0"): check, ("bench", "q1"): p / 2})  # a plan error: 0
    # the best single worker by its expected accuracy, whatever it drew
    assert values["best_single"] == pytest.approx({("bench", "q0"): p, ("bench", "q1"): p})
    assert list(values["moa"]) == [("bench", "q1")]
    got = bench.figures(records, values, optimal_reward=0.8)
    assert got["expected_accuracy"]["conductor"] == pytest.approx((check + p / 2) / 2)
    assert got["sampled_accuracy"] == pytest.approx((0 + 0.5) / 2)
    # the plan error's question counts 0 reward, the other its exact expected reward
    assert got["fraction_of_optimal_reward"] == pytest.approx((0.5 + 0.5 * check + 0.0) / 2 / 0.8)
    assert got["hard_checking_share"] == 0.5 and got["easy_single_step_share"] is None
    assert got["plan_shapes"]["math/hard"]["final_worker_shares"] == {"sim-generalist": 0.5, "sim-math-expert": 0.5}
    json.dumps(got)


def test_comparisons_are_paired_per_question_and_beats_needs_two_standard_errors(bench):
    def seed(shift):
        base = {("b", f"q{i}"): 0.5 + 0.01 * i for i in range(10)}
        return {
            "conductor": {k: v + shift + (0.002 if int(k[1][1:]) % 2 else -0.002) for k, v in base.items()},
            "random": base,
            "best_single": {k: v + shift for k, v in base.items()},
            "moa": base,
            "router": base,
            "untrained": base,
        }

    got = bench.comparisons([seed(0.05), seed(0.06), seed(0.04)])
    assert got["random"]["difference"] == pytest.approx(0.05) and got["random"]["questions"] == 30
    assert got["random"]["se_between_seeds"] == pytest.approx(0.01 / 3**0.5)
    assert got["random"]["beats"]
    assert got["best_single"]["difference"] == pytest.approx(0.0, abs=1e-12) and not got["best_single"]["beats"]


def test_goals_are_reached_or_missed(bench):
    runs = [
        {"expected_accuracy": {"conductor": 0.8, "random": 0.7}, "fraction_of_optimal_reward": 0.96,
         "hard_checking_share": 0.6, "easy_single_step_share": 0.5, "wall_s": 600.0},
        {"expected_accuracy": {"conductor": 0.7, "random": 0.7}, "fraction_of_optimal_reward": 0.94,
         "hard_checking_share": 0.4, "easy_single_step_share": 0.7, "wall_s": 2000.0},
    ]  # fmt: skip
    compared = {"random": {"beats": True}, "best_single": {"beats": False}}
    got = bench.summary_over_seeds(runs, compared, {"tabular_fraction_of_optimal_reward": 0.97})
    assert got["expected_accuracy"]["conductor"] == pytest.approx({"mean": 0.75, "se": 0.05})
    assert got["fraction_of_optimal_reward"]["mean"] == pytest.approx(0.95)
    assert got["beats"] == ["random"] and got["tabular_fraction_of_optimal_reward"] == 0.97
    assert got["goals_reached"] == {
        "beats": False,
        "fraction_of_optimal_reward": True,
        "hard_checking_share": True,
        "easy_single_step_share": False,
        "seed_minutes": False,
    }
    assert json.dumps(bench.GOALS)
    # the mean over seeds that benchmarks/subsets.py and recursion.py take
    per_seed = [{"seed": 0, "accuracy": 0.6, "share": None}, {"seed": 1, "accuracy": 0.8, "share": 0.5}]
    assert bench.mean_over_seeds(per_seed) == {"accuracy": pytest.approx(0.7), "share": None}


def test_the_optimum_and_the_tabular_yardstick_on_the_embedded_pool(bench, config):
    held_out = [q for spec in config.evaluate.benchmarks for q in load_dataset(spec)]
    accuracy, expected_reward = bench.optimum_of(held_out, config.workers, 3)
    assert expected_reward == pytest.approx(0.5 + 0.5 * accuracy) and 0.7 < accuracy < 1.0
    got = bench.tabular_yardstick(config, held_out, iterations=2, seeds=[0, 1])
    assert set(got["tabular_runs"]) == {
        f"{o}/lr={lr:g}" for o in ("domain", "domain_difficulty") for lr in bench.TABULAR_LRS
    }
    fractions = [r["fraction_of_optimal_reward"] for r in got["tabular_runs"].values()]
    assert (
        got["tabular_fraction_of_optimal_reward"] == max(fractions) > got["tabular_uniform_fraction_of_optimal_reward"]
    )


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


def test_the_readout_yardstick_reads_the_conductors_state_centred_and_raw(bench):
    config = load_config(None, ["conductor.model=tiny-qwen2"])
    held_out = [q for spec in config.evaluate.benchmarks for q in load_dataset(spec)][:12]
    got = bench.readout_yardstick(config, held_out, iterations=1, seeds=[0])
    assert set(got["readout_runs"]) == {f"centred/lr={lr:g}" for lr in bench.READOUT_LRS} | {
        f"raw/lr={lr:g}" for lr in bench.READOUT_RAW_LRS
    }
    fractions = [r["fraction_of_optimal_reward"] for r in got["readout_runs"].values()]
    assert got["readout_fraction_of_optimal_reward"] == max(fractions) and 0 < min(fractions) <= max(fractions) < 1
    assert got["readout_best"] in got["readout_runs"]
