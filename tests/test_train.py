"""End-to-end tests of the training job (jobs/train.py) on a real local Ray cluster.

Every run is the embedded default (configs/local.yaml: simulated workers) made
small: the tiny-qwen2 Conductor, 2 questions x 4 rollouts an iteration, 2
iterations. A system start (vLLM engine, DeepSpeed learner, worker and grader
actors) is most of a run's time, so the runs are shared by module fixtures:

- `straight_run`: two iterations in one go (the reference);
- `sigterm_run`: `python -m jobs.train` in a subprocess, sent SIGTERM as soon as
  it logs iteration 0, so that it stops in iteration 1 (abandoned, redone on resume);
- `resumed_run`: `train(..., resume=True)` on the SIGTERM run's folder.

The resumed run must draw, iteration by iteration, the questions the straight
run drew, sample the same plans, land on the same weights, and log every
iteration once. (The interrupted run keeps train.iterations: the learning-rate
schedule spans train.iterations, so a run resumed with more iterations learns
with other rates from then on.) Bad input must fail before any actor starts; a
budget stops the run with a checkpoint; killed worker and grader actors are
restarted and the iteration completes. `light_system` stands in for the
generator, learner and graders where only train()'s own bookkeeping is tested.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conductor_rl.config import load_config
from conductor_rl.data.question import Question
from conductor_rl.data.stream import QuestionStream
from conductor_rl.run.log import records
from conductor_rl.run.traces import read_traces, trace_files
from tests.light_system import FakeGenerators, FakeLearners

REPO = Path(__file__).resolve().parent.parent
ITERATIONS = 2
QUESTIONS, ROLLOUTS = 2, 4
SUBSETS = "train.worker_subset=[1,2]"  # the shared runs draw rosters of 1-2 of the 3 workers (adaptive pools)
# The shared runs start with two warm-start steps (train.warm_start); the other runs with none.
WARM = (
    "train.warm_start.steps=2",
    "train.warm_start.questions_per_step=2",
    "train.warm_start.demonstrations_per_question=2",
)
# The straight run writes to every tracker, W&B offline and MLflow in a local file store (no network).
TRACKERS = ("train.loggers=[tensorboard, wandb, mlflow]", "tracking.wandb_mode=offline")
# A hang guard, not a speed check: a test whose module fixture starts a run waits for it,
# and on a loaded 2-core machine a run's first iteration alone has taken over five minutes.
HANG_GUARD_S = 1500
pytestmark = pytest.mark.timeout(2 * HANG_GUARD_S)
FAST = [
    "conductor.model=tiny-qwen2",
    f"train.rollouts_per_question={ROLLOUTS}",
    f"train.questions_per_iteration={QUESTIONS}",
    "conductor.max_new_tokens=64",
    "train.progress=false",
    "train.warm_start.steps=0",
    # Fits the session's 8-CPU test cluster (tests/conftest.py) next to the grader (1 CPU) and the workers
    # (0.25 each); the subprocess run uses the same, so that every run computes with the same thread counts.
    "cluster.generator={CPU: 1}",
    "cluster.learner={CPU: 1}",
]


def overrides(out: Path, *extra: str) -> list[str]:
    return [*FAST, f"train.output_dir={out}", *extra]


def make_config(out: Path, *extra: str):
    return load_config(None, overrides(out, *extra))


def subprocess_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local cluster, never ours
    env.update(RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def logged_iterations(run_dir: Path) -> list[int]:
    return [r["iteration"] for r in records(run_dir)]


def questions_by_iteration(run_dir: Path) -> dict[int, list[tuple[str, tuple[int, ...]]]]:
    """{iteration: (question id, the workers its prompt listed) of each group, in group order}, from the
    Parquet traces."""
    groups: dict[int, dict[int, set]] = {}
    for row in read_traces(run_dir):
        groups.setdefault(row["iteration"], {}).setdefault(row["group"], set()).add(
            (row["question_id"], tuple(row["roster"]))
        )
    out = {}
    for iteration, by_group in groups.items():
        assert all(len(ids) == 1 for ids in by_group.values()), f"a group mixes questions: {by_group}"
        out[iteration] = [next(iter(by_group[g])) for g in sorted(by_group)]
    return out


def rollouts_of(run_dir: Path, iteration: int) -> dict[tuple[int, int], dict]:
    return {(r["group"], r["sample"]): r for r in read_traces(run_dir, [iteration])}


def latest_state(run_dir: Path) -> tuple[Path, dict]:
    found = sorted((run_dir / "checkpoints").glob("ckpt-*/state.json"))
    assert found, f"no complete checkpoint in {run_dir / 'checkpoints'}: {list((run_dir / 'checkpoints').glob('*'))}"
    return found[-1].parent, json.loads(found[-1].read_text())


# ---------------------------------------------------------------- the question stream


def sample_questions(n: int) -> list[Question]:
    return [
        Question(
            id=f"q{i}", question=f"question {i}?", reference=str(i), domain="math", answer_kind="numeric", source="test"
        )
        for i in range(n)
    ]


def test_question_stream_reshuffles_every_epoch_and_draws_each_question_once_per_epoch():
    questions = sample_questions(10)
    stream = QuestionStream(questions, seed=3)
    epochs = [[q.id for q in stream.take(5) + stream.take(5)] for _ in range(4)]
    for order in epochs:
        assert sorted(order) == sorted(q.id for q in questions)
    assert len({tuple(order) for order in epochs}) == 4, f"every epoch must have its own order: {epochs}"
    assert epochs[0] != [q.id for q in questions], "the first epoch must be shuffled too"
    again = QuestionStream(questions, seed=3)
    assert [q.id for q in again.take(40)] == [i for epoch in epochs for i in epoch], (
        "the order is a function of the seed"
    )
    assert [q.id for q in QuestionStream(questions, seed=4).take(10)] != epochs[0]


@pytest.mark.parametrize("batches_done", [0, 1, 3, 4, 7])
def test_question_stream_resumed_at_its_cursor_draws_the_batches_that_would_have_come_next(batches_done):
    questions = sample_questions(7)  # batches of 3 cross epoch boundaries
    straight = QuestionStream(questions, seed=11)
    taken = [straight.take(3) for _ in range(batches_done)]
    cursor = straight.cursor
    assert cursor == 3 * batches_done
    straight.peek(3)
    assert straight.cursor == cursor, "peek draws nothing"
    expected = [straight.take(3) for _ in range(3)]
    resumed = QuestionStream(questions, seed=11, cursor=cursor)
    assert [resumed.take(3) for _ in range(3)] == expected
    assert len(taken) == batches_done


def test_a_balanced_stream_gives_every_batch_each_domain_equally_and_resumes_at_its_cursor():
    math = sample_questions(7)
    mmlu = [
        Question(id=f"k{i}", question=f"fact {i}?", reference="A", domain="mmlu", answer_kind="choice", source="test")
        for i in range(3)
    ]
    questions = math[:2] + mmlu + math[2:]  # 7 math, 3 mmlu: unbalanced, and not sorted by domain
    stream = QuestionStream(questions, seed=5, balance_domains=True)
    batches = [stream.take(4) for _ in range(6)]
    for batch in batches:
        assert sorted(q.domain for q in batch) == ["math", "math", "mmlu", "mmlu"], [q.id for q in batch]
    drawn_mmlu = [q.id for b in batches for q in b if q.domain == "mmlu"]
    for epoch in range(4):  # each domain is reshuffled per its own epoch and drawn once per epoch
        assert sorted(drawn_mmlu[3 * epoch : 3 * epoch + 3]) == ["k0", "k1", "k2"]
    assert len({tuple(drawn_mmlu[3 * e : 3 * e + 3]) for e in range(4)}) > 1
    resumed = QuestionStream(questions, seed=5, cursor=12, balance_domains=True)
    assert [resumed.take(4) for _ in range(3)] == batches[3:]
    unbalanced = QuestionStream(questions, seed=5)
    assert any(sorted(q.domain for q in unbalanced.take(4)) != ["math", "math", "mmlu", "mmlu"] for _ in range(6))


def test_question_stream_rejects_an_empty_set_and_a_negative_cursor():
    with pytest.raises(ValueError, match="empty.*data.questions"):
        QuestionStream([], seed=0)
    with pytest.raises(ValueError, match="cursor"):
        QuestionStream(sample_questions(2), cursor=-1)


# ---------------------------------------------------------------- bad input fails before any actor starts


def run_main(argv: list[str]) -> SystemExit:
    from jobs.train import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value


@pytest.mark.slow
def test_invalid_config_exits_nonzero_at_once_naming_the_key(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "jobs.train", *overrides(out, "train.iterations=0"), "--json"],
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode != 0
    assert "train.iterations" in proc.stderr and "greater than or equal to 1" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Ray instance" not in proc.stderr and "starting" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == ""
    assert not out.exists(), "nothing may be written for an invalid configuration"


def test_unknown_key_fails_before_any_actor_starts(tmp_path, no_cluster):
    out = tmp_path / "run"
    err = run_main([*overrides(out, "train.iteratons=3")])
    assert err.code not in (0, None)
    assert "train.iteratons" in str(err.code) and "unknown key" in str(err.code), err.code
    assert not out.exists()


def test_a_warm_start_that_cannot_run_fails_before_any_actor_starts(tmp_path, no_cluster):
    out = tmp_path / "run"
    err = run_main(overrides(out, "train.warm_start.steps=2", "conductor.constrain_format=false"))
    assert err.code not in (0, None)
    assert "train.warm_start.steps" in str(err.code) and "constrain_format=true" in str(err.code), err.code
    assert not out.exists()


def test_unwritable_output_folder_fails_before_any_actor_starts(tmp_path, no_cluster):
    blocker = tmp_path / "file.txt"  # a regular file: nothing can be created under it, not even by root
    blocker.write_text("not a folder")
    err = run_main(overrides(blocker / "sub"))
    assert err.code not in (0, None)
    assert str(blocker / "sub") in str(err.code) and "not writable" in str(err.code), err.code
    assert "train.output_dir" in str(err.code), "the message must name the setting to change"
    assert blocker.read_text() == "not a folder"


def test_fresh_run_into_a_folder_that_holds_a_checkpointed_run_refuses_without_resume(tmp_path, no_cluster):
    out = tmp_path / "run"
    done = out / "checkpoints" / "ckpt-000003"
    done.mkdir(parents=True)
    (done / "state.json").write_text(json.dumps({"iteration": 3, "cursor": 8, "weights_version": 4}))
    (out / "metrics.jsonl").write_text("".join(json.dumps({"iteration": i}) + "\n" for i in range(4)))
    err = run_main(overrides(out))
    assert err.code not in (0, None)
    assert "already holds a run" in str(err.code) and "--resume" in str(err.code), err.code
    assert (done / "state.json").exists() and len(records(out)) == 4, "the old run must be left as it was"


def test_fresh_run_into_a_folder_whose_run_left_no_checkpoint_refuses_and_says_what_to_do(tmp_path, no_cluster):
    # A run killed after logging iteration 0 but before its first checkpoint: neither a
    # fresh run nor --resume can use the folder, and neither may send the user to the other.
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text(json.dumps({"iteration": 0}) + "\n")
    fresh = run_main(overrides(out))
    assert fresh.code not in (0, None)
    assert isinstance(fresh.code, str) and str(out) in fresh.code, (
        f"a clean error naming the folder, got {fresh.code!r}"
    )
    assert "train.output_dir" in fresh.code, fresh.code
    resumed = run_main([*overrides(out), "--resume"])
    assert resumed.code not in (0, None)
    assert "no complete checkpoint" in str(resumed.code), resumed.code
    assert records(out) == [{"iteration": 0}], "the folder must be left as it was"


def test_missing_api_key_fails_before_any_actor_starts(tmp_path, monkeypatch, no_cluster):
    monkeypatch.delenv("CONDUCTOR_RL_TEST_UNSET_KEY", raising=False)
    out = tmp_path / "run"
    err = run_main(
        overrides(
            out,
            "workers.0.provider=openai",
            "workers.0.model=gpt-test",
            "workers.0.api_key_env=CONDUCTOR_RL_TEST_UNSET_KEY",
        )
    )
    assert err.code not in (0, None)
    assert "CONDUCTOR_RL_TEST_UNSET_KEY" in str(err.code), err.code


def test_a_budget_below_the_cost_forecast_is_refused_before_any_actor_starts_unless_forced(
    tmp_path, no_cluster, capsys
):
    out = tmp_path / "run"
    err = run_main(overrides(out, "train.budget_usd=0.000001"))
    assert "the run would cost at least $" in str(err.code) and "train.budget_usd" in str(err.code), err.code
    assert "--force" in str(err.code)
    assert "forecast for iterations 0-" in capsys.readouterr().err
    with pytest.raises(AssertionError, match="went on to start Ray"):  # forced: it goes on to the cluster
        run_main([*overrides(out, "train.budget_usd=0.000001"), "--force"])


# ---------------------------------------------------------------- full runs


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("train-runs")
    yield root
    for folder in root.glob("*/checkpoints"):  # ~0.4 GB each; metrics and traces stay for a post-mortem
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def straight_run(ray_cluster, runs_root):
    from jobs.train import train

    out = runs_root / "straight"
    summary = train(make_config(out, f"train.iterations={ITERATIONS}", SUBSETS, *WARM, *TRACKERS))
    return SimpleNamespace(out=out, summary=summary)


@pytest.fixture(scope="module")
def sigterm_run(runs_root):
    """`python -m jobs.train`, sent SIGTERM once it has logged iteration 0."""
    out = runs_root / "sigterm"
    command = [
        sys.executable,
        "-m",
        "jobs.train",
        *overrides(out, f"train.iterations={ITERATIONS}", "train.report=false", SUBSETS, *WARM),
        "--json",
    ]
    proc = subprocess.Popen(
        command,
        cwd=REPO,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stdout: list[str] = []
    stderr: list[str] = []
    first_iteration_done = threading.Event()

    def pump_stderr() -> None:
        for line in proc.stderr:
            stderr.append(line)
            if line.startswith("iteration 0:"):
                first_iteration_done.set()

    pumps = [
        threading.Thread(target=pump_stderr, daemon=True),
        threading.Thread(target=lambda: stdout.extend(proc.stdout), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    try:
        # Hang guards only: on a loaded 2-core machine a first iteration can take minutes.
        deadline = time.monotonic() + HANG_GUARD_S
        while not first_iteration_done.wait(timeout=1):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the run never logged iteration 0 (exit {proc.poll()}):\n{''.join(stderr)[-4000:]}")
        proc.send_signal(signal.SIGTERM)
        returncode = proc.wait(timeout=HANG_GUARD_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    for pump in pumps:
        pump.join(timeout=10)
    text = "".join(stdout).strip()
    summary = json.loads(text.splitlines()[-1]) if text else None
    return SimpleNamespace(out=out, returncode=returncode, summary=summary, stderr="".join(stderr))


@pytest.fixture(scope="module")
def resumed_run(sigterm_run, ray_cluster):
    from jobs.train import train

    assert sigterm_run.returncode == 0, sigterm_run.stderr[-4000:]
    before = latest_state(sigterm_run.out)
    summary = train(
        make_config(sigterm_run.out, f"train.iterations={ITERATIONS}", "train.report=false", SUBSETS, *WARM),
        resume=True,
    )
    return SimpleNamespace(out=sigterm_run.out, summary=summary, resumed_from=before)


@pytest.mark.slow
def test_a_run_with_every_tracker_leaves_each_its_metrics_config_and_report(straight_run):
    """train.loggers=[tensorboard, wandb, mlflow], read back from each tool's own files."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.test_trackers import mlflow_run, wandb_config, wandb_history

    out, steps = straight_run.out, list(range(ITERATIONS))
    rewards = [r["reward_mean"] for r in records(out)]
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0, "images": 0})
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("reward_mean")] == list(zip(steps, rewards))
    assert events.Tags()["images"], "the report's plots"
    history = [row for row in wandb_history(out) if "reward_mean" in row]
    assert [(row["_step"], row["reward_mean"]) for row in history] == list(zip(steps, rewards))
    assert wandb_config(out)["train"]["iterations"] == ITERATIONS
    client, run_id = mlflow_run(out)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "reward_mean")] == list(zip(steps, rewards))
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert "report.md" in artifacts and any(path.endswith(".png") for path in artifacts)
    assert client.get_run(run_id).data.params["train.iterations"] == str(ITERATIONS)


