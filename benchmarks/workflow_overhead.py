"""How much the workflow engine adds to its workers' own time.

1. Engine overhead per step: one-step plans and five-step "all" chains run
   through `run_plan` with a zero-latency in-process worker, against calling
   that worker's `complete` directly with the very requests the engine built.
   Goal: under 1 ms per step.
2. Parallel branches against the critical path: workers that take a fixed
   latency (asyncio.sleep); plans with independent steps, a diamond, a chain;
   and many plans at once in one event loop, as in one training iteration.
   Goal: wall time within 5 % of the critical path (ratio <= 1.05).

    python benchmarks/workflow_overhead.py [--json] [--repeats N]

Prints human-readable lines; with --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import keep_result
from conductor_rl.plan import Plan, Step
from conductor_rl.rollout.workflow import StepLimits, Task, run_plan
from conductor_rl.workers.providers.base import Usage, WorkerRequest, WorkerResponse

GOAL_OVERHEAD_MS = 1.0
GOAL_RATIO = 1.05
TASK = Task(id="bench/1", question="What is 6 times 7?", domain="math", reference="42", answer_kind="numeric")
LIMITS = StepLimits()


class InstantWorker:
    """Answers at once, without yielding to the event loop: only the engine's cost is left."""

    simulated = False

    def __init__(self, name: str, record: bool = False) -> None:
        self.name = name
        self.record = record
        self.requests: list[WorkerRequest] = []
        self._response = WorkerResponse(
            text=f"{name}: the answer is 42. " * 8, usage=Usage(input_tokens=50, output_tokens=20), cost_usd=1e-5
        )

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        if self.record:
            self.requests.append(request)
        return self._response

    async def aclose(self) -> None:
        return None


class SleepyWorker:
    """Takes a fixed latency, like a remote model whose time the engine cannot shorten."""

    simulated = False

    def __init__(self, name: str, latency_s: float) -> None:
        self.name = name
        self.latency_s = latency_s

    async def complete(self, request: WorkerRequest) -> WorkerResponse:
        await asyncio.sleep(self.latency_s)
        return WorkerResponse(text=f"{self.name}: 42", latency_s=self.latency_s)

    async def aclose(self) -> None:
        return None


def plan_of(*steps: tuple[int, str, object]) -> Plan:
    return Plan(tuple(Step(model_id=m, subtask=s, access=a) for m, s, a in steps))


SUBTASK = "Solve the problem step by step and state the final answer clearly."
ONE_STEP = plan_of((0, SUBTASK, []))
CHAIN5 = plan_of(*((i % 3, f"Step {i}: {SUBTASK}", "all" if i else []) for i in range(5)))

PARALLEL_PLANS = {
    "two_independent_plus_merge": plan_of((0, "a", []), (1, "b", []), (2, "merge", "all")),
    "diamond": plan_of((0, "root", []), (1, "left", [0]), (2, "right", [0]), (0, "join", "all")),
    "five_independent": plan_of(*((i % 3, f"part {i}", []) for i in range(5))),
    "chain3": plan_of((0, "first", []), (1, "second", "all"), (2, "third", "all")),
}


def critical_path_s(plan: Plan, latency_s: float) -> float:
    finish: list[float] = []
    for i in range(len(plan.steps)):
        finish.append(max((finish[j] for j in plan.visible(i)), default=0.0) + latency_s)
    return max(finish)


# --------------------------------------------------------------------------- 1. overhead


