"""What the benchmarks share to measure: a progress line, the machine they ran on, a
distribution's figures, calls in flight, a workflow's critical path, a meter around
each worker pool, the training loop's phase recorder, and the rollout phase's figures
against its critical-path bound (benchmarks/iteration.py)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conductor_rl.rollout.rollouts import Rollout


def log(message: str) -> None:
    """A progress line on stderr (stdout stays for the figures)."""
    print(message, file=sys.stderr, flush=True)


# Where `keep_result` writes: benchmarks/results/<benchmark>/, unless this names another folder (the tests').
RESULTS_DIR_ENV = "CONDUCTOR_RL_RESULTS_DIR"
RESULTS_DIR = Path(__file__).resolve().parent / "results"


def keep_result(figures: dict[str, Any], benchmark: str | None = None) -> Path:
    """Write a benchmark's figures with what they need to be checked: the command, the commit (and
    whether the tree had changes), the machine (CPU model, bf16 flags, cores, load) and the time, to
    benchmarks/results/<benchmark>/<UTC time>.json. A figure quoted in the docs names its file, and
    the file is committed with it (tests/test_docs.py fails when a named file is missing)."""
    import datetime
    import subprocess

    name = benchmark or Path(sys.argv[0]).stem
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.strip() if done.returncode == 0 else ""

    now = datetime.datetime.now(datetime.UTC)
    record = {
        "benchmark": name,
        "command": " ".join([".venv/bin/python", f"benchmarks/{name}.py", *sys.argv[1:]]),
        "commit": git("rev-parse", "HEAD"),
        "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")),
        "machine": machine(),
        "finished_utc": now.isoformat(timespec="seconds"),
        "figures": figures,
    }
    folder = Path(os.environ.get(RESULTS_DIR_ENV) or RESULTS_DIR) / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{now.strftime('%Y-%m-%dT%H%M%SZ')}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    log(f"kept: {path}")
    return path


def report(figures: dict[str, Any], as_json: bool, show: Callable[[str], None] = log) -> None:
    """A benchmark's ending: its figures kept with their provenance (`keep_result`), shown for people
    (through `show`), then with `as_json` the one JSON line on stdout that scripts read."""
    keep_result(figures)
    show(json.dumps(figures, indent=2))
    if as_json:
        print(json.dumps(figures))


def machine() -> dict[str, Any]:
    """The CPU (model, count, bf16 flags) and how busy the machine was: the times depend on both."""
    model = platform.processor()
    flags = ""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        flags = cpuinfo
        model = next(
            (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), model
        )
    except OSError:
        pass
    return {
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "avx512_bf16": " avx512_bf16" in flags,
        "amx_bf16": " amx_bf16" in flags,
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
    }


# --------------------------------------------------------------------------- critical path


def train_then_evaluate_overrides(args: Any, benchmarks: Sequence[str]) -> list[str]:
    """The embedded default shrunk to a benchmark's run: `args.iterations` of `args.questions` x
    `args.rollouts`, one checkpoint at the end (each costs seconds), no progress bar, report or
    TensorBoard, then an evaluation of `args.limit` questions x `args.repeats` on `benchmarks`."""
    import json

    return [
        f"train.iterations={args.iterations}",
        f"train.questions_per_iteration={args.questions}",
        f"train.rollouts_per_question={args.rollouts}",
        f"train.checkpoint_every={args.iterations}",
        "train.keep_checkpoints=1",
        "train.progress=false",
        "train.report=false",
        "train.loggers=[]",
        f"train.seed={args.seed}",
        f"conductor.seed={args.seed}",
        f"evaluate.benchmarks={json.dumps(list(benchmarks))}",
        f"evaluate.limit={args.limit}",
        f"evaluate.repeats={args.repeats}",
        "evaluate.progress=false",
    ]


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


def distribution(values: Sequence[float], digits: int = 4) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "mean": round(statistics.fmean(ordered), digits),
        "p50": round(ordered[len(ordered) // 2], digits),
        "p99": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], digits),
        "max": round(ordered[-1], digits),
    }


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


# --------------------------------------------------------------------------- the rollout phase


def rollout_phase_figures(
    record: dict,
    rollouts: Sequence[Rollout],
    rounds: Sequence[dict],
    calls: Sequence[tuple[float, float, float]],
    peaks: dict[str, int],
    wall: float,
) -> dict:
    """The rollout phase of one iteration (its record and rollouts) against its critical-path bound;
    `rounds`: RoundRecorder's, `calls` and `peaks`: the MeteredPools', `wall`: the iteration's seconds."""
    # The bound: per round, the slowest rollout's critical path; rounds add up.
    bound, round_rows = 0.0, []
    for rnd in rounds:
        paths = [critical_path_s(r.workflow.steps) for r in rnd["rollouts"] if r.workflow is not None]
        # A rollout re-run in a later round holds only its last attempt's trace; its
        # earlier attempt's path is unknown, so that round's bound is what is left.
        worst = max(paths, default=0.0)
        bound += worst
        round_rows.append(
            {
                "rollouts": len(rnd["rollouts"]),
                "wall_s": round(rnd["ended"] - rnd["started"], 3),
                "critical_path_s": round(worst, 3),
            }
        )
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
    phases = {
        k[len("time_") : -len("_s")]: round(v, 3)
        for k, v in record.items()
        if k.startswith("time_") and k.endswith("_s")
    }
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
        "step_latency_s": distribution([s.latency_s for s in called], 3),
        "rollout_critical_path_s": distribution(paths, 3),
        "step_start_lag_s": distribution(lags),
        "call_overhead_s": distribution(overheads),
        "rollout_wall_minus_critical_path_s": distribution(stretch),
        "meter": meter,
        "reward_mean": record.get("reward_mean"),
        "informative_groups": record.get("informative_groups"),
        "learned": "loss" in record,
    }


def sync_async_figures(
    sync_records: Sequence[dict], async_records: Sequence[dict], goal_speedup: float, goal_vs_bound: float
) -> dict[str, Any]:
    """Synchronous iterations' records against as many asynchronous ones' (train.max_staleness=1): the
    paces, the ideal bound max(phase) over the synchronous mean phase times, and the goals."""
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
        "iterations_each": len(sync_records),
        "sync_iteration_s": round(sync_s, 3),
        "async_iteration_s": round(async_s, 3),
        "async_between_steps_s": [round(r["time_iteration_s"], 3) for r in async_records],
        "async_speedup": round(sync_s / async_s, 4),
        "sync_pass_s": round(sync_s * len(sync_records), 3),
        "async_pass_s": round(async_pass, 3),
        "async_pass_speedup": round(sync_s * len(sync_records) / async_pass, 4),
        "async_vs_bound": round(async_s / bound, 4),
        "bound_max_phase_s": round(bound, 3),
        "sync_phase_means_s": {n: round(v, 3) for n, v in means.items()},
        "async_phase_means_s": {
            n: round(statistics.fmean(r.get(f"time_{n}_s", 0.0) for r in steady), 3) for n in names
        },
        "async_wait_learner_s": round(statistics.fmean(r["time_wait_learner_s"] for r in steady), 3),
        "async_wait_generate_s": round(statistics.fmean(r["time_wait_generate_s"] for r in steady), 3),
        "async_overlap": round(statistics.fmean(r["overlap"] for r in steady), 4),
        "async_staleness": staleness,
        "goal_async_speedup": goal_speedup,
        "goal_async_vs_bound": goal_vs_bound,
        "async_goals_met": sync_s / async_s >= goal_speedup and async_s / bound <= goal_vs_bound,
    }
