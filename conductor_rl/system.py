"""The system's settings-derived half, built once from a `Config`, without Ray: the Conductor's
prompt, each worker's step limits, the best worker of each domain, where stale rows' behaviour
log-probs come from, how the Conductor samples in each use (training, evaluation, answering),
what a training iteration draws (questions, rosters, forced groups), and the one builder of
recursive calls. The actors, the other half, start in one place too (`jobs/training_system.py`).
`train`, `evaluate`, `ask`, `serve`, `check`, the `Orchestrator`, the serving endpoint and the
benchmarks take their parts from these two places and assemble none of them again."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Literal, Protocol

from conductor_rl.config import Config, SimSpec, seat_places
from conductor_rl.plan.prompts import ConductorPrompt, fitting_questions
from conductor_rl.plan.roster import Roster, draw_roster, roster_for
from conductor_rl.policy.centering import worker_tokens
from conductor_rl.policy.staleness import BehaviourSource, behaviour_source
from conductor_rl.rollout.recursion import PlanWriter, Recursion, forced_groups, generator_writer
from conductor_rl.rollout.workflow import StepLimits
from conductor_rl.run.metrics import best_workers
from conductor_rl.workers.sim_expectation import sim_specs

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from conductor_rl.data import Question
    from conductor_rl.plan.shape import Shapes
    from conductor_rl.policy.sampling import Sample

Use = Literal["train", "evaluate", "answer"]  # what the Conductor samples for


class SampleEngines(Protocol):
    """Generator engines: a GeneratorPool (actors/generator.py), or anything with its `sample`."""

    def sample(
        self,
        prompts: list[list[int]],
        n: int,
        temperature: float,
        max_tokens: int,
        top_p: float = 1.0,
        seed: int | Sequence[int] | None = None,
        shape: Shapes = None,
    ) -> list[list[Sample]]: ...


@dataclass(frozen=True)
class GenerationSettings:
    """How the Conductor samples plans in one use. `base_seed`: the use's seed (train.seed when
    training, conductor.seed otherwise); `seed_for` derives a batch's seed from it."""

    use: Use
    temperature: float
    max_new_tokens: int
    top_p: float
    base_seed: int

    def seed_for(self, *key: int | str) -> int:
        """A batch's seed: training's per iteration (`sample_seed`), evaluation's stable in its key
        (method, benchmark, batch), answering's the base plus the chunk's number."""
        if self.use == "train":
            from conductor_rl.generation import sample_seed

            [iteration] = key
            return sample_seed(self.base_seed, int(iteration))
        if self.use == "evaluate":
            return stable_seed(self.base_seed, *key)
        return self.base_seed + sum(int(k) for k in key)


def stable_seed(*parts: object) -> int:
    """A seed that depends only on `parts` (not on Python's hash salt)."""
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:4], "big") % (2**31)


