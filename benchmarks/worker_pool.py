"""The worker pool against a rate-limited provider, and its overhead.

A local server (conductor_rl/testing/fake_llm_server.py, in its own Ray actor
process) answers in a fixed latency and enforces a limit. Time is scaled so a
run takes minutes, not hours: the limit is LIMIT requests per WINDOW_S-second
sliding window (60 per 10 s = 360 RPM), and our limiter uses the same window.

1. Share of the limit reached with 1, 2 and 4 WorkerActor replicas sharing the
   cluster-wide RateLimiterActor (goal >= 0.95), and the 429s the server had to
   return for our overrun (goal: about 0). The share is sustained throughput:
   the rate after the first window's worth of calls, over the limit's rate (a
   sliding window lets a whole window's calls through at once at the start).
2. The baseline most projects use: each replica limits itself in-process to the
   full limit, SDK retries on (the openai SDK's defaults): its share and its 429s.
3. No limit: calls/s through the pool against the same calls made directly with
   the provider in this process, at the same concurrency (goal: overhead < 5 %).
4. The spend journal: calls/s through the pool with the ledger writing its journal
   (each call's open written before the call is sent, its outcome fsync'd before
   the answer is used) over calls/s without one, at the same concurrency (goal:
   >= 0.97 with calls of JOURNAL_LATENCY_S, a hosted LLM's answer being seconds;
   also measured at LATENCY_S, where the round trip that writes a call's open
   weighs five times as much).
5. Across nodes: the share of the limit and the 429s with 1, 4, 16 and 64
   replicas spread evenly over the worker nodes of a Ray cluster of several
   nodes on this machine (tests/ray_clusters.py: a raylet per node; the head
   holds the driver, the limiter, the ledger and the server). Each replica asks
   for 1/k of a node's `conductor_cpu_node`, k replicas per node, so the spread
   is forced, and the figures give the replicas each node got. `--nodes-window-s 60`
   runs it with a provider's real one-minute window at the same 360 RPM (three
   minutes a replica count, where jitter weighs a sixth of what it does at 10 s);
   `--no-pace` without the limiter's pacing.

    python benchmarks/worker_pool.py [--json] [--windows N] [--part all|local|journal|nodes] [--nodes N]
        [--nodes-window-s S] [--no-pace]

With --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import ray

from benchmarks.measure import keep_result
from conductor_rl.config import WorkerConfig
from conductor_rl.workers.limits import AsyncRateLimiter, WindowLimits
from conductor_rl.workers.providers import WorkerRequest, build_provider

WINDOW_S = 10.0
LIMIT = 60
LATENCY_S = 0.2
GOAL_SHARE = 0.95
GOAL_OVERHEAD = 0.05
GOAL_JOURNAL_SHARE = 0.97
JOURNAL_LATENCY_S = 1.0
KEY_ENV = "CONDUCTOR_BENCH_KEY"


def request(i: int) -> WorkerRequest:
    return WorkerRequest([{"role": "user", "content": f"question {i}"}], max_tokens=16, temperature=0.0)


def config(server, rpm: int | None = None) -> WorkerConfig:
    return WorkerConfig(
        name=f"bench-{uuid.uuid4().hex[:6]}",
        provider="openai",
        model="fake",
        api_key_env=KEY_ENV,
        base_url=server.openai_url,
        rpm=rpm,
        concurrency=256,
    )


@ray.remote(num_cpus=0.25)
class NaiveReplica:
    """The common baseline: a limiter in this process only, and the SDK's own retries."""

    def __init__(self, base_url: str, rpm: int, window_s: float) -> None:
        import openai

        self.client = openai.AsyncOpenAI(api_key="bench", base_url=base_url)  # SDK default retries
        self.limiter = AsyncRateLimiter(WindowLimits(rpm, None, window_s, pace=False))

    async def complete(self, i: int) -> bool:
        grant, _ = await self.limiter.acquire()
        try:
            await self.client.chat.completions.create(model="fake", messages=request(i).messages, max_tokens=16)
            return True
        except Exception:
            return False
        finally:
            self.limiter.settle(grant)


