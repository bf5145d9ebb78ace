"""How old a rollout may be when the learner trains on it (train.max_staleness).

Weights versions count learner steps: the generators sample with version v, and
the learner's step on a batch turns version v into v + 1. A rollout's staleness
is the learner's version when it trains on the rollout minus the version that
sampled it (its plan's, or for a recursive call's row, that call's).

- Synchronous training (max_staleness 0) samples every iteration with the
  weights of the step before it: staleness 0.
- Asynchronous training with bound k collects iteration j once the learner has
  finished iteration j - k - 1 (`may_collect`), so its plans are sampled with
  at most k fewer steps than the learner's when it reaches j.
- Whatever the pipeline does, the learner leaves out a rollout older than the
  bound (`within_bound`): the bound is a guarantee, not a hope.
- A stale row is corrected towards the learner (grpo.behaviour_weights) by
  the behaviour policy's log-probs: the sampler's where they are the policy's,
  else the learner's own with the weights that sampled the row
  (`behaviour_source`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Literal

from conductor_rl.rollout.rollouts import Rollout


def may_collect(iteration: int, learned_through: int, max_staleness: int) -> bool:
    """Whether iteration `iteration`'s rollouts may be sampled once the learner has finished
    iteration `learned_through` (-1: none yet) and its weights are in the generators."""
    return iteration - max_staleness - 1 <= learned_through


def rollout_versions(rollout: Rollout) -> list[int]:
    """The weights versions that sampled the rollout's completions: its plan's, then each recursive call's."""
    return [rollout.weights_version] + [c.weights_version for c in rollout.inner_calls if c.completion_ids]


def within_bound(
    rollouts: Sequence[Rollout], learner_version: int, max_staleness: int
) -> tuple[list[Rollout], list[Rollout]]:
    """(kept, too old): a rollout any of whose completions was sampled more than `max_staleness`
    versions before `learner_version` is too old to learn from."""
    kept: list[Rollout] = []
    too_old: list[Rollout] = []
    for r in rollouts:
        oldest = min(rollout_versions(r))
        (too_old if learner_version - oldest > max_staleness else kept).append(r)
    return kept, too_old


def staleness_histogram(rollouts: Sequence[Rollout], learner_version: int) -> dict[str, int]:
    """How many rollouts with a reward were sampled 0, 1, ... versions before `learner_version`
    (by their plan's version); keys are strings, for JSON and TensorBoard."""
    counts = Counter(learner_version - r.weights_version for r in rollouts if r.reward is not None)
    return {str(k): counts[k] for k in sorted(counts)}


BehaviourSource = Literal["sampler", "learner", "none"]


def behaviour_source(setting: str, backend: str, constrained: bool, zero_stage: int) -> BehaviourSource:
    """Where a stale row's behaviour log-probs come from (learner.behaviour_logprobs): `setting` itself
    unless "auto". Auto takes the sampler's, but not where vLLM samples under the constrained plan
    format, whose log-probs are the masked distribution's (conductor_rl/policy/sampling.py): there
    the learner recomputes them with the weights it kept, or, under ZeRO-3 (which keeps no whole
    weights on a rank), none: stale rows are learned as if on-policy."""
    if setting != "auto":
        return setting  # type: ignore[return-value]
    if not (constrained and backend == "vllm"):
        return "sampler"
    return "learner" if zero_stage <= 2 else "none"
