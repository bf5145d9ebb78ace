"""One training iteration at the paper's shape, phase by phase, and the rollout
phase against its critical-path bound.

The real loop (`jobs.iteration.train_iteration` on what `jobs.training_system`
builds: vLLM generator, DeepSpeed learner, Ray worker pool, grader pool) runs
B questions x G rollouts (paper: 4 x 64 = 256) with the random `tiny-qwen2`
Conductor (its quality is irrelevant to timing; `constrain_format` makes every
plan parse), at most `--max-steps` steps per plan (paper: 5). The workers are
simulated (provider `sim`) with latencies like real API models:

    sim-fast      2.0 s   (a small model, e.g. a flash tier)
    sim-medium    3.0 s   (a frontier chat model)
    sim-slow      8.0 s   (a reasoning model: the slower worker)

each x `--latency-scale` (default 1.0) with +/- `--jitter` (default 30 %,
uniform; the sim seeds each draw by rollout, so a run is reproducible). Each
WorkerActor takes `--worker-concurrency` calls at once (default 1024: above the
report's `calls_in_flight_peak_per_worker` at this shape; the project default of
64 queues them in the actor, see the report's `call_overhead_s`).

One adjustment, reported in the JSON: plan length. The random tiny-qwen2
writes plans much shorter than the paper's (about 3 steps on average). `steer_plan_length` saves a
copy whose "," logit after each worker id is raised so plans average
`--target-steps` (default 3; 0: off).

The key figure: `execute_s`, the rollout phase's wall time, against its
critical-path bound. A rollout's critical path is the longest dependency chain
of its steps' own latencies (the sim's time measured inside the worker actor;
a step that reads earlier steps waits for them: `access` in its trace); the
phase cannot end before its slowest rollout's critical path, so the bound is the
max over rollouts (summed over rounds when infrastructure errors forced re-runs).
Goal: `ratio = execute_s / critical_path_s <= 1.10`.

The driver's view of every worker call is metered (a pass-through around each
WorkerPool): calls in flight at peak (all, and per worker), and what a call costs
beyond the worker's own latency (Ray round trip, actor queueing); and how late
steps start after the steps they read have finished (the driver's event loop).

By default the first iteration is the measured one (`--warmup N` runs and
reports N before it); the report gives each phase's time (`phases_s`) and the
system's start (`system_start_s`).

Then synchronous against asynchronous training (train.max_staleness, jobs/pipeline.py)
on the same system: `--iterations N` synchronous iterations (the measured one is
the first), then N with max_staleness=1. Figures: `sync_iteration_s` (mean
iteration), `async_iteration_s` (the median time between learner steps after
the first: the first fills the pipeline, and the last drain it, their plans
sampled while earlier ones ran), `async_speedup` = sync / async (goal >= 1.3),
`async_vs_bound` = async / the ideal bound max(phase) over the synchronous
pass's mean phase times (goal <= 1.15), and, filling and draining included,
`async_pass_speedup`: the N synchronous iterations' time over the N
asynchronous ones'.
The pipeline runs generation, execution with grading, and learning with the
sync on three threads, so max(phase) is its bound once it is full.

    python benchmarks/iteration.py [--json] [--latency-scale S] [--questions B] [--rollouts G]
                                   [--max-steps K] [--target-steps T] [--worker-concurrency C] [--warmup N]

Progress on stderr; a summary line on stdout; with --json the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# critical_path_s, peak_overlap and step_critical_paths are read from here by tests/test_benchmarks_iteration.py.
from benchmarks.measure import (  # noqa: F401
    MeteredPool,
    RoundRecorder,
    critical_path_s,
    keep_result,
    peak_overlap,
    rollout_phase_figures,
    step_critical_paths,
    sync_async_figures,
)
from benchmarks.plan_length import steer_plan_length

if TYPE_CHECKING:
    from conductor_rl.config import Config
    from jobs.iteration import TrainingRun

GOAL_RATIO = 1.10
GOAL_ASYNC_SPEEDUP = 1.3
GOAL_ASYNC_VS_BOUND = 1.15

# (name, mean latency in s at --latency-scale 1, accuracy per domain, gain from context, output tokens)
WORKERS = [
    ("sim-fast", 2.0, {"math": 0.45, "mmlu": 0.45, "code": 0.45}, 0.2, 150),
    ("sim-medium", 3.0, {"math": 0.2, "mmlu": 0.9, "code": 0.4}, 0.05, 200),
    ("sim-slow", 8.0, {"math": 0.9, "mmlu": 0.2, "code": 0.5}, 0.05, 300),
]


# --------------------------------------------------------------------------- set-up


def build_config(args: argparse.Namespace) -> Config:
    from conductor_rl.config import load_config

    workers = [
        {
            "name": name,
            "provider": "sim",
            "concurrency": args.worker_concurrency,
            "price": {"input": 1.0, "output": 5.0},
            "sim": {
                "accuracy": acc,
                "gain_with_context": gain,
                "latency_s": latency * args.latency_scale,
                "latency_jitter": args.jitter,
                "output_tokens": tokens,
            },
        }
        for name, latency, acc, gain, tokens in WORKERS
    ]
    overrides = [
        f"conductor.model={args.model}",
        "conductor.constrain_format=true",
        f"conductor.max_steps={args.max_steps}",
        f"conductor.max_new_tokens={args.max_new_tokens}",
        f"train.questions_per_iteration={args.questions}",
        f"train.rollouts_per_question={args.rollouts}",
        f"train.worker_replicas={args.replicas}",
        "train.progress=false",
        "train.loggers=[]",
        f"generator.backend={args.backend}",
        "cluster.generator={CPU: 1}",
        "cluster.learner={CPU: 1}",
        f"workers={json.dumps(workers)}",
        *args.overrides,
    ]
    return load_config(None, overrides)


def build_run(
    config: Config, iterations: int, target_steps: float = 0.0, workdir: Path | None = None
) -> tuple[ModuleType, TrainingRun, dict]:
    """The run `jobs.train.train` builds (the system's two halves), for `iterations` iterations;
    also returns what was adjusted: the plan-length steer (None: none asked)."""
    from conductor_rl.data import load_dataset
    from conductor_rl.data.stream import QuestionStream
    from conductor_rl.run.state import RunState
    from conductor_rl.system import System
    from jobs.iteration import TrainingRun
    from jobs.ray_cluster import start_ray
    from jobs.run_control import StopSignal
    from jobs.training_system import build_system

    t = config.train
    questions = load_dataset(config.data.questions, limit=config.data.limit)
    stream = QuestionStream(questions, seed=t.seed, balance_domains=t.balance_domains)
    drawn = stream.peek(t.questions_per_iteration * iterations)
    steer = None
    if target_steps > 0:
        assert workdir is not None
        started = time.perf_counter()
        steer = steer_plan_length(config, drawn, target_steps, workdir / "conductor")
        steer["seconds"] = round(time.perf_counter() - started, 2)
        config.conductor.model = str(workdir / "conductor")
    system = System(config)
    _ = system.prompts  # the tokenizer loads before the clock starts
    started = time.perf_counter()
    ray = start_ray(config)
    actors = build_system(config, config.conductor.model, 0, total_steps=config.optimizer_steps())
    system_s = time.perf_counter() - started
    run = TrainingRun(system, actors, stream, RunState(), StopSignal())
    return ray, run, {"plan_length_steer": steer, "system_start_s": round(system_s, 2)}


# --------------------------------------------------------------------------- one iteration


def measure_iteration(run: TrainingRun, iteration: int, ray: ModuleType) -> dict:
    from jobs.iteration import train_iteration

    calls: list[tuple[float, float, float]] = []
    in_flight: dict[str, list[int]] = {}
    pools = run.actors.workers
    recorder = RoundRecorder()
    run.actors.workers = [MeteredPool(p, calls, in_flight) for p in pools]  # type: ignore[misc]
    run.observer = recorder
    try:
        ray.get(run.actors.ledger.start_iteration.remote(iteration))
        started = time.perf_counter()
        record, rollouts = train_iteration(run, iteration)
        wall = time.perf_counter() - started
    finally:
        run.observer = None
        run.actors.workers = pools
    peaks = {k: v[1] for k, v in in_flight.items()}
    figures = rollout_phase_figures(record, rollouts, recorder.rounds, calls, peaks, wall)
    return {**figures, "record": record, "rollout_objects": rollouts}  # the last two are not figures


# --------------------------------------------------------------------------- synchronous vs asynchronous


def compare_async(run: TrainingRun, first: int, iterations: int, measured: dict) -> dict:
    """`iterations` synchronous iterations (`measured`, iteration `first`, is the first of them),
    then as many with train.max_staleness=1, on the same system; their paces and the bounds."""
    from conductor_rl.system import System
    from jobs.iteration import learned_iterations, train_iteration

    sync_records = [measured["record"]]
    for i in range(first + 1, first + iterations):
        record, _ = train_iteration(run, i)
        sync_records.append(record)
        print(f"synchronous iteration {i}: {record['time_iteration_s']:.1f}s", file=sys.stderr, flush=True)
    synchronous = run.system
    train = synchronous.config.train.model_copy(update={"max_staleness": 1})
    run.system = System(synchronous.config.model_copy(update={"train": train}), synchronous.prompts.tokenizer)
    async_records = []
    try:
        start = first + iterations
        for record, _ in learned_iterations(run, start, start + iterations):
            async_records.append(record)
            print(
                f"asynchronous iteration {record['iteration']}: {record['time_iteration_s']:.1f}s between learner "
                f"steps (learner waited {record['time_wait_learner_s']:.1f}s, overlap {record['overlap']:.2f})",
                file=sys.stderr,
                flush=True,
            )
    finally:
        run.system = synchronous
    return sync_async_figures(sync_records, async_records, GOAL_ASYNC_SPEEDUP, GOAL_ASYNC_VS_BOUND)


# --------------------------------------------------------------------------- main


def report_line(label: str, row: dict) -> str:
    phases = "  ".join(f"{k} {v:.2f}s" for k, v in row["phases_s"].items())
    return (
        f"{label}: {row['rollouts']} rollouts, {row['steps']} steps ({row['steps_per_plan']} per plan), "
        f"{row['worker_calls']} calls, peak {row['calls_in_flight_peak']} in flight\n"
        f"  phases: {phases}\n"
        f"  execute {row['execute_s']:.2f}s vs critical path {row['critical_path_s']:.2f}s: ratio {row['ratio']}\n"
        f"  step start lag {row['step_start_lag_s']}\n  call overhead {row['call_overhead_s']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument(
        "--latency-scale",
        type=float,
        default=1.0,
        help="multiplies every worker's mean latency (2 s / 3 s / 8 s at 1.0)",
    )
    parser.add_argument("--jitter", type=float, default=0.3, help="relative +/- spread of each call's latency")
    parser.add_argument("--questions", type=int, default=4, help="B: questions per iteration (paper: 4)")
    parser.add_argument("--rollouts", type=int, default=64, help="G: rollouts per question (paper: 64)")
    parser.add_argument("--max-steps", type=int, default=5, help="most steps per plan (paper: 5)")
    parser.add_argument(
        "--target-steps",
        type=float,
        default=3.0,
        help="steer the random Conductor to plans of about this many steps on average (paper: ~3; "
        "0: leave it, ~1.4 steps; see steer_plan_length)",
    )
    parser.add_argument("--max-new-tokens", type=int, default=384, help="Conductor tokens per plan")
    parser.add_argument("--worker-concurrency", type=int, default=1024, help="calls in flight per WorkerActor")
    parser.add_argument("--replicas", type=int, default=1, help="WorkerActors per worker")
    parser.add_argument("--warmup", type=int, default=0, help="iterations run (and reported) before the measured one")
    parser.add_argument(
        "--iterations",
        type=int,
        default=4,
        help="iterations of each of synchronous and asynchronous training (0: neither)",
    )
    parser.add_argument("--model", default="tiny-qwen2", help="the Conductor (default: the random tiny-qwen2)")
    parser.add_argument("--backend", default="vllm", choices=["vllm", "transformers"], help="generator backend")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a further configuration override",
    )
    args = parser.parse_args(argv)
    if args.latency_scale <= 0 or args.questions < 1 or args.rollouts < 2 or args.warmup < 0 or args.iterations == 1:
        parser.error(
            "--latency-scale must be > 0, --questions >= 1, --rollouts >= 2, --warmup >= 0, --iterations 0 or >= 2"
        )

    begun = time.perf_counter()
    config = build_config(args)
    print(
        f"building the system: {config.conductor.model} ({config.generator.backend}), "
        f"{len(config.workers)} sim workers x {config.train.worker_replicas} replica(s), "
        f"concurrency {args.worker_concurrency} ...",
        file=sys.stderr,
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="conductor-bench-iteration-"))
    try:
        ray, run, adjusted = build_run(
            config, args.warmup + max(1, 2 * args.iterations), target_steps=args.target_steps, workdir=workdir
        )
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    setup_s = time.perf_counter() - begun
    try:
        warmups = []
        for i in range(args.warmup):
            row = measure_iteration(run, i, ray)
            warmups.append(row)
            print(report_line(f"warm-up iteration {i}", row), file=sys.stderr, flush=True)
        row = measure_iteration(run, args.warmup, ray)
        print(report_line(f"measured iteration {args.warmup}", row), file=sys.stderr, flush=True)
        pacing = compare_async(run, args.warmup, args.iterations, row) if args.iterations else {}
    finally:
        run.actors.shutdown()
        ray.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)

    figures = {
        "benchmark": "iteration",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "model": args.model,
        "backend": config.generator.backend,
        "shape": {"questions": args.questions, "rollouts_per_question": args.rollouts, "max_steps": args.max_steps},
        "workers": {w.name: round(w.sim.latency_s, 3) for w in config.workers},
        "latency_scale": args.latency_scale,
        "jitter": args.jitter,
        "worker_concurrency": args.worker_concurrency,
        "replicas": args.replicas,
        **adjusted,
        **{k: v for k, v in row.items() if k not in ("record", "rollout_objects")},
        **pacing,
        "goal_ratio": GOAL_RATIO,
        "ratio_goal_met": row["ratio"] is not None and row["ratio"] <= GOAL_RATIO,
        "warmup": [
            {
                k: w[k]
                for k in (
                    "execute_s",
                    "critical_path_s",
                    "ratio",
                    "phases_s",
                    "iteration_s",
                    "steps",
                    "calls_in_flight_peak",
                )
            }
            for w in warmups
        ],
        "setup_s": round(setup_s, 2),
        "seconds": round(time.perf_counter() - begun, 2),
    }
    print(
        f"execute {figures['execute_s']:.2f}s / critical path {figures['critical_path_s']:.2f}s = ratio "
        f"{figures['ratio']} (goal <= {GOAL_RATIO}: {'met' if figures['ratio_goal_met'] else 'NOT met'}); "
        f"{figures['seconds']} s in all"
    )
    if pacing:
        print(
            f"synchronous {pacing['sync_iteration_s']:.1f}s / asynchronous {pacing['async_iteration_s']:.1f}s per "
            f"iteration = speedup {pacing['async_speedup']} (goal >= {GOAL_ASYNC_SPEEDUP}); "
            f"asynchronous / max(phase) "
            f"{pacing['bound_max_phase_s']:.1f}s = {pacing['async_vs_bound']} (goal <= {GOAL_ASYNC_VS_BOUND})"
        )
    keep_result(figures)
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
