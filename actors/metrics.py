"""Worker-pool metrics with `ray.util.metrics` (exported with a `ray_` prefix).

Tagged by worker name and error kind only: never by key, base URL or model
path, so a metrics backend holds nothing secret.
"""

from __future__ import annotations

from ray.util import metrics

from conductor_rl.workers.guarded import CallObserver
from conductor_rl.workers.providers.base import ProviderError, WorkerResponse

LATENCY_BOUNDARIES = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]


class RayMetricsObserver(CallObserver):
    def __init__(self) -> None:
        self.calls = metrics.Counter("conductor_worker_calls", "Worker calls that returned", tag_keys=("worker",))
        self.errors = metrics.Counter(
            "conductor_worker_errors", "Worker calls that failed, by kind", tag_keys=("worker", "kind")
        )
        self.retries = metrics.Counter(
            "conductor_worker_retries", "Retried attempts, by error kind", tag_keys=("worker", "kind")
        )
        self.wait_s = metrics.Counter(
            "conductor_worker_rate_limit_wait_seconds", "Time spent waiting for the rate limiter", tag_keys=("worker",)
        )
        self.latency = metrics.Histogram(
            "conductor_worker_latency_seconds",
            "Provider latency of a call",
            boundaries=LATENCY_BOUNDARIES,
            tag_keys=("worker",),
        )
        self.tokens = metrics.Counter(
            "conductor_worker_tokens", "Tokens by direction", tag_keys=("worker", "direction")
        )
        self.cost = metrics.Counter("conductor_worker_cost_usd", "Cost of worker calls", tag_keys=("worker",))

    def call_finished(self, worker: str, response: WorkerResponse) -> None:
        tags = {"worker": worker}
        self.calls.inc(1, tags)
        self.latency.observe(response.latency_s, tags)
        for direction, n in (
            ("input", response.usage.input_tokens),
            ("output", response.usage.output_tokens),
            ("reasoning", response.usage.reasoning_tokens),
            ("cached", response.usage.cached_tokens),
        ):
            if n:
                self.tokens.inc(n, {"worker": worker, "direction": direction})
        if response.cost_usd:
            self.cost.inc(response.cost_usd, tags)

    def call_failed(self, worker: str, error: ProviderError) -> None:
        self.errors.inc(1, {"worker": worker, "kind": error.kind})

    def retried(self, worker: str, error: ProviderError) -> None:
        self.retries.inc(1, {"worker": worker, "kind": error.kind})

    def waited(self, worker: str, seconds: float) -> None:
        self.wait_s.inc(seconds, {"worker": worker})
