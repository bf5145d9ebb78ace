"""Served workers: vLLM's OpenAI-compatible server started by the job (conductor_rl/workers/serving.py,
actors/served_worker.py, jobs/training_system.py).

Quick tests drive the library with small fake servers (a few lines of Python that answer the health
API, or exit at once); the slow ones serve SmolLM2 through real vLLM, run a plan over HTTP and check
the ledger against the servers' own counters, on configs/local-real.yaml's pool as the job builds it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conductor_rl.config import ServeSpec, WorkerConfig
from conductor_rl.testing import fake_vllm_server
from conductor_rl.workers.serving import (
    PortInUseError,
    ServedWorkerError,
    ServerProcess,
    engine_args_for,
    engine_flags,
    group_deployments,
    served_resources,
    server_command,
    server_env,
    start_server,
)

ROOT = Path(__file__).resolve().parent.parent


def fake(port: int, *names: str) -> list[str]:
    """A stand-in for vLLM's server on `port`, listing `names` (conductor_rl/testing/fake_vllm_server.py)."""
    return fake_vllm_server.command(port, *names)


def spec(**kw) -> ServeSpec:
    return ServeSpec(model="smollm2-135m", **kw)


def group_members(pgid: int) -> list[int]:
    """Live processes of process group `pgid`."""
    from conductor_rl.workers.process_guard import members

    return members(pgid)