@pytest.mark.slow
def test_sigterm_stops_at_a_safe_point_with_exit_0_and_a_complete_checkpoint(sigterm_run):
    run = sigterm_run
    assert run.returncode == 0, run.stderr[-4000:]
    assert run.summary is not None, f"no JSON summary on stdout; stderr:\n{run.stderr[-4000:]}"
    assert run.summary["stopped"] == "SIGTERM", run.summary
    assert "SIGTERM received" in run.stderr
    # A quiet run (issue 26, tests/test_quiet_output.py): the run's own lines, no library progress bar,
    # INFO line or warning (CONDUCTOR_RL_VERBOSE=1 brings those back).
    noise = [
        line
        for line in run.stderr.splitlines()
        if "%|" in line or " INFO " in line or "Warning:" in line or "WARNING" in line
    ]
    assert not noise, noise
    # Signalled after iteration 0: iteration 1 is abandoned, not logged, and redone on resume.
    assert run.summary["iterations"] == 1, run.summary
    assert logged_iterations(run.out) == [0]
    assert list(trace_files(run.out)) == [0]
    folder, state = latest_state(run.out)
    assert run.summary["checkpoint"] == str(folder) and folder.name == "ckpt-000000"
    assert state["iteration"] == 0
    assert state["cursor"] == QUESTIONS, "the abandoned iteration's questions must be drawn again on resume"
    assert state["weights_version"] == records(run.out)[0]["weights_version"]
    assert (folder / "model" / "config.json").is_file() and any((folder / "optimizer").iterdir())
    assert not list((run.out / "checkpoints").glob("*.partial"))


