"""conductor_rl/config/redaction.py: credentials a user put into a configuration (a URL's password, a
token in `extra_body`, `serve.env`) never reach what a run writes down: config.json and state.json as
the train job writes them, TensorBoard's, W&B's and MLflow's own files; and a resume that changes the
pool or the Conductor is refused with the keys that changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_rl.config import TrackingConfig, load_config
from conductor_rl.config.redaction import MASK, masked_url, recorded, redacted, secret_name
from conductor_rl.run.state import RunState, resume_conflicts

PASSWORD = "hunter2-c0nductor"
TOKEN = "sk-live-5ecret-t0ken"


def config_with_secrets():
    worker = {
        "name": "gateway",
        "provider": "openai_compatible",
        "model": "m",
        "api_key_env": "GATEWAY_KEY",
        "base_url": f"http://bob:{PASSWORD}@127.0.0.1:9/v1?api_key={TOKEN}&region=eu",
        "extra_body": {"headers": {"Authorization": f"Bearer {TOKEN}"}, "top_k": 20},
        "price": {"input": 1.0, "output": 2.0},
    }
    config = load_config("configs/local.yaml")
    return config.model_copy(update={"workers": [*config.workers, type(config.workers[0]).model_validate(worker)]})


def test_names_and_urls_that_hold_secrets():
    assert [secret_name(n) for n in ("api_key", "Authorization", "x-api-key", "HF_TOKEN", "hf_token")] == [True] * 5
    assert [secret_name(n) for n in ("api_key_env", "max_tokens", "tokenizer", "keep_rate")] == [False] * 4
    assert masked_url(f"https://u:{PASSWORD}@h:1/p?token={TOKEN}&a=1") == f"https://u:{MASK}@h:1/p?token={MASK}&a=1"
    assert masked_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    served = {"serve": {"env": {"HF_TOKEN": TOKEN, "VLLM_CPU_KVCACHE_SPACE": "4"}, "port": 8001}}
    assert redacted(served) == {"serve": {"env": {"HF_TOKEN": MASK, "VLLM_CPU_KVCACHE_SPACE": MASK}, "port": 8001}}


def test_no_secret_reaches_the_run_files_or_any_tracker(tmp_path, monkeypatch):
    from jobs.run_control import open_run_trackers

    config = config_with_secrets()
    dump = recorded(config)
    (tmp_path / "config.json").write_text(json.dumps(dump, indent=2))  # as jobs/train.py writes it
    state = RunState.of(config, None).checkpoint(0, config, {})
    (tmp_path / "state.json").write_text(json.dumps(state))
    gateway = dump["workers"][-1]
    assert gateway["base_url"] == f"http://bob:{MASK}@127.0.0.1:9/v1?api_key={MASK}&region=eu"
    assert gateway["extra_body"] == {"headers": {"Authorization": MASK}, "top_k": 20}
    assert gateway["api_key_env"] == "GATEWAY_KEY"

    monkeypatch.chdir(tmp_path)
    tracking = TrackingConfig(wandb_mode="offline", wandb_project="conductor-rl-tests")
    config = config.model_copy(
        update={
            "tracking": tracking,
            "train": config.train.model_copy(update={"loggers": ["tensorboard", "wandb", "mlflow"]}),
        }
    )
    trackers = open_run_trackers(config, tmp_path, None)
    trackers.log_metrics({"reward_mean": 0.5}, 0)
    trackers.close()
    written = [p for p in Path(tmp_path).rglob("*") if p.is_file()]
    assert any("tensorboard" in str(p) for p in written) and any("mlruns" in str(p) for p in written)
    assert any(p.suffix == ".wandb" for p in written)
    for path in written:
        data = path.read_bytes()
        assert PASSWORD.encode() not in data and TOKEN.encode() not in data, path


def test_a_resume_with_another_pool_or_conductor_is_refused_naming_the_keys(tmp_path):
    from conductor_rl.run.checkpoint import CheckpointError, Checkpoints
    from jobs.run_control import open_run

    out = tmp_path / "run"
    config = load_config("configs/local.yaml", [f"train.output_dir={out}"])
    state = RunState.of(config, None).checkpoint(0, config, {})
    Checkpoints(out / "checkpoints").save(0, state, lambda folder: None)

    assert resume_conflicts(state["config"], config) == []
    _, _, resumed = open_run(
        config.model_copy(update={"train": config.train.model_copy(update={"iterations": 9})}), True
    )
    assert resumed["iteration"] == 0  # a longer run resumes

    swapped = config.model_copy(update={"workers": [config.workers[1], config.workers[0], *config.workers[2:]]})
    with pytest.raises(CheckpointError, match=r"workers\[0\]\.name: 'sim-math-expert' -> 'sim-knowledge-expert'"):
        open_run(swapped, True)
    fewer = config.model_copy(update={"workers": config.workers[:2]})
    with pytest.raises(CheckpointError, match="workers: 3 -> 2 entries"):
        open_run(fewer, True)
    other = config.model_copy(update={"conductor": config.conductor.model_copy(update={"max_steps": 5})})
    with pytest.raises(CheckpointError, match=r"conductor\.max_steps: 3 -> 5.*Resume with the configuration"):
        open_run(other, True)