def wait_gone(pgid: int, timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# --- the command line --------------------------------------------------------------------------


def test_engine_args_become_vllm_flags():
    flags = engine_flags(
        {
            "max_model_len": 2048,
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "kv_transfer_config": None,
            "reasoning_parser": "qwen3",
            "compilation_config": {"mode": 0},
            "allowed_origins": ["a", "b"],
            "--dtype": "float32",
        }
    )
    assert flags == [
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--reasoning-parser",
        "qwen3",
        "--compilation-config",
        '{"mode": 0}',
        "--allowed-origins",
        "a",
        "b",
        "--dtype",
        "float32",
    ]


@pytest.mark.parametrize("key", ["model", "served_model_name", "port", "host", "served-model-name"])
def test_engine_args_may_not_set_what_the_job_sets(key):
    with pytest.raises(ServedWorkerError, match="must not set"):
        engine_flags({key: "x"})


def test_the_command_serves_every_name_on_the_given_address():
    command = server_command(
        spec(engine_args={"dtype": "float32"}),
        ["qwen3", "qwen3-thinking"],
        "10.0.0.5",
        8123,
        python="/venv/bin/python",
        model_path="/models/m",
    )
    assert command[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    text = " ".join(command)
    assert "--model /models/m --served-model-name qwen3 qwen3-thinking --host 10.0.0.5 --port 8123" in text
    assert "--dtype float32" in text and "--disable-uvicorn-access-log" in text


def test_the_offline_model_name_is_resolved(monkeypatch):
    import conductor_rl.models as models

    monkeypatch.setattr(models, "resolve_model", lambda name: f"/cache/{name}")
    assert "/cache/smollm2-135m" in server_command(spec(), ["smol"], "127.0.0.1", 1)


def test_gpus_give_the_tensor_parallel_size_unless_set():
    assert engine_args_for(ServeSpec(model="m", gpus=2))["tensor_parallel_size"] == 2
    assert engine_args_for(ServeSpec(model="m", gpus=2, engine_args={"tensor-parallel-size": 1})) == {
        "disable_uvicorn_access_log": True,
        "tensor-parallel-size": 1,
    }
    assert "tensor_parallel_size" not in engine_args_for(ServeSpec(model="m", gpus=0.5))
    assert (
        engine_args_for(ServeSpec(model="m", engine_args={"disable_uvicorn_access_log": False}))[
            "disable_uvicorn_access_log"
        ]
        is False
    )


def test_the_server_environment_adds_serve_env_and_finds_the_guard():
    env = server_env(spec(env={"VLLM_CPU_KVCACHE_SPACE": "1"}), base={"PATH": "/bin", "PYTHONPATH": "/x"})
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["PATH"] == "/bin"
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/x"]


def test_the_server_gets_only_the_variables_it_needs_and_its_own_key():
    job = {
        "PATH": "/bin",
        "HF_HOME": "/hf",
        "CUDA_VISIBLE_DEVICES": "1",
        "OPENAI_API_KEY": "sk-job",
        "ANTHROPIC_API_KEY": "sk-ant",
        "CONDUCTOR_RL_SERVE_TOKENS": "me:tok",
        "VLLM_API_KEY": "inherited",
        "AWS_SECRET_ACCESS_KEY": "aws",
    }
    env = server_env(spec(), base=job, api_key="generated")
    assert {k: env[k] for k in ("PATH", "HF_HOME", "CUDA_VISIBLE_DEVICES")} == {
        "PATH": "/bin",
        "HF_HOME": "/hf",
        "CUDA_VISIBLE_DEVICES": "1",
    }
    assert env["VLLM_API_KEY"] == "generated"
    assert not {"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CONDUCTOR_RL_SERVE_TOKENS", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert "VLLM_API_KEY" not in server_env(spec(), base=job)  # never the job's own


def test_a_cpu_replica_runs_its_model_in_the_engine_process_unless_serve_env_says_otherwise():
    base = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}  # whatever the job's own environment holds
    assert server_env(spec(), base=base)["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert server_env(spec(env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}))["VLLM_ENABLE_V1_MULTIPROCESSING"] == "1"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in server_env(spec(gpus=1), base={})


# --- deployments -------------------------------------------------------------------------------


def served(name: str, model: str, **serve) -> WorkerConfig:
    return WorkerConfig(name=name, provider="openai_compatible", model=model, serve={"model": "m", **serve})


def test_identical_serve_sections_share_one_deployment():
    workers = [
        served("qwen", "Qwen3", gpus=1, engine_args={"a": 1, "b": 2}),
        WorkerConfig(name="sim", provider="sim", sim={"accuracy": {"default": 0.5}}),
        served("qwen-thinking", "Qwen3", gpus=1, engine_args={"b": 2, "a": 1}),  # same, keys reordered
        served("qwen-t1", "Qwen3-t1", gpus=1, engine_args={"a": 1, "b": 2}),
        served("other", "Other", gpus=1, replicas=2),
    ]
    deployments = group_deployments(workers)
    assert [(d.name, d.served_names, d.workers, d.replicas) for d in deployments] == [
        ("qwen", ("Qwen3", "Qwen3-t1"), (0, 2, 3), 1),
        ("other", ("Other",), (4,), 2),
    ]
    assert served_resources(workers) == {"CPU": 3.0, "GPU": 3.0}  # a shared deployment counts once


def test_an_output_budget_the_server_cannot_hold_is_refused_before_any_start():
    from conductor_rl.workers.serving import check_served_workers

    ok = served("a", "A", engine_args={"max_model_len": 2048}).model_copy(update={"max_tokens": 64})
    check_served_workers([ok, served("b", "B")])  # no max_model_len: the model's own
    with pytest.raises(ServedWorkerError, match=r"max_tokens=4096 .* max_model_len=1024.*workers\.1\.max_tokens"):
        check_served_workers([ok, served("c", "C", engine_args={"max-model-len": 1024})])


# --- starting, health, errors --------------------------------------------------------------------


def test_a_server_that_exits_at_once_fails_with_its_log_and_a_fix(tmp_path):
    command = [
        sys.executable,
        "-c",
        "import sys; print('loading weights'); "
        "print('error: unrecognized arguments: --bogus', file=sys.stderr); sys.exit(2)",
    ]
    server = ServerProcess("w", command, dict(os.environ), tmp_path / "w.log", "127.0.0.1", 1, ["m"]).start()
    with pytest.raises(ServedWorkerError) as err:
        server.wait_healthy(timeout_s=30)
    text = str(err.value)
    assert not isinstance(err.value, PortInUseError)
    assert "'w'" in text and "exited with code 2" in text and "unrecognized arguments: --bogus" in text
    assert "loading weights" in text and "Fix:" in text and "serve.engine_args" in text


def test_a_taken_port_is_its_own_error(tmp_path):
    command = [sys.executable, "-c", "import sys; print('OSError: [Errno 98] Address already in use'); sys.exit(1)"]
    server = ServerProcess("w", command, dict(os.environ), tmp_path / "w.log", "127.0.0.1", 1, ["m"]).start()
    with pytest.raises(PortInUseError, match="port was taken"):
        server.wait_healthy(timeout_s=30)


def test_a_server_that_never_answers_times_out_and_is_stopped(tmp_path):
    command = [sys.executable, "-c", "import time; print('still loading', flush=True); time.sleep(300)"]
    server = ServerProcess("slow", command, dict(os.environ), tmp_path / "s.log", "127.0.0.1", 9, ["m"]).start()
    started = time.monotonic()
    with pytest.raises(ServedWorkerError, match=r"start_timeout_s=1\.5 s") as err:
        server.wait_healthy(timeout_s=1.5, poll_s=0.2)
    assert time.monotonic() - started < 15
    assert "still loading" in str(err.value) and "raise workers.<i>.serve.start_timeout_s" in str(err.value)
    assert server.returncode is not None and not group_members(server.pgid)


def test_a_healthy_server_must_list_every_name(tmp_path):
    from conductor_rl.workers.serving import free_port

    port = free_port()
    server = ServerProcess(
        "w", fake(port, "a"), dict(os.environ), tmp_path / "w.log", "127.0.0.1", port, ["a", "b"]
    ).start()
    try:
        with pytest.raises(ServedWorkerError, match=r"lists \['a'\], not \['b'\]"):
            server.wait_healthy(timeout_s=1.5, poll_s=0.2)
    finally:
        server.stop()


def test_stop_ends_the_server_and_every_process_it_started(tmp_path):
    server, seconds = start_server(
        "w", spec(start_timeout_s=30), ["m"], "127.0.0.1", tmp_path, command_for=lambda port: fake(port, "m")
    )
    assert seconds < 30 and server.base_url == f"http://127.0.0.1:{server.port}/v1"
    with urllib.request.urlopen(f"{server.root_url}/v1/models", timeout=5) as r:
        assert json.load(r)["data"] == [{"id": "m"}]
    time.sleep(0.3)  # the fake's engine child is running by now
    found = group_members(server.pgid)
    assert len(found) >= 3, found  # guard, server, its child
    server.stop(grace_s=2)
    assert not wait_gone(server.pgid, 5)


def test_a_taken_port_is_retried_on_another(tmp_path):
    calls, retries = [], []

    def command_for(port: int) -> list[str]:
        calls.append(port)
        if len(calls) == 1:
            return [sys.executable, "-c", "print('OSError: [Errno 98] Address already in use')"]
        return fake(port, "m")

    server, _ = start_server(
        "w", spec(start_timeout_s=30), ["m"], "127.0.0.1", tmp_path, command_for=command_for, on_retry=retries.append
    )
    try:
        assert len(calls) == 2 and server.port == calls[1] and "port" in retries[0]
    finally:
        server.stop(grace_s=2)


def test_a_killed_guard_takes_its_server_along(tmp_path):
    """Ray SIGKILLs an exiting worker's direct children; the guard is none (it is detached), and if it
    is killed all the same, its server gets SIGTERM from the kernel and stops its engine processes."""
    server, _ = start_server(
        "w", spec(start_timeout_s=30), ["m"], "127.0.0.1", tmp_path, command_for=lambda port: fake(port, "m")
    )
    try:
        time.sleep(0.3)
        assert os.getpid() not in {
            int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            for pid in group_members(server.pgid)
        }  # no process of the group is our child
        [guard] = [
            pid for pid in group_members(server.pgid) if b"process_guard" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        os.kill(guard, signal.SIGKILL)
        assert not wait_gone(server.pgid, 10)
    finally:
        server.stop(grace_s=1)


def test_the_server_dies_with_the_process_that_started_it(tmp_path):
    """The actor's death (ray.kill is SIGKILL: no code of the actor runs) takes the server's whole group."""
    parent = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from conductor_rl.config import ServeSpec
        from conductor_rl.workers.serving import start_server
        from conductor_rl.testing.fake_vllm_server import command
        command_for = lambda p: command(p, "m")
        server, _ = start_server("w", ServeSpec(model="m", start_timeout_s=30), ["m"], "127.0.0.1",
                                 Path({str(tmp_path)!r}), command_for=command_for)
        print(server.pgid, flush=True)
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        guard = int(proc.stdout.readline())  # the server's process group
        time.sleep(0.3)
        assert len(group_members(guard)) >= 3
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert not wait_gone(guard, 15)
    finally:
        proc.kill()


@pytest.mark.slow
def test_gemma3_loads_offline_with_its_bos_and_a_question_answer_template():
    from transformers import AutoTokenizer

    from conductor_rl.models import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("gemma3-270m"))
    assert tokenizer("Paris").input_ids[0] == tokenizer.bos_token_id  # Gemma writes nonsense without it
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 3?"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text == "<bos>Be brief.\n\nQuestion: What is 2 + 3?\nAnswer:"


# --- real vLLM, on Ray ---------------------------------------------------------------------------


def vllm_counters(base_url: str) -> dict[str, float]:
    """vLLM's own Prometheus counters of prompt and generated tokens."""
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/metrics", timeout=10) as r:
        text = r.read().decode()
    found = {}
    for name in ("prompt_tokens", "generation_tokens"):
        values = re.findall(rf"^vllm:{name}_total\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M)
        found[name] = sum(float(v) for v in values)
    return found


@pytest.mark.slow
def test_a_plan_runs_on_the_served_pool_of_local_real_and_the_ledger_matches_the_servers(ray_cluster):
    """configs/local-real.yaml's pool as the training job builds it (jobs/training_system.py): its two
    SmolLM2 workers share one deployment (two names per server), here of two replicas, and Gemma 3
    (GGUF) has its own. The pools spread their calls over both SmolLM2 servers, the ledger holds exactly
    what the servers counted, a replica's actor killed with SIGKILL takes its server's whole process group
    along, and the pools' shutdown leaves no server behind. (The whole job on this pool, an iteration with
    its learner step and weight sync: benchmarks/served_worker.py --train.)"""
    import ray

    from conductor_rl.config import load_config
    from conductor_rl.plan import parse_plan
    from conductor_rl.rollout.workflow import StepLimits, Task, run_plan
    from conductor_rl.workers.providers import WorkerRequest
    from jobs.training_system import start_worker_pools

    config = load_config(
        ROOT / "configs" / "local-real.yaml", ["workers.0.serve.replicas=2", "workers.1.serve.replicas=2"]
    )
    system = start_worker_pools(config, None, checked=True)
    served, pools, ledger = system.served, system.pools, system.ledger
    try:
        assert served is not None and len(served.replicas) == 2  # SmolLM2 (both names), Gemma
        infos = served.replicas[0] + served.replicas[1]
        urls = [info["base_url"] for info in infos]
        smollm2 = urls[:2]
        assert len(set(urls)) == 3 and served.urls == [smollm2, smollm2, urls[2:]]
        assert all(info["seconds"] < 600 for info in infos)
        before = [vllm_counters(u) for u in urls]
        with pytest.raises(urllib.error.HTTPError) as refused:  # the server listens on the node's address
            urllib.request.urlopen(f"{urls[0]}/models", timeout=10)
        assert refused.value.code == 401  # and requires the key the job generated for it
        assert [len(p.replicas) for p in pools] == [2, 2, 1]  # 1 asked, 2 servers: 2 WorkerActors each
        plan = parse_plan(
            'model_id = [0, 1, 2]\nsubtasks = ["What is 2 + 3?", "Check the answer.", "What is 2 + 3?"]\n'
            "access_list = [[], [0], []]",
            3,
        )
        limits = StepLimits(max_tokens=24, temperature=0.0, timeout_s=300)

        async def go():
            result = await run_plan(plan, Task(id="t", question="What is 2 + 3?"), pools, limits)
            request = WorkerRequest([{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0.0)
            await asyncio.gather(*(pools[0].complete(request) for _ in range(8)))
            return result

        result = asyncio.run(go())
        assert result.error is None, result.error
        assert all(s.response and s.usage.output_tokens > 0 for s in result.steps)
        entries = ray.get(ledger.entries.remote())
        names = [w.name for w in config.workers]
        assert sorted(e.worker for e in entries) == sorted([names[0]] * 9 + names[1:])
        [second] = [e for e in entries if e.worker == names[1]]
        assert (second.usage.input_tokens, second.usage.output_tokens) == (
            result.steps[1].usage.input_tokens,
            result.steps[1].usage.output_tokens,
        )
        # The ledger holds what the servers reported in each response's usage, and that is what vLLM
        # itself counted, over every server; each SmolLM2 server answered.
        after = [vllm_counters(u) for u in urls]
        for name, field in (("prompt_tokens", "input_tokens"), ("generation_tokens", "output_tokens")):
            counted = sum(a[name] - b[name] for a, b in zip(after, before))
            assert counted == sum(getattr(e.usage, field) for e in entries), name
        assert all(a["generation_tokens"] > b["generation_tokens"] for a, b in zip(after, before)), (before, after)

        # ray.kill is SIGKILL for the actor: the guard still ends the server's whole group.
        guard = infos[0]["pgid"]
        assert len(group_members(guard)) >= 3  # guard, API server, engine core
        ray.kill(served.actors[0][0])
        assert not wait_gone(guard, 30), "vLLM processes outlived their actor"
    finally:
        system.shutdown()  # as the job ends: every pool, the ledger and the servers
    for info in infos:
        assert not wait_gone(info["pgid"], 30), "a vLLM server outlived the pools' shutdown"


def test_the_served_training_benchmark_reads_the_jobs_servers_and_finds_one_left_behind(tmp_path):
    """benchmarks/served_worker.py --train (the end-to-end run of configs/local-real.yaml) judges the job by
    its "served ... in N s" lines and by the vLLM servers still listening on their ports."""
    from tests.benchmark_scripts import load_benchmark

    bench = load_benchmark("served_worker")
    stderr = (
        "starting served worker smollm2-precise ...\n"
        "served smollm2-precise at http://10.0.0.5:41234/v1 in 37 s\n"
        "served gemma3-270m-base at http://10.0.0.5:41240/v1 in 52 s\n"
    )
    assert bench.served_servers(stderr) == {
        "smollm2-precise": {"port": 41234, "start_s": 37},
        "gemma3-270m-base": {"port": 41240, "start_s": 52},
    }
    # A process whose command line is a vLLM server's on a watched port is found; one on another port not.
    script = tmp_path / "vllm.entrypoints.py"
    script.write_text("import time; time.sleep(60)")
    proc = subprocess.Popen([sys.executable, str(script), "--port", "41234", "--host", "x"])
    try:
        deadline = time.monotonic() + 10
        while proc.pid not in bench.vllm_servers_on([41234]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.pid in bench.vllm_servers_on([41234]) and proc.pid not in bench.vllm_servers_on([41240])
    finally:
        proc.kill()
        proc.wait()
