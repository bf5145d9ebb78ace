"""benchmarks/exploration.py: the shares it reads from sampled plans. (Sampling them takes the
untrained Conductor minutes on a CPU; its figures are in docs/results.md.)"""

from __future__ import annotations

from tests.benchmark_scripts import load_benchmark


def plan(ids: str, subtasks: str, access: str) -> str:
    return f"model_id = [{ids}]\nsubtasks = [{subtasks}]\naccess_list = [{access}]"


def test_shares_count_reading_checks_on_task_solving_and_parse_errors() -> None:
    bench = load_benchmark("exploration")
    question = "How many apples does Tom have after buying seven apples?"
    plans = [
        plan("0", '"Count apples Tom has"', "[]"),  # one on-task solving step
        plan("0, 1", '"Buy a car", "Check the answer above"', "[], [0]"),  # off task, then a check
        plan("2, 1, 0", '"apples count", "Summarise", "Again"', "[], [0], [0, 1]"),  # reads twice, no check word
        "model_id = [0\nsubtasks",  # not a plan
    ]
    shares = bench.exploration_shares([question], [plans], n_workers=3)
    assert shares["plans"] == 3 and shares["parse_errors"] == 1
    assert shares["steps_per_plan"] == 2.0 and shares["multi_step_share"] == round(2 / 3, 4)
    assert shares["reading_step_share"] == 0.5  # 3 of 6 steps read an earlier answer
    assert shares["check_step_share"] == round(1 / 6, 4)  # one of them is worded as a check
    assert shares["on_task_share"] == round(2 / 3, 4)  # "Buy a car" shares no content word with the question


def test_no_plans_give_zero_shares_not_a_division_error() -> None:
    shares = load_benchmark("exploration").exploration_shares(["q"], [["not a plan"]], n_workers=2)
    assert shares["plans"] == 0 and shares["parse_errors"] == 1 and shares["reading_step_share"] == 0.0