async def bounded(complete, n: int, concurrency: int) -> tuple[list, float]:
    """`n` calls of `complete`, at most `concurrency` in flight: their results and the seconds they took."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i):
        async with gate:
            return await complete(request(i))

    started = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    return results, time.perf_counter() - started


async def stamped(calls) -> tuple[list[float], float]:
    """Seconds from the start at which each call succeeded, and the total time."""
    started = time.perf_counter()
    done: list[float] = []

    async def one(call):
        result = await call
        if result is not False:
            done.append(time.perf_counter() - started)

    await asyncio.gather(*(one(c) for c in calls), return_exceptions=True)
    return done, time.perf_counter() - started


class Rate(NamedTuple):
    """A provider's limit: `per_window` requests in any `window_s` seconds."""

    per_window: int = LIMIT
    window_s: float = WINDOW_S


TIME_SCALED = Rate()  # the default: 60 calls per 10 s


def steady_share(done: list[float], took: float, rate: Rate = TIME_SCALED) -> float:
    """Sustained throughput over what the limit allows: the rate between the
    completion of the first window's worth of calls and the last one. The first
    window is left out: a sliding window lets a whole window's calls through at
    once at the start, which says nothing about sustained throughput."""
    done, first = sorted(done), rate.per_window
    if len(done) <= first:
        return 0.0
    return (len(done) - first) / (done[-1] - done[first - 1]) / (first / rate.window_s)


def limited_pool(server, replicas: int, rate: Rate = TIME_SCALED, pace: bool = True, **placement):
    """`replicas` sharing one cluster-wide limiter at the server's limit (the server reset to it)."""
    from actors.worker_pool import WorkerPool, get_ledger

    server.reset(latency_s=LATENCY_S, rpm=rate.per_window, window_s=rate.window_s)
    ledger, scope = get_ledger(name=uuid.uuid4().hex), uuid.uuid4().hex
    return WorkerPool(
        config(server, rpm=rate.per_window),
        replicas=replicas,
        ledger=ledger,
        window_s=rate.window_s,
        limiter_scope=scope,
        pace=pace,
        **placement,
    )


def calls_through(server, pool, n: int, rate: Rate = TIME_SCALED) -> dict:
    """`n` calls through `pool`, all at once, then the pool closed: their figures."""
    done, took = asyncio.run(stamped([pool.complete(request(i)) for i in range(n)]))
    asyncio.run(pool.aclose())
    return summarize(server, done, took, rate)


def naive_run(server, replicas: int, n: int) -> dict:
    server.reset(latency_s=LATENCY_S, rpm=LIMIT, window_s=WINDOW_S)
    actors = [NaiveReplica.remote(server.openai_url, LIMIT, WINDOW_S) for _ in range(replicas)]
    ray.get([a.__ray_ready__.remote() for a in actors])

    async def go():
        return await stamped([actors[i % replicas].complete.remote(i) for i in range(n)])

    done, took = asyncio.run(go())
    for a in actors:
        ray.kill(a)
    return summarize(server, done, took)


def summarize(server, done: list[float], took: float, rate: Rate = TIME_SCALED) -> dict:
    stats = server.stats
    return {
        "calls_ok": len(done),
        "seconds": round(took, 2),
        "share_of_limit": round(steady_share(done, took, rate), 3),
        "server_429s": stats.limit_429s,
        "server_429s_after_first_window": sum(1 for t in stats.limit_429_times if t > rate.window_s),
        "server_requests": stats.requests,
    }


def overhead_run(server, n: int, concurrency: int, rounds: int = 3) -> dict:
    """Best of `rounds` interleaved runs each way: on a 2-core machine single runs
    of either differ by several percent from one to the next."""
    from actors.worker_pool import WorkerPool, get_ledger

    server.reset(latency_s=LATENCY_S, rpm=None)
    cfg = config(server)
    provider = build_provider(cfg)
    pool = WorkerPool(cfg, replicas=1, ledger=get_ledger(name=uuid.uuid4().hex))

    async def interleaved():
        await bounded(provider.complete, n, concurrency)  # warm both: SDK client, connections, the replica
        await bounded(pool.complete, n, concurrency)
        direct_s, pool_s = [], []
        for _ in range(rounds):
            direct_s.append((await bounded(provider.complete, n, concurrency))[1])
            results, took = await bounded(pool.complete, n, concurrency)
            assert not [r for r in results if isinstance(r, Exception)], results[:3]
            pool_s.append(took)
        await provider.aclose()
        await pool.aclose()
        return direct_s, pool_s

    direct_s, pool_s = asyncio.run(interleaved())
    best_direct, best_pool = min(direct_s), min(pool_s)
    return {
        "calls": n,
        "concurrency": concurrency,
        "rounds": rounds,
        "direct_calls_per_s": round(n / best_direct, 1),
        "pool_calls_per_s": round(n / best_pool, 1),
        "overhead": round(1 - best_direct / best_pool, 4),
    }


