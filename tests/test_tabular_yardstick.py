"""conductor_rl.evaluation.tabular: the tabular softmax policy that a Conductor's learning is held to."""

from __future__ import annotations

import pytest

from conductor_rl.config import load_config
from conductor_rl.data import load_dataset
from conductor_rl.evaluation.tabular import TabularPolicy, kind_of, tabular_grpo


@pytest.fixture(scope="module")
def setting():
    c = load_config(None, [])
    train = load_dataset(c.data.questions)
    held_out = [q for spec in c.evaluate.benchmarks for q in load_dataset(spec)]
    return c, train, held_out


def run(setting, lr, seed=0, iterations=8, observe="domain"):
    c, train, held_out = setting
    return tabular_grpo(
        train,
        held_out,
        c.workers,
        max_steps=c.conductor.max_steps,
        iterations=iterations,
        questions_per_iteration=8,
        group_size=8,
        lr=lr,
        seed=seed,
        balance_domains=True,
        observe=observe,
    )


def test_it_starts_uniform_and_its_value_is_exact(setting):
    c, _, held_out = setting
    policy = TabularPolicy(c.workers, c.conductor.max_steps)
    kind = kind_of(held_out[0])
    probs, accuracy = policy.probabilities(kind), policy.accuracies(kind)
    assert float(probs.max() - probs.min()) == pytest.approx(0.0)
    assert policy.expected_reward([kind]) == pytest.approx(float(0.5 + 0.5 * accuracy.mean()))
    result = run(setting, lr=1.0, iterations=0)
    assert result.curve[0] < result.optimal_reward and result.fraction_of_optimal_reward < 1


def test_grpo_steps_move_it_towards_the_best_plans_and_a_seed_repeats(setting):
    slow, fast = run(setting, lr=1.0), run(setting, lr=100.0)
    assert fast.fraction_of_optimal_reward > slow.fraction_of_optimal_reward > fast.curve[0] / fast.optimal_reward
    assert fast.iterations_to(0.9) is not None and fast.iterations_to(1.01) is None
    assert run(setting, lr=100.0).curve == fast.curve
    assert run(setting, lr=100.0, seed=1).curve != fast.curve


def test_a_real_worker_has_no_yardstick(setting):
    c, _, _ = setting
    real = [*c.workers[:2], c.workers[2].model_copy(update={"provider": "openai", "sim": None})]
    with pytest.raises(ValueError, match="simulated workers"):
        TabularPolicy(real, 3)
