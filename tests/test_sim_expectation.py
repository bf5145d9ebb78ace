"""conductor_rl.workers.sim_expectation: a written plan's exact expected accuracy in a simulated pool,
against the simulator's own draws and the best-plan search."""

from __future__ import annotations

import random

import pytest

from conductor_rl.config import load_config
from conductor_rl.evaluation.optimal import best_plan
from conductor_rl.plan import Plan, Step
from conductor_rl.workers.providers.base import TaskHint
from conductor_rl.workers.providers.sim import SimProvider
from conductor_rl.workers.sim_expectation import PlanStep, expected_accuracy, plan_accuracy, sim_specs, written_steps
from conductor_rl.workers.sim_rules import format_answer

QUESTION = "Find the area of the triangle whose sides measure 3, 4 and 5 centimetres."
ON_TASK = "Find the area of the triangle with sides 3, 4, 5"
CHECK = "Check the earlier answer about the triangle area"


@pytest.fixture(scope="module")
def pool():
    return load_config(None, []).workers  # the embedded default's three simulated workers


def test_written_steps_read_access_wording_and_topic_as_the_simulator_does():
    plan = Plan((Step(0, ON_TASK, []), Step(2, "Solve it.", "all"), Step(1, CHECK, [1])))
    assert written_steps(plan, QUESTION) == (
        PlanStep(0, (), "solve", True),
        PlanStep(2, (0,), "solve", False),  # reads, but no check word: a solve; no content word: off task
        PlanStep(1, (1,), "check", True),
    )


def test_expected_accuracy_by_hand(pool):
    specs = sim_specs(pool)
    math, generalist = specs[0], specs[2]
    d = 1.0  # the hardest maths: hard_accuracy
    one = expected_accuracy(Plan((Step(0, ON_TASK, []),)), QUESTION, "math", d, specs)
    assert one == pytest.approx(math.hard_accuracy["math"])
    off = expected_accuracy(Plan((Step(0, "Solve it.", []),)), QUESTION, "math", d, specs)
    assert off == pytest.approx(math.hard_accuracy["math"] * math.off_task_factor)
    solve_check = Plan((Step(0, ON_TASK, []), Step(2, CHECK, "all")))
    p = math.hard_accuracy["math"]
    by_hand = p * generalist.keep_rate + (1 - p) * generalist.repair_rate * generalist.hard_accuracy["math"]
    assert expected_accuracy(solve_check, QUESTION, "math", d, specs) == pytest.approx(by_hand)
    # the best plan's search and a written plan agree on the same steps
    best = best_plan(pool, "math", d, len(QUESTION), 3)
    assert plan_accuracy(best.steps, specs, "math", d) == pytest.approx(best.accuracy)
    # a step given to a worker outside the pool (the Conductor's seat) has no expectation
    assert expected_accuracy(Plan((Step(3, ON_TASK, []),)), QUESTION, "math", d, specs) is None
    assert sim_specs([*pool[:2], pool[2].model_copy(update={"provider": "openai", "sim": None})]) is None


def test_expected_accuracy_is_the_simulators_long_run_frequency(pool):
    """The simulator's own draws (SimProvider.chance, each step's answer drawn as the workflow would)
    over many rollouts land within four standard errors of the exact expectation."""
    providers = [SimProvider(w, seed=0) for w in pool]
    plan = Plan((Step(0, ON_TASK, []), Step(2, CHECK, "all"), Step(1, "Verify the triangle area", "all")))
    exact = expected_accuracy(plan, QUESTION, "math", 0.75, sim_specs(pool))
    rng, right, n = random.Random(0), 0, 20_000
    for _ in range(n):
        answers: list[str] = []
        for i, step in enumerate(plan.steps):
            visible = tuple(answers[j] for j in plan.visible(i))
            hint = TaskHint(
                "q", "math", "6", "numeric", visible, question=QUESTION, subtask=step.subtask, difficulty=0.75
            )
            correct = rng.random() < providers[step.model_id].chance(hint)
            answers.append(format_answer("6" if correct else "7", "numeric"))
        right += answers[-1] == format_answer("6", "numeric")
    se = (exact * (1 - exact) / n) ** 0.5
    assert abs(right / n - exact) < 4 * se, (right / n, exact)


def test_the_training_record_carries_the_sampled_plans_exact_expected_accuracy_and_reward(pool):
    from conductor_rl.rollout.rollouts import Rollout, parse_rollout
    from conductor_rl.rollout.workflow import Task
    from conductor_rl.run.metrics import iteration_metrics

    task = Task("q", QUESTION, "math", "6", "numeric", difficulty=1.0)
    one = f'model_id = [0]\nsubtasks = ["{ON_TASK}"]\naccess_list = [[]]\n'
    rollouts = [parse_rollout(Rollout(task, text, group=0, sample=i), 3, 3) for i, text in enumerate([one, "no plan"])]
    names = [w.name for w in pool]
    record = iteration_metrics(rollouts, names, specs=sim_specs(pool))
    p = pool[0].sim.hard_accuracy["math"]
    assert record["expected_accuracy"] == pytest.approx(p / 2)  # a plan error is never right
    assert record["expected_reward_mean"] == pytest.approx((0.5 + 0.5 * p + 0.0) / 2)  # and its reward is 0
    assert record["plan_shapes"]["math/hard"]["expected_accuracy"] == pytest.approx(p)
    assert "expected_accuracy" not in iteration_metrics(rollouts, names)  # no specs: a real pool