def journal_run(server, n: int, concurrency: int, latency_s: float, rounds: int = 5) -> dict:
    """Part 4: the pool with a journaling ledger against the pool without, best of `rounds` interleaved;
    without a budget (calls are opened in the ledger without waiting, unless it journals) and with one
    (each call waits for its admission anyway)."""
    import tempfile

    from actors.worker_pool import WorkerPool, get_ledger
    from conductor_rl.workers.spend_journal import JOURNAL_FILE

    server.reset(latency_s=latency_s, rpm=None)
    cfg = config(server)
    folder = Path(tempfile.mkdtemp(prefix="journal-bench-"))

    def pool(budget: float | None, journal: bool) -> WorkerPool:
        name = uuid.uuid4().hex
        path = str(folder / name / JOURNAL_FILE) if journal else None
        return WorkerPool(cfg, replicas=1, ledger=get_ledger(budget, name=name, journal=path, job="bench"))

    pools = {(budget, journal): pool(budget, journal) for budget in (None, 1e6) for journal in (False, True)}

    async def seconds(pool) -> float:
        results, took = await bounded(pool.complete, n, concurrency)
        assert not [r for r in results if isinstance(r, Exception)], results[:3]
        return took

    async def interleaved() -> dict:
        times: dict = {key: [] for key in pools}
        for key in pools:
            await seconds(pools[key])  # warm: SDK client, connections, the replica
        for _ in range(rounds):
            for key in pools:
                times[key].append(await seconds(pools[key]))
        for p in pools.values():
            await p.aclose()
        return {key: min(t) for key, t in times.items()}

    best = asyncio.run(interleaved())
    rate = {key: n / took for key, took in best.items()}
    journal_bytes = sum(f.stat().st_size for f in folder.glob(f"*/{JOURNAL_FILE}"))
    return {
        "calls": n,
        "concurrency": concurrency,
        "latency_s": latency_s,
        "rounds": rounds,
        "calls_per_s": {"plain": round(rate[(None, False)], 1), "journaled": round(rate[(None, True)], 1)},
        "budgeted_calls_per_s": {"plain": round(rate[(1e6, False)], 1), "journaled": round(rate[(1e6, True)], 1)},
        "share": round(rate[(None, True)] / rate[(None, False)], 4),
        "share_with_budget": round(rate[(1e6, True)] / rate[(1e6, False)], 4),
        "journal_bytes_per_call": round(journal_bytes / (2 * n * (rounds + 1))),
    }


def local_parts(n: int, journal_only: bool = False) -> dict:
    """Parts 1-3, on a cluster of one node in this process."""
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    from actors.fake_llm_server import RemoteFakeLLMServer

    server = RemoteFakeLLMServer()
    figures: dict = {"journal": {}, "journal_stress": {}}
    for concurrency in (16, 64):
        # Runs of several seconds each: shorter ones differ by 10 % from one to the next on 2 cores.
        for key, latency, n_calls, rounds in (
            ("journal", JOURNAL_LATENCY_S, 10 * concurrency, 3),
            ("journal_stress", LATENCY_S, 20 * concurrency, 5),
        ):
            run = journal_run(server, n_calls, concurrency, latency, rounds)
            figures[key][str(concurrency)] = run
            print(f"spend journal, {concurrency} in flight, {latency:g} s calls: {run}", file=sys.stderr)
    figures["min_journal_share"] = min(r["share"] for r in figures["journal"].values())
    figures["min_journal_share_stress"] = min(r["share"] for r in figures["journal_stress"].values())
    if journal_only:
        server.stop()
        ray.shutdown()
        return figures
    figures["pool"] = {}
    for replicas in (1, 2, 4):
        figures["pool"][str(replicas)] = calls_through(server, limited_pool(server, replicas), n)
        print(f"pool, {replicas} replica(s): {figures['pool'][str(replicas)]}", file=sys.stderr)
    figures["naive_4_replicas"] = naive_run(server, 4, n)
    print(f"baseline (per-process limiter, SDK retries), 4 replicas: {figures['naive_4_replicas']}", file=sys.stderr)
    figures["no_limit"] = overhead_run(server, n=320, concurrency=16)
    print(f"no limit: {figures['no_limit']}", file=sys.stderr)
    figures["min_share"] = min(r["share_of_limit"] for r in figures["pool"].values())
    figures["max_429s"] = max(r["server_429s"] for r in figures["pool"].values())
    server.stop()
    ray.shutdown()
    return figures