def test_resume_after_sigterm_redoes_the_abandoned_iteration_and_logs_each_iteration_once(resumed_run):
    run = resumed_run
    assert run.resumed_from[0].name == "ckpt-000000"
    assert run.summary["stopped"] == "finished" and run.summary["iterations"] == ITERATIONS, run.summary
    assert logged_iterations(run.out) == list(range(ITERATIONS)), "no iteration twice, none missing"
    assert list(trace_files(run.out)) == list(range(ITERATIONS))
    for iteration in range(ITERATIONS):
        rows = read_traces(run.out, [iteration])
        assert len(rows) == QUESTIONS * ROLLOUTS and {r["iteration"] for r in rows} == {iteration}
    folder, state = latest_state(run.out)
    assert folder.name == f"ckpt-{ITERATIONS - 1:06d}" and state["iteration"] == ITERATIONS - 1
    assert state["cursor"] == ITERATIONS * QUESTIONS
    assert state["weights_version"] == records(run.out)[-1]["weights_version"]
    # The ledger carries over: the run's total is the sum of its iterations' costs.
    logged = records(run.out)
    assert logged[-1]["cost_total_usd"] == pytest.approx(sum(r["cost_usd"] for r in logged), rel=1e-9)


def test_a_new_run_warm_starts_once_before_iteration_0_and_a_resumed_one_does_not(
    straight_run, sigterm_run, resumed_run
):
    warmed = straight_run.summary["warm_start"]
    assert warmed["steps"] == 2 and warmed["seconds"] > 0, warmed
    first = records(straight_run.out)[0]
    assert first["weights_version"] == 1 + ("loss" in first), "the warm start's weights are version 1"
    assert "warm start: step 2/2" in sigterm_run.stderr
    assert "warm_start" not in resumed_run.summary


