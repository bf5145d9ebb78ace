"""What serving costs: a Conductor behind `conductor-rl serve` (Ray Serve, HTTP, the OpenAI
client) against the same questions answered in process by `Orchestrator.answer_many`.

Both paths plan with the same kind of engine (one vLLM generator engine of the
embedded default's SmolLM2 Conductor, `--engine-cpus` CPUs each) and run the
plans on the embedded default's simulated workers (`--worker-latency` seconds a
call); the served path adds HTTP, Ray Serve's routing, the Ray worker pools and
the per-client limits.

At each concurrency c (default 1, 8 and 64):
- served: c client threads (the official `openai` client) share the questions
  (`--questions`, or c when more)
  and send them one after another; a request's latency is its HTTP round trip;
- in process: the same questions in waves of c through one `answer_many` call
  each (one generator batch, as the served endpoint batches requests that
  arrive together); a question's latency is its wave's time.
Figures per c: requests per second, p50/p95 latency and the questions left
unanswered (a plan cut off at conductor.max_new_tokens: a 500 when served) of both, and
`serving_overhead_p50` = served p50 / in-process p50 - 1; the headline
`serving_overhead_p50` is the largest over the concurrencies (goal: < 0.10).

    .venv/bin/python benchmarks/serve.py --json [--concurrency 1 8 64] [--questions 16]

Progress on stderr; with --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import keep_result, log  # noqa: E402
from conductor_rl.config import load_config  # noqa: E402
from conductor_rl.data import load_dataset  # noqa: E402
from conductor_rl.workers.serving import free_port  # noqa: E402

TOKEN = "benchmark-" + "x" * 24


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def figures(latencies: list[float], wall_s: float) -> dict[str, float]:
    return {
        "rps": len(latencies) / wall_s,
        "p50_s": percentile(latencies, 0.5),
        "p95_s": percentile(latencies, 0.95),
        "wall_s": wall_s,
    }


def served_pass(url: str, questions: list[str], concurrency: int) -> dict[str, float]:
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key=TOKEN, max_retries=0, timeout=600)
    todo = list(questions)

    def one(question: str) -> tuple[float, bool]:
        started = time.perf_counter()
        try:
            client.chat.completions.create(model="conductor", messages=[{"role": "user", "content": question}])
            answered = True
        except openai.InternalServerError:  # a plan cut off at conductor.max_new_tokens: a 500, timed all the same
            answered = False
        return time.perf_counter() - started, answered

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(one, todo))
    return {**figures([t for t, _ in done], time.perf_counter() - started), "unanswered": sum(not ok for _, ok in done)}


def in_process_pass(orchestrator, questions: list[str], concurrency: int) -> dict[str, float]:
    latencies: list[float] = []
    unanswered = 0
    started = time.perf_counter()
    for i in range(0, len(questions), concurrency):
        wave = questions[i : i + concurrency]
        began = time.perf_counter()
        answers = orchestrator.answer_many(wave)
        latencies += [time.perf_counter() - began] * len(wave)
        unanswered += sum(a.final_answer is None for a in answers)
    return {**figures(latencies, time.perf_counter() - started), "unanswered": unanswered}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--questions", type=int, default=16, help="questions per pass (at least one per client)")
    parser.add_argument("--worker-latency", type=float, default=0.5, help="seconds a simulated worker call takes")
    parser.add_argument("--engine-cpus", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import ray

    from conductor_rl.models import resolve_model
    from conductor_rl.orchestrator import Orchestrator, in_process_workers
    from conductor_rl.policy.conductor import EngineConductor
    from conductor_rl.system import System
    from jobs.ray_cluster import start_ray
    from jobs.serve import start_serving
    from jobs.training_system import start_generators

    os.environ["CONDUCTOR_RL_SERVE_TOKENS"] = f"benchmark:{TOKEN}"
    n_workers = len(load_config(None).workers)
    config = load_config(
        None,
        [
            f"serve.port={free_port()}",
            "serve.model_name=conductor",
            "serve.client_requests=null",
            "serve.client_usd=null",
            "serve.max_ongoing_requests=256",
            "conductor.max_depth=0",
            f"cluster.generator={{CPU: {args.engine_cpus}}}",
            "serve.worker_replicas=2",
            *[f"workers.{i}.sim.latency_s={args.worker_latency}" for i in range(n_workers)],
            *[f"workers.{i}.concurrency=256" for i in range(n_workers)],
        ],
    )
    pool = [q.question for q in load_dataset(config.data.questions)]
    most = max(args.questions, max(args.concurrency))
    questions = (pool * (1 + most // len(pool)))[:most]

    start_ray(config)
    log("starting the served Conductor ...")
    served = start_serving(config)
    log("starting the in-process Orchestrator's engine ...")
    engines = start_generators(config, resolve_model(config.conductor.model))
    workers, _ = in_process_workers(config)
    orchestrator = Orchestrator(
        config, EngineConductor(config, engines, System(config).prompts), workers, owns_workers=True
    )
    orchestrator.plan_batch = max(args.concurrency)  # one wave, one generator batch
    results = {}
    try:
        served_pass(served.url, questions[:2], 2)  # warm both paths up (first requests load things)
        in_process_pass(orchestrator, questions[:2], 2)
        for c in args.concurrency:
            asked = questions[: max(args.questions, c)]  # at least one question per client
            log(f"concurrency {c}: {len(asked)} questions served ...")
            s = served_pass(served.url, asked, c)
            log(f"concurrency {c}: {len(asked)} questions in process ...")
            p = in_process_pass(orchestrator, asked, c)
            results[str(c)] = {"served": s, "in_process": p, "serving_overhead_p50": s["p50_s"] / p["p50_s"] - 1}
            log(
                f"concurrency {c}: served {s['rps']:.2f} req/s p50 {s['p50_s']:.2f}s p95 {s['p95_s']:.2f}s; in process "
                f"{p['rps']:.2f} req/s p50 {p['p50_s']:.2f}s p95 {p['p95_s']:.2f}s"
            )
    finally:
        orchestrator.close()
        engines.shutdown()
        served.shutdown()
        ray.shutdown()
    overhead = max(r["serving_overhead_p50"] for r in results.values())
    summary = {
        "benchmark": "serve",
        "questions": args.questions,
        "worker_latency_s": args.worker_latency,
        "engine_cpus": args.engine_cpus,
        "by_concurrency": results,
        "serving_overhead_p50": overhead,
        "goal_serving_overhead_p50": 0.10,
        "goal_met": overhead < 0.10,
        "median_overhead_p50": statistics.median(r["serving_overhead_p50"] for r in results.values()),
    }
    keep_result(summary)
    print(json.dumps(summary) if args.json else json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
