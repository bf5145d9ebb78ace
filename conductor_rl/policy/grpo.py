"""GRPO maths (paper §2, app. A): group-relative advantages and the clipped
surrogate loss. Plain torch; the learner actor calls these.

Decisions where the paper is silent:
- The group's spread is the population standard deviation (divide by G); the
  difference from Bessel's correction is negligible at G = 64.
- A group whose rewards are all equal (all correct, all wrong, all unparsable)
  carries no information about which completion is better: its advantages
  are 0 and `GroupAdvantages.informative` is False for its rows, so the
  trainer can leave them out of the learner step instead of spending compute
  on a zero gradient.
- Loss aggregation defaults to "token_mean": the mean over every completion
  token of the whole batch (not per micro-batch), so a long plan's tokens
  weigh as much as a short plan's and gradient accumulation gives the same
  gradient as one big batch. "sequence_mean" (each completion's token mean,
  then the mean over completions; the original GRPO) is available.
- Clipping is symmetric by default (ε = 0.2 on both sides: the paper's
  "ε = 0.2"); `clip_high` can differ (DAPO's clip-higher).
- β = 0 (no KL term, no reference model), as in the paper; with β > 0 the
  KL to the reference uses the k3 estimator exp(q - p) - (q - p) - 1.
- Rollouts sampled by older weights (asynchronous training, train.max_staleness)
  follow decoupled PPO: the clipped ratio is taken against the proximal policy
  (the learner's weights before its step), and each token is weighted by the
  behaviour correction π_prox / π_behav, truncated at a cap (as truncated
  importance sampling does) so that one token the old weights found unlikely
  cannot dominate the step. Rows sampled by the learner's own weights get
  weight 1 exactly: their behaviour policy is the proximal one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

Aggregation = Literal["token_mean", "sequence_mean"]


@dataclass(frozen=True)
class GroupAdvantages:
    advantages: torch.Tensor  # [N] one per completion
    informative: torch.Tensor  # [N] bool: False where the whole group had one reward


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> GroupAdvantages:
    """A_i = (r_i - mean(r_group)) / std(r_group) for consecutive groups of
    `group_size` completions of the same question."""
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards must be flat with a multiple of group_size={group_size} entries, got {tuple(rewards.shape)}"
        )
    grouped = rewards.float().view(-1, group_size)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, unbiased=False, keepdim=True)
    informative = (std > eps).expand_as(grouped)
    advantages = torch.where(informative, (grouped - mean) / std.clamp_min(eps), torch.zeros_like(grouped))
    return GroupAdvantages(advantages.reshape(-1), informative.reshape(-1))


def behaviour_weights(
    proximal_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, stale: torch.Tensor, cap: float
) -> torch.Tensor:
    """[N, T] decoupled-PPO correction min(cap, π_prox / π_behav) per token for the `stale`
    rows ([N] bool: sampled by weights other than the proximal ones), 1 for the others."""
    ratio = torch.exp(proximal_logprobs.detach() - behaviour_logprobs.detach()).clamp(max=cap)
    return torch.where(stale.unsqueeze(1), ratio, torch.ones_like(ratio))


@dataclass(frozen=True)
class LossStats:
    clip_fraction: float  # share of completion tokens whose ratio was clipped
    ratio_mean: float
    kl: float  # mean k3 KL to the reference (0 without one)


def grpo_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    kl_beta: float = 0.0,
    ref_logprobs: torch.Tensor | None = None,
    aggregation: Aggregation = "token_mean",
    normalizer: float | None = None,
    behaviour_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The clipped GRPO objective, negated for minimisation.

    logprobs, old_logprobs, ref_logprobs, mask: [N, T] per completion token
    (mask 1 on completion tokens, 0 on prompt and padding). advantages: [N].
    old_logprobs are the sampling policy's (no gradient). `normalizer`: with
    "token_mean", the number of completion tokens in the whole batch when this
    call sees one micro-batch of it (default: this call's own count); with
    "sequence_mean", the number of completions in the whole batch.
    `behaviour_weights`: [N, T] per-token weights of the clipped term
    (`behaviour_weights`; None: 1 everywhere).
    """
    if kl_beta > 0 and ref_logprobs is None:
        raise ValueError("kl_beta > 0 needs ref_logprobs from a reference model")
    clip_high = clip_low if clip_high is None else clip_high
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs.detach())
    adv = advantages.detach().to(logprobs.dtype).unsqueeze(1)
    unclipped = ratio * adv
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    if behaviour_weights is not None:
        per_token = per_token * behaviour_weights.detach().to(per_token.dtype)
    kl = torch.zeros_like(per_token)
    if kl_beta > 0 and ref_logprobs is not None:  # checked above: kl_beta > 0 comes with ref_logprobs
        delta = ref_logprobs.detach() - logprobs
        kl = torch.exp(delta) - delta - 1.0
        per_token = per_token + kl_beta * kl

    if aggregation == "token_mean":
        loss = (per_token * mask).sum() / (normalizer if normalizer is not None else mask.sum().clamp_min(1.0))
    elif aggregation == "sequence_mean":
        per_sequence = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)
        loss = per_sequence.sum() / (normalizer if normalizer is not None else per_sequence.numel())
    else:
        raise ValueError(f"aggregation must be 'token_mean' or 'sequence_mean', got {aggregation!r}")

    with torch.no_grad():
        tokens = mask.sum().clamp_min(1.0)
        was_clipped = ((ratio < 1.0 - clip_low) & (adv < 0)) | ((ratio > 1.0 + clip_high) & (adv > 0))
        stats = LossStats(
            clip_fraction=float((was_clipped.to(mask.dtype) * mask).sum() / tokens),
            ratio_mean=float((ratio * mask).sum() / tokens),
            kl=float((kl * mask).sum() / tokens),
        )
    return loss, stats
