"""Experiment trackers: the tools users already watch runs in, fed what the run's own files hold.

`open_trackers(["tensorboard", "wandb", "mlflow"], ...)` checks every tracker first (its package
installed, its credentials where it needs them) and raises `TrackerError` naming the fix before any
is opened, so a missing package stops a run at its start, not mid-way. Each tracker then takes:

- the configuration once (`log_config`: flattened, keys joined with "." as in overrides);
- each training iteration's numbers (`log_metrics`, names flattened with "/" as in TensorBoard);
- files: the report's markdown and plots (`log_files`: images as images, the rest as text or artifacts);
- a table: the evaluation's cells (`log_table`).

The run's own files (metrics.jsonl, results.json) stay the source of truth; trackers are copies
for watching. Where each writes:

- tensorboard: `<output>/tensorboard` (scalars, plots as images, markdown as text); a resumed run
  purges the events after its checkpoint.
- wandb: the project `tracking.wandb_project`; offline (`tracking.wandb_mode`) under
  `<output>/wandb`, for `wandb sync`. A resumed run continues the same W&B run (its id is kept in
  `<output>/trackers.json`); steps it logged after the checkpoint stay, W&B cannot delete them.
- mlflow: `tracking.mlflow_tracking_uri`, else a file store in `<output>/mlruns` (MLflow 3 keeps
  file stores in maintenance mode behind MLFLOW_ALLOW_FILE_STORE; ours is a run's local copy, so it
  is allowed for this client only). A resumed run continues its MLflow run, as for W&B.

Decisions: no tracker gets API keys from the configuration (W&B reads WANDB_API_KEY, MLflow its
server's own variables); a tracker that fails mid-run is reported once and dropped, never stops
training (the run's files are complete without it).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from conductor_rl.config import ConfigError, TrackingConfig
from conductor_rl.run.log import flatten_numbers

log = logging.getLogger(__name__)

LOGGERS = ("tensorboard", "wandb", "mlflow")
TENSORBOARD_DIR = "tensorboard"
IDS_FILE = "trackers.json"  # the W&B and MLflow run ids, so a resumed run continues its runs
# The package that provides each tracker's module (named as the tracker), as pyproject.toml installs it.
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow-skinny"}


class TrackerError(ConfigError):
    """A tracker a `*.loggers` key names cannot be used here (a package or a credential missing); the
    message names the key and the fix."""


class Tracker(Protocol):
    name: str

    def log_config(self, config: Mapping[str, Any]) -> None: ...
    def log_metrics(self, values: Mapping[str, float], step: int, wall: float | None = None) -> None: ...
    def log_files(self, paths: Sequence[Path]) -> None: ...
    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None: ...
    def close(self) -> None: ...


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"train": {"iterations": 8}} -> {"train.iterations": 8}; lists stay values (as JSON text)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}."))
        else:
            flat[name] = json.dumps(value) if isinstance(value, (list, tuple)) else value
    return flat


def check_trackers(loggers: Sequence[str], tracking: TrackingConfig, key: str) -> None:
    """Raise TrackerError for the first tracker of `loggers` that cannot run here (`key`: the config key)."""
    for name in loggers:
        if name not in LOGGERS:
            raise TrackerError(f"{key}: unknown tracker {name!r}; use any of {list(LOGGERS)}")
        if importlib.util.find_spec(name) is None:
            raise TrackerError(
                f"{key} names {name}, but its package is not installed: `.venv/bin/pip install {_PACKAGES[name]}` "
                f"(scripts/setup.sh installs it), or remove {name} from {key}"
            )
    if "wandb" in loggers and tracking.wandb_mode == "online" and not _wandb_logged_in():
        raise TrackerError(
            f"{key} names wandb in online mode, but no W&B credential is here: set WANDB_API_KEY (or run "
            "`wandb login`), or set tracking.wandb_mode=offline to write the run locally for `wandb sync`"
        )


def _wandb_logged_in() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    netrc = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return "api.wandb.ai" in netrc.read_text()
    except OSError:
        return False


def open_trackers(
    loggers: Sequence[str],
    run_dir: Path,
    tracking: TrackingConfig,
    run_name: str,
    config: Mapping[str, Any],
    resume_after: int | None = None,
    key: str = "train.loggers",
) -> list[Tracker]:
    """Every tracker of `loggers`, checked first (TrackerError), then opened, the configuration logged.
    `resume_after`: the checkpoint's iteration when a run resumes (None: a fresh run)."""
    check_trackers(loggers, tracking, key)
    run_dir.mkdir(parents=True, exist_ok=True)
    ids = _read_ids(run_dir) if resume_after is not None else {}
    trackers: list[Tracker] = []
    for name in dict.fromkeys(loggers):
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(run_dir / TENSORBOARD_DIR, resume_after))
        elif name == "wandb":
            trackers.append(WandbTracker(run_dir, tracking, run_name, ids.get("wandb")))
        else:
            trackers.append(MlflowTracker(run_dir, tracking, run_name, ids.get("mlflow")))
    _write_ids(run_dir, {t.name: t.run_id for t in trackers if isinstance(t, (WandbTracker, MlflowTracker))})
    for tracker in trackers:
        tracker.log_config(config)
    return trackers


