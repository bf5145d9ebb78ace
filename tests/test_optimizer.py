"""conductor_rl/policy/optimizer.py: AdamW for the model, plain steps for the head's worker-id rows."""

from __future__ import annotations

import copy

import pytest
import torch

from conductor_rl.config import LearnerConfig, load_config
from conductor_rl.policy.optimizer import AdamWWithPlainGroups, HeadLearnsTiedError, HeadRows, learner_optimizer

pytestmark = pytest.mark.light  # a tiny model in this process


def test_a_plain_group_steps_by_its_gradient_and_the_rest_as_adamw():
    torch.manual_seed(0)
    body, head = torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(3, 2))
    twin = torch.nn.Parameter(body.detach().clone())
    mixed = AdamWWithPlainGroups([{"params": [body]}, {"params": [head], "lr": 0.5, "plain": True}], lr=0.01)
    alone = torch.optim.AdamW([twin], lr=0.01)
    for _ in range(3):
        start = head.detach().clone()
        grad_b, grad_h = torch.randn(4), torch.randn(3, 2)
        body.grad, twin.grad, head.grad = grad_b.clone(), grad_b.clone(), grad_h.clone()
        mixed.step()
        alone.step()
        assert torch.allclose(head.detach(), start - 0.5 * grad_h)
        assert torch.equal(body.detach(), twin.detach())
    assert head not in mixed.state  # no moments kept for the plain group


def test_head_rows_keep_only_the_named_rows_gradient():
    head = torch.nn.Parameter(torch.randn(6, 3))
    rows = HeadRows(head)
    rows.learn([1, 4])
    (head * torch.randn(6, 3)).sum().backward()
    assert head.grad is not None and set(head.grad.abs().sum(1).nonzero().flatten().tolist()) == {1, 4}
    head.grad = None
    rows.learn(None)  # a batch that names no ids (the warm start) leaves the head
    (head**2).sum().backward()
    assert head.grad is not None and not head.grad.any()


def test_a_tied_head_is_refused_and_without_head_lr_it_is_adamw(tiny_qwen2):
    model, _ = tiny_qwen2
    with pytest.raises(HeadLearnsTiedError, match="smollm2-135m-untied"):
        learner_optimizer(model, LearnerConfig(head_lr=1.0))
    optimizer, rows = learner_optimizer(model, LearnerConfig(lr=1e-4))
    assert type(optimizer) is torch.optim.AdamW and rows is None and len(optimizer.param_groups) == 1


def test_an_untied_head_is_its_own_plain_group(tiny_qwen2):
    model, _ = tiny_qwen2
    config = copy.deepcopy(model.config)
    config.tie_word_embeddings = False
    untied = type(model)(config)
    untied.lm_head.weight = torch.nn.Parameter(untied.get_input_embeddings().weight.detach().clone())
    optimizer, rows = learner_optimizer(untied, LearnerConfig(lr=1e-4, head_lr=2.0))
    body, head = optimizer.param_groups
    assert head["params"] == [untied.lm_head.weight] and head["plain"] and head["lr"] == 2.0
    assert not any(p is untied.lm_head.weight for p in body["params"]) and rows is not None


def test_head_lr_needs_a_batch_that_names_the_worker_ids():
    with pytest.raises(ValueError, match="learner.head_lr .* train.choice_centering"):
        load_config(None, ["learner.head_lr=100"])
    assert load_config(None, ["learner.head_lr=100", "train.choice_centering=1"]).learner.head_lr == 100