async def measure_overhead(plan: Plan, n_plans: int, repeats: int) -> dict:
    workers = [InstantWorker(f"w{i}") for i in range(3)]
    recorder = [InstantWorker(f"w{i}", record=True) for i in range(3)]
    # The requests the engine builds for this plan, to replay directly.
    await run_plan(plan, TASK, recorder, LIMITS)
    replay = [(recorder[s.model_id], r) for s, r in zip(plan.steps, _in_step_order(plan, recorder))]
    n_steps = n_plans * len(plan.steps)

    for _ in range(min(200, n_plans)):  # warm-up
        await run_plan(plan, TASK, workers, LIMITS)
    engine, direct = [], []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        for k in range(n_plans):
            result = await run_plan(plan, TASK, workers, LIMITS, sample_key=str(k))
        engine.append(time.perf_counter() - start)
        assert result.error is None, result.error

        gc.collect()
        start = time.perf_counter()
        for _ in range(n_plans):
            for worker, request in replay:
                await worker.complete(request)
        direct.append(time.perf_counter() - start)
    engine_ms = min(engine) / n_steps * 1e3
    direct_ms = min(direct) / n_steps * 1e3
    return {
        "plans": n_plans,
        "steps_per_plan": len(plan.steps),
        "engine_ms_per_step": round(engine_ms, 4),
        "direct_ms_per_step": round(direct_ms, 5),
        "overhead_ms_per_step": round(engine_ms - direct_ms, 4),
        "ratio": round(engine_ms / direct_ms, 1) if direct_ms > 0 else None,
    }


def _in_step_order(plan: Plan, recorder: list[InstantWorker]) -> list[WorkerRequest]:
    """The recorded requests, in step order (each worker recorded its own in order)."""
    cursor = [0] * len(recorder)
    ordered = []
    for step in plan.steps:
        worker = recorder[step.model_id]
        ordered.append(worker.requests[cursor[step.model_id]])
        cursor[step.model_id] += 1
    for worker in recorder:
        worker.record = False
        worker.requests.clear()
    return ordered


# --------------------------------------------------------------------------- 2. critical path


async def measure_parallel(plan: Plan, latency_s: float, repeats: int) -> dict:
    workers = [SleepyWorker(f"w{i}", latency_s) for i in range(3)]
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = await run_plan(plan, TASK, workers, LIMITS)
        walls.append(time.perf_counter() - start)
        assert result.error is None, result.error
    critical = critical_path_s(plan, latency_s)
    wall = statistics.median(walls)
    return {
        "steps": len(plan.steps),
        "wall_s": round(wall, 4),
        "max_wall_s": round(max(walls), 4),
        "critical_path_s": round(critical, 4),
        "sequential_s": round(latency_s * len(plan.steps), 4),
        "ratio": round(wall / critical, 4),
    }


async def measure_concurrent(n_plans: int, latency_s: float, repeats: int) -> dict:
    """Many plans in one event loop (one training iteration's rollouts)."""
    workers = [SleepyWorker(f"w{i}", latency_s) for i in range(3)]
    shapes = list(PARALLEL_PLANS.values())
    plans = [shapes[k % len(shapes)] for k in range(n_plans)]
    critical = max(critical_path_s(p, latency_s) for p in plans)
    walls = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        results = await asyncio.gather(
            *(run_plan(p, TASK, workers, LIMITS, sample_key=str(k)) for k, p in enumerate(plans))
        )
        walls.append(time.perf_counter() - start)
        assert all(r.error is None for r in results)
    floors = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        await asyncio.gather(*(_bare_plan(p, latency_s) for p in plans))
        floors.append(time.perf_counter() - start)
    wall, floor = statistics.median(walls), statistics.median(floors)
    return {
        "plans": n_plans,
        "steps": sum(len(p.steps) for p in plans),
        "wall_s": round(wall, 4),
        "max_wall_s": round(max(walls), 4),
        "critical_path_s": round(critical, 4),
        "ratio": round(wall / critical, 4),
        # The same plans scheduled by a bare-asyncio loop (events and sleeps, no engine): what the
        # event loop itself costs at this many concurrent steps on this machine.
        "asyncio_floor_s": round(floor, 4),
        "asyncio_floor_ratio": round(floor / critical, 4),
    }


async def _bare_plan(plan: Plan, latency_s: float) -> None:
    done = [asyncio.Event() for _ in plan.steps]

    async def step(i: int) -> None:
        for j in plan.visible(i):
            await done[j].wait()
        await asyncio.sleep(latency_s)
        done[i].set()

    await asyncio.gather(*(step(i) for i in range(len(plan.steps))))


