"""The learner's optimizer: AdamW for the whole model, or, with `learner.head_lr`, plain gradient
steps for the rows of the output head that pick a worker.

Why (docs/decisions.md, Learning on the embedded default): a linear policy over the Conductor's own
state where it picks a worker learns to route from the rollouts training has, when it steps by the
gradient on the state less its mean (benchmarks/orchestration.py's readout yardstick). In the LLM, the
worker's logit is the head's row of that id times the state; AdamW moves every coordinate of it by
about its rate, so the mean state (ten times the part that differs between domains) carries a step
to every question alike. A plain step moves the row along the gradient itself, which the batch's net
vote taken out (`train.choice_centering`) makes a gradient on the centred state.

Decisions:
- Only the head's rows of the batch's worker ids move (`HeadRows`, from `RolloutBatch.worker_tokens`);
  the other rows keep their start, the input embedding's copy, while the input embedding and the
  layers learn by AdamW as before. A batch that names no worker ids (the warm start) leaves the head.
- The head needs its own weights: a model that ties its head to its input embedding is refused, naming
  the untied variant (`conductor.model=smollm2-135m-untied`), since a plain step at the head's rate on a
  tied row would move the digit's input embedding too.
- The step is taken after DeepSpeed's gradient clipping, which counts the head with the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from conductor_rl.config import LearnerConfig


class HeadLearnsTiedError(ValueError):
    """learner.head_lr with a model whose output head is its input embedding."""


class AdamWWithPlainGroups(torch.optim.AdamW):
    """AdamW, but a parameter group marked `plain` takes a plain step, p -= lr * grad, with no moments
    and no weight decay (its parameters are then left out of AdamW's step)."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            if group.get("plain"):
                for p in group["params"]:
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-group["lr"])
                        p.grad = None  # AdamW skips a parameter without a gradient
        return super().step(closure)


class HeadRows:
    """Masks the output head's gradient to the rows of the worker ids a batch names (`learn`)."""

    def __init__(self, head: torch.nn.Parameter) -> None:
        self.mask = torch.zeros(head.shape[0], 1, dtype=head.dtype, device=head.device)
        head.register_hook(lambda grad: grad * self.mask)

    def learn(self, tokens: Sequence[int] | None) -> None:
        self.mask.zero_()
        if tokens:
            self.mask[list(tokens)] = 1.0


def learner_optimizer(model: Any, config: LearnerConfig) -> tuple[torch.optim.Optimizer, HeadRows | None]:
    """The optimizer of `model` under `config`, and, with `config.head_lr`, the head's row mask the
    learner sets for each batch."""
    adamw = {"betas": config.betas, "eps": config.adam_eps, "weight_decay": config.weight_decay}
    if config.head_lr is None:
        return torch.optim.AdamW(model.parameters(), lr=config.lr, **adamw), None
    head = model.get_output_embeddings().weight
    if head is model.get_input_embeddings().weight:
        raise HeadLearnsTiedError(
            "learner.head_lr needs a Conductor whose output head is its own, but this model ties it to its input "
            "embedding: use conductor.model=smollm2-135m-untied (or a model folder whose config sets "
            "tie_word_embeddings=false), or unset learner.head_lr"
        )
    body = [p for p in model.parameters() if p is not head]
    groups = [{"params": body}, {"params": [head], "lr": config.head_lr, "weight_decay": 0.0, "plain": True}]
    return AdamWWithPlainGroups(groups, lr=config.lr, **adamw), HeadRows(head)
