"""From graded rollouts to the learner's batch (paper §2, app. A): group-relative
advantages, the rollouts worth a gradient, and which completion tokens the loss sees.

A rollout counts when it has a reward (infrastructure failures have none) and
is compared within its question's group:
- a group with a single rewarded rollout is left out: it has nothing to be
  compared with;
- a group whose rewards are all equal carries no information (advantages 0):
  with `drop_uninformative` it is left out of the batch, else it is kept and
  adds only compute (and, under a KL term, its pull to the reference);
- a rollout with no completion tokens has nothing to learn from;
- a recursive call's completion (rollout/recursion.py) is a row of its own, with
  its own prompt and the advantage of the rollout it belongs to.
Under the constrained plan format, the format's own text is out of the loss
(`conductor_rl.plan.constrained.choice_mask`), its choices weighted by `train.choice_weighting`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from conductor_rl.plan.constrained import choice_segments, choice_weights
from conductor_rl.policy.centering import choice_positions, net_vote_terms
from conductor_rl.policy.grpo import group_advantages
from conductor_rl.policy.learner_batch import RolloutBatch
from conductor_rl.rollout.rollouts import Rollout

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def rollout_batch(
    rollouts: Sequence[Rollout],
    prompt_ids: Sequence[Sequence[int]],
    *,
    drop_uninformative: bool = True,
    format_tokenizer: PreTrainedTokenizerBase | None = None,
    response_prefix: str = "",
    subtask_text_in_loss: bool = True,
    choice_weighting: str = "token",
    learner_version: int | None = None,
    choice_centering: float = 0.0,
    worker_logprob: str = "vocabulary",
    worker_tokens: Sequence[int] = (),
) -> tuple[RolloutBatch | None, int]:
    """The learner batch of `rollouts` and the number of informative groups.

    Sets each compared rollout's `advantage`: A_i = (r_i - mean) / std over its
    group's rewarded rollouts (`rollout.group` g; `prompt_ids[g]` is g's prompt).
    The batch is None when no group is informative or nothing is left to learn from.
    `format_tokenizer`: the Conductor's tokenizer when plans were sampled under the
    constrained format (`response_prefix` ends their prompt); the batch's loss masks
    then leave out the format's text, and the subtasks' text unless `subtask_text_in_loss`;
    `choice_weighting` "segment" weighs the kinds of choice equally (`choice_weights`).
    `learner_version`: the weights version the learner holds; the batch then carries each row's
    staleness (that version minus the one that sampled the row), for the behaviour correction.
    `choice_centering` > 0 (with `format_tokenizer`; `worker_tokens`: the roster ids' tokens): that share of
    the batch's net vote for each worker is taken out of every row's worker choices
    (conductor_rl/policy/centering.py); `worker_logprob` "roster": the learner takes each worker id's
    log-prob over `worker_tokens` alone, the distribution the constrained sampler draws it from.
    """
    by_group: dict[int, list[Rollout]] = {}
    for r in rollouts:
        if r.reward is not None:
            by_group.setdefault(r.group, []).append(r)
    kept, informative = [], 0
    for members in by_group.values():
        if len(members) < 2:
            continue
        adv = group_advantages(torch.tensor([r.reward for r in members]), len(members))
        for r, a in zip(members, adv.advantages.tolist()):
            r.advantage = a
        if bool(adv.informative.any()):
            informative += 1
            kept.extend(members)
        elif not drop_uninformative:
            kept.extend(members)
    # One row per completion: the rollout's plan, then each recursive call's, all with the rollout's advantage.
    rows = [
        (list(prompt_ids[r.group]), list(r.completion_ids), list(r.logprobs), r.advantage, r.weights_version)
        for r in kept
        if r.completion_ids
    ]
    rows += [
        (list(c.prompt_ids), list(c.completion_ids), list(c.logprobs), r.advantage, c.weights_version)
        for r in kept
        for c in r.inner_calls
        if c.completion_ids
    ]
    if not informative or not rows:
        return None, informative
    prompts, completions, logprobs, advantages, versions = (list(column) for column in zip(*rows))
    staleness = None if learner_version is None else [max(0, learner_version - v) for v in versions]
    masks, terms, positions = None, None, None
    if format_tokenizer is not None:
        masks = []
        labelled = [choice_segments(format_tokenizer, ids, response_prefix) for ids in completions]
        for labels in labelled:
            if choice_weighting == "segment":
                masks.append(choice_weights(labels, subtasks=subtask_text_in_loss))
            else:
                masks.append([float(x is not None and (subtask_text_in_loss or x != "subtasks")) for x in labels])
        if choice_centering > 0:
            terms = net_vote_terms(completions, labelled, masks, advantages, worker_tokens, choice_centering)
        if worker_logprob == "roster":
            positions = [choice_positions(c, labels, worker_tokens) for c, labels in zip(completions, labelled)]
    batch = RolloutBatch(
        prompts,
        completions,
        logprobs,
        advantages,
        loss_masks=masks,
        staleness=staleness,
        worker_tokens=list(worker_tokens) if terms is not None or positions is not None else None,
        worker_positions=positions,
        logit_terms=terms,
    )
    return batch, informative
