"""A training iteration of the paper's shape against providers as a user meets them: the rehearsal.

One iteration of B x G rollouts (paper: 4 x 64), plans of up to 5 steps, over the paper's seven
workers (configs/paper.yaml: three closed models and four open ones), each served by a local
server that speaks its provider's wire format and refuses what the provider refuses
(conductor_rl/testing/fake_llm_server.py, one per worker, each in its own Ray actor process), with:

- latency and billed output tokens drawn per call from heavy-tailed (lognormal) distributions per
  model (conductor_rl/testing/conditions.py; output capped at the request's max tokens). ASSUMED
  medians / sigmas at --latency-scale 1 (no provider publishes them; constrained budgets, 4096
  output tokens, minimal reasoning), latency and output tokens:

      gpt-6.1-sol 8 s / 0.6, 600 / 0.7           gemini-3.8-flash 5 s / 0.6, 500 / 0.7
      claude-sonnet-4-6 10 s / 0.5, 700 / 0.6    qwen3-32b 4 s / 0.5, 400 / 0.6
      qwen3-32b-thinking 25 s / 0.8, 2500 / 0.7  deepseek-r1-distill-qwen-32b 30 s / 0.8, 3000 / 0.7
      gemma-3-27b-it 3 s / 0.4, 300 / 0.5

- each worker's RPM and TPM limits as paper.yaml sets them (its providers' tier 1), enforced by our
  cluster-wide limiter and, for RPM, by its server (which returns a 429 on any overrun: a
  "self-made 429", goal 0);
- 429s with Retry-After and 500s at set rates (--rate-429, --rate-500), which the worker pool
  retries.

Time is scaled: latencies, Retry-After and the limits' windows all run --latency-scale times real
time (the limits are raised by 1 / scale over their 60 s window, the same ratio of calls to time).
The Conductor is the random `tiny-qwen2` with the plan-length steer of benchmarks/iteration.py
(its quality does not matter to timing); questions are the shipped samples, so every answer is
graded (and wrong: the servers echo).

Per size (--sizes: multiples of B, default 1,4,16): `rollouts`, the iteration's rollout phase
(`execute_s`) against the critical path under the limits (benchmarks/limited_schedule.py: the
same calls, with the latencies they took, scheduled the moment their inputs and their worker's
limits allow, each worker's calls spaced window / RPM apart as providers enforce a minute's limit,
longest remaining chain first, no overhead, no safety margin, no drawn faults):
`wall_over_critical_path` = execute_s / critical_path_s, and against a bound no schedule beats
(`lower_bound_s`, `wall_over_lower_bound`); `chain_s` is the slowest rollout's chain without
limits; `peak_in_flight`, `self_made_429s`, `drawn_faults`, `lost_calls` (calls
the ledger opened and never closed), `ledger_minus_bills_usd` (what the ledger holds less what
the servers billed at the workers' prices) and `driver_rss_mb` (the driver's resident memory at
its peak during the iteration), `billed_output_tokens` and `worker_replicas_per_node` (the head's
first). Goals: wall_over_critical_path <= 1.1 at every size; 0 self-made
429s; 0 lost calls; the ledger equal to the bills; memory growing at most linearly with calls in
flight.

With --nodes N (N >= 2) the run is on a Ray cluster of a head and N - 1 worker nodes on this
machine (tests/ray_clusters.py: a raylet each): the worker pools' replicas (--replicas per
worker) are spread over the worker nodes, the driver, generator, learner, ledger, limiters and
servers stay on the head.

    python benchmarks/paper_scale.py [--json] [--sizes 1,4,16] [--latency-scale 0.1] [--nodes 3]

What it leaves out: retried attempts (drawn 429s and 500s) cost the run their time and Retry-After
but not the critical path, which counts each step's answered attempt only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from benchmarks.iteration import build_run, measure_iteration
from benchmarks.limited_schedule import Limits, calls_of, chain_s, lower_bound_s, reference_schedule_s
from benchmarks.measure import keep_result, log, machine
from conductor_rl.testing.conditions import Lognormal, ProviderConditions

GOAL_RATIO = 1.10
# Per worker, latency (median s, sigma) at --latency-scale 1 and output tokens (median, sigma):
# assumptions, see the docstring.
LATENCY = {
    "gpt-6.1-sol": (8.0, 0.6),
    "gemini-3.8-flash": (5.0, 0.6),
    "claude-sonnet-4-6": (10.0, 0.5),
    "qwen3-32b": (4.0, 0.5),
    "qwen3-32b-thinking": (25.0, 0.8),
    "deepseek-r1-distill-qwen-32b": (30.0, 0.8),
    "gemma-3-27b-it": (3.0, 0.4),
}
OUTPUT_TOKENS = {
    "gpt-6.1-sol": (600, 0.7),
    "gemini-3.8-flash": (500, 0.7),
    "claude-sonnet-4-6": (700, 0.6),
    "qwen3-32b": (400, 0.6),
    "qwen3-32b-thinking": (2500, 0.7),
    "deepseek-r1-distill-qwen-32b": (3000, 0.7),
    "gemma-3-27b-it": (300, 0.5),
}
FAKE_KEY = "sk-rehearsal-0000"


def paper_workers(scale: float, servers: dict) -> list[dict]:
    """paper.yaml's seven workers, each pointed at its own server, limits raised by 1 / scale."""
    from conductor_rl.config import load_config

    workers = []
    for w in load_config("configs/paper.yaml").workers:
        data = w.model_dump(mode="json")
        data.update(serve=None, base_url=servers[w.name].base_url_for(w.provider), concurrency=4096)
        data["api_key_env"] = "CONDUCTOR_REHEARSAL_KEY"
        data["rpm"] = round(w.rpm / scale) if w.rpm else None
        data["tpm"] = round(w.tpm / scale) if w.tpm else None
        workers.append(data)
    return workers


