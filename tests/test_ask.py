"""`conductor-rl ask` end to end: config → Conductor (tiny Qwen2, offline) →
plan → simulated workers in worker pools on a real local Ray cluster → grader
→ reward, as text and as JSON."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from jobs import cli

ROOT = Path(__file__).resolve().parent.parent
PLAN = (
    'model_id = [0, 1]\nsubtasks = ["Solve the question", "Check the answer and state it"]\naccess_list = [[], "all"]\n'
)


def write_config(tmp_path, **conductor):
    config = yaml.safe_load((ROOT / "configs" / "local.yaml").read_text())
    config["conductor"].update(
        {
            "model": "tiny-qwen2",
            "max_new_tokens": 16,
            "response_prefix": PLAN,
            "stop_after_plan": True,
            "constrain_format": False,
            **conductor,
        }
    )
    for worker in config["workers"]:
        worker["sim"]["latency_s"] = 0.0
    for sure in config["workers"][:2]:  # always right, whatever the difficulty, wording or check
        sure["sim"] = {"accuracy": {"default": 1.0}, "latency_s": 0.0, "output_tokens": sure["sim"]["output_tokens"]}
    config["ask"]["sample_questions"] = 2
    path = tmp_path / "ask.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_ask_json_runs_the_plan_and_grades_it(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path)
    assert cli.main(["ask", "--config", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["results"]) == 2
    for r in out["results"]:
        assert r["plan_error"] is None
        assert [s["worker"] for s in r["steps"]] == ["sim-math-expert", "sim-knowledge-expert"]
        assert r["steps"][1]["access"] == [0]
        assert "Step 0 answer" in r["steps"][1]["messages"][-1]["content"]  # step 1 read step 0
        assert r["verdict"] == "correct" and r["reward"] == 1.0  # accuracy 1.0 workers
        assert r["simulated"] is True and all(s["simulated"] for s in r["steps"])
        assert r["cost_usd"] > 0 and r["steps"][0]["usage"]["output_tokens"] > 0


@pytest.mark.slow
def test_ask_text_output_shows_each_step_and_labels_simulation(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path)
    assert cli.main(["ask", "--config", str(path), "ask.sample_questions=1"]) == 0
    text = capsys.readouterr().out
    assert "step 0: Model 0 (sim-math-expert)" in text and "step 1: Model 1 (sim-knowledge-expert)" in text
    assert "SIMULATED" in text and "Verdict: correct" in text and "Reward: 1.0" in text


@pytest.mark.slow
def test_ask_a_given_question_with_a_reference(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path)
    cli.main(["ask", "What is 17 * 23?", "--reference", "391", "--kind", "numeric", "--config", str(path), "--json"])
    [r] = json.loads(capsys.readouterr().out)["results"]
    assert r["question"] == "What is 17 * 23?" and r["reference"] == "391"
    assert r["verdict"] == "correct" and r["extracted_answer"] == "391"


@pytest.mark.slow
def test_ask_unknown_question_without_reference_is_not_scored(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path)
    cli.main(["ask", "Why is the sky blue?", "--config", str(path), "--json"])
    [r] = json.loads(capsys.readouterr().out)["results"]
    assert r["verdict"] is None and "no reference" in r["grade_detail"] and r["reward"] is None
    assert r["infrastructure_error"] is None and r["final_answer"]


@pytest.mark.slow
def test_ask_calls_the_workers_through_the_worker_pools(ray_cluster, tmp_path, capsys, monkeypatch):
    """The steps' calls went through WorkerPool replicas and their cluster ledger, which ask stops afterwards."""
    import jobs.training_system as ts

    seen = []
    shutdown = ts.WorkerPools.shutdown

    def spy(pools):
        seen.append(([type(p).__name__ for p in pools.pools], ray_cluster.get(pools.ledger.summary.remote())))
        shutdown(pools)

    monkeypatch.setattr(ts.WorkerPools, "shutdown", spy)
    path = write_config(tmp_path)
    assert cli.main(["ask", "--config", str(path), "--json", "workers.0.rpm=1000"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    [(kinds, ledger)] = seen
    assert kinds == ["WorkerPool"] * 3
    assert ledger["total"]["calls"] == sum(len(r["steps"]) for r in results) == 4
    assert ledger["total"]["cost_usd"] == pytest.approx(sum(r["cost_usd"] for r in results))


@pytest.mark.slow
def test_ask_stops_at_its_budget(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path)
    assert cli.main(["ask", "--config", str(path), "--json", "ask.sample_questions=1", "--budget-usd", "1e-6"]) == 1
    captured = capsys.readouterr()
    [r] = json.loads(captured.out)["results"]  # what was answered is still printed
    assert r["steps"][0]["response"] and r["steps"][1]["error"].startswith("budget_exceeded:")
    assert "stopped by the worker budget" in captured.err and "--budget-usd" in captured.err


@pytest.mark.slow
def test_ask_malformed_plan_gets_reward_zero(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path, response_prefix='model_id = [0, 7]\nsubtasks = ["a", "b"]\naccess_list = [[], []]\n')
    cli.main(["ask", "--config", str(path), "--json", "ask.sample_questions=1"])
    [r] = json.loads(capsys.readouterr().out)["results"]
    assert r["reward"] == 0.0 and "7" in r["plan_error"] and r["steps"] == []


@pytest.mark.slow
def test_ask_failing_worker_is_an_infrastructure_error(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path)
    cli.main(
        [
            "ask",
            "--config",
            str(path),
            "--json",
            "ask.sample_questions=1",
            "workers.1.sim.fail_rate=1.0",
            "workers.1.max_retries=0",
        ]
    )
    [r] = json.loads(capsys.readouterr().out)["results"]
    assert r["reward"] is None and "simulated_fault" in r["infrastructure_error"]


def test_ask_rejects_an_empty_question(tmp_path):
    with pytest.raises(SystemExit, match="empty"):
        cli.main(["ask", "   ", "--config", str(write_config(tmp_path))])


def test_bad_config_fails_before_any_model_loads(tmp_path, monkeypatch):
    import conductor_rl.policy.conductor as conductor_module

    monkeypatch.setattr(conductor_module, "load_causal_lm", lambda *a: pytest.fail("model loaded"))
    with pytest.raises(SystemExit, match=r"conductor\.temprature: unknown key"):
        cli.main(["ask", "--config", str(write_config(tmp_path)), "conductor.temprature=0.5"])
    with pytest.raises(SystemExit, match=r"workers\.0\.temperature"):
        cli.main(["ask", "--config", str(write_config(tmp_path)), "workers.0.temperature=-1"])


def test_config_command_prints_resolved_yaml(capsys):
    assert cli.main(["config", "conductor.max_steps=3"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["conductor"]["max_steps"] == 3 and printed["conductor"]["model"] == "smollm2-135m"


def test_split_overrides_keeps_questions_with_equals_signs():
    from jobs.common import split_overrides

    overrides, rest = split_overrides(["conductor.seed=3", "x=5, what is x?", "If a=b then?", "data.limit=2"])
    assert overrides == ["conductor.seed=3", "data.limit=2"]
    assert rest == ["x=5, what is x?", "If a=b then?"]


@pytest.mark.slow
def test_console_script_runs_in_a_fresh_process(tmp_path):
    path = write_config(tmp_path)
    script = Path(sys.executable).parent / "conductor-rl"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "jobs.cli"]
    done = subprocess.run(
        [*cmd, "ask", "--config", str(path), "--json", "ask.sample_questions=1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["results"][0]["reward"] == 1.0
    assert "loading the Conductor" in done.stderr  # progress goes to stderr, stdout stays JSON
    assert "starting Ray" in done.stderr  # its own local cluster, as `conductor-rl train` starts one


@pytest.mark.slow
def test_overrides_may_follow_options(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path)
    assert (
        cli.main(
            [
                "ask",
                "What is 17 * 23?",
                "--reference",
                "391",
                "--json",
                "--config",
                str(path),
                "ask.sample_questions=1",
                "conductor.seed=5",
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["config"]["conductor"]["seed"] == 5


def test_paper_config_without_keys_fails_cleanly(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(SystemExit, match="environment variable OPENAI_API_KEY is not set"):
        cli.main(["ask", "What is 2 + 2?", "--reference", "4", "--config", str(ROOT / "configs" / "paper.yaml")])


@pytest.mark.slow
def test_ask_with_a_response_cache_pays_once(ray_cluster, tmp_path, capsys):
    path = write_config(tmp_path)
    args = [
        "ask",
        "--config",
        str(path),
        "--json",
        "ask.sample_questions=1",
        f"workflow.response_cache={tmp_path / 'cache'}",
    ]
    cli.main(args)
    [first] = json.loads(capsys.readouterr().out)["results"]
    cli.main(args)
    [second] = json.loads(capsys.readouterr().out)["results"]
    assert first["cost_usd"] > 0 and second["cost_usd"] == 0.0
    assert [s["response"] for s in second["steps"]] == [s["response"] for s in first["steps"]]
