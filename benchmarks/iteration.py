"""One training iteration at the paper's shape, phase by phase, and the rollout
phase against its critical-path bound.

The real loop (`jobs.train.train_iteration` on what `jobs.training_system`
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
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

GOAL_RATIO = 1.10
GOAL_ASYNC_SPEEDUP = 1.3
GOAL_ASYNC_VS_BOUND = 1.15

# (name, mean latency in s at --latency-scale 1, accuracy per domain, gain from context, output tokens)
WORKERS = [
    ("sim-fast", 2.0, {"math": 0.45, "mmlu": 0.45, "code": 0.45}, 0.2, 150),
    ("sim-medium", 3.0, {"math": 0.2, "mmlu": 0.9, "code": 0.4}, 0.05, 200),
    ("sim-slow", 8.0, {"math": 0.9, "mmlu": 0.2, "code": 0.5}, 0.05, 300),
]


# --------------------------------------------------------------------------- critical path


def step_critical_paths(steps: Sequence[Any]) -> list[float]:
    """Finish time of each step if it started the moment what it reads had
    finished and took its own latency: finish[i] = max(finish[j], j in access) + latency[i]."""
    finish: list[float] = []
    for s in steps:
        ready = max((finish[j] for j in s.access if 0 <= j < len(finish)), default=0.0)
        finish.append(ready + (s.latency_s or 0.0))
    return finish


def critical_path_s(steps: Sequence[Any]) -> float:
    return max(step_critical_paths(steps), default=0.0)


def summarize(values: Sequence[float], digits: int = 4) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {"mean": round(statistics.fmean(ordered), digits), "p50": round(ordered[len(ordered) // 2], digits),
            "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], digits),
            "max": round(ordered[-1], digits)}


def peak_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in intervals] + [(b, -1) for _, b in intervals], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, delta in events:
        now += delta
        peak = max(peak, now)
    return peak


# --------------------------------------------------------------------------- instruments


class MeteredPool:
    """A pass-through around one WorkerPool that records each call's driver-side
    start and end (perf_counter) and the worker's own latency. It is the
    provider `run_plan` sees; everything else goes to the pool."""

    def __init__(self, pool: Any, calls: list[tuple[float, float, float]], in_flight: dict[str, list[int]]) -> None:
        self._pool = pool
        self._calls = calls
        # [now, peak] of all pools together ("*") and of each worker
        self._counters = (in_flight.setdefault("*", [0, 0]), in_flight.setdefault(pool.name, [0, 0]))
        self.name = pool.name
        self.simulated = pool.simulated

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)

    async def complete(self, request: Any) -> Any:
        started = time.perf_counter()
        for counter in self._counters:
            counter[0] += 1
            counter[1] = max(counter[1], counter[0])
        latency = float("nan")
        try:
            response = await self._pool.complete(request)
            latency = response.latency_s
            return response
        finally:
            for counter in self._counters:
                counter[0] -= 1
            self._calls.append((started, time.perf_counter(), latency))


class RoundRecorder:
    """The loop's phase observer: one record per "execute" phase, a round (a round
    re-runs the rollouts an infrastructure error left without a reward)."""

    def __init__(self) -> None:
        self.rounds: list[dict] = []

    def __call__(self, phase: Any) -> None:
        if phase.name == "execute":
            self.rounds.append({"started": phase.started, "ended": phase.ended, "rollouts": list(phase.rollouts)})


# --------------------------------------------------------------------------- set-up


def build_config(args: argparse.Namespace) -> Any:
    from conductor_rl.config import load_config

    workers = [
        {"name": name, "provider": "sim", "concurrency": args.worker_concurrency,
         "price": {"input": 1.0, "output": 5.0},
         "sim": {"accuracy": acc, "gain_with_context": gain, "latency_s": latency * args.latency_scale,
                 "latency_jitter": args.jitter, "output_tokens": tokens}}
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
        "train.tensorboard=false",
        f"generator.backend={args.backend}",
        "cluster.generator={CPU: 1}",
        "cluster.learner={CPU: 1}",
        f"workers={json.dumps(workers)}",
        *args.overrides,
    ]
    return load_config(None, overrides)


def build_loop(config: Any, iterations: int, target_steps: float = 0.0,
               workdir: Path | None = None) -> tuple[Any, Any, dict]:
    """The Loop `jobs.train.train` builds, for `iterations` iterations; also
    returns what was adjusted: the plan-length steer (None: none asked)."""
    from conductor_rl.data import load_dataset
    from conductor_rl.data.stream import QuestionStream
    from conductor_rl.run.metrics import best_workers
    from conductor_rl.plan.prompts import ConductorPrompt
    from jobs.train import Loop, StopSignal
    from jobs.training_system import build_system, start_ray

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
    prompts = ConductorPrompt.from_config(config)
    started = time.perf_counter()
    ray = start_ray(config)
    system = build_system(config, config.conductor.model, 0, total_steps=t.iterations)
    system_s = time.perf_counter() - started
    loop = Loop(config, system, stream, prompts, StopSignal(), 0, best_workers(config.workers))
    return ray, loop, {"plan_length_steer": steer,
                       "system_start_s": round(system_s, 2)}


# --------------------------------------------------------------------------- plan length


def steer_plan_length(config: Any, questions: Sequence[Any], target_steps: float, folder: Path) -> dict:
    """Save into `folder` a copy of the Conductor whose plans average about
    `target_steps` steps (at most conductor.max_steps), for `questions`' prompts.

    The random tiny-qwen2 mostly closes `model_id = [...]` after its first id, so
    its plans are much shorter than the paper's (about 3 steps on average). Under
    the format constraint its only say in a plan's length is, after each worker
    id, "," (one more step) against "]" (done). This adds to the "," token's
    (tied) embedding row a multiple c of the mean final hidden state at those
    decisions, raising the "," logit there; c is found by bisection so that the
    expected length, 1 + q1 + q1 q2 + ... (q_k: P(",") after k ids, constrained
    to the allowed tokens, averaged over the prompts), meets the target. It is
    still a random policy that the loop samples, trains and syncs as any other."""
    import random

    import torch

    from conductor_rl.models import load_causal_lm, resolve_model
    from conductor_rl.plan.prompts import ConductorPrompt

    c = config.conductor
    n_workers = len(config.workers)
    if not 1.0 <= target_steps <= c.max_steps:
        raise ValueError(f"target steps {target_steps} must be between 1 and conductor.max_steps={c.max_steps}")
    model, tokenizer = load_causal_lm(c.model, "float32")
    prompts = ConductorPrompt.from_config(config)
    text = [tokenizer.convert_tokens_to_string([t]) for t in tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))]
    close = [i for i, t in enumerate(text) if t.startswith("]") and "]\nsubtasks = [".startswith(t)]
    more = [i for i, t in enumerate(text) if t and ", ".startswith(t)]
    comma = tokenizer.convert_tokens_to_ids(",")
    rng = random.Random(0)
    draws = 3   # id sequences per question and length, averaged
    contexts = [[[prompts.ids(q.question) + tokenizer(", ".join(str(rng.randrange(n_workers)) for _ in range(k)),
                                                      add_special_tokens=False)["input_ids"]
                  for _ in range(draws)] for k in range(1, c.max_steps)] for q in questions]
    embedding = model.get_output_embeddings().weight   # the head; tiny-qwen2 ties it to the input embedding
    original = embedding[comma].detach().clone()
    allowed = torch.tensor(close + more)

    @torch.no_grad()
    def last_hidden(ids: list[int]) -> torch.Tensor:
        # The body only, and the head on the last position's allowed tokens: a full
        # [positions x vocabulary] head would cost 100 times more here.
        return model.model(torch.tensor([ids])).last_hidden_state[0, -1]

    @torch.no_grad()
    def expected_steps() -> float:
        total = 0.0
        for chain in contexts:
            survive, steps = 1.0, 1.0
            for same_length in chain:
                q = 0.0
                for ids in same_length:
                    p = torch.softmax(embedding[allowed] @ last_hidden(ids), -1)
                    q += float(p[len(close):].sum()) / len(same_length)
                survive *= q
                steps += survive
            total += steps
        return total / len(contexts)

    hidden = torch.stack([last_hidden(ids) for chain in contexts for ids in chain[0]])
    direction = hidden.mean(0) / hidden.mean(0).norm() ** 2

    def set_bias(scale: float) -> float:
        with torch.no_grad():
            embedding[comma] = original + scale * direction
        return expected_steps()

    before = set_bias(0.0)
    lo = hi = 0.0   # bracket the target: expected steps grow with the scale
    if before < target_steps:
        hi = 1.0
        while set_bias(hi) < target_steps and hi < 64:
            lo, hi = hi, hi * 2
    else:
        lo = -1.0
        while set_bias(lo) > target_steps and lo > -64:
            hi, lo = lo, lo * 2
    for _ in range(14):
        mid = (lo + hi) / 2
        if set_bias(mid) < target_steps:
            lo = mid
        else:
            hi = mid
    scale = (lo + hi) / 2
    after = set_bias(scale)
    folder.mkdir(parents=True, exist_ok=True)
    source = Path(resolve_model(c.model))
    for item in source.iterdir():   # tokenizer, chat template, generation config
        if item.is_file() and item.suffix != ".safetensors":
            (folder / item.name).write_bytes(item.read_bytes())
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"from": c.model, "comma_bias_scale": round(scale, 4), "expected_steps_before": round(before, 3),
            "expected_steps_after": round(after, 3), "target_steps": target_steps}


# --------------------------------------------------------------------------- one iteration


def measure_iteration(loop: Any, iteration: int, ray: Any) -> dict:
    from jobs.train import train_iteration

    calls: list[tuple[float, float, float]] = []
    in_flight: dict[str, list[int]] = {}
    pools = loop.system.workers
    recorder = RoundRecorder()
    loop.system.workers = [MeteredPool(p, calls, in_flight) for p in pools]
    loop.observer = recorder
    try:
        ray.get(loop.system.ledger.start_iteration.remote(iteration))
        started = time.perf_counter()
        record, rollouts = train_iteration(loop, iteration)
        wall = time.perf_counter() - started
    finally:
        loop.observer = None
        loop.system.workers = pools
    return {**analyse(record, rollouts, recorder.rounds, calls, {k: v[1] for k, v in in_flight.items()}, wall),
            "record": record}


def analyse(record: dict, rollouts: Sequence[Any], rounds: Sequence[dict], calls: Sequence[tuple[float, float, float]],
            peaks: dict[str, int], wall: float) -> dict:
    # The bound: per round, the slowest rollout's critical path; rounds add up.
    bound, round_rows = 0.0, []
    for n, rnd in enumerate(rounds):
        paths = [critical_path_s(r.workflow.steps) for r in rnd["rollouts"] if r.workflow is not None]
        # A rollout re-run in a later round holds only its last attempt's trace; its
        # earlier attempt's path is unknown, so that round's bound is what is left.
        worst = max(paths, default=0.0)
        bound += worst
        round_rows.append({"rollouts": len(rnd["rollouts"]), "wall_s": round(rnd["ended"] - rnd["started"], 3),
                           "critical_path_s": round(worst, 3)})
    execute = record.get("time_execute_s", 0.0)

    executed = [r for r in rollouts if r.workflow is not None]
    steps = [s for r in executed for s in r.workflow.steps]
    called = [s for s in steps if s.started_s is not None]
    paths = [critical_path_s(r.workflow.steps) for r in executed]
    # How late each step started after the steps it reads had finished (driver-side times).
    lags, overheads = [], []
    for r in executed:
        ss = r.workflow.steps
        for s in ss:
            if s.started_s is None or s.finished_s is None:
                continue
            ready = max((ss[j].finished_s or 0.0 for j in s.access), default=0.0)
            lags.append(s.started_s - ready)
            overheads.append((s.finished_s - s.started_s) - s.latency_s)
    # Each rollout: its wall time (first call to last answer) against its own critical path.
    stretch = [r.workflow.wall_s - p for r, p in zip(executed, paths)]
    # Calls, from the driver's meter: the first call's start after the phase began, the
    # last answer before it ended, and each call's cost beyond the worker's own latency.
    first_round = rounds[0] if rounds else None
    meter = {}
    if calls and first_round:
        meter = {
            "first_call_after_s": round(min(c[0] for c in calls) - first_round["started"], 4),
            "last_answer_before_end_s": round(rounds[-1]["ended"] - max(c[1] for c in calls), 4),
            "peak_in_flight_from_intervals": peak_overlap([(a, b) for a, b, _ in calls]),
        }
    n_steps = [len(r.plan.steps) for r in rollouts if r.plan is not None]
    phases = {k[len("time_"):-len("_s")]: round(v, 3) for k, v in record.items()
              if k.startswith("time_") and k.endswith("_s")}
    return {
        "execute_s": round(execute, 3),
        "critical_path_s": round(bound, 3),
        "ratio": round(execute / bound, 4) if bound > 0 else None,
        "phases_s": phases,
        "iteration_s": round(wall, 3),
        "rollouts": len(rollouts),
        "parsed": len(n_steps),
        "steps": len(steps),
        "steps_per_plan": round(statistics.fmean(n_steps), 3) if n_steps else None,
        "steps_per_plan_histogram": {str(k): n_steps.count(k) for k in sorted(set(n_steps))},
        "worker_calls": len(calls),
        "calls_in_flight_peak": peaks.get("*", 0),
        "calls_in_flight_peak_per_worker": {k: v for k, v in peaks.items() if k != "*"},
        "rounds": round_rows,
        "retried_rollouts": sum(1 for r in rollouts if r.attempts > 1),
        "failed_steps": sum(1 for s in steps if s.error),
        "dropped_rollouts": sum(1 for r in rollouts if r.plan is not None and r.reward is None),
        "step_latency_s": summarize([s.latency_s for s in called], 3),
        "rollout_critical_path_s": summarize(paths, 3),
        "step_start_lag_s": summarize(lags),
        "call_overhead_s": summarize(overheads),
        "rollout_wall_minus_critical_path_s": summarize(stretch),
        "meter": meter,
        "reward_mean": record.get("reward_mean"),
        "informative_groups": record.get("informative_groups"),
        "learned": "loss" in record,
    }


# --------------------------------------------------------------------------- synchronous vs asynchronous


def compare_async(loop: Any, ray: Any, first: int, iterations: int, measured: dict) -> dict:
    """`iterations` synchronous iterations (`measured`, iteration `first`, is the first of them),
    then as many with train.max_staleness=1, on the same system; their paces and the bounds."""
    from jobs.train import learned_iterations, train_iteration

    sync_records = [measured["record"]]
    for i in range(first + 1, first + iterations):
        record, _ = train_iteration(loop, i)
        sync_records.append(record)
        print(f"synchronous iteration {i}: {record['time_iteration_s']:.1f}s", file=sys.stderr, flush=True)
    sync_config = loop.config
    train = sync_config.train.model_copy(update={"max_staleness": 1})
    loop.config = sync_config.model_copy(update={"train": train})
    async_records = []
    try:
        start = first + iterations
        for record, _ in learned_iterations(loop, start, start + iterations):
            async_records.append(record)
            print(f"asynchronous iteration {record['iteration']}: {record['time_iteration_s']:.1f}s between learner "
                  f"steps (learner waited {record['time_wait_learner_s']:.1f}s, overlap {record['overlap']:.2f})",
                  file=sys.stderr, flush=True)
    finally:
        loop.config = sync_config
    names = ("generate", "execute", "grade", "learn", "sync")
    means = {n: statistics.fmean(r.get(f"time_{n}_s", 0.0) for r in sync_records) for n in names}
    sync_s = statistics.fmean(r["time_iteration_s"] for r in sync_records)
    # The first asynchronous iteration fills the pipeline and the last ones drain it (their plans were
    # sampled while earlier ones ran): the median time between the later learner steps is the pace.
    steady = async_records[1:] or async_records
    async_s = statistics.median(r["time_iteration_s"] for r in steady)
    async_pass = sum(r["time_iteration_s"] for r in async_records)
    bound = max(means.values())
    staleness: dict[str, int] = {}
    for r in async_records:
        for k, n in r["staleness"].items():
            staleness[k] = staleness.get(k, 0) + n
    return {
        "iterations_each": iterations,
        "sync_iteration_s": round(sync_s, 3),
        "async_iteration_s": round(async_s, 3),
        "async_between_steps_s": [round(r["time_iteration_s"], 3) for r in async_records],
        "async_speedup": round(sync_s / async_s, 4),
        "sync_pass_s": round(sync_s * iterations, 3),
        "async_pass_s": round(async_pass, 3),
        "async_pass_speedup": round(sync_s * iterations / async_pass, 4),
        "async_vs_bound": round(async_s / bound, 4),
        "bound_max_phase_s": round(bound, 3),
        "sync_phase_means_s": {n: round(v, 3) for n, v in means.items()},
        "async_phase_means_s": {n: round(statistics.fmean(r.get(f"time_{n}_s", 0.0) for r in steady), 3)
                                for n in names},
        "async_wait_learner_s": round(statistics.fmean(r["time_wait_learner_s"] for r in steady), 3),
        "async_wait_generate_s": round(statistics.fmean(r["time_wait_generate_s"] for r in steady), 3),
        "async_overlap": round(statistics.fmean(r["overlap"] for r in steady), 4),
        "async_staleness": staleness,
        "goal_async_speedup": GOAL_ASYNC_SPEEDUP,
        "goal_async_vs_bound": GOAL_ASYNC_VS_BOUND,
        "async_goals_met": sync_s / async_s >= GOAL_ASYNC_SPEEDUP and async_s / bound <= GOAL_ASYNC_VS_BOUND,
    }


# --------------------------------------------------------------------------- main


def report_line(label: str, row: dict) -> str:
    phases = "  ".join(f"{k} {v:.2f}s" for k, v in row["phases_s"].items())
    return (f"{label}: {row['rollouts']} rollouts, {row['steps']} steps ({row['steps_per_plan']} per plan), "
            f"{row['worker_calls']} calls, peak {row['calls_in_flight_peak']} in flight\n"
            f"  phases: {phases}\n"
            f"  execute {row['execute_s']:.2f}s vs critical path {row['critical_path_s']:.2f}s: ratio {row['ratio']}\n"
            f"  step start lag {row['step_start_lag_s']}\n  call overhead {row['call_overhead_s']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object as the last line")
    parser.add_argument("--latency-scale", type=float, default=1.0,
                        help="multiplies every worker's mean latency (2 s / 3 s / 8 s at 1.0)")
    parser.add_argument("--jitter", type=float, default=0.3, help="relative +/- spread of each call's latency")
    parser.add_argument("--questions", type=int, default=4, help="B: questions per iteration (paper: 4)")
    parser.add_argument("--rollouts", type=int, default=64, help="G: rollouts per question (paper: 64)")
    parser.add_argument("--max-steps", type=int, default=5, help="most steps per plan (paper: 5)")
    parser.add_argument("--target-steps", type=float, default=3.0,
                        help="steer the random Conductor to plans of about this many steps on average (paper: ~3; "
                             "0: leave it, ~1.4 steps; see steer_plan_length)")
    parser.add_argument("--max-new-tokens", type=int, default=384, help="Conductor tokens per plan")
    parser.add_argument("--worker-concurrency", type=int, default=1024, help="calls in flight per WorkerActor")
    parser.add_argument("--replicas", type=int, default=1, help="WorkerActors per worker")
    parser.add_argument("--warmup", type=int, default=0, help="iterations run (and reported) before the measured one")
    parser.add_argument("--iterations", type=int, default=4,
                        help="iterations of each of synchronous and asynchronous training (0: neither)")
    parser.add_argument("--model", default="tiny-qwen2", help="the Conductor (default: the random tiny-qwen2)")
    parser.add_argument("--backend", default="vllm", choices=["vllm", "transformers"], help="generator backend")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a further configuration override")
    args = parser.parse_args(argv)
    if args.latency_scale <= 0 or args.questions < 1 or args.rollouts < 2 or args.warmup < 0 or args.iterations == 1:
        parser.error("--latency-scale must be > 0, --questions >= 1, --rollouts >= 2, --warmup >= 0, "
                     "--iterations 0 or >= 2")

    begun = time.perf_counter()
    config = build_config(args)
    print(f"building the system: {config.conductor.model} ({config.generator.backend}), "
          f"{len(config.workers)} sim workers x {config.train.worker_replicas} replica(s), "
          f"concurrency {args.worker_concurrency} ...", file=sys.stderr, flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="conductor-bench-iteration-"))
    try:
        ray, loop, adjusted = build_loop(config, args.warmup + max(1, 2 * args.iterations),
                                         target_steps=args.target_steps, workdir=workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    setup_s = time.perf_counter() - begun
    try:
        warmups = []
        for i in range(args.warmup):
            row = measure_iteration(loop, i, ray)
            warmups.append(row)
            print(report_line(f"warm-up iteration {i}", row), file=sys.stderr, flush=True)
        row = measure_iteration(loop, args.warmup, ray)
        print(report_line(f"measured iteration {args.warmup}", row), file=sys.stderr, flush=True)
        pacing = compare_async(loop, ray, args.warmup, args.iterations, row) if args.iterations else {}
    finally:
        loop.system.shutdown()
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
        **{k: v for k, v in row.items() if k != "record"},
        **pacing,
        "goal_ratio": GOAL_RATIO,
        "ratio_goal_met": row["ratio"] is not None and row["ratio"] <= GOAL_RATIO,
        "warmup": [{k: w[k] for k in ("execute_s", "critical_path_s", "ratio", "phases_s", "iteration_s",
                                      "steps", "calls_in_flight_peak")} for w in warmups],
        "setup_s": round(setup_s, 2),
        "seconds": round(time.perf_counter() - begun, 2),
    }
    print(f"execute {figures['execute_s']:.2f}s / critical path {figures['critical_path_s']:.2f}s = ratio "
          f"{figures['ratio']} (goal <= {GOAL_RATIO}: {'met' if figures['ratio_goal_met'] else 'NOT met'}); "
          f"{figures['seconds']} s in all")
    if pacing:
        print(f"synchronous {pacing['sync_iteration_s']:.1f}s / asynchronous {pacing['async_iteration_s']:.1f}s per "
              f"iteration = speedup {pacing['async_speedup']} (goal >= {GOAL_ASYNC_SPEEDUP}); asynchronous / max(phase) "
              f"{pacing['bound_max_phase_s']:.1f}s = {pacing['async_vs_bound']} (goal <= {GOAL_ASYNC_VS_BOUND})")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
