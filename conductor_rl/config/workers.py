"""The worker sections: each worker of the pool (`WorkerConfig`), its simulated skill,
price and served model, and the paper's pool of seven workers as the default."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator, model_validator

from conductor_rl.config.strict import Strict

#: Worker providers that need no network and no key: simulated workers, local transformers models,
#: and the Conductor itself (a step given to it is a recursive call, conductor_rl/rollout/recursion.py).
OfflineProvider = Literal["sim", "local", "conductor"]
#: Worker providers that call a vendor's HTTP API with a key.
HttpProvider = Literal["openai", "openai_compatible", "openai_responses", "anthropic", "google"]
OFFLINE_PROVIDERS: tuple[str, ...] = get_args(OfflineProvider)
HTTP_PROVIDERS: tuple[str, ...] = get_args(HttpProvider)


class SimSpec(Strict):
    """A simulated worker (conductor_rl/workers/sim_rules.py, docs/guide/simulator.md): it answers
    with the reference with some chance, otherwise with a plausible wrong answer, and its outputs
    are labelled simulated everywhere. The chance of a solving step falls from `accuracy[domain]`
    on the easiest questions to `hard_accuracy[domain]` on the hardest, plus `gain_with_context`
    when it reads earlier answers, times `off_task_factor` when its subtask shares no content
    word with the question. With `keep_rate` set, a step that reads earlier answers and is
    worded as a check judges the latest one: it keeps a right one right (`keep_rate`) or
    repairs a wrong one (`repair_rate`). Left at their defaults, `hard_accuracy`, `keep_rate` and `off_task_factor`
    change nothing: only the domain and reading earlier answers count."""

    accuracy: dict[str, float] = Field(default_factory=lambda: {"default": 0.5})
    hard_accuracy: dict[str, float] | None = Field(
        None,
        description="Skill on the hardest questions (difficulty 1), per domain as `accuracy`, which is "
        "the skill at difficulty 0; linear in between (conductor_rl/data/difficulty.py). None: difficulty "
        "changes nothing.",
    )
    gain_with_context: float = Field(0.0, ge=-1.0, le=1.0)
    keep_rate: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="A checking step (it reads earlier answers and its subtask says check, verify, "
        "fix, ...) whose latest read answer is right keeps it right with this chance. None: the worker never "
        "acts as a checker; reading earlier answers only adds gain_with_context.",
    )
    repair_rate: float = Field(
        0.0,
        ge=0.0,
        le=1.0,
        description="A checking step whose latest read answer is wrong gets it right with repair_rate x "
        "its own solve chance (only with keep_rate set).",
    )
    off_task_factor: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="A solving step whose subtask shares no content word with the question succeeds "
        "with its chance times this (1: the wording of a subtask changes nothing).",
    )
    latency_s: float = Field(0.0, ge=0.0, description="Mean simulated latency per call.")
    latency_jitter: float = Field(0.0, ge=0.0, le=1.0, description="Relative +/- spread of the latency.")
    output_tokens: int = Field(64, ge=1)
    fail_rate: float = Field(0.0, ge=0.0, le=1.0, description="Share of calls that raise a provider error.")

    @field_validator("accuracy", "hard_accuracy")
    @classmethod
    def _probabilities(cls, value: dict[str, float] | None, info: ValidationInfo) -> dict[str, float] | None:
        for domain, p in (value or {}).items():
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{info.field_name}[{domain!r}] = {p} must be between 0 and 1")
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

    model: str = Field(
        ...,
        description="What vLLM loads: a hub name, a local folder, or an offline name "
        "('smollm2-135m'). Requests name it by the worker's `model`.",
    )
    replicas: int = Field(
        1,
        ge=1,
        description="Servers of this model; the pool spreads calls over them and "
        "its concurrency follows (replicas x worker concurrency).",
    )
    gpus: float = Field(0.0, ge=0.0, description="GPUs per replica (its tensor-parallel size when >= 1; 0: CPU).")
    cpus: float = Field(1.0, ge=0.0, description="Logical CPUs per replica (Ray's bookkeeping).")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom Ray resources per replica "
        "(a node type of ray_cluster.yaml, e.g. {conductor_gpu_node: 0.01}).",
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="vLLM server arguments, as its "
        "command line names them without dashes: {max_model_len: 8192, "
        "enforce_eager: true, reasoning_parser: qwen3}.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment of the server process (e.g. VLLM_CPU_KVCACHE_SPACE); never a key.",
    )
    start_timeout_s: float = Field(
        900.0,
        gt=0.0,
        description="How long a replica may take to load and answer "
        "its health check before the job stops with its log.",
    )


class WorkerConfig(Strict):
    """One worker of the pool. The Conductor sees it only as 'Model <number>' (its `model_id`)."""

    name: str
    provider: Literal[OfflineProvider, HttpProvider]
    model_id: int | None = Field(
        None,
        ge=0,
        le=9,
        description="The number the Conductor knows this worker by ('Model <model_id>'); unset: its place in "
        "`workers`. A subset of the pool (train.worker_subset, --workers, a served request's `workers`) lists "
        "each worker under this same number, so what the Conductor learnt about a number holds in every roster.",
    )
    description: str = Field(
        "",
        max_length=200,
        description="conductor.worker_identity=description: the short text the prompt lists this worker with "
        "(unset: its name). Unused with worker_identity=number.",
    )
    model: str = ""
    base_url: str | None = None
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the key.")
    temperature: float = Field(
        0.2,
        ge=0.0,
        description="Sent where the model accepts it; reasoning models that "
        "only take their default (GPT-5 and later, o-series) and every Claude model (API version "
        "2026-10-21) get none (see fixed_temperature).",
    )
    max_tokens: int = Field(4096, ge=1, description="Output tokens per call, reasoning included.")
    reasoning: Reasoning = Field(
        "default",
        description="How much the worker reasons: default (the model's own), off, minimal, low, medium, "
        "high. Per provider: OpenAI reasoning_effort; Gemini thinking_budget (never below the model's minimum: "
        "2.5 Pro cannot turn it off); Anthropic extended thinking off, or on with a budget; open models through "
        "their chat template (Qwen3 enable_thinking). conductor_rl/workers/request_shape.py has the table.",
    )
    reasoning_budget: int | None = Field(
        None,
        ge=0,
        description="Thinking tokens, for providers that take a "
        "budget (Gemini, Anthropic); overrides `reasoning`'s level there.",
    )
    fixed_temperature: bool | None = Field(
        None,
        description="The model refuses any temperature but its default "
        "(None: from the model table; true: never send one).",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict,
        description="Merged into every request's JSON body "
        "as is (vLLM's chat_template_kwargs or top_k, a provider's new option).",
    )
    reasoning_in_context: bool = Field(
        False,
        description="Show later steps this worker's reasoning text too "
        "(off: only its answer; reasoning is always counted in tokens and cost).",
    )
    serve: ServeSpec | None = Field(
        None,
        description="Serve this open-weight model on the cluster instead of "
        "calling `base_url` (provider openai_compatible only).",
    )
    timeout_s: float = Field(600.0, gt=0.0)
    price: Price = Field(default_factory=Price)
    sim: SimSpec | None = None
    rpm: int | None = Field(
        None,
        ge=1,
        description="Requests per minute allowed for this worker's key and model, "
        "enforced across the whole cluster (None: no limit).",
    )
    tpm: int | None = Field(
        None,
        ge=1,
        description="Tokens per minute (input + max output, settled to the real "
        "usage after each call), enforced across the cluster (None: no limit).",
    )
    max_retries: int = Field(
        5,
        ge=0,
        description="Retries of a failed call (429, 5xx, timeouts, dropped "
        "connections); other 4xx fail at once. SDK retries are always off.",
    )
    concurrency: int = Field(
        256,
        ge=1,
        description="Calls in flight at once in each worker-pool replica; "
        "replicas x concurrency should reach B x G (the paper: 256), or steps queue.",
    )

    @model_validator(mode="after")
    def _provider_fields(self) -> WorkerConfig:
        if self.provider == "sim" and self.sim is None:
            raise ValueError(
                f"worker {self.name!r} uses provider 'sim' and needs a 'sim' section (accuracy per domain)"
            )
        if self.provider not in ("sim", "conductor") and not self.model:
            raise ValueError(f"worker {self.name!r} uses provider {self.provider!r} and needs 'model'")
        if self.serve is not None:
            if self.provider != "openai_compatible":
                raise ValueError(
                    f"worker {self.name!r}: 'serve' needs provider openai_compatible (vLLM's "
                    f"OpenAI-compatible server), not {self.provider!r}"
                )
            if self.base_url:
                raise ValueError(
                    f"worker {self.name!r}: give either 'serve' (the job starts the server) or "
                    f"'base_url' (a server that runs already), not both"
                )
        return self


def model_ids(workers: Sequence[WorkerConfig]) -> tuple[int, ...]:
    """The number the Conductor knows each worker by: its `model_id`, else its place in `workers`."""
    return tuple(i if w.model_id is None else w.model_id for i, w in enumerate(workers))


#: The pool entry that lets the Conductor call itself: a plan's step given to it is a recursive call.
SEAT_EXAMPLE = "{name: conductor, provider: conductor}"


def seat_places(workers: Sequence[WorkerConfig]) -> list[int]:
    """The pool indices of the Conductor's own seat (`provider: conductor`): none, or one (config allows one)."""
    return [i for i, w in enumerate(workers) if w.provider == "conductor"]