def track_evaluation(
    loggers: Sequence[str],
    out: Path,
    tracking: TrackingConfig,
    config: Mapping[str, Any],
    cells: Sequence[Mapping[str, Any]],
    files: Sequence[Path],
) -> None:
    """An evaluation's results to each tracker of `loggers` (`evaluate.loggers`): the configuration, each
    cell's numbers as `<method>/<benchmark>/<figure>` at step 0, the table, and `files` (results.md, the plot)."""
    if not loggers:
        return
    trackers = Trackers(open_trackers(loggers, out, tracking, out.name, config, key="evaluate.loggers"))
    trackers.log_metrics(flatten_numbers({f"{c['method']}/{c['benchmark']}": c for c in cells}), 0)
    trackers.log_table("results", cells)
    trackers.log_files(files)
    trackers.close()


def _read_ids(run_dir: Path) -> dict[str, str]:
    try:
        return json.loads((run_dir / IDS_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _write_ids(run_dir: Path, ids: dict[str, str]) -> None:
    if ids:
        (run_dir / IDS_FILE).write_text(json.dumps(ids, indent=2) + "\n")


class Trackers:
    """Several trackers as one: a call reaches each; one that raises is reported once and dropped."""

    def __init__(self, trackers: Sequence[Tracker] = ()) -> None:
        self.trackers = list(trackers)

    def _each(self, what: str, *args: Any) -> None:
        for tracker in list(self.trackers):
            try:
                getattr(tracker, what)(*args)
            except Exception as err:  # noqa: BLE001 - a tracker's fault must not stop the run
                log.warning(
                    "tracker %s failed (%s: %s); the run goes on without it", tracker.name, type(err).__name__, err
                )
                self.trackers.remove(tracker)

    def log_metrics(self, values: Mapping[str, float], step: int, wall: float | None = None) -> None:
        """`values` at `step`; `wall`: when they were measured (seconds since the epoch; None: now)."""
        self._each("log_metrics", values, step, wall)

    def log_files(self, paths: Sequence[Path]) -> None:
        self._each("log_files", [Path(p) for p in paths if Path(p).is_file()])

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self._each("log_table", name, rows)

    def close(self) -> None:
        self._each("close")
        self.trackers = []


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, folder: Path, resume_after: int | None = None) -> None:
        # Imported here: torch is slow to import and readers of the log never need it.
        from torch.utils.tensorboard import SummaryWriter

        purge_step = None if resume_after is None else resume_after + 1
        self.writer = SummaryWriter(log_dir=str(folder), purge_step=purge_step)
        self.writer.flush()  # the purge marker counts even if the resumed run dies before logging

    def log_config(self, config: Mapping[str, Any]) -> None:
        text = "\n".join(f"    {k} = {v}" for k, v in flatten_config(config).items())
        self.writer.add_text("config", text)

    def log_metrics(self, values: Mapping[str, float], step: int, wall: float | None = None) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, global_step=step, walltime=wall)
        self.writer.flush()

    def log_files(self, paths: Sequence[Path]) -> None:
        import matplotlib.image

        for path in paths:
            if path.suffix == ".png":
                self.writer.add_image(path.stem, matplotlib.image.imread(path), dataformats="HWC")
            elif path.suffix in (".md", ".txt"):
                self.writer.add_text(path.stem, path.read_text())
        self.writer.flush()

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            header = list(rows[0])
            lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(str(r.get(h, "")) for h in header) + " |" for r in rows]
            self.writer.add_text(name, "\n".join(lines))
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    name = "wandb"

    def __init__(self, run_dir: Path, tracking: TrackingConfig, run_name: str, run_id: str | None) -> None:
        import wandb

        self._wandb = wandb
        self.run = wandb.init(
            project=tracking.wandb_project,
            entity=tracking.wandb_entity,
            name=run_name,
            dir=str(run_dir),
            mode=tracking.wandb_mode,
            id=run_id,
            resume="allow" if run_id else None,
            settings=wandb.Settings(silent=True, console="off"),
        )
        self.run_id = self.run.id

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.run.config.update(dict(config), allow_val_change=True)

    def log_metrics(self, values: Mapping[str, float], step: int, wall: float | None = None) -> None:
        self.run.log(dict(values), step=step)

    def log_files(self, paths: Sequence[Path]) -> None:
        images = {p.stem: self._wandb.Image(str(p)) for p in paths if p.suffix == ".png"}
        if images:
            self.run.log(images)
        for path in paths:
            if path.suffix != ".png":
                self.run.save(str(path), base_path=str(path.parent), policy="now")

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            columns: list[str | int] = list(rows[0])
            table = self._wandb.Table(columns=columns, data=[[r.get(str(c)) for c in columns] for r in rows])
            self.run.log({name: table})

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    name = "mlflow"

    def __init__(self, run_dir: Path, tracking: TrackingConfig, run_name: str, run_id: str | None) -> None:
        uri = tracking.mlflow_tracking_uri or (run_dir / "mlruns").resolve().as_uri()
        if uri.startswith("file:") or "://" not in uri:
            # A run's own local store: MLflow 3 asks file stores to opt in (see the module's docstring).
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri)
        self.uri = uri
        if run_id is None:
            experiment = self.client.get_experiment_by_name(tracking.mlflow_experiment)
            experiment_id = (
                experiment.experiment_id
                if experiment is not None
                else self.client.create_experiment(tracking.mlflow_experiment)
            )
            run_id = self.client.create_run(experiment_id, run_name=run_name).info.run_id
        self.run_id = run_id

    def log_config(self, config: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        params = [Param(k, str(v)[:6000]) for k, v in flatten_config(config).items()]
        existing = self.client.get_run(self.run_id).data.params
        fresh = [p for p in params if p.key not in existing]  # a resumed run's params are already there
        for start in range(0, len(fresh), 100):  # MLflow takes at most 100 params a batch
            self.client.log_batch(self.run_id, params=fresh[start : start + 100])

    def log_metrics(self, values: Mapping[str, float], step: int, wall: float | None = None) -> None:
        import time

        from mlflow.entities import Metric

        stamp = int((time.time() if wall is None else wall) * 1000)
        metrics = [Metric(k, float(v), stamp, step) for k, v in values.items()]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def log_files(self, paths: Sequence[Path]) -> None:
        for path in paths:
            self.client.log_artifact(self.run_id, str(path))

    def log_table(self, name: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.client.log_dict(self.run_id, {"rows": [dict(r) for r in rows]}, f"{name}.json")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)
