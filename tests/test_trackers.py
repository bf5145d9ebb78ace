"""conductor_rl/run/trackers.py: TensorBoard, Weights & Biases (offline) and MLflow (a local file store)
get what the run logged, read back from each tool's own files; a missing package or credential stops
a run before any tracker opens; a resumed run continues its tracker runs; a failing tracker is dropped."""

from __future__ import annotations

import glob
import json
import struct
import time
from pathlib import Path

import matplotlib
import pytest

from conductor_rl.config import ConfigError, TrackingConfig
from conductor_rl.run import trackers as tr
from conductor_rl.run.log import RunLog

matplotlib.use("Agg")

OFFLINE = TrackingConfig(wandb_mode="offline", wandb_project="conductor-rl-tests")
CONFIG = {"train": {"iterations": 2, "loggers": ["tensorboard", "wandb", "mlflow"]}, "conductor": {"seed": 3}}


def wandb_records(run_dir: Path, wait_s: float = 60.0) -> list:
    """The records of W&B's offline run file, once its service has written the run's last ("exit")
    record: it writes asynchronously, and `finish()` may return before the file is complete."""
    deadline = time.monotonic() + wait_s
    while True:
        records = read_wandb_file(run_dir)
        if (records and records[-1].WhichOneof("record_type") == "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def read_wandb_file(run_dir: Path) -> list:
    """The records of W&B's offline run file: a 7-byte header (":W&B", magic, version), then LevelDB-log
    blocks of 32 KiB, each record a 7-byte header (checksum, length, type) and a protobuf `Record`."""
    from wandb.proto.wandb_internal_pb2 import Record

    [path] = glob.glob(str(run_dir / "wandb" / "*run-*" / "run-*.wandb"))
    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    records, pending, at = [], b"", 7
    while at + 7 <= len(data):
        block_left = 32768 - at % 32768
        if block_left < 7:  # the rest of a block too short for a header is padding
            at += block_left
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[at : at + 7])
        if length == 0 and kind == 0:
            break
        pending += data[at + 7 : at + 7 + length]
        at += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(run_dir: Path) -> list[dict]:
    rows = []
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def wandb_config(run_dir: Path) -> dict:
    config = {}
    for record in wandb_records(run_dir):
        if record.WhichOneof("record_type") == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update})
    return config


def mlflow_run(run_dir: Path):
    from mlflow.tracking import MlflowClient

    ids = json.loads((run_dir / tr.IDS_FILE).read_text())
    client = MlflowClient(tracking_uri=(run_dir / "mlruns").resolve().as_uri())
    return client, ids["mlflow"]


def plot(path: Path) -> Path:
    import matplotlib.pyplot as plt

    plt.figure(figsize=(2, 2))
    plt.plot([0, 1], [0, 1])
    plt.savefig(path)
    plt.close()
    return path


def test_all_three_trackers_hold_what_the_run_logged(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.chdir(tmp_path)  # W&B writes nothing outside its run folder
    opened = tr.open_trackers(["tensorboard", "wandb", "mlflow"], tmp_path, OFFLINE, "run-a", CONFIG)
    trackers = tr.Trackers(opened)
    with RunLog(tmp_path, trackers) as log:
        log.log({"iteration": 0, "reward_mean": 0.5, "worker_usage": {"a": 0.25}, "note": "text"})
        log.log({"iteration": 1, "reward_mean": 0.75, "worker_usage": {"a": 0.5}})
    (tmp_path / "report.md").write_text("# Training report\n")
    trackers.log_files([tmp_path / "report.md", plot(tmp_path / "reward.png")])
    trackers.log_table("results", [{"method": "single:a", "accuracy": 0.5}, {"method": "moa", "accuracy": 0.75}])
    trackers.close()

    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward_mean")] == [(0, 0.5), (1, 0.75)]
    assert [e.value for e in events.Scalars("worker_usage/a")] == [0.25, 0.5]
    assert "reward" in events.Tags()["images"] and "note" not in events.Tags()["scalars"]

    history = wandb_history(tmp_path)
    metrics = [row for row in history if "reward_mean" in row]
    assert [(r["_step"], r["reward_mean"], r["worker_usage/a"]) for r in metrics] == [(0, 0.5, 0.25), (1, 0.75, 0.5)]
    logged = {key.split("/")[0] for row in history for key in row}
    assert {"results", "reward"} <= logged  # the table and the plot
    assert wandb_config(tmp_path)["train"] == CONFIG["train"]
    run_folder = Path(glob.glob(str(tmp_path / "wandb" / "offline-run-*"))[0])
    assert (run_folder / "files" / "report.md").exists()

    client, run_id = mlflow_run(tmp_path)
    run = client.get_run(run_id)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "reward_mean")] == [(0, 0.5), (1, 0.75)]
    assert run.data.params["conductor.seed"] == "3" and run.info.status == "FINISHED"
    assert run.data.params["train.loggers"] == '["tensorboard", "wandb", "mlflow"]'
    assert {a.path for a in client.list_artifacts(run_id)} == {"report.md", "reward.png", "results.json"}