def test_resumed_run_draws_the_same_questions_as_a_straight_run(straight_run, resumed_run):
    assert straight_run.summary["stopped"] == "finished" and straight_run.summary["iterations"] == ITERATIONS
    assert logged_iterations(straight_run.out) == list(range(ITERATIONS))
    straight = questions_by_iteration(straight_run.out)
    resumed = questions_by_iteration(resumed_run.out)
    assert sorted(straight) == sorted(resumed) == list(range(ITERATIONS))
    for iteration in range(ITERATIONS):
        assert len(straight[iteration]) == QUESTIONS
        assert resumed[iteration] == straight[iteration], f"iteration {iteration} drew other questions"
    drawn = [q for iteration in range(ITERATIONS) for q, _ in straight[iteration]]
    assert len(set(drawn)) == len(drawn), f"the stream must move on, not draw a question again: {straight}"
    rosters = [roster for iteration in range(ITERATIONS) for _, roster in straight[iteration]]
    assert all(1 <= len(r) <= 2 and set(r) <= {0, 1, 2} for r in rosters), rosters


def test_plans_of_a_drawn_roster_run_only_on_its_workers_under_their_pool_numbers(straight_run):
    from conductor_rl.config import load_config as config_of

    names = [w.name for w in config_of(None, []).workers]
    ran_steps = 0
    for row in read_traces(straight_run.out):
        roster = list(row["roster"])
        assert row["roster_model_ids"] == roster  # each worker listed under its pool number
        if row["plan"] is None:
            continue
        for step, ran in zip(row["plan"], row["steps"]):
            assert step["pool_model_id"] == roster[step["roster_place"]] == step["model_id"], (row["plan"], roster)
            assert ran["worker"] == names[step["pool_model_id"]], (ran["worker"], step, roster)
            ran_steps += 1
    assert ran_steps, "no plan of the straight run ran: nothing was checked"
    metrics = records(straight_run.out)[0]
    assert 1 <= metrics["roster_size_mean"] <= 2 and set(metrics["worker_listed"]) == set(names)


def test_a_run_repeats_iteration_0_exactly_given_the_seed(straight_run, sigterm_run):
    """Iteration 0 samples from the initial weights with sample_seed(seed, 0), in another
    process and Ray cluster here: plans, answers, rewards, costs and the learner step agree."""
    straight, other = rollouts_of(straight_run.out, 0), rollouts_of(sigterm_run.out, 0)
    assert sorted(straight) == sorted(other) and len(straight) == QUESTIONS * ROLLOUTS
    for key in straight:
        a, b = straight[key], other[key]
        for field in (
            "question_id",
            "completion",
            "completion_tokens",
            "plan",
            "final_answer",
            "verdict",
            "reward",
            "cost_usd",
        ):
            assert a[field] == b[field], f"rollout {key}: {field} differs: {a[field]!r} != {b[field]!r}"
    a, b = records(straight_run.out)[0], records(sigterm_run.out)[0]
    for name in ("reward_mean", "accuracy", "conductor_tokens", "informative_groups", "weights_version"):
        assert a[name] == b[name], f"{name}: {a[name]} != {b[name]}"
    # A sum over calls that finish concurrently: equal up to the order of the additions.
    assert b["cost_usd"] == pytest.approx(a["cost_usd"], rel=1e-12), "cost_usd"
    if "loss" in a or "loss" in b:
        for name in ("loss", "grad_norm", "ratio_mean", "learner_tokens"):
            assert b[name] == pytest.approx(a[name], rel=1e-5, abs=1e-7), name


