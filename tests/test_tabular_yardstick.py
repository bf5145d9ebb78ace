"""conductor_rl.evaluation.tabular and readout: the yardstick policies a Conductor's learning is held to."""

from __future__ import annotations

import pytest
import torch

from conductor_rl.config import load_config
from conductor_rl.data import load_dataset
from conductor_rl.evaluation.readout import ReadoutPolicy, centred, choice_states, readout_grpo, state_geometry
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
    question = held_out[0]
    probs, accuracy = policy.probabilities(question), policy.accuracies(kind_of(question))
    assert float(probs.max() - probs.min()) == pytest.approx(0.0)
    assert policy.expected_reward([question]) == pytest.approx(float(0.5 + 0.5 * accuracy.mean()))
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


def test_a_readout_of_the_domain_alone_is_the_per_domain_table(setting):
    """A linear policy over a state that is the domain's one-hot vector is one table per domain:
    the same curve, step for step, on the same rollouts."""
    c, train, held_out = setting
    onehot = {
        q.question: torch.tensor([float(q.domain == "math"), float(q.domain != "math")]) for q in train + held_out
    }
    grpo = dict(max_steps=c.conductor.max_steps, iterations=4, questions_per_iteration=8, group_size=8, lr=100.0)
    table = tabular_grpo(train, held_out, c.workers, observe="domain", balance_domains=True, **grpo)
    readout = readout_grpo(train, held_out, c.workers, onehot, centre=False, balance_domains=True, **grpo)
    assert readout.curve == pytest.approx(table.curve) and readout.observe == "choice_state"
    assert readout.curve[-1] > readout.curve[0]


def test_centring_takes_out_the_training_questions_mean_state(setting):
    _, train, held_out = setting
    states = {q.question: torch.tensor([5.0, float(q.domain == "math")], dtype=torch.float64) for q in train + held_out}
    shown = centred(states, train)
    assert torch.stack([shown[q.question] for q in train]).mean(0) == pytest.approx(torch.zeros(2, dtype=torch.float64))
    with pytest.raises(KeyError, match="choice_states"):
        ReadoutPolicy(setting[0].workers, 3, {train[0].question: shown[train[0].question]}).logits(held_out[0])


def test_choice_states_are_the_head_input_at_the_prompt_end():
    """choice_states reads the real model's normed last hidden state: the head applied to it is the
    model's own next-token logits at that position."""
    from conductor_rl.models import load_causal_lm

    model, tokenizer = load_causal_lm("tiny-qwen2", "float32")
    ids = tokenizer("model_id = [", add_special_tokens=False)["input_ids"]
    states = choice_states(model, {"q": ids})
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double()
        head = model.get_output_embeddings().weight.double()
    assert states["q"].shape == (model.config.hidden_size,)
    assert (head @ states["q"]) == pytest.approx(logits, abs=1e-4)


def test_the_state_geometry_separates_the_domains_gap_from_the_spread_within(setting):
    _, train, _ = setting
    states = {}
    for i, q in enumerate(train):
        side = 1.0 if q.domain == "math" else -1.0
        states[q.question] = torch.tensor([10.0, 3.0 * side, 1.0 if i % 2 else -1.0], dtype=torch.float64)
    got = state_geometry(states, train)
    assert got["mean_norm"] == pytest.approx(float(torch.tensor([10.0, 1.0, 0.0]).norm()), abs=0.1)
    assert got["domain_half_gap"] == pytest.approx(3.0) and got["within_domain"] == pytest.approx(1.0, abs=0.05)
    with pytest.raises(ValueError, match="two domains"):
        state_geometry(states, [q for q in train if q.domain == "math"])
