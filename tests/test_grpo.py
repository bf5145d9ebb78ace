"""GRPO maths against a straightforward loop-by-loop reference."""

import math

import pytest
import torch

from conductor_rl.policy.grpo import group_advantages, grpo_loss
from tests.logprob_reference import completion_logprobs


def reference_advantages(rewards, group_size):
    out = []
    for g in range(0, len(rewards), group_size):
        group = rewards[g : g + group_size]
        mean = sum(group) / len(group)
        std = math.sqrt(sum((r - mean) ** 2 for r in group) / len(group))
        out += [0.0 if std < 1e-6 else (r - mean) / std for r in group]
    return out


def reference_loss(logp, old, adv, mask, eps_low, eps_high, beta, ref, aggregation):
    """One completion token at a time, as the paper writes it."""
    per_seq, total, count = [], 0.0, 0
    for i in range(len(logp)):
        seq_total, seq_count = 0.0, 0
        for t in range(len(logp[i])):
            if not mask[i][t]:
                continue
            ratio = math.exp(logp[i][t] - old[i][t])
            clipped = min(max(ratio, 1 - eps_low), 1 + eps_high)
            term = -min(ratio * adv[i], clipped * adv[i])
            if beta:
                d = ref[i][t] - logp[i][t]
                term += beta * (math.exp(d) - d - 1)
            seq_total += term
            seq_count += 1
        total += seq_total
        count += seq_count
        per_seq.append(seq_total / max(seq_count, 1))
    return total / max(count, 1) if aggregation == "token_mean" else sum(per_seq) / len(per_seq)


def test_advantages_match_reference_and_zero_variance_groups_are_marked():
    rewards = [1.0, 0.5, 0.5, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.5, 1.0]
    result = group_advantages(torch.tensor(rewards), group_size=4)
    assert result.advantages.tolist() == pytest.approx(reference_advantages(rewards, 4), abs=1e-6)
    assert result.informative.tolist() == [True] * 4 + [False] * 4 + [True] * 4
    assert result.advantages[4:8].abs().sum() == 0
    # Each informative group is centred and scaled to unit (population) spread.
    group = result.advantages[:4]
    assert float(group.mean()) == pytest.approx(0, abs=1e-6) and float(group.std(unbiased=False)) == pytest.approx(
        1, abs=1e-5
    )


def test_advantages_reject_a_ragged_batch():
    with pytest.raises(ValueError, match="group_size=4"):
        group_advantages(torch.zeros(6), group_size=4)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
@pytest.mark.parametrize("beta", [0.0, 0.05])
@pytest.mark.parametrize("eps_high", [0.2, 0.28])
def test_loss_and_gradient_match_reference(aggregation, beta, eps_high):
    torch.manual_seed(0)
    n, t = 6, 9
    old = torch.randn(n, t) * 0.5 - 2
    # Ratios spread well beyond [0.8, 1.2] so both clip sides are exercised.
    logp = (old + torch.randn(n, t) * 0.6).requires_grad_(True)
    ref = old + torch.randn(n, t) * 0.3
    adv = torch.tensor([1.5, -1.0, 0.3, -0.7, 0.0, 2.0])
    mask = (torch.rand(n, t) > 0.3).float()
    mask[:, 0] = 1
    loss, stats = grpo_loss(
        logp, old, adv, mask, clip_low=0.2, clip_high=eps_high, kl_beta=beta, ref_logprobs=ref, aggregation=aggregation
    )
    expected = reference_loss(
        logp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), 0.2, eps_high, beta, ref.tolist(), aggregation
    )
    assert loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert 0 < stats.clip_fraction < 1  # some tokens clipped, some not

    loss.backward()
    # Numerical gradient of the reference at a few coordinates.
    for i, j in [(0, 1), (1, 2), (3, 4), (5, 0), (2, 8)]:
        h = 1e-4
        base = logp.detach().clone()
        up, down = base.clone(), base.clone()
        up[i, j] += h
        down[i, j] -= h
        numeric = (
            reference_loss(
                up.tolist(), old.tolist(), adv.tolist(), mask.tolist(), 0.2, eps_high, beta, ref.tolist(), aggregation
            )
            - reference_loss(
                down.tolist(), old.tolist(), adv.tolist(), mask.tolist(), 0.2, eps_high, beta, ref.tolist(), aggregation
            )
        ) / (2 * h)
        assert float(logp.grad[i, j]) == pytest.approx(numeric, abs=2e-4)