def test_resumed_run_samples_what_the_straight_run_sampled_after_weight_updates(straight_run, resumed_run):
    """From iteration 1 on, sampling uses updated weights: the straight run's engine got them by
    a weight sync, the resumed run's engine loaded them from the checkpoint. Same weights and
    seed must give the same plans (this failed while vLLM kept prompt KV cached with the old
    weights across a sync); the same batch and optimizer state must give the same next weights."""
    from safetensors.torch import load_file

    # Version 1 is the warm start's (WARM); iteration 0's step makes it 2.
    assert records(straight_run.out)[0]["weights_version"] == 2, "iteration 0 must have stepped the learner"
    for iteration in range(1, ITERATIONS):
        straight, resumed = rollouts_of(straight_run.out, iteration), rollouts_of(resumed_run.out, iteration)
        assert sorted(straight) == sorted(resumed)
        differing = [key for key in straight if straight[key]["completion"] != resumed[key]["completion"]]
        assert not differing, f"iteration {iteration}: {len(differing)} of {len(straight)} completions differ"
        for key in straight:
            assert straight[key]["reward"] == resumed[key]["reward"], f"iteration {iteration}, rollout {key}"
        a, b = records(straight_run.out)[iteration], records(resumed_run.out)[iteration]
        for name in ("reward_mean", "accuracy", "conductor_tokens", "informative_groups", "weights_version"):
            assert a[name] == b[name], f"iteration {iteration}: {name} {a[name]} != {b[name]}"
        # A sum over calls that finish concurrently: equal up to the order of the additions.
        assert b["cost_usd"] == pytest.approx(a["cost_usd"], rel=1e-12), f"iteration {iteration}: cost_usd"
        for name in ("loss", "grad_norm"):
            if name in a or name in b:
                assert b[name] == pytest.approx(a[name], rel=1e-5, abs=1e-7), f"iteration {iteration}: {name}"
    # The optimizer state came back with the checkpoint: one Adam step from a fresh state
    # moves each weight by about lr (1e-4 here), far more than this tolerance.
    a = load_file(str(latest_state(straight_run.out)[0] / "model" / "model.safetensors"))
    b = load_file(str(latest_state(resumed_run.out)[0] / "model" / "model.safetensors"))
    assert a.keys() == b.keys()
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert worst <= 1e-6, f"the final weights differ by up to {worst:g}"


# ---------------------------------------------------------------- a lighter system


# ---------------------------------------------------------------- recursive training


def test_recursive_training_forces_half_the_groups_discounts_non_recursive_rollouts_and_trains_inner_tokens(
    ray_cluster, tmp_path, light_system
):
    """conductor.max_depth=1 (the paper's recursive mode, with the Conductor's seat in the pool): in
    half of each batch's groups every rollout ends with a forced call, whose plan (or empty lists)
    the stand-in generator writes; a rollout with a call earns its whole reward, whatever the call
    did, and one without (the other groups' plans, which give the seat no step) 0.75 of it;
    recursive completions are rows of the learner batch with their rollout's advantage."""
    from conductor_rl.rollout.recursion import forced_groups
    from jobs.train import train

    light_system.spread = 3
    out = tmp_path / "run"
    config = make_config(
        out,
        "train.iterations=2",
        "train.report=false",
        "train.loggers=[]",
        "train.questions_per_iteration=4",
        "conductor.max_depth=1",
        f"workers.{len(make_config(out).workers)}={{name: conductor, provider: conductor}}",
    )
    summary = train(config)
    assert summary["stopped"] == "finished", summary

    rows = read_traces(out)
    kinds = set()
    for iteration in range(2):
        forced = forced_groups(4, 0.5, config.train.seed, iteration)
        assert len(forced) == 2
        for row in (r for r in rows if r["iteration"] == iteration):
            assert row["forced_recursion"] == (row["group"] in forced)
            last = row["steps"][-1]
            base = None if row["reward"] is None else {"correct": 1.0, "wrong": 0.5}[row["verdict"]]
            if row["group"] not in forced:
                assert row["recursive_calls"] == 0 and last["inner"] is None
                assert base is None or row["reward"] == 0.75 * base  # never asked for its own review
                continue
            call = last["inner"]
            assert row["recursive_calls"] == 1 and call["depth"] == 1 and call["forced"] and last["model_id"] == -1
            assert row["final_answer"] == call["answer"]
            if base is None:
                continue
            assert row["reward"] == base  # a call was made: kept or not, the whole reward
            kinds.add(call["kept"])
    assert kinds == {True, False}, "both a kept and a recursive answer must have been seen"
    metrics = records(out)
    assert all(m["recursive_calls_per_rollout"] == 0.5 and m["forced_rollouts"] == 2 * ROLLOUTS for m in metrics)
    # The learner's rows: each trained rollout's plan and, for forced ones, its recursive call's completion.
    inner_rows = [i for b in light_system.learners.batches for i, ids in enumerate(b.completion_ids) if ids == [21, 22]]
    assert inner_rows, "no recursive completion reached the learner"
    for batch in light_system.learners.batches:
        roots = [i for i, ids in enumerate(batch.completion_ids) if ids != [21, 22]]
        inner = [i for i, ids in enumerate(batch.completion_ids) if ids == [21, 22]]
        assert all(batch.old_logprobs[i] == [-2.0, -2.0] for i in inner)
        assert {batch.advantages[i] for i in inner} <= {batch.advantages[i] for i in roots}


# ---------------------------------------------------------------- asynchronous training

ASYNC = ["train.max_staleness=1", "train.report=false", "train.loggers=[]", "train.checkpoint_every=1"]


def drawn_questions(run_dir: Path) -> dict[int, list[str]]:
    """{iteration: its groups' question ids, in group order}, from the traces."""
    groups: dict[int, dict[int, str]] = {}
    for row in read_traces(run_dir):
        groups.setdefault(row["iteration"], {})[row["group"]] = row["question_id"]
    return {i: [by_group[g] for g in sorted(by_group)] for i, by_group in sorted(groups.items())}


