"""The Conductor as a transformers model in this process: prompt in, sampled
plan text out. Training samples through vLLM instead (GeneratorActor); this is
what `conductor-rl ask` and the tests use, and the fallback where vLLM cannot run.
`EngineConductor` is the same interface over sampling engines (a GeneratorPool).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conductor_rl.config import ConductorConfig, Config
from conductor_rl.generation import generate, prompt_seed
from conductor_rl.models import load_causal_lm
from conductor_rl.plan.constrained import PlanConstraint, PlanFormat
from conductor_rl.plan.prompts import ConductorPrompt
from conductor_rl.plan.roster import Roster, as_roster
from conductor_rl.plan.shape import PlanShape
from conductor_rl.policy.sampling import Sample, TransformersSampler
from conductor_rl.rollout.recursion import SampledPlan

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass(frozen=True)
class Completion:
    text: str  # includes the configured response prefix, as the parser must see it
    token_ids: tuple[int, ...]  # the sampled tokens (prefix excluded)
    prompt_tokens: int
    completion_tokens: int
    truncated: bool  # cut off by max_new_tokens (not by end-of-sequence, nor by stop_after_plan)

    @classmethod
    def of(cls, sample: SampledPlan, response_prefix: str, prompt_tokens: int) -> Completion:
        """An engine's sample (a `Sample`, or a recursive call's writer's) as a completion of a prompt
        of `prompt_tokens` tokens."""
        return cls(
            response_prefix + sample.text,
            tuple(sample.token_ids),
            prompt_tokens,
            len(sample.token_ids),
            sample.finish_reason == "length",
        )


_ACCESS_LINE = re.compile(r"^[ \t]*access_list[ \t]*=(.*)$", re.MULTILINE)


def plan_finished(text: str) -> bool:
    """True once an `access_list = [...]` line has closed its brackets: the
    last of the three lists is complete, so sampling further cannot help."""
    matches = list(_ACCESS_LINE.finditer(text))
    if not matches:
        return False
    match = matches[-1]
    tail = text[match.start(1) :]
    depth = 0
    for char in tail:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
            if depth <= 0:
                return True
    return False


class Conductor:
    def __init__(
        self,
        config: ConductorConfig,
        model: PreTrainedModel | None = None,
        tokenizer: PreTrainedTokenizerBase | None = None,
    ) -> None:
        self.config = config
        if model is None or tokenizer is None:
            model, tokenizer = load_causal_lm(config.model, config.dtype)
        self.model, self.tokenizer = model, tokenizer
        self._format: PlanFormat | None = None  # token tables, built on the first constrained call
        self._sampler: TransformersSampler | None = None  # recursive calls' sampler, on the first one

    def prompt(self, question: str, n_workers: int | Roster, answer_format: str | None = None) -> str:
        """The full prompt text for a prompt listing `n_workers` (a roster, or Model 0..n-1), ending
        with the response prefix: what training's `ConductorPrompt` gives for the same settings."""
        c = self.config
        roster = as_roster(n_workers)
        shape = (
            PlanShape(len(roster), c.max_steps, c.max_subtask_tokens, c.response_prefix, ids=roster.model_ids)
            if c.constrain_format
            else None
        )
        prompt = ConductorPrompt(
            self.tokenizer, roster, c.max_steps, c.n_examples, c.response_prefix, shape, c.show_answer_format
        )
        return prompt.text(question, answer_format=answer_format)

    def sample_ids(
        self,
        prompt_ids: Sequence[Sequence[int]],
        shapes: Sequence[PlanShape | None],
        seeds: Sequence[int],
        temperature: float | None = None,
    ) -> list[Sample]:
        """One completion per prompt (token ids, each with its plan shape and seed): what a
        recursive call samples (conductor_rl/rollout/recursion.py)."""
        c = self.config
        if self._sampler is None:
            self._sampler = TransformersSampler(self.model, self.tokenizer)
        groups = self._sampler.sample(
            [list(p) for p in prompt_ids],
            1,
            c.temperature if temperature is None else temperature,
            c.max_new_tokens,
            top_p=c.top_p,
            seed=list(seeds),
            shape=list(shapes),
        )
        return [group[0] for group in groups]

    def write_plans(
        self,
        question: str,
        n_workers: int | Roster,
        n: int = 1,
        seed: int | None = None,
        temperature: float | None = None,
    ) -> list[Completion]:
        """Sample `n` plan completions for one question: `write_plans_many` of that one question."""
        [plans] = self.write_plans_many([question], n_workers, n, seed, temperature)
        return plans

    def write_plans_many(
        self,
        questions: Sequence[str],
        n_workers: int | Roster,
        n: int = 1,
        seed: int | None = None,
        temperature: float | None = None,
        answer_formats: Sequence[str | None] | None = None,
    ) -> list[list[Completion]]:
        """Sample `n` plan completions for each question, in one generation over all
        their prompts; one list per question, in order. `answer_formats`: each question's
        `Task.answer_format` (shown under `conductor.show_answer_format`).

        Seeded with `seed`, else the configured seed. Question i draws as prompt i
        of `generate` does (its own generator, seeded `prompt_seed(seed, i)`), so
        question 0 samples what `write_plans` samples with the same seed, and no
        question's plans depend on the other questions batched with it."""
        c = self.config
        formats = answer_formats or [None] * len(questions)
        prompts = [
            self.tokenizer(self.prompt(q, n_workers, f), add_special_tokens=False).input_ids
            for q, f in zip(questions, formats)
        ]
        constraint = None
        if c.constrain_format:
            if self._format is None:
                self._format = PlanFormat(self.tokenizer, c.max_subtask_tokens)
            roster = as_roster(n_workers)
            constraint = PlanConstraint(self._format, len(roster), c.max_steps, c.response_prefix, ids=roster.model_ids)
        stop = (lambda text: plan_finished(c.response_prefix + text)) if c.stop_after_plan else None
        groups = generate(
            self.model,
            self.tokenizer,
            prompts,
            max_new_tokens=c.max_new_tokens,
            n=n,
            temperature=c.temperature if temperature is None else temperature,
            top_p=c.top_p,
            seed=c.seed if seed is None else seed,
            constraint=constraint,
            stop=stop,
        )
        return [
            [
                Completion(c.response_prefix + g.text, g.token_ids, len(prompt), len(g.token_ids), g.truncated)
                for g in group
            ]
            for prompt, group in zip(prompts, groups)
        ]


