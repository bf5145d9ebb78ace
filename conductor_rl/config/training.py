"""The `train` section: the GRPO loop, its warm start and its recursion (conductor_rl/config/sections.py
holds the others)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from conductor_rl.config.strict import Strict
from conductor_rl.config.tracking import Logger


class RecursionConfig(Strict):
    """Recursive training (paper §3.2), on when conductor.max_depth >= 1."""

    forced_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Share of each batch's questions whose every rollout makes a recursive call: one that "
        "gave no step to the Conductor ends with a forced one, which sees the plan and its answer and writes a "
        "new plan or three empty lists (paper: half). Other groups recurse only by the Conductor's own choice. "
        "Drawn per (train.seed, iteration), the same on resume.",
    )
    discount: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="A non-recursive rollout (the Conductor was never called again on an answer) earns "
        "(1 - discount) x its reward, in every group; a call that stopped (three empty lists) counts as "
        "recursive (paper: 0.25; the formula is ours, docs/decisions.md).",
    )


class WarmStartConfig(Strict):
    """Supervised steps on demonstration plans before the first GRPO iteration (ours; the paper's 7B
    Conductor needs none): conductor_rl/plan/demonstrations.py says what they show and why."""

    steps: int = Field(
        0,
        ge=0,
        description="Learner steps on demonstrations before iteration 0 of a new run (0: none, the paper's "
        "setting). For a small Conductor under conductor.constrain_format, whose own first plans hardly ever "
        "word a subtask after the question or check an earlier answer, so that reward can find those plans.",
    )
    questions_per_step: int = Field(4, ge=1, description="Questions drawn for each warm-start step.")
    workers_in_loss: bool = Field(
        True,
        description="Whether a demonstration's workers and step count are in the warm start's loss. "
        "Demonstrations draw them uniformly whatever the question, so learning them teaches the Conductor "
        "to choose without looking at the question (docs/decisions.md, Warm start); false leaves them to GRPO.",
    )
    demonstrations_per_question: int = Field(4, ge=1, description="Demonstrations per drawn question (one prompt).")
    recursive_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="With conductor.max_depth >= 1: share of drawn questions shown as a recursive call's prompt, "
        "answered by keeping the answer or a new plan, half each; the seat is then demonstrated like any worker.",
    )


class TrainConfig(Strict):
    """The GRPO loop (jobs/train.py; paper §3.1, app. A): B questions x G rollouts per iteration."""

    iterations: int = Field(200, ge=1)
    questions_per_iteration: int = Field(4, ge=1, description="B: questions drawn per iteration (paper: 4).")
    rollouts_per_question: int = Field(
        64, ge=2, description="G: plans sampled per question, one GRPO group (paper: 64)."
    )
    output_dir: str = Field("runs/latest", description="Checkpoints, metrics, TensorBoard, traces and the report.")
    checkpoint_every: int = Field(
        10, ge=1, description="Iterations between checkpoints (the last one and any stop always write one)."
    )
    keep_checkpoints: int = Field(
        3, ge=1, description="Checkpoints kept; older ones are deleted once a new one is complete."
    )
    budget_usd: float | None = Field(
        None, ge=0.0, description="Stop (with a checkpoint) once worker calls cost this much."
    )
    rollout_attempts: int = Field(
        2,
        ge=1,
        description="Runs of a plan whose execution or grading failed for infrastructure "
        "reasons before the rollout is dropped from the batch.",
    )
    max_infra_error_rate: float | None = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="Stop (with a checkpoint) when a worker's calls fail this often, or this "
        "share of rollouts is dropped, over the last infra_error_window iterations (None: never; "
        "conductor_rl/run/infra_guard.py). Off, a refused parameter silently trains without that worker.",
    )
    infra_error_window: int = Field(5, ge=1, description="Iterations the infrastructure error rates are taken over.")
    infra_error_min_steps: int = Field(
        20, ge=1, description="Calls of a worker (rollouts, overall) in the window before its rate is judged."
    )
    drop_uninformative_groups: bool = Field(
        True, description="Leave groups whose rewards are all equal out of the learner step (their advantage is 0)."
    )
    worker_replicas: int = Field(
        1, ge=1, description="WorkerActors per worker (calls in flight: replicas x concurrency)."
    )
    seed: int = Field(0, description="Question order and sampling seeds derive from it.")
    subtask_text_in_loss: bool = Field(
        True,
        description="With conductor.constrain_format: train the subtask text the Conductor writes, not only "
        "its structural choices (workers, steps, access), as the paper trains the whole completion. Turn it off "
        "only where the reward cannot depend on a subtask's wording (the domain-only simulated pool of "
        "configs/local-routing.yaml): those tokens then add only variance to the gradient.",
    )
    choice_weighting: Literal["token", "segment"] = Field(
        "token",
        description="With conductor.constrain_format: how the loss weighs the Conductor's choice tokens. token: each "
        "choice token weighs 1 (the paper trains every token alike). segment: the plan's three kinds of choice "
        "(workers and step count, subtask text, access) share its weight equally, each spread over its own tokens "
        "(conductor_rl/plan/constrained.py choice_weights), so the one token that picks a worker is not a few per "
        "cent of the gradient (docs/decisions.md, Learning on the embedded default).",
    )
    choice_centering: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="With conductor.constrain_format: the share of the batch's net vote for each worker (the "
        "advantage-weighted count of each worker at each step, over all the batch's questions) taken out of every "
        "prompt's worker choice, so the step learns what differs between the questions rather than moving every "
        "question's choice alike (ours, not the paper's: conductor_rl/policy/centering.py). 0: off, as in the paper; "
        "1: a preference that every question shares cannot be learnt.",
    )
    worker_logprob: Literal["vocabulary", "roster"] = Field(
        "vocabulary",
        description="With conductor.constrain_format: the distribution a worker id's log-prob is taken from in the "
        "loss. vocabulary: the model's whole vocabulary, as every other token (the paper's unconstrained 7B Conductor "
        "samples from it). roster: the roster's ids alone, the distribution the constrained sampler draws the id "
        "from, so the step is the policy gradient of the policy that sampled, not also a push on the mass the "
        "format's mask removes (docs/decisions.md, Learning on the embedded default).",
    )
    balance_domains: bool = Field(
        False,
        description="Draw each iteration's questions in turns over the domains "
        "(math, mmlu, ...), so every batch holds each domain equally often "
        "(conductor_rl/data/stream.py says why).",
    )
    preflight: bool = Field(
        True,
        description="Send one tiny request to every worker before the first iteration "
        "and stop with the table if one fails (conductor-rl check; --no-check skips it).",
    )
    worker_subset: tuple[int, int] | None = Field(
        None,
        description="Adaptive worker pools (paper §3.2): each question's prompt lists only k of the workers "
        "(named as conductor.worker_identity says), k drawn per question from [low, high] (one number: always k), "
        "the subset drawn "
        "from (train.seed, iteration, question id), so a resumed run draws the same (conductor_rl/plan/roster.py). "
        "None: every worker, always.",
    )
    recursion: RecursionConfig = Field(default_factory=RecursionConfig)
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    max_staleness: int = Field(
        0,
        ge=0,
        le=8,
        description="0: the synchronous loop (the paper's setting): each iteration's plans are "
        "sampled with the weights of the previous learner step. k >= 1: asynchronous: the generators sample and the "
        "workers run the next k iterations' rollouts while the learner trains, so a rollout may be k weights "
        "versions old when it is learned from (never older); learner.behaviour_weight_cap corrects for it "
        "(jobs/pipeline.py, docs/decisions.md).",
    )
    loggers: list[Logger] = Field(
        default_factory=lambda: list[Logger](["tensorboard"]),
        description="Experiment trackers that get every iteration's metrics, the configuration and the report's "
        "plots, besides metrics.jsonl: any of tensorboard (<output>/tensorboard), wandb, mlflow (see tracking.*).",
    )

    @field_validator("worker_subset", mode="before")
    @classmethod
    def _one_size(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return (value, value)
        return value

    @field_validator("worker_subset")
    @classmethod
    def _ordered_sizes(cls, value: tuple[int, int] | None) -> tuple[int, int] | None:
        if value is not None and not 1 <= value[0] <= value[1]:
            raise ValueError(f"expected k or [low, high] with 1 <= low <= high, got {list(value)}")
        return value

    report: bool = Field(True, description="Write report.md with plots at the end.")
    progress: bool = Field(True, description="Show a progress bar on stderr.")
