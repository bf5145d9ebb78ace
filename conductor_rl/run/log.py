"""The run log: one metrics record per training iteration, in metrics.jsonl and the trackers.

`<run_dir>/metrics.jsonl` holds every record as one JSON line (the source of
truth: the report and benchmarks read it back); the experiment trackers the run
opened (conductor_rl/run/trackers.py: TensorBoard, W&B, MLflow) get the numeric
values, nested names joined with "/", for watching a run live.

Resuming from a checkpoint taken after iteration K must leave no trace of the
iterations after K that the crashed run may have logged: `RunLog(run_dir,
resume_after=K)` rewrites metrics.jsonl without them (the trackers opened with
the same K purge what they can: TensorBoard drops its events from K+1 on).
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Protocol, SupportsFloat, TypeGuard

from conductor_rl.atomic_files import write_atomically

METRICS_FILE = "metrics.jsonl"
# The step and the wall clock of each tracker's event, not values of their own.
_AXIS_KEYS = frozenset({"iteration", "wall_time"})


class MetricsSink(Protocol):
    """What the log feeds each record's numbers to: conductor_rl/run/trackers.py's `Trackers` (which
    flattens with this module's `flatten_numbers`, so the log cannot import it)."""

    def log_metrics(self, values: Mapping[str, float], step: int, wall: float | None = None) -> None: ...


class RunDirError(ValueError):
    """The run folder does not fit the request (stale logs for a fresh run, a corrupt metrics file)."""


class MetricsRecordError(ValueError):
    """A metrics record cannot be logged (no iteration, or an iteration already logged)."""


def is_number(value: Any) -> TypeGuard[SupportsFloat]:
    """A real number worth plotting: ints and floats (NaN included), numpy scalars; not bools."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def flatten_numbers(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Every numeric value of `record`, nested dicts flattened with "/":
    {"worker_usage": {"a": 0.4}} -> {"worker_usage/a": 0.4}. Non-numbers are skipped."""
    flat: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_numbers(value, prefix=f"{name}/"))
        elif is_number(value):
            flat[name] = float(value)
    return flat


def _json_default(value: Any) -> Any:
    # numpy / torch scalars and arrays turn up in metrics; anything else is kept as its text
    # rather than losing a whole iteration's record to a TypeError.
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _read_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of each complete line; a torn last line is dropped,
    a bad line before the last one raises RunDirError."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                return  # the line being written when the run crashed
            raise RunDirError(
                f"{path} line {number} is not valid JSON (only a torn last line is expected after a crash); "
                f"repair or delete that line"
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get("iteration"), int):
            raise RunDirError(
                f"{path} line {number} is not a metrics record with an integer 'iteration'; repair or delete that line"
            )
        yield number, record


def records(run_dir: str | Path) -> list[dict[str, Any]]:
    """The metrics records of a run, in the order they were logged."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        raise FileNotFoundError(f"no {METRICS_FILE} in {run_dir}: is this the output folder of a training run?")
    return [record for _, record in _read_lines(path)]


def _truncate_after(path: Path, last_iteration: int) -> None:
    """Rewrite `path` atomically keeping only records with iteration <= last_iteration."""
    kept = [record for _, record in _read_lines(path) if record["iteration"] <= last_iteration]
    write_atomically(path, lambda out: out.writelines(json.dumps(r, default=_json_default) + "\n" for r in kept))


class RunLog:
    """Appends metrics records to `<run_dir>/metrics.jsonl` and to `trackers`.

    resume_after: None for a fresh run (the folder must not hold metrics.jsonl
    yet); K to continue a run from the checkpoint taken after iteration K
    (records and events after K are discarded; -1 discards them all).
    Iterations must then increase: logging one that is already in the log raises.
    """

    def __init__(
        self, run_dir: str | Path, trackers: MetricsSink | None = None, resume_after: int | None = None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / METRICS_FILE
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if resume_after is None:
            if self.path.exists():
                raise RunDirError(
                    f"{self.run_dir} already holds the metrics of a run ({METRICS_FILE}); "
                    f"pass a new output folder, or --resume to continue that run"
                )
        else:
            if isinstance(resume_after, bool) or not isinstance(resume_after, int) or resume_after < -1:
                raise ValueError(f"resume_after must be an iteration >= -1 or None, got {resume_after!r}")
            if self.path.exists():
                _truncate_after(self.path, resume_after)
        self._last_iteration = resume_after
        self._file: IO[str] | None = (
            None  # opened on the first record, so a run that logs nothing leaves no metrics.jsonl
        )
        self.trackers = trackers  # closed by their opener: they outlive the log (the report)
        self._closed = False

    @property
    def last_iteration(self) -> int | None:
        """The last iteration logged (or resumed after), None before any."""
        return self._last_iteration

    def log(self, record: Mapping[str, Any]) -> None:
        """Append one iteration's record; durable (fsynced) when this returns."""
        if self._closed:
            raise ValueError(
                f"this RunLog of {self.run_dir} is closed; open a new one with resume_after=<last iteration>"
            )
        iteration = record.get("iteration")
        if isinstance(iteration, bool) or not isinstance(iteration, numbers.Integral):
            raise MetricsRecordError(
                f"a metrics record needs an integer 'iteration', got {iteration!r}; set record['iteration']"
            )
        iteration = int(iteration)
        if self._last_iteration is not None and iteration <= self._last_iteration:
            raise MetricsRecordError(
                f"iteration {iteration} is not after the last one logged ({self._last_iteration}); "
                f"a resumed run must open the log with RunLog(run_dir, resume_after=<checkpoint iteration>)"
            )
        if self._file is None:
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 (kept open until close())
        line = json.dumps({**record, "iteration": iteration}, default=_json_default)
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())
        self._last_iteration = iteration
        if self.trackers is not None:
            wall = record.get("wall_time")
            wall = float(wall) if is_number(wall) and math.isfinite(wall) else None
            values = flatten_numbers({k: v for k, v in record.items() if k not in _AXIS_KEYS})
            self.trackers.log_metrics(values, iteration, wall)

    def close(self) -> None:
        self._closed = True
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