class EngineConductor:
    """The Conductor's `write_plans_many` on sampling engines (a GeneratorPool, or anything with its
    `sample`): an Orchestrator whose plans come from vLLM engines, as a served Conductor's do."""

    def __init__(self, config: Config, engines: Any, prompts: ConductorPrompt) -> None:
        """`prompts`: the Conductor's prompt for `config` (conductor_rl/system.py `System.prompts`)."""
        self.config, self.engines, self.prompts, self.tokenizer = config.conductor, engines, prompts, prompts.tokenizer

    def write_plans_many(
        self,
        questions: Sequence[str],
        n_workers: int | Roster,
        n: int = 1,
        seed: int | None = None,
        temperature: float | None = None,
        answer_formats: Sequence[str | None] | None = None,
    ) -> list[list[Completion]]:
        c = self.config
        formats = answer_formats or [None] * len(questions)
        prompt_ids = [
            self.tokenizer(self.prompts.text(q, n_workers, f), add_special_tokens=False)["input_ids"]
            for q, f in zip(questions, formats)
        ]
        seeds = [prompt_seed(c.seed if seed is None else seed, i) for i in range(len(questions))]
        groups = self.engines.sample(
            prompt_ids,
            n,
            c.temperature if temperature is None else temperature,
            c.max_new_tokens,
            c.top_p,
            seed=seeds,
            shape=self.prompts.shape_for(n_workers),
        )
        return [
            [Completion.of(s, c.response_prefix, len(ids)) for s in group] for ids, group in zip(prompt_ids, groups)
        ]
