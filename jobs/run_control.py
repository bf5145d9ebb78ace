"""A training run's lifecycle around the loop: opening its folder, how it is
stopped (signals, a spent budget), how each iteration's phases are timed and
observed, the progress bar, whether a stopped run still needs a checkpoint,
and its closing summary."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from conductor_rl.config import Config, TrainConfig
from conductor_rl.config.redaction import recorded
from conductor_rl.rollout.rollouts import Rollout
from conductor_rl.run.checkpoint import CheckpointError, Checkpoints, check_writable
from conductor_rl.run.state import resume_conflicts
from conductor_rl.run.trackers import Trackers, open_trackers
from jobs.common import check_sandbox_before_start, check_workers_before_start, log

if TYPE_CHECKING:
    from jobs.training_system import TrainingSystem, WorkerPools


def from_trained_conductor(config: Config) -> Config:
    """`config` with `conductor.model` naming a model folder: a run folder or checkpoint folder there
    (fine-tuning from a trained Conductor, configs/paper-recursion.yaml) becomes its newest complete
    checkpoint's model. A Hub id or a model folder is kept; a folder that holds no model is refused."""
    from conductor_rl.config import ConfigError
    from conductor_rl.evaluation.methods import MethodError, resolve_checkpoint

    named = Path(config.conductor.model).expanduser()
    if not named.is_dir():
        return config
    try:
        model = resolve_checkpoint(named)
    except MethodError as err:
        raise ConfigError(f"conductor.model={config.conductor.model!r}: {err}") from None
    if model == named.resolve():
        return config
    log(f"train: starting from the trained Conductor {model}")
    return config.model_copy(update={"conductor": config.conductor.model_copy(update={"model": str(model)})})


def open_run(config: Config, resume: bool) -> tuple[Path, Checkpoints, dict | None]:
    """The run's folder, its checkpoints and the state to resume from; refuses a
    folder that holds another run, and a worker whose API key is missing."""
    t = config.train
    out = check_writable(t.output_dir)
    checkpoints = Checkpoints(out / "checkpoints", keep=t.keep_checkpoints)
    state = checkpoints.load_state() if resume else None
    if not resume and checkpoints.latest() is not None:
        raise CheckpointError(f"{out} already holds a run: pass --resume to continue it, or a new train.output_dir")
    if not resume and (out / "metrics.jsonl").exists():
        # --resume cannot help here (no checkpoint), so the message must not send the user to it.
        raise CheckpointError(
            f"{out} holds the log of a run that left no checkpoint to resume from: "
            f"set train.output_dir to a new folder, or delete {out} to start over"
        )
    check_workers_before_start(config)  # a missing key fails here, not after the actors start
    check_sandbox_before_start(config, [config.data.questions])
    conflicts = resume_conflicts(state["config"], config) if state else []
    if conflicts:
        raise CheckpointError(
            f"{out} was trained with another pool or Conductor; a resume must keep them (the plans it learnt "
            f"name its workers by position). Changed: " + "; ".join(conflicts[:12]) + ". Resume with the "
            f"configuration it started with ({out / 'config.json'}), or start a new train.output_dir"
        )
    if state and state["config"]["train"]["iterations"] != t.iterations:
        log(
            f"warning: resuming with train.iterations={t.iterations}, the run started with "
            f"{state['config']['train']['iterations']}: the learning-rate schedule follows the new length"
        )
    return out, checkpoints, state


class StopRun(Exception):
    """The run must stop now (signal or budget); the reason is the message."""


