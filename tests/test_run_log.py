"""conductor_rl.run.log: metrics.jsonl and TensorBoard scalars, fresh and resumed runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conductor_rl.run.log import (
    METRICS_FILE,
    MetricsRecordError,
    RunDirError,
    RunLog,
    flatten_numbers,
    records,
)
from conductor_rl.run.trackers import TensorBoardTracker, Trackers


def metrics(iteration: int, reward: float = 0.5) -> dict:
    return {
        "iteration": iteration,
        "reward_mean": reward,
        "reward_std": 0.2,
        "accuracy": 0.5,
        "rollouts": 32,
        "worker_usage": {"sim-math-expert": 0.4, "sim-generalist": 0.6},
        "final_worker_by_domain": {"math": {"sim-math-expert": 0.7, "sim-generalist": 0.3}},
        "note": "a string, not a scalar",
        "clipped": True,
        "weights_version": iteration + 1,
        "wall_time": 1_764_420_000.0 + 10 * iteration,
    }


def tensorboard(run_dir, resume_after: int | None = None) -> Trackers:
    return Trackers([TensorBoardTracker(run_dir / "tensorboard", resume_after)])


def scalars(run_dir) -> EventAccumulator:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return events


def steps_and_values(events: EventAccumulator, tag: str) -> list[tuple[int, float]]:
    return [(e.step, e.value) for e in events.Scalars(tag)]


def test_log_appends_json_lines_that_read_back(tmp_path):
    with RunLog(tmp_path) as log:
        for i in range(3):
            log.log(metrics(i, reward=0.1 * i))
    lines = (tmp_path / METRICS_FILE).read_text().splitlines()
    assert len(lines) == 3
    assert json.loads(lines[2])["reward_mean"] == pytest.approx(0.2)
    assert records(tmp_path) == [metrics(i, reward=0.1 * i) for i in range(3)]
    assert not (tmp_path / "tensorboard").exists()


def test_numbers_become_tensorboard_scalars_with_flattened_names(tmp_path):
    record = metrics(0) | {"grad_norm": math.nan, "new_family": {"a": {"b": 2}}, "lr": np.float32(1e-5)}
    with RunLog(tmp_path, tensorboard(tmp_path)) as log:
        log.log(record)
        log.log(metrics(1, reward=0.9))
    events = scalars(tmp_path)
    tags = set(events.Tags()["scalars"])
    assert {
        "reward_mean",
        "accuracy",
        "rollouts",
        "weights_version",
        "lr",
        "grad_norm",
        "worker_usage/sim-math-expert",
        "worker_usage/sim-generalist",
        "final_worker_by_domain/math/sim-math-expert",
        "new_family/a/b",
    } <= tags
    # strings and bools are not scalars; iteration and wall_time are each event's step and clock
    assert not tags & {"note", "clipped", "iteration", "wall_time"}
    assert steps_and_values(events, "reward_mean") == [(0, pytest.approx(0.5)), (1, pytest.approx(0.9))]
    assert math.isnan(events.Scalars("grad_norm")[0].value)
    assert events.Scalars("reward_mean")[1].wall_time == pytest.approx(1_764_420_010.0)
    # numpy values are written as plain JSON numbers
    assert records(tmp_path)[0]["lr"] == pytest.approx(1e-5)


def test_flatten_numbers_skips_non_numbers():
    flat = flatten_numbers({"a": 1, "b": True, "c": "x", "d": {"e": 0.5, "f": None, "g": {"h": 3}}, "i": [1, 2]})
    assert flat == {"a": 1.0, "d/e": 0.5, "d/g/h": 3.0}


def test_fresh_run_refuses_a_folder_that_holds_a_run(tmp_path):
    with RunLog(tmp_path) as log:
        log.log(metrics(0))
    with pytest.raises(RunDirError, match="new output folder.*--resume"):
        RunLog(tmp_path)
    assert records(tmp_path) == [metrics(0)]  # untouched


def test_folder_without_metrics_is_fine_for_a_fresh_run(tmp_path):
    RunLog(tmp_path).close()  # logs nothing, leaves no metrics.jsonl
    assert not (tmp_path / METRICS_FILE).exists()
    RunLog(tmp_path).close()


def test_resume_drops_later_iterations_from_both_logs(tmp_path):
    with RunLog(tmp_path, tensorboard(tmp_path)) as log:
        for i in range(6):
            log.log(metrics(i, reward=0.1 * i))
    with open(tmp_path / METRICS_FILE, "a") as f:
        f.write('{"iteration": 6, "reward_me')  # the crash tore the last line
    with RunLog(tmp_path, tensorboard(tmp_path, resume_after=2), resume_after=2) as log:
        assert [r["iteration"] for r in records(tmp_path)] == [0, 1, 2]
        assert log.last_iteration == 2
        assert [step for step, _ in steps_and_values(scalars(tmp_path), "reward_mean")] == [0, 1, 2]
        log.log(metrics(3, reward=0.9))
        log.log(metrics(4, reward=0.95))
    assert [r["iteration"] for r in records(tmp_path)] == [0, 1, 2, 3, 4]
    assert [r["reward_mean"] for r in records(tmp_path)][3:] == [0.9, 0.95]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # TensorBoard: the first run's iterations 3-5 are purged, the resumed ones remain
    assert steps_and_values(scalars(tmp_path), "reward_mean") == [
        (0, pytest.approx(0.0)),
        (1, pytest.approx(0.1)),
        (2, pytest.approx(0.2)),
        (3, pytest.approx(0.9)),
        (4, pytest.approx(0.95)),
    ]


def test_resume_refuses_iterations_already_in_the_log(tmp_path):
    with RunLog(tmp_path) as log:
        log.log(metrics(0))
        log.log(metrics(1))
        with pytest.raises(MetricsRecordError, match="not after"):
            log.log(metrics(1))
    with RunLog(tmp_path, resume_after=0) as log:
        with pytest.raises(MetricsRecordError, match="resume_after"):
            log.log(metrics(0))
        log.log(metrics(1, reward=0.7))
    assert [(r["iteration"], r["reward_mean"]) for r in records(tmp_path)] == [(0, 0.5), (1, 0.7)]


def test_resume_after_minus_one_clears_the_log(tmp_path):
    with RunLog(tmp_path) as log:
        log.log(metrics(0))
    RunLog(tmp_path, resume_after=-1).close()
    assert records(tmp_path) == []


def test_resume_without_metrics_starts_a_log(tmp_path):
    with RunLog(tmp_path / "new", resume_after=4) as log:
        log.log(metrics(5))
    assert [r["iteration"] for r in records(tmp_path / "new")] == [5]


def test_records_skip_a_torn_last_line_but_not_a_corrupt_middle_one(tmp_path):
    path = tmp_path / METRICS_FILE
    path.write_text('{"iteration": 0}\n{"iteration": 1}\n{"iterat')
    assert records(tmp_path) == [{"iteration": 0}, {"iteration": 1}]
    path.write_text('{"iteration": 0}\n{"iterat\n{"iteration": 2}\n')
    with pytest.raises(RunDirError, match="line 2"):
        records(tmp_path)
    with pytest.raises(FileNotFoundError, match="training run"):
        records(tmp_path / "elsewhere")


def test_bad_records_and_closed_log_raise(tmp_path):
    log = RunLog(tmp_path)
    with pytest.raises(MetricsRecordError, match="iteration"):
        log.log({"reward_mean": 1.0})
    with pytest.raises(MetricsRecordError, match="iteration"):
        log.log({"iteration": "3"})
    log.close()
    log.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        log.log(metrics(0))
    with pytest.raises(ValueError, match="resume_after"):
        RunLog(tmp_path, resume_after=-2)
