"""The warm start's learner batches (`train.warm_start`): demonstration plans
(conductor_rl/plan/demonstrations.py) as rows of advantage 1, and with recursion on,
demonstrated replies to a recursive call's prompt (keep the answer, or a new plan).

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

from conductor_rl.config import Config, ConfigError, answering_workers, seat_places
from conductor_rl.data.question import Question
from conductor_rl.plan.constrained import PlanFormat, choice_mask, encode_plan
from conductor_rl.plan.demonstrations import demonstration_plan, demonstration_reply, shown_answer
from conductor_rl.plan.language import Plan, render_plan
from conductor_rl.plan.prompts import ConductorPrompt, answer_instruction
from conductor_rl.policy.learner_batch import RolloutBatch


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
    questions: Sequence[Question],
    steps: int,
    per_step: int,
    per_question: int,
    seed: int,
    workers: Sequence[int] | None = None,
    recursive_share: float = 0.0,
    seat: int | None = None,
    workers_in_loss: bool = True,
) -> Iterator[RolloutBatch]:
    """`steps` batches, each of `per_question` demonstrations for each of `per_step` questions drawn
    from `questions` (with repeats across batches), seeded by `seed`. A question's rows share one
    prompt and are contiguous: the learner runs it once. `workers`: the model ids demonstrations
    give steps to (`answering_workers`: never the Conductor's seat); None: every listed model.
    `recursive_share`: the share of drawn questions shown as a recursive call's prompt, whose
    rows are `demonstration_reply`s (with recursion on; 0: none); `seat`: the Conductor's own seat
    among `workers`, which reviews the answer so far (`demonstration_plan`). `workers_in_loss=False`
    leaves a plan's workers and step count (drawn uniformly, whatever the question) out of its loss;
    a recursive call's reply keeps them (its empty plan is what shows that stopping can be written)."""
    if prompts.shape is None:
        raise WarmStartError("train.warm_start needs conductor.constrain_format: true (it teaches the plan format)")
    if not questions:
        raise WarmStartError("train.warm_start has no questions to write demonstrations for")
    shape = prompts.shape
    fmt = PlanFormat(prompts.tokenizer, shape.max_subtask_tokens)
    ids = shape.n_workers if workers is None else workers
    references = [q.reference for q in questions]

    def fits(text: str) -> bool:
        return len(fmt.encode(text)) <= shape.max_subtask_tokens

    def recursive_row(question: Question, rng: random.Random) -> tuple[list[int], list[Plan]]:
        """A recursive call's prompt for `question` (a demonstrated plan ran and gave an answer) and
        its `per_question` demonstrated replies."""
        text = question.question
        parent = prompts.roster.written_plan(demonstration_plan(text, ids, shape.max_steps, rng, fits, seat))
        answer = shown_answer(question.reference, [r for r in references if r != question.reference], rng)
        prompt = prompts.recursive_ids(
            text, prompts.roster, render_plan(parent), answer, answer_instruction(question.answer_kind)
        )
        new_plan = lambda: demonstration_plan(text, ids, shape.max_steps, rng, fits, seat)  # noqa: E731
        return prompt, [demonstration_reply(rng, new_plan) for _ in range(per_question)]

    rng = random.Random(seed)
    for _ in range(steps):
        drawn = [rng.choice(questions) for _ in range(per_step)]
        rows: list[tuple[list[int], list[Plan], bool]] = []  # prompt, its demonstrations, is it a reply
        for question in drawn:
            if recursive_share and rng.random() < recursive_share:
                rows.append((*recursive_row(question, rng), True))
                continue
            text = question.question
            plans = [demonstration_plan(text, ids, shape.max_steps, rng, fits, seat) for _ in range(per_question)]
            rows.append((list(prompts.question_ids(question)), plans, False))
        prompt_ids = [prompt for prompt, plans, _ in rows for _ in plans]
        # Written with the numbers the prompt lists (the pool's roster), as a sampled plan is.
        written = [prompts.roster.written_plan(plan) for _, plans, _ in rows for plan in plans]
        completions = [encode_plan(fmt, plan, shape.prefix) for plan in written]
        with_workers = [workers_in_loss or reply for _, plans, reply in rows for _ in plans]
        yield RolloutBatch(
            prompt_ids=prompt_ids,
            completion_ids=completions,
            old_logprobs=[[0.0] * len(c) for c in completions],  # unused: the learner's own are "old"
            advantages=[1.0] * len(completions),
            loss_masks=[
                [float(m) for m in choice_mask(prompts.tokenizer, c, shape.prefix, workers=keep)]
                for c, keep in zip(completions, with_workers)
            ],
        )


def warm_start_for(config: Config, prompts: ConductorPrompt, questions: Sequence[Question]) -> Iterator[RolloutBatch]:
    """The warm start of a run with `config` (`train.warm_start`): with recursion on
    (conductor.max_depth >= 1), recursive prompts are demonstrated too and the seat like any worker
    after the first step; without, no demonstration gives the seat a step (it would only keep the
    answer)."""
    w, recursive = config.train.warm_start, config.conductor.max_depth >= 1
    return warm_start_batches(
        prompts,
        questions,
        w.steps,
        w.questions_per_step,
        w.demonstrations_per_question,
        config.train.seed,
        workers=None if recursive else answering_workers(config.workers),
        recursive_share=w.recursive_share if recursive else 0.0,
        seat=next(iter(seat_places(config.workers)), None) if recursive else None,
        workers_in_loss=w.workers_in_loss,
    )