def test_clipping_on_both_sides_stops_the_gradient():
    old = torch.zeros(4, 1)
    # ratio e^0.5 > 1.2 with A > 0, ratio e^-0.5 < 0.8 with A < 0: both clipped, no gradient.
    # ratio e^0.5 with A < 0 and e^-0.5 with A > 0: not clipped (pessimistic side), gradient flows.
    logp = torch.tensor([[0.5], [-0.5], [0.5], [-0.5]], requires_grad=True)
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    loss, stats = grpo_loss(logp, old, adv, torch.ones(4, 1))
    loss.backward()
    assert logp.grad[:2].abs().sum() == 0 and (logp.grad[2:].abs() > 0).all()
    assert stats.clip_fraction == pytest.approx(0.5)


def test_zero_advantage_gives_zero_gradient_and_on_policy_ratio_is_one():
    logp = torch.randn(3, 5, requires_grad=True)
    loss, stats = grpo_loss(logp, logp.detach(), torch.zeros(3), torch.ones(3, 5))
    loss.backward()
    assert loss.item() == 0 and logp.grad.abs().sum() == 0 and stats.ratio_mean == pytest.approx(1.0)


def test_micro_batches_with_a_global_normalizer_equal_one_batch():
    torch.manual_seed(1)
    old = torch.randn(8, 6)
    logp = (old + 0.1 * torch.randn(8, 6)).requires_grad_(True)
    adv, mask = torch.randn(8), (torch.rand(8, 6) > 0.4).float()
    for aggregation, normalizer in (("token_mean", float(mask.sum())), ("sequence_mean", 8.0)):
        full, _ = grpo_loss(logp, old, adv, mask, aggregation=aggregation)
        (full_grad,) = torch.autograd.grad(full, logp)
        parts = [
            grpo_loss(logp[s], old[s], adv[s], mask[s], aggregation=aggregation, normalizer=normalizer)[0]
            for s in (slice(0, 3), slice(3, 8))
        ]
        (acc_grad,) = torch.autograd.grad(sum(parts), logp)
        assert torch.allclose(full_grad, acc_grad, atol=1e-6)


def test_kl_needs_a_reference_and_bad_aggregation_is_named():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="ref_logprobs"):
        grpo_loss(x, x, torch.zeros(1), torch.ones(1, 1), kl_beta=0.1)
    with pytest.raises(ValueError, match="token_mean"):
        grpo_loss(x, x, torch.zeros(1), torch.ones(1, 1), aggregation="mean")


def test_the_reference_completion_logprobs_match_a_direct_softmax():
    torch.manual_seed(2)
    logits = torch.randn(2, 5, 11)
    ids = torch.randint(0, 11, (2, 5))
    got = completion_logprobs(logits, ids)
    for n in range(2):
        for t in range(4):
            expected = torch.log(torch.softmax(logits[n, t], dim=-1)[ids[n, t + 1]])
            assert float(got[n, t]) == pytest.approx(float(expected), abs=1e-5)


def test_behaviour_weights_correct_stale_rows_towards_the_learner_and_are_truncated():
    """Decoupled PPO: a stale row's tokens weigh min(cap, π_prox / π_behav); a fresh row's weigh 1."""
    from conductor_rl.policy.grpo import behaviour_weights

    proximal = torch.log(torch.tensor([[0.5, 0.2], [0.5, 0.2]]))
    behaviour = torch.log(torch.tensor([[0.25, 0.8], [0.01, 0.8]]))
    weights = behaviour_weights(proximal, behaviour, torch.tensor([True, False]), cap=2.0)
    assert torch.allclose(weights, torch.tensor([[2.0, 0.25], [1.0, 1.0]]))
    capped = behaviour_weights(proximal, behaviour, torch.tensor([True, True]), cap=3.0)
    assert torch.allclose(capped[1], torch.tensor([3.0, 0.25]))
    # The weights scale each token's clipped term, and carry no gradient of their own.
    logprobs = proximal.clone().requires_grad_(True)
    loss, _ = grpo_loss(logprobs, proximal, torch.tensor([1.0, 1.0]), torch.ones(2, 2), behaviour_weights=weights)
    loss.backward()
    assert torch.allclose(logprobs.grad, -weights / 4)