MULTINODE_REPLICAS = (1, 4, 16, 64)


def multinode_run(nodes: int, windows: int, rate: Rate, pace: bool = True) -> dict:
    """Part 5: the limited pool at each of MULTINODE_REPLICAS replicas, spread over `nodes` worker nodes,
    `windows` windows' worth of calls each."""
    import math
    from collections import Counter

    from actors.fake_llm_server import RemoteFakeLLMServer
    from tests.ray_clusters import CPU_NODE, LocalCluster, on_node

    local = LocalCluster(head_cpus=0)
    runs: dict = {}
    try:
        for _ in range(nodes):
            local.add_node(1, {CPU_NODE: 1})
        local.connect()
        head = local.head.node_id
        server = RemoteFakeLLMServer(actor_options=on_node(head))
        for replicas in MULTINODE_REPLICAS:
            # The ledger and the limiter stay on the driver's node, the head (actors/worker_pool.py).
            share = {CPU_NODE: 1 / math.ceil(replicas / nodes)}
            pool = limited_pool(server, replicas, rate, pace, num_cpus=0, resources=share)
            started = time.perf_counter()
            where = ray.get(
                [r.__ray_call__.remote(lambda _self: ray.get_runtime_context().get_node_id()) for r in pool.replicas],
                timeout=600,
            )  # every replica up before the calls
            up_s = time.perf_counter() - started
            spread = Counter(where)
            runs[str(replicas)] = {
                **calls_through(server, pool, windows * rate.per_window, rate),
                "replicas_per_node": sorted(spread.values()),
                "nodes_used": len(spread),
                "replicas_up_s": round(up_s, 1),
                "replicas_on_head": spread.get(head, 0),
            }
            print(f"across {nodes} nodes, {replicas} replica(s): {runs[str(replicas)]}", file=sys.stderr)
        server.stop()
    finally:
        left = local.shutdown()  # processes Cluster.shutdown left behind, killed since (0 expected)
    return {
        "window_s": rate.window_s,
        "limit_per_window": rate.per_window,
        "calls_per_run": windows * rate.per_window,
        "worker_nodes": nodes,
        "paced": pace,
        "pool": runs,
        "leftover_processes": len(left),
        "min_share": min(r["share_of_limit"] for r in runs.values()),
        "max_429s": max(r["server_429s"] for r in runs.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--windows", type=int, default=3, help="windows of calls per measurement (default 3)")
    parser.add_argument(
        "--part",
        choices=("all", "local", "journal", "nodes"),
        default="all",
        help="local: parts 1-4 (one node); journal: part 4 alone; nodes: part 5 (several); default all",
    )
    parser.add_argument("--nodes", type=int, default=4, help="worker nodes of part 5 (default 4)")
    parser.add_argument("--no-pace", action="store_true", help="part 5: grants not paced window/rpm apart")
    parser.add_argument(
        "--nodes-window-s",
        type=float,
        default=WINDOW_S,
        help="part 5's limit window, at the same 360 RPM (default: the time-scaled 10 s; 60: a provider's real one)",
    )
    args = parser.parse_args(argv)
    os.environ[KEY_ENV] = "bench-key-not-secret"
    n = args.windows * LIMIT
    figures: dict = {
        "window_s": WINDOW_S,
        "limit_per_window": LIMIT,
        "limit_rpm": LIMIT * 60 / WINDOW_S,
        "latency_s": LATENCY_S,
        "calls_per_run": n,
        "goal_share": GOAL_SHARE,
    }
    if args.part in ("all", "local", "journal"):
        figures.update(local_parts(n, journal_only=args.part == "journal"))
    if args.part in ("all", "nodes"):
        rate = Rate(round(LIMIT * args.nodes_window_s / WINDOW_S), args.nodes_window_s)  # 360 RPM at any window
        figures["across_nodes"] = multinode_run(args.nodes, args.windows, rate, pace=not args.no_pace)
    goals = []
    if "journal" in figures:
        goals.append(figures["min_journal_share"] >= GOAL_JOURNAL_SHARE)
    if "pool" in figures:
        goals.append(figures["min_share"] >= GOAL_SHARE and figures["no_limit"]["overhead"] < GOAL_OVERHEAD)
    if "across_nodes" in figures:
        goals.append(figures["across_nodes"]["min_share"] >= GOAL_SHARE)
    figures["goals_met"] = all(goals)
    keep_result(figures)
    print(json.dumps(figures) if args.json else json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