def start_servers(args: argparse.Namespace) -> dict:
    from actors.fake_llm_server import RemoteFakeLLMServer
    from conductor_rl.config import load_config

    servers = {}
    for i, w in enumerate(load_config("configs/paper.yaml").workers):
        median, sigma = LATENCY[w.name]
        conditions = ProviderConditions(
            latency={"*": Lognormal(median * args.latency_scale, sigma)},
            output_tokens={"*": Lognormal(*OUTPUT_TOKENS[w.name])},
            rate_429=args.rate_429,
            rate_500=args.rate_500,
            retry_after_s=args.retry_after * args.latency_scale,
            seed=args.seed * 100 + i,
        )
        rpm = round(w.rpm / args.latency_scale) if w.rpm else None
        servers[w.name] = RemoteFakeLLMServer(rpm=rpm, window_s=60.0, conditions=conditions)
    return servers


class PeakRss:
    """The driver's resident memory, sampled while an iteration runs; `peak_mb` its highest."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                for line in Path("/proc/self/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.peak_mb = max(self.peak_mb, int(line.split()[1]) / 1024)
            except OSError:
                self.peak_mb = max(self.peak_mb, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
            self._stop.wait(0.25)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def schedule_figures(workers: list, rollouts: list, stats: dict, retry_after_s: float, keep: Path | None) -> dict:
    """The iteration's calls scheduled as well as the workers' limits and drawn faults allow
    (benchmarks/limited_schedule.py); with `keep`, the calls and limits written there (gzipped JSON)
    so that the yardstick can be recomputed without rerunning."""
    plans = calls_of(rollouts, {w.name: w.max_tokens for w in workers})
    # A 429 cools down a limited worker's key for every caller; without limits only its own call waits.
    limits = {
        w.name: Limits(
            w.rpm,
            w.tpm,
            60.0,
            stats[w.name].drawn_faults,
            stats[w.name].drawn_429s if w.rpm or w.tpm else 0,
            retry_after_s,
        )
        for w in workers
    }
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(keep, "wt") as out:
            json.dump(
                {"limits": {k: asdict(v) for k, v in limits.items()}, "plans": [[asdict(c) for c in p] for p in plans]},
                out,
            )
        log(f"calls kept in {keep}")
    return {
        "critical_path_s": round(reference_schedule_s(plans, limits), 3),
        "lower_bound_s": round(lower_bound_s(plans, limits), 3),
        "chain_s": round(chain_s(plans), 3),
    }


def server_bills_usd(servers: dict, workers: list) -> float:
    from conductor_rl.workers.costs import cost_of
    from conductor_rl.workers.providers.base import Usage

    price = {w.name: w.price for w in workers}
    return sum(
        cost_of(Usage(u["input"], u["output"], u["reasoning"], u["cached"]), price[name])
        for name, server in servers.items()
        for u in server.stats.usages
    )


def replicas_per_node(ray, pools: list) -> list[int]:
    """How many WorkerActors each node holds (the head's first when it holds any)."""
    from collections import Counter

    replicas = [r for pool in pools for r in getattr(pool, "replicas", [])]
    where = ray.get([r.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id()) for r in replicas])
    head = ray.get_runtime_context().get_node_id()
    counts = Counter(where)
    return [counts.pop(head, 0)] + sorted(counts.values(), reverse=True)