def seat_of(workers: Sequence[WorkerConfig]) -> str | None:
    """The name of the worker that is the Conductor itself (`provider: conductor`), if the pool has one."""
    return next((workers[i].name for i in seat_places(workers)), None)


def answering_workers(workers: Sequence[WorkerConfig]) -> list[int]:
    """The pool indices of the workers that answer: every one but the Conductor's own seat."""
    seats = seat_places(workers)
    return [i for i in range(len(workers)) if i not in seats]


def missing_seat(max_depth: int, workers: Sequence[WorkerConfig], key: str) -> str | None:
    """Why a maximum depth of `max_depth` (set by `key`) cannot be used with `workers`, or None.
    Recursion is the Conductor's choice, made by giving a step to its own seat: without a seat a
    depth of 1 or more could never be reached, so it is refused rather than silently ignored."""
    if max_depth < 1 or seat_of(workers) is not None:
        return None
    return (
        f"{key}={max_depth} lets the Conductor call itself, but no worker is the Conductor itself: add a "
        f"worker {SEAT_EXAMPLE} to `workers` (a plan recurses by giving it a step; on the command line "
        f"workers.{len(workers)}='{SEAT_EXAMPLE}'), or set {key}=0"
    )


def _paper_workers() -> list[WorkerConfig]:
    """The paper's pool (§4.1, app. A): temperature 0.2 where a model takes one, 4096 output
    tokens, minimal reasoning; list prices (USD / 1M tokens); rate limits at each vendor's
    published tier-1 figures (raise rpm/tpm to your account's). The open-weight models are
    served on the cluster's GPU node by vLLM (one GPU each); Qwen3-32B runs with and without
    thinking, as two workers on one server (seven workers, six models)."""

    def api(
        name: str,
        provider: str,
        model: str,
        env: str,
        price: tuple[float, float, float],
        reasoning: str,
        rpm: int,
        tpm: int,
    ) -> WorkerConfig:
        return WorkerConfig(
            name=name,
            provider=provider,
            model=model,
            api_key_env=env,
            reasoning=reasoning,
            rpm=rpm,
            tpm=tpm,
            price=Price(input=price[0], output=price[1], cached_input=price[2]),
        )

    def served(name: str, model: str, reasoning: str, price: tuple[float, float], **engine_args: Any) -> WorkerConfig:
        spec = ServeSpec(
            model=model,
            gpus=1,
            cpus=8,
            resources={"conductor_gpu_node": 0.01},
            engine_args={"max_model_len": 16384, "gpu_memory_utilization": 0.9, **engine_args},
        )
        return WorkerConfig(
            name=name,
            provider="openai_compatible",
            model=model,
            reasoning=reasoning,
            serve=spec,
            price=Price(input=price[0], output=price[1]),
        )

    return [
        # The paper's GPT-5, Gemini 2.5 Pro and Claude Sonnet 4 are retired or about to be: each provider's
        # named replacement (docs/decisions.md, "The paper's pool as served today").
        api("gpt-6.1-sol", "openai", "gpt-6.1-sol", "OPENAI_API_KEY", (2.0, 10.0, 0.1), "minimal", 500, 500_000),
        api(
            "gemini-3.8-flash",
            "google",
            "gemini-3.8-flash",
            "GOOGLE_API_KEY",
            (1.5, 7.5, 0.15),
            "minimal",
            150,
            2_000_000,
        ),
        # Anthropic's tier 1 counts 30k input and 8k output tokens a minute apart; our limiter counts them together.
        api(
            "claude-sonnet-4-6",
            "anthropic",
            "claude-sonnet-4-6",
            "ANTHROPIC_API_KEY",
            (3.0, 15.0, 0.3),
            "off",
            50,
            38_000,
        ),
        # Open weights at what a serving provider charges for them (docs/decisions.md), not $0: served on our
        # own GPUs they still cost, and a $0 worker would skew every price-based choice.
        served("qwen3-32b", "Qwen/Qwen3-32B", "off", (0.10, 0.30), reasoning_parser="qwen3"),
        served("qwen3-32b-thinking", "Qwen/Qwen3-32B", "default", (0.10, 0.30), reasoning_parser="qwen3"),
        served(
            "deepseek-r1-distill-qwen-32b",
            "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
            "default",
            (0.27, 0.27),
            reasoning_parser="deepseek_r1",
        ),
        served("gemma-3-27b-it", "google/gemma-3-27b-it", "default", (0.10, 0.19)),
    ]