def test_asynchronous_training_collects_ahead_within_the_bound_and_draws_what_a_synchronous_run_draws(
    ray_cluster, tmp_path, light_system
):
    """train.max_staleness=1: the next iteration's plans are sampled while the learner steps (its
    stand-in takes a second), so some rows reach the learner one version old and none older; the
    records show the staleness and the waits, and every iteration draws the questions the
    synchronous loop draws."""
    from conductor_rl.system import System
    from jobs.train import train, training_questions

    light_system.learners_seconds, light_system.spread = 1.0, 3
    out = tmp_path / "async"
    config = make_config(out, "train.iterations=4", *ASYNC)
    summary = train(config)
    assert summary["stopped"] == "finished" and summary["iterations"] == 4, summary

    assert len(light_system.learners.batches) >= 3, "too few informative iterations to see the pipeline"
    metrics = records(out)
    ages = {int(age) for m in metrics for age in m["staleness"]}
    assert max(ages) == 1, f"no rollout was collected during a learner step: {ages}"
    assert [m["iteration"] for m in metrics] == [0, 1, 2, 3]
    assert set(metrics[0]["staleness"]) == {"0"}  # nothing to be stale against yet
    for m in metrics:
        assert m["stale_dropped"] == 0 and m["staleness_max"] <= 1
        assert sum(m["staleness"].values()) > 0
        assert m["time_wait_learner_s"] >= 0 and m["time_wait_generate_s"] >= 0 and 0 <= m["overlap"] < 1
    assert any(m["overlap"] > 0 for m in metrics[1:])
    # Traces record the version that sampled each plan: one behind the learner at most.
    for row in read_traces(out):
        m = metrics[row["iteration"]]
        learned_at = m["weights_version"] - ("loss" in m)
        assert 0 <= learned_at - row["sampled_weights_version"] <= 1

    stream = QuestionStream(
        training_questions(System(config)), seed=config.train.seed, balance_domains=config.train.balance_domains
    )
    expected = {i: [q.id for q in stream.take(config.train.questions_per_iteration)] for i in range(4)}
    assert drawn_questions(out) == expected


def test_asynchronous_resume_after_a_crash_redraws_the_questions_in_flight(
    ray_cluster, tmp_path, light_system, monkeypatch
):
    """The learner dies at iteration 2 while iteration 2 (and perhaps 3) has been drawn: the
    checkpoint of iteration 1 lists them in flight, and the resumed run trains on exactly the
    questions of an uninterrupted run, each iteration once."""
    import jobs.iteration as iteration_job
    import jobs.train as train_job

    light_system.learners_seconds = 0.5
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    assert train_job.train(make_config(straight, "train.iterations=4", *ASYNC))["stopped"] == "finished"
    uninterrupted = drawn_questions(straight)

    learn = iteration_job.learn_from

    def dies_at_2(loop, collected):
        if collected.iteration == 2:
            raise RuntimeError("learner died")
        return learn(loop, collected)

    monkeypatch.setattr(iteration_job, "learn_from", dies_at_2)
    with pytest.raises(RuntimeError, match="learner died"):
        train_job.train(make_config(crashed, "train.iterations=4", *ASYNC))
    _, state = latest_state(crashed)
    assert state["iteration"] == 1
    assert "2" in state["in_flight"] and state["in_flight"]["2"] == uninterrupted[2]
    assert all(ids == uninterrupted[int(j)] for j, ids in state["in_flight"].items())

    monkeypatch.setattr(iteration_job, "learn_from", learn)
    assert train_job.train(make_config(crashed, "train.iterations=4", *ASYNC), resume=True)["stopped"] == "finished"
    assert logged_iterations(crashed) == [0, 1, 2, 3]
    assert drawn_questions(crashed) == uninterrupted


def test_the_learner_leaves_out_rollouts_older_than_the_bound(tmp_path):
    """Whatever produced them, rollouts sampled more versions ago than train.max_staleness never
    reach the learner: only the fresh group of the three is in the batch, and the record counts the rest."""
    from conductor_rl.rollout.rollouts import Rollout
    from conductor_rl.rollout.workflow import Task
    from conductor_rl.run.infra_guard import InfraCounts
    from conductor_rl.run.state import RunState
    from conductor_rl.system import System
    from jobs.iteration import Collected, TrainingRun, learn_from
    from jobs.run_control import Phases, StopSignal

    config = make_config(tmp_path, "train.max_staleness=1", "conductor.constrain_format=false", "learner.epochs=3")
    learners = FakeLearners()
    generators = FakeGenerators(1)
    system = type(
        "System",
        (),
        {
            "learners": learners,
            "weight_sync": type(
                "Sync", (), {"push": staticmethod(lambda version: generators.load_weights(None, version))}
            )(),
        },
    )()
    loop = TrainingRun(
        System(config), system, QuestionStream(sample_questions(4), seed=0), RunState(version=5), StopSignal()
    )
    rollouts = [
        Rollout(
            Task(f"q{g}", "?", "math", "1", "numeric"),
            "x",
            group=g,
            sample=i,
            completion_ids=(1, 2),
            logprobs=(-1.0, -1.0),
            reward=[1.0, 0.5][i % 2],
            weights_version=version,
        )
        for g, version in enumerate((5, 4, 3))
        for i in range(4)
    ]
    record, _ = learn_from(loop, Collected(7, [[9, 9]] * 3, rollouts, Phases(7), InfraCounts(), 0, time.perf_counter()))
    [batch] = learners.batches
    assert len(batch.completion_ids) == 8 and sorted(set(batch.staleness)) == [0, 1]
    assert learners.epochs == 3  # learner.epochs reaches the learner's step
    assert record["stale_dropped"] == 4 and record["staleness"] == {"0": 4, "1": 4}
    assert loop.state.version == 6 and generators.version == 6

    # vLLM's log-probs under the constrained format are the mask's, not the policy's: the learner recomputes
    # them (the batch still says how stale each row is), except under ZeRO-3, where no correction is made.
    assert loop.config.generator.backend == "vllm"
    for stage, staleness in ((2, [0] * 4 + [1] * 4), (3, None)):
        loop.system = System(
            make_config(
                tmp_path, "train.max_staleness=1", "conductor.constrain_format=true", f"learner.zero_stage={stage}"
            )
        )
        loop.state.version = 5
        learn_from(loop, Collected(8, [[9, 9]] * 3, rollouts, Phases(8), InfraCounts(), 0, time.perf_counter()))
        assert len(learners.batches[-1].completion_ids) == 8 and learners.batches[-1].staleness == staleness