# --------------------------------------------------------------------------- main


async def main_async(args: argparse.Namespace) -> dict:
    overhead = {
        "one_step": await measure_overhead(ONE_STEP, args.plans_overhead, args.repeats),
        "chain5_all": await measure_overhead(CHAIN5, max(1, args.plans_overhead // 5), args.repeats),
    }
    for name, row in overhead.items():
        print(
            f"overhead {name:<12} engine {row['engine_ms_per_step']:.4f} ms/step, direct "
            f"{row['direct_ms_per_step']:.5f} ms/step -> overhead {row['overhead_ms_per_step']:.4f} ms/step "
            f"(x{row['ratio']})"
        )

    parallel = {}
    for name, plan in PARALLEL_PLANS.items():
        row = parallel[name] = await measure_parallel(plan, args.latency, args.repeats)
        print(
            f"parallel {name:<28} wall {row['wall_s']:.3f}s  critical path {row['critical_path_s']:.3f}s  "
            f"(sequential {row['sequential_s']:.1f}s)  ratio {row['ratio']:.3f}"
        )
    concurrent = await measure_concurrent(args.concurrent_plans, args.latency, args.repeats)
    print(
        f"concurrent {concurrent['plans']} plans / {concurrent['steps']} steps: wall {concurrent['wall_s']:.3f}s  "
        f"critical path {concurrent['critical_path_s']:.3f}s  ratio {concurrent['ratio']:.3f}  "
        f"(bare-asyncio floor {concurrent['asyncio_floor_ratio']:.3f})"
    )

    worst_overhead = max(r["overhead_ms_per_step"] for r in overhead.values())
    single_ratio = max(r["ratio"] for r in parallel.values())
    worst_ratio = max(single_ratio, concurrent["ratio"])
    return {
        "benchmark": "workflow_overhead",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "repeats": args.repeats,
        "latency_s": args.latency,
        "overhead": overhead,
        "parallel": parallel,
        "concurrent": concurrent,
        "overhead_ms_per_step": worst_overhead,
        "ratio": worst_ratio,
        "goal_overhead_ms": GOAL_OVERHEAD_MS,
        "goal_ratio": GOAL_RATIO,
        "overhead_goal_met": worst_overhead < GOAL_OVERHEAD_MS,
        "ratio_goal_met": worst_ratio <= GOAL_RATIO,
        "single_plan_ratio": single_ratio,
        "single_plan_ratio_goal_met": single_ratio <= GOAL_RATIO,
        "concurrent_ratio_goal_met": concurrent["ratio"] <= GOAL_RATIO,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--repeats", type=int, default=3, help="repetitions of each measurement (default 3)")
    parser.add_argument("--latency", type=float, default=0.2, help="worker latency for the critical-path plans (s)")
    parser.add_argument("--plans-overhead", type=int, default=2000, help="one-step plans for the overhead test")
    parser.add_argument("--concurrent-plans", type=int, default=256, help="plans run at once in one event loop")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.latency <= 0 or args.plans_overhead < 1 or args.concurrent_plans < 1:
        parser.error("--repeats, --plans-overhead and --concurrent-plans must be >= 1 and --latency > 0")

    start = time.perf_counter()
    figures = asyncio.run(main_async(args))
    figures["seconds"] = round(time.perf_counter() - start, 2)
    print(
        f"overhead per step {figures['overhead_ms_per_step']:.4f} ms (goal < {GOAL_OVERHEAD_MS} ms: "
        f"{'met' if figures['overhead_goal_met'] else 'NOT met'}); worst wall/critical-path ratio "
        f"{figures['ratio']:.3f} (goal <= {GOAL_RATIO}: {'met' if figures['ratio_goal_met'] else 'NOT met'}); "
        f"{figures['seconds']} s"
    )
    keep_result(figures)
    if args.json:
        print(json.dumps(figures, sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
