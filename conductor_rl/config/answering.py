"""The sections of answering questions after training: `ask` (the command line) and `serve` (an
OpenAI-compatible endpoint)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from conductor_rl.config.strict import Strict


class AskConfig(Strict):
    questions: list[str] = Field(default_factory=list, description="Questions for `ask` when none is given.")
    sample_questions: int = Field(3, ge=0, description="When no question is given: how many from data.questions.")
    samples: int = Field(1, ge=1, description="Plans sampled per question; the first that parses is run.")
    temperature: float | None = Field(
        None, ge=0.0, description="Conductor temperature for ask (None: conductor.temperature)."
    )


class ServeConfig(Strict):
    """A served Conductor (`conductor-rl serve`, actors/conductor_app.py): an OpenAI-compatible endpoint."""

    model_name: str | None = Field(
        None,
        description="The model name clients ask for (GET /v1/models); None: "
        "the Conductor's folder name (a checkpoint's, for its model/ folder) or model name.",
    )
    host: str = Field("127.0.0.1", description="Where the HTTP endpoint listens (0.0.0.0: every interface).")
    port: int = Field(8000, ge=1, le=65535)
    require_token: bool = Field(
        True,
        description="Refuse requests without a known bearer token (tokens from "
        "CONDUCTOR_RL_SERVE_TOKENS=client:token,... or serve.tokens_file). false: anyone "
        "who reaches the port may spend the workers' budget.",
    )
    tokens_file: str | None = Field(None, description="One `client token` per line; read at start, never logged.")
    client_requests: int | None = Field(60, ge=1, description="Requests per client per client_window_s (None: no cap).")
    client_usd: float | None = Field(
        1.0,
        ge=0.0,
        description="Worker dollars per client per client_window_s "
        "(None: no cap); a request is refused once its client spent this much.",
    )
    client_window_s: float = Field(60.0, gt=0.0)
    client_budget_usd: float | None = Field(
        None,
        ge=0.0,
        description="Worker dollars per client per client_budget_per, counted from the spend journal "
        "across replicas and restarts (None: no budget); a client over it gets a 429 insufficient_quota.",
    )
    client_budget_per: Literal["day", "total"] = Field(
        "day", description="day: the budget renews at 00:00 UTC; total: over the server's whole life."
    )
    budget_usd: float | None = Field(
        None, ge=0.0, description="The server's whole worker budget, every restart counted (None: no cap)."
    )
    output_dir: str = Field(
        "runs/serve",
        description="The server's spend journal (spend.jsonl): its budget and its clients' windows outlive a restart.",
    )
    max_request_bytes: int = Field(256_000, ge=1_000)
    max_messages: int = Field(64, ge=1)
    timeout_s: float = Field(
        300.0, gt=0.0, description="A request without an answer by then gets a 504 with what it spent."
    )
    replicas: int = Field(1, ge=1, description="Ray Serve replicas of the endpoint (unless autoscaling is set).")
    autoscaling: dict[str, Any] | None = Field(
        None,
        description="Ray Serve's autoscaling_config, passed as is to the endpoint's deployment in place of "
        "serve.replicas (min_replicas, max_replicas, target_ongoing_requests, upscale_delay_s, ...; see Ray "
        "Serve's AutoscalingConfig). Replicas share the generator engines and the worker pools.",
    )
    max_ongoing_requests: int = Field(64, ge=1, description="Requests one replica handles at once (Ray Serve).")
    worker_replicas: int = Field(1, ge=1, description="WorkerActors per worker (as train.worker_replicas).")
    batching: Literal["continuous", "window"] = Field(
        "continuous",
        description="How the Conductor's plans are sampled. continuous: each request is one request to vLLM's "
        "asynchronous engine, which it joins at the engine's next step, and its plan returns as soon as it is "
        "finished (needs generator.backend=vllm; with transformers, window is used). window: requests that "
        "arrive within serve.batch_window_s of each other are sampled in one batch on the offline engine, and "
        "each waits for the batch's longest plan.",
    )
    batch_window_s: float = Field(
        0.02,
        ge=0.0,
        description="With serve.batching=window: plans of requests that arrive within this many "
        "seconds of each other are sampled in one generator batch.",
    )
