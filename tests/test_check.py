"""`conductor-rl check` on configs/paper.yaml, with fake keys and the fake provider servers standing
in for OpenAI, Google, Anthropic and the served open-weight models: the table, and a non-zero exit
naming the worker whose settings its API refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_rl.config import load_config
from tests.http_fakes import FAKE_KEY

# Every test talks to the fake LLM server: the fake key set, the server reset (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("fresh")

REPO = Path(__file__).resolve().parent.parent
PAPER = REPO / "configs" / "paper.yaml"
KEYS = ("OPENAI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY")


def paper_on_fakes(server) -> list[str]:
    """Overrides that point every worker of the paper's pool at the fake server."""
    config = load_config(PAPER)
    overrides = ["cluster.worker={CPU: 0.25}"]  # this machine is no node of ray_cluster.yaml
    for i, worker in enumerate(config.workers):
        if worker.serve is not None:  # the fake stands in for the vLLM server the job would start
            overrides += [f"workers.{i}.serve=null"]
        overrides += [f"workers.{i}.base_url={server.base_url_for(worker.provider)}"]
    return overrides


@pytest.fixture
def keys(monkeypatch):
    for name in KEYS:
        monkeypatch.setenv(name, FAKE_KEY)


def run_check(argv: list[str], capsys) -> tuple[int, dict, str]:
    from jobs.cli import main

    code = main(["check", "--config", str(PAPER), *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out.strip().splitlines()[-1]), out


def test_check_on_the_paper_pool_prints_the_table_and_sends_each_model_what_it_accepts(
    ray_cluster, server, keys, capsys
):
    code, result, out = run_check(paper_on_fakes(server), capsys)
    names = [w.name for w in load_config(PAPER).workers]
    assert code == 0, out
    assert result["failed"] == [] and [c["worker"] for c in result["checks"]] == names
    assert all(c["status"] == "ok" and c["answered"] and c["cost_usd"] >= 0 for c in result["checks"])
    table = out.splitlines()
    assert table[0].split()[:3] == ["worker", "provider", "model"]
    assert all(any(line.startswith(name + " ") for line in table) for name in names)
    assert "note gpt-6.1-sol:" in out and "temperature" in out  # 0.2 is the paper's, but GPT-6.1 Sol takes none
    bodies = {json.dumps(b, sort_keys=True) for b in server.stats.bodies}
    gpt = [json.loads(b) for b in bodies if '"model": "gpt-6.1-sol"' in b]
    assert gpt and all("temperature" not in b and b["reasoning_effort"] == "low" for b in gpt)
    claude = [json.loads(b) for b in bodies if '"model": "claude-sonnet-4-6"' in b]
    assert claude and all("temperature" not in b and "thinking" not in b for b in claude)
    qwen = [json.loads(b) for b in bodies if '"model": "Qwen/Qwen3-32B"' in b]
    assert sorted(str(b.get("chat_template_kwargs")) for b in qwen) == ["None", "{'enable_thinking': False}"]
    assert FAKE_KEY not in out


def test_check_exits_nonzero_naming_a_worker_whose_settings_its_api_refuses(ray_cluster, server, keys, capsys):
    # Told that GPT-6.1 Sol takes a temperature, the pool sends 0.2, which OpenAI refuses with a 400.
    code, result, out = run_check([*paper_on_fakes(server), "workers.0.fixed_temperature=false"], capsys)
    assert code == 1
    assert result["failed"] == ["gpt-6.1-sol"]
    assert "FAIL gpt-6.1-sol: bad_request:" in out and "temperature" in out
    assert out.splitlines()[-2].endswith("failed: gpt-6.1-sol")


def test_check_fails_the_pool_as_it_shipped_before(ray_cluster, server, keys, capsys):
    """What the pool sent before: Claude Sonnet 4's and Gemini 2.5 Pro's ids (gone from the public
    APIs: a 404), a temperature to a GPT that takes none, and Claude's temperature in the body (the
    old Anthropic shaping: refused by API version 2026-10-21). `check` names each worker before
    anything is trained."""
    old = [
        "workers.1.model=gemini-2.5-pro",
        "workers.2.model=claude-sonnet-4-20250514",
        "workers.0.extra_body={temperature: 0.2}",
    ]
    code, result, out = run_check([*paper_on_fakes(server), *old], capsys)
    assert code == 1 and result["failed"] == ["gpt-6.1-sol", "gemini-3.8-flash", "claude-sonnet-4-6"], out
    assert "FAIL claude-sonnet-4-6: bad_request: worker 'claude-sonnet-4-6': HTTP 404: model: " in out
    assert "models/gemini-2.5-pro is not found" in out and "retired or misspelt" in out
    # The old shaping's body temperature, on the new id: API version 2026-10-21 refuses it (the fake
    # server too: tests/test_provider_versions.py), so check names it before any request.
    from jobs.cli import main

    with pytest.raises(SystemExit, match=r"workers.claude-sonnet-4-6.extra_body.temperature: .*2026-10-21"):
        main(["check", "--config", str(PAPER), *paper_on_fakes(server), "workers.2.extra_body={temperature: 0.2}"])
