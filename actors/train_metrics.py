"""Training metrics on the Ray dashboard (`ray.util.metrics`, exported with a
`ray_` prefix): one gauge per scalar of the iteration record, plus worker
usage tagged by worker name. Worker calls, tokens, latency and cost per worker
are counted where they happen (actors/metrics.py)."""

from __future__ import annotations

from ray.util import metrics

GAUGES = {
    "reward_mean": "Mean reward of the iteration's rollouts",
    "reward_std": "Spread of the iteration's rewards",
    "accuracy": "Share of graded rollouts judged correct",
    "format_failure_rate": "Share of plans that did not parse",
    "infra_error_rate": "Share of rollouts dropped for infrastructure errors",
    "truncated_rate": "Share of graded answers lost to a worker's output limit (empty after a length stop)",
    "steps_per_plan": "Mean steps per parsed plan",
    "best_worker_share": "Share of plans whose last step went to the domain's best worker",
    "conductor_tokens": "Conductor tokens sampled in the iteration",
    "worker_input_tokens": "Worker input tokens in the iteration",
    "worker_output_tokens": "Worker output tokens in the iteration",
    "cost_usd": "Worker cost of the iteration",
    "cost_total_usd": "Worker cost of the run so far",
    "cost_unsettled_usd": "Worst-case cost of worker calls lost mid-call (part of the total)",
    "loss": "GRPO loss",
    "grad_norm": "Gradient norm before clipping",
    "lr": "Learning rate",
    "weights_version": "Weights version held by the generators",
    "time_generate_s": "Seconds sampling plans",
    "time_execute_s": "Seconds running plans on the workers",
    "time_grade_s": "Seconds grading",
    "time_learn_s": "Seconds in the learner step",
    "time_sync_s": "Seconds syncing weights to the generators",
    "time_iteration_s": "Seconds for the whole iteration (asynchronous: between learner steps)",
    "time_wait_learner_s": "Asynchronous: seconds the learner waited for the iteration's rollouts",
    "time_wait_generate_s": "Asynchronous: seconds collecting the iteration waited on train.max_staleness",
    "overlap": "Asynchronous: share of the iteration's phase time hidden by running phases together",
    "staleness_max": "Most weights versions between a learned rollout's sampler and the learner",
    "staleness_mean": "Mean weights versions between the learned rollouts' sampler and the learner",
    "stale_dropped": "Rollouts left out as older than train.max_staleness (0 unless something is wrong)",
    "behaviour_weight_mean": "Mean decoupled-PPO weight over stale rollouts' tokens (1: none stale)",
}


class TrainMetrics:
    def __init__(self) -> None:
        self.iteration = metrics.Gauge("conductor_train_iteration", "Last finished iteration")
        self.gauges = {key: metrics.Gauge(f"conductor_train_{key}", text) for key, text in GAUGES.items()}
        self.usage = metrics.Gauge(
            "conductor_train_worker_usage", "Share of plan steps per worker", tag_keys=("worker",)
        )
        self.failed = metrics.Gauge(
            "conductor_train_worker_failure_rate",
            "Share of a worker's calls that failed in the iteration (every attempt)",
            tag_keys=("worker",),
        )

    def publish(self, record: dict) -> None:
        self.iteration.set(record["iteration"])
        for key, gauge in self.gauges.items():
            value = record.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauge.set(float(value))
        for worker, share in record.get("worker_usage", {}).items():
            self.usage.set(float(share), {"worker": worker})
        for worker, calls in record.get("worker_calls", {}).items():
            self.failed.set(calls["failed"] / max(calls["steps"], 1), {"worker": worker})