# ---------------------------------------------------------------- budget

# Worker 0 answers in exactly 10 tokens at $100,000 per million: every call costs $1.00, and
# an iteration whose 8 plans each make one call to it costs $8.00.
DOLLAR_CALLS = [
    "workers.0.max_tokens=10",
    "workers.0.sim.output_tokens=1000",
    "workers.0.price.input=0",
    "workers.0.price.output=100000",
]


def run_json(argv: list[str], capsys) -> tuple[int, dict]:
    """`conductor-rl train ... --json`: the exit code and the summary line."""
    from jobs.train import main

    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_spent_budget_stops_the_run_with_a_checkpoint_and_exit_0_and_stays_spent_on_resume(
    ray_cluster, tmp_path, light_system, capsys
):
    out = tmp_path / "run"
    argv = overrides(out, "train.iterations=3", "train.report=false", "train.loggers=[]", *DOLLAR_CALLS)

    # Iteration 0 spends $8 of $10; iteration 1's calls cross the budget: it is abandoned.
    code, summary = run_json([*argv, "train.budget_usd=10"], capsys)
    assert code == 0
    assert summary["stopped"] == "budget" and summary["iterations"] == 1, summary
    assert records(out)[0]["cost_usd"] == pytest.approx(8.0)
    assert logged_iterations(out) == [0] and list(trace_files(out)) == [0]
    folder, state = latest_state(out)
    assert summary["checkpoint"] == str(folder) and folder.name == "ckpt-000000"
    assert state["iteration"] == 0 and state["cursor"] == QUESTIONS, "the abandoned iteration is redone on resume"
    spent = state["ledger"]["total"]["cost_usd"]
    assert spent >= 10.0, f"what the abandoned iteration spent must be in the checkpoint's ledger: ${spent}"

    # Resumed with the same budget: stops before any worker call.
    code, summary = run_json([*argv, "train.budget_usd=10", "--resume"], capsys)
    assert code == 0 and summary["stopped"] == "budget" and summary["iterations"] == 1, summary
    assert latest_state(out)[1]["ledger"]["total"]["cost_usd"] == pytest.approx(spent, abs=1e-9)

    # Resumed with $1.50 more, the first iteration after the resume crosses it again: what it spent
    # must be saved (the checkpoint resumed from is written again), or every resume spends anew.
    raised = spent + 1.5
    code, summary = run_json([*argv, f"train.budget_usd={raised}", "--resume"], capsys)
    assert code == 0 and summary["stopped"] == "budget" and summary["iterations"] == 1, summary
    again = latest_state(out)[1]["ledger"]["total"]["cost_usd"]
    assert again >= raised, f"the checkpoint forgot what the abandoned iteration spent: ${again} < ${raised}"
    assert logged_iterations(out) == [0]


def test_budget_spent_in_the_first_iteration_is_saved_with_the_starting_weights(
    ray_cluster, tmp_path, light_system, capsys
):
    out = tmp_path / "run"
    argv = overrides(out, "train.iterations=3", "train.report=false", "train.loggers=[]", *DOLLAR_CALLS)
    # Iteration 0's calls cross a $5 budget: nothing is learned, but the money is gone.
    code, summary = run_json([*argv, "train.budget_usd=5"], capsys)
    assert code == 0 and summary["stopped"] == "budget" and summary["iterations"] == 0, summary
    folder, state = latest_state(out)
    assert summary["checkpoint"] == str(folder)
    assert state["iteration"] == -1 and state["cursor"] == 0 and state["weights_version"] == 0
    spent = state["ledger"]["total"]["cost_usd"]
    assert spent >= 5.0, f"the checkpoint must hold what iteration 0 spent: ${spent}"
    assert (folder / "model" / "weights.bin").exists()  # the learner's (starting) weights

    # Resumed with the same budget: stops before any worker call, and still knows the spend.
    code, summary = run_json([*argv, "train.budget_usd=5", "--resume"], capsys)
    assert code == 0 and summary["stopped"] == "budget" and summary["iterations"] == 0, summary
    assert latest_state(out)[1]["ledger"]["total"]["cost_usd"] == pytest.approx(spent, abs=1e-9)


# ---------------------------------------------------------------- a worker lost to infrastructure errors


def test_a_worker_whose_every_call_fails_stops_the_run_with_a_checkpoint_naming_it(
    ray_cluster, tmp_path, light_system, capsys
):
    """The silent loss the guard exists for: every plan's worker fails (as GPT-5 refusing a
    temperature would), its rollouts are dropped, and without the guard the run would go on."""
    out = tmp_path / "run"
    argv = overrides(
        out,
        "train.iterations=3",
        "train.report=false",
        "train.loggers=[]",
        "workers.0.sim.fail_rate=1.0",
        "workers.0.max_retries=0",
        "train.infra_error_min_steps=4",
    )
    code, summary = run_json(argv, capsys)
    assert code == 1 and summary["stopped"] == "infra_errors" and summary["iterations"] == 1, summary
    assert "worker 'sim-math-expert' failed 100% of its" in summary["error"]
    assert "train.max_infra_error_rate=0.25" in summary["error"]
    assert records(out)[0]["worker_calls"]["sim-math-expert"]["failed"] >= QUESTIONS * ROLLOUTS
    _folder, state = latest_state(out)
    assert state["iteration"] == 0 and state["infra_guard"]["windows"], "the guard's window is checkpointed"

    # Off, the same run trains on (with every rollout dropped) to the end.
    code, summary = run_json(
        [
            *overrides(
                tmp_path / "off",
                "train.iterations=2",
                "train.report=false",
                "train.loggers=[]",
                "workers.0.sim.fail_rate=1.0",
                "workers.0.max_retries=0",
                "train.max_infra_error_rate=null",
            )
        ],
        capsys,
    )
    assert code == 0 and summary["stopped"] == "finished" and summary["iterations"] == 2, summary
    assert all(r["infra_error_rate"] == 1.0 for r in records(tmp_path / "off"))