def start_cluster(args: argparse.Namespace):
    """The Ray cluster of a size: one node, or a head and worker nodes (returned, to shut down)."""
    import ray

    if args.nodes <= 1:
        from tests.ray_clusters import LOCAL_RAY

        ray.init(address="local", **LOCAL_RAY)
        return None
    from tests.ray_clusters import CPU_NODE, LocalCluster

    local = LocalCluster(head_cpus=8)
    per_node = -(-args.replicas * 7 // (args.nodes - 1))  # the seven workers' replicas, spread evenly
    for _ in range(args.nodes - 1):
        local.add_node(0, {CPU_NODE: per_node})
    local.connect()
    return local


def measure_size(args: argparse.Namespace, size: int) -> dict:
    import ray

    from conductor_rl.config import load_config

    local = start_cluster(args)
    os.environ["CONDUCTOR_REHEARSAL_KEY"] = FAKE_KEY
    workdir = Path(tempfile.mkdtemp(prefix="conductor-bench-paper-scale-"))
    servers = start_servers(args)
    try:
        overrides = [
            f"conductor.model={args.model}",
            "conductor.constrain_format=true",
            f"conductor.max_steps={args.max_steps}",
            f"conductor.max_new_tokens={args.max_new_tokens}",
            f"train.questions_per_iteration={args.questions * size}",
            f"train.rollouts_per_question={args.rollouts}",
            f"train.worker_replicas={args.replicas}",
            "train.progress=false",
            "train.loggers=[]",
            "train.preflight=false",
            "data.questions=samples:gsm8k+samples:mmlu",
            "cluster.generator={CPU: 1}",
            "cluster.learner={CPU: 1}",
            *(["cluster.worker={CPU: 0, conductor_cpu_node: 1}"] if local is not None else []),
            f"workers={json.dumps(paper_workers(args.latency_scale, servers))}",
        ]
        config = load_config(None, overrides)
        log(f"size {size}: {args.questions * size} x {args.rollouts} rollouts over {len(config.workers)} workers ...")
        _, run, adjusted = build_run(config, 1, target_steps=args.target_steps, workdir=workdir)
        try:
            with PeakRss() as rss:
                row = measure_iteration(run, 0, ray)
            ledger = ray.get(run.actors.ledger.summary.remote())
            placed = replicas_per_node(ray, run.actors.workers)
        finally:
            run.actors.shutdown()
        stats = {name: s.stats for name, s in servers.items()}
        bills = server_bills_usd(servers, config.workers)
        keep = Path(args.keep_calls) / f"size-{size}.json.gz" if args.keep_calls else None
        schedule = schedule_figures(
            config.workers, row["rollout_objects"], stats, args.retry_after * args.latency_scale, keep
        )
    finally:
        for server in servers.values():
            server.stop()
        ray.shutdown()
        if local is not None:
            local.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "rollouts": args.questions * size * args.rollouts,
        "execute_s": row["execute_s"],
        **schedule,
        "wall_over_critical_path": round(row["execute_s"] / schedule["critical_path_s"], 4),
        "wall_over_lower_bound": round(row["execute_s"] / schedule["lower_bound_s"], 4),
        "peak_in_flight": row["calls_in_flight_peak"],
        "worker_calls": row["worker_calls"],
        "self_made_429s": sum(s.limit_429s for s in stats.values()),
        "drawn_faults": sum(s.drawn_faults for s in stats.values()),
        "lost_calls": ledger["unsettled"]["calls"],
        "ledger_minus_bills_usd": round(ledger["total"]["cost_usd"] - bills, 6),
        "billed_output_tokens": sum(u["output"] for s in stats.values() for u in s.usages),
        "driver_rss_mb": round(rss.peak_mb, 1),
        "worker_replicas_per_node": placed,
        "steps_per_plan": row["steps_per_plan"],
        "phases_s": row["phases_s"],
        "plan_length_steer": adjusted.get("plan_length_steer"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--sizes", default="1,4,16", help="multiples of the paper's B (comma-separated)")
    parser.add_argument("--latency-scale", type=float, default=0.1, help="simulated time over real time")
    parser.add_argument("--questions", type=int, default=4, help="B at size 1 (paper: 4)")
    parser.add_argument("--rollouts", type=int, default=64, help="G (paper: 64)")
    parser.add_argument("--max-steps", type=int, default=5, help="most steps per plan (paper: 5)")
    parser.add_argument("--target-steps", type=float, default=3.0, help="the plan-length steer's mean steps")
    parser.add_argument("--max-new-tokens", type=int, default=384, help="Conductor tokens per plan")
    parser.add_argument("--rate-429", type=float, default=0.01, help="chance a call gets a 429 (Retry-After)")
    parser.add_argument("--rate-500", type=float, default=0.01, help="chance a call gets a 500")
    parser.add_argument("--retry-after", type=float, default=20.0, help="a 429's Retry-After, real seconds")
    parser.add_argument("--model", default="tiny-qwen2", help="the Conductor (default: the random tiny-qwen2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-calls", default="", help="a folder to write each size's calls and limits to")
    parser.add_argument("--nodes", type=int, default=1, help="Ray nodes: 1, or a head and N - 1 worker nodes")
    parser.add_argument("--replicas", type=int, default=1, help="WorkerActors per worker (train.worker_replicas)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1 or not 0 < args.latency_scale <= 1:
        parser.error("--sizes needs positive integers; --latency-scale must be in (0, 1]")
    begun = time.perf_counter()
    rows = []
    for size in sizes:
        rows.append(measure_size(args, size))
        log(f"size {size}: {json.dumps(rows[-1])}")
    figures = {
        "benchmark": "paper_scale",
        "workers": "configs/paper.yaml's seven, on local servers speaking each provider's wire format",
        "latency_assumptions_s": {k: {"median": m, "sigma": s} for k, (m, s) in LATENCY.items()},
        "output_token_assumptions": {k: {"median": m, "sigma": s} for k, (m, s) in OUTPUT_TOKENS.items()},
        "latency_scale": args.latency_scale,
        "rate_429": args.rate_429,
        "rate_500": args.rate_500,
        "model": args.model,
        "nodes": args.nodes,
        "replicas_per_worker": args.replicas,
        "machine": machine(),
        "sizes": rows,
        "goal_wall_over_critical_path": GOAL_RATIO,
        "goals_met": {
            "wall_over_critical_path": all((r["wall_over_critical_path"] or 0) <= GOAL_RATIO for r in rows),
            "no_self_made_429s": all(r["self_made_429s"] == 0 for r in rows),
            "no_lost_calls": all(r["lost_calls"] == 0 for r in rows),
            "ledger_equals_bills": all(abs(r["ledger_minus_bills_usd"]) < 1e-6 for r in rows),
        },
        "seconds": round(time.perf_counter() - begun, 1),
    }
    keep_result(figures)
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