def test_a_resumed_run_continues_its_tracker_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = tr.Trackers(tr.open_trackers(["wandb", "mlflow"], tmp_path, OFFLINE, "run-b", CONFIG))
    first.log_metrics({"reward_mean": 0.5}, 0)
    first.close()
    ids = json.loads((tmp_path / tr.IDS_FILE).read_text())
    again = tr.Trackers(tr.open_trackers(["wandb", "mlflow"], tmp_path, OFFLINE, "run-b", CONFIG, resume_after=0))
    again.log_metrics({"reward_mean": 0.75}, 1)
    again.close()
    assert json.loads((tmp_path / tr.IDS_FILE).read_text()) == ids
    client, run_id = mlflow_run(tmp_path)
    assert [m.value for m in client.get_metric_history(run_id, "reward_mean")] == [0.5, 0.75]
    assert len(glob.glob(str(tmp_path / "wandb" / "offline-run-*"))) == 2  # W&B offline: one folder per start
    folders = glob.glob(str(tmp_path / "wandb" / "offline-run-*"))
    assert all(ids["wandb"] in Path(p).name for p in folders)  # the same W&B run id


def test_a_missing_package_or_credential_stops_before_any_tracker_opens(tmp_path, monkeypatch):
    real = tr.importlib.util.find_spec
    monkeypatch.setattr(tr.importlib.util, "find_spec", lambda name: None if name == "mlflow" else real(name))
    with pytest.raises(tr.TrackerError, match=r"train.loggers names mlflow.*pip install mlflow") as err:
        tr.open_trackers(["tensorboard", "mlflow"], tmp_path, OFFLINE, "run", CONFIG)
    assert isinstance(err.value, ConfigError) and not (tmp_path / "tensorboard").exists()
    monkeypatch.setattr(tr.importlib.util, "find_spec", real)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    with pytest.raises(tr.TrackerError, match="WANDB_API_KEY.*tracking.wandb_mode=offline"):
        tr.check_trackers(["wandb"], TrackingConfig(), "evaluate.loggers")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    tr.check_trackers(["wandb"], TrackingConfig(), "evaluate.loggers")  # a key is all it checks offline of W&B


def test_a_failing_tracker_is_dropped_and_the_run_goes_on(tmp_path, caplog):
    class Broken:
        name = "broken"

        def log_metrics(self, values, step, wall=None):
            raise OSError("disk full")

        def close(self):
            raise AssertionError("a dropped tracker is not called again")

    kept = tr.TensorBoardTracker(tmp_path / "tensorboard")
    trackers = tr.Trackers([Broken(), kept])
    with RunLog(tmp_path, trackers) as log:
        log.log({"iteration": 0, "reward_mean": 0.5})
        log.log({"iteration": 1, "reward_mean": 0.6})
    assert trackers.trackers == [kept] and "tracker broken failed (OSError: disk full)" in caplog.text
    trackers.close()


def test_an_evaluation_reaches_the_trackers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = [{"method": "moa", "benchmark": "math500", "accuracy": 0.5, "cost_usd": 0.01, "steps": None}]
    (tmp_path / "results.md").write_text("# Evaluation results\n")
    tr.track_evaluation(["mlflow"], tmp_path, OFFLINE, CONFIG, cells, [tmp_path / "results.md"])
    client, run_id = mlflow_run(tmp_path)
    assert client.get_metric_history(run_id, "moa/math500/accuracy")[0].value == 0.5
    assert {a.path for a in client.list_artifacts(run_id)} == {"results.md", "results.json"}
    tr.track_evaluation([], tmp_path / "none", OFFLINE, CONFIG, cells, [])  # no loggers: nothing opens
    assert not (tmp_path / "none").exists()
