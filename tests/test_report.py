"""conductor_rl.run.report: the summary numbers, the plots and report.md."""

from __future__ import annotations

import json
import re
import struct
import warnings

import matplotlib
import pytest
from matplotlib.figure import Figure

from conductor_rl.run import report
from conductor_rl.run.log import METRICS_FILE, RunLog
from conductor_rl.run.report import ReportError, summarize, write_report

pytestmark = pytest.mark.light  # starts no Ray, vLLM or learner: runs beside the heavy tests (conftest.py)

PHASES = {"time_generate_s": 3.0, "time_execute_s": 1.0, "time_grade_s": 0.5, "time_learn_s": 20.0, "time_sync_s": 1.5}


def metrics(i: int) -> dict:
    expert = min(0.2 + 0.1 * i, 1.0)
    return {
        "iteration": i,
        "reward_mean": 0.5 + 0.05 * i,
        "reward_std": 0.2,
        "accuracy": 0.3 + 0.1 * i,
        "format_failure_rate": max(0.3 - 0.1 * i, 0.0),
        "infra_error_rate": 0.0,
        "steps_per_plan": 1.8,
        "rollouts": 32,
        "kept_rollouts": 24,
        "informative_groups": 3,
        "groups": 4,
        "conductor_tokens": 1000 + i,
        "worker_input_tokens": 5000,
        "worker_output_tokens": 4000,
        "cost_usd": 0.01,
        "cost_total_usd": 0.01 * (i + 1),
        "worker_usage": {"sim-math-expert": expert, "sim-generalist": 1 - expert},
        "final_worker_by_domain": {
            "math": {"sim-math-expert": expert, "sim-generalist": 1 - expert},
            "mmlu": {"sim-generalist": 0.9, "sim-math-expert": 0.1},
        },
        "best_worker_share": expert,
        "loss": 0.01,
        "grad_norm": 0.3,
        "clip_fraction": 0.0,
        "lr": 1e-5,
        "weights_version": i + 1,
        **PHASES,
        "time_iteration_s": 27.0 + i,
        "wall_time": 1_764_420_000.0 + 30 * i,
    }


def log_run(run_dir, records) -> None:
    with RunLog(run_dir) as log:
        for record in records:
            log.log(record)


def png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_summarize_means_first_and_last_three():
    summary = summarize([metrics(i) for i in range(6)])
    assert summary["iterations"] == 6
    assert summary["first_reward"] == pytest.approx(0.55)  # iterations 0-2
    assert summary["last_reward"] == pytest.approx(0.70)  # iterations 3-5
    assert summary["reward_gain"] == pytest.approx(0.15)
    assert summary["first_accuracy"] == pytest.approx(0.4) and summary["last_accuracy"] == pytest.approx(0.7)
    assert summary["total_cost_usd"] == pytest.approx(0.06)
    assert summary["total_conductor_tokens"] == 6015
    assert summary["mean_iteration_s"] == pytest.approx(29.5)
    assert summary["phase_means"] == pytest.approx(
        {"generate": 3.0, "execute": 1.0, "grade": 0.5, "learn": 20.0, "sync": 1.5}
    )
    json.dumps(summary)  # benchmarks print it


def test_summarize_one_iteration_and_missing_keys():
    one = summarize([metrics(0)])
    assert one["first_reward"] == one["last_reward"] == pytest.approx(0.5) and one["reward_gain"] == 0
    bare = summarize([{"iteration": 0}, {"iteration": 1, "cost_usd": 0.5, "reward_mean": None}])
    assert (bare["first_reward"], bare["reward_gain"], bare["mean_iteration_s"], bare["phase_means"]) == (
        None,
        None,
        None,
        {},
    )
    assert bare["total_cost_usd"] == 0.5  # no running total logged: the iterations' costs are added up
    json.dumps(bare)
    with pytest.raises(ReportError, match="no iteration"):
        summarize([])
    with pytest.raises(ReportError, match="'iteration'"):
        summarize([{"reward_mean": 1.0}])


@pytest.mark.slow
def test_report_has_tables_and_plots(tmp_path):
    log_run(tmp_path, [metrics(i) for i in range(6)])
    rcparams = dict(matplotlib.rcParams)
    backend = matplotlib.get_backend()
    path = write_report(
        tmp_path, title="Tiny run", extra={"config": "configs/tiny.yaml", "seed": 7, "ended": "budget | done"}
    )
    assert matplotlib.get_backend() == backend and dict(matplotlib.rcParams) == rcparams

    text = path.read_text()
    assert path == tmp_path / "report.md" and text.startswith("# Tiny run\n")
    assert "| reward, mean of first 3 | 0.550 |" in text
    assert "| reward gain (last − first) | +0.150 |" in text
    assert "| total worker cost (USD) | 0.0600 |" in text
    assert "| mean time: learn (s) | 20.00 |" in text
    assert "## Final worker choice (iteration 5)" in text
    assert "| math | sim-math-expert | 30% | 70% |" in text  # columns: sim-generalist, sim-math-expert
    assert "| mmlu | sim-generalist | 90% | 10% |" in text
    assert "| seed | 7 |" in text and "| ended | budget \\| done |" in text

    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links == [
        f"report/{name}.png" for name in ("reward", "accuracy", "worker_usage", "cost", "best_worker", "phases")
    ]
    for link in links:
        width, height = png_size(tmp_path / link)
        assert width > 300 and height > 200
        assert (tmp_path / link).stat().st_size > 5000


