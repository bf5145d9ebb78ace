"""The best plan of a simulated pool (conductor_rl/evaluation/optimal.py): exact accuracies and costs
checked by hand, the plan family, the choice of the best plan on the guide's pool, and the guide's
table kept current (docs/guide/simulator.md)."""

from __future__ import annotations

import time

import pytest

from conductor_rl.config import SimSpec, WorkerConfig
from conductor_rl.evaluation.optimal import (
    PROMPT_OVERHEAD_CHARS,
    PlanStep,
    PoolOptimum,
    best_plan,
    best_single,
    expected_cost,
    plan_accuracy,
    plan_family,
    value_of,
)
from tests.sim_pools import guide_pool, sim_optimum_script, sim_worker

SOLVE = PlanStep(0)


def check(*reads: int, worker: int = 0) -> PlanStep:
    return PlanStep(worker, reads, "check")


# One worker: solves with 0.5, keeps a right answer it checks with 0.9, repairs with 0.4 x 0.5.
ONE = [SimSpec(accuracy={"default": 0.5}, keep_rate=0.9, repair_rate=0.4, gain_with_context=0.1)]


def test_a_single_step_is_its_solve_chance():
    assert plan_accuracy([SOLVE], ONE, "math", 0.3) == pytest.approx(0.5)


def test_solve_then_check():
    # right then kept: 0.5 x 0.9; wrong then repaired: 0.5 x (0.4 x 0.5).
    assert plan_accuracy([SOLVE, check(0)], ONE, "math", 0.0) == pytest.approx(0.5 * 0.9 + 0.5 * 0.4 * 0.5)  # 0.55


def test_a_check_reading_two_answers_judges_the_latest():
    # Step 1 right (0.5): kept with 0.9; wrong: repaired with 0.4 x 0.5. Step 0 does not help: a check
    # right whenever any answer it reads is right would pick the better of two perfectly (0.725).
    steps = [SOLVE, SOLVE, check(0, 1)]
    assert plan_accuracy(steps, ONE, "math", 0.0) == pytest.approx(0.5 * 0.9 + 0.5 * 0.4 * 0.5)  # 0.55
    # Which answer is the latest goes by step index, whatever the order of the reads.
    uneven = [PlanStep(0, ()), PlanStep(1, ()), check(1, 0, worker=2)]
    specs = [SimSpec(accuracy={"default": 1.0}), SimSpec(accuracy={"default": 0.0}), ONE[0]]
    assert plan_accuracy(uneven, specs, "math", 0.0) == pytest.approx(0.4 * 0.5)  # step 1 is always wrong


def test_a_check_of_a_check():
    # Step 1 is right with 0.55 (above); step 2 reads only step 1: 0.55 x 0.9 + 0.45 x 0.2.
    steps = [SOLVE, check(0), check(1)]
    assert plan_accuracy(steps, ONE, "math", 0.0) == pytest.approx(0.55 * 0.9 + 0.45 * 0.2)  # 0.585


def test_a_solve_that_reads_gains_context():
    assert plan_accuracy([SOLVE, PlanStep(0, (0,))], ONE, "math", 0.0) == pytest.approx(0.6)  # 0.5 + 0.1


def test_a_checker_of_another_worker():
    # Worker 0 solves with 0.8; worker 1 keeps with 0.9 and repairs with 0.5 x its own 0.4.
    specs = [
        SimSpec(accuracy={"default": 0.8}),
        SimSpec(accuracy={"default": 0.4}, keep_rate=0.9, repair_rate=0.5),
    ]
    steps = [PlanStep(0), check(0, worker=1)]
    assert plan_accuracy(steps, specs, "math", 0.0) == pytest.approx(0.8 * 0.9 + 0.2 * 0.5 * 0.4)  # 0.76


def test_difficulty_enters_through_the_solve_chance():
    specs = [SimSpec(accuracy={"math": 0.9}, hard_accuracy={"math": 0.5})]
    assert plan_accuracy([SOLVE], specs, "math", 0.5) == pytest.approx(0.7)


