"""What serving adds to a request: a Conductor behind `conductor-rl serve` (Ray Serve, HTTP, the
generator engines, the Ray worker pools, the per-client limits), asked by N concurrent clients.

The Conductor is the embedded default's SmolLM2 on `--engines` vLLM engines of `--engine-cpus` CPUs
each; its plans run on the embedded default's simulated workers, each call taking `--worker-latency`
seconds (the call's own time, as the worker measures it, comes back in the reply's `conductor.steps`).

At each client count c (default 1, 8, 64 and 256) c clients send requests one after another
(closed loop) until `--questions` requests (at least c: one per client) are answered:
- a request's serving overhead = its end-to-end latency (the HTTP round trip, as the client times it)
  / its workers' own time - 1, where the workers' own time is the critical path of its plan's steps
  (a step starts when the steps it reads have finished, and takes its worker's reported latency).
  What is not the workers' is overhead: the Conductor writing the plan, tokenizing, HTTP, Ray Serve's
  routing, the Ray calls to the worker pools, admission and the reply;
- p50 and p99 of it over the pass's answered requests (`overhead_p50`, `overhead_p99`), and
  `requests_per_s` = answered requests / the pass's wall time / replicas (per replica);
- besides: the end-to-end p50, the Conductor's own time p50 (`conductor_s`, which the overhead
  includes) and `overhead_beyond_plan_p50` (the end-to-end over the plan's and the workers' time).
A request whose plan is cut off at conductor.max_new_tokens gets a 500 and is counted in `unanswered`.

`--replicas 1 2` measures each replica count in turn (a fresh deployment each); `--nodes 2` runs
them on a two-node local cluster (tests/ray_clusters.py: each node a raylet of its own; Ray Serve
spreads the replicas over the nodes, its HTTP proxy on the head), to show requests/s growing with
replicas. `--batching window` measures the window path (serve.batching=window) instead.

    .venv/bin/python benchmarks/serve.py --json [--clients 1 8 64 256] [--questions 64] \\
        [--replicas 1] [--nodes 1] [--worker-latency 1.0]

Progress on stderr; with --json the last line is one JSON object: `clients`, keyed by client count
("1", "8", ...), each {overhead_p50, overhead_p99, requests_per_s, ...} at the first replica count,
`by_replicas` the same per replica count, the settings and the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.measure import critical_path_s, log, machine, report  # noqa: E402
from conductor_rl.config import load_config  # noqa: E402
from conductor_rl.data import load_dataset  # noqa: E402
from conductor_rl.workers.serving import free_port  # noqa: E402

TOKEN = "benchmark-" + "x" * 24
GOAL_OVERHEAD_P50 = 0.05  # at 8 and 64 clients (issue 31)


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank q-quantile (p99 of few values is their largest)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def workers_time_s(conductor: dict[str, Any]) -> float:
    """The critical path of a reply's plan: its steps' own latencies, each after the steps it reads."""
    steps = sorted(conductor["steps"], key=lambda s: s["index"])
    return critical_path_s([SimpleNamespace(access=s["access"], latency_s=s["latency_s"]) for s in steps])


async def client_pass(url: str, questions: list[str], clients: int) -> dict[str, Any]:
    """`clients` concurrent clients share `questions`, each sending its next when its last is answered."""
    import httpx

    todo = list(reversed(questions))
    done: list[dict[str, float]] = []
    unanswered = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as http:

        async def one_client() -> None:
            nonlocal unanswered
            while todo:
                question = todo.pop()
                body = {"model": "conductor", "messages": [{"role": "user", "content": question}]}
                started = time.perf_counter()
                reply = await http.post("/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
                e2e = time.perf_counter() - started
                if reply.status_code != 200:  # a plan cut off at conductor.max_new_tokens (500), a worker's 502
                    unanswered += 1
                    continue
                conductor = reply.json()["conductor"]
                workers = workers_time_s(conductor)
                if workers <= 0:
                    unanswered += 1
                    continue
                done.append({"e2e_s": e2e, "workers_s": workers, "conductor_s": conductor["conductor_s"]})

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        wall_s = time.perf_counter() - started
    return {"answered": done, "unanswered": unanswered, "wall_s": wall_s}


def figures(run: dict[str, Any], replicas: int) -> dict[str, Any]:
    done = run["answered"]
    if not done:
        return {"answered": 0, "unanswered": run["unanswered"], "wall_s": round(run["wall_s"], 2)}
    overhead = [d["e2e_s"] / d["workers_s"] - 1 for d in done]
    beyond_plan = [d["e2e_s"] / (d["workers_s"] + d["conductor_s"]) - 1 for d in done]
    return {
        "overhead_p50": round(percentile(overhead, 0.5), 4),
        "overhead_p99": round(percentile(overhead, 0.99), 4),
        "requests_per_s": round(len(done) / run["wall_s"] / replicas, 3),
        "requests_per_s_total": round(len(done) / run["wall_s"], 3),
        "latency_p50_s": round(percentile([d["e2e_s"] for d in done], 0.5), 3),
        "latency_p99_s": round(percentile([d["e2e_s"] for d in done], 0.99), 3),
        "workers_s_p50": round(percentile([d["workers_s"] for d in done], 0.5), 3),
        "conductor_s_p50": round(percentile([d["conductor_s"] for d in done], 0.5), 3),
        "overhead_beyond_plan_p50": round(percentile(beyond_plan, 0.5), 4),
        "answered": len(done),
        "unanswered": run["unanswered"],
        "wall_s": round(run["wall_s"], 2),
    }


def serve_config(args: argparse.Namespace, replicas: int) -> Any:
    n_workers = len(load_config(None).workers)
    return load_config(
        None,
        [
            f"serve.port={free_port()}",
            "serve.model_name=conductor",
            "serve.client_requests=null",
            "serve.client_usd=null",
            f"serve.max_ongoing_requests={max(256, max(args.clients))}",
            f"serve.replicas={replicas}",
            f"serve.batching={args.batching}",
            f"serve.worker_replicas={args.worker_replicas}",
            f"serve.output_dir={args.output_dir}",
            "conductor.max_depth=0",
            f"generator.engines={args.engines}",
            f"cluster.generator={{CPU: {args.engine_cpus}}}",
            *[f"workers.{i}.sim.latency_s={args.worker_latency}" for i in range(n_workers)],
            *[f"workers.{i}.concurrency=1024" for i in range(n_workers)],
        ],
    )


def measure_replicas(args: argparse.Namespace, replicas: int, questions: list[str]) -> dict[str, Any]:
    """Start the served Conductor with `replicas` replicas, run every client count, stop it."""
    from ray import serve

    from jobs.serve import APP_NAME, Served, build_application, load_tokens, served_model_name

    config = serve_config(args, replicas)
    log(f"{replicas} replica(s): starting the served Conductor ({args.batching} batching) ...")
    # jobs.serve.start_serving's steps, but one HTTP proxy, on the head: Ray Serve's default puts one on
    # every node, and a local multi-node cluster's nodes would all bind the same port.
    application, generators, workers = build_application(config, load_tokens(config))
    s = config.serve
    served = Served(f"http://{s.host}:{s.port}", served_model_name(config), generators, workers)
    try:
        serve.start(http_options={"host": s.host, "port": s.port}, proxy_location="HeadOnly")
        serve.run(application, name=APP_NAME, route_prefix="/")
    except BaseException:
        served.shutdown()
        raise
    by_clients: dict[str, Any] = {}
    try:
        asyncio.run(client_pass(served.url, questions[:2], 2))  # warm up: first requests load things
        for c in args.clients:
            asked = questions[: max(args.questions, c)]
            log(f"{replicas} replica(s), {c} client(s): {len(asked)} requests ...")
            by_clients[str(c)] = figures(asyncio.run(client_pass(served.url, asked, c)), replicas)
            log(f"{replicas} replica(s), {c} client(s): {by_clients[str(c)]}")
    finally:
        served.shutdown()
        serve.shutdown()
    return by_clients


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64, 256])
    parser.add_argument("--questions", type=int, default=64, help="requests per pass (at least one per client)")
    parser.add_argument("--worker-latency", type=float, default=1.0, help="seconds a simulated worker call takes")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1], help="Ray Serve replica counts to measure")
    parser.add_argument("--nodes", type=int, default=1, choices=(1, 2), help="2: a two-node local cluster")
    parser.add_argument("--node-cpus", type=float, default=4, help="logical CPUs of each node with --nodes 2")
    parser.add_argument("--batching", choices=("continuous", "window"), default="continuous")
    parser.add_argument("--engines", type=int, default=1)
    parser.add_argument("--engine-cpus", type=float, default=1.0)
    parser.add_argument("--worker-replicas", type=int, default=2)
    parser.add_argument("--output-dir", default="/tmp/conductor-rl-bench-serve", help="the server's spend journal")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import ray

    from jobs.ray_cluster import start_ray

    os.environ["CONDUCTOR_RL_SERVE_TOKENS"] = f"benchmark:{TOKEN}"
    pool = [q.question for q in load_dataset(load_config(None).data.questions)]
    most = max(args.questions, max(args.clients))
    questions = (pool * (1 + most // len(pool)))[:most]

    local = None
    if args.nodes == 2:
        from tests.ray_clusters import CPU_NODE, LocalCluster

        # The head runs the driver, Ray Serve's controller and proxy; the two nodes run the rest.
        local = LocalCluster(head_cpus=0)
        for _ in range(2):
            local.add_node(args.node_cpus, {CPU_NODE: 1})
        local.connect()
    else:
        start_ray(serve_config(args, 1))
    by_replicas: dict[str, Any] = {}
    try:
        for replicas in args.replicas:
            by_replicas[str(replicas)] = measure_replicas(args, replicas, questions)
    finally:
        if local is not None:
            local.shutdown()
        else:
            ray.shutdown()
    first = by_replicas[str(args.replicas[0])]
    goal = [first[c]["overhead_p50"] for c in ("8", "64") if c in first and "overhead_p50" in first[c]]
    cpu = machine()
    summary = {
        "benchmark": "serve",
        "clients": first,
        "by_replicas": by_replicas,
        "replicas": args.replicas,
        "nodes": args.nodes,
        "batching": args.batching,
        "questions": args.questions,
        "worker_latency_s": args.worker_latency,
        "engines": args.engines,
        "engine_cpus": args.engine_cpus,
        "cpu_model": cpu["cpu_model"],
        "avx512_bf16": cpu["avx512_bf16"],
        "goal_overhead_p50": GOAL_OVERHEAD_P50,
        "goal_met": bool(goal) and max(goal) < GOAL_OVERHEAD_P50,
    }
    report(summary, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
