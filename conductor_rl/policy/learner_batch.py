"""What the learner steps on: one row per kept rollout's completion (conductor_rl/policy/batch.py builds it)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from conductor_rl.policy.centering import LogitTerms


@dataclass(frozen=True)
class RolloutBatch:
    """What the learner needs of each kept rollout."""

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    old_logprobs: list[list[float]]  # the sampler's, one per completion token (LearnerConfig.old_logprobs)
    advantages: list[float]
    # Each completion token's weight in the loss (0: out of it); None: 1 for every token. The trainer
    # leaves out text a constrained format dictates (conductor_rl/plan/constrained.py choice_mask) and
    # may weigh the choices' kinds (train.choice_weighting).
    loss_masks: list[list[float]] | None = None
    # Weights versions between each row's sampler and the learner (asynchronous training); None: all 0.
    staleness: list[int] | None = None
    # The tokens of the roster's ids (what a worker choice may write), for the two fields below.
    worker_tokens: list[int] | None = None
    # Per row, the positions of its worker ids, whose log-prob is taken over `worker_tokens` only, the
    # distribution the constrained sampler draws from (train.worker_logprob=roster); None: over the vocabulary.
    worker_positions: list[list[int]] | None = None
    # Linear terms on the logits of `worker_tokens` at some completion positions, added to the loss
    # over its normaliser (train.choice_centering: conductor_rl/policy/centering.py); None: none.
    logit_terms: LogitTerms | None = None

    def __post_init__(self) -> None:
        n = len(self.prompt_ids)
        if self.staleness is not None and (len(self.staleness) != n or any(s < 0 for s in self.staleness)):
            raise ValueError("staleness must have one entry >= 0 per rollout")
        if not (len(self.completion_ids) == len(self.old_logprobs) == len(self.advantages) == n):
            raise ValueError("RolloutBatch fields must have one entry per rollout")
        for c, lp in zip(self.completion_ids, self.old_logprobs):
            if len(c) != len(lp):
                raise ValueError(f"a completion has {len(c)} tokens but {len(lp)} log-probs")
        if self.loss_masks is not None:
            if len(self.loss_masks) != n or any(len(c) != len(m) for c, m in zip(self.completion_ids, self.loss_masks)):
                raise ValueError("loss_masks must have one entry per completion token")
        k = len(self.worker_tokens or ())
        if self.logit_terms is not None:
            if len(self.logit_terms) != n or not k:
                raise ValueError("logit_terms needs one entry per rollout and worker_tokens")
            for c, terms in zip(self.completion_ids, self.logit_terms):
                if any(not 0 <= t < len(c) or len(w) != k for t, w in terms.items()):
                    raise ValueError("each logit term is at a completion position, one weight per worker_tokens")
        if self.worker_positions is not None:
            if len(self.worker_positions) != n or not k:
                raise ValueError("worker_positions needs one entry per rollout and worker_tokens")
            tokens = set(self.worker_tokens or ())
            for c, where in zip(self.completion_ids, self.worker_positions):
                if any(not 0 <= t < len(c) or c[t] not in tokens for t in where):
                    raise ValueError(
                        "each of worker_positions is a completion position that holds one of worker_tokens"
                    )

    def loss_mask(self, i: int) -> list[float]:
        return self.loss_masks[i] if self.loss_masks is not None else [1.0] * len(self.completion_ids[i])

    def logit_term_tensor(self, chunk: list[int], width: int) -> torch.Tensor | None:
        """[len(chunk), width, len(worker_tokens)] the logit terms of `chunk`'s rows (None: the batch has none)."""
        if self.logit_terms is None or self.worker_tokens is None:
            return None
        terms = torch.zeros((len(chunk), width, len(self.worker_tokens)))
        for r, i in enumerate(chunk):
            for t, w in self.logit_terms[i].items():
                terms[r, t] = torch.tensor(w)
        return terms

    def roster_positions(
        self, chunk: list[int], width: int, vocabulary: int
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """([len(chunk), width] bool: where a row's worker id is taken over the roster, [vocabulary] each
        token's place among worker_tokens, 0 for the others), or None where the batch has no worker_positions."""
        if self.worker_positions is None or self.worker_tokens is None:
            return None
        which = torch.zeros((len(chunk), width), dtype=torch.bool)
        for r, i in enumerate(chunk):
            which[r, self.worker_positions[i]] = True
        place = torch.zeros(vocabulary, dtype=torch.long)
        place[torch.tensor(self.worker_tokens)] = torch.arange(len(self.worker_tokens))
        return which, place