@pytest.mark.parametrize(
    "steps,complaint",
    [
        ([], "at least one step"),
        ([PlanStep(0, (), "check")], "reads nothing"),
        ([SOLVE, PlanStep(0, (1,))], "earlier steps"),
        ([PlanStep(3)], "not in a pool"),
    ],
)
def test_a_plan_outside_the_family_is_refused(steps, complaint):
    with pytest.raises(ValueError, match=complaint):
        plan_accuracy(steps, ONE, "math", 0.0)


# --------------------------------------------------------------------------- cost


def test_expected_cost_by_hand():
    workers = [sim_worker("a", (1.0, 10.0), 100), sim_worker("b", (2.0, 4.0), 50)]
    base = (400 + PROMPT_OVERHEAD_CHARS) // 4  # input tokens of a step that reads nothing
    one = (base * 1.0 + 100 * 10.0) / 1e6
    assert expected_cost([PlanStep(0)], workers, 400) == pytest.approx(one)
    # b checks a: it reads a's 100 tokens (400 characters) besides the question.
    checked = one + (((400 + PROMPT_OVERHEAD_CHARS + 400) // 4) * 2.0 + 50 * 4.0) / 1e6
    assert expected_cost([PlanStep(0), check(0, worker=1)], workers, 400) == pytest.approx(checked)
    # A worker's output never exceeds its max_tokens.
    short = workers[0].model_copy(update={"max_tokens": 20})
    assert expected_cost([PlanStep(0)], [short], 400) == pytest.approx((base * 1.0 + 20 * 10.0) / 1e6)


# --------------------------------------------------------------------------- the family


def test_the_family_for_one_worker_and_two_steps():
    # One step; or a first step that the second reads, as a solve or as a check. A second step that
    # reads nothing would leave the first unread, and is left out.
    assert list(plan_family(1, 2)) == [
        (SOLVE,),
        (SOLVE, PlanStep(0, (0,), "solve")),
        (SOLVE, check(0)),
    ]


def test_the_family_without_solving_steps_that_read():
    # A question whose wording holds a check word: a step that reads is always a check.
    assert list(plan_family(1, 2, solve_reads=False)) == [(SOLVE,), (SOLVE, check(0))]
    assert all(step.role == "check" for steps in plan_family(2, 3, solve_reads=False) for step in steps if step.reads)


def test_a_question_that_cannot_be_on_task_scales_every_solve():
    workers = [sim_worker("w", (1.0, 1.0), 100, accuracy={"default": 0.8}, off_task_factor=0.5)]
    assert best_single(workers, "math", 0.0, 400, on_task=False).accuracy == pytest.approx(0.4)
    optimum = PoolOptimum(workers, 400, 2)
    assert optimum.single("math", 0.0, on_task=False).accuracy == pytest.approx(0.4)
    assert optimum.single("math", 0.0).accuracy == pytest.approx(0.8)
    # Each question length its own entry: the cost follows the length.
    assert optimum.best("math", 0.0, 4000).cost_usd > optimum.best("math", 0.0).cost_usd


def test_the_family_leaves_out_unread_steps():
    # Three steps, one worker: step 1 reads nothing (then step 2 reads 0 and 1, two roles) or reads 0
    # (two roles; then step 2 reads 1 or 0 and 1, two roles each): 2 + 2 x 4 = 10, and 1 + 2 shorter.
    plans = list(plan_family(1, 3))
    assert len(plans) == 13
    for steps in plans:
        read = {j for step in steps for j in step.reads}
        assert set(range(len(steps) - 1)) <= read
        assert all(step.reads or step.role == "solve" for step in steps)


def test_the_family_is_searched_quickly():
    workers = [sim_worker(f"w{i}", (1.0, 1.0), 100, keep_rate=0.9) for i in range(3)]
    started = time.perf_counter()
    best_plan(workers, "math", 0.5, 400, max_steps=3)
    assert time.perf_counter() - started < 1.0


# --------------------------------------------------------------------------- the best plan


def test_the_guides_pool_is_the_one_it_describes():
    math_expert, knowledge_expert, generalist = (w.sim for w in guide_pool())
    assert math_expert.accuracy["math"] == 0.95 and math_expert.hard_accuracy["math"] == 0.45
    assert knowledge_expert.accuracy["mmlu"] == 0.95 and knowledge_expert.keep_rate == 0.92
    assert generalist.keep_rate == 0.9 and generalist.repair_rate == 0.6


@pytest.mark.parametrize("cost_weight", [0.0, 10.0])
def test_a_hard_question_is_best_answered_with_a_check(cost_weight):
    pool = guide_pool()
    best = best_plan(pool, "math", 1.0, 400, 3, cost_weight)
    single = best_single(pool, "math", 1.0, 400, cost_weight)
    assert len(best.steps) > 1 and best.steps[-1].role == "check"
    assert best.accuracy > single.accuracy + 0.09  # the guide: +15 points without cost, +9 with
    assert single.steps == (PlanStep(0),)  # the math expert


@pytest.mark.parametrize("cost_weight", [0.0, 10.0])
def test_an_easy_question_is_one_call_to_its_expert(cost_weight):
    assert best_plan(guide_pool(), "math", 0.1, 400, 3, cost_weight).steps == (PlanStep(0),)
    assert best_plan(guide_pool(), "mmlu", 0.2, 400, 3, cost_weight).steps == (PlanStep(1),)
    # The expert checking itself spoils more right answers (keep_rate 0.92) than it mends: 0.873 < 0.9.
    assert plan_accuracy([SOLVE, check(0)], [w.sim for w in guide_pool()], "math", 0.1) == pytest.approx(
        0.9 * 0.92 + 0.1 * 0.5 * 0.9
    )


def test_value_is_the_expected_reward_less_the_cost():
    best = best_plan(guide_pool(), "math", 1.0, 400, 3, 10.0)
    assert best.value == pytest.approx(0.5 + 0.5 * best.accuracy - 10.0 * best.cost_usd)
    assert value_of(1.0, 0.0) == 1.0 and value_of(0.0, 0.0) == 0.5


def test_ties_go_to_the_cheaper_plan_then_the_shorter():
    dear = sim_worker("dear", (5.0, 5.0), 100, accuracy={"default": 0.7})
    cheap = sim_worker("cheap", (1.0, 1.0), 100, accuracy={"default": 0.7})
    assert best_single([dear, cheap], "math", 0.0, 400).steps == (PlanStep(1),)
    # A free, perfect worker: solving alone and solving then checking are both sure and free.
    perfect = sim_worker("perfect", (0.0, 0.0), 100, accuracy={"default": 1.0}, keep_rate=1.0)
    assert best_plan([perfect], "math", 0.0, 400, 3).steps == (PlanStep(0),)


def test_a_pool_with_a_real_worker_has_no_computable_optimum():
    real = WorkerConfig(name="gpt-x", provider="openai", model="gpt-x")
    with pytest.raises(ValueError, match="'gpt-x'"):
        best_plan([guide_pool()[0], real], "math", 0.5, 400, 2)
    with pytest.raises(ValueError, match="'gpt-x'"):
        PoolOptimum([real], 400, 2)


def test_the_optimum_is_remembered_per_domain_and_difficulty():
    optimum = PoolOptimum(guide_pool(), 400, 3, cost_weight=10.0)
    first = optimum.best("math", 1.0)
    assert optimum.best("math", 1.0) is first
    assert optimum.single("math", 1.0) == best_single(guide_pool(), "math", 1.0, 400, 10.0)


def test_the_guides_tables_are_current():
    script = sim_optimum_script()
    guide = script.GUIDE.read_text()
    for table in (script.settings_table(guide_pool()), script.table(guide_pool(), 400, 3, 10.0)):
        assert table in guide, (
            "docs/guide/simulator.md is out of date: run python scripts/sim_optimum.py, paste its tables"
        )