def test_worker_usage_legend_names_the_workers():
    records = [metrics(i) for i in range(3)]
    figure = Figure()
    report._plot_worker_usage(figure, records, [0, 1, 2])
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert labels == ["sim-generalist", "sim-math-expert"]


def test_report_of_one_bare_iteration(tmp_path):
    log_run(tmp_path, [{"iteration": 0, "reward_mean": 0.5, "accuracy": 0.25, "cost_usd": 0.01}])
    stale = tmp_path / "report" / "worker_usage.png"
    stale.parent.mkdir()
    stale.write_bytes(b"from an older report")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = write_report(tmp_path).read_text()
    assert text.startswith("# Training report\n")
    assert "| iterations run | 1 (0–0) |" in text and "| reward gain (last − first) | +0.000 |" in text
    assert "| mean iteration time (s) | n/a |" in text
    assert "Final worker choice" not in text and "## Run" not in text
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["accuracy.png", "cost.png", "reward.png"]
    for name in ("accuracy", "cost", "reward"):
        assert f"](report/{name}.png)" in text
        png_size(tmp_path / "report" / f"{name}.png")


def test_missing_or_empty_metrics_raise_report_error(tmp_path):
    with pytest.raises(ReportError, match="no metrics.jsonl"):
        write_report(tmp_path)
    (tmp_path / METRICS_FILE).write_text('{"iteration": 0, "rew')  # only a torn line
    with pytest.raises(ReportError, match="no complete record"):
        write_report(tmp_path)
    assert not (tmp_path / "report.md").exists()


@pytest.mark.slow
def test_report_of_one_full_iteration_draws_every_plot_without_warnings(tmp_path):
    log_run(tmp_path, [metrics(0)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        text = write_report(tmp_path).read_text()
    assert "| reward gain (last − first) | +0.000 |" in text
    assert len(list((tmp_path / "report").glob("*.png"))) == 6


def test_asynchronous_records_report_the_overlap_and_waits_apart_from_the_phases(tmp_path):
    """train.max_staleness >= 1 logs the learner's and the generators' waits and the overlap: the
    summary keeps them apart from the phases (a wait is not work), the report names them, and the
    phase plot is drawn."""
    records = [
        {**metrics(i), "overlap": 0.5 + 0.1 * i, "time_wait_learner_s": 2.0, "time_wait_generate_s": 0.0}
        for i in range(3)
    ]
    summary = summarize(records)
    assert set(summary["phase_means"]) == {"generate", "execute", "grade", "learn", "sync"}
    assert summary["mean_overlap"] == pytest.approx(0.6)
    assert summary["wait_means"] == pytest.approx({"wait_learner": 2.0, "wait_generate": 0.0})
    assert summarize([metrics(0)])["mean_overlap"] is None  # synchronous
    log_run(tmp_path, records)
    text = write_report(tmp_path).read_text()
    assert "mean overlap of phases (asynchronous)" in text and "learner waiting for rollouts" in text
    assert png_size(tmp_path / "report" / "phases.png")[0] > 0


def test_summary_pins_the_learning_line_the_routing_and_the_plans_of_the_first_and_last_iteration():
    records = [{**metrics(i), "expected_reward_mean": 0.80 + 0.02 * i + (0.005 if i % 2 else 0.0)} for i in range(6)]
    summary = summarize(records)
    # gain of the last three over the first three, with the standard error of that difference
    head, tail = [0.80, 0.825, 0.84], [0.865, 0.88, 0.905]
    assert summary["expected_reward_gain"] == pytest.approx(sum(tail) / 3 - sum(head) / 3)
    assert summary["expected_reward_gain_se"] == pytest.approx(report.gain_se(head, tail))
    spread = sum((v - sum(head) / 3) ** 2 for v in head) / 2 / 3 + sum((v - sum(tail) / 3) ** 2 for v in tail) / 2 / 3
    assert report.gain_se(head, tail) == pytest.approx(spread**0.5)
    assert summary["reward_gain_se"] == pytest.approx((2 * 0.05**2 / 3) ** 0.5)  # rewards 0.05 apart in each window
    assert "expected reward (exact, simulated pool)" in summary["learning"]
    assert "more than 2 s.e.: learning shows" in summary["learning"]
    assert summary["routing_first"] == "iteration 0: math: sim-generalist 80%, sim-math-expert 20%; mmlu: " + (
        "sim-generalist 90%, sim-math-expert 10%"
    )
    assert summary["routing_last"].startswith("iteration 5: math: sim-math-expert 70%, sim-generalist 30%")
    flat = summarize(
        [{**metrics(0), "iteration": i, "expected_reward_mean": 0.8 + (0.01 if i % 2 else 0)} for i in range(6)]
    )
    assert "no learning shown" in flat["learning"]
    assert summarize(records[:4])["learning"] is None  # the two windows would overlap
    # without exact expectations (a real pool) the sampled reward is the curve
    sampled = summarize([metrics(i) for i in range(6)])
    assert sampled["learning"].startswith("reward of the first 3 iterations 0.550, of the last 3 0.700")
    assert sampled["first_expected_reward"] is None and sampled["expected_reward_gain_se"] is None
    json.dumps(summary)
