"""The warm start's learner batches (`train.warm_start`): demonstration plans
(conductor_rl/plan/demonstrations.py) as rows of advantage 1.

The GRPO step on such a batch is supervised fine-tuning: its "old" log-probs are
the learner's own (conductor_rl/policy/learner.py), so the ratio is 1 and the
gradient is that of the demonstrations' log-likelihood over their loss tokens.
The tokens are the ones the constrained sampler would write for the plan
(`encode_plan`), and the loss sees only the Conductor's choices (`choice_mask`,
subtask text included), as a GRPO row does.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from conductor_rl.config import Config, ConfigError
from conductor_rl.plan.constrained import PlanFormat, choice_mask, encode_plan
from conductor_rl.plan.demonstrations import demonstration_plan
from conductor_rl.plan.prompts import ConductorPrompt
from conductor_rl.policy.learner import RolloutBatch


class WarmStartError(ConfigError):
    """The warm start cannot run with these settings (the message says which)."""


def check_warm_start(config: Config) -> None:
    """Raise WarmStartError, naming the keys, where `train.warm_start` cannot run with `config`.
    Checked when training starts, not when a config loads: other commands never warm start."""
    if not config.train.warm_start.steps:
        return
    if not config.conductor.constrain_format:
        raise WarmStartError(
            "train.warm_start.steps: demonstrations are written in the constrained plan format; set "
            "conductor.constrain_format=true or train.warm_start.steps=0"
        )
    if config.learner.old_logprobs != "learner":
        raise WarmStartError(
            "train.warm_start.steps: a warm-start step is supervised only with the learner's own old "
            "log-probs; set learner.old_logprobs=learner or train.warm_start.steps=0"
        )


def warm_start_batches(
    prompts: ConductorPrompt,
    questions: Sequence[str],
    steps: int,
    per_step: int,
    per_question: int,
    seed: int,
    workers: Sequence[int] | None = None,
) -> Iterator[RolloutBatch]:
    """`steps` batches, each of `per_question` demonstrations for each of `per_step` questions drawn
    from `questions` (with repeats across batches), seeded by `seed`. A question's rows are
    contiguous: the learner runs their shared prompt once. `workers`: the model ids demonstrations
    give steps to (`answering_workers`: never the Conductor's seat); None: every listed model."""
    if prompts.shape is None:
        raise WarmStartError("train.warm_start needs conductor.constrain_format: true (it teaches the plan format)")
    if not questions:
        raise WarmStartError("train.warm_start has no questions to write demonstrations for")
    shape = prompts.shape
    fmt = PlanFormat(prompts.tokenizer, shape.max_subtask_tokens)

    def fits(text: str) -> bool:
        return len(fmt.encode(text)) <= shape.max_subtask_tokens

    rng = random.Random(seed)
    for _ in range(steps):
        drawn = [q for q in (rng.choice(questions) for _ in range(per_step)) for _ in range(per_question)]
        ids = shape.n_workers if workers is None else workers
        plans = [demonstration_plan(q, ids, shape.max_steps, rng, fits) for q in drawn]
        # Written with the numbers the prompt lists (the pool's roster), as a sampled plan is.
        completions = [encode_plan(fmt, prompts.roster.written_plan(plan), shape.prefix) for plan in plans]
        yield RolloutBatch(
            prompt_ids=[list(prompts.ids(q)) for q in drawn],
            completion_ids=completions,
            old_logprobs=[[0.0] * len(ids) for ids in completions],  # unused: the learner's own are "old"
            advantages=[1.0] * len(drawn),
            loss_masks=[choice_mask(prompts.tokenizer, ids, shape.prefix) for ids in completions],
        )