class System:
    """The parts derived from one configuration. Cheap to make: the Conductor's tokenizer loads
    on the first use of its prompt, unless one is given (an in-process Conductor's own)."""

    def __init__(self, config: Config, tokenizer: PreTrainedTokenizerBase | None = None) -> None:
        self.config = config
        self._tokenizer = tokenizer
        self._prompts: dict[int, ConductorPrompt] = {}

    # -- the Conductor's prompt

    @property
    def prompts(self) -> ConductorPrompt:
        """The Conductor's prompt for plans of up to conductor.max_steps steps."""
        return self.prompt(self.config.conductor.max_steps)

    def prompt(self, max_steps: int) -> ConductorPrompt:
        """The prompt for plans of up to `max_steps` steps (a served request may ask for fewer)."""
        if max_steps not in self._prompts:
            c = self.config
            if max_steps != c.conductor.max_steps:
                c = c.model_copy(update={"conductor": c.conductor.model_copy(update={"max_steps": max_steps})})
            tokenizer = self._tokenizer
            if tokenizer is None and self._prompts:
                tokenizer = next(iter(self._prompts.values())).tokenizer
            self._prompts[max_steps] = ConductorPrompt.from_config(c, tokenizer=tokenizer)
        return self._prompts[max_steps]

    # -- the workers

    @cached_property
    def step_limits(self) -> list[StepLimits]:
        """How each configured worker's steps are called, in the pool's order."""
        return [StepLimits.for_worker(w, self.config) for w in self.config.workers]

    @cached_property
    def best_workers(self) -> dict[str, str]:
        """The best worker of each domain, where the settings say (simulated workers)."""
        return best_workers(self.config.workers)

    @cached_property
    def sim_specs(self) -> list[SimSpec] | None:
        """The pool's sim specs when every worker is simulated (exact expectations of plans), else None."""
        return sim_specs(self.config.workers)

    # -- the learner

    @cached_property
    def behaviour_source(self) -> BehaviourSource:
        """Where a stale row's behaviour log-probs come from (learner.behaviour_logprobs resolved)."""
        c = self.config
        return behaviour_source(
            c.learner.behaviour_logprobs, c.generator.backend, c.conductor.constrain_format, c.learner.zero_stage
        )

    @cached_property
    def roster_tokens(self) -> list[int]:
        """The token of each roster id: what train.choice_centering's net vote and train.worker_logprob=roster
        are over ([] when neither is on)."""
        shape, t = self.prompts.shape, self.config.train
        if shape is None or not (t.choice_centering or t.worker_logprob == "roster"):
            return []
        return worker_tokens(self.prompts.tokenizer, shape.model_ids)

    @property
    def corrects_stale_rows(self) -> bool:
        """Whether stale rows get behaviour weights (False: learned as if on-policy)."""
        return self.behaviour_source != "none"

    @property
    def learner_past_versions(self) -> int:
        """Weights versions the learner keeps to recompute stale rows' log-probs itself."""
        return self.config.train.max_staleness if self.behaviour_source == "learner" else 0

    # -- sampling

    def generation(self, use: Use) -> GenerationSettings:
        """The sampling settings of `use`: the temperature is conductor.temperature when training;
        evaluate.temperature, else that, when evaluating; ask.temperature, else that, when answering
        (ask, serve, the Orchestrator)."""
        c = self.config
        override = {"train": None, "evaluate": c.evaluate.temperature, "answer": c.ask.temperature}[use]
        return GenerationSettings(
            use,
            c.conductor.temperature if override is None else override,
            c.conductor.max_new_tokens,
            c.conductor.top_p,
            c.train.seed if use == "train" else c.conductor.seed,
        )

    # -- recursion

    def recursion(
        self, writer: PlanWriter, use: Use, seed: int, *, depth: int | None = None, max_steps: int | None = None
    ) -> Recursion | None:
        """How plans call the Conductor again (None: depth 0). `depth`, `max_steps`: a served request's
        own (default conductor.*). The depth is a limit: a call is made only where a plan gives a step
        to the Conductor's seat, in every use; training alone forces one, in whole groups
        (`forced_groups`, set per rollout by `execute_rollouts`), and discounts non-recursive rewards."""
        c = self.config.conductor
        depth = c.max_depth if depth is None else depth
        max_steps = c.max_steps if max_steps is None else max_steps
        if depth < 1:
            return None
        discount = self.config.train.recursion.discount if use == "train" else 0.0
        return Recursion(writer, self.prompt(max_steps), depth, max_steps, forced_below=0, seed=seed, discount=discount)

    def engine_recursion(self, engines: SampleEngines, use: Use, seed: int) -> Recursion | None:
        """Recursive calls sampled by generator engines (a GeneratorPool) at the use's settings."""
        if self.config.conductor.max_depth < 1:
            return None
        g = self.generation(use)
        return self.recursion(generator_writer(engines, g.temperature, g.max_new_tokens, g.top_p), use, seed)

    # -- what a training iteration draws

    def training_questions(self) -> tuple[list[Question], int]:
        """The data set's questions whose prompt leaves room for a plan in the generator's context, and
        how many were left out. Refuses (ContaminationError) a question of an evaluation benchmark
        (evaluate.benchmarks, all of each); a benchmark not on this machine cannot leak, and is skipped."""
        from conductor_rl.data import load_available, load_dataset
        from conductor_rl.data.overlap import check_disjoint

        c = self.config
        questions = load_dataset(c.data.questions, limit=c.data.limit)
        kept, left_out = fitting_questions(
            questions, self.prompts, c.generator.max_model_len, c.conductor.max_new_tokens
        )
        for spec, held_out in load_available(c.evaluate.benchmarks).items():
            check_disjoint(kept, held_out, training_name=f"data.questions={c.data.questions}", evaluation_name=spec)
        return kept, left_out

    @cached_property
    def pool_roster(self) -> Roster:
        """The roster of the whole pool: what a prompt lists without a subset."""
        return roster_for(self.config)

    def roster(self, iteration: int, question: Question) -> Roster:
        """The workers a question's prompt lists this iteration: the whole pool unless
        `train.worker_subset` asks for subsets (the Conductor's seat always listed); the same draw on resume."""
        size = self.config.train.worker_subset
        if size is None:
            return self.pool_roster
        workers = self.config.workers
        key = f"{iteration}/{question.id}"
        places = draw_roster(len(workers), size, self.config.train.seed, key, always=seat_places(workers))
        return roster_for(self.config, places)

    def forced_groups(self, n_groups: int, iteration: int) -> set[int]:
        """The groups forced to recurse this iteration: none unless the Conductor may recurse."""
        c = self.config
        if c.conductor.max_depth < 1:
            return set()
        return forced_groups(n_groups, c.train.recursion.forced_share, c.train.seed, iteration)
