"""The reference for per-token log-probabilities that tests compare engines
against: a plain full-sequence forward pass, then log_softmax. The learner
computes the same thing faster (a shared prompt once, its cache repeated:
conductor_rl/policy/learner.py), and the samplers report it while sampling."""

from __future__ import annotations

import torch


def completion_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each next token: [N, L, V] logits of positions
    0..L-1 and [N, L] ids → [N, L-1] log p(ids[:, t+1] | ids[:, :t+1])."""
    targets = input_ids[:, 1:].unsqueeze(-1)
    logps = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logps.gather(-1, targets).squeeze(-1)
