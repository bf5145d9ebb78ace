"""The batch's net vote for each worker, taken out of every prompt's worker choice
(`train.choice_centering`; ours, not the paper's).

Why: a GRPO step moves the choice of a worker through the model's logits at the choice's
position, and a small Conductor's hidden state there is nearly the same for every
question (the prompts share most of their tokens). So the part of the step that is the
batch's *net* vote (the advantage-weighted count of each worker, summed over all the
batch's questions) moves every question's choice alike, and it is amplified by the
gain that such a shared move has; what differs between the questions (maths wants one
worker, MMLU another) is a small remainder (benchmarks/credit.py measures both:
docs/results.md, The first choice ignores the question). Taking a share of the net vote
out of each choice's logit gradient leaves the step what differs between the questions.

Decisions:
- The vote of step j's worker is sum over the batch's rows that have a step j of
  (loss weight x advantage x one-hot of the worker written), over the number of such
  rows, centred over the roster's ids (so it does not move the ids against the rest of
  the vocabulary). The policy's own probabilities are left out of it: for the first
  step they cancel within a group (one prompt, advantages summing to 0), and no extra
  forward pass is spent for the later steps.
- The share removed is a setting (1: all of it; then only what differs between the
  batch's questions is learnt about the workers, and a preference shared by every
  question cannot be learnt at all).
- Only the worker ids: the step count, the subtasks and the access are left as GRPO
  makes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

#: Per row, the logit terms of its worker choices: {completion position: one weight per worker token}.
LogitTerms = list[dict[int, list[float]]]


def worker_tokens(tokenizer: PreTrainedTokenizerBase, ids: Sequence[int]) -> list[int]:
    """The token of each roster id (`ids`, the numbers a plan writes): one token each, or ValueError."""
    tokens = []
    for i in ids:
        encoded = tokenizer.encode(str(i), add_special_tokens=False)
        if len(encoded) != 1:
            raise ValueError(
                f"train.choice_centering needs every worker's number to be one token; {i} is {len(encoded)}: "
                "number the workers 0-9 (model_id) or set train.choice_centering=0"
            )
        tokens.append(encoded[0])
    return tokens


def choice_positions(completion_ids: Sequence[int], labels: Sequence[str | None], tokens: Sequence[int]) -> list[int]:
    """The positions of a completion's worker ids, step by step (`labels`: `choice_segments`'s)."""
    wanted = set(tokens)
    return [t for t, (token, label) in enumerate(zip(completion_ids, labels)) if label == "workers" and token in wanted]


def net_vote_terms(
    completions: Sequence[Sequence[int]],
    labels: Sequence[Sequence[str | None]],
    masks: Sequence[Sequence[float]],
    advantages: Sequence[float],
    tokens: Sequence[int],
    share: float,
) -> LogitTerms:
    """Each row's logit terms: at step j's worker position, `share` x step j's net vote (see the
    module's decisions). The learner adds sum(term x logit) over them, over its loss normaliser, to the
    GRPO loss, whose own gradient at that position is -(loss weight x advantage) x (one-hot - p)."""
    index = {token: k for k, token in enumerate(tokens)}
    positions = [choice_positions(c, lab, tokens) for c, lab in zip(completions, labels)]
    steps = max((len(p) for p in positions), default=0)
    votes = [[0.0] * len(tokens) for _ in range(steps)]
    counts = [0] * steps
    for c, mask, advantage, where in zip(completions, masks, advantages, positions):
        for j, t in enumerate(where):
            votes[j][index[c[t]]] += mask[t] * advantage
            counts[j] += 1
    centred = []
    for vote, n in zip(votes, counts):
        mean = sum(vote) / len(vote)
        centred.append([share * (v - mean) / n for v in vote])
    return [{t: centred[j] for j, t in enumerate(where)} for where in positions]