def test_a_worker_that_fails_its_preflight_stops_the_run_before_iteration_0(ray_cluster, tmp_path, light_system):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    out = tmp_path / "run"
    argv = overrides(
        out,
        "train.iterations=2",
        "train.report=false",
        "train.loggers=[]",
        "workers.2.provider=openai_compatible",
        "workers.2.model=m",
        "workers.2.max_retries=0",
        f"workers.2.base_url=http://127.0.0.1:{closed}/v1",
    )
    err = run_main(argv)
    assert "a worker failed its preflight check (skip it with --no-check)" in str(err.code)
    assert "FAIL sim-generalist: connection:" in str(err.code)
    assert not (out / "metrics.jsonl").exists()


# ---------------------------------------------------------------- crashed actors


def process_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")  # a zombie no longer runs anything


def test_killed_worker_and_grader_actors_are_restarted_and_the_iteration_completes(
    ray_cluster, tmp_path, monkeypatch, light_system
):
    """train_iteration on the real worker pools and grader pool: every worker replica is killed
    while its calls are in flight, the grader actor just before the first grading."""
    import ray

    import jobs.iteration as jt
    import jobs.training_system as ts
    from conductor_rl.data import load_dataset
    from conductor_rl.run.state import RunState
    from conductor_rl.system import System

    config = make_config(tmp_path / "run", "train.iterations=1", "train.report=false", "train.loggers=[]")
    light_system.spread = len(config.workers)  # plans for every worker
    system = ts.build_system(config, config.conductor.model, 0, total_steps=1)

    def pid(actor) -> int | None:
        """The actor's process id; None when it is dead for good."""
        try:
            return ray.get(actor.__ray_call__.remote(lambda _self: os.getpid()), timeout=180)
        except ray.exceptions.RayActorError:
            return None

    try:
        replicas = [pool.replicas[0] for pool in system.workers]
        grader = system.graders.actors[0]
        pids_before = [pid(r) for r in replicas], pid(grader)
        killed = {"workers": 0, "grader": 0}

        execute = jt.execute_rollouts

        async def execute_with_a_crash(rollouts, workers, limits, key="", **options):
            async def crash_while_calls_are_in_flight() -> None:
                await asyncio.sleep(0.05)  # simulated calls take 0.1-0.2 s
                for replica in replicas:
                    ray.kill(replica, no_restart=False)
                killed["workers"] += 1

            crash = asyncio.ensure_future(crash_while_calls_are_in_flight()) if not killed["workers"] else None
            await execute(rollouts, workers, limits, key=key, **options)
            if crash is not None:
                await crash

        grade_many = system.graders.grade_many

        def grade_with_a_crash(requests, timeout_s=None):
            if not killed["grader"]:
                # Killed before the first grading, and gone before any request is sent, so that the
                # first attempt's requests meet a dead or restarting actor (not one still finishing them).
                ray.kill(grader, no_restart=False)
                deadline = time.monotonic() + 60
                while not process_gone(pids_before[1]) and time.monotonic() < deadline:
                    time.sleep(0.05)
                killed["grader"] += 1
            return grade_many(requests, timeout_s)

        monkeypatch.setattr(jt, "execute_rollouts", execute_with_a_crash)
        monkeypatch.setattr(system.graders, "grade_many", grade_with_a_crash)

        questions = load_dataset(config.data.questions, limit=config.data.limit)
        loop = jt.TrainingRun(
            System(config), system, QuestionStream(questions, seed=config.train.seed), RunState(), jt.StopSignal()
        )
        ray.get(system.ledger.start_iteration.remote(0))
        record, rollouts = jt.train_iteration(loop, 0)
        assert killed == {"workers": 1, "grader": 1}
        pids_after = [pid(r) for r in replicas], pid(grader)  # alive again: Ray restarted them
        spent = ray.get(system.ledger.summary.remote())
    finally:
        system.shutdown()

    # The crashes hit the first of the rollouts' two attempts (train.rollout_attempts): what they broke
    # is run again once Ray has restarted the actors, and no rollout is lost.
    assert record["iteration"] == 0 and len(rollouts) == QUESTIONS * ROLLOUTS
    assert {r.plan.steps[0].model_id for r in rollouts} == set(range(len(config.workers))), "every worker is called"
    dropped = [r.infrastructure_error for r in rollouts if r.plan is not None and r.reward is None]
    assert not dropped, f"rollouts lost to the crashes: {dropped} (retried: {record['retried_rollouts']})"
    assert record["infra_error_rate"] == 0.0
    (workers_before, grader_before), (workers_after, grader_after) = pids_before, pids_after
    assert None not in workers_after, f"a killed worker replica was not restarted (process ids {workers_after})"
    assert grader_after is not None, "the killed grader actor was not restarted"
    assert all(a != b for a, b in zip(workers_before, workers_after)), (workers_before, workers_after)
    assert grader_before != grader_after, (grader_before, grader_after)
    # The calls the dead replicas were making never came back: the ledger counts them (at their
    # worst-case cost) instead of forgetting calls the provider may have billed.
    assert spent["unsettled"]["calls"] >= 1, spent["unsettled"]