class StopSignal:
    """Ctrl-C or SIGTERM asks the run to stop at the next safe point; a second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self.reason: str | None = None

    def check(self) -> None:
        if self.reason:
            raise StopRun(self.reason)

    @property
    def requested(self) -> bool:
        return self.reason is not None

    def request(self, reason: str) -> None:
        """Ask for a stop from within the run (the first reason stands)."""
        if self.reason is None:
            self.reason = reason

    @contextmanager
    def installed(self) -> Iterator[StopSignal]:
        def handle(signum: int, _frame: FrameType | None) -> None:
            if self.reason and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.reason = signal.Signals(signum).name
            log(
                f"{self.reason} received: stopping at the next safe point with a checkpoint "
                f"(Ctrl-C again to stop at once)"
            )

        previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)


def check_budget(system: TrainingSystem | WorkerPools) -> None:
    """After a round of rollouts (nothing in flight): count calls lost with a dead
    replica at their worst-case cost, then stop if the budget is spent."""
    import ray

    lost = ray.get(system.ledger.settle_open_calls.remote())
    if lost:
        log(
            f"{lost} worker call(s) never returned (their replica died mid-call; the provider may have "
            f"billed them): counted at their worst-case cost"
        )
    reason = ray.get(system.ledger.stop_reason.remote())  # "budget", or "journal": its write failed
    if reason is not None:
        raise StopRun(reason)


def needs_final_checkpoint(stopped: str, done: int, saved: int, spent_usd: float) -> bool:
    """Whether the run must save a checkpoint once the loop has ended.

    stopped: "finished", or why the run stopped (a signal's name, "budget", "journal");
    done, saved: the last finished and the last checkpointed iteration (-1: none);
    spent_usd: the ledger's total.

    Yes when an iteration finished after the last checkpoint. And yes on every
    stop that has something to keep: the checkpoint's ledger totals then include
    an abandoned iteration's worker calls (the spend journal holds them anyway,
    and a resume rebuilds the ledger from it; the totals matter to `state.json`'s
    readers and to runs from before the journal). That holds when the iteration
    stopped was the first after a resume (the checkpoint resumed from is written
    again), and when it was the run's first, if it spent anything (then the
    checkpoint is "iteration -1": the starting weights). A run that finished has
    saved its last iteration already."""
    if done > saved:
        return True
    return stopped != "finished" and (done >= 0 or spent_usd > 0)


def open_run_trackers(config: Config, out: Path, resume_after: int | None) -> Trackers:
    """The run's experiment trackers (`train.loggers`), checked before any opens (TrackerError names the fix)."""
    dump = recorded(config)
    return Trackers(open_trackers(config.train.loggers, out, config.tracking, out.name, dump, resume_after))


def close_run_trackers(trackers: Trackers, summary: dict) -> None:
    """The report (its markdown and plots) to every tracker, then each closed."""
    if summary.get("report"):
        report = Path(summary["report"])
        trackers.log_files([report, *sorted((report.parent / "report").glob("*.png"))])
    trackers.close()


def run_summary(
    config: Config, out: Path, checkpoints: Checkpoints, how: str, done: int, forecast_usd: tuple[float, float]
) -> dict:
    """What the run did, with the report's figures (and the report, if asked for, with the cost
    forecast beside what was spent)."""
    from conductor_rl.run.log import records
    from conductor_rl.run.report import summarize, write_report

    summary = {
        "stopped": how,
        "iterations": done + 1,
        "output_dir": str(out),
        "checkpoint": str(checkpoints.latest()) if checkpoints.latest() else None,
    }
    kept = records(out) if (out / "metrics.jsonl").exists() else []
    if kept:
        summary.update(summarize(kept))
        if config.train.report:
            summary["report"] = str(
                write_report(
                    out,
                    title=f"Training report: {config.conductor.model}",
                    extra={
                        "stopped": how,
                        "output_dir": str(out),
                        "seed": config.train.seed,
                        "cost forecast (USD)": f"{forecast_usd[0]:.4f}-{forecast_usd[1]:.4f}",
                    },
                )
            )
    log(f"run {how} after iteration {done}; checkpoint: {summary['checkpoint']}")
    return summary


@dataclass(frozen=True)
class Phase:
    """One phase of an iteration, as an observer hears of it when it ends. The
    rollouts are those it worked on (none for "generate": they do not exist yet)."""

    name: str  # generate | execute | grade | learn | sync
    iteration: int
    started: float  # time.perf_counter()
    ended: float
    rollouts: Sequence[Rollout] = ()


PhaseObserver = Callable[[Phase], None]


class Phases:
    """Each phase's wall time in one iteration (a phase run several times adds
    up); an observer, if any, hears each as it ends (benchmarks/iteration.py)."""

    def __init__(self, iteration: int, observer: PhaseObserver | None = None) -> None:
        self.iteration = iteration
        self.observer = observer
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, name: str, rollouts: Sequence[Rollout] = ()) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            ended = time.perf_counter()
            self.seconds[name] = self.seconds.get(name, 0.0) + ended - started
            if self.observer is not None:
                self.observer(Phase(name, self.iteration, started, ended, rollouts))


class progress_bar:
    """A tqdm bar over iterations with the last reward, accuracy and cost."""

    def __init__(self, t: TrainConfig, start: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=t.iterations,
            initial=start,
            desc="train",
            unit="it",
            file=sys.stderr,
            disable=not t.progress,
            dynamic_ncols=True,
        )

    def __enter__(self) -> progress_bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.close()

    def update(self, record: dict) -> None:
        self.bar.set_postfix(
            reward=f"{record['reward_mean']:.3f}",
            acc=f"{record['accuracy']:.2f}",
            cost=f"${record.get('cost_total_usd', 0.0):.4f}",
            refresh=False,
        )
        self.bar.update(1)
        if self.bar.disable:
            log(
                f"iteration {record['iteration']}: reward {record['reward_mean']:.3f} "
                f"accuracy {record['accuracy']:.2f} ({record['time_iteration_s']:.1f}s)"
            )
